/* sandbox.c: fork, a pipe for the child's error, poll with a deadline,
 * SIGKILL on timeout, the child's fate turned into a wf_err. */
#include "common/sandbox.h"

#include "common/cancel.h"
#include "common/util.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

/* AddressSanitizer builds (the ASan unit tier, the fuzz targets): gcc says so
 * with __SANITIZE_ADDRESS__, clang with __has_feature */
#if defined(__SANITIZE_ADDRESS__)
#define SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SANITIZED 1
#endif
#endif
#ifdef SANITIZED
#include <sanitizer/common_interface_defs.h>
#endif

#define CANCEL_POLL_MS 50 /* how often the wait looks at wf_cancel_requested */

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

size_t wf_sandbox_mem_for_file(const char *path)
{
	struct stat st;
	if (stat(path, &st) != 0 || st.st_size <= 0)
		return WF_SANDBOX_MEM_BASE;
	return WF_SANDBOX_MEM_BASE + WF_SANDBOX_MEM_PER_BYTE * (size_t)st.st_size;
}

/* The process's address space in bytes (/proc/self/statm: no stdio, no
 * malloc in a child forked from threads); 0 when unknown. */
static size_t address_space(void)
{
	char buf[64];
	int fd = open("/proc/self/statm", O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	ssize_t n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return 0;
	buf[n] = '\0';
	return (size_t)strtoull(buf, NULL, 10) * (size_t)sysconf(_SC_PAGESIZE);
}

size_t wf_sandbox_narrow(size_t mem_bytes)
{
	struct rlimit rl;
	size_t now = in_child ? address_space() : 0;
	if (!now || getrlimit(RLIMIT_AS, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY ||
	    now + mem_bytes >= rl.rlim_cur)
		return 0;
	size_t prev = rl.rlim_cur;
	rl.rlim_cur = now + mem_bytes;
	return setrlimit(RLIMIT_AS, &rl) == 0 ? prev : 0;
}

void wf_sandbox_widen(size_t prev)
{
	struct rlimit rl;
	if (prev && getrlimit(RLIMIT_AS, &rl) == 0) {
		rl.rlim_cur = prev;
		setrlimit(RLIMIT_AS, &rl);
	}
}

int wf_sandbox_out_of_memory(int code, const char *msg)
{
	return code == WF_ENOMEM || strstr(msg, "memory allocation failed") ||
	       strstr(msg, "out of memory") || strstr(msg, "Cannot allocate memory");
}

static void child_main(int fd, const char *what, int (*fn)(void *, wf_err *), void *arg,
		       double timeout_s, size_t mem_bytes)
{
	in_child = 1;
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	/* default dispositions: a crash is a signal the parent sees */
	const int sigs[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT, SIGALRM};
	for (size_t i = 0; i < WF_ARRAY_LEN(sigs); i++)
		signal(sigs[i], SIG_DFL);
#ifdef SANITIZED
	/* a sanitizer's report in here is the parser's crash, refused as a
	 * signal would be; the death callback a fuzzer set (record the input
	 * as a crash, print its statistics) is the parent's, not this child's */
	__sanitizer_set_death_callback(NULL);
#endif
	alarm((unsigned)timeout_s + 2); /* should the parent miss the deadline */
	size_t base = mem_bytes ? address_space() : 0;
	if (base) {
		struct rlimit rl = {base + mem_bytes, base + mem_bytes};
		setrlimit(RLIMIT_AS, &rl);
	}
	report r;
	memset(&r, 0, sizeof(r));
	wf_err e = {0};
	r.code = fn(arg, &e);
	if (r.code && base && wf_sandbox_out_of_memory(r.code, e.msg)) {
		r.code = WF_EFORMAT;
		snprintf(r.msg, sizeof(r.msg),
			 "%.300s: the parser needed more than %zu MiB of memory: the file is "
			 "corrupt (or crafted), refused (%.600s)",
			 what, mem_bytes >> 20, e.msg);
	} else if (r.code) {
		snprintf(r.msg, sizeof(r.msg), "%s", e.msg);
	}
	ssize_t w = write(fd, &r, sizeof(r));
	(void)w;
	_exit(r.code ? 1 : 0); /* no atexit handlers: the parent's libraries stay its own */
}

int wf_sandbox_check(const char *what, double timeout_s, size_t mem_bytes,
		     int (*fn)(void *arg, wf_err *err), void *arg, wf_err *err)
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
		child_main(p[1], what, fn, arg, timeout_s, mem_bytes);
	}
	close(p[1]);
	report r;
	size_t got = 0;
	double deadline = wf_now() + timeout_s;
	int timed_out = 0, stopped = 0;
	while (got < sizeof(r)) {
		int left = (int)((deadline - wf_now()) * 1000);
		if (left <= 0) {
			timed_out = 1;
			break;
		}
		if ((stopped = wf_cancel_requested()) != 0)
			break;
		struct pollfd pf = {.fd = p[0], .events = POLLIN};
		int n = poll(&pf, 1, left < CANCEL_POLL_MS ? left : CANCEL_POLL_MS);
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
	if (timed_out || stopped)
		kill(pid, SIGKILL);
	int st = 0;
	while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
		;
	if (stopped)
		return wf_cancel_check(what, err);
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
