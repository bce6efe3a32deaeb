/* A client and a parameter server that disagree about security: plain TCP
 * against CURVE (both ways), a wrong server key, a wrong client key. Each
 * register must come back within its bound (never hang in a send), name the
 * mismatch, and a refusal of the keys is permanent (not WF_ETRANSIENT, which
 * Kubernetes would retry forever), while nothing listening, or a proxy that
 * drops every connection, stays transient. Each case runs the client in a forked
 * child that the test kills when it overruns; servers are forked processes
 * killed at the end of each case. */
#include "tests/test.h"

#include "common/util.h"
#include "ps/auth.h"
#include "ps/client.h"
#include "ps/placement.h"
#include "ps/server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define JOB	  777
#define NPARAMS	  1000
#define CHUNKB	  1024
#define BOUND_S	  15 /* a case still running after this long hangs */
#define CONNECT_S 4.0

static char tmpdir[256], endpoint[64];
static int port;
static pid_t server_pid;

static void stop_server(void)
{
	if (server_pid > 0) {
		kill(server_pid, SIGKILL);
		waitpid(server_pid, NULL, 0);
	}
	server_pid = 0;
}

static void start_server(const wf_ps_keys *keys)
{
	static char bind[64];
	port++;
	snprintf(bind, sizeof(bind), "tcp://127.0.0.1:%d", port);
	snprintf(endpoint, sizeof(endpoint), "tcp://127.0.0.1:%d", port);
	server_pid = fork();
	if (server_pid == 0) {
		char log[512];
		snprintf(log, sizeof(log), "%s/ps-%d.log", tmpdir, port);
		if (!freopen(log, "a", stderr))
			_exit(3);
		wf_ps_server_cfg c;
		wf_ps_server_cfg_default(&c);
		c.bind = bind;
		c.nservers = 1;
		c.nworkers = 1;
		c.job_id = JOB;
		c.nparams = NPARAMS;
		c.chunk_bytes = CHUNKB;
		c.batch = 4;
		c.stats_every = 0;
		c.stall_timeout = 0;
		c.keys = keys;
		wf_err err = {0};
		int rc = wf_ps_server_run(&c, &err);
		if (rc)
			fprintf(stderr, "server exit: %s\n", err.msg);
		_exit(rc ? 1 : 0);
	}
}

typedef struct outcome {
	int rc;
	double seconds;
	char msg[1024];
} outcome;

/* Register a client with keys (NULL: plain TCP) in a forked child; the
 * child's result comes back through a pipe. rc 1000: it hung (killed). */
static outcome try_register(const wf_ps_keys *keys, const char *key_origin)
{
	outcome o = {.rc = 1000};
	int fd[2];
	if (pipe(fd) != 0)
		return o;
	pid_t pid = fork();
	if (pid == 0) {
		close(fd[0]);
		static float p[NPARAMS];
		wf_ps_placement pl;
		wf_ps_place(&pl, NULL, 0, NPARAMS, 1, CHUNKB, NULL);
		const char *eps[1] = {endpoint};
		wf_ps_client_cfg cc = {.nservers = 1,
				       .endpoints = eps,
				       .job_id = JOB,
				       .role = WF_PS_ROLE_WORKER,
				       .pl = &pl,
				       .params = p,
				       .timeout = 5,
				       .connect_timeout = CONNECT_S,
				       .keys = keys,
				       .key_origin = key_origin};
		outcome r = {0};
		wf_err e = {0};
		wf_ps_client *c = NULL;
		double t0 = wf_now();
		r.rc = wf_ps_client_create(&c, &cc, &e);
		if (r.rc == 0)
			r.rc = wf_ps_client_register(c, 0, NULL, NULL, &e);
		r.seconds = wf_now() - t0;
		snprintf(r.msg, sizeof(r.msg), "%s", e.msg);
		if (write(fd[1], &r, sizeof(r)) != (ssize_t)sizeof(r))
			_exit(2);
		_exit(0); /* no free: a hung close must not hide the result */
	}
	close(fd[1]);
	for (int i = 0; i < BOUND_S * 10; i++) {
		if (waitpid(pid, NULL, WNOHANG) == pid) {
			pid = 0;
			break;
		}
		struct timespec ts = {0, 100 * 1000 * 1000};
		nanosleep(&ts, NULL);
	}
	if (pid) {
		kill(pid, SIGKILL);
		waitpid(pid, NULL, 0);
		snprintf(o.msg, sizeof(o.msg), "register still running after %d s", BOUND_S);
		close(fd[0]);
		return o;
	}
	if (read(fd[0], &o, sizeof(o)) != (ssize_t)sizeof(o))
		o.rc = 1001;
	close(fd[0]);
	printf("  rc %d after %.1f s: %s\n", o.rc, o.seconds, o.msg);
	return o;
}

static wf_ps_keys cluster, other;

static void test_plain_client_against_curve_server_is_named(void)
{
	start_server(&cluster);
	outcome o = try_register(NULL, NULL);
	stop_server();
	WF_CHECK_MSG(o.rc != 1000, "%s", o.msg);
	WF_CHECK_MSG(o.rc != 0 && o.rc != WF_ETRANSIENT, "rc %d: %s", o.rc, o.msg);
	WF_CHECK_MSG(strstr(o.msg, "expects CURVE") && strstr(o.msg, endpoint), "%s", o.msg);
}

