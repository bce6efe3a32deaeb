/* exchange_local.c: the exchange of a single process (with or without
 * micro-batch accumulation): the optimizer applied in place, plus the
 * optimizer-state file. The wrappers of the exchange table are in exchange.c. */
#include "worker/exchange.h"

#include "common/h5.h"
#include "common/log.h"
#include "common/util.h"
#include "kernels/ops.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the optimizer-state file ------------------------------------------ */

static uint64_t mix_double(uint64_t h, double d)
{
	uint64_t bits;
	memcpy(&bits, &d, sizeof(bits));
	return wf_hash64(h ^ bits);
}

uint64_t wf_optim_cfg_hash(const wf_optim_cfg *c)
{
	uint64_t h = wf_hash64((uint64_t)c->kind);
	h = mix_double(h, c->lr);
	h = mix_double(h, c->momentum);
	h = wf_hash64(h ^ (uint64_t)c->nesterov);
	h = mix_double(h, c->beta1);
	h = mix_double(h, c->beta2);
	h = mix_double(h, c->eps);
	h = mix_double(h, c->weight_decay);
	h = wf_hash64(h ^ (uint64_t)c->schedule);
	h = wf_hash64(h ^ (uint64_t)c->warmup_steps);
	h = wf_hash64(h ^ (uint64_t)c->total_steps);
	h = mix_double(h, c->min_lr);
	h = wf_hash64(h ^ (uint64_t)c->decay_steps);
	return mix_double(h, c->decay_rate);
}

#define OPTIM_FORMAT 1

static int dset_read(hid_t f, const char *path, const char *name, size_t n, float *data,
		     wf_err *err)
{
	if (H5Lexists(f, name, H5P_DEFAULT) <= 0)
		return wf_errf(err, WF_EFORMAT, "%s: dataset '%s' is missing", path, name);
	hid_t d = H5Dopen2(f, name, H5P_DEFAULT);
	if (d < 0)
		return WF_H5_FAIL(err, WF_EFORMAT, "%s: cannot open dataset '%s'", path, name);
	hid_t sp = H5Dget_space(d);
	hsize_t dims[1] = {0};
	int nd = H5Sget_simple_extent_ndims(sp);
	if (nd == 1)
		H5Sget_simple_extent_dims(sp, dims, NULL);
	wf_h5_close(&sp);
	int rc = 0;
	if (nd != 1 || dims[0] != n)
		rc = wf_errf(err, WF_EFORMAT,
			     "%s: dataset '%s' has %llu floats, the model has %zu parameters", path,
			     name, (unsigned long long)dims[0], n);
	else if (H5Dread(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) < 0)
		rc = WF_H5_FAIL(err, WF_EFORMAT, "%s: cannot read dataset '%s'", path, name);
	wf_h5_close(&d);
	return rc;
}

static int write_state(hid_t f, const char *tmp, const wf_optim_cfg *cfg, long step, size_t n,
		       int nslots, const float *m, const float *v, wf_err *err)
{
	int fmt = OPTIM_FORMAT, kind = (int)cfg->kind;
	uint64_t hash = wf_optim_cfg_hash(cfg);
	hsize_t dims[1] = {n};
	int rc = wf_h5_attr_write(f, "weft_optimizer", H5T_NATIVE_INT, H5T_NATIVE_INT, -1, &fmt,
				  tmp, err);
	if (!rc)
		rc = wf_h5_attr_write(f, "kind", H5T_NATIVE_INT, H5T_NATIVE_INT, -1, &kind, tmp,
				      err);
	if (!rc)
		rc = wf_h5_attr_write(f, "slots", H5T_NATIVE_INT, H5T_NATIVE_INT, -1, &nslots, tmp,
				      err);
	if (!rc)
		rc = wf_h5_attr_write_i64(f, "step", step, tmp, err);
	if (!rc)
		rc = wf_h5_attr_write(f, "config_hash", H5T_NATIVE_UINT64, H5T_NATIVE_UINT64, -1,
				      &hash, tmp, err);
	if (!rc && nslots >= 1)
		rc = wf_h5_write_f32(f, "m", 1, dims, m, tmp, err);
	if (!rc && nslots >= 2)
		rc = wf_h5_write_f32(f, "v", 1, dims, v, tmp, err);
	return rc;
}

