/* test_membership.c: the membership service of elastic allreduce
 * (worker/membership.h) on loopback, the service on a thread and each
 * worker on a thread of its own: a generation forms once MIN are ready,
 * ranks go by slot and the root is the newest committed step; a member
 * hears of a joiner and the next generation takes it in; a worker of
 * another job or without the key is refused; a restarted service goes on
 * from the generation its members name with the reason; fewer than MIN
 * for elastic_timeout ends in a FAIL that names the settings; a worker that
 * asks to join after the job's last step is told it is over. */
#include "common/error.h"
#include "common/util.h"
#include "tests/test.h"
#include "worker/membership.h"

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#define JOB 0x3e3b3e5ull

static const uint8_t KEY[32] = {7, 7, 7, 1};
static const uint8_t OTHER_KEY[32] = {8};

typedef struct service {
	wf_membership *s;
	pthread_t t;
	char addr[64];
} service;

static void *serve_main(void *arg)
{
	service *sv = arg;
	wf_err err = {0};
	wf_membership_run(sv->s, &err);
	return NULL;
}

static int service_start_on(service *sv, int port, int min, int expect, double elastic_timeout)
{
	wf_membership_cfg cfg = {.port = port,
				 .job = JOB,
				 .key = KEY,
				 .min_workers = min,
				 .expect = expect,
				 .elastic_timeout = elastic_timeout,
				 .settle = 5};
	wf_err err = {0};
	if (wf_membership_create(&sv->s, &cfg, &err) != 0)
		return -1;
	snprintf(sv->addr, sizeof(sv->addr), "127.0.0.1:%d", wf_membership_port(sv->s));
	return pthread_create(&sv->t, NULL, serve_main, sv);
}

static int service_start(service *sv, int min, int expect, double elastic_timeout)
{
	return service_start_on(sv, 0, min, expect, elastic_timeout);
}

static void service_stop(service *sv)
{
	wf_membership_stop(sv->s);
	pthread_join(sv->t, NULL);
	wf_membership_free(sv->s);
}

/* One worker: connect, ask to be placed, keep the answer. */
typedef struct worker {
	const service *sv;
	int slot;
	long step;
	uint64_t gen;
	const uint8_t *key;
	uint64_t job;
	wf_member *m; /* kept connected after the answer (a member) */
	int rc;	      /* connect's or ready's */
	wf_el_msg a;
	wf_err err;
	pthread_t t;
} worker;

static void *worker_main(void *arg)
{
	worker *w = arg;
	char addr[32];
	snprintf(addr, sizeof(addr), "127.0.0.1:%d", 30000 + w->slot);
	wf_member_cfg cfg = {.service = w->sv->addr,
			     .slot = w->slot,
			     .addr = addr,
			     .job = w->job ? w->job : JOB,
			     .key = w->key,
			     .timeout = 5};
	w->rc = wf_member_connect(&w->m, &cfg, &w->err);
	if (w->rc == 0)
		w->rc = wf_member_ready(w->m, w->gen, w->step, 10, &w->a, &w->err);
	return NULL;
}

static void worker_start(worker *w, const service *sv, int slot, long step)
{
	memset(w, 0, sizeof(*w));
	w->sv = sv;
	w->slot = slot;
	w->step = step;
	w->key = KEY;
	pthread_create(&w->t, NULL, worker_main, w);
}

static void worker_join(worker *w)
{
	pthread_join(w->t, NULL);
}

static void worker_free(worker *w)
{
	wf_el_msg_free(&w->a);
	wf_member_free(w->m);
	w->m = NULL;
}

static void test_generation_forms_by_slot_with_the_newest_root(void)
{
	service sv;
	WF_CHECK(service_start(&sv, 2, 2, 30) == 0);
	worker w[2];
	worker_start(&w[0], &sv, 5, 10); /* slot 5 first, an older step */
	worker_start(&w[1], &sv, 2, 12);
	for (int i = 0; i < 2; i++)
		worker_join(&w[i]);
	for (int i = 0; i < 2; i++) {
		WF_CHECK_MSG(w[i].rc == 0, "slot %d: %s", w[i].slot, w[i].err.msg);
		WF_CHECK(w[i].a.type == WF_EL_ASSIGN && w[i].a.gen == 1 && w[i].a.size == 2);
	}
	if (w[0].rc == 0 && w[1].rc == 0) {
		WF_CHECK_INT(w[1].a.rank, 0); /* slot 2 */
		WF_CHECK_INT(w[0].a.rank, 1); /* slot 5 */
		WF_CHECK_INT(w[0].a.root, 0); /* slot 2 has step 12 */
		WF_CHECK((long)w[0].a.step == 12);
		WF_CHECK(strcmp(w[0].a.members[1].addr, "127.0.0.1:30005") == 0);
	}
	for (int i = 0; i < 2; i++)
		worker_free(&w[i]);
	service_stop(&sv);
}

