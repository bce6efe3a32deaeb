/* cluster.c: TF_CONFIG parsing, environment-derived roles, host resolution. */
#include "trainer/cluster.h"

#include "common/log.h"
#include "worker/netio.h"

#include <errno.h>
#include <jansson.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <arpa/inet.h>
#include <time.h>
#include <unistd.h>

static const char *const role_names[WF_ROLE__COUNT] = {
	[WF_ROLE_NONE] = "none", [WF_ROLE_CHIEF] = "chief",	    [WF_ROLE_WORKER] = "worker",
	[WF_ROLE_PS] = "ps",	 [WF_ROLE_EVALUATOR] = "evaluator",
};

const char *wf_role_name(wf_role r)
{
	return (r >= 0 && r < WF_ROLE__COUNT) ? role_names[r] : "unknown";
}

/* TF1 clusters call the chief "master". */
static wf_role role_from_name(const char *s)
{
	for (int r = 1; r < WF_ROLE__COUNT; r++)
		if (!strcmp(s, role_names[r]))
			return (wf_role)r;
	if (!strcmp(s, "master"))
		return WF_ROLE_CHIEF;
	return WF_ROLE_NONE;
}

static int set_addr(wf_cluster_job *j, int idx, const char *val, const char *job, wf_err *err)
{
	char host[256];
	int port;
	if (wf_net_split_hostport(val, host, sizeof(host), &port))
		return wf_errf(err, WF_EINVAL,
			       "TF_CONFIG: cluster.%s[%d]: \"%s\" is not host:port (port 1-65535)",
			       job, idx, val);
	if (!(j->addr[idx] = strdup(val)))
		return wf_errf(err, WF_ENOMEM, "TF_CONFIG: out of memory");
	return 0;
}

/* The variable that gives role r's task count beside TF_CONFIG. */
static const char *count_var(wf_role r);

/* One cluster.<job> entry: a list, or an index map whose size is want
 * (-1: not given, then the map is refused). */
static int parse_job(wf_cluster_job *j, wf_role r, json_t *v, long want, wf_err *err)
{
	const char *job = wf_role_name(r);
	if (json_is_array(v)) { /* a full list: it wins over any count given */
		size_t n = json_array_size(v);
		j->n = (int)n;
		if (n && !(j->addr = calloc(n, sizeof(char *))))
			return wf_errf(err, WF_ENOMEM, "TF_CONFIG: out of memory");
		for (size_t i = 0; i < n; i++) {
			json_t *a = json_array_get(v, i);
			if (!json_is_string(a))
				return wf_errf(err, WF_EINVAL,
					       "TF_CONFIG: cluster.%s[%zu] is not a string", job,
					       i);
			int rc = set_addr(j, (int)i, json_string_value(a), job, err);
			if (rc)
				return rc;
		}
		return 0;
	}
	if (json_is_object(v)) { /* Kubeflow sparse form: {"1": "host:2222"} */
		const char *key;
		json_t *a;
		if (want < 0) /* a per-task view: its highest index says nothing of the job */
			return wf_errf(
				err, WF_EINVAL,
				"TF_CONFIG: cluster.%s is a map of task indices (Kubeflow's "
				"per-task view), which does not say how many %s tasks the job "
				"has: set %s to that number in every process of the job, or "
				"list every task in cluster.%s",
				job, job, count_var(r), job);
		json_object_foreach(v, key, a)
		{
			char *end;
			long k = strtol(key, &end, 10);
			if (!*key || *end || k < 0 || k > 100000)
				return wf_errf(
					err, WF_EINVAL,
					"TF_CONFIG: cluster.%s: key \"%s\" is not a task index",
					job, key);
			if (k >= want)
				return wf_errf(err, WF_EINVAL,
					       "TF_CONFIG: cluster.%s: task index %ld, but %s=%ld "
					       "(indices 0..%ld): set %s to the job's number of %s "
					       "tasks",
					       job, k, count_var(r), want, want - 1, count_var(r),
					       job);
		}
		j->n = (int)want;
		if (j->n && !(j->addr = calloc((size_t)j->n, sizeof(char *))))
			return wf_errf(err, WF_ENOMEM, "TF_CONFIG: out of memory");
		json_object_foreach(v, key, a)
		{
			int k = atoi(key);
			if (!json_is_string(a))
				return wf_errf(err, WF_EINVAL,
					       "TF_CONFIG: cluster.%s[\"%s\"] is not a string", job,
					       key);
			if (j->addr[k]) /* "2" and " 2" */
				return wf_errf(err, WF_EINVAL,
					       "TF_CONFIG: cluster.%s: task index %d given twice",
					       job, k);
			int rc = set_addr(j, k, json_string_value(a), job, err);
			if (rc)
				return rc;
		}
		return 0;
	}
	return wf_errf(err, WF_EINVAL, "TF_CONFIG: cluster.%s is not a list or an index map", job);
}

