/* test_rendezvous.c: the NCCL bootstrap without MPI (worker/rendezvous.h)
 * with real processes on loopback: a chief hands a 128-byte id to workers
 * that started before it, a worker whose chief never comes fails with exit
 * 138 naming the address, a chief names the rank that never came, a rank of
 * another job is refused, junk on the chief's port harms nothing, a
 * chief whose port is taken exits 138; with the job key, only key holders
 * get the id and count as served, and a rank refuses a chief without it. Each
 * process exits the way weft's main would (wf_exit_status). */
#include "common/error.h"
#include "common/util.h"
#include "tests/test.h"
#include "worker/rendezvous.h"

#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define JOB 0x5eedf00dull

/* A child process running one side of the rendezvous. */
typedef struct child {
	pid_t pid;
	int fd; /* read end: rc, then the id, then the error message */
	int rc; /* wf_rdv_exchange's code */
	int status;
	uint8_t id[WF_RDV_ID_BYTES];
	char msg[1024];
} child;

static int free_port(void)
{
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t len = sizeof(a);
	if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof(a)) != 0 ||
	    getsockname(fd, (struct sockaddr *)&a, &len) != 0) {
		if (fd >= 0)
			close(fd);
		return -1;
	}
	close(fd);
	return ntohs(a.sin_port);
}

static void fake_id(uint8_t *id, uint64_t seed)
{
	wf_rng r;
	wf_rng_seed(&r, seed);
	for (int i = 0; i < WF_RDV_ID_BYTES; i++)
		id[i] = (uint8_t)wf_rng_u64(&r);
}

static void write_all(int fd, const void *p, size_t n)
{
	const char *c = p;
	while (n > 0) {
		ssize_t k = write(fd, c, n);
		if (k <= 0)
			return;
		c += k;
		n -= (size_t)k;
	}
}

/* Fork a process that runs wf_rdv_exchange(cfg) (with id for the chief)
 * and exits with weft's exit status for its result. */
static int spawn(child *ch, const wf_rdv_cfg *cfg, const uint8_t *id)
{
	int p[2];
	memset(ch, 0, sizeof(*ch));
	if (pipe(p) != 0)
		return -1;
	fflush(NULL);
	ch->pid = fork();
	if (ch->pid < 0)
		return -1;
	if (ch->pid == 0) {
		close(p[0]);
		wf_err err = {0};
		uint8_t mine[WF_RDV_ID_BYTES] = {0};
		if (id)
			memcpy(mine, id, sizeof(mine));
		int rc = wf_rdv_exchange(cfg, mine, &err);
		write_all(p[1], &rc, sizeof(rc));
		write_all(p[1], mine, sizeof(mine));
		write_all(p[1], err.msg, sizeof(err.msg));
		_exit(wf_exit_status(rc));
	}
	close(p[1]);
	ch->fd = p[0];
	return 0;
}

/* Collect a child's result within limit seconds; kills it when it hangs.
 * Returns 0 when it exited in time. */
static int reap(child *ch, double limit)
{
	double deadline = wf_now() + limit;
	size_t got = 0, want = sizeof(ch->rc) + sizeof(ch->id) + sizeof(ch->msg);
	char buf[sizeof(int) + WF_RDV_ID_BYTES + 1024];
	while (got < want) {
		int ms = (int)((deadline - wf_now()) * 1000);
		struct pollfd pf = {.fd = ch->fd, .events = POLLIN};
		if (ms <= 0 || poll(&pf, 1, ms) <= 0)
			break;
		ssize_t k = read(ch->fd, buf + got, want - got);
		if (k <= 0)
			break;
		got += (size_t)k;
	}
	close(ch->fd);
	if (got < want) {
		kill(ch->pid, SIGKILL);
		waitpid(ch->pid, &ch->status, 0);
		return -1;
	}
	memcpy(&ch->rc, buf, sizeof(ch->rc));
	memcpy(ch->id, buf + sizeof(ch->rc), sizeof(ch->id));
	memcpy(ch->msg, buf + sizeof(ch->rc) + sizeof(ch->id), sizeof(ch->msg));
	ch->msg[sizeof(ch->msg) - 1] = '\0';
	waitpid(ch->pid, &ch->status, 0);
	return 0;
}

static int exit_code(const child *ch)
{
	return WIFEXITED(ch->status) ? WEXITSTATUS(ch->status) : -1;
}

