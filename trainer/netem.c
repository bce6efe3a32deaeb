/* netem.c: network namespaces, veth pairs, a bridge and tc qdiscs, made by
 * running iproute2's `ip` and `tc` (their output is kept for the error). */
#include "trainer/netem.h"

#include "common/util.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/wait.h>
#include <unistd.h>

#define NETNS_DIR "/run/netns"
#define MAX_ARGV  32

/* ---- parsing ------------------------------------------------------------- */

int wf_netem_parse_rate(const char *s, double *bps, wf_err *err)
{
	static const struct {
		const char *suffix;
		double mult;
	} units[] = {{"gbit", 1e9}, {"mbit", 1e6}, {"kbit", 1e3}, {"bit", 1}, {"", 1}};
	char *end;
	double v = s ? strtod(s, &end) : -1;
	if (s && end != s && v > 0)
		for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++)
			if (!strcasecmp(end, units[i].suffix)) {
				*bps = v * units[i].mult;
				return 0;
			}
	return wf_errf(err, WF_EINVAL,
		       "link rate \"%s\": expected a positive rate such as 10gbit, 100mbit or "
		       "800kbit",
		       s ? s : "");
}

int wf_netem_parse_delay(const char *s, double *ms, wf_err *err)
{
	char *end;
	double v = s ? strtod(s, &end) : -1;
	if (s && end != s && v >= 0) {
		if (!*end || !strcmp(end, "ms")) {
			*ms = v;
			return 0;
		}
		if (!strcmp(end, "us")) {
			*ms = v / 1000;
			return 0;
		}
		if (!strcmp(end, "s")) {
			*ms = v * 1000;
			return 0;
		}
	}
	return wf_errf(err, WF_EINVAL, "delay \"%s\": expected a duration such as 0.2ms or 50us",
		       s ? s : "");
}

/* ---- running ip and tc ----------------------------------------------------- */

/* Run the command line `line` (argv[0] looked up on PATH) with its output
 * captured into out (cap bytes, NUL-terminated); 0 when it exits 0, else an
 * error naming the command and what it printed. */
static int run_capture(char *out, size_t cap, wf_err *err, const char *line)
{
	char copy[512], *argv[MAX_ARGV], *save = NULL;
	int argc = 0;
	snprintf(copy, sizeof(copy), "%s", line);
	for (char *t = strtok_r(copy, " ", &save); t && argc < MAX_ARGV - 1;
	     t = strtok_r(NULL, " ", &save))
		argv[argc++] = t;
	argv[argc] = NULL;
	int p[2];
	if (pipe(p) != 0)
		return wf_errf(err, WF_EINTERNAL, "%s: pipe: %s", line, strerror(errno));
	pid_t pid = fork();
	if (pid == 0) {
		dup2(p[1], 1);
		dup2(p[1], 2);
		close(p[0]);
		close(p[1]);
		execvp(argv[0], argv);
		fprintf(stderr, "cannot run %s: %s", argv[0], strerror(errno));
		_exit(127);
	}
	close(p[1]);
	size_t n = 0;
	char skip[256];
	for (ssize_t r; (r = read(p[0], n < cap - 1 ? out + n : skip,
				  n < cap - 1 ? cap - 1 - n : sizeof(skip))) > 0;)
		if (n < cap - 1)
			n += (size_t)r;
	close(p[0]);
	out[n] = '\0';
	while (n && (out[n - 1] == '\n' || out[n - 1] == ' '))
		out[--n] = '\0';
	int st = 0;
	if (pid < 0 || waitpid(pid, &st, 0) < 0)
		return wf_errf(err, WF_EINTERNAL, "%s: cannot start: %s", line, strerror(errno));
	if (WIFEXITED(st) && WEXITSTATUS(st) == 0)
		return 0;
	int code = WIFEXITED(st) && WEXITSTATUS(st) == 127 ? WF_ENOTSUP : WF_EINVAL;
	return wf_errf(err, code, "`%s` failed: %s", line, n ? out : "(no output)");
}