static int check_duplicates(const wf_cluster *c, wf_err *err)
{
	for (int r = 1; r < WF_ROLE__COUNT; r++)
		for (int i = 0; i < c->jobs[r].n; i++) {
			const char *a = c->jobs[r].addr[i];
			if (!a)
				continue;
			for (int r2 = r; r2 < WF_ROLE__COUNT; r2++)
				for (int i2 = (r2 == r ? i + 1 : 0); i2 < c->jobs[r2].n; i2++) {
					const char *b = c->jobs[r2].addr[i2];
					if (b && !strcmp(a, b))
						return wf_errf(err, WF_EINVAL,
							       "TF_CONFIG: duplicate address %s: "
							       "cluster.%s[%d] and cluster.%s[%d]",
							       a, role_names[r], i, role_names[r2],
							       i2);
				}
		}
	return 0;
}

static void derive(wf_cluster *c)
{
	int nchief = c->jobs[WF_ROLE_CHIEF].n;
	c->is_chief = c->role == WF_ROLE_CHIEF ||
		      (nchief == 0 && c->role == WF_ROLE_WORKER && c->index == 0);
	c->world_size = wf_cluster_num_trainers(c);
	c->rank = c->role == WF_ROLE_CHIEF    ? c->index
		  : c->role == WF_ROLE_WORKER ? nchief + c->index
					      : -1;
}

int wf_cluster_parse_tf_config(wf_cluster *c, const char *text, wf_err *err)
{
	return wf_cluster_parse_tf_config_counts(c, text, NULL, err);
}

/* The jobs of TF_CONFIG's cluster object cl into c. */
static int parse_jobs(wf_cluster *c, json_t *cl, const wf_cluster_counts *counts, wf_err *err)
{
	int rc;
	const char *key;
	json_t *v;
	json_object_foreach(cl, key, v)
	{
		wf_role r = role_from_name(key);
		if (r == WF_ROLE_NONE)
			return wf_errf(
				err, WF_EINVAL,
				"TF_CONFIG: cluster.%s: unknown job type (chief, worker, ps, "
				"evaluator)",
				key);
		if (c->jobs[r].addr)
			return wf_errf(err, WF_EINVAL, "TF_CONFIG: cluster.%s given twice", key);
		if ((rc = parse_job(&c->jobs[r], r, v, counts ? counts->n[r] : -1, err)))
			return rc;
	}
	if ((rc = check_duplicates(c, err)))
		return rc;
	/* TensorFlow's multi_worker_util.validate_cluster_spec */
	if (c->jobs[WF_ROLE_CHIEF].n > 1 || c->jobs[WF_ROLE_EVALUATOR].n > 1) {
		wf_role r = c->jobs[WF_ROLE_CHIEF].n > 1 ? WF_ROLE_CHIEF : WF_ROLE_EVALUATOR;
		return wf_errf(err, WF_EINVAL, "TF_CONFIG: cluster.%s has %d tasks: at most one %s",
			       wf_role_name(r), c->jobs[r].n, wf_role_name(r));
	}
	return 0;
}

/* task.index (absent: 0) as TensorFlow reads it: an integer, a whole real,
 * or a string of digits. */
