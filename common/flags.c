#include "common/flags.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

void wf_cli_list_free(wf_cli_list *l)
{
	if (l) {
		free(l->items);
		l->items = NULL;
		l->n = 0;
	}
}

static int list_push(wf_cli_list *l, const char *s, wf_err *err)
{
	const char **n = realloc(l->items, (size_t)(l->n + 1) * sizeof(*n));
	if (!n)
		return wf_errf(err, WF_ENOMEM, "out of memory");
	l->items = n;
	l->items[l->n++] = s;
	return 0;
}

/* Whether name[0..len) is one of the '|'-separated spellings. */
static int spelled(const char *names, const char *name, size_t len)
{
	for (const char *a = names; *a;) {
		size_t n = strcspn(a, "|");
		if (n == len && strncmp(a, name, len) == 0)
			return 1;
		a += n + (a[n] == '|');
	}
	return 0;
}

/* "  <left>  <text>" with text word-wrapped at 100 columns under itself. */
static void print_wrapped(FILE *out, const char *left, const char *text)
{
	const int indent = 29, width = 100;
	int col = fprintf(out, "  %-26s ", left);
	if (col > indent) {
		fprintf(out, "\n%*s", indent, "");
		col = indent;
	}
	while (*text) {
		size_t w = strcspn(text, " ");
		if (col > indent && col + 1 + (int)w > width) {
			fprintf(out, "\n%*s", indent, "");
			col = indent;
		}
		if (col > indent)
			col += fprintf(out, " ");
		col += fprintf(out, "%.*s", (int)w, text);
		text += w;
		while (*text == ' ')
			text++;
	}
	fputc('\n', out);
}

void wf_cli_print_help(FILE *out, const wf_command_help *help, const wf_flag *flags)
{
	fprintf(out, "usage: %s\n\n%s\n\noptions:\n", help->usage, help->summary);
	for (const wf_flag *f = flags; f && f->name; f++) {
		if (!f->help)
			continue;
		char left[160];
		int n = 0;
		for (const char *a = f->name; *a && n < (int)sizeof(left) - 8;) {
			size_t len = strcspn(a, "|");
			n += snprintf(left + n, sizeof(left) - (size_t)n, "%s--%.*s", n ? ", " : "",
				      (int)len, a);
			a += len + (a[len] == '|');
		}
		if (f->kind == WF_FLAG_TOGGLE)
			snprintf(left + n, sizeof(left) - (size_t)n, "[=true|false]");
		else if (f->kind != WF_FLAG_BOOL)
			snprintf(left + n, sizeof(left) - (size_t)n, " %s", f->metavar);
		print_wrapped(out, left, f->help);
	}
	fprintf(out, "  %-26s %s\n", "--help", "show this help");
}

int wf_cli_parse(const wf_command_help *help, const wf_flag *flags, int argc, char **argv,
		 wf_cli_list *pos, int max_pos, wf_err *err)
{
	const char *cmd = argv[0];
	pos->items = NULL;
	pos->n = 0;
	int only_pos = 0;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		if (only_pos || a[0] != '-' || a[1] == '\0') {
			if (pos->n >= max_pos)
				return wf_errf(err, WF_EINVAL,
					       "%s: unexpected argument '%s' (see --help)", cmd, a);
			if (list_push(pos, a, err) != 0)
				return WF_ENOMEM;
			continue;
		}
		if (strcmp(a, "--") == 0) {
			only_pos = 1;
			continue;
		}
		if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
			wf_cli_print_help(stdout, help, flags);
			return 1;
		}
		if (a[1] != '-')
			return wf_errf(err, WF_EINVAL, "%s: unknown flag '%s' (see --help)", cmd,
				       a);
		const char *name = a + 2, *eq = strchr(name, '=');
		size_t len = eq ? (size_t)(eq - name) : strlen(name);
		const wf_flag *f = flags;
		while (f && f->name && !spelled(f->name, name, len))
			f++;
		if (!f || !f->name)
			return wf_errf(err, WF_EINVAL, "%s: unknown flag '--%.*s' (see --help)",
				       cmd, (int)len, name);
		if (f->kind == WF_FLAG_TOGGLE) {
			/* --name=V, or --name V when V is true or false (Triton's
			 * getopt form, --allow-grpc false) */
			const char *tv = eq ? eq + 1 : NULL;
			if (!tv && i + 1 < argc &&
			    (!strcmp(argv[i + 1], "true") || !strcmp(argv[i + 1], "false")))
				tv = argv[++i];
			int v = 1;
			if (tv && (!strcmp(tv, "false") || !strcmp(tv, "0")))
				v = 0;
			else if (tv && strcmp(tv, "true") && strcmp(tv, "1"))
				return wf_errf(err, WF_EINVAL,
					       "%s: flag --%.*s: '%s' is not true or false", cmd,
					       (int)len, name, tv);
			if (f->dst)
				*(int *)f->dst = v;
			continue;
		}
		if (f->kind == WF_FLAG_BOOL) {
			if (eq)
				return wf_errf(err, WF_EINVAL, "%s: flag --%.*s takes no value",
					       cmd, (int)len, name);
			if (f->dst)
				*(int *)f->dst = 1;
			continue;
		}
		const char *val = eq ? eq + 1 : NULL;
		if (!val) {
			if (i + 1 >= argc)
				return wf_errf(err, WF_EINVAL, "%s: flag --%.*s needs a value (%s)",
					       cmd, (int)len, name, f->metavar);
			val = argv[++i];
		}
		if (!f->dst) {
			continue; /* accepted and ignored */
		} else if (f->kind == WF_FLAG_STR) {
			*(const char **)f->dst = val;
		} else if (f->kind == WF_FLAG_LIST) {
			if (list_push(f->dst, val, err) != 0)
				return WF_ENOMEM;
		} else if (f->kind == WF_FLAG_DOUBLE) {
			char *end;
			errno = 0;
			double v = strtod(val, &end);
			if (!*val || *end || errno || v != v)
				return wf_errf(err, WF_EINVAL,
					       "%s: flag --%.*s: expected a number, got '%s'", cmd,
					       (int)len, name, val);
			*(double *)f->dst = v;
		} else {
			char *end;
			errno = 0;
			long v = strtol(val, &end, 10);
			if (!*val || *end || errno)
				return wf_errf(err, WF_EINVAL,
					       "%s: flag --%.*s: expected an integer, got '%s'",
					       cmd, (int)len, name, val);
			*(long *)f->dst = v;
		}
	}
	return 0;
}
