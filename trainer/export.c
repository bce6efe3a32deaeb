/* export.c: checkpoint -> serving model: pick the checkpoint, fold, write a
 * new version directory atomically. */
#include "trainer/export.h"
#include "trainer/quantize.h"

#include "common/events.h"
#include "common/atomicfile.h"
#include "common/ckptdir.h"
#include "common/crc32c.h"
#include "common/log.h"
#include "common/util.h"
#include "model/fold.h"
#include "trainer/checkpoint.h"
#include "trainer/cli.h"
#include "worker/data.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define EXPORT_PATH_MAX 4096
#define EXPORT_FILE_MAX (EXPORT_PATH_MAX + 64)
#define EXPORT_TRIES	1000 /* version numbers tried when racing another export */

/* ---- version directories ------------------------------------------------ */

/* 1 when s is a version name: digits only, no leading zero, fits a long. */
static int parse_version(const char *s, long *v)
{
	size_t n = strlen(s);
	if (n == 0 || n > 15 || strspn(s, "0123456789") != n || s[0] == '0')
		return 0;
	*v = strtol(s, NULL, 10);
	return 1;
}

/* Highest numeric entry of base (0 when none or base is missing). Any
 * numeric entry counts, with or without a model file, so a version that is
 * half there (copied by hand, or failed to load) is never reused. */
static int highest_version(const char *base, long *best, wf_err *err)
{
	*best = 0;
	DIR *d = opendir(base);
	if (!d) {
		if (errno == ENOENT)
			return 0;
		return wf_errf(err, WF_EIO, "%s: cannot list: %s", base, strerror(errno));
	}
	struct dirent *e;
	while ((e = readdir(d)) != NULL) {
		long v;
		if (parse_version(e->d_name, &v) && v > *best)
			*best = v;
	}
	closedir(d);
	return 0;
}

/* rm of the temporary directory: it holds plain files only. */
static void remove_tmp_dir(const char *dir)
{
	DIR *d = opendir(dir);
	if (d) {
		struct dirent *e;
		char p[EXPORT_FILE_MAX + 256];
		while ((e = readdir(d)) != NULL) {
			if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
				continue;
			snprintf(p, sizeof(p), "%s/%s", dir, e->d_name);
			unlink(p);
		}
		closedir(d);
	}
	rmdir(dir);
}

/* rename(2) that fails with EEXIST instead of replacing an (empty) target
 * directory; falls back to a check then rename where the kernel or file
 * system lacks RENAME_NOREPLACE. */
static int rename_noreplace(const char *from, const char *to)
{
#ifdef RENAME_NOREPLACE
	if (renameat2(AT_FDCWD, from, AT_FDCWD, to, RENAME_NOREPLACE) == 0)
		return 0;
	if (errno != EINVAL && errno != ENOSYS)
		return -1;
#endif
	if (wf_exists(to)) {
		errno = EEXIST;
		return -1;
	}
	return rename(from, to);
}

int wf_export_parse_out(const char *out, char *base, size_t n, long *version, wf_err *err)
{
	size_t len = strlen(out);
	while (len > 1 && out[len - 1] == '/')
		len--;
	if (len == 0 || len >= n || len >= EXPORT_PATH_MAX)
		return wf_errf(err, WF_EINVAL, "--out: \"%s\" is empty or too long", out);
	char buf[EXPORT_PATH_MAX];
	memcpy(buf, out, len);
	buf[len] = '\0';
	char *slash = strrchr(buf, '/');
	const char *last = slash ? slash + 1 : buf;
	*version = 0;
	if (strspn(last, "0123456789") == strlen(last)) {
		if (!parse_version(last, version))
			return wf_errf(err, WF_EINVAL,
				       "--out %s: version \"%s\" must be an integer >= 1 without "
				       "leading zeros",
				       out, last);
		if (!slash || slash == buf)
			return wf_errf(err, WF_EINVAL,
				       "--out %s: expected BASE/NAME/VERSION or BASE/NAME", out);
		*slash = '\0';
	}
	snprintf(base, n, "%s", buf);
	return 0;
}