static int task_index(json_t *index, long *idx, wf_err *err)
{
	if (json_is_integer(index)) {
		*idx = (long)json_integer_value(index);
	} else if (json_is_real(index)) { /* 1.0 from a generator: TensorFlow's int() */
		double d = json_real_value(index);
		if (!(d >= 0 && d <= 100000) || d != (double)(long)d)
			return wf_errf(err, WF_EINVAL,
				       "TF_CONFIG: task.index %g is not a non-negative integer", d);
		*idx = (long)d;
	} else if (json_is_string(index)) { /* TensorFlow reads int(task["index"]) */
		const char *t = json_string_value(index);
		char *end;
		errno = 0;
		*idx = strtol(t, &end, 10);
		if (!*t || *end || errno || t[strspn(t, " ")] == '+' || t[strspn(t, " ")] == '-')
			*idx = -1;
		if (*idx < 0)
			return wf_errf(err, WF_EINVAL,
				       "TF_CONFIG: task.index \"%s\" is not a non-negative integer",
				       t);
	} else if (index) {
		return wf_errf(err, WF_EINVAL, "TF_CONFIG: task.index is not an integer");
	}
	return 0;
}

int wf_cluster_parse_tf_config_counts(wf_cluster *c, const char *text,
				      const wf_cluster_counts *counts, wf_err *err)
{
	memset(c, 0, sizeof(*c));
	json_error_t jerr;
	int rc = 0;
	/* duplicate keys are refused, as in config files */
	json_t *root = json_loads(text, JSON_REJECT_DUPLICATES, &jerr);
	if (!root)
		return wf_errf(err, WF_EINVAL, "TF_CONFIG: not JSON: %s (line %d, column %d)",
			       jerr.text, jerr.line, jerr.column);
	json_t *cl = json_object_get(root, "cluster"), *task = json_object_get(root, "task");
	if (!json_is_object(root)) {
		rc = wf_errf(err, WF_EINVAL, "TF_CONFIG: not a JSON object");
		goto cleanup;
	}
	if (json_is_object(root) && !task &&
	    (!cl || (json_is_object(cl) && !json_object_size(cl)))) {
		/* TensorFlow trains locally when TF_CONFIG has no cluster and no task */
		c->role = WF_ROLE_WORKER;
		c->world_size = 1;
		c->is_chief = 1;
		c->source = WF_CLUSTER_SRC_NONE;
		goto cleanup;
	}
	if (!json_is_object(cl)) {
		rc = wf_errf(err, WF_EINVAL, "TF_CONFIG: missing or non-object field \"cluster\"");
		goto cleanup;
	}
	if (task && !json_is_object(task)) {
		rc = wf_errf(err, WF_EINVAL, "TF_CONFIG: field \"task\" is not an object");
		goto cleanup;
	}
	if ((rc = parse_jobs(c, cl, counts, err)))
		goto cleanup;
	json_t *type = json_object_get(task, "type"), *index = json_object_get(task, "index");
	if (!task) {
		rc = wf_errf(err, WF_EINVAL,
			     "TF_CONFIG: missing field \"task\" (type and index): needed with a "
			     "cluster, as TensorFlow's strategies need it");
		goto cleanup;
	} else if (!json_is_string(type)) {
		rc = wf_errf(err, WF_EINVAL, "TF_CONFIG: task.type missing or not a string");
		goto cleanup;
	} else
		c->role = role_from_name(json_string_value(type));
	if (c->role == WF_ROLE_NONE) {
		rc = wf_errf(err, WF_EINVAL,
			     "TF_CONFIG: task.type \"%s\" unknown (chief, worker, ps, evaluator)",
			     json_string_value(type));
		goto cleanup;
	}
	long idx = 0;
	if ((rc = task_index(index, &idx, err)))
		goto cleanup;
	const wf_cluster_job *j = &c->jobs[c->role];
	/* Without an index a task is task 0 (Estimator's RunConfig) only where
	 * that cannot be a mistake: its job has one task. */
	if (!index && j->n > 1) {
		rc = wf_errf(err, WF_EINVAL,
			     "TF_CONFIG: task.index missing, and cluster.%s has %d tasks: set "
			     "task.index to this task's place in the list",
			     wf_role_name(c->role), j->n);
		goto cleanup;
	}
	/* an evaluator need not be listed in cluster (TensorFlow leaves it out) */
	int unlisted_eval = c->role == WF_ROLE_EVALUATOR && j->n == 0 && idx >= 0;
	if (!unlisted_eval && (idx < 0 || idx >= j->n || !j->addr[idx])) {
		rc = wf_errf(err, WF_EINVAL,
			     "TF_CONFIG: task.index %ld out of range: cluster.%s has %s%d task%s",
			     idx, wf_role_name(c->role),
			     j->n && idx < j->n ? "no such index among " : "", j->n,
			     j->n == 1 ? "" : "s");
		goto cleanup;
	}
	c->index = (int)idx;
	json_t *env = json_object_get(root, "environment");
	if (env && !json_is_string(env)) {
		rc = wf_errf(err, WF_EINVAL, "TF_CONFIG: environment is not a string");
		goto cleanup;
	}
	snprintf(c->environment, sizeof(c->environment), "%s", env ? json_string_value(env) : "");
	c->source = WF_CLUSTER_SRC_TF_CONFIG;
	derive(c);
cleanup:
	json_decref(root);
	if (rc)
		wf_cluster_free(c);
	return rc;
}

