/* modelconfig.c: a small protobuf text-format reader (fields, nested
 * messages, [lists], strings, numbers, enum names, # comments) building a
 * tree, and the two schemas read from it. */
#include "serve/modelconfig.h"

#include <ctype.h>
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_DEPTH 32
#define MAX_NODES 100000

/* ---- the tree ---------------------------------------------------------- */

typedef struct tnode {
	char *key;
	char *value; /* scalar (strings unquoted); NULL for a message */
	int is_string;
	int line;
	struct tnode *kids; /* message fields, in order */
	int nkids, cap;
} tnode;

typedef struct lexer {
	const char *s, *end;
	int line;
	int nodes;
	wf_err *err;
} lexer;

static void tnode_clear(tnode *t)
{
	for (int i = 0; i < t->nkids; i++)
		tnode_clear(&t->kids[i]);
	free(t->kids);
	free(t->key);
	free(t->value);
}

static void skip_space(lexer *L)
{
	while (L->s < L->end) {
		char c = *L->s;
		if (c == '\n') {
			L->line++;
			L->s++;
		} else if (c == ' ' || c == '\t' || c == '\r' || c == ',' || c == ';') {
			L->s++;
		} else if (c == '#') {
			while (L->s < L->end && *L->s != '\n')
				L->s++;
		} else {
			break;
		}
	}
}

static tnode *add_kid(lexer *L, tnode *parent, const char *key, size_t klen)
{
	if (++L->nodes > MAX_NODES) {
		wf_errf(L->err, WF_EINVAL, "line %d: more than %d fields", L->line, MAX_NODES);
		return NULL;
	}
	if (parent->nkids == parent->cap) {
		int cap = parent->cap ? parent->cap * 2 : 4;
		tnode *k = realloc(parent->kids, (size_t)cap * sizeof(*k));
		if (!k) {
			wf_errf(L->err, WF_ENOMEM, "out of memory");
			return NULL;
		}
		parent->kids = k;
		parent->cap = cap;
	}
	tnode *t = &parent->kids[parent->nkids++];
	memset(t, 0, sizeof(*t));
	t->line = L->line;
	t->key = strndup(key, klen);
	if (!t->key) {
		wf_errf(L->err, WF_ENOMEM, "out of memory");
		return NULL;
	}
	return t;
}

static int parse_message(lexer *L, tnode *msg, char close, int depth);

/* A scalar at L->s into t->value. */
static int parse_scalar(lexer *L, tnode *t)
{
	if (L->s >= L->end)
		return wf_errf(L->err, WF_EINVAL, "line %d: field \"%s\" has no value", L->line,
			       t->key);
	char q = *L->s;
	if (q == '"' || q == '\'') {
		const char *p = ++L->s;
		char *buf = malloc((size_t)(L->end - p) + 1);
		size_t n = 0;
		if (!buf)
			return wf_errf(L->err, WF_ENOMEM, "out of memory");
		while (p < L->end && *p != q) {
			if (*p == '\n') {
				free(buf);
				return wf_errf(L->err, WF_EINVAL,
					       "line %d: unterminated string in field \"%s\"",
					       L->line, t->key);
			}
			if (*p == '\\' && p + 1 < L->end) {
				p++;
				buf[n++] = *p == 'n' ? '\n' : *p == 't' ? '\t' : *p;
			} else {
				buf[n++] = *p;
			}
			p++;
		}
		if (p >= L->end) {
			free(buf);
			return wf_errf(L->err, WF_EINVAL,
				       "line %d: unterminated string in field \"%s\"", L->line,
				       t->key);
		}
		buf[n] = 0;
		L->s = p + 1;
		free(t->value);
		t->value = buf;
		t->is_string = 1;
		/* adjacent string literals concatenate */
		skip_space(L);
		if (L->s < L->end && (*L->s == '"' || *L->s == '\'')) {
			char *first = t->value;
			t->value = NULL;
			int rc = parse_scalar(L, t);
			if (rc) {
				free(first);
				return rc;
			}
			char *joined = malloc(strlen(first) + strlen(t->value) + 1);
			if (!joined) {
				free(first);
				return wf_errf(L->err, WF_ENOMEM, "out of memory");
			}
			strcpy(joined, first);
			strcat(joined, t->value);
			free(first);
			free(t->value);
			t->value = joined;
		}
		return 0;
	}
	const char *p = L->s;
	while (p < L->end &&
	       (isalnum((unsigned char)*p) || *p == '_' || *p == '-' || *p == '+' || *p == '.'))
		p++;
	if (p == L->s)
		return wf_errf(L->err, WF_EINVAL, "line %d: field \"%s\": unexpected '%c'", L->line,
			       t->key, *L->s);
	t->value = strndup(L->s, (size_t)(p - L->s));
	if (!t->value)
		return wf_errf(L->err, WF_ENOMEM, "out of memory");
	L->s = p;
	return 0;
}

