/* main.c: the `weft` command: a table of subcommands, each a function in
 * trainer/ (or, for the roles added later, their own modules). Only main
 * turns a status into the process exit code (docs/promises.md). */
#include "common/error.h"
#include "common/h5.h"
#include "common/log.h"
#include "trainer/bench_cluster.h"
#include "trainer/cmd_keygen.h"
#include "trainer/cmd_membership.h"
#include "trainer/cmd_model.h"
#include "trainer/cmd_tfconfig.h"
#include "trainer/commands.h"
#include "trainer/config.h"
#include "trainer/launch.h"
#include "trainer/role.h"
#include "trainer/export.h"

#include <stdio.h>
#include <string.h>

typedef struct command {
	const char *name;
	int (*run)(int argc, char **argv, wf_err *err); /* NULL: not in this build yet */
	const char *summary;
} command;

static const command commands[] = {
	{"train", wf_cmd_train,
	 "train from a config file (alone, or as its TF_CONFIG or mpirun role)"},
	{"eval", wf_cmd_eval, "loss and accuracy of a model file on a dataset"},
	{"data", wf_cmd_data, "make dataset files (synth, cifar10, images)"},
	{"inspect", wf_cmd_inspect, "describe or dump a model file"},
	{"launch", wf_cmd_launch, "start a local cluster of parameter servers and workers"},
	{"membership", wf_cmd_membership,
	 "run the membership service of elastic allreduce (a pod of its own)"},
	{"bench", wf_cmd_bench, "benchmarks: `weft bench cluster`, an emulated cluster"},
	{"ps", wf_cmd_ps, "run a parameter server (the ps task of TF_CONFIG)"},
	{"tfconfig", wf_cmd_tfconfig, "print this process's cluster identity (TF_CONFIG)"},
	{"keygen", wf_cmd_keygen, "make the CURVE key files of a parameter-server cluster"},
	{"export", wf_cmd_export, "write a serving model version (batch norm folded)"},
	{"import-keras", wf_cmd_import_keras, "convert a Keras .h5 model to a weft model file"},
	{"summary", wf_cmd_summary, "layers, output shapes and parameter counts of a model"},
	{"version", wf_cmd_version, "print the version and built-in backends"},
};

static void usage(FILE *out)
{
	fprintf(out, "usage: weft <command> [options]\n\ncommands:\n");
	for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
		fprintf(out, "  %-13s %s%s\n", commands[i].name, commands[i].summary,
			commands[i].run ? "" : " (not available yet)");
	fprintf(out, "\n`weft <command> --help` documents each command's flags.\n"
		     "Exit codes: 0 success, 1-127 permanent error, 130 stopped by a signal,\n"
		     "138 transient error (a restart may help).\n");
}

int main(int argc, char **argv)
{
	wf_err err = {0};
	wf_config_openmp_wait(argv); /* may re-execute this program once */
	wf_h5_quiet_process();	     /* errors are reported through wf_err */
	if (argc < 2) {
		usage(stderr);
		return wf_exit_status(WF_EINVAL);
	}
	if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ||
	    strcmp(argv[1], "help") == 0) {
		usage(stdout);
		return 0;
	}
	if (strcmp(argv[1], "--version") == 0)
		argv[1] = "version";
	const command *cmd = NULL;
	for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
		if (strcmp(argv[1], commands[i].name) == 0)
			cmd = &commands[i];
	int rc;
	if (!cmd)
		rc = wf_errf(&err, WF_EINVAL, "unknown command '%s' (see weft --help)", argv[1]);
	else if (!cmd->run)
		rc = wf_errf(&err, WF_ENOTSUP, "%s: not available in this build yet", cmd->name);
	else {
		wf_config env; /* settings from the environment, for every command */
		wf_config_from_env(&env);
		wf_config_apply_process(&env);
		rc = cmd->run(argc - 1, argv + 1, &err);
	}
	if (rc == 1) /* --help printed */
		return 0;
	if (rc != 0) {
		if (rc == WF_ESTOPPED)
			fprintf(stderr, "weft: stopped\n");
		else
			fprintf(stderr, "weft: error: %s\n",
				err.msg[0] ? err.msg : wf_strerror(rc));
	}
	return wf_exit_status(rc);
}
