/* metrics.c: counters and histograms behind one mutex (updates are rare
 * compared with a forward pass), rendered on demand. */
#include "serve/metrics.h"

#include "common/util.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_CODE 600

static const double latency_bounds[] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
					0.25,  0.5,    1,     2.5,  5,	   10};
#define NLAT (sizeof(latency_bounds) / sizeof(latency_bounds[0]))
static const int batch_bounds[] = {1, 2, 4, 8, 16, 32, 64, 128, 256};
#define NBATCH (sizeof(batch_bounds) / sizeof(batch_bounds[0]))

static const char *const endpoint_names[WF_SERVE_EP__COUNT] = {
	"v1_status", "v1_metadata",   "v1_predict",	  "v1_classify", "v2_health", "v2_metadata",
	"v2_infer",  "v2_repository", "v2_shared_memory", "metrics",	 "other",
};

struct wf_serve_metrics {
	pthread_mutex_t mu;
	unsigned long requests[WF_SERVE_EP__COUNT][MAX_CODE];
	unsigned long lat_buckets[WF_SERVE_EP__COUNT][NLAT];
	unsigned long lat_count[WF_SERVE_EP__COUNT];
	double lat_sum[WF_SERVE_EP__COUNT];
	unsigned long batch_buckets[NBATCH];
	unsigned long batch_count;
	double batch_sum;
	unsigned long queue_buckets[NLAT], queue_count;
	double queue_sum; /* seconds */
	int queue;
	unsigned long long cpu_busy, cpu_total; /* /proc/stat at the previous render (ticks) */
	double cpu_util;			/* busy share between the last two renders */
};

wf_serve_metrics *wf_serve_metrics_create(void)
{
	wf_serve_metrics *m = calloc(1, sizeof(*m));
	if (m)
		pthread_mutex_init(&m->mu, NULL);
	return m;
}

void wf_serve_metrics_free(wf_serve_metrics *m)
{
	if (!m)
		return;
	pthread_mutex_destroy(&m->mu);
	free(m);
}

void wf_serve_metrics_request(wf_serve_metrics *m, wf_serve_endpoint ep, int code, double seconds)
{
	if (!m || ep < 0 || ep >= WF_SERVE_EP__COUNT)
		return;
	if (code < 0 || code >= MAX_CODE)
		code = 0;
	pthread_mutex_lock(&m->mu);
	m->requests[ep][code]++;
	for (size_t i = 0; i < NLAT; i++)
		if (seconds <= latency_bounds[i])
			m->lat_buckets[ep][i]++;
	m->lat_count[ep]++;
	m->lat_sum[ep] += seconds;
	pthread_mutex_unlock(&m->mu);
}

void wf_serve_metrics_batch(wf_serve_metrics *m, int size)
{
	if (!m)
		return;
	pthread_mutex_lock(&m->mu);
	for (size_t i = 0; i < NBATCH; i++)
		if (size <= batch_bounds[i])
			m->batch_buckets[i]++;
	m->batch_count++;
	m->batch_sum += size;
	pthread_mutex_unlock(&m->mu);
}

void wf_serve_metrics_queue_time(wf_serve_metrics *m, double seconds)
{
	if (!m)
		return;
	pthread_mutex_lock(&m->mu);
	for (size_t i = 0; i < NLAT; i++)
		if (seconds <= latency_bounds[i])
			m->queue_buckets[i]++;
	m->queue_count++;
	m->queue_sum += seconds;
	pthread_mutex_unlock(&m->mu);
}

void wf_serve_metrics_queue(wf_serve_metrics *m, int delta)
{
	if (!m)
		return;
	pthread_mutex_lock(&m->mu);
	m->queue += delta;
	pthread_mutex_unlock(&m->mu);
}

/* A growing text buffer. */
typedef struct text {
	char *p;
	size_t len, cap;
	int oom;
} text;