/* Non-negative integer environment variable; -1 when unset, -2 when malformed. */
static long env_int(const char *name)
{
	const char *s = getenv(name);
	if (!s || !*s)
		return -1;
	char *end;
	long v = strtol(s, &end, 10);
	return (*end || v < 0) ? -2 : v;
}

/* ---- TF_CONFIG from the pod's identity ------------------------------------- */

/* The variables that describe one role's tasks (README "Deploying on
 * Kubernetes"): how many, the headless Service, and the StatefulSet or Job
 * name that prefixes its pods' host names (default: the service's name). */
typedef struct pod_role {
	wf_role role;
	const char *num_var, *service_var, *name_var;
} pod_role;

static const pod_role pod_roles[] = {
	{WF_ROLE_CHIEF, "WEFT_NUM_CHIEF", "WEFT_CHIEF_SERVICE", "WEFT_CHIEF_NAME"},
	{WF_ROLE_WORKER, "WEFT_NUM_WORKERS", "WEFT_WORKER_SERVICE", "WEFT_WORKER_NAME"},
	{WF_ROLE_PS, "WEFT_NUM_PS", "WEFT_PS_SERVICE", "WEFT_PS_NAME"},
	{WF_ROLE_EVALUATOR, "WEFT_NUM_EVALUATORS", "WEFT_EVALUATOR_SERVICE", "WEFT_EVALUATOR_NAME"},
};

static const char *count_var(wf_role r)
{
	for (size_t i = 0; i < sizeof(pod_roles) / sizeof(pod_roles[0]); i++)
		if (pod_roles[i].role == r)
			return pod_roles[i].num_var;
	return "WEFT_NUM_?";
}

int wf_cluster_counts_from_env(wf_cluster_counts *counts, wf_err *err)
{
	for (int r = 0; r < WF_ROLE__COUNT; r++)
		counts->n[r] = -1;
	for (size_t i = 0; i < sizeof(pod_roles) / sizeof(pod_roles[0]); i++) {
		const pod_role *pr = &pod_roles[i];
		long v = env_int(pr->num_var);
		if (v == -2 || v > 100000)
			return wf_errf(err, WF_EINVAL,
				       "%s=\"%s\" is not a task count: set it to the number of %s "
				       "tasks of the job, or unset it",
				       pr->num_var, getenv(pr->num_var), wf_role_name(pr->role));
		counts->n[pr->role] = v;
	}
	return 0;
}

/* A DNS name or label list as Kubernetes writes them: letters, digits, '-'
 * and (when dots) '.', not starting or ending with '-' or '.'. */
static int dns_name_ok(const char *s, int dots)
{
	size_t n = strlen(s);
	if (n == 0 || n > 253 || s[0] == '-' || s[0] == '.' || s[n - 1] == '-' || s[n - 1] == '.')
		return 0;
	for (size_t i = 0; i < n; i++) {
		char ch = s[i];
		int ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
			 (ch >= '0' && ch <= '9') || ch == '-' || (dots && ch == '.');
		if (!ok || (ch == '.' && s[i + 1] == '.'))
			return 0;
	}
	return 1;
}

/* A string variable that must be a DNS name when set; def when unset. */
static int env_dns(const char *var, const char *def, int dots, const char **out, wf_err *err)
{
	const char *v = getenv(var);
	if (!v || !*v) {
		*out = def;
		return 0;
	}
	if (!dns_name_ok(v, dots))
		return wf_errf(err, WF_EINVAL, "%s=\"%s\" is not a %s (letters, digits, '-'%s)",
			       var, v, dots ? "DNS name" : "DNS label", dots ? ", '.'" : "");
	*out = v;
	return 0;
}

