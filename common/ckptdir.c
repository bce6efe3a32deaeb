/* ckptdir.c: step-N directories, the DONE list of checksums, newest step
 * that verifies, pruning. */
#include "common/ckptdir.h"

#include "common/atomicfile.h"
#include "common/crc32c.h"
#include "common/log.h"
#include "common/util.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define CKPT_PATH_MAX 4096
#define CKPT_FILE_MAX (CKPT_PATH_MAX + 300)
#define DONE_MAX      (1 << 20) /* bytes of a DONE file */

void wf_ckptdir_step_path(char *out, size_t n, const char *dir, long step)
{
	snprintf(out, n, "%s/step-%ld", dir, step);
}

/* Parse "step-<N>" into *step; 1 when it matches. */
static int parse_step_name(const char *name, long *step)
{
	if (strncmp(name, "step-", 5) != 0 || name[5] < '0' || name[5] > '9')
		return 0;
	char *end;
	errno = 0;
	long v = strtol(name + 5, &end, 10);
	if (*end != '\0' || errno != 0 || v < 0)
		return 0;
	*step = v;
	return 1;
}

int wf_ckptdir_list(const char *dir, long **steps, int *n, wf_err *err)
{
	*steps = NULL;
	*n = 0;
	DIR *d = opendir(dir);
	if (!d) {
		if (errno == ENOENT)
			return 0;
		return wf_errf(err, WF_EIO, "%s: cannot list: %s", dir, strerror(errno));
	}
	int cap = 0;
	struct dirent *e;
	while ((e = readdir(d)) != NULL) {
		long s;
		if (!parse_step_name(e->d_name, &s))
			continue;
		if (*n == cap) {
			cap = cap ? cap * 2 : 16;
			long *ns = realloc(*steps, (size_t)cap * sizeof(*ns));
			if (!ns) {
				closedir(d);
				free(*steps);
				*steps = NULL;
				*n = 0;
				return wf_errf(err, WF_ENOMEM, "%s: out of memory", dir);
			}
			*steps = ns;
		}
		(*steps)[(*n)++] = s;
	}
	closedir(d);
	for (int i = 1; i < *n; i++) /* insertion sort: a handful of entries */
		for (int j = i; j > 0 && (*steps)[j - 1] > (*steps)[j]; j--) {
			long t = (*steps)[j];
			(*steps)[j] = (*steps)[j - 1];
			(*steps)[j - 1] = t;
		}
	return 0;
}

int wf_ckptdir_has_done(const char *step_dir)
{
	char p[CKPT_FILE_MAX];
	snprintf(p, sizeof(p), "%s/DONE", step_dir);
	return wf_exists(p);
}

int wf_ckptdir_undone(const char *step_dir, wf_err *err)
{
	char p[CKPT_FILE_MAX];
	/* a step written again was never exported, and is not the diverged one */
	snprintf(p, sizeof(p), "%s/" WF_CKPTDIR_EXPORTED, step_dir);
	unlink(p);
	snprintf(p, sizeof(p), "%s/" WF_CKPTDIR_DIVERGED, step_dir);
	unlink(p);
	snprintf(p, sizeof(p), "%s/DONE", step_dir);
	if (unlink(p) != 0) {
		if (errno == ENOENT)
			return 0;
		return wf_errf(err, WF_EIO, "%s: cannot remove: %s", p, strerror(errno));
	}
	if (wf_fsync_path(step_dir) != 0)
		return wf_errf(err, WF_EIO, "%s: fsync failed: %s", step_dir, strerror(errno));
	return 0;
}

int wf_ckptdir_mark_diverged(const char *step_dir, const char *why, wf_err *err)
{
	char p[CKPT_FILE_MAX], line[1024];
	int rc = wf_ckptdir_undone(step_dir, err);
	if (rc)
		return rc;
	int n = snprintf(line, sizeof(line), "%s\n", why);
	snprintf(p, sizeof(p), "%s/" WF_CKPTDIR_DIVERGED, step_dir);
	return wf_atomic_write(p, line, n < (int)sizeof(line) ? (size_t)n : sizeof(line) - 1, err);
}

/* A file of the step that DONE covers: not DONE itself, not the export
 * record (written after DONE), not a mark, not a temporary, not hidden. */
static int listed_name(const char *name)
{
	return name[0] != '.' && strcmp(name, "DONE") != 0 &&
	       strcmp(name, WF_CKPTDIR_EXPORTED) != 0 && strcmp(name, WF_CKPTDIR_DIVERGED) != 0 &&
	       !strstr(name, ".tmp");
}