__attribute__((format(printf, 2, 3))) static void put(text *t, const char *fmt, ...)
{
	for (;;) {
		va_list ap;
		va_start(ap, fmt);
		int n = t->oom ? 0 : vsnprintf(t->p + t->len, t->cap - t->len, fmt, ap);
		va_end(ap);
		if (t->oom || n < 0)
			return;
		if ((size_t)n < t->cap - t->len) {
			t->len += (size_t)n;
			return;
		}
		size_t cap = t->cap * 2 + (size_t)n + 1;
		char *p = realloc(t->p, cap);
		if (!p) {
			t->oom = 1;
			return;
		}
		t->p = p;
		t->cap = cap;
	}
}

/* The host's CPU ticks since boot, busy and in all, from /proc/stat. */
static int cpu_ticks(unsigned long long *busy, unsigned long long *total)
{
	unsigned long long t[8] = {0};
	FILE *f = fopen("/proc/stat", "r");
	int n = f ? fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &t[0], &t[1], &t[2],
			   &t[3], &t[4], &t[5], &t[6], &t[7])
		  : 0;
	if (f)
		fclose(f);
	if (n < 4)
		return -1;
	*total = 0;
	for (int i = 0; i < 8; i++)
		*total += t[i];
	*busy = *total - t[3] - t[4]; /* idle, iowait */
	return 0;
}

/* A /proc/meminfo value in bytes (the file says kB); -1 when absent. */
static long long meminfo(const char *info, const char *key)
{
	const char *p = strstr(info, key);
	return p ? strtoll(p + strlen(key), NULL, 10) * 1024 : -1;
}

/* Triton's nv_cpu_* gauges: utilization [0, 1] since the previous render,
 * memory total and used (total - available) bytes. Host-wide, as Triton's. */
static void put_cpu(wf_serve_metrics *m, text *t)
{
	unsigned long long busy = 0, total = 0;
	if (cpu_ticks(&busy, &total) == 0) {
		if (total > m->cpu_total) /* else no tick since: the last value stands */
			m->cpu_util = WF_MIN(1.0, (double)(busy - WF_MIN(busy, m->cpu_busy)) /
							  (double)(total - m->cpu_total));
		m->cpu_busy = busy;
		m->cpu_total = total;
		put(t,
		    "# HELP nv_cpu_utilization CPU utilization rate [0.0 - 1.0]\n"
		    "# TYPE nv_cpu_utilization gauge\nnv_cpu_utilization %.6f\n",
		    m->cpu_util);
	}
	char buf[4096] = "";
	FILE *f = fopen("/proc/meminfo", "r");
	size_t n = f ? fread(buf, 1, sizeof(buf) - 1, f) : 0;
	if (f)
		fclose(f);
	buf[n] = 0;
	long long mt = meminfo(buf, "MemTotal:"), ma = meminfo(buf, "MemAvailable:");
	if (mt < 0 || ma < 0)
		return;
	put(t,
	    "# HELP nv_cpu_memory_total_bytes CPU total memory (RAM), in bytes\n"
	    "# TYPE nv_cpu_memory_total_bytes gauge\nnv_cpu_memory_total_bytes %lld\n"
	    "# HELP nv_cpu_memory_used_bytes CPU used memory (RAM), in bytes\n"
	    "# TYPE nv_cpu_memory_used_bytes gauge\nnv_cpu_memory_used_bytes %lld\n",
	    mt, mt - ma);
}

/* Triton's per-version gauge of requests waiting for a batch thread. */
static void put_pending(text *t, wf_serve_version *const *vs, int n)
{
	put(t, "# HELP nv_inference_pending_request_count Instantaneous number of pending "
	       "requests awaiting execution per-model.\n"
	       "# TYPE nv_inference_pending_request_count gauge\n");
	for (int i = 0; i < n; i++)
		put(t, "nv_inference_pending_request_count{model=\"%s\",version=\"%ld\"} %d\n",
		    vs[i]->name, vs[i]->version, atomic_load(&vs[i]->stats.pending));
}

