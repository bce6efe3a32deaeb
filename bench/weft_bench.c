/* weft_bench.c: weft-bench, a load generator for weft-serve (or any server
 * speaking the TF Serving REST or KServe v2 protocol). N client threads, each
 * with one keep-alive connection, send a fixed number of requests or run for
 * a duration; JPEG files, the images of a dataset file (.h5, docs/formats.md) or random raw
 * tensors. Prints throughput, latency percentiles, non-2xx counts, the model versions that answered
 * and, when the inputs carry labels (a dataset file, or JPEGs in one folder per class), the top-1
 * accuracy. */
#include "common/flags.h"
#include "common/util.h"
#include "worker/data.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <jansson.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

/* One prepared request body and, when known, the true classes. */
typedef struct payload {
	char *body;
	size_t len;
	size_t header_len; /* KServe binary: JSON part length, else 0 */
	int n;		   /* samples in the request */
	int *labels;	   /* [n] true classes, -1 when unknown; NULL: all unknown */
} payload;

#define MAX_VERSIONS 16

typedef struct bench {
	char host[256], port[16], model[128];
	int kserve;
	int concurrency;
	long requests;	 /* 0: run for duration */
	double duration; /* seconds */
	int batch;	 /* samples per request (raw tensors) */
	const char *images;
	const char *dataset; /* .h5 dataset file */
	long limit;	     /* dataset samples to use, 0: all */
	int h, w, c, classes;
	char **class_names;
	float scale, mean[4], std[4]; /* the model's preprocessing (TF JSON numbers) */
	payload *payloads;
	int npayloads;
	char path[512];
	atomic_long next;
	double t_end;
	pthread_mutex_t mu;
	double *lat; /* seconds, one per finished request */
	long nlat, cap_lat;
	long ok, ok_samples, non2xx, neterr, correct, labelled, codes[600];
	long version_ids[MAX_VERSIONS], version_counts[MAX_VERSIONS];
	int nversions;
} bench;

/* ---- a minimal HTTP/1.1 client ------------------------------------------ */

typedef struct conn {
	int fd;
	char *buf;
	size_t cap, len;
} conn;

static int conn_open(bench *b, conn *c)
{
	struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res;
	if (getaddrinfo(b->host, b->port, &hints, &res) != 0)
		return -1;
	c->fd = -1;
	for (struct addrinfo *a = res; a; a = a->ai_next) {
		int fd = socket(a->ai_family, a->ai_socktype, a->ai_protocol);
		if (fd < 0)
			continue;
		if (connect(fd, a->ai_addr, a->ai_addrlen) == 0) {
			int one = 1;
			setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
			c->fd = fd;
			break;
		}
		close(fd);
	}
	freeaddrinfo(res);
	c->len = 0;
	return c->fd >= 0 ? 0 : -1;
}

static void conn_close(conn *c)
{
	if (c->fd >= 0)
		close(c->fd);
	c->fd = -1;
	c->len = 0;
}

