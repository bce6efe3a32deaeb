/* test_json.c: typed getters name the key path and both types; file syntax
 * errors name the file and line. */
#include "common/json.h"
#include "tests/test.h"

#include <unistd.h>

static void test_getters_name_the_path(void)
{
	wf_err err = {0};
	json_t *root;
	WF_CHECK_INT(wf_json_load_string(&root, "{\"a\": {\"n\": \"x\", \"i\": 2.0, \"f\": 2.5}}",
					 "t", &err),
		     0);
	json_t *a = NULL;
	WF_CHECK_INT(wf_json_get_object(root, "", "a", 1, &a, &err), 0);
	double d = 0;
	WF_CHECK(wf_json_get_double(a, "a", "n", 1, &d, &err) == WF_EINVAL);
	WF_CHECK_MSG(strcmp(err.msg, "a.n: expected a number, got string") == 0, "%s", err.msg);
	long l = 0;
	WF_CHECK_INT(wf_json_get_long(a, "a", "i", 1, &l, &err), 0);
	WF_CHECK_INT(l, 2);
	WF_CHECK(wf_json_get_long(a, "a", "f", 1, &l, &err) == WF_EINVAL);
	WF_CHECK(strstr(err.msg, "a.f") != NULL);
	int b = 0;
	WF_CHECK(wf_json_get_bool(a, "a", "missing", 1, &b, &err) == WF_EINVAL);
	WF_CHECK(strstr(err.msg, "a.missing: required") != NULL);
	const char *s = "keep";
	WF_CHECK_INT(wf_json_get_string(a, "a", "missing", 0, &s, &err), 0);
	WF_CHECK(strcmp(s, "keep") == 0);
	json_decref(root);
}

static void test_file_errors_name_file_and_line(void)
{
	char path[] = "/tmp/wf_json_XXXXXX";
	int fd = mkstemp(path);
	WF_CHECK(fd >= 0);
	const char *text = "{\n  \"a\": 1,\n  \"b\": \n}\n";
	WF_CHECK(write(fd, text, strlen(text)) == (ssize_t)strlen(text));
	close(fd);
	json_t *root = NULL;
	wf_err err = {0};
	WF_CHECK(wf_json_load_file(&root, path, &err) == WF_EINVAL);
	char want[64];
	snprintf(want, sizeof(want), "%s:4:", path);
	WF_CHECK_MSG(strncmp(err.msg, want, strlen(want)) == 0, "%s", err.msg);
	unlink(path);
	WF_CHECK(wf_json_load_file(&root, "/nonexistent/x.json", &err) == WF_EIO);
	WF_CHECK(strstr(err.msg, "/nonexistent/x.json") != NULL);
}

int main(void)
{
	WF_RUN(test_getters_name_the_path);
	WF_RUN(test_file_errors_name_file_and_line);
	return wf_test_summary();
}