/* N of this host's name "<name>-<N>[.domain]" (a StatefulSet pod, or an
 * Indexed Job pod), or -1 when the host name has another form; host
 * receives the name seen. */
static long host_ordinal(const char *name, char *host, size_t n)
{
	char buf[256] = "";
	if (gethostname(buf, sizeof(buf) - 1) != 0)
		buf[0] = '\0';
	buf[strcspn(buf, ".")] = '\0';
	snprintf(host, n, "%s", buf);
	size_t nl = strlen(name);
	if (strncmp(buf, name, nl) != 0 || buf[nl] != '-')
		return -1;
	const char *p = buf + nl + 1;
	if (!*p || strlen(p) > 6 || (p[0] == '0' && p[1]))
		return -1;
	long v = 0;
	for (; *p; p++) {
		if (*p < '0' || *p > '9')
			return -1;
		v = v * 10 + (*p - '0');
	}
	return v;
}

/* The index of this task of role pr; origin says where it came from. */
static int pod_index(const pod_role *pr, const char *pod_name, long count, long *index,
		     char *origin, size_t on, wf_err *err)
{
	const char *rname = wf_role_name(pr->role);
	long v = env_int("WEFT_INDEX");
	if (v == -2)
		return wf_errf(err, WF_EINVAL, "WEFT_INDEX=\"%s\" is not a task index",
			       getenv("WEFT_INDEX"));
	if (v >= 0) {
		snprintf(origin, on, "WEFT_ROLE=%s, index from WEFT_INDEX=%ld", rname, v);
		*index = v;
		return 0;
	}
	v = env_int("JOB_COMPLETION_INDEX");
	if (v == -2)
		return wf_errf(err, WF_EINVAL, "JOB_COMPLETION_INDEX=\"%s\" is not an index",
			       getenv("JOB_COMPLETION_INDEX"));
	if (v >= 0) {
		snprintf(origin, on,
			 "WEFT_ROLE=%s, index from JOB_COMPLETION_INDEX=%ld (Indexed Job)", rname,
			 v);
		*index = v;
		return 0;
	}
	char host[256];
	v = host_ordinal(pod_name, host, sizeof(host));
	if (v >= 0) {
		snprintf(origin, on,
			 "WEFT_ROLE=%s, index from the host name %s (StatefulSet ordinal)", rname,
			 host);
		*index = v;
		return 0;
	}
	if (count == 1) {
		snprintf(origin, on, "WEFT_ROLE=%s, the only %s task", rname, rname);
		*index = 0;
		return 0;
	}
	return wf_errf(err, WF_EINVAL,
		       "WEFT_ROLE=%s: no task index: set WEFT_INDEX, or run as an Indexed Job "
		       "(JOB_COMPLETION_INDEX) or a StatefulSet (host name %s-<N>; this host is "
		       "\"%s\": set %s to the StatefulSet's name)",
		       rname, pod_name, host, pr->name_var);
}

