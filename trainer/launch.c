/* launch.c: `weft launch`: a parameter-server cluster as child processes of
 * this one. Each child runs `weft ps` or `weft train` with its TF_CONFIG;
 * its stdout/stderr come back through pipes and are printed line by line
 * with "[role:index] " in front. Children sit in their own process groups
 * (a terminal's Ctrl-C reaches only the launcher, which forwards it once)
 * and die with the launcher (PR_SET_PDEATHSIG). */
#include "trainer/launch.h"

#include "common/events.h"
#include "common/cpus.h"
#include "common/log.h"
#include "common/util.h"
#include "trainer/cli.h"
#include "trainer/config.h"
#include "trainer/netem.h"
#include "trainer/job.h"
#include "ps/auth.h"
#include "trainer/cluster.h"
#include "worker/rendezvous.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#define MAX_PROCS      64
#define LINE_MAX_BYTES 8192
#define MAX_ARGS       256
#define LATE_GRACE     2.0  /* seconds a process may outlive the job's end (stop_late_workers) */
#define PS_GRACE       15.0 /* ... a server the trainers' end left running (a stop, a failure) */

/* KIND_SERVICE: elastic allreduce's membership service, kept like a server */
typedef enum { KIND_PS, KIND_CHIEF, KIND_WORKER, KIND_SERVICE } kind;

static const char *const kind_names[4] = {"ps", "chief", "worker", "membership"};

typedef struct child {
	kind kind;
	int index;
	char name[32]; /* "worker:1" */
	char tf_config[4096];
	pid_t pid; /* 0: not running */
	int fd[2]; /* stdout, stderr pipes; -1 closed */
	char buf[2][LINE_MAX_BYTES];
	size_t len[2];
	int restarts;
	int exited;  /* and will not be restarted */
	int idle;    /* --elastic: a free worker slot SIGUSR1 may start */
	int leaving; /* --elastic: SIGUSR2 told it to leave */
	int late;    /* stopped once the chief had ended the job (run_loop) */
	int code;    /* exit status as a shell reports it (128 + signal when killed) */
} child;

typedef struct launcher {
	child ch[MAX_PROCS];
	int n, nps, ntrainers;
	char exe[4096];
	const char *argv[MAX_ARGS]; /* the shared part of the children's arguments */
	int argc;
	char threads_arg[32];
	int resume, max_restarts;
	int stopping;	    /* 0, or the signal we forwarded / are stopping with */
	double stop_since;  /* wf_now() when stopping began */
	double ps_grace;    /* when the trainers were all done */
	double over_since;  /* when the chief had ended the job, the servers gone */
	int ps_stop_logged; /* the servers were told to stop after the grace */
	int fail_code;	    /* first permanent failure's status, 0 none */
	int wound_down;	    /* servers that ended non-zero after the trainers had ended */
	char fail_name[32];
	char key_arg[4096 + 32]; /* "cluster.key_dir=DIR" */
	int key_fd;		 /* memfd holding this run's keys, -1: none */
	/* WEFT_JOB_TOKEN of every child: this run's */
	char job_token[WF_JOB_TOKEN_MAX];
	wf_netem net;	  /* --link: each child in its own namespace (node = its index) */
	long min_workers; /* --elastic MIN (0: not elastic); SIGUSR2 never goes below it */
	char min_arg[48];
	const char *strategy_arg; /* "strategy.name=..." every trainer gets */
	/* elastic allreduce: the membership service's port, the first
	 * generation's size, and the setting every trainer gets */
	char svc_port[16], svc_expect[16];
	char svc_arg[300]; /* "strategy.elastic_service=127.0.0.1:PORT" */
} launcher;

static volatile sig_atomic_t got_signal, got_add, got_remove;

static void on_signal(int sig)
{
	if (sig == SIGUSR1)
		got_add++;
	else if (sig == SIGUSR2)
		got_remove++;
	else
		got_signal = sig;
}

/* ---- ports and TF_CONFIG ----------------------------------------------------- */

/* The kernel's ephemeral range (net.ipv4.ip_local_port_range), from which
 * every outgoing connection on the machine takes its source port. */
static void ephemeral_range(int *lo, int *hi)
{
	*lo = 32768, *hi = 60999;
	FILE *f = fopen("/proc/sys/net/ipv4/ip_local_port_range", "r");
	if (f) {
		int a, b;
		if (fscanf(f, "%d %d", &a, &b) == 2 && a > 0 && b >= a && b < 65536)
			*lo = a, *hi = b;
		fclose(f);
	}
}

/* n free loopback TCP ports (held open together, so they differ), outside
 * the ephemeral range: a server restarted after a crash binds its port
 * again, and a port from that range may meanwhile be the source port of any
 * connection on the machine (the bind then fails for as long as that
 * connection lives). Real clusters name fixed ports for the same reason. */
static int free_ports(int *ports, int n, wf_err *err)
{
	int fds[MAX_PROCS], lo, hi, k = 0;
	ephemeral_range(&lo, &hi);
	/* random picks among the ports above the range and those below it (to 1024) */
	int above = 65535 - hi, below = lo - 1024, span = WF_MAX(above, 0) + WF_MAX(below, 0);
	unsigned seed = (unsigned)getpid() * 2654435761u ^ (unsigned)(wf_now() * 1e6);
	for (int tries = 0; k < n && span > 0 && tries < 20 * span && tries < 100000; tries++) {
		int r = (int)(rand_r(&seed) % (unsigned)span);
		int port = r < above ? hi + 1 + r : 1024 + (r - above);
		struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
		a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
		fds[k] = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (fds[k] < 0)
			break;
		if (bind(fds[k], (struct sockaddr *)&a, sizeof(a)) != 0) {
			close(fds[k]); /* taken (or held by one of ours): another */
			continue;
		}
		ports[k++] = port;
	}
	for (int i = 0; i < k; i++)
		close(fds[i]);
	if (k < n)
		return wf_errf(err, WF_ETRANSIENT,
			       "launch: found %d of %d free loopback ports outside the ephemeral "
			       "range %d-%d (net.ipv4.ip_local_port_range)",
			       k, n, lo, hi);
	return 0;
}

