#include "bench/bench_wait.h"

#include "common/cpus.h"

#include <stdlib.h>

void bench_openmp_wait(char **argv)
{
	static char env[2][WF_CPUS_ENV_LEN]; /* putenv keeps the strings */
	if (wf_cpus_openmp_wait_env(getenv("OMP_WAIT_POLICY"), getenv("GOMP_SPINCOUNT"), env) &&
	    putenv(env[0]) == 0 && putenv(env[1]) == 0)
		wf_cpus_reexec(argv);
}

const char *bench_peer_env(void)
{
	return getenv(WF_CPUS_BUSY_ENV) ? "env -u OMP_WAIT_POLICY -u GOMP_SPINCOUNT " : "";
}