char *wf_serve_metrics_render(wf_serve_metrics *m, wf_serve_version *const *vs, int nv_n, int ready,
			      long swaps, long load_failures)
{
	text t = {.p = malloc(8192), .cap = 8192};
	if (!t.p)
		return NULL;
	t.p[0] = 0;
	pthread_mutex_lock(&m->mu);
	put(&t, "# HELP weft_serve_requests_total HTTP requests by endpoint and status code.\n"
		"# TYPE weft_serve_requests_total counter\n");
	for (int e = 0; e < WF_SERVE_EP__COUNT; e++)
		for (int c = 0; c < MAX_CODE; c++)
			if (m->requests[e][c])
				put(&t,
				    "weft_serve_requests_total{endpoint=\"%s\",code=\"%d\"} %lu\n",
				    endpoint_names[e], c, m->requests[e][c]);
	put(&t, "# HELP weft_serve_request_duration_seconds Time from request arrival to reply.\n"
		"# TYPE weft_serve_request_duration_seconds histogram\n");
	for (int e = 0; e < WF_SERVE_EP__COUNT; e++) {
		if (!m->lat_count[e])
			continue;
		for (size_t i = 0; i < NLAT; i++)
			put(&t,
			    "weft_serve_request_duration_seconds_bucket{endpoint=\"%s\",le=\"%g\"} "
			    "%lu\n",
			    endpoint_names[e], latency_bounds[i], m->lat_buckets[e][i]);
		put(&t,
		    "weft_serve_request_duration_seconds_bucket{endpoint=\"%s\",le=\"+Inf\"} %lu\n"
		    "weft_serve_request_duration_seconds_sum{endpoint=\"%s\"} %.9g\n"
		    "weft_serve_request_duration_seconds_count{endpoint=\"%s\"} %lu\n",
		    endpoint_names[e], m->lat_count[e], endpoint_names[e], m->lat_sum[e],
		    endpoint_names[e], m->lat_count[e]);
	}
	put(&t, "# HELP weft_serve_batch_size Samples per executor forward.\n"
		"# TYPE weft_serve_batch_size histogram\n");
	for (size_t i = 0; i < NBATCH; i++)
		put(&t, "weft_serve_batch_size_bucket{le=\"%d\"} %lu\n", batch_bounds[i],
		    m->batch_buckets[i]);
	put(&t,
	    "weft_serve_batch_size_bucket{le=\"+Inf\"} %lu\nweft_serve_batch_size_sum %.0f\n"
	    "weft_serve_batch_size_count %lu\n",
	    m->batch_count, m->batch_sum, m->batch_count);
	put(&t, "# HELP weft_serve_queue_duration_seconds Time a request waited for a batch "
		"thread.\n# TYPE weft_serve_queue_duration_seconds histogram\n");
	for (size_t i = 0; i < NLAT; i++)
		put(&t, "weft_serve_queue_duration_seconds_bucket{le=\"%g\"} %lu\n",
		    latency_bounds[i], m->queue_buckets[i]);
	put(&t,
	    "weft_serve_queue_duration_seconds_bucket{le=\"+Inf\"} %lu\n"
	    "weft_serve_queue_duration_seconds_sum %.9g\nweft_serve_queue_duration_seconds_count "
	    "%lu\n",
	    m->queue_count, m->queue_sum, m->queue_count);
	/* Triton's names, per model version, from the versions' statistics. */
	static const struct {
		const char *name, *help;
	} nv[] = {
		{"nv_inference_request_success", "Number of successful inference requests, all "
						 "batch sizes"},
		{"nv_inference_request_failure", "Number of failed inference requests, all batch "
						 "sizes"},
		{"nv_inference_count", "Number of inferences performed (does not include cached "
				       "requests)"},
		{"nv_inference_exec_count", "Number of model executions performed (does not "
					    "include cached requests)"},
		{"nv_inference_request_duration_us", "Cumulative inference request duration in "
						     "microseconds (includes cached requests)"},
		{"nv_inference_queue_duration_us", "Cumulative inference queuing duration in "
						   "microseconds (includes cached requests)"},
		{"nv_inference_compute_input_duration_us", "Cumulative compute input duration in "
							   "microseconds (does not include cached "
							   "requests)"},
		{"nv_inference_compute_infer_duration_us", "Cumulative compute inference duration "
							   "in microseconds (does not include "
							   "cached requests)"},
		{"nv_inference_compute_output_duration_us", "Cumulative inference compute output "
							    "duration in microseconds (does not "
							    "include cached requests)"},
	};
	for (size_t k = 0; k < sizeof(nv) / sizeof(nv[0]); k++) {
		put(&t, "# HELP %s %s\n# TYPE %s counter\n", nv[k].name, nv[k].help, nv[k].name);
		for (int i = 0; i < nv_n; i++) {
			wf_serve_stats *st = &vs[i]->stats;
			unsigned long x = 0;
			switch (k) {
			case 0: x = atomic_load(&st->success); break;
			case 1: x = atomic_load(&st->fail); break;
			case 2: x = atomic_load(&st->inferences); break;
			case 3: x = atomic_load(&st->executions); break;
			case 4:
				x = (atomic_load(&st->success_ns) + atomic_load(&st->fail_ns)) /
				    1000;
				break;
			case 5: x = atomic_load(&st->queue_ns) / 1000; break;
			case 6: x = atomic_load(&st->input_ns) / 1000; break;
			case 7: x = atomic_load(&st->infer_ns) / 1000; break;
			default: x = atomic_load(&st->output_ns) / 1000;
			}
			put(&t, "%s{model=\"%s\",version=\"%ld\"} %lu\n", nv[k].name, vs[i]->name,
			    vs[i]->version, x);
		}
	}
	put_pending(&t, vs, nv_n);
	put(&t,
	    "# HELP weft_serve_queue_depth Requests waiting for a batch thread.\n"
	    "# TYPE weft_serve_queue_depth gauge\nweft_serve_queue_depth %d\n",
	    m->queue);
	put_cpu(m, &t);
	pthread_mutex_unlock(&m->mu);
	put(&t, "# HELP weft_serve_model_version Highest version served per model.\n"
		"# TYPE weft_serve_model_version gauge\n");
	for (int i = 0; i < nv_n; i++) {
		int newest = 1;
		for (int j = 0; j < nv_n; j++)
			if (j != i && !strcmp(vs[j]->name, vs[i]->name) &&
			    vs[j]->version > vs[i]->version)
				newest = 0;
		if (newest)
			put(&t, "weft_serve_model_version{model=\"%s\"} %ld\n", vs[i]->name,
			    vs[i]->version);
	}
	put(&t,
	    "# HELP weft_serve_model_versions_loaded Model versions being served.\n"
	    "# TYPE weft_serve_model_versions_loaded gauge\nweft_serve_model_versions_loaded %d\n"
	    "# HELP weft_serve_model_swaps_total Model versions loaded so far.\n"
	    "# TYPE weft_serve_model_swaps_total counter\nweft_serve_model_swaps_total %ld\n"
	    "# HELP weft_serve_model_load_failures_total Model version loads that failed.\n"
	    "# TYPE weft_serve_model_load_failures_total counter\n"
	    "weft_serve_model_load_failures_total %ld\n"
	    "# HELP weft_serve_ready 1 when the server accepts inference requests.\n"
	    "# TYPE weft_serve_ready gauge\nweft_serve_ready %d\n",
	    nv_n, swaps, load_failures, ready);
	if (t.oom) {
		free(t.p);
		return NULL;
	}
	return t.p;
}
