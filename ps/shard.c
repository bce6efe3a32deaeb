/* shard.c: HDF5 checkpoint shards of a parameter server. */
#include "ps/shard.h"

#include "common/h5.h"
#include "common/sandbox.h"
#include "common/ckptdir.h"
#include "common/util.h"

#include <errno.h>
#include <hdf5.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *slot_names[2] = {"m", "v"};

void wf_ps_shard_path(char *out, size_t n, const char *root, long step, int server, int nservers)
{
	snprintf(out, n, "%s/step-%ld/ps-%d-of-%d.h5", root, step, server, nservers);
}

static int read_attr_long(hid_t obj, const char *name, long *v)
{
	int64_t x;
	wf_err e = {0};
	if (H5Aexists(obj, name) <= 0 || wf_h5_attr_read_i64(obj, name, &x, 1, "", &e) != 0)
		return -1;
	*v = (long)x;
	return 0;
}

int wf_ps_shard_save(const char *path, int server, int nservers, long step,
		     const wf_ps_shard_chunk *chunks, int nchunks, int nslots, const float *state,
		     size_t nstate, wf_err *err)
{
	char dir[4096], name[64];
	const char *tmp = path; /* names the file in messages */
	int rc = 0;
	hid_t f = -1, g = -1, cg = -1;
	snprintf(dir, sizeof(dir), "%s", path);
	char *d = dirname(dir);
	if (wf_mkdirs(d))
		return wf_errf(err, WF_EIO, "checkpoint: cannot create %s: %s", d, strerror(errno));
	/* Built in memory, then written atomically: a full disk is an error
	 * naming path, never a half-written file or a crash in libhdf5. */
	if ((rc = wf_h5_create_mem(path, &f, err)) != 0)
		return rc;
	const struct {
		const char *name;
		long v;
	} attrs[] = {{"weft_ps_format", WF_PS_SHARD_FORMAT},
		     {"server", server},
		     {"nservers", nservers},
		     {"step", step},
		     {"nslots", nslots}};
	for (size_t i = 0; i < sizeof(attrs) / sizeof(attrs[0]); i++)
		if ((rc = wf_h5_attr_write_i64(f, attrs[i].name, attrs[i].v, tmp, err)) != 0)
			goto cleanup;
	if ((g = H5Gcreate2(f, "chunks", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT)) < 0) {
		rc = WF_H5_FAIL(err, WF_EIO, "%s: writing chunks", tmp);
		goto cleanup;
	}
	for (int i = 0; i < nchunks; i++) {
		const wf_ps_shard_chunk *c = &chunks[i];
		hsize_t n = c->count;
		snprintf(name, sizeof(name), "%d", c->index);
		if ((cg = H5Gcreate2(g, name, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT)) < 0) {
			rc = WF_H5_FAIL(err, WF_EIO, "%s: writing chunk %d", tmp, c->index);
			goto cleanup;
		}
		if ((rc = wf_h5_attr_write_i64(cg, "offset", (int64_t)c->offset, tmp, err)) ||
		    (rc = wf_h5_attr_write_i64(cg, "count", (int64_t)c->count, tmp, err)) ||
		    (rc = wf_h5_attr_write_i64(cg, "version", c->version, tmp, err)) ||
		    (rc = wf_h5_write_f32(cg, "values", 1, &n, c->values, tmp, err)))
			goto cleanup;
		for (int s = 0; s < nslots; s++)
			if ((rc = wf_h5_write_f32(cg, slot_names[s], 1, &n, c->slot[s], tmp, err)))
				goto cleanup;
		H5Gclose(cg);
		cg = -1;
	}
	hsize_t ns = nstate;
	if (nstate && state && (rc = wf_h5_write_f32(f, "state", 1, &ns, state, tmp, err)))
		goto cleanup;
	H5Gclose(g);
	g = -1;
	return wf_h5_commit_mem(&f, path, err);
cleanup:
	if (cg >= 0)
		H5Gclose(cg);
	if (g >= 0)
		H5Gclose(g);
	if (f >= 0)
		H5Fclose(f);
	return rc;
}

