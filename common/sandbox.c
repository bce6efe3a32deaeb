/* sandbox.c: fork, a pipe for the child's error, poll with a deadline,
 * SIGKILL on timeout, the child's fate turned into a wf_err. */
#include "common/sandbox.h"

#include "common/util.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

static int in_child;

int wf_sandbox_active(void)
{
	return in_child;
}

/* The child's report: code, then the message. */
typedef struct report {
	int code;
	char msg[sizeof(((wf_err *)0)->msg)];
} report;

static void child_main(int fd, int (*fn)(void *, wf_err *), void *arg, double timeout_s)
{
	in_child = 1;
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	/* default dispositions: a crash is a signal the parent sees */
	const int sigs[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT, SIGALRM};
	for (size_t i = 0; i < WF_ARRAY_LEN(sigs); i++)
		signal(sigs[i], SIG_DFL);
	alarm((unsigned)timeout_s + 2); /* should the parent miss the deadline */
	report r;
	memset(&r, 0, sizeof(r));
	wf_err e = {0};
	r.code = fn(arg, &e);
	if (r.code)
		snprintf(r.msg, sizeof(r.msg), "%s", e.msg);
	ssize_t w = write(fd, &r, sizeof(r));
	(void)w;
	_exit(r.code ? 1 : 0); /* no atexit handlers: the parent's libraries stay its own */
}

int wf_sandbox_check(const char *what, double timeout_s, int (*fn)(void *arg, wf_err *err),
		     void *arg, wf_err *err)
{
	int p[2];
	if (pipe2(p, O_CLOEXEC) != 0)
		return wf_errf(err, WF_ETRANSIENT, "%s: cannot check the file: pipe: %s", what,
			       strerror(errno));
	fflush(NULL);
	pid_t pid = fork();
	if (pid < 0) {
		int e = errno;
		close(p[0]);
		close(p[1]);
		return wf_errf(err, WF_ETRANSIENT, "%s: cannot check the file: fork: %s", what,
			       strerror(e));
	}
	if (pid == 0) {
		close(p[0]);
		child_main(p[1], fn, arg, timeout_s);
	}
	close(p[1]);
	report r;
	size_t got = 0;
	double deadline = wf_now() + timeout_s;
	int timed_out = 0;
	while (got < sizeof(r)) {
		int left = (int)((deadline - wf_now()) * 1000);
		if (left <= 0) {
			timed_out = 1;
			break;
		}
		struct pollfd pf = {.fd = p[0], .events = POLLIN};
		int n = poll(&pf, 1, left);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			continue;
		ssize_t k = read(p[0], (char *)&r + got, sizeof(r) - got);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			break; /* the child ended without a full report */
		got += (size_t)k;
	}
	close(p[0]);
	if (timed_out)
		kill(pid, SIGKILL);
	int st = 0;
	while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
		;
	if (timed_out)
		return wf_errf(err, WF_EFORMAT,
			       "%s: the parser did not finish within %.0f s: the file is corrupt "
			       "(or crafted), refused",
			       what, timeout_s);
	if (WIFSIGNALED(st) && WTERMSIG(st) == SIGALRM) /* a deadline inside the child */
		return wf_errf(err, WF_EFORMAT,
			       "%s: the parser did not finish in time: the file is corrupt (or "
			       "crafted), refused",
			       what);
	if (WIFSIGNALED(st))
		return wf_errf(err, WF_EFORMAT,
			       "%s: the parser crashed on this file (signal %d, %s): the file is "
			       "corrupt (or crafted), refused",
			       what, WTERMSIG(st), strsignal(WTERMSIG(st)));
	if (got == sizeof(r) && WIFEXITED(st)) {
		if (r.code == 0 && WEXITSTATUS(st) == 0)
			return 0;
		if (r.code != 0) {
			r.msg[sizeof(r.msg) - 1] = '\0';
			return wf_errf(err, r.code, "%s", r.msg);
		}
	}
	return wf_errf(err, WF_EFORMAT, "%s: the parser ended abnormally (status %d): refused",
		       what, WIFEXITED(st) ? WEXITSTATUS(st) : -1);
}
