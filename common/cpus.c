#include "common/cpus.h"

#include <limits.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

int wf_cpus_affinity(void)
{
	cpu_set_t set;
	CPU_ZERO(&set);
	if (sched_getaffinity(0, sizeof(set), &set) == 0) {
		int n = CPU_COUNT(&set);
		if (n > 0)
			return n;
	}
	long n = sysconf(_SC_NPROCESSORS_ONLN);
	return n > 0 ? (int)n : 1;
}

/* First line of path into buf; 0 or -1. */
static int read_line(const char *path, char *buf, size_t size)
{
	FILE *f = fopen(path, "r");
	if (!f)
		return -1;
	char *ok = fgets(buf, (int)size, f);
	fclose(f);
	return ok ? 0 : -1;
}

/* v2: "max 100000" or "150000 100000" -> CPUs, 0 when unlimited. */
static double v2_limit(const char *dir)
{
	char path[PATH_MAX + 16], line[128];
	snprintf(path, sizeof(path), "%s/cpu.max", dir);
	if (read_line(path, line, sizeof(line)) != 0)
		return 0;
	double quota, period;
	if (sscanf(line, "%lf %lf", &quota, &period) != 2 || quota <= 0 || period <= 0)
		return 0; /* "max ..." fails the first %lf */
	return quota / period;
}

/* v1: cpu.cfs_quota_us (-1 = unlimited) / cpu.cfs_period_us. */
static double v1_limit(const char *dir)
{
	char path[PATH_MAX + 32], line[64];
	snprintf(path, sizeof(path), "%s/cpu.cfs_quota_us", dir);
	if (read_line(path, line, sizeof(line)) != 0)
		return 0;
	double quota = atof(line);
	snprintf(path, sizeof(path), "%s/cpu.cfs_period_us", dir);
	if (quota <= 0 || read_line(path, line, sizeof(line)) != 0)
		return 0;
	double period = atof(line);
	return period > 0 ? quota / period : 0;
}

/* The smallest limit from base/rel up to base (the mount's root). */
static double walk_up(const char *base, const char *rel, double (*limit)(const char *))
{
	char dir[PATH_MAX];
	double best = 0;
	int len = snprintf(dir, sizeof(dir), "%s%s%s", base, rel[0] == '/' ? "" : "/", rel);
	if (len < 0 || (size_t)len >= sizeof(dir))
		return 0;
	size_t root = strlen(base);
	for (;;) {
		size_t n = strlen(dir);
		while (n > root && dir[n - 1] == '/') /* "x/" -> "x" */
			dir[--n] = '\0';
		double l = limit(dir);
		if (l > 0 && (best == 0 || l < best))
			best = l;
		char *slash = strrchr(dir, '/');
		if (n <= root || !slash || (size_t)(slash - dir) < root)
			break;
		*slash = '\0';
	}
	return best;
}

static double min_pos(double a, double b)
{
	return a <= 0 ? b : b <= 0 ? a : fmin(a, b);
}

double wf_cpus_quota_at(const char *proc_cgroup, const char *sys_root)
{
	FILE *f = fopen(proc_cgroup, "r");
	if (!f)
		return 0;
	char line[4096];
	double best = 0;
	while (fgets(line, sizeof(line), f)) {
		line[strcspn(line, "\n")] = '\0';
		/* "ID:CONTROLLERS:PATH"; v2 is "0::PATH" */
		char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
		if (!c2)
			continue;
		*c2 = '\0';
		const char *ctrls = c1 + 1, *path = c2 + 1;
		char base[PATH_MAX];
		if (ctrls[0] == '\0') {
			/* v2: the mount root itself, or a container whose root is its
			 * own cgroup (then PATH does not exist under the mount) */
			best = min_pos(best, walk_up(sys_root, path, v2_limit));
			best = min_pos(best, v2_limit(sys_root));
			continue;
		}
		/* v1: the controller list must hold "cpu" */
		int has_cpu = 0;
		char list[256];
		snprintf(list, sizeof(list), "%s", ctrls);
		for (char *save = NULL, *t = strtok_r(list, ",", &save); t;
		     t = strtok_r(NULL, ",", &save))
			has_cpu |= strcmp(t, "cpu") == 0;
		if (!has_cpu)
			continue;
		const char *mounts[] = {ctrls, "cpu", "cpu,cpuacct", "cpuacct,cpu"};
		for (int i = 0; i < 4; i++) {
			snprintf(base, sizeof(base), "%s/%s", sys_root, mounts[i]);
			if (access(base, F_OK) != 0)
				continue;
			best = min_pos(best, walk_up(base, path, v1_limit));
			best = min_pos(best, v1_limit(base));
			break;
		}
	}
	fclose(f);
	return best;
}

/* Busy and total jiffies of each "cpuN" line of a /proc/stat text, into
 * busy[N], total[N] (N < WF_CPUS_MAX); the rest stay 0. */
static void stat_times(const char *stat, unsigned long long *busy, unsigned long long *total)
{
	memset(busy, 0, WF_CPUS_MAX * sizeof(*busy));
	memset(total, 0, WF_CPUS_MAX * sizeof(*total));
	for (const char *l = stat; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
		unsigned cpu;
		unsigned long long v[8] = {0};
		if (strncmp(l, "cpu", 3) != 0 || l[3] < '0' || l[3] > '9')
			continue;
		int got = sscanf(l + 3, "%u %llu %llu %llu %llu %llu %llu %llu %llu", &cpu, &v[0],
				 &v[1], &v[2], &v[3], &v[4], &v[5], &v[6], &v[7]);
		if (got < 5 || cpu >= WF_CPUS_MAX)
			continue;
		/* user nice system idle iowait irq softirq steal: idle and iowait
		 * are free time, the rest is someone's */
		unsigned long long t = 0;
		for (int i = 0; i < 8; i++)
			t += v[i];
		total[cpu] = t;
		busy[cpu] = t - v[3] - v[4];
	}
}

