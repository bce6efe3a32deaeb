/* commands.h: the `weft` subcommands. Each takes argv with argv[0] = the
 * command name ("train"), prints its own --help, and returns 0 or a negative
 * WF_E* code with err filled; main() turns that into the exit status.
 * 1 from a command means "--help printed" (exit 0). */
#ifndef WF_COMMANDS_H
#define WF_COMMANDS_H

#include "common/error.h"

int wf_cmd_train(int argc, char **argv, wf_err *err);
int wf_cmd_eval(int argc, char **argv, wf_err *err);
int wf_cmd_data(int argc, char **argv, wf_err *err);
int wf_cmd_inspect(int argc, char **argv, wf_err *err);
int wf_cmd_version(int argc, char **argv, wf_err *err);

#endif