static int run(wf_err *err, const char *fmt, ...)
{
	char line[512], out[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	return run_capture(out, sizeof(out), err, line);
}

/* ---- the network ------------------------------------------------------------- */

void wf_netem_addr(int node, char *buf, size_t n)
{
	snprintf(buf, n, "10.213.0.%d", node + 1);
}

/* A locally administered MAC per node, so that every node can be told every
 * other's before any traffic (neighbours). */
static void node_mac(int node, char *buf, size_t n)
{
	snprintf(buf, n, "02:77:66:00:%02x:%02x", (node >> 8) & 0xff, node & 0xff);
}

void wf_netem_ns(const wf_netem *ne, int node, char *buf, size_t n)
{
	snprintf(buf, n, "%s-%d", ne->tag, node);
}

/* The qdisc shaping one egress: tbf for a rate alone, netem when a delay
 * or a loss is asked too. tbf's burst is 1 ms of the rate, but at least a
 * few wire frames (or, with GSO packets, one 64 KiB packet): a NIC sends at
 * its rate, so 32 workers must not each throw a 64 KiB burst at once into
 * the port of the server they all push to. Its queue (a switch port's
 * buffer) is 20 ms of the rate, but at least QUEUE_MIN bytes, so that a slow
 * emulated link still holds a few packets of each flow that converges on a
 * server; or queue_kb (one larger than what a step sends through a port
 * never drops: a lossless fabric, as InfiniBand or RoCE with PFC). */
#define QUEUE_MIN 262144.0 /* bytes */

static int shape(const char *where, const char *dev, const wf_netem_link *l, wf_err *err)
{
	char rate[64] = "", extra[128] = "";
	if (l->rate_bps > 0)
		snprintf(rate, sizeof(rate), "rate %.0fbit", l->rate_bps);
	if (l->delay_ms <= 0 && l->loss <= 0) {
		if (!rate[0])
			return 0;
		double frame = (l->mtu > 0 ? l->mtu : 1500) + 14.0;
		double burst = WF_MAX(l->gso ? 65536.0 : 4 * frame, l->rate_bps / 8 / 1000);
		double queue = l->queue_kb > 0 ? l->queue_kb * 1024.0
					       : WF_MAX(QUEUE_MIN, l->rate_bps / 8 * 0.020);
		return run(err, "tc %s qdisc add dev %s root tbf %s burst %.0f limit %.0f", where,
			   dev, rate, burst, queue);
	}
	if (l->delay_ms > 0)
		snprintf(extra, sizeof(extra), "delay %.3fms ", l->delay_ms);
	if (l->loss > 0)
		snprintf(extra + strlen(extra), sizeof(extra) - strlen(extra), "loss %.4f%% ",
			 l->loss * 100);
	int rc = run(err, "tc %s qdisc add dev %s root netem %s%s limit 100000", where, dev, extra,
		     rate);
	if (rc != 0 && strstr(err->msg, "unknown"))
		wf_err_wrap(err, "this kernel has no netem qdisc (sch_netem): --delay and --loss "
				 "need it; a rate alone uses tbf");
	return rc;
}

static int add_node(wf_netem *ne, int i, const wf_netem_link *link, wf_err *err)
{
	char ns[64], host[24], peer[24], addr[32], mac[24], where[80];
	wf_netem_ns(ne, i, ns, sizeof(ns));
	node_mac(i, mac, sizeof(mac));
	snprintf(host, sizeof(host), "%sh%d", ne->tag, i);
	snprintf(peer, sizeof(peer), "%sn%d", ne->tag, i);
	wf_netem_addr(i, addr, sizeof(addr));
	snprintf(where, sizeof(where), "-n %s", ns);
	int rc = run(err, "ip netns add %s", ns);
	if (rc != 0)
		return rc;
	ne->made = i + 1;
	if ((rc = run(err, "ip link add %s type veth peer name %s", host, peer)) ||
	    (rc = run(err, "ip link set %s netns %s", peer, ns)) ||
	    (rc = run(err, "ip -n %s link set %s name eth0", ns, peer)) ||
	    (rc = run(err, "ip -n %s link set eth0 address %s", ns, mac)) ||
	    (rc = run(err, "ip -n %s addr add %s/24 dev eth0", ns, addr)) ||
	    (rc = run(err, "ip -n %s link set eth0 up", ns)) ||
	    (rc = run(err, "ip -n %s link set lo up", ns)) ||
	    (rc = run(err, "ip link set %s master %s", host, ne->bridge)) ||
	    (rc = run(err, "ip link set %s up", host)))
		return rc;
	if (link->mtu > 0 && ((rc = run(err, "ip link set %s mtu %d", host, link->mtu)) ||
			      (rc = run(err, "ip -n %s link set eth0 mtu %d", ns, link->mtu))))
		return rc;
	if (i >= ne->shaped)
		return 0;
	/* a wire carries MTU-sized frames and a switch drops them one by one;
	 * veth would pass TCP's 64 KiB GSO packets through the qdisc whole,
	 * so one drop lost 45 segments at once (README, Running at scale) */
	if (!link->gso && (rc = run(err, "ip -n %s link set eth0 gso_max_segs 1", ns)))
		return rc;
	/* the node's egress is its upload; the bridge port's is its download */
	if ((rc = shape(where, "eth0", link, err)) || (rc = shape("", host, link, err)))
		return rc;
	return 0;
}

/* Every node knows every other's MAC from the start, as permanent neighbour
 * entries. Learned (ARP) entries of all namespaces share one kernel table,
 * capped host-wide by net.ipv4.neigh.default.gc_thresh3 (1024 by default):
 * 32 workers talking to 32 servers need 2048, and a node whose entry cannot
 * be made sends nothing (its connections stay in SYN-SENT, and the kernel
 * logs "neighbor table overflow"). Permanent entries are outside that cap. */
static int add_neighbours(wf_netem *ne, wf_err *err)
{
	char path[] = "/tmp/weft-netem-neigh.XXXXXX";
	int fd = mkstemp(path);
	FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
	if (!f) {
		if (fd >= 0)
			close(fd);
		return wf_errf(err, WF_EIO, "%s: cannot write it: %s", path, strerror(errno));
	}
	for (int j = 0; j < ne->nodes; j++) {
		char addr[32], mac[24];
		wf_netem_addr(j, addr, sizeof(addr));
		node_mac(j, mac, sizeof(mac));
		fprintf(f, "neigh replace %s lladdr %s dev eth0 nud permanent\n", addr, mac);
	}
	int rc = fclose(f) != 0 ? wf_errf(err, WF_EIO, "%s: cannot write it", path) : 0;
	for (int i = 0; rc == 0 && i < ne->nodes; i++) {
		char ns[64];
		wf_netem_ns(ne, i, ns, sizeof(ns));
		rc = run(err, "ip -n %s -batch %s", ns, path);
	}
	unlink(path);
	return rc;
}

int wf_netem_create(wf_netem *ne, int nodes, int shaped, const wf_netem_link *link, wf_err *err)
{
	memset(ne, 0, sizeof(*ne));
	if (nodes < 1 || nodes > WF_NETEM_MAX_NODES || shaped < 0 || shaped > nodes)
		return wf_errf(err, WF_EINVAL, "emulated network: %d nodes (1..%d)", nodes,
			       WF_NETEM_MAX_NODES);
	if (geteuid() != 0)
		return wf_errf(err, WF_ENOTSUP,
			       "an emulated network needs root (network namespaces, veth, tc): "
			       "run as root");
	wf_netem_sweep();
	ne->nodes = nodes;
	ne->shaped = shaped;
	snprintf(ne->tag, sizeof(ne->tag), "wf%d", (int)getpid());
	snprintf(ne->bridge, sizeof(ne->bridge), "%sb", ne->tag);
	int rc = run(err, "ip link add %s type bridge", ne->bridge);
	if (rc == 0)
		rc = run(err, "ip link set %s up", ne->bridge);
	for (int i = 0; rc == 0 && i < nodes; i++)
		rc = add_node(ne, i, link, err);
	if (rc == 0)
		rc = add_neighbours(ne, err);
	if (rc != 0) {
		wf_err_wrap(err, "emulated network");
		wf_netem_destroy(ne);
	}
	return rc;
}

void wf_netem_destroy(wf_netem *ne)
{
	wf_err ignore;
	if (!ne->tag[0])
		return;
	for (int i = 0; i < ne->made; i++) {
		char ns[64];
		wf_netem_ns(ne, i, ns, sizeof(ns));
		run(&ignore, "ip netns del %s", ns);
	}
	run(&ignore, "ip link del %s", ne->bridge);
	memset(ne, 0, sizeof(*ne));
}

/* The pid in a name "wf<pid>..." whose process is gone, else 0. */
static int orphan_pid(const char *name)
{
	if (strncmp(name, "wf", 2) != 0)
		return 0;
	char *end;
	long pid = strtol(name + 2, &end, 10);
	if (end == name + 2 || pid <= 0 || (*end != '-' && *end != 'b'))
		return 0;
	return kill((pid_t)pid, 0) != 0 && errno == ESRCH ? (int)pid : 0;
}

void wf_netem_sweep(void)
{
	wf_err ignore;
	DIR *d = opendir(NETNS_DIR);
	for (struct dirent *e; d && (e = readdir(d));)
		if (orphan_pid(e->d_name))
			run(&ignore, "ip netns del %s", e->d_name);
	if (d)
		closedir(d);
	d = opendir("/sys/class/net");
	for (struct dirent *e; d && (e = readdir(d));) {
		size_t n = strlen(e->d_name);
		if (n > 3 && e->d_name[n - 1] == 'b' && orphan_pid(e->d_name))
			run(&ignore, "ip link del %s", e->d_name);
	}
	if (d)
		closedir(d);
}

int wf_netem_enter(const wf_netem *ne, int node, wf_err *err)
{
	char ns[64], path[128];
	wf_netem_ns(ne, node, ns, sizeof(ns));
	snprintf(path, sizeof(path), NETNS_DIR "/%s", ns);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return wf_errf(err, WF_EINTERNAL, "%s: %s", path, strerror(errno));
	int rc = setns(fd, CLONE_NEWNET);
	close(fd);
	if (rc != 0)
		return wf_errf(err, WF_EINTERNAL, "entering network namespace %s: %s", ns,
			       strerror(errno));
	return 0;
}

/* ---- counters ------------------------------------------------------------------ */

/* The value under column `name` of the line pair starting with `prefix` in
 * /proc/net/snmp or /proc/net/netstat text (a header line, then values). */
static uint64_t proc_field(const char *text, const char *prefix, const char *name)
{
	const char *hdr = strstr(text, prefix);
	const char *vals = hdr ? strstr(hdr + 1, prefix) : NULL;
	if (!vals)
		return 0;
	size_t plen = strlen(prefix), nlen = strlen(name);
	const char *h = hdr + plen, *v = vals + plen;
	while (*h && *h != '\n') {
		h += strspn(h, " ");
		v += strspn(v, " ");
		size_t hl = strcspn(h, " \n");
		if (hl == nlen && !strncmp(h, name, nlen))
			return strtoull(v, NULL, 10);
		h += hl;
		v += strcspn(v, " \n");
	}
	return 0;
}

/* Packets the qdisc of `dev` (in this namespace) dropped ("dropped N" in tc -s). */
static uint64_t qdisc_drops(const char *dev)
{
	char line[160], out[2048];
	wf_err ignore;
	snprintf(line, sizeof(line), "tc -s qdisc show dev %s", dev);
	if (run_capture(out, sizeof(out), &ignore, line) != 0)
		return 0;
	const char *d = strstr(out, "dropped ");
	return d ? strtoull(d + 8, NULL, 10) : 0;
}

int wf_netem_counters_get(const wf_netem *ne, int node, wf_netem_counters *c, wf_err *err)
{
	char ns[64], line[160], host[24];
	static char out[16384];
	memset(c, 0, sizeof(*c));
	wf_netem_ns(ne, node, ns, sizeof(ns));
	snprintf(line, sizeof(line), "ip netns exec %s cat /proc/net/snmp /proc/net/netstat", ns);
	int rc = run_capture(out, sizeof(out), err, line);
	if (rc != 0)
		return rc;
	c->retrans = proc_field(out, "Tcp:", "RetransSegs");
	c->timeouts = proc_field(out, "TcpExt:", "TCPTimeouts");
	snprintf(host, sizeof(host), "%sh%d", ne->tag, node);
	c->drops_in = qdisc_drops(host);
	return 0;
}
