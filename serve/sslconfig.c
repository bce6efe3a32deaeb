/* sslconfig.c: the SSLConfig text format (see sslconfig.h). */
#include "serve/sslconfig.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct lexer {
	const char *p, *end;
	int line;
} lexer;

/* Skip blanks, newlines, '#' comments and the optional ',' / ';' separators. */
static void skip(lexer *l)
{
	while (l->p < l->end) {
		char c = *l->p;
		if (c == '\n') {
			l->line++;
			l->p++;
		} else if (c == ' ' || c == '\t' || c == '\r' || c == ',' || c == ';') {
			l->p++;
		} else if (c == '#') {
			while (l->p < l->end && *l->p != '\n')
				l->p++;
		} else {
			break;
		}
	}
}

static int is_ident(char c, int first)
{
	return c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
	       (!first && c >= '0' && c <= '9');
}

static int hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

/* One or more adjacent string literals into a malloc'd string (*out). */
static int string_value(lexer *l, const char *field, char **out, wf_err *err)
{
	size_t cap = (size_t)(l->end - l->p) + 1, n = 0;
	char *s = malloc(cap);
	if (!s)
		return wf_errf(err, WF_ENOMEM, "out of memory for field %s", field);
	int literals = 0;
	for (;;) {
		skip(l);
		if (l->p >= l->end || (*l->p != '"' && *l->p != '\''))
			break;
		char q = *l->p++;
		literals++;
		for (;;) {
			if (l->p >= l->end) {
				free(s);
				return wf_errf(err, WF_EINVAL,
					       "line %d: field %s: the string is not closed",
					       l->line, field);
			}
			char c = *l->p++;
			if (c == q)
				break;
			if (c == '\n')
				l->line++;
			if (c != '\\') {
				s[n++] = c;
				continue;
			}
			if (l->p >= l->end)
				continue; /* reported as not closed */
			char e = *l->p++;
			const char *simple = "n\nt\tr\r\\\\\"\"''a\ab\bf\fv\v??";
			const char *m = NULL;
			for (const char *t = simple; *t; t += 2)
				if (*t == e) {
					m = t;
					break;
				}
			if (m) {
				s[n++] = m[1];
			} else if (e >= '0' && e <= '7') {
				int v = e - '0';
				for (int k = 0;
				     k < 2 && l->p < l->end && *l->p >= '0' && *l->p <= '7'; k++)
					v = v * 8 + (*l->p++ - '0');
				s[n++] = (char)v;
			} else if (e == 'x' && l->p < l->end && hexval(*l->p) >= 0) {
				int v = hexval(*l->p++);
				if (l->p < l->end && hexval(*l->p) >= 0)
					v = v * 16 + hexval(*l->p++);
				s[n++] = (char)v;
			} else {
				free(s);
				return wf_errf(err, WF_EINVAL,
					       "line %d: field %s: unknown escape \\%c", l->line,
					       field, e);
			}
		}
	}
	if (!literals) {
		free(s);
		return wf_errf(err, WF_EINVAL, "line %d: field %s needs a quoted string", l->line,
			       field);
	}
	if (memchr(s, 0, n)) {
		free(s);
		return wf_errf(err, WF_EINVAL, "line %d: field %s holds a NUL byte", l->line,
			       field);
	}
	s[n] = 0;
	*out = s;
	return 0;
}

static int bool_value(lexer *l, int *out, wf_err *err)
{
	static const char *const yes[] = {"true", "True", "t", "1"};
	static const char *const no[] = {"false", "False", "f", "0"};
	skip(l);
	const char *s = l->p;
	while (l->p < l->end && is_ident(*l->p, 0))
		l->p++;
	size_t n = (size_t)(l->p - s);
	for (int i = 0; i < 4; i++) {
		if (n == strlen(yes[i]) && !memcmp(s, yes[i], n)) {
			*out = 1;
			return 0;
		}
		if (n == strlen(no[i]) && !memcmp(s, no[i], n)) {
			*out = 0;
			return 0;
		}
	}
	return wf_errf(err, WF_EINVAL, "line %d: field client_verify must be true or false",
		       l->line);
}

int wf_serve_ssl_config_parse(const char *text, size_t len, wf_serve_ssl_config *out, wf_err *err)
{
	lexer l = {text, text + len, 1};
	int seen_verify = 0, rc = 0;
	memset(out, 0, sizeof(*out));
	for (;;) {
		skip(&l);
		if (l.p >= l.end)
			break;
		const char *name = l.p;
		while (l.p < l.end && is_ident(*l.p, l.p == name))
			l.p++;
		size_t n = (size_t)(l.p - name);
		if (n == 0) {
			rc = wf_errf(err, WF_EINVAL, "line %d: expected a field name, found '%c'",
				     l.line, *l.p);
			break;
		}
		char field[32];
		snprintf(field, sizeof(field), "%.*s", (int)(n < 31 ? n : 31), name);
		skip(&l);
		if (l.p >= l.end || *l.p != ':') {
			rc = wf_errf(err, WF_EINVAL, "line %d: expected ':' after field %s", l.line,
				     field);
			break;
		}
		l.p++;
		char **slot = NULL;
		if (n == 10 && !memcmp(name, "server_key", n))
			slot = &out->server_key;
		else if (n == 11 && !memcmp(name, "server_cert", n))
			slot = &out->server_cert;
		else if (n == 9 && !memcmp(name, "custom_ca", n))
			slot = &out->custom_ca;
		if (slot) {
			if (*slot) {
				rc = wf_errf(err, WF_EINVAL, "line %d: field %s given twice",
					     l.line, field);
				break;
			}
			rc = string_value(&l, field, slot, err);
		} else if (n == 13 && !memcmp(name, "client_verify", n)) {
			if (seen_verify++) {
				rc = wf_errf(err, WF_EINVAL, "line %d: field %s given twice",
					     l.line, field);
				break;
			}
			rc = bool_value(&l, &out->client_verify, err);
		} else {
			rc = wf_errf(err, WF_EINVAL,
				     "line %d: unknown field %s (SSLConfig has server_key, "
				     "server_cert, custom_ca, client_verify)",
				     l.line, field);
		}
		if (rc)
			break;
	}
	if (rc)
		wf_serve_ssl_config_free(out);
	return rc;
}

void wf_serve_ssl_config_free(wf_serve_ssl_config *c)
{
	if (!c)
		return;
	free(c->server_key);
	free(c->server_cert);
	free(c->custom_ca);
	memset(c, 0, sizeof(*c));
}