int wf_optim_state_save(const char *path, const wf_optim_cfg *cfg, long step, size_t n, int nslots,
			const float *m, const float *v, wf_err *err)
{
	wf_h5_quiet q;
	hid_t f = H5I_INVALID_HID;
	int rc = wf_h5_create_mem(path, &f, err); /* in memory, then written atomically */
	if (rc)
		return rc;
	wf_h5_quiet_begin(&q);
	rc = write_state(f, path, cfg, step, n, nslots, m, v, err);
	wf_h5_quiet_end(&q);
	if (rc) {
		wf_h5_close(&f);
		return wf_err_wrap(err, "%s: cannot write optimizer state", path);
	}
	return wf_h5_commit_mem(&f, path, err);
}

int wf_optim_state_load(const char *path, const wf_optim_cfg *cfg, size_t n, int nslots, float *m,
			float *v, long *step, wf_err *err)
{
	hid_t f = H5I_INVALID_HID;
	wf_h5_quiet q;
	wf_err why = {0};
	if (!wf_exists(path))
		return wf_errf(err, WF_EIO, "%s: missing", path);
	int rc = wf_h5_open(path, H5F_ACC_RDONLY, &f, err);
	if (rc)
		return rc;
	wf_h5_quiet_begin(&q);
	int64_t fmt = 0, kind = -1, slots = -1, st = 0;
	uint64_t hash = 0;
	if (wf_h5_attr_read_i64(f, "weft_optimizer", &fmt, 1, path, &why) || fmt != OPTIM_FORMAT ||
	    wf_h5_attr_read_i64(f, "kind", &kind, 1, path, &why) ||
	    wf_h5_attr_read_i64(f, "slots", &slots, 1, path, &why) ||
	    wf_h5_attr_read_i64(f, "step", &st, 1, path, &why) ||
	    wf_h5_attr_read(f, "config_hash", H5T_NATIVE_UINT64, 1, &hash, path, &why)) {
		rc = wf_errf(
			err, WF_EFORMAT,
			"%s: missing or wrong attributes (weft_optimizer format %lld, want %d)%s%s",
			path, (long long)fmt, OPTIM_FORMAT, why.msg[0] ? ": " : "", why.msg);
		goto close_file;
	}
	if (kind != (int)cfg->kind || slots != nslots) {
		rc = wf_errf(
			err, WF_EINVAL,
			"%s: written by optimizer kind %lld with %lld slots, this run uses kind "
			"%d with %d slots (optimizer.name or momentum changed)",
			path, (long long)kind, (long long)slots, (int)cfg->kind, nslots);
		goto close_file;
	}
	if (hash != wf_optim_cfg_hash(cfg))
		wf_warn("%s: optimizer hyper-parameters differ from the checkpointed run", path);
	if (nslots >= 1 && (rc = dset_read(f, path, "m", n, m, err)) != 0)
		goto close_file;
	if (nslots >= 2 && (rc = dset_read(f, path, "v", n, v, err)) != 0)
		goto close_file;
	*step = (long)st;
close_file:
	wf_h5_close(&f);
	wf_h5_quiet_end(&q);
	return rc;
}

/* ---- the local exchange ------------------------------------------------ */

typedef struct local_ctx {
	wf_exec *ex;
	wf_backend *be;
	wf_optim_cfg cfg;
	size_t n;   /* parameters */
	int nslots; /* 0, 1 or 2 */
	float *m;   /* backend memory [n] or NULL */
	float *v;
} local_ctx;

/* Host copies of the slots for saving and loading (not a hot path). */
static int slots_host(local_ctx *c, float **hm, float **hv, wf_err *err)
{
	*hm = *hv = NULL;
	size_t bytes = c->n * sizeof(float);
	if (c->nslots >= 1 && !(*hm = malloc(bytes ? bytes : 1)))
		return wf_errf(err, WF_ENOMEM, "out of memory for optimizer slots");
	if (c->nslots >= 2 && !(*hv = malloc(bytes ? bytes : 1))) {
		free(*hm);
		*hm = NULL;
		return wf_errf(err, WF_ENOMEM, "out of memory for optimizer slots");
	}
	return 0;
}