/* Every child's TF_CONFIG: the same cluster, its own task. Child i listens
 * on ports[i] of 127.0.0.1, or of its own node's address under --link. */
static void tf_configs(launcher *l, const int *ports)
{
	char list[3][1500];
	for (int j = 0; j < 3; j++) {
		size_t k = 0;
		list[j][0] = '\0';
		for (int i = 0; i < l->n; i++) {
			char host[32] = "127.0.0.1";
			if (l->net.nodes)
				wf_netem_addr(i, host, sizeof(host));
			if ((int)l->ch[i].kind == j)
				k += (size_t)snprintf(list[j] + k, sizeof(list[j]) - k,
						      "%s\"%s:%d\"", k ? ", " : "", host, ports[i]);
		}
	}
	for (int i = 0; i < l->n; i++) {
		child *c = &l->ch[i];
		size_t k = (size_t)snprintf(c->tf_config, sizeof(c->tf_config), "{\"cluster\": {");
		int first = 1;
		for (int j = 0; j < 3; j++) {
			if (!list[j][0])
				continue;
			k += (size_t)snprintf(c->tf_config + k, sizeof(c->tf_config) - k,
					      "%s\"%s\": [%s]", first ? "" : ", ", kind_names[j],
					      list[j]);
			first = 0;
		}
		if (c->kind == KIND_SERVICE) /* no task: the cluster it serves */
			snprintf(c->tf_config + k, sizeof(c->tf_config) - k, "}}");
		else
			snprintf(c->tf_config + k, sizeof(c->tf_config) - k,
				 "}, \"task\": {\"type\": \"%s\", \"index\": %d}, "
				 "\"environment\": \"local\"}",
				 kind_names[c->kind], c->index);
	}
}

/* ---- children ------------------------------------------------------------------ */

/* resume: 1 --resume, 0 --fresh (a chief's first start: a new job), -1 neither */
static void spawn(launcher *l, child *c, int resume)
{
	int out[2], errp[2];
	if (pipe(out) != 0 || pipe(errp) != 0) {
		wf_error("launch: pipe: %s", strerror(errno));
		c->exited = 1;
		c->code = 1;
		return;
	}
	pid_t parent = getpid();
	pid_t pid = fork();
	if (pid == 0) {
		setpgid(0, 0);
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (getppid() != parent)
			_exit(WF_EXIT_TRANSIENT);
		wf_err nerr;
		if (l->net.nodes && wf_netem_enter(&l->net, (int)(c - l->ch), &nerr) != 0) {
			fprintf(stderr, "launch: %s\n", nerr.msg);
			_exit(1);
		}
		dup2(out[1], 1);
		dup2(errp[1], 2);
		close(out[0]);
		close(out[1]);
		close(errp[0]);
		close(errp[1]);
		signal(SIGINT, SIG_DFL);
		signal(SIGTERM, SIG_DFL);
		setenv("TF_CONFIG", c->tf_config, 1);
		setenv("WEFT_LAUNCH", "1", 1);
		/* in the environment, not on the command line: others on the
		 * machine can read a process's arguments */
		setenv(WF_JOB_TOKEN_ENV, l->job_token, 1);
		if (getenv(WF_CPUS_BUSY_ENV)) {
			/* weft, not the user, chose this process's short spin: the
			 * job's processes share the machine and would spin against
			 * each other */
			unsetenv(WF_CPUS_BUSY_ENV);
			unsetenv("GOMP_SPINCOUNT");
			setenv("OMP_WAIT_POLICY", "passive", 1);
		}
		const char *argv[MAX_ARGS + 8];
		int n = 0;
		argv[n++] = l->exe;
		argv[n++] = c->kind == KIND_PS	      ? "ps"
			    : c->kind == KIND_SERVICE ? "membership"
						      : "train";
		for (int i = 0; i < l->argc; i++)
			argv[n++] = l->argv[i];
		if (c->kind == KIND_PS || c->kind == KIND_SERVICE) {
			setenv("OMP_NUM_THREADS", "1", 1);
			if (c->kind == KIND_SERVICE) {
				argv[n++] = "--port";
				argv[n++] = l->svc_port;
				argv[n++] = "--expect";
				argv[n++] = l->svc_expect;
			}
		} else {
			setenv("OMP_NUM_THREADS", l->threads_arg, 1);
			argv[n++] = "--threads";
			argv[n++] = l->threads_arg;
			argv[n++] = "--no-progress-line";
			if (resume > 0)
				argv[n++] = "--resume";
			else if (resume == 0)
				argv[n++] = "--fresh";
		}
		argv[n] = NULL;
		execv(l->exe, (char *const *)argv);
		fprintf(stderr, "launch: cannot run %s: %s\n", l->exe, strerror(errno));
		_exit(127);
	}
	close(out[1]);
	close(errp[1]);
	if (pid < 0) {
		wf_error("launch: fork: %s", strerror(errno));
		close(out[0]);
		close(errp[0]);
		c->exited = 1;
		c->code = 1;
		return;
	}
	c->pid = pid;
	c->fd[0] = out[0];
	c->fd[1] = errp[0];
	c->len[0] = c->len[1] = 0;
	fcntl(out[0], F_SETFL, O_NONBLOCK);
	fcntl(errp[0], F_SETFL, O_NONBLOCK);
	fprintf(stderr, "[launch] %s started (pid %d)%s\n", c->name, (int)pid,
		resume > 0 ? " with --resume" : "");
	wf_event("started", json_pack("{s:s, s:i, s:b}", "task", c->name, "task_pid", (int)pid,
				      "resume", resume > 0));
}

static void emit(child *c, int which, const char *line, size_t n)
{
	FILE *f = which == 0 ? stdout : stderr;
	fprintf(f, "[%s] %.*s\n", c->name, (int)n, line);
	fflush(f);
}