/* Up to 5 s for a notice of a joiner on member m (generation gen). */
static int hears_joiner(wf_member *m, uint64_t gen)
{
	wf_err err = {0};
	int heard = 0;
	for (int i = 0; i < 500 && !heard; i++) {
		heard = wf_member_poll_notice(m, gen, &err);
		struct timespec ts = {0, 10000000};
		nanosleep(&ts, NULL);
	}
	return heard;
}

static void test_members_hear_of_a_joiner_and_take_it_in(void)
{
	service sv;
	WF_CHECK(service_start(&sv, 1, 1, 30) == 0);
	worker m, j;
	worker_start(&m, &sv, 0, 0);
	worker_join(&m);
	WF_CHECK_MSG(m.rc == 0, "%s", m.err.msg);
	wf_err err = {0};
	WF_CHECK_INT(wf_member_poll_notice(m.m, m.a.gen, &err), 0);
	worker_start(&j, &sv, 1, 0);
	WF_CHECK_MSG(hears_joiner(m.m, m.a.gen) == 1, "no notice of the joiner");
	/* the member asks for the next generation: both are in it */
	wf_el_msg a;
	WF_CHECK(wf_member_ready(m.m, m.a.gen, 40, 10, &a, &err) == 0);
	worker_join(&j);
	WF_CHECK_MSG(j.rc == 0, "%s", j.err.msg);
	WF_CHECK(a.gen == 2 && a.size == 2 && a.rank == 0 && a.root == 0 && a.step == 40);
	WF_CHECK(j.a.gen == 2 && j.a.rank == 1 && j.a.step == 40);
	wf_el_msg_free(&a);
	worker_free(&m);
	worker_free(&j);
	service_stop(&sv);
}

/* A member asking for the next generation, on a thread of its own. */
typedef struct ask {
	wf_member *m;
	uint64_t gen;
	long step;
	int rc;
	wf_el_msg a;
	wf_err err;
} ask;

static void *ask_main(void *arg)
{
	ask *q = arg;
	q->rc = wf_member_ready(q->m, q->gen, q->step, 10, &q->a, &q->err);
	return NULL;
}

/* The service dies and a new one starts on its port (its pod restarted):
 * the members connect again naming their generation, the new service goes
 * on from it, a joiner is announced to them (also to the member that comes
 * back after the joiner asked) and the next generation is the one after. */
static void test_restarted_service_goes_on_from_the_members_generation(void)
{
	service sv;
	WF_CHECK(service_start(&sv, 1, 2, 30) == 0);
	int port = wf_membership_port(sv.s);
	worker m0, m1, j;
	worker_start(&m0, &sv, 0, 0);
	worker_start(&m1, &sv, 1, 0);
	worker_join(&m0);
	worker_join(&m1);
	WF_CHECK_MSG(m0.rc == 0 && m1.rc == 0, "%s %s", m0.err.msg, m1.err.msg);
	WF_CHECK(m0.a.gen == 1 && m0.a.size == 2);
	service_stop(&sv);
	wf_err err = {0};
	WF_CHECK(wf_member_poll_notice(m0.m, 1, &err) < 0); /* it is gone */
	WF_CHECK(!wf_member_connected(m0.m));
	WF_CHECK(service_start_on(&sv, port, 1, 2, 30) == 0);
	WF_CHECK_MSG(wf_member_reconnect(m0.m, 1, 5, &err) == 0, "%s", err.msg);
	worker_start(&j, &sv, 2, -1);
	WF_CHECK_MSG(hears_joiner(m0.m, 1) == 1, "member 0 heard of no joiner");
	WF_CHECK(wf_member_poll_notice(m1.m, 1, &err) < 0);
	WF_CHECK_MSG(wf_member_reconnect(m1.m, 1, 5, &err) == 0, "%s", err.msg);
	WF_CHECK_MSG(hears_joiner(m1.m, 1) == 1, "member 1 (back after the joiner) heard nothing");
	/* both ask for the next generation at once (member 0 on a thread) */
	ask q = {.m = m0.m, .gen = 1, .step = 10};
	pthread_t t;
	WF_CHECK_INT(pthread_create(&t, NULL, ask_main, &q), 0);
	wf_el_msg a1;
	WF_CHECK_MSG(wf_member_ready(m1.m, 1, 12, 10, &a1, &err) == 0, "%s", err.msg);
	pthread_join(t, NULL);
	WF_CHECK_MSG(q.rc == 0, "%s", q.err.msg);
	wf_el_msg a0 = q.a;
	worker_join(&j);
	WF_CHECK_MSG(j.rc == 0, "%s", j.err.msg);
	WF_CHECK(a0.gen == 2 && a0.size == 3 && a0.rank == 0 && a0.root == 1 && a0.step == 12);
	WF_CHECK(a1.gen == 2 && a1.rank == 1 && j.a.gen == 2 && j.a.rank == 2);
	wf_el_msg_free(&a0);
	wf_el_msg_free(&a1);
	worker_free(&m0);
	worker_free(&m1);
	worker_free(&j);
	service_stop(&sv);
}