/* ---- export ------------------------------------------------------------- */

/* A version written under its hidden temporary name, not yet published. */
typedef struct staged {
	char base[EXPORT_PATH_MAX];
	char tmp[EXPORT_FILE_MAX];
} staged;

/* Fold m and write it with meta as tmp/model.h5 (fsynced) under a hidden
 * name in base (dot-names are not versions: weft-serve ignores them). */
static int stage(const wf_model *m, const wf_model_meta *meta, const char *base, long version,
		 staged *st, wf_err *err)
{
	char file[EXPORT_FILE_MAX + 16], dst[EXPORT_FILE_MAX];
	wf_model *folded = NULL;
	int rc;
	if (strlen(base) >= EXPORT_PATH_MAX)
		return wf_errf(err, WF_EINVAL, "export: directory name too long: %.64s...", base);
	snprintf(st->base, sizeof(st->base), "%s", base);
	if (wf_mkdirs(base) != 0)
		return wf_errf(err, WF_EIO, "export: cannot create %s: %s", base, strerror(errno));
	if (version > 0) {
		snprintf(dst, sizeof(dst), "%s/%ld", base, version);
		if (wf_exists(dst))
			return wf_errf(err, WF_EINVAL,
				       "export: %s already exists (a served version is never "
				       "replaced: pick another version, or give only BASE/NAME "
				       "for the next one)",
				       dst);
	}
	if ((rc = wf_model_fold_for_inference(m, &folded, err)) != 0)
		return wf_err_wrap(err, "export"), rc;
	snprintf(st->tmp, sizeof(st->tmp), "%s/.export-%ld-%llx", base, (long)getpid(),
		 (unsigned long long)wf_hash64((uint64_t)(wf_now() * 1e9)));
	if (mkdir(st->tmp, 0755) != 0) {
		rc = wf_errf(err, WF_EIO, "export: cannot create %s: %s", st->tmp, strerror(errno));
		goto free_folded;
	}
	snprintf(file, sizeof(file), "%s/model.h5", st->tmp);
	if ((rc = wf_model_save(folded, meta, file, err)) != 0)
		goto remove_tmp;
	if (wf_fsync_path(file) != 0 || wf_fsync_path(st->tmp) != 0) {
		rc = wf_errf(err, WF_EIO, "export: fsync of %s failed: %s", file, strerror(errno));
		goto remove_tmp;
	}
	goto free_folded;
remove_tmp:
	remove_tmp_dir(st->tmp);
free_folded:
	wf_model_free(folded);
	return rc;
}

/* Rename the staged directory to base/version (0: the next free number);
 * the temporary is removed on failure. */
static int publish(const staged *st, long version, long *written, char *path, size_t n, wf_err *err)
{
	char dst[EXPORT_FILE_MAX];
	int rc = 0;
	long v = version;
	for (int tries = 0;; tries++) {
		if (version == 0) {
			long hi;
			if ((rc = highest_version(st->base, &hi, err)) != 0)
				goto remove_tmp;
			v = hi + 1;
		}
		snprintf(dst, sizeof(dst), "%s/%ld", st->base, v);
		if (rename_noreplace(st->tmp, dst) == 0)
			break;
		/* EEXIST: another export took this number first; take the next. */
		if (errno != EEXIST || version > 0 || tries >= EXPORT_TRIES) {
			rc = wf_errf(err, WF_EIO, "export: cannot rename %s to %s: %s", st->tmp,
				     dst, strerror(errno));
			goto remove_tmp;
		}
	}
	if (wf_fsync_path(st->base) != 0)
		return wf_errf(err, WF_EIO, "export: fsync of %s failed: %s", st->base,
			       strerror(errno));
	*written = v;
	if (path)
		snprintf(path, n, "%s/model.h5", dst);
	return 0;
remove_tmp:
	remove_tmp_dir(st->tmp);
	return rc;
}

int wf_export_model(const wf_model *m, const wf_model_meta *meta, const char *base, long version,
		    long *written, char *path, size_t n, wf_err *err)
{
	staged st;
	int rc = stage(m, meta, base, version, &st, err);
	return rc ? rc : publish(&st, version, written, path, n, err);
}