int wf_ckptdir_seal(const char *step_dir, long step, wf_err *err)
{
	int rc = 0;
	json_t *files = json_object();
	json_t *root = json_pack("{s:i, s:I, s:o}", "weft_checkpoint", 1, "step", (json_int_t)step,
				 "files", files);
	char *text = NULL;
	DIR *d = opendir(step_dir);
	if (!root || !d) {
		rc = d ? wf_errf(err, WF_ENOMEM, "%s: out of memory", step_dir)
		       : wf_errf(err, WF_EIO, "%s: cannot list: %s", step_dir, strerror(errno));
		goto done;
	}
	struct dirent *e;
	while ((e = readdir(d)) != NULL) {
		char p[CKPT_FILE_MAX], hex[16];
		struct stat st;
		if (!listed_name(e->d_name))
			continue;
		snprintf(p, sizeof(p), "%s/%s", step_dir, e->d_name);
		if (lstat(p, &st) != 0 || !S_ISREG(st.st_mode))
			continue;
		uint32_t crc;
		uint64_t bytes;
		if ((rc = wf_crc32c_file(p, &crc, &bytes, err)) != 0)
			goto done;
		snprintf(hex, sizeof(hex), "%08" PRIx32, crc);
		if (json_object_set_new(files, e->d_name,
					json_pack("{s:I, s:s}", "bytes", (json_int_t)bytes,
						  "crc32c", hex)) != 0) {
			rc = wf_errf(err, WF_ENOMEM, "%s: out of memory", step_dir);
			goto done;
		}
	}
	text = json_dumps(root, JSON_INDENT(1) | JSON_SORT_KEYS);
	if (!text) {
		rc = wf_errf(err, WF_ENOMEM, "%s: out of memory", step_dir);
		goto done;
	}
	char p[CKPT_FILE_MAX];
	snprintf(p, sizeof(p), "%s/DONE", step_dir);
	rc = wf_atomic_write(p, text, strlen(text), err);
done:
	if (d)
		closedir(d);
	free(text);
	json_decref(root);
	return rc;
}

int wf_ckptdir_verify(const char *step_dir, const char *need, wf_err *err)
{
	char p[CKPT_FILE_MAX];
	char *text = NULL;
	size_t len = 0;
	json_t *root = NULL;
	int rc = 0;
	struct stat st;
	snprintf(p, sizeof(p), "%s/" WF_CKPTDIR_DIVERGED, step_dir);
	if (stat(p, &st) == 0) {
		char why[512] = "";
		FILE *f = fopen(p, "r");
		if (f) {
			if (!fgets(why, sizeof(why), f))
				why[0] = '\0';
			fclose(f);
		}
		why[strcspn(why, "\n")] = '\0';
		return wf_errf(err, WF_EFORMAT, "%s: written while the run diverged (%s)", step_dir,
			       why[0] ? why : WF_CKPTDIR_DIVERGED);
	}
	snprintf(p, sizeof(p), "%s/DONE", step_dir);
	if (stat(p, &st) != 0)
		return wf_errf(err, WF_EFORMAT, "%s: incomplete (no DONE)", step_dir);
	if (st.st_size > DONE_MAX)
		return wf_errf(err, WF_EFORMAT, "%s: DONE is %lld bytes: corrupt", step_dir,
			       (long long)st.st_size);
	if (wf_read_file(p, &text, &len) != 0)
		return wf_errf(err, WF_EIO, "%s: cannot read: %s", p, strerror(errno));
	json_t *files = NULL;
	if (len > 0) {
		json_error_t je;
		root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
		files = json_object_get(root, "files");
		if (!json_is_object(files)) {
			rc = wf_errf(err, WF_EFORMAT, "%s: not a checksum list (%s)", p,
				     root ? "no files object" : je.text);
			goto done;
		}
	}
	if (need) {
		char np[CKPT_FILE_MAX];
		snprintf(np, sizeof(np), "%s/%s", step_dir, need);
		if (!wf_exists(np)) {
			rc = wf_errf(err, WF_EFORMAT, "%s: no %s", step_dir, need);
			goto done;
		}
		if (files && json_object_size(files) > 0 && !json_object_get(files, need)) {
			rc = wf_errf(err, WF_EFORMAT, "%s: %s is not listed in DONE", step_dir,
				     need);
			goto done;
		}
	}
	const char *name;
	json_t *f;
	json_object_foreach(files, name, f)
	{
		json_t *jb = json_object_get(f, "bytes");
		const char *hex = json_string_value(json_object_get(f, "crc32c"));
		char *end;
		unsigned long want_crc = hex ? strtoul(hex, &end, 16) : 0;
		if (!json_is_integer(jb) || !hex || strlen(hex) != 8 || *end || strchr(name, '/') ||
		    !listed_name(name)) {
			rc = wf_errf(err, WF_EFORMAT, "%s: entry %s: bad checksum record", p, name);
			goto done;
		}
		char fp[CKPT_FILE_MAX];
		snprintf(fp, sizeof(fp), "%s/%s", step_dir, name);
		uint32_t crc;
		uint64_t bytes;
		wf_err ferr = {0};
		if (wf_crc32c_file(fp, &crc, &bytes, &ferr) != 0) {
			rc = wf_errf(err, WF_EFORMAT, "%s: listed in DONE but %s", fp, ferr.msg);
			goto done;
		}
		if ((json_int_t)bytes != json_integer_value(jb)) {
			rc = wf_errf(err, WF_EFORMAT,
				     "%s: %" PRIu64
				     " bytes, DONE says %lld (truncated or rewritten)",
				     fp, bytes, (long long)json_integer_value(jb));
			goto done;
		}
		if (crc != (uint32_t)want_crc) {
			rc = wf_errf(err, WF_EFORMAT,
				     "%s: checksum mismatch (crc32c %08" PRIx32 ", DONE says %s): "
				     "corrupt",
				     fp, crc, hex);
			goto done;
		}
	}
done:
	json_decref(root);
	free(text);
	return rc;
}