/* The value(s) of field `key` (after an optional ':'); lists add one kid each. */
static int parse_field(lexer *L, tnode *msg, const char *key, size_t klen, int depth)
{
	skip_space(L);
	int colon = 0;
	if (L->s < L->end && *L->s == ':') {
		colon = 1;
		L->s++;
		skip_space(L);
	}
	if (L->s >= L->end)
		return wf_errf(L->err, WF_EINVAL, "line %d: field \"%.*s\" has no value", L->line,
			       (int)klen, key);
	if (*L->s == '[') {
		L->s++;
		for (;;) {
			skip_space(L);
			if (L->s >= L->end)
				return wf_errf(L->err, WF_EINVAL, "line %d: unterminated [ list",
					       L->line);
			if (*L->s == ']') {
				L->s++;
				return 0;
			}
			tnode *t = add_kid(L, msg, key, klen);
			if (!t)
				return L->err->code;
			int rc;
			if (*L->s == '{' || *L->s == '<') {
				char close = *L->s == '{' ? '}' : '>';
				L->s++;
				rc = parse_message(L, t, close, depth + 1);
			} else {
				rc = parse_scalar(L, t);
			}
			if (rc)
				return rc;
		}
	}
	tnode *t = add_kid(L, msg, key, klen);
	if (!t)
		return L->err->code;
	if (*L->s == '{' || *L->s == '<') {
		char close = *L->s == '{' ? '}' : '>';
		L->s++;
		return parse_message(L, t, close, depth + 1);
	}
	if (!colon)
		return wf_errf(L->err, WF_EINVAL, "line %d: expected ':' or '{' after \"%s\"",
			       L->line, t->key);
	return parse_scalar(L, t);
}

/* Fields until `close` (0: end of input). */
static int parse_message(lexer *L, tnode *msg, char close, int depth)
{
	if (depth > MAX_DEPTH)
		return wf_errf(L->err, WF_EINVAL, "line %d: messages nested deeper than %d",
			       L->line, MAX_DEPTH);
	for (;;) {
		skip_space(L);
		if (L->s >= L->end) {
			if (close)
				return wf_errf(L->err, WF_EINVAL, "line %d: missing '%c'", L->line,
					       close);
			return 0;
		}
		if (*L->s == close) {
			L->s++;
			return 0;
		}
		const char *k = L->s;
		while (L->s < L->end && (isalnum((unsigned char)*L->s) || *L->s == '_' ||
					 *L->s == '.' || *L->s == '/'))
			L->s++;
		if (L->s == k)
			return wf_errf(L->err, WF_EINVAL,
				       "line %d: expected a field name, got '%c'", L->line, *k);
		int rc = parse_field(L, msg, k, (size_t)(L->s - k), depth);
		if (rc)
			return rc;
	}
}

static int parse_text(const char *text, size_t len, tnode *root, wf_err *err)
{
	lexer L = {.s = text, .end = text + len, .line = 1, .err = err};
	memset(root, 0, sizeof(*root));
	int rc = parse_message(&L, root, 0, 0);
	if (rc)
		tnode_clear(root);
	return rc;
}

/* ---- reading fields ------------------------------------------------------ */

static int is_msg(const tnode *t)
{
	return t->value == NULL;
}

