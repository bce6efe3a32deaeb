/* test_config.c: the training config: defaults, merging a file, --set,
 * and errors that name the full key path (or the file and line). */
#include "trainer/config.h"
#include "tests/test.h"

#include <unistd.h>

static int write_tmp(char *path, const char *text)
{
	int fd = mkstemp(path);
	if (fd < 0)
		return -1;
	ssize_t n = write(fd, text, strlen(text));
	close(fd);
	return n == (ssize_t)strlen(text) ? 0 : -1;
}

static void test_defaults_need_only_train_data(void)
{
	wf_config c;
	wf_err err = {0};
	wf_config_default(&c);
	WF_CHECK_INT(c.train.batch_size, 64);
	WF_CHECK(strcmp(c.optimizer.name, "sgd") == 0);
	WF_CHECK_NEAR(c.optimizer.epsilon, 1e-7, 1e-15);
	WF_CHECK(wf_config_validate(&c, &err) == WF_EINVAL);
	WF_CHECK_MSG(strncmp(err.msg, "data.train:", 11) == 0, "%s", err.msg);
	WF_CHECK_INT(wf_config_set(&c, "data.train=d/train.h5", &err), 0);
	WF_CHECK_INT(wf_config_validate(&c, &err), 0);
}

static void test_design_example_parses(void)
{
	const char *text =
		"{\"model\": {\"name\": \"resnet20\", \"classes\": 10},"
		" \"data\": {\"train\": \"data/train.h5\", \"eval\": \"data/eval.h5\", "
		"\"augment\": true},"
		" \"train\": {\"batch_size\": 64, \"steps\": 2000, \"seed\": 1, "
		"\"eval_every_steps\": 500},"
		" \"optimizer\": {\"name\": \"sgd\", \"lr\": 0.1, \"momentum\": 0.9, \"nesterov\": "
		"false,"
		"   \"weight_decay\": 5e-4, \"schedule\": {\"name\": \"cosine\", \"warmup_steps\": "
		"100}},"
		" \"strategy\": {\"name\": \"parameter_server\", \"mode\": \"ssp:3\"},"
		" \"checkpoint\": {\"dir\": \"run/ckpt\", \"every_steps\": 500, \"keep\": 3},"
		" \"log\": {\"dir\": \"run/logs\", \"every_steps\": 10}}";
	wf_config c;
	wf_err err = {0};
	WF_CHECK_INT(wf_config_parse_string(&c, text, &err), 0);
	WF_CHECK(strcmp(c.model.name, "resnet20") == 0);
	WF_CHECK_INT(c.model.classes, 10);
	WF_CHECK_INT(c.data.augment, 1);
	WF_CHECK_INT(c.train.steps, 2000);
	WF_CHECK_NEAR(c.optimizer.weight_decay, 5e-4, 1e-12);
	WF_CHECK(strcmp(c.optimizer.schedule.name, "cosine") == 0);
	WF_CHECK_INT(c.optimizer.schedule.warmup_steps, 100);
	WF_CHECK_INT(c.strategy.staleness, 3);
	wf_optim_cfg o;
	wf_config_optim(&c, &o);
	WF_CHECK_INT(o.schedule, WF_SCHED_COSINE);
	WF_CHECK_INT(o.total_steps, 2000);
	WF_CHECK_INT(o.kind, WF_OPT_SGD);
}

static void test_unknown_key_names_full_path(void)
{
	wf_config c;
	wf_err err = {0};
	int rc = wf_config_parse_string(&c, "{\"optimizer\": {\"schedule\": {\"nmae\": \"step\"}}}",
					&err);
	WF_CHECK(rc == WF_EINVAL);
	WF_CHECK_MSG(strncmp(err.msg, "optimizer.schedule.nmae: unknown key", 36) == 0, "%s",
		     err.msg);
	WF_CHECK(strstr(err.msg, "warmup_steps") != NULL);
	rc = wf_config_parse_string(&c, "{\"modle\": {}}", &err);
	WF_CHECK(rc == WF_EINVAL);
	WF_CHECK_MSG(strncmp(err.msg, "modle: unknown key", 18) == 0, "%s", err.msg);
}