/* Read what is waiting on a child's pipe; print complete lines (all of it at EOF). */
static void pump(child *c, int which)
{
	for (;;) {
		size_t room = sizeof(c->buf[which]) - c->len[which];
		ssize_t r = read(c->fd[which], c->buf[which] + c->len[which], room);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0) {
			if (r == 0 || (errno != EAGAIN && errno != EWOULDBLOCK)) {
				if (c->len[which])
					emit(c, which, c->buf[which], c->len[which]);
				c->len[which] = 0;
				close(c->fd[which]);
				c->fd[which] = -1;
			}
			return;
		}
		c->len[which] += (size_t)r;
		char *start = c->buf[which], *nl;
		size_t left = c->len[which];
		while ((nl = memchr(start, '\n', left)) != NULL) {
			size_t n = (size_t)(nl - start);
			if (n && start[n - 1] == '\r')
				n--;
			emit(c, which, start, n);
			left -= (size_t)(nl - start) + 1;
			start = nl + 1;
		}
		if (left == sizeof(c->buf[which])) { /* a line longer than the buffer */
			emit(c, which, start, left);
			left = 0;
		}
		memmove(c->buf[which], start, left);
		c->len[which] = left;
	}
}

/* Parameter servers and the membership service: started first, stopped
 * after the trainers, restarted when they die. */
static int is_server(const child *c)
{
	return c->kind == KIND_PS || c->kind == KIND_SERVICE;
}

static void signal_children(launcher *l, int trainers, int servers, int sig)
{
	for (int i = 0; i < l->n; i++) {
		child *c = &l->ch[i];
		if (c->pid > 0 && ((is_server(c) && servers) || (!is_server(c) && trainers)))
			kill(c->pid, sig);
	}
}

static int running(const launcher *l, int trainers, int servers)
{
	int n = 0;
	for (int i = 0; i < l->n; i++) {
		const child *c = &l->ch[i];
		n += c->pid > 0 && ((is_server(c) && servers) || (!is_server(c) && trainers));
	}
	return n;
}

/* Stop the whole cluster: trainers first (they checkpoint), servers after. */
static void stop_all(launcher *l, int sig)
{
	if (l->stopping)
		return;
	l->stopping = sig;
	l->stop_since = wf_now();
	signal_children(l, 1, 0, sig);
}

static int chief_index(const launcher *l)
{
	for (int i = 0; i < l->n; i++)
		if (l->ch[i].kind == KIND_CHIEF)
			return i;
	for (int i = 0; i < l->n; i++)
		if (l->ch[i].kind == KIND_WORKER && l->ch[i].index == 0)
			return i;
	return -1;
}

/* A child ended with wait status st: restart it, finish it, or stop everything. */
static void reap(launcher *l, child *c, int st)
{
	for (int w = 0; w < 2; w++)
		if (c->fd[w] >= 0)
			pump(c, w);
	c->pid = 0;
	int code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
	char how[64];
	if (WIFEXITED(st))
		snprintf(how, sizeof(how), "exited with status %d", code);
	else
		snprintf(how, sizeof(how), "was killed by signal %d (%s)", WTERMSIG(st),
			 strsignal(WTERMSIG(st)));
	int transient = !WIFEXITED(st) || code == WF_EXIT_TRANSIENT;
	/* Every trainer has ended: the job is over and a server only winds
	 * down. One that dies now (or that launch stops after the grace
	 * period: a server restarted just after the chief shut the others down
	 * waits for nobody) is neither restarted nor a failure of the job. */
	int wind_down = is_server(c) && running(l, 1, 0) == 0;
	/* --elastic: one SIGUSR2 stopped left, however it ended (a signal
	 * that came before its handler was set, or a stop while loading);
	 * so did one stopped after the job was over */
	int left = c->leaving || c->late;
	int again =
		!left && !l->stopping && !wind_down && transient && c->restarts < l->max_restarts;
	wf_event("exited",
		 json_pack("{s:s, s:i, s:i, s:b}", "task", c->name, "code", code, "signal",
			   WIFSIGNALED(st) ? WTERMSIG(st) : 0, "restart", again));
	if (again) {
		c->restarts++;
		fprintf(stderr, "[launch] %s %s: restarting it (%d of %d)\n", c->name, how,
			c->restarts, l->max_restarts);
		/* a restarted chief resumes from the newest checkpoint and rolls the
		 * cluster back to it; workers and servers take the servers' state */
		spawn(l, c, (int)(c - l->ch) == chief_index(l) ? 1 : -1);
		return;
	}
	c->exited = 1;
	c->code = code;
	/* elastic: a worker that left frees its slot while the chief trains on */
	int ci = chief_index(l);
	c->idle = l->min_workers > 0 && (code == 0 || left) && c->kind == KIND_WORKER &&
		  (int)(c - l->ch) != ci && ci >= 0 && l->ch[ci].pid > 0 && !l->stopping;
	fprintf(stderr, "[launch] %s %s%s\n", c->name, how,
		wind_down && code != 0 ? " (after the trainers ended)"
		: c->late	       ? " (the job was over)"
		: left		       ? " (it left; its slot is free)"
				       : "");
	l->wound_down += wind_down && code != 0;
	if (code != 0 && !left && !l->stopping && !wind_down) {
		if (!l->fail_code) {
			l->fail_code = code;
			snprintf(l->fail_name, sizeof(l->fail_name), "%s", c->name);
		}
		fprintf(stderr, "[launch] stopping the cluster\n");
		stop_all(l, SIGTERM);
	}
}

/* ---- the loop -------------------------------------------------------------------- */

/* --elastic: SIGUSR1 starts a worker in the first free slot (it joins at
 * the servers' step); SIGUSR2 stops the last running worker other than the
 * chief (it leaves the job and exits 0). */
