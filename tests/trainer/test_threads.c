/* test_threads.c: the default thread count follows the cgroup CPU quota
 * (v2 cpu.max, v1 cpu.cfs_quota_us / cpu.cfs_period_us) of the cgroup
 * /proc/self/cgroup names, read from fake cgroup trees in a temporary
 * directory, and the process's affinity mask. */
#include "common/cpus.h"
#include "tests/test.h"

#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

static char root[256];

/* write root/rel (creating its directories) */
static void put(const char *rel, const char *text)
{
	char path[512];
	snprintf(path, sizeof(path), "%s/%s", root, rel);
	for (char *p = path + strlen(root) + 1; *p; p++)
		if (*p == '/') {
			*p = '\0';
			mkdir(path, 0755);
			*p = '/';
		}
	FILE *f = fopen(path, "w");
	WF_CHECK(f != NULL);
	if (f) {
		fputs(text, f);
		fclose(f);
	}
}

static double quota(const char *proc_text)
{
	char proc[512], sys[512];
	snprintf(proc, sizeof(proc), "%s/proc_cgroup", root);
	snprintf(sys, sizeof(sys), "%s/sys", root);
	put("proc_cgroup", proc_text);
	return wf_cpus_quota_at(proc, sys);
}

static void test_v2_quota_is_the_smallest_on_the_path(void)
{
	put("sys/kubepods/pod1/cpu.max", "150000 100000\n");
	put("sys/kubepods/pod1/c1/cpu.max", "max 100000\n");
	put("sys/kubepods/cpu.max", "400000 100000\n");
	WF_CHECK_NEAR(quota("0::/kubepods/pod1/c1\n"), 1.5, 1e-9);
	/* a container whose cgroup is the mount's root: its path is not there */
	put("sys/cpu.max", "50000 100000\n");
	WF_CHECK_NEAR(quota("0::/kubepods/other\n"), 0.5, 1e-9);
}

static void test_v1_quota_and_unlimited(void)
{
	put("sys/cpu,cpuacct/docker/abc/cpu.cfs_quota_us", "200000\n");
	put("sys/cpu,cpuacct/docker/abc/cpu.cfs_period_us", "100000\n");
	WF_CHECK_NEAR(quota("5:memory:/docker/abc\n4:cpu,cpuacct:/docker/abc\n"), 2.0, 1e-9);
	put("sys/cpu,cpuacct/docker/abc/cpu.cfs_quota_us", "-1\n");
	WF_CHECK(quota("4:cpu,cpuacct:/docker/abc\n") == 0.0);
	/* nothing readable: no quota */
	WF_CHECK(quota("4:cpu,cpuacct:/nowhere\n1:name=systemd:/\n") == 0.0);
	char none[512];
	snprintf(none, sizeof(none), "%s/missing", root);
	WF_CHECK(wf_cpus_quota_at(none, none) == 0.0);
}

static void test_default_follows_affinity(void)
{
	cpu_set_t old, one;
	WF_CHECK(sched_getaffinity(0, sizeof(old), &old) == 0);
	int n = CPU_COUNT(&old);
	WF_CHECK(wf_cpus_affinity() == n);
	WF_CHECK(wf_cpus_default_threads(-1) >= 1 && wf_cpus_default_threads(-1) <= n);
	int first = 0;
	while (!CPU_ISSET(first, &old))
		first++;
	CPU_ZERO(&one);
	CPU_SET(first, &one);
	WF_CHECK(sched_setaffinity(0, sizeof(one), &one) == 0);
	WF_CHECK(wf_cpus_affinity() == 1);
	WF_CHECK(wf_cpus_default_threads(-1) == 1);
	sched_setaffinity(0, sizeof(old), &old);
}

/* Busy CPUs from two /proc/stat samples: a CPU over 60% non-idle between
 * them counts when it is in the mask; idle and iowait are free time. */
