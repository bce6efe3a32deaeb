/* test_modelconfig.c: TF Serving's ModelServerConfig text and Triton's
 * config.pbtxt as weft-serve reads them: policies, labels, batching
 * settings, and errors that name the line and field. */
#include "common/util.h"
#include "serve/modelconfig.h"
#include "tests/test.h"

#include <string.h>

static void test_tf_model_server_config(void)
{
	/* as in TF Serving's documentation, plus comments and a list form */
	const char *text =
		"# three models\n"
		"model_config_list {\n"
		"  config {\n"
		"    name: 'resnet'\n"
		"    base_path: \"/models/resnet\"\n"
		"    model_platform: \"tensorflow\"\n"
		"    model_version_policy {\n"
		"      specific {\n"
		"        versions: 1\n"
		"        versions: 2\n"
		"      }\n"
		"    }\n"
		"    version_labels {\n"
		"      key: 'stable'\n"
		"      value: 1\n"
		"    }\n"
		"    version_labels { key: 'canary' value: 2 }\n"
		"  }\n"
		"  config: { name: \"mobilenet\", base_path: \"/models/mn\",\n"
		"    model_version_policy: { latest: { num_versions: 2 } } }\n"
		"  config { name: \"all\" base_path: \"/models/all\" model_version_policy { all {} "
		"} }\n"
		"  config { name: \"list\" base_path: \"/m/l\" model_version_policy { specific { "
		"versions: [3, 4] } } }\n"
		"}\n";
	wf_serve_model_config *c = NULL;
	int n = 0;
	wf_err err = {0};
	WF_CHECK_INT(wf_serve_parse_model_server_config(text, strlen(text), &c, &n, &err), 0);
	WF_CHECK_INT(n, 4);
	if (n != 4)
		return;
	WF_CHECK(!strcmp(c[0].name, "resnet") && !strcmp(c[0].base_path, "/models/resnet"));
	WF_CHECK(!strcmp(c[0].platform, "tensorflow"));
	WF_CHECK_INT(c[0].policy, WF_SERVE_POLICY_SPECIFIC);
	WF_CHECK_INT(c[0].nspecific, 2);
	WF_CHECK(c[0].specific[0] == 1 && c[0].specific[1] == 2);
	WF_CHECK_INT(c[0].nlabels, 2);
	WF_CHECK(!strcmp(c[0].labels[0].key, "stable") && c[0].labels[0].version == 1);
	WF_CHECK(!strcmp(c[0].labels[1].key, "canary") && c[0].labels[1].version == 2);
	WF_CHECK_INT(c[1].policy, WF_SERVE_POLICY_LATEST);
	WF_CHECK_INT(c[1].num_versions, 2);
	WF_CHECK_INT(c[2].policy, WF_SERVE_POLICY_ALL);
	WF_CHECK_INT(c[3].nspecific, 2);
	WF_CHECK(c[3].specific[1] == 4);
	free(c);
}

static void test_tf_errors_name_the_line(void)
{
	static const char *const cases[][2] = {
		{"model_config_list { config { name: 'a' } }", "base_path"},
		{"model_config_list { config { base_path: '/x' } }", "name"},
		{"model_config_list {\n config { name: 'a' base_path: '/x' }\n config { name: 'a' "
		 "base_path: '/y' } }",
		 "line 3"},
		{"model_config_list { config { name: 'a' base_path: '/x' ", "missing '}'"},
		{"model_config_list { config { name: 'a\n' } }", "unterminated"},
		{"model_config_list { config { name: 'a' base_path: '/x' model_version_policy { "
		 "latest { num_versions: x } } } }",
		 "num_versions"},
		{"model_config_list { config { name: 'a' base_path: '/x' version_labels { key: "
		 "'s' } } }",
		 "version_labels"},
		{"nothing: 1", "model_config_list"},
		{"custom_model_config {}", "custom_model_config"},
	};
	for (size_t i = 0; i < WF_ARRAY_LEN(cases); i++) {
		wf_serve_model_config *c = NULL;
		int n = 0;
		wf_err err = {0};
		int rc = wf_serve_parse_model_server_config(cases[i][0], strlen(cases[i][0]), &c,
							    &n, &err);
		WF_CHECK_MSG(rc == WF_EINVAL && strstr(err.msg, cases[i][1]),
			     "case %zu: rc %d msg \"%s\"", i, rc, err.msg);
		free(c);
	}
}