/* Rank cfg, run now, gets the chief's id (checked failures name it). */
static void rank_gets_id(child *w, const wf_rdv_cfg *cfg, const uint8_t *id, double limit)
{
	WF_CHECK(spawn(w, cfg, NULL) == 0);
	WF_CHECK(reap(w, limit) == 0);
	WF_CHECK_MSG(w->rc == 0, "rank %d: %s", cfg->rank, w->msg);
	WF_CHECK(memcmp(w->id, id, WF_RDV_ID_BYTES) == 0);
}

static void nap(double s)
{
	struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
	nanosleep(&ts, NULL);
}

static void be32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)(v >> 24), p[1] = (uint8_t)(v >> 16), p[2] = (uint8_t)(v >> 8),
	p[3] = (uint8_t)v;
}

/* Connect to the chief on loopback port, retrying while it comes up; -1. */
static int connect_chief(int port)
{
	struct sockaddr_in a = {.sin_family = AF_INET,
				.sin_port = htons((uint16_t)port),
				.sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	for (int tries = 0; tries < 200; tries++) {
		int fd = socket(AF_INET, SOCK_STREAM, 0);
		if (fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0)
			return fd;
		if (fd >= 0)
			close(fd);
		nap(0.05);
	}
	return -1;
}

static int read_all(int fd, void *p, size_t n)
{
	char *c = p;
	while (n > 0) {
		struct pollfd pf = {.fd = fd, .events = POLLIN};
		if (poll(&pf, 1, 5000) <= 0)
			return -1;
		ssize_t k = read(fd, c, n);
		if (k <= 0)
			return -1;
		c += k;
		n -= (size_t)k;
	}
	return 0;
}

static void test_chief_hands_its_id_to_two_workers(void)
{
	char addr[64];
	int port = free_port();
	WF_CHECK(port > 0);
	snprintf(addr, sizeof(addr), "127.0.0.1:%d", port);
	uint8_t id[WF_RDV_ID_BYTES];
	fake_id(id, 42);
	child w[2], chief;
	wf_rdv_cfg cw[2], cc = {.rank = 0, .size = 3, .chief = addr, .job = JOB, .timeout = 20};
	/* The workers come up first and retry until the chief listens. */
	for (int i = 0; i < 2; i++) {
		cw[i] = (wf_rdv_cfg){
			.rank = i + 1, .size = 3, .chief = addr, .job = JOB, .timeout = 20};
		WF_CHECK(spawn(&w[i], &cw[i], NULL) == 0);
	}
	nap(0.3);
	WF_CHECK(spawn(&chief, &cc, id) == 0);
	for (int i = 0; i < 2; i++) {
		WF_CHECK_MSG(reap(&w[i], 25) == 0, "worker %d hung", i + 1);
		WF_CHECK_MSG(w[i].rc == 0, "worker %d: %s", i + 1, w[i].msg);
		WF_CHECK_INT(exit_code(&w[i]), 0);
		WF_CHECK_MSG(memcmp(w[i].id, id, sizeof(id)) == 0, "worker %d got another id",
			     i + 1);
	}
	WF_CHECK_MSG(reap(&chief, 25) == 0, "the chief did not return once both had the id");
	WF_CHECK_MSG(chief.rc == 0, "chief: %s", chief.msg);
	WF_CHECK_INT(exit_code(&chief), 0);
}

static void test_worker_without_chief_exits_138(void)
{
	char addr[64];
	int port = free_port();
	snprintf(addr, sizeof(addr), "127.0.0.1:%d", port);
	wf_rdv_cfg c = {.rank = 1, .size = 2, .chief = addr, .job = JOB, .timeout = 1.0};
	child w;
	double t0 = wf_now();
	WF_CHECK(spawn(&w, &c, NULL) == 0);
	WF_CHECK_MSG(reap(&w, 10) == 0, "the worker hung without its chief");
	WF_CHECK(wf_now() - t0 < 5);
	WF_CHECK_INT(w.rc, WF_ETRANSIENT);
	WF_CHECK_INT(exit_code(&w), WF_EXIT_TRANSIENT);
	WF_CHECK_MSG(strstr(w.msg, addr) != NULL, "message does not name %s: %s", addr, w.msg);
	WF_CHECK_MSG(strstr(w.msg, "no chief") != NULL, "unclear message: %s", w.msg);
}

static void test_unresolvable_chief_exits_138(void)
{
	wf_rdv_cfg c = {.rank = 2,
			.size = 3,
			.chief = "chief-0.weft-chief.invalid:2222",
			.job = JOB,
			.timeout = 1.0};
	child w;
	WF_CHECK(spawn(&w, &c, NULL) == 0);
	WF_CHECK_MSG(reap(&w, 10) == 0, "the worker hung on a name that never resolves");
	WF_CHECK_INT(exit_code(&w), WF_EXIT_TRANSIENT);
	WF_CHECK_MSG(strstr(w.msg, "chief-0.weft-chief.invalid:2222") != NULL, "%s", w.msg);
	WF_CHECK_MSG(strstr(w.msg, "resolve") != NULL, "does not say why: %s", w.msg);
}

static void test_chief_names_the_rank_that_never_came(void)
{
	char addr[64];
	int port = free_port();
	snprintf(addr, sizeof(addr), "127.0.0.1:%d", port);
	uint8_t id[WF_RDV_ID_BYTES];
	fake_id(id, 7);
	wf_rdv_cfg cc = {.rank = 0, .size = 3, .chief = addr, .job = JOB, .timeout = 1.5};
	wf_rdv_cfg cw = {.rank = 1, .size = 3, .chief = addr, .job = JOB, .timeout = 10};
	child chief, w;
	WF_CHECK(spawn(&chief, &cc, id) == 0);
	rank_gets_id(&w, &cw, id, 15);
	WF_CHECK(reap(&chief, 15) == 0);
	WF_CHECK_INT(exit_code(&chief), WF_EXIT_TRANSIENT);
	WF_CHECK_MSG(strstr(chief.msg, "rank 2 of 3 did not connect") != NULL, "%s", chief.msg);
}

static void test_rank_of_another_job_is_refused(void)
{
	char addr[64];
	int port = free_port();
	snprintf(addr, sizeof(addr), "127.0.0.1:%d", port);
	uint8_t id[WF_RDV_ID_BYTES];
	fake_id(id, 9);
	wf_rdv_cfg cc = {.rank = 0, .size = 2, .chief = addr, .job = JOB, .timeout = 10};
	wf_rdv_cfg bad = {.rank = 1, .size = 2, .chief = addr, .job = JOB + 1, .timeout = 10};
	wf_rdv_cfg big = {.rank = 1, .size = 4, .chief = addr, .job = JOB, .timeout = 10};
	wf_rdv_cfg good = {.rank = 1, .size = 2, .chief = addr, .job = JOB, .timeout = 10};
	child chief, w1, w2, w3;
	WF_CHECK(spawn(&chief, &cc, id) == 0);
	WF_CHECK(spawn(&w1, &bad, NULL) == 0);
	WF_CHECK(reap(&w1, 15) == 0);
	WF_CHECK_INT(w1.rc, WF_EINVAL); /* permanent: a restart cannot help */
	WF_CHECK_MSG(strstr(w1.msg, "another job") != NULL, "%s", w1.msg);
	WF_CHECK(spawn(&w2, &big, NULL) == 0);
	WF_CHECK(reap(&w2, 15) == 0);
	WF_CHECK_INT(w2.rc, WF_EINVAL);
	WF_CHECK_MSG(strstr(w2.msg, "4 ranks") != NULL, "%s", w2.msg);
	/* The refusals did not count: the chief still waits for the real rank 1. */
	rank_gets_id(&w3, &good, id, 15);
	WF_CHECK(reap(&chief, 15) == 0);
	WF_CHECK_MSG(chief.rc == 0, "%s", chief.msg);
}

static void test_junk_on_the_chiefs_port_is_dropped(void)
{
	char addr[64];
	int port = free_port();
	snprintf(addr, sizeof(addr), "127.0.0.1:%d", port);
	uint8_t id[WF_RDV_ID_BYTES];
	fake_id(id, 11);
	wf_rdv_cfg cc = {.rank = 0, .size = 2, .chief = addr, .job = JOB, .timeout = 15};
	wf_rdv_cfg cw = {.rank = 1, .size = 2, .chief = addr, .job = JOB, .timeout = 15};
	child chief, w;
	WF_CHECK(spawn(&chief, &cc, id) == 0);
	/* A probe that sends an HTTP request, and one that connects and leaves. */
	for (int k = 0; k < 2; k++) {
		int fd = connect_chief(port);
		WF_CHECK(fd >= 0);
		if (fd >= 0 && k == 0) {
			const char junk[] = "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n";
			write_all(fd, junk, sizeof(junk) - 1);
		}
		if (fd >= 0)
			close(fd);
	}
	rank_gets_id(&w, &cw, id, 20);
	WF_CHECK(reap(&chief, 20) == 0);
	WF_CHECK_MSG(chief.rc == 0, "%s", chief.msg);
}

static void test_chief_whose_port_is_taken_exits_138(void)
{
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_ANY)};
	socklen_t len = sizeof(a);
	WF_CHECK(fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0 && listen(fd, 1) == 0 &&
		 getsockname(fd, (struct sockaddr *)&a, &len) == 0);
	char addr[64];
	snprintf(addr, sizeof(addr), "127.0.0.1:%d", ntohs(a.sin_port));
	uint8_t id[WF_RDV_ID_BYTES];
	fake_id(id, 5);
	wf_rdv_cfg cc = {.rank = 0, .size = 2, .chief = addr, .job = JOB, .timeout = 5};
	child chief;
	WF_CHECK(spawn(&chief, &cc, id) == 0);
	WF_CHECK(reap(&chief, 10) == 0);
	WF_CHECK_INT(exit_code(&chief), WF_EXIT_TRANSIENT);
	WF_CHECK_MSG(strstr(chief.msg, "cannot listen on port") != NULL, "%s", chief.msg);
	close(fd);
}