int wf_cluster_pod_tf_config(char **json, char *origin, size_t on, wf_err *err)
{
	char origin_buf[160];
	json_t *root = NULL, *cluster = NULL;
	int rc = 0;
	*json = NULL;
	if (!origin) {
		origin = origin_buf;
		on = sizeof(origin_buf);
	}
	origin[0] = '\0';
	const char *role_s = getenv("WEFT_ROLE");
	if (!role_s || !*role_s)
		return 0;
	wf_role role = role_from_name(role_s);
	if (role == WF_ROLE_NONE)
		return wf_errf(err, WF_EINVAL,
			       "WEFT_ROLE=\"%s\" unknown (chief, worker, ps, evaluator)", role_s);
	long port = env_int("WEFT_PORT");
	if (port == -1)
		port = 2222;
	if (port < 1 || port > 65535)
		return wf_errf(err, WF_EINVAL, "WEFT_PORT=\"%s\" is not a port (1-65535)",
			       getenv("WEFT_PORT"));
	const char *domain;
	if ((rc = env_dns("WEFT_DOMAIN", "", 1, &domain, err)))
		return rc;
	if (!(root = json_object()) || !(cluster = json_object())) {
		rc = wf_errf(err, WF_ENOMEM, "out of memory");
		goto cleanup;
	}
	json_object_set_new(root, "cluster", cluster);
	long own_index = -1;
	char names[WF_ROLE__COUNT][64];
	for (size_t r = 0; r < sizeof(pod_roles) / sizeof(pod_roles[0]); r++) {
		const pod_role *pr = &pod_roles[r];
		const char *rname = wf_role_name(pr->role), *service, *name;
		long count = env_int(pr->num_var);
		if (count == -1)
			count = 0;
		if (count < 0 || count > 100000 || (pr->role == WF_ROLE_CHIEF && count > 1)) {
			rc = wf_errf(err, WF_EINVAL, "%s=\"%s\" is not a task count%s", pr->num_var,
				     getenv(pr->num_var),
				     pr->role == WF_ROLE_CHIEF ? " (0 or 1: one chief at most)"
							       : "");
			goto cleanup;
		}
		if ((rc = env_dns(pr->service_var, rname, 1, &service, err)) ||
		    (rc = env_dns(pr->name_var, rname, 0, &name, err)))
			goto cleanup;
		if (getenv(pr->service_var) && *getenv(pr->service_var) && !getenv(pr->name_var)) {
			/* pods are named after the StatefulSet/Job, which is named like
			 * its Service unless WEFT_<R>_NAME says otherwise */
			size_t label = strcspn(service, ".");
			snprintf(names[pr->role], sizeof(names[0]), "%.*s",
				 (int)(label < 63 ? label : 63), service);
			name = names[pr->role];
		}
		if (pr->role == role) {
			if (count == 0) {
				rc = wf_errf(err, WF_EINVAL,
					     "WEFT_ROLE=%s but %s is 0 or unset (the number of %s "
					     "tasks)",
					     rname, pr->num_var, rname);
				goto cleanup;
			}
			if ((rc = pod_index(pr, name, count, &own_index, origin, on, err)))
				goto cleanup;
			if (own_index >= count) {
				rc = wf_errf(err, WF_EINVAL, "%s: index %ld out of range: %s=%ld",
					     origin, own_index, pr->num_var, count);
				goto cleanup;
			}
		}
		if (count == 0)
			continue;
		json_t *list = json_array();
		if (!list || json_object_set_new(cluster, rname, list)) {
			rc = wf_errf(err, WF_ENOMEM, "out of memory");
			goto cleanup;
		}
		for (long i = 0; i < count; i++) {
			char addr[600];
			snprintf(addr, sizeof(addr), "%s-%ld.%s%s%s:%ld", name, i, service,
				 *domain ? "." : "", domain, port);
			if (json_array_append_new(list, json_string(addr))) {
				rc = wf_errf(err, WF_ENOMEM, "out of memory");
				goto cleanup;
			}
		}
	}
	json_t *task =
		json_pack("{s:s, s:I}", "type", wf_role_name(role), "index", (json_int_t)own_index);
	if (!task || json_object_set_new(root, "task", task) ||
	    !(*json = json_dumps(root, JSON_PRESERVE_ORDER)))
		rc = wf_errf(err, WF_ENOMEM, "out of memory");
cleanup:
	json_decref(root);
	return rc;
}

static int cluster_from_env(wf_cluster *c, wf_err *err);

int wf_cluster_from_env(wf_cluster *c, wf_err *err)
{
	int rc = cluster_from_env(c, err);
	if (rc != 0)
		return rc;
	const char *token = getenv(WF_JOB_TOKEN_ENV);
	if (token && strlen(token) >= sizeof(c->job_token)) {
		wf_cluster_free(c);
		return wf_errf(err, WF_EINVAL,
			       "%s: %zu characters, at most %zu: give every process of the job the "
			       "same shorter random value (e.g. `openssl rand -hex 16`)",
			       WF_JOB_TOKEN_ENV, strlen(token), sizeof(c->job_token) - 1);
	}
	snprintf(c->job_token, sizeof(c->job_token), "%s", token ? token : "");
	return 0;
}

