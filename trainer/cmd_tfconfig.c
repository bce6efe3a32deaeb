/* cmd_tfconfig.c: `weft tfconfig`: the cluster identity of this process as
 * wf_cluster_from_env sees it, for people debugging a pod and for scripts. */
#include "trainer/cmd_tfconfig.h"

#include "trainer/cli.h"
#include "trainer/cluster.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *source_name(const wf_cluster *c)
{
	switch (c->source) {
	case WF_CLUSTER_SRC_TF_CONFIG: return c->derived ? "pod" : "tf_config";
	case WF_CLUSTER_SRC_MPI: return "mpi";
	case WF_CLUSTER_SRC_JOB_INDEX: return "job_index";
	default: return "none";
	}
}

/* The TF_CONFIG in effect (given or built), parsed; NULL without one. */
static int tf_config_json(const wf_cluster *c, json_t **out, wf_err *err)
{
	char *built = NULL;
	const char *text = NULL;
	*out = NULL;
	if (c->source != WF_CLUSTER_SRC_TF_CONFIG)
		return 0;
	if (c->derived) {
		int rc = wf_cluster_pod_tf_config(&built, NULL, 0, err);
		if (rc != 0)
			return rc;
		text = built;
	} else {
		text = getenv("TF_CONFIG");
	}
	json_error_t jerr;
	*out = text ? json_loads(text, 0, &jerr) : NULL;
	free(built);
	if (!*out)
		return wf_errf(err, WF_EINVAL, "TF_CONFIG: cannot be read back");
	return 0;
}

/* Resolve every address of the cluster once; print each; WF_ETRANSIENT
 * naming the first that does not resolve. */
static int resolve_all(const wf_cluster *c, FILE *out, wf_err *err)
{
	int rc = 0;
	for (int r = 1; r < WF_ROLE__COUNT; r++)
		for (int i = 0; i < c->jobs[r].n; i++) {
			const char *a = c->jobs[r].addr[i];
			char ep[512];
			wf_err e = {0};
			if (!a)
				continue;
			if (wf_cluster_resolve(a, 1, 0, ep, sizeof(ep), &e) == 0) {
				fprintf(out, "%s[%d] %s -> %s\n", wf_role_name((wf_role)r), i, a,
					ep);
			} else {
				fprintf(out, "%s[%d] %s -> unresolved (%s)\n",
					wf_role_name((wf_role)r), i, a, e.msg);
				if (!rc)
					rc = wf_errf(err, WF_ETRANSIENT,
						     "cluster.%s[%d]: %s does not resolve (yet)",
						     wf_role_name((wf_role)r), i, a);
			}
		}
	return rc;
}

static void print_human(const wf_cluster *c, const json_t *tf)
{
	printf("source: %s\n", c->origin);
	if (c->source == WF_CLUSTER_SRC_TF_CONFIG) {
		if (c->rank >= 0)
			printf("task: %s %d (trainer rank %d of %d; chief: %s)\n",
			       wf_role_name(c->role), c->index, c->rank, c->world_size,
			       c->is_chief ? "yes" : "no");
		else
			printf("task: %s %d (of %d trainers; chief: no)\n", wf_role_name(c->role),
			       c->index, c->world_size);
		for (int r = 1; r < WF_ROLE__COUNT; r++)
			for (int i = 0; i < c->jobs[r].n; i++)
				if (c->jobs[r].addr[i])
					printf("  %s[%d] %s\n", wf_role_name((wf_role)r), i,
					       c->jobs[r].addr[i]);
		char *s = json_dumps(tf, JSON_PRESERVE_ORDER | JSON_COMPACT);
		printf("TF_CONFIG=%s\n", s ? s : "");
		free(s);
	} else {
		printf("task: %s rank %d of %d (local rank %d; chief: %s)\n", wf_role_name(c->role),
		       c->rank, c->world_size, c->local_rank, c->is_chief ? "yes" : "no");
	}
}

/* The cluster as weft read it: each job a list of its tasks' addresses, null
 * at an index a sparse map leaves out (its length is the job's size). */
static json_t *cluster_json(const wf_cluster *c)
{
	json_t *o = json_object();
	for (int r = 1; o && r < WF_ROLE__COUNT; r++) {
		json_t *a = c->jobs[r].n ? json_array() : NULL;
		for (int i = 0; a && i < c->jobs[r].n; i++)
			json_array_append_new(a, c->jobs[r].addr[i]
							 ? json_string(c->jobs[r].addr[i])
							 : json_null());
		if (a)
			json_object_set_new(o, wf_role_name((wf_role)r), a);
	}
	return o;
}

