/* images.c: `weft data images`: a folder of photos, one sub-folder per class
 * (Keras image_dataset_from_directory / torchvision ImageFolder layout), into
 * a dataset file. Files are listed in sorted order, split (seeded shuffle,
 * validation last, as Keras does), decoded and resized in parallel blocks by
 * the image module weft-serve uses, and appended in a deterministic order.
 * Unreadable images are skipped and reported; other files are ignored. */
#include "worker/images.h"

#include "common/image.h"
#include "common/progress.h"
#include "common/util.h"
#include "worker/data.h"

#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#define SPLIT_KEY	 0x53504c4954ULL /* "SPLIT" */
#define MAX_DEPTH	 16
#define MAX_FILE_BYTES	 (256L << 20)
#define BLOCK_PER_THREAD 32
#define BLOCK_MAX_BYTES	 ((size_t)256 << 20)

typedef struct item {
	char *path;
	int label;
} item;

typedef struct list {
	item *v;
	long n, cap;
} list;

static int list_add(list *l, char *path, int label)
{
	if (l->n == l->cap) {
		long cap = l->cap ? l->cap * 2 : 256;
		item *v = realloc(l->v, sizeof(*v) * (size_t)cap);
		if (!v)
			return -1;
		l->v = v;
		l->cap = cap;
	}
	l->v[l->n].path = path;
	l->v[l->n].label = label;
	l->n++;
	return 0;
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static int is_image_name(const char *name)
{
	const char *dot = strrchr(name, '.');
	if (!dot || name[0] == '.')
		return 0;
	return !strcasecmp(dot, ".jpg") || !strcasecmp(dot, ".jpeg") || !strcasecmp(dot, ".png");
}

/* Sorted names in dir (no dot entries); *n names. NULL with errno on error. */
static char **sorted_names(const char *dir, long *n)
{
	DIR *d = opendir(dir);
	if (!d)
		return NULL;
	char **v = NULL;
	long cnt = 0, cap = 0;
	struct dirent *e;
	while ((e = readdir(d)) != NULL) {
		if (e->d_name[0] == '.')
			continue; /* ., .., .DS_Store, hidden folders */
		if (cnt == cap) {
			cap = cap ? cap * 2 : 64;
			char **nv = realloc(v, sizeof(*v) * (size_t)cap);
			if (!nv)
				goto oom;
			v = nv;
		}
		if (!(v[cnt] = strdup(e->d_name)))
			goto oom;
		cnt++;
	}
	closedir(d);
	if (cnt)
		qsort(v, (size_t)cnt, sizeof(*v), cmp_str);
	*n = cnt;
	if (!v)
		v = calloc(1, sizeof(*v));
	return v;
oom:
	for (long i = 0; i < cnt; i++)
		free(v[i]);
	free(v);
	closedir(d);
	errno = ENOMEM;
	return NULL;
}

static void free_names(char **v, long n)
{
	for (long i = 0; v && i < n; i++)
		free(v[i]);
	free(v);
}

static char *join(const char *a, const char *b)
{
	size_t n = strlen(a) + strlen(b) + 2;
	char *s = malloc(n);
	if (s)
		snprintf(s, n, "%s/%s", a, b);
	return s;
}

/* Add the image files under dir (recursively, sorted) with label. */
static int walk(list *l, const char *dir, int label, int depth, wf_err *err)
{
	long n = 0;
	char **names = sorted_names(dir, &n);
	if (!names)
		return wf_errf(err, WF_EIO, "%s: cannot list: %s", dir, strerror(errno));
	int rc = 0;
	for (long i = 0; i < n && !rc; i++) {
		char *p = join(dir, names[i]);
		struct stat st;
		if (!p) {
			rc = wf_errf(err, WF_ENOMEM, "out of memory listing %s", dir);
			break;
		}
		if (stat(p, &st) != 0) {
			free(p); /* a dangling link: not an image we can read */
			continue;
		}
		if (S_ISDIR(st.st_mode) && depth < MAX_DEPTH) {
			rc = walk(l, p, label, depth + 1, err);
			free(p);
		} else if (S_ISREG(st.st_mode) && is_image_name(names[i])) {
			if (list_add(l, p, label) != 0) {
				free(p);
				rc = wf_errf(err, WF_ENOMEM, "out of memory listing %s", dir);
			}
		} else {
			free(p);
		}
	}
	free_names(names, n);
	return rc;
}

/* ---- parallel decoding ---------------------------------------------- */

typedef struct job {
	const wf_images_cfg *cfg;
	const item *items; /* this block */
	long n;
	uint8_t *pixels;  /* [n, H, W, C] (decoded form) */
	uint8_t **bytes;  /* [n] file bytes (encoded form), NULL when skipped */
	size_t *lens;	  /* [n] */
	char **why;	  /* [n] reason of a skip, NULL when usable */
	atomic_long next; /* next index to take */
} job;

static char *read_file(const char *path, size_t *len, wf_err *err)
{
	FILE *f = fopen(path, "rb");
	if (!f) {
		wf_errf(err, WF_EIO, "cannot open: %s", strerror(errno));
		return NULL;
	}
	char *buf = NULL;
	struct stat st;
	if (fstat(fileno(f), &st) != 0 || st.st_size > MAX_FILE_BYTES) {
		wf_errf(err, WF_EINVAL, "file larger than %ld bytes", MAX_FILE_BYTES);
		goto out;
	}
	buf = malloc((size_t)st.st_size + 1);
	if (!buf) {
		wf_errf(err, WF_ENOMEM, "out of memory for %ld bytes", (long)st.st_size);
		goto out;
	}
	*len = fread(buf, 1, (size_t)st.st_size, f);
	if (ferror(f)) {
		wf_errf(err, WF_EIO, "read error: %s", strerror(errno));
		free(buf);
		buf = NULL;
	}
out:
	fclose(f);
	return buf;
}

static void *decode_main(void *arg)
{
	job *j = arg;
	const wf_images_cfg *cfg = j->cfg;
	size_t sb = (size_t)cfg->h * cfg->w * cfg->c;
	uint8_t *scratch = cfg->encoded ? malloc(sb) : NULL;
	for (;;) {
		long i = atomic_fetch_add(&j->next, 1);
		if (i >= j->n)
			break;
		wf_err err = {0};
		size_t len = 0;
		char *buf = read_file(j->items[i].path, &len, &err);
		int rc = buf ? 0 : 1;
		if (!rc && cfg->encoded && !scratch)
			rc = wf_errf(&err, WF_ENOMEM, "out of memory");
		if (!rc) /* the encoded form is decoded once too: bad files never get in */
			rc = wf_image_load_u8((const uint8_t *)buf, len, cfg->c, cfg->h, cfg->w,
					      cfg->resize, cfg->max_pixels, "--max-pixels",
					      cfg->encoded ? scratch : j->pixels + (size_t)i * sb,
					      &err);
		if (rc) {
			j->why[i] = strdup(err.msg[0] ? err.msg : "unreadable");
			if (!j->why[i])
				j->why[i] = (char *)"";
			free(buf);
		} else if (cfg->encoded) {
			j->bytes[i] = (uint8_t *)buf;
			j->lens[i] = len;
		} else {
			free(buf);
		}
	}
	free(scratch);
	return NULL;
}

static void progress_line(int tty, long done, long total, double t0, int final)
{
	double dt = wf_now() - t0, ips = dt > 0 ? done / dt : 0;
	char eta[32] = "?";
	if (ips > 0)
		wf_progress_format_eta(eta, sizeof(eta), (total - done) / ips);
	fprintf(stderr, "%simages %ld/%ld (%.0f%%), %.0f images/s, ETA %s%s", tty ? "\r" : "", done,
		total, total ? 100.0 * done / total : 100.0, ips, final ? "0s" : eta,
		tty && !final ? "   " : "\n");
	fflush(stderr);
}

/* Convert items [0, n) into out_path; skipped files go to the report. */
static int convert(const wf_images_cfg *cfg, const item *items, long n, const char *out_path,
		   char **classes, int nclasses, FILE *report, long *written, long *skipped,
		   wf_err *err)
{
	int rc = 0, threads = cfg->threads > 0 ? cfg->threads : 1;
	size_t sb = (size_t)cfg->h * cfg->w * cfg->c;
	/* blocks of 32 images a thread, at most ~256 MiB of pixels (one a thread) */
	long block = (long)threads * BLOCK_PER_THREAD;
	if ((size_t)block * sb > BLOCK_MAX_BYTES)
		block = WF_MAX((long)threads, (long)(BLOCK_MAX_BYTES / sb));
	wf_dataset_writer *wr = NULL;
	job j = {.cfg = cfg};
	pthread_t *tid = calloc((size_t)threads, sizeof(*tid));
	int32_t *labels = malloc(sizeof(*labels) * (size_t)block);
	j.why = calloc((size_t)block, sizeof(*j.why));
	j.bytes = calloc((size_t)block, sizeof(*j.bytes));
	j.lens = calloc((size_t)block, sizeof(*j.lens));
	j.pixels = malloc(sb * (size_t)block);
	*written = *skipped = 0;
	if (!tid || !labels || !j.why || !j.bytes || !j.lens || !j.pixels) {
		rc = wf_errf(err, WF_ENOMEM, "out of memory for blocks of %ld images", block);
		goto out;
	}
	if (cfg->encoded)
		rc = wf_dataset_create_encoded(&wr, out_path, n, cfg->h, cfg->w, cfg->c,
					       cfg->resize, nclasses, (const char *const *)classes,
					       err);
	else
		rc = wf_dataset_create(&wr, out_path, n, cfg->h, cfg->w, cfg->c, nclasses,
				       (const char *const *)classes, err);
	if (rc)
		goto out;
	wf_dataset_writer_allow_short(wr);
	int tty = cfg->progress && isatty(fileno(stderr));
	double t0 = wf_now(), last = 0;
	for (long at = 0; at < n && !rc; at += block) {
		long m = WF_MIN(block, n - at);
		j.items = items + at;
		j.n = m;
		atomic_store(&j.next, 0);
		int started = 0;
		for (int t = 0; t < threads; t++) {
			if (pthread_create(&tid[t], NULL, decode_main, &j) != 0)
				break;
			started++;
		}
		if (!started)
			decode_main(&j);
		for (int t = 0; t < started; t++)
			pthread_join(tid[t], NULL);
		/* compact the usable samples in order, report the others */
		long k = 0;
		for (long i = 0; i < m; i++) {
			if (j.why[i]) {
				fprintf(stderr, "%sweft data images: skipped %s: %s\n",
					tty ? "\r" : "", items[at + i].path, j.why[i]);
				if (report)
					fprintf(report, "%s\t%s\n", items[at + i].path, j.why[i]);
				if (*j.why[i])
					free(j.why[i]);
				j.why[i] = NULL;
				(*skipped)++;
				continue;
			}
			labels[k] = items[at + i].label;
			if (cfg->encoded) {
				j.bytes[k] = j.bytes[i];
				j.lens[k] = j.lens[i];
				if (k != i)
					j.bytes[i] = NULL;
			} else if (k != i) {
				memcpy(j.pixels + (size_t)k * sb, j.pixels + (size_t)i * sb, sb);
			}
			k++;
		}
		if (cfg->encoded) {
			rc = wf_dataset_append_encoded(wr, (const uint8_t *const *)j.bytes, j.lens,
						       labels, k, err);
			for (long i = 0; i < m; i++) {
				free(j.bytes[i]);
				j.bytes[i] = NULL;
			}
		} else {
			rc = wf_dataset_append(wr, j.pixels, labels, k, err);
		}
		*written += k;
		if (cfg->progress && (wf_now() - last > 0.5 || at + m == n)) {
			last = wf_now();
			progress_line(tty, at + m, n, t0, 0);
		}
	}
	if (cfg->progress && tty)
		fprintf(stderr, "\n");
	if (!rc && *written == 0) {
		rc = wf_errf(err, WF_EINVAL, "%s: none of the %ld images could be read", out_path,
			     n);
		goto out;
	}
	if (!rc) {
		rc = wf_dataset_writer_close(wr, err);
		wr = NULL;
	}
out:
	if (wr) /* close with too few samples discards the temporary file */
		wf_dataset_writer_close(wr, NULL);
	free(tid);
	free(labels);
	free(j.why);
	free(j.bytes);
	free(j.lens);
	free(j.pixels);
	return rc;
}

void wf_images_cfg_default(wf_images_cfg *cfg)
{
	memset(cfg, 0, sizeof(*cfg));
	cfg->h = cfg->w = 224;
	cfg->c = 3;
	cfg->resize = WF_RESIZE_FIT;
	cfg->threads = 1;
	cfg->seed = 1;
	cfg->progress = 1;
}

/* Create the folder an output file goes in (mkdir -p, as Keras's and
 * torchvision's savers do), before any image is decoded. */
static int make_parent(const char *flag, const char *path, wf_err *err)
{
	const char *slash = strrchr(path, '/');
	if (!slash || slash == path)
		return 0;
	char dir[4096];
	size_t n = (size_t)(slash - path);
	if (n >= sizeof(dir))
		return wf_errf(err, WF_EINVAL, "data images: %s %s: path too long", flag, path);
	memcpy(dir, path, n);
	dir[n] = '\0';
	struct stat st;
	if (stat(dir, &st) == 0 && S_ISDIR(st.st_mode))
		return 0;
	int e = wf_mkdirs(dir) != 0    ? errno
		: stat(dir, &st) != 0  ? errno
		: !S_ISDIR(st.st_mode) ? ENOTDIR
				       : 0;
	if (e)
		return wf_errf(err, WF_EIO,
			       "data images: %s %s: cannot create the folder %s: %s; choose "
			       "another path or fix the folder's permissions",
			       flag, path, dir, strerror(e));
	return 0;
}

int wf_data_images(const wf_images_cfg *cfg, wf_images_result *res, wf_err *err)
{
	int rc = 0;
	list l = {0};
	long ncls = 0;
	char **classes = NULL;
	char *report_path = NULL;
	FILE *report = NULL;
	memset(res, 0, sizeof(*res));
	if (cfg->h < 1 || cfg->w < 1 || cfg->h > 8192 || cfg->w > 8192)
		return wf_errf(err, WF_EINVAL, "data images: --size %dx%d outside 1..8192", cfg->h,
			       cfg->w);
	if (cfg->c != 1 && cfg->c != 3)
		return wf_errf(err, WF_EINVAL, "data images: %d channels, want 1 or 3", cfg->c);
	if (cfg->val_split < 0 || cfg->val_split >= 1 || (cfg->val_split > 0) != !!cfg->val_out)
		return wf_errf(err, WF_EINVAL,
			       "data images: --val-split F (0 <= F < 1) and --val-out FILE go "
			       "together");
	struct stat st;
	if (stat(cfg->dir, &st) != 0 || !S_ISDIR(st.st_mode))
		return wf_errf(err, WF_EINVAL, "data images: %s is not a directory", cfg->dir);
	if ((rc = make_parent("--out", cfg->out, err)) != 0 ||
	    (cfg->val_out && (rc = make_parent("--val-out", cfg->val_out, err)) != 0))
		return rc;
	classes = sorted_names(cfg->dir, &ncls);
	if (!classes)
		return wf_errf(err, WF_EIO, "data images: cannot list %s: %s", cfg->dir,
			       strerror(errno));
	/* classes are the sub-folders; files at the top level are not in a class */
	long nc = 0;
	for (long i = 0; i < ncls; i++) {
		char *p = join(cfg->dir, classes[i]);
		int dir = p && stat(p, &st) == 0 && S_ISDIR(st.st_mode);
		free(p);
		if (dir)
			classes[nc++] = classes[i];
		else
			free(classes[i]);
	}
	ncls = nc;
	if (ncls < 1 || ncls > 1000000) {
		rc = wf_errf(err, WF_EINVAL,
			     "data images: %s has no class sub-folders (want DIR/CLASS/IMAGE.jpg, "
			     "one folder per class)",
			     cfg->dir);
		goto out;
	}
	for (long i = 0; i < ncls && !rc; i++) {
		char *p = join(cfg->dir, classes[i]);
		rc = p ? walk(&l, p, (int)i, 0, err)
		       : wf_errf(err, WF_ENOMEM, "out of memory listing %s", cfg->dir);
		free(p);
	}
	if (rc)
		goto out;
	if (l.n == 0) {
		rc = wf_errf(err, WF_EINVAL,
			     "data images: no .jpg, .jpeg or .png files under the %ld class "
			     "folders of %s",
			     ncls, cfg->dir);
		goto out;
	}
	res->found = l.n;
	res->nclasses = (int)ncls;
	long ntrain = l.n;
	if (cfg->val_split > 0) { /* seeded shuffle; validation is the last part */
		wf_rng g;
		wf_rng_seed(&g, wf_hash3(cfg->seed, SPLIT_KEY, 0));
		for (long i = l.n - 1; i > 0; i--) {
			long k = (long)wf_rng_below(&g, (uint64_t)i + 1);
			item t = l.v[i];
			l.v[i] = l.v[k];
			l.v[k] = t;
		}
		long nval = (long)(cfg->val_split * (double)l.n);
		ntrain = l.n - nval;
		if (nval < 1 || ntrain < 1) {
			rc = wf_errf(err, WF_EINVAL,
				     "data images: --val-split %g of %ld images leaves %ld for "
				     "training and %ld for validation",
				     cfg->val_split, l.n, ntrain, nval);
			goto out;
		}
	}
	size_t rl = strlen(cfg->out) + 16;
	report_path = malloc(rl);
	if (!report_path) {
		rc = wf_errf(err, WF_ENOMEM, "out of memory");
		goto out;
	}
	snprintf(report_path, rl, "%s.skipped.txt", cfg->out);
	report = fopen(report_path, "w");
	if (!report) {
		rc = wf_errf(err, WF_EIO, "%s: cannot create: %s", report_path, strerror(errno));
		goto out;
	}
	long sk = 0;
	rc = convert(cfg, l.v, ntrain, cfg->out, classes, (int)ncls, report, &res->train, &sk, err);
	res->skipped += sk;
	if (!rc && ntrain < l.n) {
		rc = convert(cfg, l.v + ntrain, l.n - ntrain, cfg->val_out, classes, (int)ncls,
			     report, &res->val, &sk, err);
		res->skipped += sk;
	}
	if (fclose(report) != 0 && !rc)
		rc = wf_errf(err, WF_EIO, "%s: write error", report_path);
	report = NULL;
	if (!rc && res->skipped == 0)
		unlink(report_path); /* nothing to report: no stale report either */
out:
	if (report)
		fclose(report);
	free(report_path);
	for (long i = 0; i < l.n; i++)
		free(l.v[i].path);
	free(l.v);
	free_names(classes, ncls);
	return rc;
}