static int get_long(const tnode *t, long lo, long hi, long *out, wf_err *err)
{
	char *end;
	if (!t->value || t->is_string)
		return wf_errf(err, WF_EINVAL, "line %d: field \"%s\" must be a number", t->line,
			       t->key);
	errno = 0;
	long x = strtol(t->value, &end, 10);
	if (errno || *end || end == t->value || x < lo || x > hi)
		return wf_errf(err, WF_EINVAL,
			       "line %d: field \"%s\": \"%s\" is not an integer in "
			       "[%ld, %ld]",
			       t->line, t->key, t->value, lo, hi);
	*out = x;
	return 0;
}

static int get_str(const tnode *t, char *dst, size_t cap, wf_err *err)
{
	if (!t->value)
		return wf_errf(err, WF_EINVAL,
			       "line %d: field \"%s\" must be a value, not a message", t->line,
			       t->key);
	if (strlen(t->value) >= cap)
		return wf_errf(err, WF_EINVAL, "line %d: field \"%s\" is longer than %zu bytes",
			       t->line, t->key, cap - 1);
	strcpy(dst, t->value);
	return 0;
}

static int want_msg(const tnode *t, wf_err *err)
{
	if (!is_msg(t))
		return wf_errf(err, WF_EINVAL, "line %d: field \"%s\" must be a message { ... }",
			       t->line, t->key);
	return 0;
}

/* latest { num_versions } | specific { versions } | all {} (both schemas). */
static int read_policy(const tnode *p, wf_serve_model_config *c, wf_err *err)
{
	int rc = want_msg(p, err);
	for (int i = 0; !rc && i < p->nkids; i++) {
		const tnode *k = &p->kids[i];
		long x;
		if (!strcmp(k->key, "latest")) {
			c->policy = WF_SERVE_POLICY_LATEST;
			c->num_versions = 1;
			rc = want_msg(k, err);
			for (int j = 0; !rc && j < k->nkids; j++)
				if (!strcmp(k->kids[j].key, "num_versions")) {
					rc = get_long(&k->kids[j], 1, 1000, &x, err);
					c->num_versions = (int)x;
				}
		} else if (!strcmp(k->key, "specific")) {
			c->policy = WF_SERVE_POLICY_SPECIFIC;
			c->nspecific = 0;
			rc = want_msg(k, err);
			for (int j = 0; !rc && j < k->nkids; j++) {
				if (strcmp(k->kids[j].key, "versions"))
					continue;
				if (c->nspecific == WF_SERVE_MAX_SPECIFIC)
					return wf_errf(err, WF_EINVAL,
						       "line %d: more than %d specific versions",
						       k->kids[j].line, WF_SERVE_MAX_SPECIFIC);
				rc = get_long(&k->kids[j], 1, 999999999999999L, &x, err);
				c->specific[c->nspecific++] = x;
			}
			if (!rc && c->nspecific == 0)
				rc = wf_errf(err, WF_EINVAL,
					     "line %d: specific {} lists no versions", k->line);
		} else if (!strcmp(k->key, "all")) {
			c->policy = WF_SERVE_POLICY_ALL;
			rc = want_msg(k, err);
		}
	}
	return rc;
}

void wf_serve_labels_string(const wf_serve_model_config *c, char *buf, size_t cap)
{
	size_t len = 0;
	buf[0] = 0;
	for (int i = 0; i < c->nlabels && len < cap; i++)
		len += (size_t)snprintf(buf + len, cap - len, "%s%s:%ld", i ? "," : "",
					c->labels[i].key, c->labels[i].version);
}

void wf_serve_model_config_init(wf_serve_model_config *c)
{
	memset(c, 0, sizeof(*c));
	c->policy = WF_SERVE_POLICY_LATEST;
	c->num_versions = 1;
	c->max_batch = -1;
	c->batch_delay_us = -1;
}

static int valid_name(const char *s)
{
	return *s && strcspn(s, "/: ?#") == strlen(s) && strcmp(s, ".") && strcmp(s, "..");
}

