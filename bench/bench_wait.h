/* bench_wait.h: a benchmark waits as the product waits. weft and weft-serve
 * choose OpenMP's wait policy at start (common/cpus.h: a short spin on an
 * idle machine, passive waits when a CPU is busy) unless OMP_WAIT_POLICY or
 * GOMP_SPINCOUNT say; a benchmark that left libgomp's default (a spin of
 * 300000 rounds) would measure another program beside other work. */
#ifndef WEFT_BENCH_WAIT_H
#define WEFT_BENCH_WAIT_H

/* First thing in main: the product's choice into the environment and the
 * benchmark executed again with it (the OpenMP runtime reads its
 * environment once, when it loads). Returns when nothing needed doing. */
void bench_openmp_wait(char **argv);

/* The shell prefix a peer engine is started with: the wait variables weft
 * set for itself removed, so the peer runs with its own defaults ("" when
 * the user set them: then they are everyone's). */
const char *bench_peer_env(void);

#endif