static void test_other_job_and_missing_key_are_refused(void)
{
	service sv;
	WF_CHECK(service_start(&sv, 1, 1, 30) == 0);
	worker w;
	memset(&w, 0, sizeof(w));
	w.sv = &sv;
	w.slot = 0;
	w.key = KEY;
	w.job = JOB + 1;
	worker_main(&w);
	WF_CHECK_INT(w.rc, WF_EINVAL);
	WF_CHECK_MSG(strstr(w.err.msg, "another job") != NULL, "%s", w.err.msg);
	worker_free(&w);
	memset(&w, 0, sizeof(w));
	w.sv = &sv;
	w.key = OTHER_KEY;
	worker_main(&w);
	WF_CHECK_INT(w.rc, WF_EINVAL);
	WF_CHECK_MSG(strstr(w.err.msg, "did not prove it holds the job key") != NULL, "%s",
		     w.err.msg);
	worker_free(&w);
	memset(&w, 0, sizeof(w));
	w.sv = &sv;
	w.key = NULL; /* --insecure against a keyed service */
	worker_main(&w);
	WF_CHECK_INT(w.rc, WF_EINVAL);
	WF_CHECK_MSG(strstr(w.err.msg, "job key") != NULL, "%s", w.err.msg);
	worker_free(&w);
	service_stop(&sv);
}

static void test_fewer_than_min_fails_after_the_timeout(void)
{
	service sv;
	WF_CHECK(service_start(&sv, 2, 2, 1) == 0);
	worker w;
	double t0 = wf_now();
	worker_start(&w, &sv, 0, 0);
	worker_join(&w);
	double waited = wf_now() - t0;
	WF_CHECK_INT(w.rc, WF_EINVAL);
	WF_CHECK_MSG(strstr(w.err.msg, "fewer than strategy.min_workers 2") &&
			     strstr(w.err.msg, "strategy.elastic_timeout"),
		     "%s", w.err.msg);
	WF_CHECK_MSG(waited >= 1 && waited < 8, "failed after %.1f s, want about 1", waited);
	worker_free(&w);
	service_stop(&sv);
}

static void test_joiner_after_the_last_step_is_told_it_is_over(void)
{
	service sv;
	WF_CHECK(service_start(&sv, 1, 1, 30) == 0);
	worker m, j;
	worker_start(&m, &sv, 0, 0);
	worker_join(&m);
	WF_CHECK_MSG(m.rc == 0, "%s", m.err.msg);
	wf_member_done(m.m, 99);
	worker_start(&j, &sv, 1, 0);
	worker_join(&j);
	WF_CHECK_MSG(j.rc == 1 && j.a.type == WF_EL_DONE && j.a.step == 99, "rc %d: %s", j.rc,
		     j.err.msg);
	worker_free(&m);
	worker_free(&j);
	service_stop(&sv);
}

static void test_no_service_is_a_transient_error_naming_it(void)
{
	wf_member *m = NULL;
	wf_err err = {0};
	wf_member_cfg cfg = {.service = "127.0.0.1:1",
			     .slot = 0,
			     .addr = "127.0.0.1:2",
			     .job = JOB,
			     .key = KEY,
			     .timeout = 0.5};
	WF_CHECK_INT(wf_member_connect(&m, &cfg, &err), WF_ETRANSIENT);
	WF_CHECK_MSG(strstr(err.msg, "127.0.0.1:1") && strstr(err.msg, "strategy.elastic_service"),
		     "%s", err.msg);
	cfg.service = "no-port";
	WF_CHECK_INT(wf_member_connect(&m, &cfg, &err), WF_EINVAL);
}

int main(void)
{
	signal(SIGPIPE, SIG_IGN);
	WF_RUN(test_generation_forms_by_slot_with_the_newest_root);
	WF_RUN(test_members_hear_of_a_joiner_and_take_it_in);
	WF_RUN(test_restarted_service_goes_on_from_the_members_generation);
	WF_RUN(test_other_job_and_missing_key_are_refused);
	WF_RUN(test_fewer_than_min_fails_after_the_timeout);
	WF_RUN(test_joiner_after_the_last_step_is_told_it_is_over);
	WF_RUN(test_no_service_is_a_transient_error_naming_it);
	return wf_test_summary();
}