/* The identity of a complete checkpoint: the CRC32C of its DONE file, which
 * lists the checksum of every file of the step (a step rewritten later, by
 * a fresh job, has another). 0 when step_dir has no readable DONE. */
static uint32_t checkpoint_id(const char *step_dir)
{
	char done[EXPORT_FILE_MAX + 8], *data = NULL;
	size_t len = 0;
	snprintf(done, sizeof(done), "%s/DONE", step_dir);
	if (wf_read_file(done, &data, &len) != 0)
		return 0;
	uint32_t id = wf_crc32c(data, len) | 1u;
	free(data);
	return id;
}

/* step_dir/EXPORTED: "<checkpoint id> <path>". Written with the staged
 * directory's path just before the rename, then with the version's model
 * file: a record of this checkpoint whose staged directory is gone was
 * renamed (published); one whose staged directory is still there was not
 * (the directory is removed and the export starts again). */
static int record(const char *step_dir, uint32_t id, const char *path, wf_err *err)
{
	char marker[EXPORT_FILE_MAX + 16], line[EXPORT_FILE_MAX + 64];
	snprintf(marker, sizeof(marker), "%s/" WF_CKPTDIR_EXPORTED, step_dir);
	int len = snprintf(line, sizeof(line), "%08x %s\n", id, path);
	int rc = wf_atomic_write(marker, line, (size_t)len, err);
	return rc ? (wf_err_wrap(err, "export: recording the export"), rc) : 0;
}

/* 1 when step_dir/EXPORTED records a published export of checkpoint id
 * (what holds its path). */
static int already_exported(const char *step_dir, uint32_t id, char *what, size_t n)
{
	char marker[EXPORT_FILE_MAX + 16], *data = NULL;
	size_t len = 0;
	if (!step_dir || !id)
		return 0;
	snprintf(marker, sizeof(marker), "%s/" WF_CKPTDIR_EXPORTED, step_dir);
	if (wf_read_file(marker, &data, &len) != 0)
		return 0;
	unsigned got = 0;
	int pos = 0, ok = sscanf(data, "%x %n", &got, &pos) == 1 && got == id;
	if (ok) {
		snprintf(what, n, "%.*s", (int)strcspn(data + pos, "\n"), data + pos);
		const char *slash = strrchr(what, '/');
		if (slash && !strncmp(slash + 1, ".export-", 8) && wf_exists(what)) {
			remove_tmp_dir(what); /* staged, never renamed */
			ok = 0;
		} else if (slash && !strncmp(slash + 1, ".export-", 8)) {
			snprintf(what, n, "as the next version under %.*s", (int)(slash - what),
				 data + pos);
		}
	}
	free(data);
	return ok;
}

int wf_export_after_training(wf_exec *ex, const wf_model *m, const wf_model_meta *meta,
			     const char *dir, const char *step_dir, wf_err *err)
{
	char path[EXPORT_FILE_MAX + 16];
	long v;
	uint32_t id = step_dir ? checkpoint_id(step_dir) : 0;
	if (already_exported(step_dir, id, path, sizeof(path))) {
		wf_info("the final checkpoint %s was already exported (%s): not exporting it "
			"again",
			step_dir, path);
		wf_event("export_skipped",
			 json_pack("{s:s, s:s}", "checkpoint", step_dir, "exported", path));
		return 0;
	}
	if (wf_exec_params_to_host(ex) != 0)
		return wf_errf(err, WF_EINTERNAL, "export: copying parameters: %s",
			       wf_exec_error(ex));
	staged st;
	int rc = stage(m, meta, dir, 0, &st, err);
	/* a restarted chief does not export this checkpoint twice */
	if (rc == 0 && id && (rc = record(step_dir, id, st.tmp, err)) != 0)
		remove_tmp_dir(st.tmp);
	if (rc == 0)
		rc = publish(&st, 0, &v, path, sizeof(path), err);
	if (rc != 0)
		return wf_err_wrap(err, "export.dir"), rc;
	wf_info("exported version %ld (step %ld, batch norm folded) to %s", v, meta->trained_steps,
		path);
	wf_event("export", json_pack("{s:I, s:I, s:s}", "version", (json_int_t)v, "step",
				     (json_int_t)meta->trained_steps, "dir", path));
	return id ? record(step_dir, id, path, err) : 0;
}