int wf_cluster_new_token(char *out, size_t n, wf_err *err)
{
	unsigned char b[64];
	if (n > sizeof(b) || getrandom(b, n, 0) != (ssize_t)n)
		return wf_errf(err, WF_EINTERNAL, "cannot make a random job token: %s",
			       strerror(errno));
	for (size_t i = 0; i < n; i++)
		snprintf(out + 2 * i, 3, "%02x", b[i]);
	return 0;
}

static int cluster_from_env(wf_cluster *c, wf_err *err)
{
	const char *tf = getenv("TF_CONFIG");
	if (tf && *tf) {
		wf_cluster_counts counts;
		int rc = wf_cluster_counts_from_env(&counts, err);
		if (rc != 0)
			return rc;
		rc = wf_cluster_parse_tf_config_counts(c, tf, &counts, err);
		if (rc == 0)
			snprintf(c->origin, sizeof(c->origin), "TF_CONFIG");
		return rc;
	}
	char *derived = NULL, origin[160];
	int rc = wf_cluster_pod_tf_config(&derived, origin, sizeof(origin), err);
	if (rc != 0)
		return rc;
	if (derived) {
		rc = wf_cluster_parse_tf_config(c, derived, err);
		free(derived);
		if (rc != 0)
			return wf_err_wrap(err, "the TF_CONFIG built from WEFT_ROLE"), rc;
		c->derived = 1;
		snprintf(c->origin, sizeof(c->origin), "%s", origin);
		return 0;
	}
	memset(c, 0, sizeof(*c));
	long rank = env_int("OMPI_COMM_WORLD_RANK"), size = env_int("OMPI_COMM_WORLD_SIZE");
	if (rank != -1 || size != -1) {
		long local = env_int("OMPI_COMM_WORLD_LOCAL_RANK");
		if (rank < 0 || size < 1 || rank >= size || local == -2)
			return wf_errf(err, WF_EINVAL,
				       "OMPI_COMM_WORLD_RANK=%s / OMPI_COMM_WORLD_SIZE=%s / "
				       "OMPI_COMM_WORLD_LOCAL_RANK=%s are not a valid rank",
				       getenv("OMPI_COMM_WORLD_RANK") ?: "",
				       getenv("OMPI_COMM_WORLD_SIZE") ?: "",
				       getenv("OMPI_COMM_WORLD_LOCAL_RANK") ?: "");
		c->source = WF_CLUSTER_SRC_MPI;
		c->role = WF_ROLE_WORKER;
		c->index = c->rank = (int)rank;
		c->world_size = (int)size;
		c->local_rank = local > 0 ? (int)local : 0;
		c->is_chief = rank == 0;
		snprintf(c->origin, sizeof(c->origin), "OMPI_COMM_WORLD_RANK/SIZE (mpirun)");
		return 0;
	}
	long jidx = env_int("JOB_COMPLETION_INDEX");
	if (jidx == -2)
		return wf_errf(err, WF_EINVAL, "JOB_COMPLETION_INDEX=\"%s\" is not an index",
			       getenv("JOB_COMPLETION_INDEX"));
	c->role = WF_ROLE_WORKER;
	c->world_size = 1;
	if (jidx >= 0) {
		c->source = WF_CLUSTER_SRC_JOB_INDEX;
		c->index = c->rank = (int)jidx;
		c->is_chief = jidx == 0;
		snprintf(c->origin, sizeof(c->origin), "JOB_COMPLETION_INDEX (Indexed Job)");
		return 0;
	}
	c->source = WF_CLUSTER_SRC_NONE;
	c->is_chief = 1;
	snprintf(c->origin, sizeof(c->origin),
		 "a single process (no TF_CONFIG, WEFT_ROLE or mpirun)");
	return 0;
}

int wf_cluster_num_trainers(const wf_cluster *c)
{
	/* A sparse worker map (Kubeflow: {"1": ...}) still numbers its tasks
	 * 0..max: ranks count from the indices, never past the world size. */
	int n = 0;
	for (int r = WF_ROLE_CHIEF; r <= WF_ROLE_WORKER; r++)
		n += c->jobs[r].n;
	return n;
}