static void test_bad_address_is_a_permanent_error(void)
{
	uint8_t id[WF_RDV_ID_BYTES] = {0};
	wf_err err = {0};
	wf_rdv_cfg c = {.rank = 1, .size = 2, .chief = "chief-0-no-port", .job = JOB};
	WF_CHECK_INT(wf_rdv_exchange(&c, id, &err), WF_EINVAL);
	WF_CHECK_MSG(strstr(err.msg, "chief-0-no-port") != NULL, "%s", err.msg);
	c.chief = "127.0.0.1:1";
	c.rank = 2;
	WF_CHECK_INT(wf_rdv_exchange(&c, id, &err), WF_EINVAL);
	WF_CHECK_MSG(strstr(err.msg, "rank 2") != NULL, "%s", err.msg);
}

static void test_keyed_rendezvous_hands_the_id_to_key_holders_only(void)
{
	char addr[64];
	int port = free_port();
	snprintf(addr, sizeof(addr), "127.0.0.1:%d", port);
	uint8_t id[WF_RDV_ID_BYTES], key[WF_RDV_KEY_BYTES], other[WF_RDV_KEY_BYTES];
	fake_id(id, 21);
	wf_rdv_key_derive(key, "rJ{0b9JcW1yLk(v0x8[5wF-Jt6b4s0#k8h1!rQ2e");
	wf_rdv_key_derive(other, "x0b9JcW1yLk(v0x8[5wF-Jt6b4s0#k8h1!rQ2e{0");
	wf_rdv_cfg cc = {
		.rank = 0, .size = 2, .chief = addr, .job = JOB, .timeout = 20, .key = key};
	wf_rdv_cfg wrong = {
		.rank = 1, .size = 2, .chief = addr, .job = JOB, .timeout = 10, .key = other};
	wf_rdv_cfg none = {.rank = 1, .size = 2, .chief = addr, .job = JOB, .timeout = 10};
	wf_rdv_cfg good = {
		.rank = 1, .size = 2, .chief = addr, .job = JOB, .timeout = 10, .key = key};
	child chief, w1, w2, w3;
	WF_CHECK(spawn(&chief, &cc, id) == 0);
	/* a rank with another key cannot open the id and says why */
	WF_CHECK(spawn(&w1, &wrong, NULL) == 0);
	WF_CHECK(reap(&w1, 15) == 0);
	WF_CHECK_INT(w1.rc, WF_EINVAL);
	WF_CHECK_MSG(strstr(w1.msg, "did not prove it holds the job key") != NULL, "%s", w1.msg);
	WF_CHECK(memcmp(w1.id, id, sizeof(id)) != 0);
	/* a rank without a key is refused with the reason */
	WF_CHECK(spawn(&w2, &none, NULL) == 0);
	WF_CHECK(reap(&w2, 15) == 0);
	WF_CHECK_INT(w2.rc, WF_EINVAL);
	WF_CHECK_MSG(strstr(w2.msg, "cluster.key_dir") != NULL, "%s", w2.msg);
	WF_CHECK(memcmp(w2.id, id, sizeof(id)) != 0);
	/* an outsider who speaks the protocol as rank 1 without the key: the
	 * reply holds no readable id and its forged proof does not count */
	int fd = connect_chief(port);
	WF_CHECK(fd >= 0);
	uint8_t hello[56] = {0}, reply[320], proof[32];
	be32(hello, 0x57465256u);
	be32(hello + 4, 2);
	be32(hello + 8, 1);
	be32(hello + 12, 2);
	be32(hello + 16, (uint32_t)(JOB >> 32));
	be32(hello + 20, (uint32_t)JOB);
	write_all(fd, hello, sizeof(hello));
	WF_CHECK(read_all(fd, reply, sizeof(reply)) == 0);
	WF_CHECK_MSG(memmem(reply, sizeof(reply), id, 16) == NULL, "the id went out in the clear");
	memset(proof, 0xab, sizeof(proof));
	write_all(fd, proof, sizeof(proof));
	close(fd);
	/* the chief still waits for the real rank 1, which gets the id */
	rank_gets_id(&w3, &good, id, 15);
	WF_CHECK(reap(&chief, 15) == 0);
	WF_CHECK_MSG(chief.rc == 0, "%s", chief.msg);
}

