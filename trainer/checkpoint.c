#include "trainer/checkpoint.h"

#include "common/log.h"
#include "common/util.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define CKPT_PATH_MAX 4096
#define CKPT_FILE_MAX (CKPT_PATH_MAX + 300) /* a directory path plus a file name */

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

static int is_complete(const char *dir, long step)
{
	char p[CKPT_PATH_MAX];
	snprintf(p, sizeof(p), "%s/step-%ld/DONE", dir, step);
	return wf_exists(p);
}

typedef struct step_list {
	long *steps;
	int n;
} step_list;

/* All step-N directories under dir, ascending. */
static int list_steps(const char *dir, step_list *l, wf_err *err)
{
	l->steps = NULL;
	l->n = 0;
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
		if (l->n == cap) {
			cap = cap ? cap * 2 : 16;
			long *ns = realloc(l->steps, (size_t)cap * sizeof(*ns));
			if (!ns) {
				closedir(d);
				free(l->steps);
				l->steps = NULL;
				return wf_errf(err, WF_ENOMEM, "out of memory");
			}
			l->steps = ns;
		}
		l->steps[l->n++] = s;
	}
	closedir(d);
	for (int i = 1; i < l->n; i++) /* insertion sort: a handful of entries */
		for (int j = i; j > 0 && l->steps[j - 1] > l->steps[j]; j--) {
			long t = l->steps[j];
			l->steps[j] = l->steps[j - 1];
			l->steps[j - 1] = t;
		}
	return 0;
}

int wf_ckpt_latest(const char *dir, long *step, char *path, size_t n, wf_err *err)
{
	step_list l;
	int rc = list_steps(dir, &l, err);
	if (rc != 0)
		return rc;
	int found = 0;
	for (int i = l.n - 1; i >= 0; i--) {
		if (is_complete(dir, l.steps[i])) {
			*step = l.steps[i];
			snprintf(path, n, "%s/step-%ld", dir, l.steps[i]);
			found = 1;
			break;
		}
		wf_warn("%s/step-%ld: incomplete checkpoint (no DONE), ignored", dir, l.steps[i]);
	}
	free(l.steps);
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

int wf_ckpt_prune(const char *dir, int keep, wf_err *err)
{
	step_list l;
	int rc = list_steps(dir, &l, err);
	if (rc != 0)
		return rc;
	int complete = 0;
	long newest = -1;
	for (int i = l.n - 1; i >= 0; i--) {
		int done = is_complete(dir, l.steps[i]);
		if (done && newest < 0)
			newest = l.steps[i];
		int drop = done ? ++complete > keep : (newest >= 0 && l.steps[i] < newest);
		if (!drop)
			continue;
		char p[CKPT_PATH_MAX];
		snprintf(p, sizeof(p), "%s/step-%ld", dir, l.steps[i]);
		if (remove_tree(p) != 0)
			wf_warn("%s: could not delete old checkpoint: %s", p, strerror(errno));
	}
	free(l.steps);
	wf_fsync_path(dir);
	return 0;
}

/* An empty file written via a temporary name, fsync'd and renamed. */
static int write_marker(const char *dir, const char *name, wf_err *err)
{
	char tmp[CKPT_FILE_MAX], path[CKPT_FILE_MAX];
	snprintf(tmp, sizeof(tmp), "%s/.%s.tmp", dir, name);
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	if (fd < 0)
		return wf_errf(err, WF_EIO, "%s: cannot create: %s", tmp, strerror(errno));
	int bad = fsync(fd) != 0;
	bad |= close(fd) != 0;
	if (bad || rename(tmp, path) != 0) {
		int rc = wf_errf(err, WF_EIO, "%s: cannot write: %s", path, strerror(errno));
		unlink(tmp);
		return rc;
	}
	return 0;
}

int wf_ckpt_save(const char *dir, long step, wf_exec *ex, wf_model *m, wf_model_meta *meta,
		 wf_exchange *x, int keep, wf_err *err)
{
	char sdir[CKPT_PATH_MAX], path[CKPT_FILE_MAX];
	snprintf(sdir, sizeof(sdir), "%s/step-%ld", dir, step);
	/* Only the chief touches the directory: other workers of a cluster may
	 * reach this step after the chief completed it (parameter servers). */
	if (!x->is_chief)
		return wf_exchange_save(x, sdir, step, err);
	if (wf_mkdirs(sdir) != 0)
		return wf_errf(err, WF_EIO, "%s: cannot create: %s", sdir, strerror(errno));
	/* Rewriting a step (a resumed run reaching it again): un-complete it first. */
	snprintf(path, sizeof(path), "%s/DONE", sdir);
	if (wf_exists(path)) {
		if (unlink(path) != 0)
			return wf_errf(err, WF_EIO, "%s: cannot remove: %s", path, strerror(errno));
		wf_fsync_path(sdir);
	}
	int rc = wf_exchange_save(x, sdir, step, err);
	if (rc != 0)
		return rc;
	if (wf_exec_params_to_host(ex) != 0)
		return wf_errf(err, WF_EINTERNAL, "checkpoint: copying parameters: %s",
			       wf_exec_error(ex));
	snprintf(path, sizeof(path), "%s/model.h5", sdir);
	meta->trained_steps = step;
	if ((rc = wf_model_save(m, meta, path, err)) != 0)
		return rc;
	if (wf_fsync_path(path) != 0)
		return wf_errf(err, WF_EIO, "%s: fsync failed: %s", path, strerror(errno));
	if ((rc = write_marker(sdir, "DONE", err)) != 0)
		return rc;
	if (wf_fsync_path(sdir) != 0 || wf_fsync_path(dir) != 0)
		return wf_errf(err, WF_EIO, "%s: fsync of the directory failed: %s", sdir,
			       strerror(errno));
	return wf_ckpt_prune(dir, keep, err);
}

int wf_ckpt_load_model(const char *step_dir, wf_exec *ex, wf_model *m, wf_err *err)
{
	char path[CKPT_FILE_MAX];
	snprintf(path, sizeof(path), "%s/model.h5", step_dir);
	wf_model *saved = NULL;
	int rc = wf_model_load(&saved, NULL, path, err);
	if (rc != 0)
		return rc;
	if (saved->nparams != m->nparams || saved->nstate != m->nstate ||
	    (saved->graph_json && m->graph_json && strcmp(saved->graph_json, m->graph_json))) {
		rc = wf_errf(err, WF_EINVAL,
			     "%s: written by a different model (%zu parameters, this run's model "
			     "has %zu): change model.name back or use another checkpoint.dir",
			     path, saved->nparams, m->nparams);
		goto free_saved;
	}
	memcpy(m->params, saved->params, m->nparams * sizeof(float));
	if (m->nstate)
		memcpy(m->state, saved->state, m->nstate * sizeof(float));
	if (wf_exec_params_from_host(ex) != 0)
		rc = wf_errf(err, WF_EINTERNAL, "restoring parameters: %s", wf_exec_error(ex));
free_saved:
	wf_model_free(saved);
	return rc;
}
