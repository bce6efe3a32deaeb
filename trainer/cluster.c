/* cluster.c: TF_CONFIG parsing, environment-derived roles, host resolution. */
#include "trainer/cluster.h"

#include "common/log.h"

#include <jansson.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <arpa/inet.h>
#include <time.h>

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

int wf_cluster_split_hostport(const char *hp, char *host, size_t n, int *port)
{
	const char *colon;
	size_t hl;
	if (hp[0] == '[') {
		const char *close = strchr(hp, ']');
		if (!close || close[1] != ':')
			return -1;
		colon = close + 1;
		hl = (size_t)(close - hp - 1);
		hp++;
	} else {
		colon = strrchr(hp, ':');
		if (!colon || memchr(hp, ':', (size_t)(colon - hp)))
			return -1;
		hl = (size_t)(colon - hp);
	}
	if (hl == 0 || hl >= n)
		return -1;
	for (size_t i = 0; i < hl; i++)
		if (hp[i] == ' ' || hp[i] == '/' || hp[i] == '\t')
			return -1;
	const char *p = colon + 1;
	if (!*p || strlen(p) > 5)
		return -1;
	long v = 0;
	for (; *p; p++) {
		if (*p < '0' || *p > '9')
			return -1;
		v = v * 10 + (*p - '0');
	}
	if (v < 1 || v > 65535)
		return -1;
	memcpy(host, hp, hl);
	host[hl] = '\0';
	*port = (int)v;
	return 0;
}

static int set_addr(wf_cluster_job *j, int idx, const char *val, const char *job, wf_err *err)
{
	char host[256];
	int port;
	if (wf_cluster_split_hostport(val, host, sizeof(host), &port))
		return wf_errf(err, WF_EINVAL,
			       "TF_CONFIG: cluster.%s[%d]: \"%s\" is not host:port (port 1-65535)",
			       job, idx, val);
	if (!(j->addr[idx] = strdup(val)))
		return wf_errf(err, WF_ENOMEM, "TF_CONFIG: out of memory");
	return 0;
}

static int parse_job(wf_cluster_job *j, const char *job, json_t *v, wf_err *err)
{
	if (json_is_array(v)) {
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
		long max = -1;
		json_object_foreach(v, key, a)
		{
			char *end;
			long k = strtol(key, &end, 10);
			if (!*key || *end || k < 0 || k > 100000)
				return wf_errf(
					err, WF_EINVAL,
					"TF_CONFIG: cluster.%s: key \"%s\" is not a task index",
					job, key);
			if (k > max)
				max = k;
		}
		j->n = (int)(max + 1);
		if (j->n && !(j->addr = calloc((size_t)j->n, sizeof(char *))))
			return wf_errf(err, WF_ENOMEM, "TF_CONFIG: out of memory");
		json_object_foreach(v, key, a)
		{
			int k = atoi(key);
			if (!json_is_string(a))
				return wf_errf(err, WF_EINVAL,
					       "TF_CONFIG: cluster.%s[\"%s\"] is not a string", job,
					       key);
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
	memset(c, 0, sizeof(*c));
	json_error_t jerr;
	int rc = 0;
	json_t *root = json_loads(text, 0, &jerr);
	if (!root)
		return wf_errf(err, WF_EINVAL, "TF_CONFIG: not JSON: %s (line %d, column %d)",
			       jerr.text, jerr.line, jerr.column);
	json_t *cl = json_object_get(root, "cluster"), *task = json_object_get(root, "task");
	if (!json_is_object(root)) {
		rc = wf_errf(err, WF_EINVAL, "TF_CONFIG: not a JSON object");
		goto cleanup;
	}
	if (!json_is_object(cl)) {
		rc = wf_errf(err, WF_EINVAL, "TF_CONFIG: missing or non-object field \"cluster\"");
		goto cleanup;
	}
	if (!json_is_object(task)) {
		rc = wf_errf(err, WF_EINVAL, "TF_CONFIG: missing or non-object field \"task\"");
		goto cleanup;
	}
	const char *key;
	json_t *v;
	json_object_foreach(cl, key, v)
	{
		wf_role r = role_from_name(key);
		if (r == WF_ROLE_NONE) {
			rc = wf_errf(err, WF_EINVAL,
				     "TF_CONFIG: cluster.%s: unknown job type (chief, worker, ps, "
				     "evaluator)",
				     key);
			goto cleanup;
		}
		if (c->jobs[r].addr) {
			rc = wf_errf(err, WF_EINVAL, "TF_CONFIG: cluster.%s given twice", key);
			goto cleanup;
		}
		if ((rc = parse_job(&c->jobs[r], key, v, err)))
			goto cleanup;
	}
	if ((rc = check_duplicates(c, err)))
		goto cleanup;
	json_t *type = json_object_get(task, "type"), *index = json_object_get(task, "index");
	if (!json_is_string(type)) {
		rc = wf_errf(err, WF_EINVAL, "TF_CONFIG: task.type missing or not a string");
		goto cleanup;
	}
	c->role = role_from_name(json_string_value(type));
	if (c->role == WF_ROLE_NONE) {
		rc = wf_errf(err, WF_EINVAL,
			     "TF_CONFIG: task.type \"%s\" unknown (chief, worker, ps, evaluator)",
			     json_string_value(type));
		goto cleanup;
	}
	if (index && !json_is_integer(index)) {
		rc = wf_errf(err, WF_EINVAL, "TF_CONFIG: task.index is not an integer");
		goto cleanup;
	}
	long idx = index ? (long)json_integer_value(index) : 0;
	const wf_cluster_job *j = &c->jobs[c->role];
	if (idx < 0 || idx >= j->n || !j->addr[idx]) {
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

int wf_cluster_from_env(wf_cluster *c, wf_err *err)
{
	const char *tf = getenv("TF_CONFIG");
	if (tf && *tf)
		return wf_cluster_parse_tf_config(c, tf, err);
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
		return 0;
	}
	c->source = WF_CLUSTER_SRC_NONE;
	c->is_chief = 1;
	return 0;
}

int wf_cluster_num_trainers(const wf_cluster *c)
{
	int n = 0;
	for (int r = WF_ROLE_CHIEF; r <= WF_ROLE_WORKER; r++)
		for (int i = 0; i < c->jobs[r].n; i++)
			n += c->jobs[r].addr[i] != NULL;
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
				       "TF_CONFIG: strategy.name parameter_server needs cluster.ps "
				       "with at least one address");
		if (c->source == WF_CLUSTER_SRC_TF_CONFIG && wf_cluster_num_trainers(c) == 0)
			return wf_errf(err, WF_EINVAL,
				       "TF_CONFIG: strategy.name parameter_server needs "
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
	if (wf_cluster_split_hostport(hostport, host, sizeof(host), &port))
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