static void elastic_signals(launcher *l)
{
	int ci = chief_index(l);
	for (; got_add > 0; got_add--) {
		child *c = NULL;
		for (int i = 0; i < l->n && !c; i++)
			if (l->ch[i].idle && l->ch[i].pid == 0)
				c = &l->ch[i];
		if (ci >= 0 && l->ch[ci].exited) {
			fprintf(stderr, "[launch] SIGUSR1: not starting a worker: the chief has "
					"ended the job\n");
			continue;
		}
		if (!c || l->stopping) {
			fprintf(stderr, "[launch] SIGUSR1: no free worker slot: every one of the "
					"--elastic maximum is running\n");
			continue;
		}
		fprintf(stderr, "[launch] SIGUSR1: starting %s (it joins the job)\n", c->name);
		c->idle = c->exited = c->leaving = 0;
		spawn(l, c, -1);
	}
	for (; got_remove > 0; got_remove--) {
		child *c = NULL;
		int staying = 0;
		for (int i = l->n - 1; i >= 0; i--) {
			child *k = &l->ch[i];
			if (is_server(k) || k->pid <= 0 || k->leaving)
				continue;
			staying++;
			if (!c && k->kind == KIND_WORKER && i != ci)
				c = k;
		}
		if (!c || l->stopping || staying <= l->min_workers) {
			fprintf(stderr,
				"[launch] SIGUSR2: not stopping a worker: %d trainer%s run, the "
				"--elastic minimum is %ld (the chief stays)\n",
				staying, staying == 1 ? "" : "s", l->min_workers);
			continue;
		}
		fprintf(stderr, "[launch] SIGUSR2: stopping %s (it leaves the job)\n", c->name);
		c->leaving = 1;
		kill(c->pid, SIGTERM);
	}
}

/* The chief ended the job (exit 0: the final checkpoint is sealed, the
 * servers told to shut down): a worker still running LATE_GRACE seconds
 * later started or restarted too late to train anything (a join just
 * before the end; alone it would wait 10 s for the servers before it
 * concluded that the job is over, longer for a server restarted after the
 * shutdown). It is stopped (SIGTERM, SIGKILL LATE_GRACE seconds later),
 * and its exit is not a failure. */
static void stop_late_workers(launcher *l, double now)
{
	int ci = chief_index(l), workers = 0;
	for (int i = 0; i < l->n; i++)
		workers += !is_server(&l->ch[i]) && l->ch[i].pid > 0;
	if (ci < 0 || !l->ch[ci].exited || l->ch[ci].code != 0 || !workers || l->stopping) {
		l->over_since = 0;
		return;
	}
	if (l->over_since == 0)
		l->over_since = now;
	if (now - l->over_since < LATE_GRACE)
		return;
	for (int i = 0; i < l->n; i++) {
		child *c = &l->ch[i];
		if (is_server(c) || c->pid <= 0)
			continue;
		if (c->late) {
			if (now - l->over_since >= 2 * LATE_GRACE)
				kill(c->pid, SIGKILL);
			continue;
		}
		fprintf(stderr,
			"[launch] %s still running %.0f s after the chief ended the job: stopping "
			"it (nothing is left to train)\n",
			c->name, LATE_GRACE);
		c->late = 1;
		kill(c->pid, SIGTERM);
	}
}

static void run_loop(launcher *l)
{
	int signals_seen = 0;
	for (;;) {
		if (got_signal) {
			int sig = got_signal;
			got_signal = 0;
			if (++signals_seen > 1 || l->stopping) {
				fprintf(stderr, "[launch] %s again: killing every process\n",
					strsignal(sig));
				signal_children(l, 1, 1, SIGKILL);
			} else {
				fprintf(stderr,
					"[launch] %s: stopping the cluster (trainers "
					"checkpoint, then the servers stop)\n",
					strsignal(sig));
				stop_all(l, sig);
			}
		}
		if (l->min_workers > 0)
			elastic_signals(l);
		struct pollfd pf[2 * MAX_PROCS];
		child *who[2 * MAX_PROCS];
		int which[2 * MAX_PROCS], np = 0;
		for (int i = 0; i < l->n; i++)
			for (int w = 0; w < 2; w++)
				if (l->ch[i].fd[w] >= 0) {
					pf[np] = (struct pollfd){.fd = l->ch[i].fd[w],
								 .events = POLLIN};
					who[np] = &l->ch[i];
					which[np++] = w;
				}
		if (poll(pf, (nfds_t)np, 100) > 0)
			for (int i = 0; i < np; i++)
				if (pf[i].revents & (POLLIN | POLLHUP | POLLERR))
					pump(who[i], which[i]);
		int st;
		pid_t pid;
		while ((pid = waitpid(-1, &st, WNOHANG)) > 0)
			for (int i = 0; i < l->n; i++)
				if (l->ch[i].pid == pid)
					reap(l, &l->ch[i], st);
		double now = wf_now();
		int trainers = running(l, 1, 0), servers = running(l, 0, 1);
		if (!trainers && !servers)
			break;
		if (!trainers && servers) {
			/* the chief shut the servers down; a stopped or failed job tells
			 * them. Once the chief has ended the job (exit 0: the final
			 * checkpoint is sealed), a server still running is one restarted
			 * after the shutdown: it has nothing left to do */
			int ci = chief_index(l);
			double grace =
				ci >= 0 && l->ch[ci].exited && l->ch[ci].code == 0 && !l->stopping
					? LATE_GRACE
					: PS_GRACE;
			if (l->ps_grace == 0) {
				l->ps_grace = now;
				if (l->stopping || l->fail_code)
					signal_children(l, 0, 1, SIGTERM);
				/* the membership service has nobody left to serve */
				for (int i = 0; i < l->n; i++)
					if (l->ch[i].kind == KIND_SERVICE && l->ch[i].pid > 0)
						kill(l->ch[i].pid, SIGTERM);
			} else if (now - l->ps_grace > grace) {
				if (!l->ps_stop_logged++)
					fprintf(stderr,
						"[launch] servers still running %.0f s after the "
						"trainers ended: stopping them\n",
						grace);
				signal_children(l, 0, 1,
						now - l->ps_grace > grace + 10 ? SIGKILL : SIGTERM);
			}
		}
		stop_late_workers(l, now);
		if (l->stopping && now - l->stop_since > 60 && trainers) {
			fprintf(stderr, "[launch] trainers still running 60 s after the stop: "
					"killing them\n");
			signal_children(l, 1, 0, SIGKILL);
		}
	}
}