static void test_busy_cpus_from_proc_stat(void)
{
	const char *s0 = "cpu  100 0 100 1000 0 0 0 0 0 0\n"
			 "cpu0 0 0 0 1000 0 0 0 0 0 0\n"
			 "cpu1 0 0 0 1000 0 0 0 0 0 0\n"
			 "cpu2 0 0 0 1000 0 0 0 0 0 0\n"
			 "cpu3 0 0 0 1000 0 0 0 0 0 0\n"
			 "intr 12345\n";
	/* cpu0: 90 of 100 busy; cpu1: 50 of 100; cpu2: 10 user + 80 iowait (free);
	 * cpu3: 95 of 100 busy (steal counts) */
	const char *s1 = "cpu  300 0 300 2000 0 0 0 0 0 0\n"
			 "cpu0 80 0 10 1010 0 0 0 0 0 0\n"
			 "cpu1 25 5 20 1050 0 0 0 0 0 0\n"
			 "cpu2 10 0 0 1010 80 0 0 0 0 0\n"
			 "cpu3 5 0 0 1005 0 0 0 90 0 0\n"
			 "intr 23456\n";
	cpu_set_t all, some;
	CPU_ZERO(&all);
	for (int c = 0; c < 4; c++)
		CPU_SET(c, &all);
	WF_CHECK(wf_cpus_busy_between(s0, s1, &all) == 2);
	CPU_ZERO(&some);
	CPU_SET(1, &some);
	CPU_SET(2, &some);
	WF_CHECK(wf_cpus_busy_between(s0, s1, &some) == 0);
	CPU_SET(3, &some);
	WF_CHECK(wf_cpus_busy_between(s0, s1, &some) == 1);
	/* unreadable or equal samples: nothing is busy */
	WF_CHECK(wf_cpus_busy_between("", "", &all) == 0);
	WF_CHECK(wf_cpus_busy_between(s1, s1, &all) == 0);
}

/* A protocol thread gets its name and nice WF_CPUS_IO_NICE; the caller's
 * other threads keep theirs. */
static void *io_thread_main(void *arg)
{
	int *nice_seen = arg;
	wf_cpus_io_thread("io-test");
	char name[16] = "";
	pthread_getname_np(pthread_self(), name, sizeof(name));
	nice_seen[0] = getpriority(PRIO_PROCESS, (id_t)gettid());
	nice_seen[1] = strcmp(name, "io-test") == 0;
	return NULL;
}

static void *background_main(void *arg)
{
	int *seen = arg;
	wf_cpus_background_thread("bg-test");
	seen[0] = getpriority(PRIO_PROCESS, (id_t)gettid());
	seen[1] = sched_getscheduler(0);
	return NULL;
}

/* A background load is nice 19 under the normal policy: it gets a share of
 * a saturated CPU (SCHED_IDLE would get none, and a swap never ended). */
static void test_background_thread_is_nice_19(void)
{
	int seen[2] = {0, -1};
	pthread_t t;
	WF_CHECK(pthread_create(&t, NULL, background_main, seen) == 0);
	pthread_join(t, NULL);
	WF_CHECK_INT(seen[0], 19);
	WF_CHECK_INT(seen[1], SCHED_OTHER);
}

static void test_idle_spin_is_bounded_in_rounds(void)
{
	/* rounds of a WF_CPUS_IDLE_SPIN_US spin: at least 100, and at most what
	 * a 0.1 ns round would take */
	long n = wf_cpus_idle_spin();
	WF_CHECK(n >= 100 && n <= WF_CPUS_IDLE_SPIN_US * 10000L);
	char env[2][WF_CPUS_ENV_LEN];
	WF_CHECK(wf_cpus_openmp_wait_env("passive", NULL, env) == 0);
	WF_CHECK(wf_cpus_openmp_wait_env(NULL, "5", env) == 0);
	WF_CHECK(wf_cpus_openmp_wait_env("", "", env) == 2);
	WF_CHECK(strncmp(env[0], WF_CPUS_BUSY_ENV "=", strlen(WF_CPUS_BUSY_ENV) + 1) == 0);
	WF_CHECK(strcmp(env[1], "OMP_WAIT_POLICY=passive") == 0 ||
		 strncmp(env[1], "GOMP_SPINCOUNT=", 15) == 0);
}

static void test_io_thread_is_named_and_niced(void)
{
	int seen[2] = {-100, 0}, before = getpriority(PRIO_PROCESS, (id_t)gettid());
	pthread_t t;
	WF_CHECK(pthread_create(&t, NULL, io_thread_main, seen) == 0);
	pthread_join(t, NULL);
	WF_CHECK_INT(seen[0], WF_CPUS_IO_NICE > before ? WF_CPUS_IO_NICE : before);
	WF_CHECK(seen[1]);
	WF_CHECK_INT(getpriority(PRIO_PROCESS, (id_t)gettid()), before);
}

int main(void)
{
	snprintf(root, sizeof(root), "/tmp/weft-test-threads.XXXXXX");
	if (!mkdtemp(root))
		return 1;
	WF_RUN(test_v2_quota_is_the_smallest_on_the_path);
	WF_RUN(test_v1_quota_and_unlimited);
	WF_RUN(test_default_follows_affinity);
	WF_RUN(test_busy_cpus_from_proc_stat);
	WF_RUN(test_idle_spin_is_bounded_in_rounds);
	WF_RUN(test_background_thread_is_nice_19);
	WF_RUN(test_io_thread_is_named_and_niced);
	char cmd[300];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
	if (system(cmd) != 0)
		return 1;
	return wf_test_summary();
}