/* ---- weft export -------------------------------------------------------- */

/* The checkpoint directory to export: step (> 0) or the newest complete. */
static int pick_checkpoint(const char *dir, long step, char *out, size_t n, wf_err *err)
{
	if (step > 0) {
		char done[EXPORT_FILE_MAX];
		snprintf(out, n, "%s/step-%ld", dir, step);
		snprintf(done, sizeof(done), "%s/DONE", out);
		if (!wf_exists(out))
			return wf_errf(err, WF_EINVAL, "--step %ld: %s does not exist", step, out);
		if (!wf_exists(done))
			return wf_errf(err, WF_EINVAL,
				       "--step %ld: %s is incomplete (no DONE file): it is never "
				       "loaded",
				       step, out);
		return 0;
	}
	long found_step;
	int found = wf_ckpt_latest_loadable(dir, &found_step, out, n, err);
	if (found < 0)
		return found;
	if (!found)
		return wf_errf(err, WF_EINVAL,
			       "--checkpoint %s: no complete checkpoint (step-N/ with a DONE file)",
			       dir);
	return 0;
}

/* Class labels from a dataset file, when the model has none (or to check
 * that the ones it has agree in number). */
static int labels_from_data(const wf_model *m, wf_model_meta *meta, const char *data, wf_err *err)
{
	wf_dataset *ds = NULL;
	int rc = wf_dataset_open(&ds, data, err);
	if (rc != 0)
		return wf_err_wrap(err, "--data"), rc;
	const wf_dataset_info *in = wf_dataset_info_get(ds);
	if (in->nclasses != m->classes) {
		rc = wf_errf(err, WF_EINVAL, "--data %s: has %d classes but the model predicts %d",
			     data, in->nclasses, m->classes);
		goto close;
	}
	if (!in->classes) {
		rc = wf_errf(err, WF_EINVAL, "--data %s: has no `classes` attribute", data);
		goto close;
	}
	char **names = calloc((size_t)in->nclasses, sizeof(*names));
	if (!names) {
		rc = wf_errf(err, WF_ENOMEM, "out of memory");
		goto close;
	}
	for (int i = 0; i < in->nclasses; i++)
		if (!(names[i] = strdup(in->classes[i] ? in->classes[i] : ""))) {
			for (int k = 0; k < i; k++)
				free(names[k]);
			free(names);
			rc = wf_errf(err, WF_ENOMEM, "out of memory");
			goto close;
		}
	for (int i = 0; i < meta->nclasses && meta->class_names; i++)
		free(meta->class_names[i]);
	free(meta->class_names);
	meta->class_names = names;
	meta->nclasses = in->nclasses;
close:
	wf_dataset_close(ds);
	return rc;
}

/* The flags of weft export, given as a whole. */
typedef struct export_flags {
	const char *ckpt, *model_path, *out, *data;
	const char *prec; /* one of WF_PRECISIONS once checked, or NULL */
	const char *quantize, *method;
	wf_quantize_opts q;
	long step, threads;
} export_flags;

