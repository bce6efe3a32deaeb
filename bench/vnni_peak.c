/* vnni_peak.c: the int8 multiply-accumulate peak of this CPU, the ceiling
 * every int8 convolution (weft's and the peers') runs under. Each thread
 * issues independent AVX-512 VNNI vpdpbusd (64 u8 x s8 products into 16
 * int32 sums per instruction) from registers, no memory traffic; the figure
 * is the best of several rounds, in GMAC/s.
 *
 *   cc -O2 -mavx512f -mavx512vnni -fopenmp bench/vnni_peak.c -o vnni_peak
 *   ./vnni_peak [threads]        (default: OMP_NUM_THREADS or all CPUs)
 */
#include <immintrin.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

enum { ACC = 12, ITERS = 20 * 1000 * 1000 };

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* ITERS x ACC dependent chains of vpdpbusd; returns a sum so nothing is
 * dropped by the compiler. */
static int chains(int seed)
{
	__m512i a = _mm512_set1_epi8((char)(seed | 1)), b = _mm512_set1_epi8(3);
	__m512i acc[ACC];
	for (int i = 0; i < ACC; i++)
		acc[i] = _mm512_set1_epi32(i);
	for (long it = 0; it < ITERS; it++) {
#pragma GCC unroll 16
		for (int i = 0; i < ACC; i++)
			acc[i] = _mm512_dpbusd_epi32(acc[i], a, b);
	}
	__m512i s = acc[0];
	for (int i = 1; i < ACC; i++)
		s = _mm512_add_epi32(s, acc[i]);
	return _mm512_reduce_add_epi32(s);
}

int main(int argc, char **argv)
{
	int threads = argc > 1 ? atoi(argv[1]) : omp_get_max_threads();
	if (threads < 1) {
		fprintf(stderr, "vnni_peak: threads must be >= 1 (got '%s')\n", argv[1]);
		return 2;
	}
	double best = 0;
	long sink = 0;
	for (int round = 0; round < 5; round++) {
		double t0 = now();
#pragma omp parallel num_threads(threads) reduction(+ : sink)
		sink += chains(omp_get_thread_num());
		double dt = now() - t0;
		double gmacs = (double)threads * ITERS * ACC * 64 / dt / 1e9;
		if (gmacs > best)
			best = gmacs;
	}
	printf("vnni_peak: %d threads, %.0f GMAC/s int8 (best of 5; %ld)\n", threads, best,
	       sink & 1);
	return 0;
}
