#include "trainer/strategy.h"

#include "trainer/role.h"
#include "worker/exchange_mpi.h"
#include "worker/exchange_nccl.h"

#include <string.h>

int wf_strategy_check(const wf_config *cfg, wf_err *err)
{
	if (strcmp(cfg->strategy.name, "local") == 0)
		return 0;
	if (strcmp(cfg->strategy.name, "allreduce") == 0)
		return wf_exchange_mpi_check(err);
	if (strcmp(cfg->strategy.name, "parameter_server") == 0)
		return 0;
	return wf_errf(err, WF_ENOTSUP,
		       "strategy.name: '%s' is not available yet in this build (use \"local\")",
		       cfg->strategy.name);
}

int wf_strategy_exchange_create(wf_exchange **out, const wf_config *cfg, wf_exec *ex,
				const wf_model *m, const wf_optim_cfg *optim, wf_err *err)
{
	int rc = wf_strategy_check(cfg, err);
	if (rc != 0)
		return rc;
	if (strcmp(cfg->strategy.name, "allreduce") == 0) {
		/* GPUs: NCCL on device memory; CPUs: MPI on host memory. */
		if (strcmp(wf_exec_backend(ex)->name, "cuda") == 0)
			return wf_exchange_nccl_create(out, ex, m, optim, cfg->strategy.bucket_mb,
						       err);
		return wf_exchange_mpi_create(out, ex, m, optim, cfg->strategy.bucket_mb, err);
	}
	if (strcmp(cfg->strategy.name, "parameter_server") == 0)
		return wf_role_ps_exchange_create(out, cfg, ex, m, err);
	return wf_exchange_local_create(out, ex, m, optim, err);
}
