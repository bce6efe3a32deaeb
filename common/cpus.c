#include "common/cpus.h"

#include <limits.h>
#include <math.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

int wf_cpus_default_threads(void)
{
	int n = wf_cpus_affinity();
	double q = wf_cpus_quota_at("/proc/self/cgroup", "/sys/fs/cgroup");
	if (q > 0 && floor(q) < n)
		n = (int)floor(q);
	return n >= 1 ? n : 1;
}

void wf_cpus_passive_openmp(char **argv)
{
	const char *wait = getenv("OMP_WAIT_POLICY"), *spin = getenv("GOMP_SPINCOUNT");
	if ((wait && *wait) || (spin && *spin) || !argv || !argv[0])
		return; /* the user's choice (an empty value counts as unset) */
	if (setenv("OMP_WAIT_POLICY", "passive", 1) != 0)
		return;
	/* the binary's real path, not /proc/self/exe: the process keeps its name
	 * (ps, pgrep, /proc/PID/comm) */
	char self[4096];
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	if (n > 0) {
		self[n] = 0;
		execv(self, argv);
	}
	/* no /proc: run on as we are (the variable stays set for children) */
}