static int read_tf_config(const tnode *t, wf_serve_model_config *c, wf_err *err)
{
	wf_serve_model_config_init(c);
	int rc = want_msg(t, err);
	for (int i = 0; !rc && i < t->nkids; i++) {
		const tnode *k = &t->kids[i];
		if (!strcmp(k->key, "name"))
			rc = get_str(k, c->name, sizeof(c->name), err);
		else if (!strcmp(k->key, "base_path"))
			rc = get_str(k, c->base_path, sizeof(c->base_path), err);
		else if (!strcmp(k->key, "model_platform"))
			rc = get_str(k, c->platform, sizeof(c->platform), err);
		else if (!strcmp(k->key, "model_version_policy"))
			rc = read_policy(k, c, err);
		else if (!strcmp(k->key, "version_labels")) {
			if ((rc = want_msg(k, err)))
				break;
			if (c->nlabels == WF_SERVE_MAX_LABELS)
				return wf_errf(err, WF_EINVAL,
					       "line %d: more than %d version labels", k->line,
					       WF_SERVE_MAX_LABELS);
			wf_serve_label *l = &c->labels[c->nlabels];
			int have_key = 0, have_value = 0;
			for (int j = 0; !rc && j < k->nkids; j++) {
				if (!strcmp(k->kids[j].key, "key")) {
					rc = get_str(&k->kids[j], l->key, sizeof(l->key), err);
					have_key = 1;
				} else if (!strcmp(k->kids[j].key, "value")) {
					rc = get_long(&k->kids[j], 1, 999999999999999L, &l->version,
						      err);
					have_value = 1;
				}
			}
			if (!rc && (!have_key || !have_value || !valid_name(l->key)))
				return wf_errf(
					err, WF_EINVAL,
					"line %d: version_labels needs a key (a name without "
					"'/' or ':') and a value (a version)",
					k->line);
			for (int j = 0; !rc && j < c->nlabels; j++)
				if (!strcmp(c->labels[j].key, l->key))
					return wf_errf(err, WF_EINVAL,
						       "line %d: version label \"%s\" given twice",
						       k->line, l->key);
			c->nlabels++;
		}
	}
	if (rc)
		return rc;
	if (!valid_name(c->name))
		return wf_errf(
			err, WF_EINVAL,
			"line %d: config needs a \"name\" without '/', ':', spaces, '?' or '#'",
			t->line);
	if (!c->base_path[0])
		return wf_errf(err, WF_EINVAL, "line %d: model \"%s\" has no base_path", t->line,
			       c->name);
	return 0;
}

int wf_serve_parse_model_server_config(const char *text, size_t len, wf_serve_model_config **out,
				       int *n, wf_err *err)
{
	tnode root;
	*out = NULL;
	*n = 0;
	int rc = parse_text(text, len, &root, err);
	if (rc)
		return rc;
	int count = 0, have_list = 0;
	for (int i = 0; i < root.nkids; i++) {
		const tnode *k = &root.kids[i];
		if (!strcmp(k->key, "custom_model_config")) {
			rc = wf_errf(err, WF_EINVAL,
				     "line %d: custom_model_config is not supported; use "
				     "model_config_list",
				     k->line);
			goto out;
		}
		if (strcmp(k->key, "model_config_list"))
			continue;
		have_list = 1;
		if ((rc = want_msg(k, err)))
			goto out;
		for (int j = 0; j < k->nkids; j++)
			count += !strcmp(k->kids[j].key, "config");
	}
	if (!have_list) {
		rc = wf_errf(err, WF_EINVAL, "no model_config_list { config { ... } } in the file");
		goto out;
	}
	wf_serve_model_config *cfg = calloc(count ? (size_t)count : 1, sizeof(*cfg));
	if (!cfg) {
		rc = wf_errf(err, WF_ENOMEM, "out of memory");
		goto out;
	}
	int m = 0;
	for (int i = 0; i < root.nkids && !rc; i++) {
		const tnode *k = &root.kids[i];
		if (strcmp(k->key, "model_config_list"))
			continue;
		for (int j = 0; j < k->nkids && !rc; j++) {
			if (strcmp(k->kids[j].key, "config"))
				continue;
			rc = read_tf_config(&k->kids[j], &cfg[m], err);
			for (int p = 0; !rc && p < m; p++)
				if (!strcmp(cfg[p].name, cfg[m].name))
					rc = wf_errf(err, WF_EINVAL,
						     "line %d: model \"%s\" is configured twice",
						     k->kids[j].line, cfg[m].name);
			m++;
		}
	}
	if (rc) {
		free(cfg);
		goto out;
	}
	*out = cfg;
	*n = count;
out:
	tnode_clear(&root);
	return rc;
}