/* The flags' combinations and ranges; f->prec in its one spelling. */
static int check_flags(export_flags *f, wf_err *err)
{
	if (!f->out || (!f->ckpt == !f->model_path))
		return wf_errf(
			err, WF_EINVAL,
			"export: --out and one of --checkpoint DIR or --model FILE are required "
			"(see --help)");
	if (f->prec && !wf_backend_precision_canon(f->prec))
		return wf_errf(err, WF_EINVAL, "export: --precision %s: not one of " WF_PRECISIONS,
			       f->prec);
	f->prec = f->prec ? wf_backend_precision_canon(f->prec) : NULL; /* one spelling */
	if (f->quantize && strcmp(f->quantize, "int8") != 0)
		return wf_errf(err, WF_EINVAL, "export: --quantize %s: only int8 is supported",
			       f->quantize);
	if (!f->quantize != !f->q.calib_data)
		return wf_errf(err, WF_EINVAL,
			       "export: --quantize int8 and --calibrate DATA.h5 go together");
	if (f->quantize && f->prec && strcmp(f->prec, "int8") != 0)
		return wf_errf(err, WF_EINVAL, "export: --quantize int8 with --precision %s",
			       f->prec);
	if (f->quantize &&
	    (wf_calib_method_parse(f->method, &f->q.method) != 0 || f->q.samples < 1 ||
	     f->q.eval_samples < 0 || f->threads < 0 || !(f->q.max_drop >= 0)))
		return wf_errf(err, WF_EINVAL,
			       "export: --calibration-method %s (max or percentile), "
			       "--calibration-samples %ld (>= 1), --eval-samples %ld (>= 0), "
			       "--threads %ld (>= 0), --max-accuracy-drop %g (>= 0): one is out of "
			       "range",
			       f->method, f->q.samples, f->q.eval_samples, f->threads,
			       f->q.max_drop);
	f->q.threads = (int)f->threads;
	if (f->step < 0 || (f->step > 0 && !f->ckpt))
		return wf_errf(err, WF_EINVAL, "export: --step N needs --checkpoint and N >= 1");
	return 0;
}

static const wf_command_help export_help = {
	"weft export (--checkpoint DIR [--step N] | --model FILE) --out "
	"BASE/NAME[/VERSION] [--quantize int8 --calibrate DATA.h5]",
	"Write a serving model for weft-serve --model_base_path BASE/NAME: batch norm is\n"
	"folded into the convolution (or dense layer) before it, dropout is dropped, the\n"
	"class labels and preprocessing are kept. The version directory appears at once\n"
	"and complete (written under a hidden name, then renamed); an existing version\n"
	"is never replaced. Predictions equal the checkpoint's within float rounding.\n"
	"With --quantize int8 the convolutions are calibrated on DATA.h5 and served in\n"
	"int8 (VNNI/AMX through oneDNN); fp32 and int8 top-1 are printed first."};

/* The model file to export: --model's, or the checkpoint's step's. */
static int export_source(const export_flags *f, char *src, size_t n, wf_err *err)
{
	if (!f->ckpt) {
		snprintf(src, n, "%s", f->model_path);
		return 0;
	}
	char dir[EXPORT_PATH_MAX - 16];
	int rc = pick_checkpoint(f->ckpt, f->step, dir, sizeof(dir), err);
	if (rc == 0)
		snprintf(src, n, "%s/model.h5", dir);
	return rc;
}