static void test_wrong_type_names_path_and_types(void)
{
	wf_config c;
	wf_err err = {0};
	WF_CHECK(wf_config_parse_string(&c, "{\"optimizer\": {\"momentum\": \"high\"}}", &err) ==
		 WF_EINVAL);
	WF_CHECK_MSG(strcmp(err.msg, "optimizer.momentum: expected a number, got string") == 0,
		     "%s", err.msg);
	WF_CHECK(wf_config_parse_string(&c, "{\"train\": {\"steps\": 1.5}}", &err) == WF_EINVAL);
	WF_CHECK(strstr(err.msg, "train.steps: expected an integer") != NULL);
	WF_CHECK(wf_config_parse_string(&c, "{\"train\": 3}", &err) == WF_EINVAL);
	WF_CHECK_MSG(strcmp(err.msg, "train: expected an object, got number") == 0, "%s", err.msg);
	WF_CHECK(wf_config_parse_string(&c, "[1, 2]", &err) == WF_EINVAL);
	WF_CHECK(wf_config_parse_string(&c, "{\"data\": {\"augment\": 1}}", &err) == WF_EINVAL);
	WF_CHECK(strstr(err.msg, "data.augment: expected a boolean, got number") != NULL);
}

static void test_bad_values_are_named(void)
{
	static const struct {
		const char *text, *want;
	} cases[] = {
		{"{\"data\":{\"train\":\"t\"},\"train\":{\"batch_size\":0}}", "train.batch_size:"},
		{"{\"data\":{\"train\":\"t\"},\"model\":{\"name\":\"vgg99\"}}",
		 "model.name: unknown model 'vgg99'"},
		{"{\"data\":{\"train\":\"t\"},\"optimizer\":{\"name\":\"lamb\"}}",
		 "optimizer.name:"},
		{"{\"data\":{\"train\":\"t\"},\"optimizer\":{\"lr\":-1}}", "optimizer.lr:"},
		{"{\"data\":{\"train\":\"t\"},\"strategy\":{\"mode\":\"ssp:x\"}}",
		 "strategy.mode:"},
		{"{\"data\":{\"train\":\"t\"},\"strategy\":{\"name\":\"gossip\"}}",
		 "strategy.name:"},
		{"{\"data\":{\"train\":\"t\"},\"train\":{\"device\":\"tpu\"}}", "train.device:"},
		{"{\"data\":{\"train\":\"t\"},\"checkpoint\":{\"keep\":0}}", "checkpoint.keep:"},
		{"{\"data\":{\"train\":\"t\"},\"optimizer\":{\"schedule\":{\"name\":\"step\"}}}",
		 "optimizer.schedule.decay_steps:"},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		wf_config c;
		wf_err err = {0};
		int rc = wf_config_parse_string(&c, cases[i].text, &err);
		WF_CHECK_MSG(rc == WF_EINVAL, "case %zu", i);
		WF_CHECK_MSG(strstr(err.msg, cases[i].want) != NULL, "case %zu: %s", i, err.msg);
	}
}

static void test_set_overrides(void)
{
	wf_config c;
	wf_err err = {0};
	wf_config_default(&c);
	WF_CHECK_INT(wf_config_set(&c, "optimizer.lr=0.05", &err), 0);
	WF_CHECK_NEAR(c.optimizer.lr, 0.05, 1e-12);
	WF_CHECK_INT(wf_config_set(&c, "model.name=resnet20", &err), 0); /* not JSON: a string */
	WF_CHECK(strcmp(c.model.name, "resnet20") == 0);
	WF_CHECK_INT(wf_config_set(&c, "data.train=123", &err), 0); /* strings take the text */
	WF_CHECK(strcmp(c.data.train, "123") == 0);
	WF_CHECK_INT(wf_config_set(&c, "data.augment=true", &err), 0);
	WF_CHECK_INT(c.data.augment, 1);
	WF_CHECK_INT(wf_config_set(&c, "optimizer.schedule={\"name\":\"cosine\"}", &err), 0);
	WF_CHECK(strcmp(c.optimizer.schedule.name, "cosine") == 0);
	WF_CHECK(wf_config_set(&c, "optimizer.momentum=fast", &err) == WF_EINVAL);
	WF_CHECK(strstr(err.msg, "optimizer.momentum: expected a number, got string") != NULL);
	WF_CHECK(wf_config_set(&c, "train.stpes=5", &err) == WF_EINVAL);
	WF_CHECK(strstr(err.msg, "train.stpes: unknown key") != NULL);
	WF_CHECK(wf_config_set(&c, "novalue", &err) == WF_EINVAL);
}