/* input { name }: weft models have one input. */
static int read_input(const tnode *k, wf_serve_model_config *c, int *ninputs, wf_err *err)
{
	int rc = want_msg(k, err);
	if (!rc && ++*ninputs > 1)
		return wf_errf(err, WF_EINVAL,
			       "line %d: field \"input\": a weft model has one input; the config "
			       "lists more",
			       k->line);
	for (int j = 0; !rc && j < k->nkids; j++)
		if (!strcmp(k->kids[j].key, "name"))
			rc = get_str(&k->kids[j], c->input_name, sizeof(c->input_name), err);
	return rc;
}

/* output { name label_filename }: the outputs a weft model has. */
static int read_output(const tnode *k, wf_serve_model_config *c, wf_err *err)
{
	char name[WF_SERVE_MAX_NAME] = "";
	int rc = want_msg(k, err);
	for (int j = 0; !rc && j < k->nkids; j++) {
		const tnode *f = &k->kids[j];
		if (!strcmp(f->key, "name"))
			rc = get_str(f, name, sizeof(name), err);
		else if (!strcmp(f->key, "label_filename"))
			rc = get_str(f, c->label_filename, sizeof(c->label_filename), err);
	}
	if (!rc && strcmp(name, "probabilities") && strcmp(name, "logits"))
		return wf_errf(err, WF_EINVAL,
			       "line %d: field \"output\": name \"%s\" is not an output of a weft "
			       "model (\"probabilities\", \"logits\")",
			       k->line, name);
	if (!rc && c->label_filename[0] &&
	    (strchr(c->label_filename, '/') || c->label_filename[0] == '.'))
		return wf_errf(err, WF_EINVAL,
			       "line %d: field \"label_filename\": \"%s\" must name a file in the "
			       "model's folder",
			       k->line, c->label_filename);
	return rc;
}

/* dynamic_batching { max_queue_delay_microseconds preferred_batch_size } */
static int read_dynamic_batching(const tnode *k, wf_serve_model_config *c, wf_err *err)
{
	c->batch_delay_us = 0;
	int rc = want_msg(k, err);
	for (int j = 0; !rc && j < k->nkids; j++) {
		const tnode *f = &k->kids[j];
		long x;
		if (!strcmp(f->key, "max_queue_delay_microseconds")) {
			rc = get_long(f, 0, 10000000, &c->batch_delay_us, err);
		} else if (!strcmp(f->key, "preferred_batch_size")) {
			if (c->npreferred == WF_SERVE_MAX_PREFERRED)
				return wf_errf(err, WF_EINVAL,
					       "line %d: more than %d preferred_batch_size values",
					       f->line, WF_SERVE_MAX_PREFERRED);
			rc = get_long(f, 1, 4096, &x, err);
			c->preferred[c->npreferred++] = (int)x;
		}
	}
	return rc;
}