/* The status code of a child back into a WF_E* code (main() maps it again). */
static int code_to_rc(int code)
{
	switch (code) {
	case 0: return 0;
	case 2: return WF_EINVAL;
	case 3: return WF_EIO;
	case 4: return WF_EFORMAT;
	case 5: return WF_ENOMEM;
	case 6: return WF_ENOTSUP;
	case 130: return WF_ESTOPPED;
	case WF_EXIT_TRANSIENT: return WF_ETRANSIENT;
	default: return code > 128 ? WF_ETRANSIENT : WF_EINTERNAL;
	}
}

/* ---- keys ------------------------------------------------------------------------------ */

/* Fresh CURVE keys for this run in a private temporary directory (0700). */
/* This run's keys in an anonymous memory file that the children inherit
 * (cluster.key_dir=fd:N): nothing reaches the disk, and the keys vanish with
 * the last process of the run, even when the launcher is killed. */
static int ephemeral_keys(launcher *l, wf_err *err)
{
	wf_ps_keys k;
	int rc = wf_ps_keys_new(&k, err);
	if (rc)
		return rc;
	char text[4 * WF_PS_KEY_Z85 + 8];
	int n = snprintf(text, sizeof(text), "%s\n%s\n%s\n%s\n", k.server_public, k.server_secret,
			 k.client_public, k.client_secret);
	memset(&k, 0, sizeof(k));
	l->key_fd = memfd_create("weft-keys", 0); /* no CLOEXEC: the children read it */
	if (l->key_fd < 0 || write(l->key_fd, text, (size_t)n) != n)
		rc = wf_errf(err, WF_EIO, "launch: cannot keep the run's keys in memory: %s",
			     strerror(errno));
	memset(text, 0, sizeof(text));
	return rc;
}

static void remove_keys(launcher *l)
{
	if (l && l->key_fd >= 0)
		close(l->key_fd);
	if (l)
		l->key_fd = -1;
}

/* ---- weft launch ------------------------------------------------------------------- */

/* --elastic MIN:MAX (NULL: MIN 0, MAX --workers): the worker slots, the
 * config setting every child gets and the line that tells how to resize. */
typedef struct elastic_range {
	long min, max;
	char min_arg[48]; /* "strategy.min_workers=MIN" */
	char note[200];
} elastic_range;

static int parse_elastic(elastic_range *er, const char *elastic, long nps, long nworkers, int chief,
			 wf_err *err)
{
	char tail;
	er->min = 0, er->max = nworkers;
	if (elastic && (sscanf(elastic, "%ld:%ld%c", &er->min, &er->max, &tail) != 2 ||
			er->min < 1 || er->max < er->min || nworkers < er->min ||
			nworkers > er->max || nps + er->max + chief > MAX_PROCS))
		return wf_errf(err, WF_EINVAL,
			       "launch: --elastic \"%s\": want MIN:MAX with 1 <= MIN <= --workers "
			       "(%ld) <= MAX and at most %d processes",
			       elastic, nworkers, MAX_PROCS);
	snprintf(er->min_arg, sizeof(er->min_arg), "strategy.min_workers=%ld", er->min);
	snprintf(er->note, sizeof(er->note),
		 "[launch] elastic: %ld to %ld workers (%ld started); SIGUSR1 to pid %d adds "
		 "one, SIGUSR2 removes one\n",
		 er->min, er->max, nworkers, (int)getpid());
	return 0;
}

static const wf_command_help launch_help = {
	"weft launch --ps N --workers M [--chief] [--elastic MIN:MAX] --config FILE "
	"[--set KEY=VALUE ...] "
	"[options]",
	"Start a parameter-server training cluster on this machine: N `weft ps` and M\n"
	"(+1 with --chief) `weft train` processes on free loopback ports, each with its\n"
	"TF_CONFIG and strategy.name parameter_server. Their output is printed line by\n"
	"line as \"[ps:0] ...\", \"[worker:1] ...\". A process that dies of a signal or\n"
	"exits 138 is restarted with the same TF_CONFIG (a worker rejoins; a server\n"
	"reloads the last complete checkpoint and the chief rolls every worker back\n"
	"to it). A permanent failure (exit 1-127) stops them all. Once the chief has\n"
	"ended the job, a worker or server still running 2 s later (one that joined or\n"
	"restarted too late) is stopped, and that is no failure. SIGINT/SIGTERM are\n"
	"forwarded: the trainers checkpoint and stop, then the servers. Exits with the\n"
	"chief's status. Traffic is encrypted and authenticated with ZeroMQ CURVE keys\n"
	"made for this run in a private temporary directory (removed at the end), or\n"
	"those of --key-dir; --insecure runs plain TCP.\n"
	"With strategy.name allreduce and --elastic MIN:MAX (no --ps): elastic allreduce\n"
	"over TCP without MPI. launch runs the membership service the workers form their\n"
	"ring through (`weft membership`, restarted like a server when it dies: the\n"
	"workers train on meanwhile); a worker that dies is restarted and joins again\n"
	"while the others go on from their last committed step, SIGUSR1 adds a worker,\n"
	"SIGUSR2 makes one leave (README: Elastic allreduce)."};

/* A launcher with no children yet, which knows the weft binary to start. */
static int launcher_new(launcher **out, wf_err *err)
{
	launcher *l = calloc(1, sizeof(*l));
	if (!(*out = l))
		return wf_errf(err, WF_ENOMEM, "out of memory");
	l->key_fd = -1;
	ssize_t n = readlink("/proc/self/exe", l->exe, sizeof(l->exe) - 1);
	if (n <= 0)
		return wf_errf(err, WF_EINTERNAL, "launch: cannot find the weft binary: %s",
			       strerror(errno));
	l->exe[n] = '\0';
	return 0;
}

