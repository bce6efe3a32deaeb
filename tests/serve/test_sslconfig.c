/* test_sslconfig.c: TF Serving's SSLConfig text (--ssl_config_file): escaped
 * and pasted PEM, adjacent literals, comments and separators give the right
 * strings; unknown or repeated fields and broken strings are errors that
 * name the field and line. */
#include "serve/sslconfig.h"
#include "tests/test.h"

#include <string.h>

static int parse(const char *text, wf_serve_ssl_config *c, wf_err *err)
{
	return wf_serve_ssl_config_parse(text, strlen(text), c, err);
}

static void test_fields_escapes_and_concatenation(void)
{
	wf_serve_ssl_config c;
	wf_err err = {0};
	const char *text = "# comment\n"
			   "server_key: \"-----BEGIN-----\\nAB\\n\"\n"
			   "server_cert: \"L1\n\" 'L2\\'s' \"\\101\\x42\\t\";\n"
			   "custom_ca: \"ca\", client_verify: True\n";
	WF_CHECK_INT(parse(text, &c, &err), 0);
	WF_CHECK(c.server_key && strcmp(c.server_key, "-----BEGIN-----\nAB\n") == 0);
	WF_CHECK(c.server_cert && strcmp(c.server_cert, "L1\nL2'sAB\t") == 0);
	WF_CHECK(c.custom_ca && strcmp(c.custom_ca, "ca") == 0);
	WF_CHECK_INT(c.client_verify, 1);
	wf_serve_ssl_config_free(&c);
	WF_CHECK_INT(parse("", &c, &err), 0);
	WF_CHECK(!c.server_key && !c.server_cert && !c.client_verify);
}

static void test_bad_configs_name_field_and_line(void)
{
	struct {
		const char *text, *words;
	} bad[] = {
		{"server_key: \"a\"\nserver_certificate: \"b\"\n",
		 "line 2: unknown field server_certificate"},
		{"server_key: \"a\"\nserver_key: \"b\"\n", "line 2: field server_key given twice"},
		{"server_key \"a\"\n", "expected ':' after field server_key"},
		{"server_key: \"abc\n", "field server_key: the string is not closed"},
		{"server_cert: 12\n", "field server_cert needs a quoted string"},
		{"server_key: \"a\\q\"\n", "unknown escape \\q"},
		{"server_key: \"a\\000b\"\n", "NUL byte"},
		{"client_verify: maybe\n", "client_verify must be true or false"},
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		wf_serve_ssl_config c;
		wf_err err = {0};
		WF_CHECK_MSG(parse(bad[i].text, &c, &err) == WF_EINVAL &&
				     strstr(err.msg, bad[i].words) != NULL,
			     "%s -> \"%s\" (got \"%s\")", bad[i].text, bad[i].words, err.msg);
		WF_CHECK(!c.server_key && !c.server_cert && !c.custom_ca);
	}
}

int main(void)
{
	WF_RUN(test_fields_escapes_and_concatenation);
	WF_RUN(test_bad_configs_name_field_and_line);
	return wf_test_summary();
}