/* The fields of a Triton model configuration (text or JSON alike). */
static int read_triton(const tnode *root, wf_serve_model_config *c, wf_err *err)
{
	int rc = 0, ninputs = 0;
	for (int i = 0; !rc && i < root->nkids; i++) {
		const tnode *k = &root->kids[i];
		long x;
		if (!strcmp(k->key, "name")) {
			char name[WF_SERVE_MAX_NAME];
			rc = get_str(k, name, sizeof(name), err);
			if (!rc && strcmp(name, c->name))
				rc = wf_errf(
					err, WF_EINVAL,
					"line %d: name \"%s\" differs from the folder name \"%s\"",
					k->line, name, c->name);
		} else if (!strcmp(k->key, "platform") || !strcmp(k->key, "backend")) {
			rc = get_str(k, c->platform, sizeof(c->platform), err);
		} else if (!strcmp(k->key, "version_policy")) {
			rc = read_policy(k, c, err);
		} else if (!strcmp(k->key, "max_batch_size")) {
			rc = get_long(k, 0, 4096, &x, err);
			c->max_batch = (int)x;
		} else if (!strcmp(k->key, "dynamic_batching")) {
			rc = read_dynamic_batching(k, c, err);
		} else if (!strcmp(k->key, "input")) {
			rc = read_input(k, c, &ninputs, err);
		} else if (!strcmp(k->key, "output")) {
			rc = read_output(k, c, err);
		} else if (!strcmp(k->key, "instance_group")) {
			rc = want_msg(k, err);
			for (int j = 0; !rc && j < k->nkids; j++)
				if (!strcmp(k->kids[j].key, "count")) {
					rc = get_long(&k->kids[j], 1, 256, &x, err);
					c->instances += (int)x;
				}
		} else if (!strcmp(k->key, "parameters")) {
			/* parameters { key: "weft_threads" value { string_value: "4" } } */
			const char *key = NULL, *val = NULL;
			rc = want_msg(k, err);
			for (int j = 0; !rc && j < k->nkids; j++) {
				const tnode *f = &k->kids[j];
				if (!strcmp(f->key, "key") && f->value)
					key = f->value;
				if (!strcmp(f->key, "value") && is_msg(f))
					for (int q = 0; q < f->nkids; q++)
						if (!strcmp(f->kids[q].key, "string_value"))
							val = f->kids[q].value;
			}
			if (!rc && key && val && !strcmp(key, "weft_threads")) {
				tnode tmp = {.key = "weft_threads",
					     .value = (char *)val,
					     .line = k->line};
				rc = get_long(&tmp, 0, 1024, &x, err);
				c->threads = (int)x;
			} else if (!rc && key && val && !strcmp(key, "weft_memory_mb")) {
				/* its weights, executors and buffers: a version that
				 * needs more fails to load with the reason */
				tnode tmp = {.key = "weft_memory_mb",
					     .value = (char *)val,
					     .line = k->line};
				rc = get_long(&tmp, 1, 1L << 24, &c->memory_mb, err);
			}
		}
	}
	return rc;
}

int wf_serve_parse_triton_config(const char *text, size_t len, wf_serve_model_config *c,
				 wf_err *err)
{
	tnode root;
	int rc = parse_text(text, len, &root, err);
	if (rc)
		return rc;
	rc = read_triton(&root, c, err);
	tnode_clear(&root);
	return rc;
}

/* ---- Triton's configuration as JSON ------------------------------------------ */

/* JSON value j as field key of parent: objects become messages, arrays
 * repeated fields, scalars values (numbers and numeric strings, as
 * protobuf's JSON writes int64, read as numbers). */
static int json_field(lexer *L, tnode *parent, const char *key, json_t *j, int depth)
{
	if (depth > MAX_DEPTH)
		return wf_errf(L->err, WF_EINVAL, "nested deeper than %d", MAX_DEPTH);
	if (json_is_array(j)) {
		for (size_t i = 0; i < json_array_size(j); i++) {
			int rc = json_field(L, parent, key, json_array_get(j, i), depth + 1);
			if (rc)
				return rc;
		}
		return 0;
	}
	if (json_is_null(j))
		return 0;
	if (!strcmp(key, "parameters") && json_is_object(j)) {
		/* a map in JSON, repeated { key value } in text */
		const char *k;
		json_t *v;
		json_object_foreach(j, k, v)
		{
			json_t *kv = json_pack("{sssO}", "key", k, "value", v);
			if (!kv)
				return wf_errf(L->err, WF_ENOMEM, "out of memory");
			tnode *t = add_kid(L, parent, key, strlen(key));
			int rc = t ? json_field(L, t, "key", json_object_get(kv, "key"), depth + 1)
				   : WF_EINVAL;
			if (!rc)
				rc = json_field(L, t, "value", json_object_get(kv, "value"),
						depth + 1);
			json_decref(kv);
			if (rc)
				return rc;
		}
		return 0;
	}
	tnode *t = add_kid(L, parent, key, strlen(key));
	if (!t)
		return WF_EINVAL;
	if (json_is_object(j)) {
		const char *k;
		json_t *v;
		json_object_foreach(j, k, v)
		{
			int rc = json_field(L, t, k, v, depth + 1);
			if (rc)
				return rc;
		}
		return 0;
	}
	char num[64];
	const char *v = num;
	if (json_is_string(j)) {
		v = json_string_value(j);
		char *end;
		errno = 0;
		strtol(v, &end, 10);
		t->is_string = !*v || *end || errno;
	} else if (json_is_integer(j)) {
		snprintf(num, sizeof(num), "%" JSON_INTEGER_FORMAT, json_integer_value(j));
	} else if (json_is_real(j)) {
		snprintf(num, sizeof(num), "%.17g", json_real_value(j));
	} else {
		v = json_is_true(j) ? "true" : "false";
	}
	t->value = strdup(v);
	return t->value ? 0 : wf_errf(L->err, WF_ENOMEM, "out of memory");
}