/* The job's config, as every process will load it (strategy.name
 * parameter_server, min_arg with --elastic, the key flags applied), checked
 * for this cluster. */
static int launch_config(wf_config *cfg, const char *config, const wf_cli_list *sets, long *nps_io,
			 int ps_given, long ntrainers, const char *min_arg, const char *key_dir,
			 int insecure, wf_err *err)
{
	int rc = wf_config_load(cfg, config, sets->items, sets->n, err);
	if (rc != 0)
		return rc;
	int allreduce = strcmp(cfg->strategy.name, "allreduce") == 0;
	if (allreduce && !ps_given)
		*nps_io = 0;
	long nps = *nps_io;
	if (allreduce && !min_arg)
		return wf_errf(err, WF_EINVAL,
			       "strategy.name: \"allreduce\": weft launch runs allreduce only "
			       "elastic (--elastic MIN:MAX, over TCP); a fixed allreduce job runs "
			       "under mpirun");
	if (strcmp(cfg->strategy.name, "local") != 0 &&
	    strcmp(cfg->strategy.name, "parameter_server") != 0 && !allreduce)
		return wf_errf(err, WF_EINVAL,
			       "strategy.name: \"%s\": weft launch runs parameter servers, or "
			       "allreduce with --elastic",
			       cfg->strategy.name);
	if ((!allreduce && (rc = wf_config_set(cfg, "strategy.name=parameter_server", err)) != 0) ||
	    (min_arg && (rc = wf_config_set(cfg, min_arg, err)) != 0) ||
	    (rc = wf_config_validate(cfg, err)) != 0)
		return wf_err_wrap(err, "%s", config), rc;
	if ((rc = wf_config_check_workers(cfg, (int)ntrainers, err)) != 0)
		return rc;
	if (allreduce && nps > 0)
		return wf_errf(err, WF_EINVAL,
			       "--ps %ld: an allreduce job has no parameter servers (leave --ps "
			       "out, or --ps 0)",
			       nps);
	if (!allreduce && nps < 1)
		return wf_errf(err, WF_EINVAL, "--ps %ld: a parameter-server job needs one or more",
			       nps);
	if (cfg->ps.replicas > nps && !allreduce)
		return wf_errf(err, WF_EINVAL,
			       "ps.replicas %ld: each chunk on %ld servers needs --ps %ld or more "
			       "(got --ps %ld)",
			       cfg->ps.replicas, cfg->ps.replicas, cfg->ps.replicas, nps);
	return wf_job_security_flags(cfg, key_dir, insecure, err);
}

/* The keys argument of every child: --insecure, --key-dir / cluster.key_dir
 * (checked here), or fresh ones for this run. */
static int launch_keys(launcher *l, wf_config *cfg, wf_err *err)
{
	if (cfg->cluster.insecure) {
		if (cfg->cluster.key_dir[0])
			return wf_errf(
				err, WF_EINVAL,
				"launch: --insecure and --key-dir (cluster.key_dir) both given: "
				"choose one");
		fprintf(stderr, "[launch] WARNING: --insecure: parameter-server traffic is plain "
				"TCP without authentication\n");
		snprintf(l->key_arg, sizeof(l->key_arg), "cluster.insecure=true");
		return 0;
	}
	wf_ps_keys keys;
	const wf_ps_keys *kp;
	int rc;
	if (!cfg->cluster.key_dir[0]) {
		if ((rc = ephemeral_keys(l, err)) != 0)
			return rc;
		snprintf(cfg->cluster.key_dir, sizeof(cfg->cluster.key_dir), "fd:%d", l->key_fd);
	}
	rc = wf_job_keys(cfg, &keys, &kp, err);
	memset(&keys, 0, sizeof(keys));
	if (rc == 0)
		snprintf(l->key_arg, sizeof(l->key_arg), "cluster.key_dir=%s",
			 cfg->cluster.key_dir);
	return rc;
}

/* The job id's random part: one per run (every child, restarts too),
 * unless the caller gives the job one. */
static int launch_token(launcher *l, wf_err *err)
{
	const char *token = getenv(WF_JOB_TOKEN_ENV);
	if (token && strlen(token) >= sizeof(l->job_token))
		return wf_errf(err, WF_EINVAL, "launch: %s: %zu characters, at most %zu",
			       WF_JOB_TOKEN_ENV, strlen(token), sizeof(l->job_token) - 1);
	if (!token || !*token)
		return wf_cluster_new_token(l->job_token, 16, err);
	snprintf(l->job_token, sizeof(l->job_token), "%s", token);
	return 0;
}

/* The arguments every child gets after its command. */
static void child_args(launcher *l, const char *config, const wf_cli_list *sets, const char *device,
		       const char *min_arg)
{
	l->argv[l->argc++] = "--config";
	l->argv[l->argc++] = config;
	for (int i = 0; i < sets->n && l->argc + 4 < MAX_ARGS - 8; i++) {
		l->argv[l->argc++] = "--set";
		l->argv[l->argc++] = sets->items[i];
	}
	l->argv[l->argc++] = "--set";
	l->argv[l->argc++] = l->strategy_arg;
	if (l->svc_arg[0]) {
		l->argv[l->argc++] = "--set";
		l->argv[l->argc++] = l->svc_arg;
	}
	l->argv[l->argc++] = "--set";
	l->argv[l->argc++] = l->key_arg;
	if (min_arg) {
		snprintf(l->min_arg, sizeof(l->min_arg), "%s", min_arg);
		l->argv[l->argc++] = "--set";
		l->argv[l->argc++] = l->min_arg;
	}
	if (device) {
		l->argv[l->argc++] = "--set";
		static char dev[64];
		snprintf(dev, sizeof(dev), "train.device=%s", device);
		l->argv[l->argc++] = dev;
	}
}

/* The children (servers first, then the chief and the worker slots, those
 * past nworkers idle), their
 * addresses (free loopback ports, or an emulated network with --link) and
 * their TF_CONFIGs. */
