/* job.c: the identity, keys, server addresses and model of a cluster job. */
#include "trainer/job.h"

#include "common/log.h"
#include "model/model.h"
#include "ps/auth.h"
#include "worker/data.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int wf_job_security_flags(wf_config *cfg, const char *key_dir, int insecure, wf_err *err)
{
	if (key_dir) {
		if (strlen(key_dir) >= sizeof(cfg->cluster.key_dir))
			return wf_errf(err, WF_EINVAL, "--key-dir: path too long");
		snprintf(cfg->cluster.key_dir, sizeof(cfg->cluster.key_dir), "%s", key_dir);
	}
	if (insecure) {
		cfg->cluster.insecure = 1;
		/* the flag outranks a key directory that only the environment gave */
		const char *env = getenv("WEFT_KEY_DIR");
		if (!key_dir && env && !strcmp(env, cfg->cluster.key_dir))
			cfg->cluster.key_dir[0] = 0;
	}
	return 0;
}

int wf_job_keys(const wf_config *cfg, wf_ps_keys *k, const wf_ps_keys **out, wf_err *err)
{
	const char *dir = cfg->cluster.key_dir;
	*out = NULL;
	if (cfg->cluster.insecure) {
		if (dir[0])
			return wf_errf(err, WF_EINVAL,
				       "cluster.insecure and cluster.key_dir (%s) are both set: "
				       "choose one",
				       dir);
		return 0;
	}
	if (!dir[0])
		return wf_errf(
			err, WF_EINVAL,
			"cluster.key_dir: parameter-server traffic is encrypted and authenticated "
			"with CURVE keys, and none were given: make them once with `weft keygen "
			"--out DIR` and give every ps, chief and worker --key-dir DIR (or --set "
			"cluster.key_dir=DIR, or WEFT_KEY_DIR=DIR); `weft launch` makes its own. "
			"To run unencrypted and unauthenticated, pass --insecure");
	int rc = wf_ps_curve_check(err);
	if (rc == 0)
		rc = wf_ps_keys_load(k, dir, err);
	if (rc == 0)
		*out = k;
	return rc;
}

static uint64_t fnv(uint64_t h, const char *s)
{
	for (; s && *s; s++)
		h = (h ^ (uint8_t)*s) * 1099511628211ull;
	return (h ^ '|') * 1099511628211ull;
}

uint64_t wf_job_id(const wf_config *cfg, const wf_cluster *c)
{
	uint64_t h = fnv(14695981039346656037ull, cfg->model.name);
	static const wf_role roles[] = {WF_ROLE_PS, WF_ROLE_CHIEF, WF_ROLE_WORKER};
	for (size_t r = 0; r < sizeof(roles) / sizeof(roles[0]); r++)
		for (int i = 0; i < c->jobs[roles[r]].n; i++)
			h = fnv(h, c->jobs[roles[r]].addr[i] ? c->jobs[roles[r]].addr[i] : "-");
	if (c->job_token[0]) {
		/* the job's random value, then a full avalanche (splitmix64's
		 * finaliser): without the token the id cannot be computed */
		h = fnv(h, c->job_token);
		h ^= h >> 30;
		h *= 0xbf58476d1ce4e5b9ull;
		h ^= h >> 27;
		h *= 0x94d049bb133111ebull;
		h ^= h >> 31;
	} else if (cfg->cluster.insecure) {
		static int warned;
		if (!warned++)
			wf_warn("%s is not set: with --insecure the job id comes from the "
				"model name and the addresses alone, which anyone can compute; "
				"give every process of the job the same random %s (e.g. "
				"`openssl rand -hex 16`; `weft launch` makes one per run)",
				WF_JOB_TOKEN_ENV, WF_JOB_TOKEN_ENV);
	}
	return h ? h : 1;
}

int wf_job_num_workers(const wf_cluster *c)
{
	return c->jobs[WF_ROLE_CHIEF].n + c->jobs[WF_ROLE_WORKER].n;
}

int wf_job_ps_cluster(wf_cluster *c, const wf_config *cfg, wf_err *err)
{
	int rc = wf_cluster_from_env(c, err);
	if (rc != 0)
		return rc;
	if (c->source != WF_CLUSTER_SRC_TF_CONFIG) {
		wf_cluster_free(c);
		return wf_errf(
			err, WF_EINVAL,
			"strategy.name parameter_server needs a cluster: set TF_CONFIG (with "
			"cluster.ps) or start the job with `weft launch --ps N --workers M`");
	}
	if ((rc = wf_cluster_validate(c, cfg->strategy.name, err)) != 0)
		wf_cluster_free(c);
	return rc;
}

int wf_job_ps_endpoints(const wf_cluster *c, char ***out, wf_err *err)
{
	const wf_cluster_job *j = &c->jobs[WF_ROLE_PS];
	char **ep = calloc((size_t)j->n, sizeof(*ep));
	if (!ep)
		return wf_errf(err, WF_ENOMEM, "out of memory");
	for (int i = 0; i < j->n; i++) {
		char buf[512];
		int rc = !j->addr[i]
				 ? wf_errf(err, WF_EINVAL,
					   "TF_CONFIG: cluster.ps has no task %d (the ps list "
					   "must be dense)",
					   i)
				 : wf_cluster_resolve(j->addr[i], 8, 0.25, buf, sizeof(buf), err);
		if (rc == 0 && !(ep[i] = strdup(buf)))
			rc = wf_errf(err, WF_ENOMEM, "out of memory");
		if (rc != 0) {
			for (int k = 0; k < i; k++)
				free(ep[k]);
			free(ep);
			return rc;
		}
	}
	*out = ep;
	return 0;
}

void wf_job_endpoints_free(char **ep, int n)
{
	for (int i = 0; ep && i < n; i++)
		free(ep[i]);
	free(ep);
}

int wf_job_model(const wf_config *cfg, wf_model **m, wf_err *err)
{
	wf_zoo_opts zo = WF_ZOO_OPTS_DEFAULT;
	zo.alpha = (float)cfg->model.alpha;
	int h, w, ch, rc;
	if (wf_config_input_shape(cfg, &h, &w, &ch) == 1 && cfg->model.classes > 0) {
		rc = wf_model_zoo_ex(m, cfg->model.name, h, w, ch, (int)cfg->model.classes, &zo,
				     err);
		return rc ? (wf_err_wrap(err, "model.name"), rc) : 0;
	}
	wf_dataset *ds = NULL;
	if ((rc = wf_dataset_open(&ds, cfg->data.train, err)) != 0)
		return wf_err_wrap(err, "data.train (set model.input_shape and model.classes and "
					"the servers need no data)"),
		       rc;
	const wf_dataset_info *ti = wf_dataset_info_get(ds);
	rc = wf_model_zoo_ex(m, cfg->model.name, ti->h, ti->w, ti->c, ti->nclasses, &zo, err);
	if (rc != 0)
		wf_err_wrap(err, "model.name");
	wf_dataset_close(ds);
	return rc;
}
