/* cpus.h: how many CPUs this process may really use, and OpenMP threads that
 * do not burn them. A pod on a shared node gets fewer CPUs than the machine
 * has: its affinity mask (taskset, cpusets) and its cgroup CPU quota
 * (Kubernetes limits: cgroup v2 cpu.max, v1 cpu.cfs_quota_us /
 * cpu.cfs_period_us). The mains (weft, weft-serve) resolve the default
 * thread count here and pass it down; library code never looks. Nothing
 * here reads or writes the environment: the mains do, with these answers. */
#ifndef WF_CPUS_H
#define WF_CPUS_H

#include <sched.h> /* cpu_set_t (_GNU_SOURCE: set by the build) */

/* CPUs in this process's affinity mask (>= 1; the online count when the
 * mask cannot be read). */
int wf_cpus_affinity(void);
/* The CPU quota in CPUs (quota / period, say 1.5) of the cgroup that
 * proc_cgroup (a /proc/PID/cgroup file) names, looked up under the cgroup
 * mount sys_root (/sys/fs/cgroup): the smallest limit on the way from the
 * cgroup up to the root, v2 or v1. 0 when there is none or nothing can be
 * read. */
double wf_cpus_quota_at(const char *proc_cgroup, const char *sys_root);
/* CPUs of the affinity mask that were over 60% busy (any process, ours
 * included) during a sample of `seconds`, from /proc/stat; 0 when it cannot
 * be read. */
int wf_cpus_busy(double seconds);
/* The same from two /proc/stat texts taken in that order (CPUs < WF_CPUS_MAX). */
int wf_cpus_busy_between(const char *stat0, const char *stat1, const cpu_set_t *mask);
#define WF_CPUS_MAX	       1024
#define WF_CPUS_SAMPLE_SECONDS 0.1
/* The default compute thread count: min(affinity - CPUs other processes
 * keep busy, floor(quota)), >= 1. busy_at_start: the busy CPUs found when
 * the program started (WF_CPUS_BUSY_ENV after the re-exec of the wait
 * choice below); < 0: sample them now for WF_CPUS_SAMPLE_SECONDS. */
int wf_cpus_default_threads(int busy_at_start);
/* How long OpenMP threads should spin before they sleep, given the values
 * of OMP_WAIT_POLICY and GOMP_SPINCOUNT in the environment (NULL: unset):
 * 0 when those already say (a non-empty value: the user's choice); else 2,
 * with the NAME=VALUE assignments in env: WF_CPUS_BUSY_ENV (the busy CPUs
 * found now), then GOMP_SPINCOUNT=wf_cpus_idle_spin() (a short spin) when
 * none is busy, else OMP_WAIT_POLICY=passive. A main puts them into its
 * environment and calls wf_cpus_reexec before any OpenMP code runs (the
 * runtime reads its environment when it loads). */
#define WF_CPUS_ENV_LEN 48
int wf_cpus_openmp_wait_env(const char *wait, const char *spin, char env[2][WF_CPUS_ENV_LEN]);
/* Execute this program again with argv and the environment as it is now
 * (the binary's real path from /proc/self/exe: the process keeps its name).
 * Returns only when that failed; the program then runs on as it is. */
void wf_cpus_reexec(char **argv);
/* Sleeping costs each short parallel region a wake-up (smallcnn trained at
 * 0.88x of spinning on an idle machine). A spin gives that back, but a team
 * that spins while another process wants its cores wastes the spin on every
 * wait: two 2-thread processes started together on 2 idle vCPUs, each
 * spinning 200 us (20000 rounds of a 10 ns pause), ran at 0.77x (training)
 * and 0.49x (inference) of the same pair sleeping at once. So the spin is
 * bounded in time, not in rounds (one round is a load and a pause, whose
 * cost ranges from a few cycles to ~140 between CPUs): this many
 * microseconds, about one futex wake-up. There (bench/RESULTS.md, threads)
 * 10 us gave the idle machine 2-6% over sleeping but the inference pair
 * 0.86-0.89x; 5 us keeps the pair at 0.94x. */
#define WF_CPUS_IDLE_SPIN_US 5
/* GOMP_SPINCOUNT rounds that take WF_CPUS_IDLE_SPIN_US here (the pause
 * instruction timed once, the fastest of a few tries), >= 100. */
long wf_cpus_idle_spin(void);
/* Set by the mains with the wait choice (weft chose the wait policy, not the
 * user): the count of CPUs found busy at start. */
#define WF_CPUS_BUSY_ENV "WEFT_CPUS_BUSY_AT_START"

/* Name the calling thread (name may be NULL: keep it) and lower its CPU
 * priority to nice WF_CPUS_IO_NICE, for threads that move requests rather
 * than compute (a server's protocol threads). On a saturated machine a
 * compute thread that loses its core stalls its whole OpenMP team at the
 * next barrier, so a slice taken from it costs the team twice; at a lower
 * priority the I/O threads mostly run while the team waits. Raising nice
 * needs no privilege; failures are ignored. */
void wf_cpus_io_thread(const char *name);
#define WF_CPUS_IO_NICE 10
/* Name the calling thread (name may be NULL) and lower it to nice 19, the
 * lowest weight of the normal policy (about 1.5% of a CPU against each
 * busy thread of nice 0). For work that must not slow what is being served
 * (a model version loading and warming up beside the one that serves); the
 * threads it starts afterwards (its OpenMP team) inherit it. Not SCHED_IDLE:
 * that runs only when nothing else wants the CPU, and beside two busy
 * processes a swap never completed. Needs no privilege; failures are
 * ignored. */
void wf_cpus_background_thread(const char *name);

#endif