static void test_file_errors_name_file_line(void)
{
	char path[] = "/tmp/wf_cfg_XXXXXX";
	WF_CHECK_INT(write_tmp(path, "{\n \"train\": {\n  \"steps\": 10,\n }\n}\n"), 0);
	wf_config c;
	wf_err err = {0};
	wf_config_default(&c);
	WF_CHECK(wf_config_load_file(&c, path, &err) == WF_EINVAL);
	char want[64];
	snprintf(want, sizeof(want), "%s:4:", path);
	WF_CHECK_MSG(strncmp(err.msg, want, strlen(want)) == 0, "%s", err.msg);
	unlink(path);
}

static void test_resolved_config_round_trips(void)
{
	wf_config a, b;
	wf_err err = {0};
	WF_CHECK_INT(
		wf_config_parse_string(&a,
				       "{\"data\":{\"train\":\"x.h5\"},\"optimizer\":{\"name\":"
				       "\"adamw\",\"beta2\":0.98},\"train\":{\"accumulate\":4}}",
				       &err),
		0);
	char path[] = "/tmp/wf_cfg_XXXXXX";
	WF_CHECK_INT(write_tmp(path, ""), 0);
	WF_CHECK_INT(wf_config_write(&a, path, &err), 0);
	wf_config_default(&b);
	WF_CHECK_INT(wf_config_load_file(&b, path, &err), 0);
	WF_CHECK_INT(wf_config_validate(&b, &err), 0);
	WF_CHECK(memcmp(&a, &b, sizeof(a)) == 0);
	unlink(path);
}

/* data.augment: the old boolean keeps working, the object switches each
 * augmentation on its own, and the resolved config writes the object. */
static void test_augment_is_a_boolean_or_an_object(void)
{
	wf_config c, b;
	wf_err err = {0};
	WF_CHECK_INT(wf_config_parse_string(&c,
					    "{\"data\":{\"train\":\"x.h5\",\"augment\":{\"flip\":"
					    "true,\"random_resized_crop\":true,\"scale_min\":0.5,"
					    "\"brightness\":0.2}}}",
					    &err),
		     0);
	WF_CHECK(c.data.aug.flip && !c.data.aug.crop && c.data.aug.random_resized_crop);
	WF_CHECK(c.data.aug.scale_min == 0.5 && c.data.aug.brightness == 0.2 && !c.data.augment);
	WF_CHECK(wf_config_parse_string(&c, "{\"data\":{\"train\":\"x\",\"augment\":{\"flip\":1}}}",
					&err) == WF_EINVAL);
	WF_CHECK_MSG(strstr(err.msg, "data.augment.flip: expected a boolean"), "%s", err.msg);
	WF_CHECK(wf_config_parse_string(
			 &c, "{\"data\":{\"train\":\"x\",\"augment\":{\"scale_min\":0}}}", &err) ==
		 WF_EINVAL);
	WF_CHECK_MSG(strstr(err.msg, "data.augment.scale_min"), "%s", err.msg);
	WF_CHECK_INT(
		wf_config_parse_string(&c, "{\"data\":{\"train\":\"x\",\"augment\":true}}", &err),
		0);
	WF_CHECK(c.data.augment == 1);
	wf_config_default(&c);
	WF_CHECK_INT(wf_config_set(&c, "data.augment={\"crop\":true,\"contrast\":0.3}", &err), 0);
	WF_CHECK(c.data.aug.crop && c.data.aug.contrast == 0.3);
	WF_CHECK_INT(wf_config_set(&c, "data.augment=true", &err), 0);
	WF_CHECK(c.data.augment == 1 && c.data.aug.crop);
	/* resolved: {"augment": {"flip": true, "crop": true, "contrast": 0.3, ...}} */
	char path[] = "/tmp/wf_cfg_XXXXXX";
	WF_CHECK_INT(write_tmp(path, ""), 0);
	WF_CHECK_INT(wf_config_write(&c, path, &err), 0);
	wf_config_default(&b);
	WF_CHECK_INT(wf_config_load_file(&b, path, &err), 0);
	WF_CHECK(b.data.aug.flip && b.data.aug.crop && b.data.aug.contrast == 0.3);
	unlink(path);
}

int main(void)
{
	WF_RUN(test_defaults_need_only_train_data);
	WF_RUN(test_design_example_parses);
	WF_RUN(test_unknown_key_names_full_path);
	WF_RUN(test_wrong_type_names_path_and_types);
	WF_RUN(test_bad_values_are_named);
	WF_RUN(test_set_overrides);
	WF_RUN(test_file_errors_name_file_line);
	WF_RUN(test_resolved_config_round_trips);
	WF_RUN(test_augment_is_a_boolean_or_an_object);
	return wf_test_summary();
}