static int print_json(const wf_cluster *c, json_t *tf, wf_err *err)
{
	json_t *o = json_pack("{s:s, s:s, s:s, s:i, s:b, s:i, s:i, s:i, s:o?, s:s, s:O?}", "source",
			      source_name(c), "origin", c->origin, "role", wf_role_name(c->role),
			      "index", c->index, "is_chief", c->is_chief, "rank", c->rank,
			      "world_size", c->world_size, "local_rank", c->local_rank, "cluster",
			      cluster_json(c), "environment", c->environment, "tf_config", tf);
	char *s = o ? json_dumps(o, JSON_PRESERVE_ORDER) : NULL;
	json_decref(o);
	if (!s)
		return wf_errf(err, WF_ENOMEM, "out of memory");
	printf("%s\n", s);
	free(s);
	return 0;
}

int wf_cmd_tfconfig(int argc, char **argv, wf_err *err)
{
	int as_json = 0, only_tf = 0, resolve = 0;
	wf_cli_list pos = {0};
	const wf_flag flags[] = {
		{"json", WF_FLAG_BOOL, &as_json, NULL,
		 "one JSON object: source, origin, role, index, is_chief, rank, world_size, "
		 "local_rank, cluster (each job's addresses as read, null where a sparse map "
		 "has none), environment, tf_config (null under mpirun or alone)"},
		{"tf-config", WF_FLAG_BOOL, &only_tf, NULL,
		 "print only the TF_CONFIG, on one line (an error when there is none)"},
		{"resolve", WF_FLAG_BOOL, &resolve, NULL,
		 "also resolve every address once (exit 138 when one does not resolve yet)"},
		{0},
	};
	const wf_command_help help = {
		"weft tfconfig [--json | --tf-config] [--resolve]",
		"Print this process's place in its training cluster, as `weft train` and `weft\n"
		"ps` will see it: the TF_CONFIG given (Kubeflow's TFJob injects one), or the one\n"
		"built from the pod's identity when WEFT_ROLE is set (the index from WEFT_INDEX,\n"
		"JOB_COMPLETION_INDEX or the StatefulSet ordinal of the host name; the peers\n"
		"from WEFT_PS_SERVICE, WEFT_WORKER_SERVICE, WEFT_CHIEF_SERVICE, the counts\n"
		"WEFT_NUM_PS, WEFT_NUM_WORKERS, WEFT_NUM_CHIEF, the port WEFT_PORT and the\n"
		"suffix WEFT_DOMAIN), or the rank from mpirun's OMPI_COMM_WORLD_* (an MPIJob).\n"
		"A wrong variable is an error that names it. See the README, \"Deploying on\n"
		"Kubernetes\"."};
	wf_cluster c = {0};
	json_t *tf = NULL;
	int rc = wf_cli_parse(&help, flags, argc, argv, &pos, 0, err);
	if (rc != 0)
		goto cleanup;
	if (as_json && only_tf) {
		rc = wf_errf(err, WF_EINVAL, "tfconfig: --json and --tf-config exclude each other");
		goto cleanup;
	}
	if ((rc = wf_cluster_from_env(&c, err)) != 0)
		goto cleanup;
	if ((rc = tf_config_json(&c, &tf, err)) != 0)
		goto cleanup;
	if (only_tf) {
		if (!tf) {
			rc = wf_errf(err, WF_EINVAL,
				     "tfconfig: no TF_CONFIG: %s (set TF_CONFIG or WEFT_ROLE)",
				     c.origin);
			goto cleanup;
		}
		char *s = json_dumps(tf, JSON_PRESERVE_ORDER | JSON_COMPACT);
		if (!s) {
			rc = wf_errf(err, WF_ENOMEM, "out of memory");
			goto cleanup;
		}
		printf("%s\n", s);
		free(s);
	} else if (as_json) {
		rc = print_json(&c, tf, err);
	} else {
		print_human(&c, tf);
	}
	fflush(stdout);
	if (rc == 0 && resolve)
		rc = resolve_all(&c, as_json || only_tf ? stderr : stdout, err);
cleanup:
	json_decref(tf);
	wf_cluster_free(&c);
	wf_cli_list_free(&pos);
	return rc;
}