int wf_ckptdir_newest(const char *dir, long want_step, const char *need, long *step, char *path,
		      size_t n, wf_err *err)
{
	return wf_ckptdir_newest_checked(dir, want_step, need, NULL, NULL, step, path, n, err);
}

int wf_ckptdir_newest_checked(const char *dir, long want_step, const char *need,
			      wf_ckptdir_check_fn check, void *arg, long *step, char *path,
			      size_t n, wf_err *err)
{
	long *steps;
	int count;
	int rc = wf_ckptdir_list(dir, &steps, &count, err);
	if (rc != 0)
		return rc;
	int found = 0;
	for (int i = count - 1; i >= 0 && !found; i--) {
		char sd[CKPT_PATH_MAX];
		wf_err why = {0};
		if (want_step >= 0 && steps[i] != want_step)
			continue;
		wf_ckptdir_step_path(sd, sizeof(sd), dir, steps[i]);
		int vrc = wf_ckptdir_verify(sd, need, &why);
		if (vrc == 0 && check) {
			vrc = check(sd, arg, &why);
			if (vrc != 0 && vrc != WF_EFORMAT) {
				found = wf_errf(err, vrc, "%s", why.msg);
				break;
			}
		}
		if (vrc == 0) {
			*step = steps[i];
			snprintf(path, n, "%s", sd);
			found = 1;
		} else if (want_step >= 0) {
			wf_errf(err, why.code, "%s", why.msg);
		} else {
			wf_warn("checkpoint %s skipped: %s", sd, why.msg);
		}
	}
	if (!found && want_step >= 0 && (!err || !err->code))
		wf_errf(err, WF_EFORMAT, "%s/step-%ld: no such checkpoint", dir, want_step);
	free(steps);
	return found;
}

/* rm -r of a checkpoint directory (files and nested directories). */
static int remove_tree(const char *path)
{
	DIR *d = opendir(path);
	if (!d)
		return remove(path) == 0 || errno == ENOENT ? 0 : -1;
	struct dirent *e;
	int rc = 0;
	while ((e = readdir(d)) != NULL) {
		if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
			continue;
		char p[CKPT_FILE_MAX];
		snprintf(p, sizeof(p), "%s/%s", path, e->d_name);
		struct stat st;
		if (lstat(p, &st) == 0 && S_ISDIR(st.st_mode))
			rc |= remove_tree(p);
		else if (unlink(p) != 0)
			rc = -1;
	}
	closedir(d);
	if (rmdir(path) != 0)
		rc = -1;
	return rc;
}

int wf_ckptdir_prune(const char *dir, int keep, long healthy, wf_err *err)
{
	long *steps;
	int count;
	int rc = wf_ckptdir_list(dir, &steps, &count, err);
	if (rc != 0)
		return rc;
	/* the newest complete step below healthy, and its rank among the
	 * complete steps from the newest (0: the newest) */
	long confirmed = -1;
	int rank = 0;
	for (int i = count - 1; i >= 0 && confirmed < 0; i--) {
		char p[CKPT_PATH_MAX];
		wf_ckptdir_step_path(p, sizeof(p), dir, steps[i]);
		if (!wf_ckptdir_has_done(p))
			continue;
		if (steps[i] < healthy)
			confirmed = steps[i];
		else
			rank++;
	}
	if (keep < 2 || rank < keep)
		confirmed = -1; /* kept anyway, or no room beside the newest */
	int complete = 0;
	long newest = -1;
	for (int i = count - 1; i >= 0; i--) {
		char p[CKPT_PATH_MAX];
		wf_ckptdir_step_path(p, sizeof(p), dir, steps[i]);
		int done = wf_ckptdir_has_done(p);
		if (done && newest < 0)
			newest = steps[i];
		/* with a confirmed step to keep, the newest keep - 1 and it */
		int drop = done ? steps[i] != confirmed && ++complete > keep - (confirmed >= 0)
				: (newest >= 0 && steps[i] < newest);
		if (drop && remove_tree(p) != 0)
			wf_warn("%s: could not delete old checkpoint: %s", p, strerror(errno));
	}
	free(steps);
	wf_fsync_path(dir);
	return 0;
}