int wf_cmd_export(int argc, char **argv, wf_err *err)
{
	export_flags f = {.method = "percentile",
			  .q = {.samples = 512, .percentile = 99.99, .max_drop = 1.0}};
	wf_cli_list pos = {0};
	const wf_flag flags[] = {
		{"checkpoint", WF_FLAG_STR, &f.ckpt, "DIR",
		 "checkpoint.dir of a run: exports its newest complete step-N/"},
		{"step", WF_FLAG_INT, &f.step, "N", "export step-N/ instead of the newest"},
		{"model", WF_FLAG_STR, &f.model_path, "FILE",
		 "export this model file instead of a checkpoint"},
		{"out", WF_FLAG_STR, &f.out, "BASE/NAME[/VERSION]",
		 "model directory to write (required); without VERSION, one more than the "
		 "highest version already there (1 for a new one)"},
		{"data", WF_FLAG_STR, &f.data, "FILE",
		 "take the class labels from this dataset file (when the model has none)"},
		{"precision", WF_FLAG_STR, &f.prec, "P",
		 "the compute precision weft-serve serves this version in unless its own "
		 "--precision says otherwise: fp32, bf16 (fp32 with a notice where the device "
		 "lacks native bf16), int8 (a model quantised by --quantize int8), tf32 or fp16 "
		 "(the cuda device's) or auto (default: none recorded, fp32)"},
		{"quantize", WF_FLAG_STR, &f.quantize, "int8",
		 "calibrate on --calibrate DATA and serve the convolutions in int8 (per-channel "
		 "s8 weights, activation ranges from the calibration; the file keeps its fp32 "
		 "weights). Prints fp32 and int8 top-1 and refuses a drop over "
		 "--max-accuracy-drop"},
		{"calibrate", WF_FLAG_STR, &f.q.calib_data, "DATA.h5",
		 "dataset file (weft data format) whose first samples calibrate --quantize"},
		{"calibration-samples", WF_FLAG_INT, &f.q.samples, "N",
		 "samples of --calibrate to measure ranges on (default 512)"},
		{"calibration-method", WF_FLAG_STR, &f.method, "M",
		 "max (each tensor's full range) or percentile (default: |x| clipped at the "
		 "--percentile of each batch, averaged)"},
		{"percentile", WF_FLAG_DOUBLE, &f.q.percentile, "P",
		 "for --calibration-method percentile, in (50, 100] (default 99.99)"},
		{"eval-data", WF_FLAG_STR, &f.q.eval_data, "DATA.h5",
		 "labelled dataset for the fp32 vs int8 top-1 check (default: the --calibrate "
		 "file; a held-out set is the honest check)"},
		{"eval-samples", WF_FLAG_INT, &f.q.eval_samples, "N",
		 "check top-1 on the first N samples of --eval-data (default: all of them)"},
		{"max-accuracy-drop", WF_FLAG_DOUBLE, &f.q.max_drop, "POINTS",
		 "top-1 percentage points int8 may lose against fp32 (default 1)"},
		{"force", WF_FLAG_BOOL, &f.q.force, NULL, "export even when the drop is larger"},
		{"threads", WF_FLAG_INT, &f.threads, "N",
		 "cpu threads for calibration and the check (default: all)"},
		{0},
	};
	char base[EXPORT_PATH_MAX], src[EXPORT_PATH_MAX], file[EXPORT_FILE_MAX + 16];
	long version = 0, written = 0;
	wf_model *m = NULL;
	wf_model_meta meta;
	wf_model_meta_init(&meta);
	int rc = wf_cli_parse(&export_help, flags, argc, argv, &pos, 0, err);
	if (rc != 0)
		goto cleanup;
	if ((rc = check_flags(&f, err)) != 0)
		goto cleanup;
	if ((rc = wf_export_parse_out(f.out, base, sizeof(base), &version, err)) != 0)
		goto cleanup;
	if ((rc = export_source(&f, src, sizeof(src), err)) != 0 ||
	    (rc = wf_model_load(&m, &meta, src, err)) != 0)
		goto cleanup;
	if (f.data && (rc = labels_from_data(m, &meta, f.data, err)) != 0)
		goto cleanup;
	if (f.prec)
		snprintf(meta.precision, sizeof(meta.precision), "%s", f.prec);
	if (!meta.class_names || meta.nclasses != m->classes)
		wf_warn("%s has no class labels: :classify answers with class indices (give --data "
			"FILE to take them from a dataset)",
			src);
	int removed = wf_model_fold_count(m);
	if (f.quantize && ((rc = wf_model_fold_replace(&m, err)) < 0 ||
			   (rc = wf_quantize_int8(m, &meta, &f.q, err)) != 0))
		goto cleanup;
	if (f.prec && !strcmp(f.prec, "int8") && !f.quantize && !wf_model_calibrated(m)) {
		rc = wf_errf(err, WF_EINVAL,
			     "export: --precision int8: %s has no calibration ranges (use "
			     "--quantize int8 --calibrate DATA.h5)",
			     src);
		goto cleanup;
	}
	if ((rc = wf_export_model(m, &meta, base, version, &written, file, sizeof(file), err)) != 0)
		goto cleanup;
	printf("exported %s (trained %ld steps; %d layers folded or dropped%s%s) to %s: version "
	       "%ld of %s\n",
	       src, meta.trained_steps, removed, meta.precision[0] ? "; served in " : "",
	       meta.precision, file, written, base);
cleanup:
	wf_model_free(m);
	wf_model_meta_free(&meta);
	wf_cli_list_free(&pos);
	return rc;
}
