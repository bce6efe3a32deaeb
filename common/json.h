/* json.h: small helpers over jansson for reading configs and specs: load a
 * file with errors that name file, line and column, and typed getters whose
 * errors name the full key path ("optimizer.momentum: expected a number,
 * got string"). */
#ifndef WF_JSON_H
#define WF_JSON_H

#include "common/error.h"

#include <jansson.h>

/* Parse a JSON document from path into *out (caller json_decref's it).
 * Syntax errors name the file, line and column. */
int wf_json_load_file(json_t **out, const char *path, wf_err *err);
/* Parse text (origin names it in errors: a file name or "TF_CONFIG"). */
int wf_json_load_string(json_t **out, const char *text, const char *origin, wf_err *err);

/* "object", "array", "string", "number", "boolean" or "null". */
const char *wf_json_type_name(const json_t *v);

/* Typed getters for obj[key]. path names obj in errors ("" for the root).
 * Missing keys: required ones fail naming the path; optional ones return 0
 * and leave *out unchanged. Wrong types fail naming the path and both types. */
int wf_json_get_string(const json_t *obj, const char *path, const char *key, int required,
		       const char **out, wf_err *err);
/* Integers: JSON integers, or reals with an integral value. */
int wf_json_get_long(const json_t *obj, const char *path, const char *key, int required, long *out,
		     wf_err *err);
int wf_json_get_double(const json_t *obj, const char *path, const char *key, int required,
		       double *out, wf_err *err);
int wf_json_get_bool(const json_t *obj, const char *path, const char *key, int required, int *out,
		     wf_err *err);
/* A borrowed reference (valid while obj lives). */
int wf_json_get_object(const json_t *obj, const char *path, const char *key, int required,
		       json_t **out, wf_err *err);

/* Join a path and a key: "a.b" + "c" -> "a.b.c" (truncates to n bytes). */
void wf_json_path(char *dst, size_t n, const char *path, const char *key);

#endif
