/* bench_cluster.h: `weft bench cluster`, the exchanges measured on an
 * emulated cluster against the bandwidth bound (trainer/bench_cluster.c). */
#ifndef WF_BENCH_CLUSTER_H
#define WF_BENCH_CLUSTER_H

#include "common/error.h"

int wf_cmd_bench(int argc, char **argv, wf_err *err);

#endif