static void test_curve_client_against_plain_server_is_named(void)
{
	start_server(NULL);
	outcome o = try_register(&cluster, "keys/here");
	stop_server();
	WF_CHECK_MSG(o.rc != 1000, "%s", o.msg);
	WF_CHECK_MSG(o.rc != 0 && o.rc != WF_ETRANSIENT, "rc %d: %s", o.rc, o.msg);
	WF_CHECK_MSG(strstr(o.msg, "does not speak CURVE") && strstr(o.msg, endpoint), "%s", o.msg);
}

static void test_wrong_client_key_is_a_permanent_refusal(void)
{
	wf_ps_keys k = cluster; /* the real servers, but not the cluster's client key */
	memcpy(k.client_public, other.client_public, sizeof(k.client_public));
	memcpy(k.client_secret, other.client_secret, sizeof(k.client_secret));
	start_server(&cluster);
	outcome o = try_register(&k, "/some/key/dir");
	stop_server();
	WF_CHECK_MSG(o.rc != 1000, "%s", o.msg);
	WF_CHECK_MSG(o.rc != 0 && o.rc != WF_ETRANSIENT, "rc %d: %s", o.rc, o.msg);
	WF_CHECK_MSG(strstr(o.msg, "/some/key/dir") && strstr(o.msg, endpoint), "%s", o.msg);
	WF_CHECK_MSG(o.seconds < CONNECT_S, "took %.1f s: the refusal was not noticed", o.seconds);
}

static void test_other_clusters_keys_are_a_permanent_refusal(void)
{
	start_server(&cluster);
	outcome o = try_register(&other, "/other/keys");
	stop_server();
	WF_CHECK_MSG(o.rc != 1000, "%s", o.msg);
	WF_CHECK_MSG(o.rc != 0 && o.rc != WF_ETRANSIENT, "rc %d: %s", o.rc, o.msg);
	WF_CHECK_MSG(strstr(o.msg, "/other/keys") && strstr(o.msg, endpoint), "%s", o.msg);
}

static void test_nobody_listening_stays_transient(void)
{
	port++;
	snprintf(endpoint, sizeof(endpoint), "tcp://127.0.0.1:%d", port);
	outcome o = try_register(&cluster, "keys/here");
	WF_CHECK_INT(o.rc, WF_ETRANSIENT);
	WF_CHECK_MSG(strstr(o.msg, "did not answer"), "%s", o.msg);
}

/* Something that accepts connections and closes them at once (a proxy in
 * front of a pod that is not ready): not a key mismatch, so transient. */
static void test_dropping_proxy_stays_transient(void)
{
	/* a port the kernel picks: one of the range the others use may be a
	 * client connection's ephemeral port on a busy machine */
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = 0};
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	socklen_t alen = sizeof(a);
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	WF_CHECK(fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0 &&
		 listen(fd, 16) == 0 && getsockname(fd, (struct sockaddr *)&a, &alen) == 0);
	snprintf(endpoint, sizeof(endpoint), "tcp://127.0.0.1:%d", ntohs(a.sin_port));
	server_pid = fork();
	if (server_pid == 0) {
		for (;;) {
			int c = accept(fd, NULL, NULL);
			if (c >= 0)
				close(c);
		}
	}
	close(fd);
	outcome o = try_register(&cluster, "keys/here");
	stop_server();
	WF_CHECK_INT(o.rc, WF_ETRANSIENT);
}

static void test_matching_keys_register(void)
{
	start_server(&cluster);
	outcome o = try_register(&cluster, "keys/here");
	stop_server();
	WF_CHECK_MSG(o.rc == 0, "rc %d: %s", o.rc, o.msg);
}

int main(void)
{
	snprintf(tmpdir, sizeof(tmpdir), "/tmp/weft-test-psmode-XXXXXX");
	if (!mkdtemp(tmpdir)) {
		perror("mkdtemp");
		return 1;
	}
	signal(SIGPIPE, SIG_IGN);
	atexit(stop_server);
	wf_err e = {0};
	if (!wf_ps_curve_available()) {
		printf("SKIP: libzmq without CURVE\n");
		return 77;
	}
	if (wf_ps_keys_new(&cluster, &e) || wf_ps_keys_new(&other, &e)) {
		fprintf(stderr, "keys: %s\n", e.msg);
		return 1;
	}
	/* below the kernel's ephemeral range, apart from test_server's ports */
	port = 22000 + (int)(getpid() % 1000) * 10;
	WF_RUN(test_matching_keys_register);
	WF_RUN(test_plain_client_against_curve_server_is_named);
	WF_RUN(test_curve_client_against_plain_server_is_named);
	WF_RUN(test_wrong_client_key_is_a_permanent_refusal);
	WF_RUN(test_other_clusters_keys_are_a_permanent_refusal);
	WF_RUN(test_nobody_listening_stays_transient);
	WF_RUN(test_dropping_proxy_stays_transient);
	stop_server();
	char cmd[300];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir);
	if (wf_test_failed_tests == 0 && system(cmd) != 0)
		fprintf(stderr, "could not remove %s\n", tmpdir);
	return wf_test_summary();
}