static int local_start(wf_exchange *x, const char *resume_dir, long resume_step, long *start_step,
		       wf_err *err)
{
	local_ctx *c = x->ctx;
	size_t bytes = c->n * sizeof(float);
	*start_step = 0;
	if (c->m && wf_op_zero(c->be, c->m, bytes) != 0)
		return wf_errf(err, WF_EINTERNAL, "zeroing slots: %s", c->be->err.msg);
	if (c->v && wf_op_zero(c->be, c->v, bytes) != 0)
		return wf_errf(err, WF_EINTERNAL, "zeroing slots: %s", c->be->err.msg);
	if (!resume_dir)
		return 0;

	char path[4200];
	snprintf(path, sizeof(path), "%s/%s", resume_dir, WF_OPTIM_FILE);
	float *hm, *hv;
	long step = 0;
	int rc = slots_host(c, &hm, &hv, err);
	if (rc != 0)
		return rc;
	rc = wf_optim_state_load(path, &c->cfg, c->n, c->nslots, hm, hv, &step, err);
	if (rc == 0 && step != resume_step)
		rc = wf_errf(err, WF_EFORMAT, "%s: holds step %ld, its directory says step %ld",
			     path, step, resume_step);
	if (rc == 0 && c->m && wf_op_to_device(c->be, c->m, hm, bytes) != 0)
		rc = wf_errf(err, WF_EINTERNAL, "restoring slots: %s", c->be->err.msg);
	if (rc == 0 && c->v && wf_op_to_device(c->be, c->v, hv, bytes) != 0)
		rc = wf_errf(err, WF_EINTERNAL, "restoring slots: %s", c->be->err.msg);
	free(hm);
	free(hv);
	if (rc == 0)
		*start_step = step;
	return rc;
}

static int local_step(wf_exchange *x, long step, long *to, wf_err *err)
{
	local_ctx *c = x->ctx;
	(void)to; /* the workers never move to another step */
	int rc = wf_exec_optim_step(c->ex, &c->cfg, step, c->m, c->v, 1.0f);
	if (rc != 0)
		return wf_errf(err, rc, "optimizer step %ld: %s", step, c->be->err.msg);
	return 0;
}

static int local_save(wf_exchange *x, const char *dir, long step, wf_err *err)
{
	local_ctx *c = x->ctx;
	size_t bytes = c->n * sizeof(float);
	char path[4200];
	snprintf(path, sizeof(path), "%s/%s", dir, WF_OPTIM_FILE);
	float *hm, *hv;
	int rc = slots_host(c, &hm, &hv, err);
	if (rc != 0)
		return rc;
	if (c->m && wf_op_to_host(c->be, hm, c->m, bytes) != 0)
		rc = wf_errf(err, WF_EINTERNAL, "reading slots: %s", c->be->err.msg);
	if (rc == 0 && c->v && wf_op_to_host(c->be, hv, c->v, bytes) != 0)
		rc = wf_errf(err, WF_EINTERNAL, "reading slots: %s", c->be->err.msg);
	if (rc == 0)
		rc = wf_optim_state_save(path, &c->cfg, step, c->n, c->nslots, hm, hv, err);
	free(hm);
	free(hv);
	return rc;
}

static void local_free(wf_exchange *x)
{
	local_ctx *c = x->ctx;
	if (c) {
		if (c->m)
			wf_op_free(c->be, c->m);
		if (c->v)
			wf_op_free(c->be, c->v);
		free(c);
	}
	free(x);
}

static const wf_exchange_ops local_ops = {
	.start = local_start,
	.grad_ready = NULL,
	.step = local_step,
	.save = local_save,
	.finish = NULL,
	.free = local_free,
};

int wf_exchange_local_create(wf_exchange **out, wf_exec *ex, const wf_model *m,
			     const wf_optim_cfg *cfg, wf_err *err)
{
	*out = NULL;
	wf_exchange *x = calloc(1, sizeof(*x));
	local_ctx *c = calloc(1, sizeof(*c));
	if (!x || !c) {
		free(x);
		free(c);
		return wf_errf(err, WF_ENOMEM, "out of memory");
	}
	x->name = "local";
	x->ops = &local_ops;
	x->ctx = c;
	x->rank = 0;
	x->workers = 1;
	x->is_chief = 1;
	c->ex = ex;
	c->be = wf_exec_backend(ex);
	c->cfg = *cfg;
	c->n = m->nparams;
	c->nslots = wf_optim_slots(cfg);
	size_t bytes = (c->n ? c->n : 1) * sizeof(float);
	if (c->nslots >= 1 && !(c->m = wf_op_alloc(c->be, bytes)))
		goto nomem;
	if (c->nslots >= 2 && !(c->v = wf_op_alloc(c->be, bytes)))
		goto nomem;
	*out = x;
	return 0;
nomem:
	wf_errf(err, WF_ENOMEM, "out of memory for %d optimizer slots of %zu floats", c->nslots,
		c->n);
	local_free(x);
	return WF_ENOMEM;
}
