/* strategy.h: picks the gradient exchange for strategy.name. The one place
 * in the trainer that knows the strategies; each lands as its own case. */
#ifndef WF_STRATEGY_H
#define WF_STRATEGY_H

#include "trainer/config.h"
#include "worker/exchange.h"

/* Fail early (before loading data) when cfg's strategy is not built in. */
int wf_strategy_check(const wf_config *cfg, wf_err *err);
/* Before MPI starts under mpirun: the Open MPI settings weft chooses where
 * the user set none (OMPI_MCA_* in the environment win): the ring for
 * non-blocking allreduce (libnbc's default sends a large bucket over one
 * link twice). */
void wf_strategy_mpi_defaults(void);
/* Create the exchange for cfg over executor ex of model m. */
int wf_strategy_exchange_create(wf_exchange **out, const wf_config *cfg, wf_exec *ex,
				const wf_model *m, const wf_optim_cfg *optim, wf_err *err);

#endif
