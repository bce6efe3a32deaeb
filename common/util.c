#define _POSIX_C_SOURCE 200809L
#include "common/util.h"

#include "common/error.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

uint64_t wf_hash64(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ULL;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
	return x ^ (x >> 31);
}

uint64_t wf_hash3(uint64_t seed, uint64_t a, uint64_t b)
{
	return wf_hash64(wf_hash64(wf_hash64(seed) ^ a) ^ b);
}

void wf_rng_seed(wf_rng *r, uint64_t seed)
{
	r->s = seed;
}

uint64_t wf_rng_u64(wf_rng *r)
{
	r->s += 0x9e3779b97f4a7c15ULL;
	uint64_t z = r->s;
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

double wf_rng_uniform(wf_rng *r)
{
	return (double)(wf_rng_u64(r) >> 11) * (1.0 / 9007199254740992.0);
}

uint64_t wf_rng_below(wf_rng *r, uint64_t n)
{
	return n ? wf_rng_u64(r) % n : 0;
}

double wf_rng_normal(wf_rng *r)
{
	double u1 = wf_rng_uniform(r), u2 = wf_rng_uniform(r);
	if (u1 < 1e-300)
		u1 = 1e-300;
	return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

double wf_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void wf_sleep(double s)
{
	if (!(s > 0))
		return;
	struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

void wf_sort_doubles(double *v, size_t n)
{
	qsort(v, n, sizeof(*v), cmp_double);
}

double wf_median(double *v, size_t n)
{
	wf_sort_doubles(v, n);
	return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

int wf_mkdirs(const char *path)
{
	char buf[4096];
	size_t n = strlen(path);
	if (n == 0 || n >= sizeof(buf))
		return WF_EINVAL;
	memcpy(buf, path, n + 1);
	for (size_t i = 1; i <= n; i++) {
		if (buf[i] == '/' || buf[i] == '\0') {
			char c = buf[i];
			buf[i] = '\0';
			if (mkdir(buf, 0755) != 0 && errno != EEXIST)
				return WF_EIO;
			buf[i] = c;
		}
	}
	return 0;
}

int wf_exists(const char *path)
{
	struct stat st;
	return stat(path, &st) == 0;
}

int wf_fsync_path(const char *path)
{
	int fd = open(path, O_RDONLY);
	if (fd < 0)
		return WF_EIO;
	int rc = fsync(fd);
	close(fd);
	return rc == 0 ? 0 : WF_EIO;
}

int wf_check_regular_file(const char *path, wf_err *err)
{
	struct stat st;
	if (stat(path, &st) != 0)
		return wf_errf(err, WF_EIO, "%s: %s", path, strerror(errno));
	if (S_ISDIR(st.st_mode))
		return wf_errf(err, WF_EIO, "%s: is a directory, expected a file", path);
	if (!S_ISREG(st.st_mode))
		return wf_errf(err, WF_EIO,
			       "%s: not a regular file (a FIFO, socket or device): refused", path);
	return 0;
}

int wf_read_file(const char *path, char **data, size_t *len)
{
	struct stat st;
	if (stat(path, &st) == 0 && !S_ISREG(st.st_mode)) {
		errno = S_ISDIR(st.st_mode) ? EISDIR : EINVAL;
		return WF_EIO;
	}
	FILE *f = fopen(path, "rb");
	if (!f)
		return WF_EIO;
	size_t cap = 4096, n = 0;
	char *buf = malloc(cap);
	if (!buf) {
		fclose(f);
		return WF_ENOMEM;
	}
	for (;;) {
		if (n + 1 >= cap) {
			char *nb = realloc(buf, cap * 2);
			if (!nb) {
				free(buf);
				fclose(f);
				return WF_ENOMEM;
			}
			buf = nb;
			cap *= 2;
		}
		size_t got = fread(buf + n, 1, cap - n - 1, f);
		n += got;
		if (got == 0)
			break;
	}
	int bad = ferror(f);
	fclose(f);
	if (bad) {
		free(buf);
		return WF_EIO;
	}
	buf[n] = '\0';
	*data = buf;
	if (len)
		*len = n;
	return 0;
}
