/* flags.h: table-driven flag parsing for weft's programs (the `weft`
 * subcommands, weft-serve, weft-bench): a table of flags per command,
 * `--name value` or `--name=value`, generated --help text, and errors that
 * name the unknown or malformed flag. */
#ifndef WF_FLAGS_H
#define WF_FLAGS_H

#include "common/error.h"

#include <stdio.h>

typedef enum {
	WF_FLAG_BOOL,	/* present = 1 */
	WF_FLAG_STR,	/* const char * */
	WF_FLAG_INT,	/* long */
	WF_FLAG_LIST,	/* wf_cli_list: repeatable string */
	WF_FLAG_DOUBLE, /* double */
	WF_FLAG_TOGGLE, /* int: present = 1, or --name=true|false|1|0 (TF Serving's bools),
			 * or --name true|false (Triton's) */
} wf_flag_kind;

typedef struct wf_cli_list {
	const char **items;
	int n;
} wf_cli_list;

typedef struct wf_flag {
	const char *name; /* without the dashes: "config"; other spellings after '|':
			   * "rest_api_port|http-port" */
	wf_flag_kind kind;
	void *dst;	     /* int*, const char**, long*, wf_cli_list*, double*; NULL:
			      * accepted (its value too) and ignored */
	const char *metavar; /* "FILE" */
	const char *help;    /* NULL: accepted but not listed in --help */
} wf_flag;

typedef struct wf_command_help {
	const char *usage;   /* "weft train --config FILE [options]" */
	const char *summary; /* a paragraph */
} wf_command_help;

/* Parse argv[1..argc) (argv[0] is the command name). Positional arguments are
 * collected into pos (argv pointers; up to max_pos, more is an error naming
 * the first extra). Returns 0, 1 when --help was printed (to stdout), or
 * WF_EINVAL naming the flag. pos->items is malloc'd (free it). */
int wf_cli_parse(const wf_command_help *help, const wf_flag *flags, int argc, char **argv,
		 wf_cli_list *pos, int max_pos, wf_err *err);
void wf_cli_print_help(FILE *out, const wf_command_help *help, const wf_flag *flags);
void wf_cli_list_free(wf_cli_list *l);

#endif