static int send_all(int fd, const char *p, size_t n)
{
	while (n) {
		ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return -1;
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

static int fill(conn *c, size_t want)
{
	while (c->len < want) {
		if (c->cap < want + 1) {
			size_t cap = c->cap ? c->cap : 65536;
			while (cap < want + 1)
				cap *= 2;
			char *p = realloc(c->buf, cap);
			if (!p)
				return -1;
			c->buf = p;
			c->cap = cap;
		}
		ssize_t r = recv(c->fd, c->buf + c->len, c->cap - c->len - 1, 0);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return -1;
		c->len += (size_t)r;
	}
	return 0;
}

/* One request/response on c. Returns the status code (or -1), the body
 * (pointing into c->buf, valid until the next call) and its length. */
static int http_call(bench *b, conn *c, const char *method, const char *path, const payload *p,
		     const char **body, size_t *body_len, size_t *resp_header_len)
{
	char head[1024];
	int n = snprintf(head, sizeof(head),
			 "%s %s HTTP/1.1\r\nHost: %s:%s\r\nContent-Type: %s\r\n"
			 "Content-Length: %zu\r\n",
			 method, path, b->host, b->port,
			 p && p->header_len ? "application/octet-stream" : "application/json",
			 p ? p->len : 0);
	if (p && p->header_len)
		n += snprintf(head + n, sizeof(head) - n,
			      "Inference-Header-Content-Length: %zu\r\n", p->header_len);
	n += snprintf(head + n, sizeof(head) - n, "\r\n");
	if (c->fd < 0 && conn_open(b, c))
		return -1;
	if (send_all(c->fd, head, (size_t)n) || (p && send_all(c->fd, p->body, p->len)))
		goto fail;
	/* headers */
	char *end = NULL;
	size_t scanned = 0;
	for (;;) {
		if (c->len >= 4) {
			c->buf[c->len] = 0;
			end = strstr(c->buf + (scanned > 3 ? scanned - 3 : 0), "\r\n\r\n");
			if (end)
				break;
			scanned = c->len;
		}
		if (fill(c, c->len + 1))
			goto fail;
	}
	size_t hlen = (size_t)(end - c->buf) + 4;
	int code = 0;
	if (sscanf(c->buf, "HTTP/1.%*d %d", &code) != 1)
		goto fail;
	long clen = -1;
	int close_after = 0;
	*resp_header_len = 0;
	for (char *line = strstr(c->buf, "\r\n") + 2; line < end; line = strstr(line, "\r\n") + 2) {
		if (!strncasecmp(line, "Content-Length:", 15))
			clen = strtol(line + 15, NULL, 10);
		else if (!strncasecmp(line, "Connection: close", 17))
			close_after = 1;
		else if (!strncasecmp(line, "Inference-Header-Content-Length:", 32))
			*resp_header_len = (size_t)strtol(line + 32, NULL, 10);
	}
	if (clen < 0)
		goto fail;
	if (fill(c, hlen + (size_t)clen))
		goto fail;
	/* move the body to the front, keep any pipelined bytes after it */
	memmove(c->buf, c->buf + hlen, c->len - hlen);
	c->len -= hlen;
	c->buf[c->len] = 0;
	*body = c->buf;
	*body_len = (size_t)clen;
	if (close_after) {
		/* the caller reads the body before the next call reopens */
		close(c->fd);
		c->fd = -1;
	}
	return code;
fail:
	conn_close(c);
	return -1;
}

/* Drop the consumed response body from the connection buffer. */
static void conn_consume(conn *c, size_t n)
{
	if (n > c->len)
		n = c->len;
	memmove(c->buf, c->buf + n, c->len - n);
	c->len -= n;
	if (c->fd < 0)
		c->len = 0;
}

/* ---- setting up ---------------------------------------------------------- */

static int parse_url(bench *b, const char *url)
{
	if (strncmp(url, "http://", 7) == 0)
		url += 7;
	const char *colon = strrchr(url, ':');
	const char *slash = strchr(url, '/');
	size_t hn = colon ? (size_t)(colon - url) : slash ? (size_t)(slash - url) : strlen(url);
	if (hn == 0 || hn >= sizeof(b->host))
		return -1;
	memcpy(b->host, url, hn);
	b->host[hn] = 0;
	if (colon)
		snprintf(b->port, sizeof(b->port), "%.*s",
			 (int)(slash ? (size_t)(slash - colon - 1) : strlen(colon + 1)), colon + 1);
	else
		snprintf(b->port, sizeof(b->port), "80");
	return 0;
}

/* Input shape and class names from the KServe model metadata. */
static int fetch_metadata(bench *b)
{
	conn c = {.fd = -1};
	char path[256];
	const char *body;
	size_t len, hl;
	snprintf(path, sizeof(path), "/v2/models/%s", b->model);
	int code = -1;
	for (int tries = 0; tries < 50 && code != 200; tries++) {
		code = http_call(b, &c, "GET", path, NULL, &body, &len, &hl);
		if (code != 200)
			usleep(100000);
	}
	if (code != 200) {
		fprintf(stderr, "weft-bench: GET %s failed (status %d)\n", path, code);
		conn_close(&c);
		free(c.buf);
		return -1;
	}
	json_t *root = json_loadb(body, len, 0, NULL);
	json_t *shape =
		json_object_get(json_array_get(json_object_get(root, "inputs"), 0), "shape");
	json_t *oshape =
		json_object_get(json_array_get(json_object_get(root, "outputs"), 0), "shape");
	json_t *params = json_object_get(root, "parameters");
	json_t *classes = json_object_get(params, "classes");
	json_t *pre = json_object_get(params, "preprocessing");
	b->scale = 1.0f / 255.0f;
	for (int i = 0; i < 4; i++) {
		b->mean[i] =
			(float)json_number_value(json_array_get(json_object_get(pre, "mean"), i));
		json_t *sd = json_array_get(json_object_get(pre, "std"), i);
		b->std[i] = sd ? (float)json_number_value(sd) : 1.0f;
	}
	if (json_is_number(json_object_get(pre, "scale")))
		b->scale = (float)json_number_value(json_object_get(pre, "scale"));
	int rc = -1;
	if (json_array_size(shape) == 4 && json_array_size(oshape) == 2) {
		b->h = (int)json_integer_value(json_array_get(shape, 1));
		b->w = (int)json_integer_value(json_array_get(shape, 2));
		b->c = (int)json_integer_value(json_array_get(shape, 3));
		b->classes = (int)json_integer_value(json_array_get(oshape, 1));
		if (json_array_size(classes) == (size_t)b->classes) {
			b->class_names = calloc((size_t)b->classes, sizeof(char *));
			for (int i = 0; i < b->classes; i++)
				b->class_names[i] =
					strdup(json_string_value(json_array_get(classes, i)) ?: "");
		}
		rc = 0;
	} else {
		fprintf(stderr, "weft-bench: model metadata has no [N,H,W,C] input\n");
	}
	json_decref(root);
	conn_close(&c);
	free(c.buf);
	return rc;
}

static int label_of_dir(bench *b, const char *dir)
{
	for (int i = 0; b->class_names && i < b->classes; i++)
		if (!strcmp(b->class_names[i], dir))
			return i;
	char *end;
	long v = strtol(dir, &end, 10);
	return *dir && !*end && v >= 0 && v < b->classes ? (int)v : -1;
}

static char *b64(const unsigned char *d, size_t n)
{
	static const char t[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
	char *s = malloc((n + 2) / 3 * 4 + 1), *o = s;
	for (size_t i = 0; i < n; i += 3) {
		unsigned v = (unsigned)d[i] << 16 | (i + 1 < n ? d[i + 1] << 8 : 0) |
			     (i + 2 < n ? d[i + 2] : 0);
		*o++ = t[v >> 18 & 63];
		*o++ = t[v >> 12 & 63];
		*o++ = i + 1 < n ? t[v >> 6 & 63] : '=';
		*o++ = i + 2 < n ? t[v & 63] : '=';
	}
	*o = 0;
	return s;
}

/* Takes ownership of body and labels. */
static void add_payload(bench *b, char *body, size_t len, size_t header_len, int n, int *labels)
{
	b->payloads = realloc(b->payloads, sizeof(*b->payloads) * (size_t)(b->npayloads + 1));
	b->payloads[b->npayloads++] = (payload){body, len, header_len, n, labels};
}

static int *one_label(int label)
{
	if (label < 0)
		return NULL;
	int *l = malloc(sizeof(*l));
	*l = label;
	return l;
}

static int add_image(bench *b, const char *path, int label)
{
	char *data;
	size_t n;
	if (wf_read_file(path, &data, &n))
		return -1;
	if (b->kserve) {
		char head[512];
		int hl = snprintf(head, sizeof(head),
				  "{\"inputs\":[{\"name\":\"input\",\"shape\":[1],\"datatype\":"
				  "\"BYTES\",\"parameters\":{\"binary_data_size\":%zu}}],"
				  "\"outputs\":[{\"name\":\"probabilities\"}]}",
				  n + 4);
		char *body = malloc((size_t)hl + 4 + n);
		uint32_t l32 = (uint32_t)n;
		memcpy(body, head, (size_t)hl);
		memcpy(body + hl, &l32, 4);
		memcpy(body + hl + 4, data, n);
		add_payload(b, body, (size_t)hl + 4 + n, (size_t)hl, 1, one_label(label));
	} else {
		char *s = b64((unsigned char *)data, n);
		size_t len = strlen(s) + 64;
		char *body = malloc(len);
		int bl = snprintf(body, len, "{\"instances\":[{\"b64\":\"%s\"}]}", s);
		free(s);
		add_payload(b, body, (size_t)bl, 0, 1, one_label(label));
	}
	free(data);
	return 0;
}

static int is_jpeg_name(const char *s)
{
	size_t n = strlen(s);
	return (n > 4 && !strcasecmp(s + n - 4, ".jpg")) ||
	       (n > 5 && !strcasecmp(s + n - 5, ".jpeg"));
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* JPEGs in dir (label -1) or in its subfolders (label from the folder name). */
static int load_images(bench *b, const char *dir, int depth, int label)
{
	DIR *d = opendir(dir);
	if (!d) {
		fprintf(stderr, "weft-bench: --images %s: %s\n", dir, strerror(errno));
		return -1;
	}
	char **names = NULL;
	size_t nn = 0;
	struct dirent *e;
	while ((e = readdir(d))) {
		if (e->d_name[0] == '.')
			continue;
		names = realloc(names, sizeof(*names) * (nn + 1));
		names[nn++] = strdup(e->d_name);
	}
	closedir(d);
	qsort(names, nn, sizeof(*names), cmp_str);
	char path[4096];
	for (size_t i = 0; i < nn; i++) {
		snprintf(path, sizeof(path), "%s/%s", dir, names[i]);
		if (is_jpeg_name(names[i]))
			add_image(b, path, label);
		else if (depth == 0)
			load_images(b, path, 1, label_of_dir(b, names[i]));
		free(names[i]);
	}
	free(names);
	return 0;
}

/* A TF Serving :predict body of n images x [n,H,W,C] (numbers). */
static char *tf_body(const bench *b, const float *x, int n)
{
	json_t *inst = json_array();
	size_t per = (size_t)b->h * b->w * b->c;
	for (int s = 0; s < n; s++) {
		json_t *img = json_array();
		for (int y = 0; y < b->h; y++) {
			json_t *row = json_array();
			for (int xx = 0; xx < b->w; xx++) {
				json_t *px = json_array();
				const float *v = x + per * s + ((size_t)y * b->w + xx) * b->c;
				for (int ch = 0; ch < b->c; ch++)
					json_array_append_new(px, json_real(v[ch]));
				json_array_append_new(row, px);
			}
			json_array_append_new(img, row);
		}
		json_array_append_new(inst, img);
	}
	json_t *root = json_pack("{so}", "instances", inst);
	char *body = json_dumps(root, JSON_COMPACT | JSON_REAL_PRECISION(6));
	json_decref(root);
	return body;
}

/* A KServe binary body: one tensor of n images in dtype (FP32 or UINT8). */
static char *kserve_body(const bench *b, const void *x, int n, const char *dtype, size_t elem,
			 size_t *len, size_t *header_len)
{
	size_t bytes = (size_t)n * b->h * b->w * b->c * elem;
	char head[512];
	int hl = snprintf(head, sizeof(head),
			  "{\"inputs\":[{\"name\":\"input\",\"shape\":[%d,%d,%d,%d],"
			  "\"datatype\":\"%s\",\"parameters\":{\"binary_data_size\":%zu}}],"
			  "\"outputs\":[{\"name\":\"probabilities\"}]}",
			  n, b->h, b->w, b->c, dtype, bytes);
	char *body = malloc((size_t)hl + bytes);
	memcpy(body, head, (size_t)hl);
	memcpy(body + hl, x, bytes);
	*len = (size_t)hl + bytes;
	*header_len = (size_t)hl;
	return body;
}

static void make_raw(bench *b)
{
	size_t count = (size_t)b->h * b->w * b->c * (size_t)b->batch;
	float *x = malloc(count * sizeof(float));
	wf_rng r;
	wf_rng_seed(&r, 1);
	for (int k = 0; k < 8; k++) {
		for (size_t i = 0; i < count; i++)
			x[i] = (float)wf_rng_normal(&r);
		size_t len, hl = 0;
		char *body;
		if (b->kserve) {
			body = kserve_body(b, x, b->batch, "FP32", sizeof(float), &len, &hl);
		} else {
			body = tf_body(b, x, b->batch);
			len = strlen(body);
		}
		add_payload(b, body, len, hl, b->batch, NULL);
	}
	free(x);
}

/* The images of a dataset file, b->batch per request, with their labels.
 * KServe: raw UINT8 pixels (the server applies the model's preprocessing);
 * TF: numbers, preprocessed here as the model's metadata says. */
static int load_dataset(bench *b)
{
	wf_err err = {0};
	wf_dataset *ds = NULL;
	if (wf_dataset_open(&ds, b->dataset, &err)) {
		fprintf(stderr, "weft-bench: --dataset: %s\n", err.msg);
		return -1;
	}
	const wf_dataset_info *in = wf_dataset_info_get(ds);
	int rc = -1;
	if (in->h != b->h || in->w != b->w || in->c != b->c || in->nclasses != b->classes) {
		fprintf(stderr,
			"weft-bench: --dataset %s holds %dx%dx%d images of %d classes; the model "
			"takes %dx%dx%d and predicts %d classes\n",
			b->dataset, in->h, in->w, in->c, in->nclasses, b->h, b->w, b->c,
			b->classes);
		goto close;
	}
	long total = b->limit > 0 && b->limit < in->count ? b->limit : in->count;
	size_t per = (size_t)in->h * in->w * in->c;
	uint8_t *img = malloc(per * (size_t)b->batch);
	float *x = malloc(sizeof(float) * per * (size_t)b->batch);
	for (long start = 0; start < total; start += b->batch) {
		int n = (int)WF_MIN((long)b->batch, total - start);
		int *labels = malloc(sizeof(*labels) * (size_t)n);
		int32_t *l32 = malloc(sizeof(*l32) * (size_t)n);
		if (wf_dataset_read(ds, start, n, img, l32, &err)) {
			fprintf(stderr, "weft-bench: --dataset: %s\n", err.msg);
			free(labels);
			free(l32);
			goto free_bufs;
		}
		for (int i = 0; i < n; i++)
			labels[i] = l32[i];
		free(l32);
		size_t len, hl = 0;
		char *body;
		if (b->kserve) {
			body = kserve_body(b, img, n, "UINT8", 1, &len, &hl);
		} else {
			for (size_t i = 0; i < per * (size_t)n; i++) {
				int ch = (int)(i % (size_t)b->c) % 4;
				x[i] = ((float)img[i] * b->scale - b->mean[ch]) / b->std[ch];
			}
			body = tf_body(b, x, n);
			len = strlen(body);
		}
		add_payload(b, body, len, hl, n, labels);
	}
	rc = 0;
free_bufs:
	free(img);
	free(x);
close:
	wf_dataset_close(ds);
	return rc;
}

/* ---- running ---------------------------------------------------------------- */

/* Score of class j of sample i in a reply (JSON rows, a flat JSON array, or
 * a binary section that may be unaligned). */
static float reply_score(const json_t *rows, const json_t *flat, const char *bin, int classes,
			 int i, int j)
{
	if (bin) {
		float v;
		memcpy(&v, bin + sizeof(float) * ((size_t)i * classes + j), sizeof(v));
		return v;
	}
	if (rows)
		return (float)json_number_value(json_array_get(json_array_get(rows, i), j));
	return (float)json_number_value(json_array_get(flat, (size_t)i * classes + j));
}

/* The answering version of a reply and how many of p's labelled samples it
 * classified right (top-1). */
static void read_reply(bench *b, const char *body, size_t len, size_t header_len, const payload *p,
		       long *correct, long *labelled, long *version)
{
	*version = -1;
	json_t *root = json_loadb(body, header_len ? header_len : len, 0, NULL);
	if (!root)
		return;
	const char *v = json_string_value(json_object_get(root, "model_version"));
	if (v)
		*version = strtol(v, NULL, 10);
	const char *bin = NULL;
	json_t *rows = NULL, *flat = NULL;
	size_t need = sizeof(float) * (size_t)b->classes * (size_t)p->n;
	if (b->kserve) {
		json_t *o = json_array_get(json_object_get(root, "outputs"), 0);
		flat = json_object_get(o, "data");
		if (!flat && header_len && len - header_len >= need)
			bin = body + header_len;
		if (!bin && json_array_size(flat) < (size_t)b->classes * (size_t)p->n)
			goto out;
	} else {
		rows = json_object_get(root, "predictions");
		if (json_array_size(rows) < (size_t)p->n)
			goto out;
	}
	for (int i = 0; p->labels && i < p->n; i++) {
		if (p->labels[i] < 0)
			continue;
		int top = 0;
		float best = reply_score(rows, flat, bin, b->classes, i, 0);
		for (int j = 1; j < b->classes; j++) {
			float s = reply_score(rows, flat, bin, b->classes, i, j);
			if (s > best) {
				best = s;
				top = j;
			}
		}
		(*labelled)++;
		*correct += top == p->labels[i];
	}
out:
	json_decref(root);
}

static void *client_main(void *arg)
{
	bench *b = arg;
	conn c = {.fd = -1};
	double *lat = NULL;
	long nlat = 0, cap = 0, ok = 0, ok_samples = 0, non2xx = 0, neterr = 0, correct = 0,
	     labelled = 0;
	long codes[600] = {0};
	long vids[MAX_VERSIONS], vcounts[MAX_VERSIONS];
	int nv = 0;
	for (;;) {
		long i = atomic_fetch_add(&b->next, 1);
		if (b->requests ? i >= b->requests : wf_now() >= b->t_end)
			break;
		const payload *p = &b->payloads[i % b->npayloads];
		const char *body;
		size_t len, hl;
		double t0 = wf_now();
		int code = http_call(b, &c, "POST", b->path, p, &body, &len, &hl);
		if (code < 0) { /* a stale keep-alive connection: retry once */
			code = http_call(b, &c, "POST", b->path, p, &body, &len, &hl);
		}
		double dt = wf_now() - t0;
		if (code < 0) {
			neterr++;
			continue;
		}
		if (nlat == cap) {
			cap = cap ? cap * 2 : 1024;
			lat = realloc(lat, sizeof(*lat) * (size_t)cap);
		}
		lat[nlat++] = dt;
		codes[code > 0 && code < 600 ? code : 0]++;
		if (code / 100 == 2) {
			long ver;
			ok++;
			ok_samples += p->n;
			read_reply(b, body, len, hl, p, &correct, &labelled, &ver);
			if (ver >= 0) {
				int k = 0;
				while (k < nv && vids[k] != ver)
					k++;
				if (k == nv && nv < MAX_VERSIONS) {
					vids[nv] = ver;
					vcounts[nv++] = 0;
				}
				if (k < nv)
					vcounts[k]++;
			}
		} else {
			non2xx++;
			if (non2xx <= 3)
				fprintf(stderr, "weft-bench: status %d: %.*s\n", code,
					(int)WF_MIN(len, 300), body);
		}
		conn_consume(&c, len);
	}
	pthread_mutex_lock(&b->mu);
	if (b->nlat + nlat > b->cap_lat) {
		b->cap_lat = b->nlat + nlat;
		b->lat = realloc(b->lat, sizeof(double) * (size_t)b->cap_lat);
	}
	if (nlat)
		memcpy(b->lat + b->nlat, lat, sizeof(double) * (size_t)nlat);
	b->nlat += nlat;
	b->ok += ok;
	b->ok_samples += ok_samples;
	b->non2xx += non2xx;
	b->neterr += neterr;
	b->correct += correct;
	b->labelled += labelled;
	for (int k = 0; k < 600; k++)
		b->codes[k] += codes[k];
	for (int k = 0; k < nv; k++) {
		int j = 0;
		while (j < b->nversions && b->version_ids[j] != vids[k])
			j++;
		if (j == b->nversions && j < MAX_VERSIONS) {
			b->version_ids[j] = vids[k];
			b->version_counts[b->nversions++] = 0;
		}
		if (j < b->nversions)
			b->version_counts[j] += vcounts[k];
	}
	pthread_mutex_unlock(&b->mu);
	conn_close(&c);
	free(c.buf);
	free(lat);
	return NULL;
}

static double pct(const double *v, long n, double q)
{
	if (n == 0)
		return 0;
	long i = (long)(q * (double)(n - 1) + 0.5);
	return v[i < n ? i : n - 1];
}

int main(int argc, char **argv)
{
	bench b = {.concurrency = 50, .requests = 1000, .batch = 1};
	int as_json = 0, count_given = 0;
	const char *url = "http://127.0.0.1:8501", *model = "default", *protocol = "tf";
	/* -1: not given */
	long concurrency = b.concurrency, requests = -1, limit = -1, batch = b.batch;
	double duration = -1;
	const wf_command_help help = {
		"weft-bench [flags]",
		"Load-tests a weft-serve (or TF Serving / Triton) HTTP endpoint: throughput,\n"
		"latency percentiles and, with labelled images, accuracy."};
	const wf_flag flags[] = {
		{"url", WF_FLAG_STR, &url, "URL", "server (default http://127.0.0.1:8501)"},
		{"model", WF_FLAG_STR, &model, "NAME", "model name (default \"default\")"},
		{"protocol", WF_FLAG_STR, &protocol, "tf|kserve",
		 "TF Serving :predict (JSON, b64 JPEG) or KServe v2 /infer (binary tensors) "
		 "(default tf)"},
		{"concurrency", WF_FLAG_INT, &concurrency, "N",
		 "client threads, one keep-alive connection each (default 50)"},
		{"requests", WF_FLAG_INT, &requests, "N",
		 "requests in all (default 1000; with --dataset, one pass)"},
		{"duration", WF_FLAG_DOUBLE, &duration, "S",
		 "run for S seconds instead of a request count"},
		{"images", WF_FLAG_STR, &b.images, "DIR",
		 "JPEG files in DIR, or in DIR/<class>/ (then accuracy is reported); without it "
		 "random raw tensors are sent"},
		{"dataset", WF_FLAG_STR, &b.dataset, "FILE.h5",
		 "the images of a weft dataset file with their labels (accuracy is reported): "
		 "KServe sends raw UINT8 pixels, TF numbers preprocessed as the model's metadata "
		 "says"},
		{"limit", WF_FLAG_INT, &limit, "N",
		 "use the first N samples of --dataset (default all)"},
		{"batch", WF_FLAG_INT, &batch, "N",
		 "samples per raw-tensor or --dataset request (default 1)"},
		{"json", WF_FLAG_BOOL, &as_json, NULL, "print the result as one JSON line"},
		{0},
	};
	wf_cli_list pos = {0};
	wf_err err = {0};
	char *cmd = argv[0];
	argv[0] = "weft-bench"; /* messages name the program, not its path */
	int rc = wf_cli_parse(&help, flags, argc, argv, &pos, 0, &err);
	argv[0] = cmd;
	wf_cli_list_free(&pos);
	if (rc == 1)
		return 0;
	if (!rc && strcmp(protocol, "tf") && strcmp(protocol, "kserve"))
		rc = wf_errf(&err, WF_EINVAL,
			     "weft-bench: flag --protocol: '%s' is not tf or kserve", protocol);
	const struct {
		const char *flag;
		double v;
	} positive[] = {{"concurrency", (double)concurrency},
			{"requests", (double)requests},
			{"duration", duration},
			{"limit", (double)limit},
			{"batch", (double)batch}};
	for (size_t i = 0; !rc && i < sizeof(positive) / sizeof(positive[0]); i++)
		if (positive[i].v <= 0 && (positive[i].v != -1 || i == 0 || i == 4))
			rc = wf_errf(&err, WF_EINVAL, "weft-bench: flag --%s: must be positive",
				     positive[i].flag);
	if (rc) {
		fprintf(stderr, "%s\n", err.msg);
		return 1;
	}
	b.kserve = !strcmp(protocol, "kserve");
	b.concurrency = (int)concurrency;
	b.batch = (int)batch;
	b.limit = limit > 0 ? limit : 0;
	if (requests > 0) {
		b.requests = requests;
		count_given = 1;
	}
	if (duration > 0) {
		b.duration = duration;
		b.requests = 0;
		count_given = 1;
	}
	snprintf(b.model, sizeof(b.model), "%s", model);
	if (parse_url(&b, url)) {
		fprintf(stderr, "weft-bench: --url %s: expected http://host:port\n", url);
		return 1;
	}
	if (b.kserve)
		snprintf(b.path, sizeof(b.path), "/v2/models/%s/infer", b.model);
	else
		snprintf(b.path, sizeof(b.path), "/v1/models/%s:predict", b.model);
	if (b.images && b.dataset) {
		fprintf(stderr, "weft-bench: give --images or --dataset, not both\n");
		return 1;
	}
	if (fetch_metadata(&b))
		return 1;
	if (b.dataset) {
		if (load_dataset(&b))
			return 1;
		if (!count_given)
			b.requests = b.npayloads;
	} else if (b.images) {
		if (load_images(&b, b.images, 0, -1))
			return 1;
		if (!b.npayloads) {
			fprintf(stderr, "weft-bench: no .jpg files under %s\n", b.images);
			return 1;
		}
	} else {
		make_raw(&b);
	}
	pthread_mutex_init(&b.mu, NULL);
	pthread_t *tids = calloc((size_t)b.concurrency, sizeof(*tids));
	double t0 = wf_now();
	b.t_end = t0 + b.duration;
	for (int i = 0; i < b.concurrency; i++)
		pthread_create(&tids[i], NULL, client_main, &b);
	for (int i = 0; i < b.concurrency; i++)
		pthread_join(tids[i], NULL);
	double el = wf_now() - t0;
	wf_sort_doubles(b.lat, (size_t)b.nlat);
	double rps = b.ok / el, ips = b.ok_samples / el;
	if (as_json) {
		printf("{\"requests\":%ld,\"ok\":%ld,\"non_2xx\":%ld,\"errors\":%ld,\"seconds\":%."
		       "3f,"
		       "\"requests_per_sec\":%.2f,\"images_per_sec\":%.2f,\"p50_ms\":%.3f,"
		       "\"p90_ms\":%.3f,\"p99_ms\":%.3f,\"max_ms\":%.3f",
		       b.nlat + b.neterr, b.ok, b.non2xx, b.neterr, el, rps, ips,
		       1e3 * pct(b.lat, b.nlat, 0.5), 1e3 * pct(b.lat, b.nlat, 0.9),
		       1e3 * pct(b.lat, b.nlat, 0.99), 1e3 * (b.nlat ? b.lat[b.nlat - 1] : 0));
		if (b.labelled)
			printf(",\"accuracy\":%.4f", (double)b.correct / b.labelled);
		printf(",\"versions\":{");
		for (int k = 0; k < b.nversions; k++)
			printf("%s\"%ld\":%ld", k ? "," : "", b.version_ids[k],
			       b.version_counts[k]);
		printf("}}\n");
	} else {
		printf("weft-bench: %s %s, %d clients, %ld requests in %.2fs\n",
		       b.kserve ? "kserve" : "tf",
		       b.images	   ? "jpeg"
		       : b.dataset ? "dataset"
				   : "raw",
		       b.concurrency, b.nlat + b.neterr, el);
		printf("  throughput  %.1f requests/s, %.1f images/s\n", rps, ips);
		printf("  latency ms  p50 %.2f  p90 %.2f  p99 %.2f  max %.2f\n",
		       1e3 * pct(b.lat, b.nlat, 0.5), 1e3 * pct(b.lat, b.nlat, 0.9),
		       1e3 * pct(b.lat, b.nlat, 0.99), 1e3 * (b.nlat ? b.lat[b.nlat - 1] : 0));
		printf("  ok %ld  non-2xx %ld  connection errors %ld\n", b.ok, b.non2xx, b.neterr);
		for (int k = 0; k < 600; k++)
			if (b.codes[k] && k / 100 != 2)
				printf("    status %d: %ld\n", k, b.codes[k]);
		if (b.labelled)
			printf("  accuracy    %.4f (%ld of %ld)\n", (double)b.correct / b.labelled,
			       b.correct, b.labelled);
		if (b.nversions) {
			printf("  versions   ");
			for (int k = 0; k < b.nversions; k++)
				printf(" %ld:%ld", b.version_ids[k], b.version_counts[k]);
			printf("\n");
		}
	}
	return b.non2xx || b.neterr ? 2 : 0;
}