int wf_serve_parse_triton_config_json(const char *text, size_t len, wf_serve_model_config *c,
				      wf_err *err)
{
	json_error_t je;
	json_t *j = json_loadb(text, len, 0, &je);
	if (!json_is_object(j)) {
		json_decref(j);
		return wf_errf(err, WF_EINVAL, "the model configuration must be a JSON object%s%s",
			       j ? "" : ": ", j ? "" : je.text);
	}
	lexer L = {.line = 1, .err = err};
	tnode root = {0};
	const char *k;
	json_t *v;
	int rc = 0;
	json_object_foreach(j, k, v)
	{
		if ((rc = json_field(&L, &root, k, v, 0)))
			break;
	}
	json_decref(j);
	if (!rc)
		rc = read_triton(&root, c, err);
	tnode_clear(&root);
	return rc;
}

/* ---- TF Serving's batching and monitoring files ------------------------------ */

int wf_serve_parse_batching_parameters(const char *text, size_t len, wf_serve_batching_params *p,
				       wf_err *err)
{
	static const char *const keys[] = {"max_batch_size", "batch_timeout_micros",
					   "num_batch_threads", "max_enqueued_batches"};
	static const long hi[] = {4096, 10000000, 256, 1000000};
	long *out[] = {&p->max_batch_size, &p->batch_timeout_micros, &p->num_batch_threads,
		       &p->max_enqueued_batches};
	tnode root;
	memset(p, 0, sizeof(*p));
	for (int k = 0; k < 4; k++)
		*out[k] = -1;
	int rc = parse_text(text, len, &root, err);
	if (rc)
		return rc;
	for (int i = 0; !rc && i < root.nkids; i++) {
		const tnode *f = &root.kids[i];
		int k = 0;
		while (k < 4 && strcmp(f->key, keys[k]))
			k++;
		if (k == 4) { /* e.g. pad_variable_length_inputs, allowed_batch_sizes */
			size_t n = strlen(p->ignored);
			if (!strstr(p->ignored, f->key))
				snprintf(p->ignored + n, sizeof(p->ignored) - n, "%s%s",
					 n ? ", " : "", f->key);
			continue;
		}
		rc = want_msg(f, err); /* a wrapper: { value: N } */
		for (int j = 0; !rc && j < f->nkids; j++)
			if (!strcmp(f->kids[j].key, "value"))
				rc = get_long(&f->kids[j], k == 1 ? 0 : 1, hi[k], out[k], err);
	}
	tnode_clear(&root);
	return rc;
}

int wf_serve_parse_monitoring_config(const char *text, size_t len, wf_serve_monitoring *m,
				     wf_err *err)
{
	tnode root;
	memset(m, 0, sizeof(*m));
	int rc = parse_text(text, len, &root, err);
	if (rc)
		return rc;
	for (int i = 0; !rc && i < root.nkids; i++) {
		const tnode *f = &root.kids[i];
		if (strcmp(f->key, "prometheus_config"))
			continue;
		rc = want_msg(f, err);
		for (int j = 0; !rc && j < f->nkids; j++) {
			const tnode *g = &f->kids[j];
			if (!strcmp(g->key, "path"))
				rc = get_str(g, m->path, sizeof(m->path), err);
			else if (!strcmp(g->key, "enable") && g->value)
				m->enable = !strcmp(g->value, "true") || !strcmp(g->value, "1");
		}
	}
	tnode_clear(&root);
	return rc;
}