static void test_triton_config_pbtxt(void)
{
	const char *text =
		"name: \"densenet\"\n"
		"platform: \"onnxruntime_onnx\"\n"
		"max_batch_size: 8\n"
		"version_policy: { latest: { num_versions: 2 } }\n"
		"input [ { name: \"x\" data_type: TYPE_FP32 dims: [ 3, 224, 224 ] } ]\n"
		"dynamic_batching { preferred_batch_size: [ 4 ]\n"
		"  max_queue_delay_microseconds: 500 }\n"
		"instance_group [ { count: 2 kind: KIND_CPU } ]\n"
		"parameters { key: \"weft_threads\" value { string_value: \"3\" } }\n"
		"parameters { key: \"weft_memory_mb\" value { string_value: \"900\" } }\n";
	wf_serve_model_config c;
	wf_serve_model_config_init(&c);
	strcpy(c.name, "densenet");
	wf_err err = {0};
	WF_CHECK_INT(wf_serve_parse_triton_config(text, strlen(text), &c, &err), 0);
	WF_CHECK_INT(c.max_batch, 8);
	WF_CHECK_INT(c.num_versions, 2);
	WF_CHECK_INT((int)c.batch_delay_us, 500);
	WF_CHECK_INT(c.instances, 2);
	WF_CHECK_INT(c.threads, 3);
	WF_CHECK_INT(c.memory_mb, 900);
	/* a name that differs from the folder is refused */
	wf_serve_model_config d;
	wf_serve_model_config_init(&d);
	strcpy(d.name, "other");
	WF_CHECK_INT(wf_serve_parse_triton_config(text, strlen(text), &d, &err), WF_EINVAL);
	WF_CHECK(strstr(err.msg, "folder name") != NULL);
}

/* max_batch_size absent is the server's setting (-1); 0 is an unbatched model. */
static void test_triton_max_batch_zero(void)
{
	wf_serve_model_config c;
	wf_err err = {0};
	wf_serve_model_config_init(&c);
	strcpy(c.name, "m");
	WF_CHECK_INT(wf_serve_parse_triton_config("name: \"m\"\n", 10, &c, &err), 0);
	WF_CHECK_INT(c.max_batch, -1);
	const char *zero = "max_batch_size: 0\n";
	WF_CHECK_INT(wf_serve_parse_triton_config(zero, strlen(zero), &c, &err), 0);
	WF_CHECK_INT(c.max_batch, 0);
}

/* A load request's JSON configuration and the same config.pbtxt give one
 * configuration: both are read by the same rules. */
static void test_triton_json_equals_text(void)
{
	const char *text = "max_batch_size: 4\n"
			   "version_policy { specific { versions: [1, 3] } }\n"
			   "input [{ name: \"input\" }]\n"
			   "output [{ name: \"probabilities\" label_filename: \"labels.txt\" }]\n"
			   "dynamic_batching { preferred_batch_size: [2, 4] "
			   "max_queue_delay_microseconds: 100 }\n"
			   "instance_group [{ count: 2 }]\n"
			   "parameters { key: \"weft_threads\" value { string_value: \"3\" } }\n";
	const char *json = "{\"name\": \"m\", \"max_batch_size\": 4,"
			   " \"version_policy\": {\"specific\": {\"versions\": [\"1\", \"3\"]}},"
			   " \"input\": [{\"name\": \"input\", \"dims\": [\"32\"]}],"
			   " \"output\": [{\"name\": \"probabilities\","
			   " \"label_filename\": \"labels.txt\"}],"
			   " \"dynamic_batching\": {\"preferred_batch_size\": [2, 4],"
			   " \"max_queue_delay_microseconds\": \"100\"},"
			   " \"instance_group\": [{\"count\": 2, \"kind\": \"KIND_CPU\"}],"
			   " \"parameters\": {\"weft_threads\": {\"string_value\": \"3\"}}}";
	wf_serve_model_config a, b;
	wf_err err = {0};
	wf_serve_model_config_init(&a);
	wf_serve_model_config_init(&b);
	strcpy(a.name, "m");
	strcpy(b.name, "m");
	WF_CHECK_INT(wf_serve_parse_triton_config(text, strlen(text), &a, &err), 0);
	WF_CHECK_INT(wf_serve_parse_triton_config_json(json, strlen(json), &b, &err), 0);
	WF_CHECK(memcmp(&a, &b, sizeof(a)) == 0);
	WF_CHECK(b.max_batch == 4 && b.policy == WF_SERVE_POLICY_SPECIFIC && b.nspecific == 2);
	WF_CHECK(b.npreferred == 2 && b.preferred[1] == 4 && b.batch_delay_us == 100);
	WF_CHECK(!strcmp(b.input_name, "input") && !strcmp(b.label_filename, "labels.txt"));
	WF_CHECK(b.instances == 2 && b.threads == 3);
	const char *bad[][2] = {
		{"{\"output\": [{\"name\": \"scores\"}]}", "name \"scores\" is not an output"},
		{"{\"input\": [{\"name\": \"a\"}, {\"name\": \"b\"}]}", "one input"},
		{"{\"max_batch_size\": \"x\"}", "max_batch_size"},
		{"[1]", "must be a JSON object"},
	};
	for (size_t i = 0; i < WF_ARRAY_LEN(bad); i++) {
		wf_serve_model_config_init(&b);
		strcpy(b.name, "m");
		int rc = wf_serve_parse_triton_config_json(bad[i][0], strlen(bad[i][0]), &b, &err);
		WF_CHECK_MSG(rc == WF_EINVAL && strstr(err.msg, bad[i][1]), "%s: %s", bad[i][0],
			     err.msg);
	}
}

int main(void)
{
	WF_RUN(test_tf_model_server_config);
	WF_RUN(test_tf_errors_name_the_line);
	WF_RUN(test_triton_config_pbtxt);
	WF_RUN(test_triton_max_batch_zero);
	WF_RUN(test_triton_json_equals_text);
	return wf_test_summary();
}
