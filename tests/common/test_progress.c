/* test_progress.c: plain mode prints one line every `every` steps and on
 * the last; terminal mode rewrites one line with \r. */
#include "common/progress.h"
#include "tests/test.h"

static void test_plain_lines_every_n_steps(void)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	wf_progress p;
	wf_progress_init(&p, f, 0, 0, 25, 10);
	for (long s = 1; s <= 25; s++) {
		wf_progress_stats st = {s, s / 5.0, 1.0 / (double)s, 0.5, 100, 0.1};
		wf_progress_update(&p, &st);
	}
	wf_progress_message(&p, "eval done");
	wf_progress_finish(&p);
	fclose(f);
	int lines = 0;
	for (size_t i = 0; i < len; i++)
		lines += buf[i] == '\n';
	WF_CHECK_INT(lines, 4); /* steps 10, 20, 25 and the message */
	WF_CHECK(strstr(buf, "step 10/25") != NULL);
	WF_CHECK(strstr(buf, "step 25/25") != NULL);
	WF_CHECK(strchr(buf, '\r') == NULL);
	free(buf);
}

static void test_tty_updates_in_place(void)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	wf_progress p;
	wf_progress_init(&p, f, 1, 0, 3, 10);
	for (long s = 1; s <= 3; s++) {
		wf_progress_stats st = {s, 0, 0.5, 0.5, 100, 0.1};
		wf_progress_update(&p, &st);
	}
	wf_progress_finish(&p);
	fclose(f);
	WF_CHECK(buf[0] == '\r');
	WF_CHECK(strstr(buf, "step 3/3") != NULL);
	WF_CHECK(strstr(buf, "ETA") != NULL);
	WF_CHECK(buf[len - 1] == '\n');
	free(buf);
}

static void test_eta_format(void)
{
	char b[32];
	wf_progress_format_eta(b, sizeof(b), 3725);
	WF_CHECK(strcmp(b, "1h02m") == 0);
	wf_progress_format_eta(b, sizeof(b), 185);
	WF_CHECK(strcmp(b, "3m05s") == 0);
	wf_progress_format_eta(b, sizeof(b), -1);
	WF_CHECK(strcmp(b, "?") == 0);
}

int main(void)
{
	WF_RUN(test_plain_lines_every_n_steps);
	WF_RUN(test_tty_updates_in_place);
	WF_RUN(test_eta_format);
	return wf_test_summary();
}