static int place_children(launcher *l, long nps, long nworkers, long slots, int chief, int service,
			  const char *link, const char *delay, wf_err *err)
{
	for (int i = 0; i < nps; i++)
		l->ch[l->n++] = (child){.kind = KIND_PS, .index = i};
	if (chief)
		l->ch[l->n++] = (child){.kind = KIND_CHIEF, .index = 0};
	for (int i = 0; i < slots; i++) /* --elastic: the slots past --workers start idle */
		l->ch[l->n++] = (child){.kind = KIND_WORKER, .index = i, .idle = i >= nworkers};
	if (service) /* last: outside the emulated network, which refuses it */
		l->ch[l->n++] = (child){.kind = KIND_SERVICE, .index = 0};
	l->nps = (int)nps;
	l->ntrainers = (int)(slots + chief);
	int ports[MAX_PROCS], rc;
	if (link || delay) {
		wf_netem_link nl = {0};
		if ((link && (rc = wf_netem_parse_rate(link, &nl.rate_bps, err)) != 0) ||
		    (delay && (rc = wf_netem_parse_delay(delay, &nl.delay_ms, err)) != 0) ||
		    (rc = wf_netem_create(&l->net, l->n, l->n, &nl, err)) != 0)
			return rc;
		for (int i = 0; i < l->n; i++)
			ports[i] = 2222; /* each node has its own address */
		fprintf(stderr,
			"[launch] emulated network %s: one namespace per process, links of "
			"%s each way%s%s\n",
			l->net.tag, link ? link : "unlimited rate", delay ? ", delay " : "",
			delay ? delay : "");
	} else if ((rc = free_ports(ports, l->n, err)) != 0) {
		return rc;
	}
	tf_configs(l, ports);
	for (int i = 0; i < l->n; i++) {
		child *c = &l->ch[i];
		snprintf(c->name, sizeof(c->name), "%s:%d", kind_names[c->kind], c->index);
		c->fd[0] = c->fd[1] = -1;
		if (c->kind == KIND_SERVICE) {
			snprintf(l->svc_port, sizeof(l->svc_port), "%d", ports[i]);
			snprintf(l->svc_expect, sizeof(l->svc_expect), "%ld", nworkers + chief);
			snprintf(l->svc_arg, sizeof(l->svc_arg),
				 "strategy.elastic_service=127.0.0.1:%d", ports[i]);
			fprintf(stderr,
				"[launch] elastic allreduce: membership service on 127.0.0.1:%d "
				"(restarted when it dies)\n",
				ports[i]);
		}
	}
	return 0;
}

/* Start every child, restart and stop them as they end (run_loop) with
 * SIGINT/SIGTERM forwarded, and turn the chief's status into the result. */
static int run_children(launcher *l, int resume, const char *elastic_note, wf_err *err)
{
	struct sigaction sa, old_int, old_term;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal;
	sigemptyset(&sa.sa_mask);
	got_signal = 0;
	sigaction(SIGINT, &sa, &old_int);
	sigaction(SIGTERM, &sa, &old_term);
	got_add = got_remove = 0;
	if (l->min_workers > 0) {
		sigaction(SIGUSR1, &sa, NULL);
		sigaction(SIGUSR2, &sa, NULL);
		fprintf(stderr, "%s", elastic_note);
	}
	for (int i = 0; i < l->n; i++) /* without --resume, a new job: the chief starts over */
		if (!l->ch[i].idle)
			spawn(l, &l->ch[i],
			      is_server(&l->ch[i])  ? -1
			      : resume		    ? 1
			      : i == chief_index(l) ? 0
						    : -1);
	run_loop(l);
	sigaction(SIGINT, &old_int, NULL);
	sigaction(SIGTERM, &old_term, NULL);
	if (l->min_workers > 0) { /* the job is over: as before it ran, ignored */
		signal(SIGUSR1, SIG_IGN);
		signal(SIGUSR2, SIG_IGN);
	}

	int ci = chief_index(l);
	int code = ci >= 0 ? l->ch[ci].code : 1;
	if (code == 0 && l->fail_code)
		code = l->fail_code;
	int rc = code_to_rc(code);
	if (rc == WF_ESTOPPED)
		wf_errf(err, rc, "launch: stopped");
	else if (rc != 0)
		wf_errf(err, rc, "launch: %s exited with status %d (see its log above)",
			l->fail_name[0] ? l->fail_name : l->ch[ci].name,
			l->fail_code ? l->fail_code : code);
	else if (l->wound_down)
		fprintf(stderr,
			"[launch] done: the trainers exited 0 (%d server(s) ended after "
			"them with a non-zero status)\n",
			l->wound_down);
	else
		fprintf(stderr, "[launch] done: every process exited 0\n");
	wf_event("done", json_pack("{s:i}", "code", rc == 0 ? 0 : code));
	return rc;
}