/* Someone who answers on the chief's address without the key (a stand-in
 * that would make the ranks join its NCCL communicator): the rank refuses
 * its id. */
static void test_keyed_rank_refuses_a_chief_without_the_key(void)
{
	int lfd = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t len = sizeof(a);
	WF_CHECK(lfd >= 0 && bind(lfd, (struct sockaddr *)&a, sizeof(a)) == 0 &&
		 listen(lfd, 4) == 0 && getsockname(lfd, (struct sockaddr *)&a, &len) == 0);
	char addr[64];
	snprintf(addr, sizeof(addr), "127.0.0.1:%d", ntohs(a.sin_port));
	uint8_t key[WF_RDV_KEY_BYTES];
	wf_rdv_key_derive(key, "rJ{0b9JcW1yLk(v0x8[5wF-Jt6b4s0#k8h1!rQ2e");
	wf_rdv_cfg cw = {
		.rank = 1, .size = 2, .chief = addr, .job = JOB, .timeout = 10, .key = key};
	child w;
	WF_CHECK(spawn(&w, &cw, NULL) == 0);
	struct pollfd pf = {.fd = lfd, .events = POLLIN};
	WF_CHECK(poll(&pf, 1, 10000) == 1);
	int fd = accept(lfd, NULL, NULL);
	WF_CHECK(fd >= 0);
	uint8_t hello[56], reply[320];
	WF_CHECK(read_all(fd, hello, sizeof(hello)) == 0);
	memset(reply, 0x5a, sizeof(reply)); /* any nonce and box */
	be32(reply, 0x57465256u);
	be32(reply + 4, 2);
	be32(reply + 8, 0);
	be32(reply + 12, 2);
	write_all(fd, reply, sizeof(reply));
	WF_CHECK(reap(&w, 15) == 0);
	WF_CHECK_INT(w.rc, WF_EINVAL);
	WF_CHECK_MSG(strstr(w.msg, "did not prove it holds the job key") != NULL, "%s", w.msg);
	close(fd);
	close(lfd);
}

int main(void)
{
	signal(SIGPIPE, SIG_IGN);
	WF_RUN(test_chief_hands_its_id_to_two_workers);
	WF_RUN(test_keyed_rendezvous_hands_the_id_to_key_holders_only);
	WF_RUN(test_keyed_rank_refuses_a_chief_without_the_key);
	WF_RUN(test_worker_without_chief_exits_138);
	WF_RUN(test_unresolvable_chief_exits_138);
	WF_RUN(test_chief_names_the_rank_that_never_came);
	WF_RUN(test_rank_of_another_job_is_refused);
	WF_RUN(test_junk_on_the_chiefs_port_is_dropped);
	WF_RUN(test_chief_whose_port_is_taken_exits_138);
	WF_RUN(test_bad_address_is_a_permanent_error);
	return wf_test_summary();
}
