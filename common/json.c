#include "common/json.h"

#include "common/util.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

int wf_json_load_file(json_t **out, const char *path, wf_err *err)
{
	json_error_t je;
	*out = NULL;
	/* standard input is an explicit choice (a pipe or a heredoc); any other
	 * FIFO, device or directory is refused at once rather than blocking */
	int is_stdin = !strcmp(path, "-") || !strcmp(path, "/dev/stdin");
	int rc = is_stdin ? 0 : wf_check_regular_file(path, err);
	if (rc)
		return rc;
	FILE *f = is_stdin ? stdin : fopen(path, "rb");
	if (!f)
		return wf_errf(err, WF_EIO, "%s: cannot open: %m", path);
	json_t *root = json_loadf(f, JSON_REJECT_DUPLICATES, &je);
	if (!is_stdin)
		fclose(f);
	if (!root)
		return wf_errf(err, WF_EINVAL, "%s:%d:%d: invalid JSON: %s", path, je.line,
			       je.column, je.text);
	*out = root;
	return 0;
}

int wf_json_load_string(json_t **out, const char *text, const char *origin, wf_err *err)
{
	json_error_t je;
	*out = json_loads(text, JSON_REJECT_DUPLICATES, &je);
	if (!*out)
		return wf_errf(err, WF_EINVAL, "%s:%d:%d: invalid JSON: %s", origin, je.line,
			       je.column, je.text);
	return 0;
}

const char *wf_json_type_name(const json_t *v)
{
	if (!v)
		return "nothing";
	switch (json_typeof(v)) {
	case JSON_OBJECT: return "object";
	case JSON_ARRAY: return "array";
	case JSON_STRING: return "string";
	case JSON_INTEGER:
	case JSON_REAL: return "number";
	case JSON_TRUE:
	case JSON_FALSE: return "boolean";
	case JSON_NULL: return "null";
	}
	return "unknown";
}

void wf_json_path(char *dst, size_t n, const char *path, const char *key)
{
	if (path && path[0])
		snprintf(dst, n, "%s.%s", path, key);
	else
		snprintf(dst, n, "%s", key);
}

/* Look up obj[key]: 1 found, 0 absent and optional, <0 error. */
static int lookup(const json_t *obj, const char *path, const char *key, int required, json_t **v,
		  wf_err *err)
{
	char full[512];
	*v = json_is_object(obj) ? json_object_get(obj, key) : NULL;
	if (*v)
		return 1;
	if (!required)
		return 0;
	wf_json_path(full, sizeof(full), path, key);
	return wf_errf(err, WF_EINVAL, "%s: required key is missing", full);
}

static int type_error(const char *path, const char *key, const char *want, const json_t *v,
		      wf_err *err)
{
	char full[512];
	wf_json_path(full, sizeof(full), path, key);
	return wf_errf(err, WF_EINVAL, "%s: expected %s, got %s", full, want, wf_json_type_name(v));
}

int wf_json_get_string(const json_t *obj, const char *path, const char *key, int required,
		       const char **out, wf_err *err)
{
	json_t *v;
	int rc = lookup(obj, path, key, required, &v, err);
	if (rc <= 0)
		return rc;
	if (!json_is_string(v))
		return type_error(path, key, "a string", v, err);
	*out = json_string_value(v);
	return 0;
}

int wf_json_get_long(const json_t *obj, const char *path, const char *key, int required, long *out,
		     wf_err *err)
{
	json_t *v;
	int rc = lookup(obj, path, key, required, &v, err);
	if (rc <= 0)
		return rc;
	if (json_is_integer(v)) {
		*out = (long)json_integer_value(v);
		return 0;
	}
	if (json_is_real(v)) {
		double d = json_real_value(v);
		if (d == floor(d) && fabs(d) < 9e15) {
			*out = (long)d;
			return 0;
		}
		char full[512];
		wf_json_path(full, sizeof(full), path, key);
		return wf_errf(err, WF_EINVAL, "%s: expected an integer, got %g", full, d);
	}
	return type_error(path, key, "an integer", v, err);
}

int wf_json_get_double(const json_t *obj, const char *path, const char *key, int required,
		       double *out, wf_err *err)
{
	json_t *v;
	int rc = lookup(obj, path, key, required, &v, err);
	if (rc <= 0)
		return rc;
	if (!json_is_number(v))
		return type_error(path, key, "a number", v, err);
	*out = json_number_value(v);
	return 0;
}

int wf_json_get_bool(const json_t *obj, const char *path, const char *key, int required, int *out,
		     wf_err *err)
{
	json_t *v;
	int rc = lookup(obj, path, key, required, &v, err);
	if (rc <= 0)
		return rc;
	if (!json_is_boolean(v))
		return type_error(path, key, "a boolean", v, err);
	*out = json_is_true(v);
	return 0;
}

int wf_json_get_object(const json_t *obj, const char *path, const char *key, int required,
		       json_t **out, wf_err *err)
{
	json_t *v;
	int rc = lookup(obj, path, key, required, &v, err);
	if (rc <= 0)
		return rc;
	if (!json_is_object(v))
		return type_error(path, key, "an object", v, err);
	*out = v;
	return 0;
}
