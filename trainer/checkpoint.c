#include "trainer/checkpoint.h"

#include "common/events.h"
#include "common/ckptdir.h"
#include "common/log.h"
#include "common/util.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#define CKPT_PATH_MAX 4096
#define CKPT_FILE_MAX (CKPT_PATH_MAX + 300) /* a directory path plus a file name */

int wf_ckpt_latest(const char *dir, long *step, char *path, size_t n, wf_err *err)
{
	return wf_ckptdir_newest(dir, -1, "model.h5", step, path, n, err);
}

/* wf_ckptdir_check_fn: step_dir/model.h5 loads and its content checksum
 * matches. */
static int model_file_loads(const char *step_dir, void *arg, wf_err *err)
{
	(void)arg;
	char path[CKPT_FILE_MAX];
	snprintf(path, sizeof(path), "%s/model.h5", step_dir);
	wf_model *m = NULL;
	int rc = wf_model_load(&m, NULL, path, err);
	wf_model_free(m);
	return rc;
}

int wf_ckpt_latest_loadable(const char *dir, long *step, char *path, size_t n, wf_err *err)
{
	return wf_ckptdir_newest_checked(dir, -1, "model.h5", model_file_loads, NULL, step, path, n,
					 err);
}

int wf_ckpt_prune(const char *dir, int keep, wf_err *err)
{
	return wf_ckptdir_prune(dir, keep, 0, err);
}

int wf_ckpt_save(const char *dir, long step, wf_exec *ex, wf_model *m, wf_model_meta *meta,
		 wf_exchange *x, int keep, long healthy, wf_err *err)
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
	int rc = wf_ckptdir_undone(sdir, err);
	if (rc != 0)
		return rc;
	rc = wf_exchange_save(x, sdir, step, err);
	if (rc != 0)
		return rc;
	if (wf_exec_params_to_host(ex) != 0)
		return wf_errf(err, WF_EINTERNAL, "checkpoint: copying parameters: %s",
			       wf_exec_error(ex));
	snprintf(path, sizeof(path), "%s/model.h5", sdir);
	meta->trained_steps = step;
	if ((rc = wf_model_save(m, meta, path, err)) != 0)
		return rc;
	if ((rc = wf_ckptdir_seal(sdir, step, err)) != 0)
		return rc;
	if (wf_fsync_path(dir) != 0)
		return wf_errf(err, WF_EIO, "%s: fsync of the directory failed: %s", dir,
			       strerror(errno));
	wf_event("checkpoint", json_pack("{s:I, s:s}", "step", (json_int_t)step, "dir", sdir));
	return wf_ckptdir_prune(dir, keep, healthy, err);
}

int wf_ckpt_load_model(const char *step_dir, wf_exec *ex, wf_model *m, wf_err *err)
{
	char path[CKPT_FILE_MAX];
	snprintf(path, sizeof(path), "%s/model.h5", step_dir);
	wf_model *saved = NULL;
	int rc = wf_model_load_trusted(&saved, NULL, path, err); /* verified by DONE */
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