static int shard_load(const char *path, int server, int nservers, wf_ps_shard_chunk *chunks,
		      int nchunks, int nslots, float *state, size_t nstate, long *step, wf_err *err)
{
	int rc = 0;
	hid_t f = -1, cg = -1;
	long fmt = 0, srv = -1, nsrv = -1, nsl = -1, st = -1;
	char name[64];
	H5E_BEGIN_TRY
	{
		f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
	}
	H5E_END_TRY;
	if (f < 0)
		return wf_errf(err, WF_EIO, "restore: cannot open %s", path);
	H5E_BEGIN_TRY
	{
		if (read_attr_long(f, "weft_ps_format", &fmt) ||
		    read_attr_long(f, "server", &srv) || read_attr_long(f, "nservers", &nsrv) ||
		    read_attr_long(f, "nslots", &nsl) || read_attr_long(f, "step", &st))
			rc = wf_errf(err, WF_EFORMAT, "restore: %s lacks the shard attributes",
				     path);
	}
	H5E_END_TRY;
	if (rc)
		goto cleanup;
	if (fmt != WF_PS_SHARD_FORMAT || srv != server || nsrv != nservers || nsl != nslots) {
		rc = wf_errf(err, WF_EFORMAT,
			     "restore: %s is format %ld of server %ld/%ld with %ld slots; expected "
			     "format %d, server %d/%d, %d slots",
			     path, fmt, srv, nsrv, nsl, WF_PS_SHARD_FORMAT, server, nservers,
			     nslots);
		goto cleanup;
	}
	for (int i = 0; i < nchunks; i++) {
		wf_ps_shard_chunk *c = &chunks[i];
		long off = -1, cnt = -1, ver = -1;
		snprintf(name, sizeof(name), "chunks/%d", c->index);
		H5E_BEGIN_TRY
		{
			cg = H5Lexists(f, "chunks", H5P_DEFAULT) > 0 &&
					     H5Lexists(f, name, H5P_DEFAULT) > 0
				     ? H5Gopen2(f, name, H5P_DEFAULT)
				     : -1;
			if (cg >= 0) {
				read_attr_long(cg, "offset", &off);
				read_attr_long(cg, "count", &cnt);
				read_attr_long(cg, "version", &ver);
			}
		}
		H5E_END_TRY;
		if (cg < 0 || off != (long)c->offset || cnt != (long)c->count || ver < 0) {
			rc = wf_errf(
				err, WF_EFORMAT,
				"restore: %s: chunk %d missing or laid out as [%ld +%ld), this "
				"server has [%zu +%zu): the model or server count changed",
				path, c->index, off, cnt, c->offset, c->count);
			goto cleanup;
		}
		int r = wf_h5_read_f32_exact(cg, "values", c->values, c->count);
		for (int s = 0; s < nslots && !r; s++)
			r = wf_h5_read_f32_exact(cg, slot_names[s], c->slot[s], c->count);
		if (r) {
			rc = wf_errf(err, WF_EFORMAT, "restore: %s: chunk %d: bad values or slots",
				     path, c->index);
			goto cleanup;
		}
		c->version = ver;
		H5Gclose(cg);
		cg = -1;
	}
	if (nstate && state && wf_h5_read_f32_exact(f, "state", state, nstate)) {
		rc = wf_errf(err, WF_EFORMAT,
			     "restore: %s: dataset state missing or not %zu floats", path, nstate);
		goto cleanup;
	}
	*step = st;
cleanup:
	if (cg >= 0)
		H5Gclose(cg);
	H5Fclose(f);
	return rc;
}

/* The first read runs in a short-lived child (common/sandbox): libhdf5 1.10
 * crashes on some corrupt object headers, which must cost the child, not the
 * server. The child reads into its own copy of the buffers. */
typedef struct shard_probe {
	const char *path;
	int server, nservers, nchunks, nslots;
	wf_ps_shard_chunk *chunks;
	float *state;
	size_t nstate;
} shard_probe;

static int probe_shard(void *arg, wf_err *err)
{
	shard_probe *p = arg;
	long step;
	return shard_load(p->path, p->server, p->nservers, p->chunks, p->nchunks, p->nslots,
			  p->state, p->nstate, &step, err);
}

int wf_ps_shard_load(const char *path, int server, int nservers, wf_ps_shard_chunk *chunks,
		     int nchunks, int nslots, float *state, size_t nstate, long *step, wf_err *err)
{
	shard_probe p = {path, server, nservers, nchunks, nslots, chunks, state, nstate};
	int rc = wf_sandbox_check(path, 120.0, wf_sandbox_mem_for_file(path), probe_shard, &p, err);
	if (rc)
		return rc;
	return shard_load(path, server, nservers, chunks, nchunks, nslots, state, nstate, step,
			  err);
}

int wf_ps_ckpt_find(const char *root, int server, int nservers, long want_step, long *step,
		    char *path, size_t n, wf_err *err)
{
	char need[64], dir[4096];
	snprintf(need, sizeof(need), "ps-%d-of-%d.h5", server, nservers);
	int found = wf_ckptdir_newest(root, want_step, need, step, dir, sizeof(dir), err);
	if (found < 0)
		return found;
	if (!found) {
		if (want_step >= 0) {
			wf_err_wrap(err, "restore");
			return err ? (err->code = WF_EIO) : WF_EIO;
		}
		return wf_errf(err, WF_EIO,
			       "restore: no complete checkpoint that verifies (step dir with DONE "
			       "and %s) under %s",
			       need, root);
	}
	wf_ps_shard_path(path, n, root, *step, server, nservers);
	return 0;
}