int wf_cluster_validate(const wf_cluster *c, const char *strategy, wf_err *err)
{
	if (!strcmp(strategy, "parameter_server")) {
		int nps = 0;
		for (int i = 0; i < c->jobs[WF_ROLE_PS].n; i++)
			nps += c->jobs[WF_ROLE_PS].addr[i] != NULL;
		if (c->source == WF_CLUSTER_SRC_TF_CONFIG && nps == 0)
			return wf_errf(err, WF_EINVAL,
				       c->derived
					       ? "strategy.name parameter_server needs servers: "
						 "WEFT_NUM_PS is 0 or unset"
					       : "TF_CONFIG: strategy.name parameter_server needs "
						 "cluster.ps with at least one address");
		if (c->source == WF_CLUSTER_SRC_TF_CONFIG && wf_cluster_num_trainers(c) == 0)
			return wf_errf(
				err, WF_EINVAL,
				c->derived ? "strategy.name parameter_server needs trainers: "
					     "WEFT_NUM_CHIEF and WEFT_NUM_WORKERS are 0 or unset"
					   : "TF_CONFIG: strategy.name parameter_server needs "
					     "cluster.chief or cluster.worker");
		return 0;
	}
	if (!strcmp(strategy, "allreduce") || !strcmp(strategy, "local")) {
		if (c->role == WF_ROLE_PS)
			return wf_errf(err, WF_EINVAL,
				       "TF_CONFIG: task.type ps but strategy.name is %s (no "
				       "parameter servers)",
				       strategy);
		return 0;
	}
	return wf_errf(err, WF_EINVAL,
		       "strategy.name \"%s\" unknown (parameter_server, allreduce, local)",
		       strategy);
}

int wf_cluster_resolve(const char *hostport, int attempts, double backoff, char *endpoint, size_t n,
		       wf_err *err)
{
	char host[256];
	int port, gai = 0;
	if (wf_net_split_hostport(hostport, host, sizeof(host), &port))
		return wf_errf(err, WF_EINVAL, "address \"%s\" is not host:port", hostport);
	if (attempts < 1)
		attempts = 1;
	for (int a = 0; a < attempts; a++) {
		struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
		struct addrinfo *res = NULL;
		gai = getaddrinfo(host, NULL, &hints, &res);
		if (gai == 0 && res) {
			char ip[INET6_ADDRSTRLEN] = "";
			struct addrinfo *pick = res;
			for (struct addrinfo *r = res; r; r = r->ai_next)
				if (r->ai_family ==
				    AF_INET) { /* prefer IPv4: what pods listen on */
					pick = r;
					break;
				}
			if (pick->ai_family == AF_INET)
				inet_ntop(AF_INET, &((struct sockaddr_in *)pick->ai_addr)->sin_addr,
					  ip, sizeof(ip));
			else
				inet_ntop(AF_INET6,
					  &((struct sockaddr_in6 *)pick->ai_addr)->sin6_addr, ip,
					  sizeof(ip));
			int v6 = pick->ai_family == AF_INET6;
			freeaddrinfo(res);
			snprintf(endpoint, n, "tcp://%s%s%s:%d", v6 ? "[" : "", ip, v6 ? "]" : "",
				 port);
			return 0;
		}
		if (res)
			freeaddrinfo(res);
		if (a + 1 < attempts) {
			double wait = backoff * (double)(1L << (a < 20 ? a : 20));
			wf_warn("resolving %s failed (%s): retry %d of %d in %.2f s", host,
				gai_strerror(gai), a + 1, attempts - 1, wait);
			struct timespec ts = {.tv_sec = (time_t)wait,
					      .tv_nsec =
						      (long)((wait - (double)(time_t)wait) * 1e9)};
			nanosleep(&ts, NULL);
		}
	}
	return wf_errf(err, WF_ETRANSIENT, "cannot resolve host \"%s\" after %d attempts: %s", host,
		       attempts, gai_strerror(gai));
}

void wf_cluster_free(wf_cluster *c)
{
	if (!c)
		return;
	for (int r = 0; r < WF_ROLE__COUNT; r++) {
		for (int i = 0; i < c->jobs[r].n; i++)
			free(c->jobs[r].addr ? c->jobs[r].addr[i] : NULL);
		free(c->jobs[r].addr);
		c->jobs[r].addr = NULL;
		c->jobs[r].n = 0;
	}
}
