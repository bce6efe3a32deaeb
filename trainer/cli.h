/* cli.h: the `weft` subcommands' flag parser is common/flags.h (shared with
 * weft-serve and weft-bench). */
#ifndef WF_CLI_H
#define WF_CLI_H

#include "common/flags.h"

#endif