int wf_cmd_launch(int argc, char **argv, wf_err *err)
{
	const char *config = NULL, *device = NULL, *key_dir = NULL, *link = NULL, *delay = NULL,
		   *elastic = NULL;
	long nps = -1, nworkers = 2, threads = 0, max_restarts = 3;
	int chief = 0, resume = 0, insecure = 0, dry_run = 0;
	wf_cli_list sets = {0}, pos = {0};
	const wf_flag flags[] = {
		{"config", WF_FLAG_STR, &config, "FILE", "training config (JSON; required)"},
		{"dry-run", WF_FLAG_BOOL, &dry_run, NULL,
		 "start nothing: print the model, each server's share of it (with the copies of "
		 "ps.replicas) and the bytes a step moves on every link"},
		{"ps", WF_FLAG_INT, &nps, "N", "parameter servers (1; an allreduce job has none)"},
		{"workers", WF_FLAG_INT, &nworkers, "M",
		 "workers (2); without --chief, worker 0 is the chief"},
		{"chief", WF_FLAG_BOOL, &chief, NULL,
		 "start a separate chief task as well (it trains too)"},
		{"set", WF_FLAG_LIST, &sets, "KEY=VALUE",
		 "override a config key in every process (repeatable)"},
		{"device", WF_FLAG_STR, &device, "cpu|ref|cuda|auto", "the trainers' device"},
		{"threads", WF_FLAG_INT, &threads, "N",
		 "CPU threads of the whole cluster, split evenly between the trainers (default: "
		 "the CPUs online); each server uses one"},
		{"resume", WF_FLAG_BOOL, &resume, NULL,
		 "continue from the newest complete checkpoint in checkpoint.dir"},
		{"max-restarts", WF_FLAG_INT, &max_restarts, "K",
		 "restart a process that dies of a signal or exits 138 up to K times (3)"},
		{"key-dir", WF_FLAG_STR, &key_dir, "DIR",
		 "use these CURVE keys (`weft keygen`) instead of fresh ones made for this run"},
		{"insecure", WF_FLAG_BOOL, &insecure, NULL,
		 "plain TCP without keys (anyone who reaches a server's port can read and "
		 "overwrite the model)"},
		{"link", WF_FLAG_STR, &link, "RATE",
		 "an emulated cluster: every process in its own network namespace, its link "
		 "shaped to RATE each way (10gbit, 100mbit; needs root and iproute2)"},
		{"elastic", WF_FLAG_STR, &elastic, "MIN:MAX",
		 "elastic membership (strategy.min_workers MIN): MAX worker slots, --workers of "
		 "them started; the job goes on while MIN are alive; SIGUSR1 to launch starts a "
		 "worker in a free slot, SIGUSR2 makes the last one leave (parameter servers, or "
		 "allreduce over a TCP ring with --set strategy.name=allreduce)"},
		{"delay", WF_FLAG_STR, &delay, "TIME",
		 "with --link: one-way delay on each side of every link (0.2ms; needs the "
		 "kernel's netem qdisc)"},
		{0},
	};
	launcher *l = NULL;
	int rc = wf_cli_parse(&launch_help, flags, argc, argv, &pos, 0, err);
	if (rc != 0)
		goto cleanup;
	if (!config) {
		rc = wf_errf(err, WF_EINVAL, "launch: --config FILE is required (see --help)");
		goto cleanup;
	}
	int ps_given = nps >= 0;
	if (!ps_given)
		nps = 1;
	if (nps < 0 || nworkers < (chief ? 0 : 1) || nps + nworkers + chief > MAX_PROCS ||
	    max_restarts < 0 || threads < 0) {
		rc = wf_errf(
			err, WF_EINVAL,
			"launch: need --ps >= 0, --workers >= 1 (or --chief), at most %d "
			"processes, --max-restarts >= 0, --threads >= 0 (got %ld, %ld, %ld, %ld)",
			MAX_PROCS, nps, nworkers, max_restarts, threads);
		goto cleanup;
	}
	elastic_range er;
	if ((rc = parse_elastic(&er, elastic, nps, nworkers, chief, err)) != 0)
		goto cleanup;
	if (elastic) { /* until the job runs (run_children), an add or remove does nothing
			* (their default action would end launch with the signal) */
		signal(SIGUSR1, SIG_IGN);
		signal(SIGUSR2, SIG_IGN);
	}
	/* check the config once here, rather than fail in every process */
	wf_config cfg;
	if ((rc = launch_config(&cfg, config, &sets, &nps, ps_given, er.max + chief,
				elastic ? er.min_arg : NULL, key_dir, insecure, err)) != 0)
		goto cleanup;
	int allreduce = strcmp(cfg.strategy.name, "allreduce") == 0;
	if (allreduce && (link || delay)) {
		rc = wf_errf(err, WF_EINVAL,
			     "launch: --link/--delay: not with elastic allreduce yet (its "
			     "membership service listens on launch's loopback, outside the "
			     "emulated network)");
		goto cleanup;
	}
	if (dry_run && allreduce) {
		rc = wf_errf(err, WF_EINVAL,
			     "launch: --dry-run prints the parameter servers' placement; an "
			     "elastic allreduce job has none (each worker sends and receives "
			     "2(N-1)/N of the gradient a step over the ring)");
		goto cleanup;
	}
	if (dry_run) {
		rc = wf_launch_plan(stdout, &cfg, (int)nps, (int)(er.max + chief), err);
		goto cleanup;
	}
	if ((rc = wf_events_open(cfg.log.events, "launch", err)) != 0)
		goto cleanup;

	if ((rc = launcher_new(&l, err)) != 0 || (rc = launch_keys(l, &cfg, err)) != 0 ||
	    (rc = launch_token(l, err)) != 0)
		goto cleanup;
	l->max_restarts = (int)max_restarts;
	l->resume = resume;
	l->min_workers = er.min;
	l->strategy_arg = allreduce ? "strategy.name=allreduce" : "strategy.name=parameter_server";
	long cpus = threads > 0 ? threads : wf_config_default_threads();
	long per = cpus / (nworkers + chief);
	snprintf(l->threads_arg, sizeof(l->threads_arg), "%ld", per > 0 ? per : 1);

	if ((rc = place_children(l, nps, nworkers, er.max, chief, allreduce, link, delay, err)) !=
	    0)
		goto cleanup;
	child_args(l, config, &sets, device, elastic ? er.min_arg : NULL);
	fprintf(stderr,
		"[launch] %ld ps, %ld worker%s%s on %s (%s threads per trainer); "
		"TF_CONFIG cluster: %.*s\n",
		nps, nworkers, nworkers == 1 ? "" : "s", chief ? " + chief" : "",
		l->net.nodes ? "an emulated network" : "127.0.0.1", l->threads_arg,
		(int)(strstr(l->ch[0].tf_config, ", \"task\"") - l->ch[0].tf_config),
		l->ch[0].tf_config);

	rc = run_children(l, resume, er.note, err);
cleanup:
	wf_events_close();
	remove_keys(l);
	if (l)
		wf_netem_destroy(&l->net);
	free(l);
	wf_cli_list_free(&sets);
	wf_cli_list_free(&pos);
	return rc;
}