int wf_cpus_busy_between(const char *stat0, const char *stat1, const cpu_set_t *mask)
{
	static unsigned long long b0[WF_CPUS_MAX], t0[WF_CPUS_MAX], b1[WF_CPUS_MAX],
		t1[WF_CPUS_MAX];
	stat_times(stat0, b0, t0);
	stat_times(stat1, b1, t1);
	int n = 0;
	for (int c = 0; c < WF_CPUS_MAX && c < CPU_SETSIZE; c++) {
		if (!CPU_ISSET(c, mask) || t1[c] <= t0[c] || b1[c] < b0[c])
			continue;
		n += (double)(b1[c] - b0[c]) > 0.6 * (double)(t1[c] - t0[c]);
	}
	return n;
}

/* /proc/stat into buf (NUL-terminated); 0 or -1. */
static int read_stat(char *buf, size_t size)
{
	FILE *f = fopen("/proc/stat", "r");
	if (!f)
		return -1;
	size_t n = fread(buf, 1, size - 1, f);
	fclose(f);
	buf[n] = '\0';
	return n > 0 ? 0 : -1;
}

int wf_cpus_busy(double seconds)
{
	cpu_set_t mask;
	CPU_ZERO(&mask);
	if (sched_getaffinity(0, sizeof(mask), &mask) != 0)
		return 0;
	static char s0[1 << 16], s1[1 << 16];
	if (read_stat(s0, sizeof(s0)) != 0)
		return 0;
	struct timespec ts = {(time_t)seconds, (long)((seconds - floor(seconds)) * 1e9)};
	nanosleep(&ts, NULL);
	if (read_stat(s1, sizeof(s1)) != 0)
		return 0;
	return wf_cpus_busy_between(s0, s1, &mask);
}

int wf_cpus_default_threads(int busy_at_start)
{
	int n = wf_cpus_affinity();
	double q = wf_cpus_quota_at("/proc/self/cgroup", "/sys/fs/cgroup");
	if (q > 0 && floor(q) < n)
		n = (int)floor(q);
	/* a CPU another process keeps busy is not ours: threads on it wait for
	 * their share and hold up every parallel loop (one busy process on the
	 * other core of 2 made --threads 2 1.36x slower than --threads 1) */
	if (n > 1) {
		int busy =
			busy_at_start >= 0 ? busy_at_start : wf_cpus_busy(WF_CPUS_SAMPLE_SECONDS);
		int free_cpus = wf_cpus_affinity() - busy;
		if (free_cpus < n)
			n = free_cpus;
	}
	return n >= 1 ? n : 1;
}

static double now_ns(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

/* libgomp's spin round: a relaxed load and the CPU's spin-wait hint */
static void spin_hint(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#elif defined(__aarch64__)
	__asm__ volatile("yield" ::: "memory");
#else
	__asm__ volatile("" ::: "memory");
#endif
}

long wf_cpus_idle_spin(void)
{
	enum { ROUNDS = 2000 };
	double best = 0;
	for (int t = 0; t < 5; t++) { /* the fastest try: one not preempted */
		double t0 = now_ns();
		for (int i = 0; i < ROUNDS; i++)
			spin_hint();
		double ns = (now_ns() - t0) / ROUNDS;
		if (t == 0 || ns < best)
			best = ns;
	}
	if (best < 0.1)
		best = 0.1;
	long n = lround(WF_CPUS_IDLE_SPIN_US * 1000.0 / best);
	return n < 100 ? 100 : n;
}

int wf_cpus_openmp_wait_env(const char *wait, const char *spin, char env[2][WF_CPUS_ENV_LEN])
{
	if ((wait && *wait) || (spin && *spin))
		return 0; /* the user's choice (an empty value counts as unset) */
	int busy = wf_cpus_affinity() > 1 ? wf_cpus_busy(WF_CPUS_SAMPLE_SECONDS) : 0;
	snprintf(env[0], WF_CPUS_ENV_LEN, "%s=%d", WF_CPUS_BUSY_ENV, busy);
	if (busy)
		snprintf(env[1], WF_CPUS_ENV_LEN, "OMP_WAIT_POLICY=passive");
	else
		snprintf(env[1], WF_CPUS_ENV_LEN, "GOMP_SPINCOUNT=%ld", wf_cpus_idle_spin());
	return 2;
}

void wf_cpus_reexec(char **argv)
{
	if (!argv || !argv[0])
		return;
	/* the binary's real path, not /proc/self/exe: the process keeps its name
	 * (ps, pgrep, /proc/PID/comm) */
	char self[4096];
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	if (n > 0) {
		self[n] = 0;
		execv(self, argv);
	}
	/* no /proc: run on as we are (what the caller set stays set for children) */
}

void wf_cpus_io_thread(const char *name)
{
	if (name)
		pthread_setname_np(pthread_self(), name);
	/* Linux: the nice value of PRIO_PROCESS with a thread id is that thread's */
	id_t tid = (id_t)gettid();
	errno = 0;
	int cur = getpriority(PRIO_PROCESS, tid);
	if (errno == 0 && cur < WF_CPUS_IO_NICE)
		setpriority(PRIO_PROCESS, tid, WF_CPUS_IO_NICE);
}

void wf_cpus_background_thread(const char *name)
{
	if (name)
		pthread_setname_np(pthread_self(), name);
	setpriority(PRIO_PROCESS, (id_t)gettid(), 19); /* Linux: a thread id is that thread */
}
