/* auth.c: CURVE key files, key generation, the servers' ZAP handler and
 * socket monitors. */
#include "ps/auth.h"

#include "common/log.h"
#include "common/util.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zmq.h>

#define ZAP_ENDPOINT "inproc://zeromq.zap.01"

int wf_ps_curve_available(void)
{
	return zmq_has("curve") ? 1 : 0;
}

int wf_ps_curve_check(wf_err *err)
{
	if (wf_ps_curve_available())
		return 0;
	int major, minor, patch;
	zmq_version(&major, &minor, &patch);
	return wf_errf(err, WF_ENOTSUP,
		       "the linked libzmq %d.%d.%d has no CURVE security (zmq_has(\"curve\") is "
		       "0): install a libzmq built with libsodium (Debian: libzmq5), or run "
		       "without encryption with --insecure",
		       major, minor, patch);
}

/* ---- key files ------------------------------------------------------------ */

static const char *const key_names[4] = {"server.pub", "server.key", "client.pub", "client.key"};

static int valid_z85(const char *s)
{
	static const char alphabet[] = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVW"
				       "XYZ.-:+=^!/*?&<>()[]{}@%$#";
	if (strlen(s) != WF_PS_KEY_Z85 - 1)
		return 0;
	for (const char *p = s; *p; p++)
		if (!strchr(alphabet, *p))
			return 0;
	return 1;
}

int wf_ps_key_parse(const char *text, size_t n, char out[WF_PS_KEY_Z85])
{
	size_t i = 0;
	while (i < n) {
		size_t e = i;
		while (e < n && text[e] != '\n' && text[e] != '\r')
			e++;
		size_t len = e - i;
		if (len && text[i] != '#') {
			char line[WF_PS_KEY_Z85];
			if (len != WF_PS_KEY_Z85 - 1)
				return -1;
			memcpy(line, text + i, len);
			line[len] = '\0';
			if (!valid_z85(line))
				return -1;
			memcpy(out, line, WF_PS_KEY_Z85);
			return 0;
		}
		i = e + 1;
	}
	return -1;
}

/* One key from path into out (WF_PS_KEY_Z85 bytes). */
static int read_key(const char *path, int secret, char *out, wf_err *err)
{
	char *data = NULL;
	size_t len = 0;
	struct stat st;
	if (stat(path, &st) != 0)
		return wf_errf(err, WF_EINVAL,
			       "cluster.key_dir: cannot read key file %s: %s (make the keys with "
			       "`weft keygen --out DIR`)",
			       path, strerror(errno));
	if (!S_ISREG(st.st_mode))
		return wf_errf(err, WF_EINVAL, "cluster.key_dir: %s is not a regular file", path);
	if (st.st_size > 4096)
		return wf_errf(
			err, WF_EINVAL,
			"cluster.key_dir: %s has %lld bytes: not a key file (one 40-character "
			"Z85 line)",
			path, (long long)st.st_size);
	/* group read is what a Kubernetes Secret mounted for the pod's fsGroup
	 * needs; others never */
	if (secret && (st.st_mode & 007))
		wf_warn("cluster.key_dir: secret key file %s can be read by others (mode %03o): "
			"chmod 600 it",
			path, (unsigned)(st.st_mode & 0777));
	if (wf_read_file(path, &data, &len) != 0)
		return wf_errf(err, WF_EINVAL, "cluster.key_dir: cannot read %s: %s", path,
			       strerror(errno));
	int rc = wf_ps_key_parse(data, len, out);
	free(data);
	if (rc)
		rc = wf_errf(err, WF_EFORMAT,
			     "cluster.key_dir: %s holds no key: expected one line of 40 Z85 "
			     "characters (lines starting with # are comments)",
			     path);
	return rc;
}

/* "fd:N": the four keys, one line each in key_names order, in the file
 * open on descriptor N (an inherited memfd: `weft launch` keeps its run's
 * keys off the disk). */
static int read_keys_fd(const char *spec, char *dst[4], wf_err *err)
{
	char *end;
	long fd = strtol(spec + 3, &end, 10);
	char buf[1024];
	ssize_t n = -1;
	if (end != spec + 3 && !*end && fd >= 0 && fd < (1 << 20))
		n = pread((int)fd, buf, sizeof(buf) - 1, 0);
	if (n <= 0)
		return wf_errf(err, WF_EINVAL,
			       "cluster.key_dir %s: no keys on that descriptor (it is meant for "
			       "the processes `weft launch` starts)",
			       spec);
	buf[n] = '\0';
	size_t at = 0;
	for (int i = 0; i < 4; i++) {
		size_t e = at;
		while (e < (size_t)n && buf[e] != '\n')
			e++;
		if (e == at || wf_ps_key_parse(buf + at, e - at, dst[i]) != 0) {
			memset(buf, 0, sizeof(buf));
			return wf_errf(err, WF_EFORMAT, "cluster.key_dir %s: line %d is not a key",
				       spec, i + 1);
		}
		at = e + 1;
	}
	memset(buf, 0, sizeof(buf));
	return 0;
}

int wf_ps_keys_load(wf_ps_keys *k, const char *dir, wf_err *err)
{
	char *dst[4] = {k->server_public, k->server_secret, k->client_public, k->client_secret};
	char path[4200];
	memset(k, 0, sizeof(*k));
	if (!dir || !*dir)
		return wf_errf(err, WF_EINVAL, "cluster.key_dir: empty");
	if (!strncmp(dir, "fd:", 3)) {
		int rc = read_keys_fd(dir, dst, err);
		if (rc)
			return rc;
	}
	for (int i = 0; i < 4 && strncmp(dir, "fd:", 3); i++) {
		snprintf(path, sizeof(path), "%s/%s", dir, key_names[i]);
		int rc = read_key(path, i % 2, dst[i], err);
		if (rc)
			return rc;
	}
	/* each secret must belong to its public key */
	for (int i = 0; i < 4; i += 2) {
		char pub[WF_PS_KEY_Z85];
		if (zmq_curve_public(pub, dst[i + 1]) != 0 || strcmp(pub, dst[i]) != 0)
			return wf_errf(
				err, WF_EINVAL,
				"cluster.key_dir: %s/%s is not the secret key of %s/%s (make "
				"a fresh set with `weft keygen --out DIR`)",
				dir, key_names[i + 1], dir, key_names[i]);
	}
	return 0;
}

static int write_key(const char *dir, const char *name, const char *key, int secret, int overwrite,
		     wf_err *err)
{
	char path[4200];
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	if (overwrite)
		unlink(path);
	int fd = open(path, O_WRONLY | O_CREAT | O_EXCL, secret ? 0600 : 0644);
	if (fd < 0)
		return wf_errf(err, errno == EEXIST ? WF_EINVAL : WF_EIO,
			       "keygen: cannot create %s: %s%s", path, strerror(errno),
			       errno == EEXIST ? " (keys exist already: pass --force to replace "
						 "them)"
					       : "");
	char text[256];
	int n = snprintf(text, sizeof(text), "# weft CURVE %s key (Z85)%s\n%s\n",
			 secret ? "secret" : "public", secret ? ": keep it private" : "", key);
	int rc = 0;
	if (write(fd, text, (size_t)n) != n || fsync(fd) != 0)
		rc = wf_errf(err, WF_EIO, "keygen: cannot write %s: %s", path, strerror(errno));
	close(fd);
	return rc;
}

int wf_ps_keys_new(wf_ps_keys *k, wf_err *err)
{
	int rc = wf_ps_curve_check(err);
	if (rc)
		return rc;
	if (zmq_curve_keypair(k->server_public, k->server_secret) ||
	    zmq_curve_keypair(k->client_public, k->client_secret))
		return wf_errf(err, WF_EINTERNAL, "zmq_curve_keypair: %s",
			       zmq_strerror(zmq_errno()));
	return 0;
}

int wf_ps_keys_generate(const char *dir, int overwrite, wf_err *err)
{
	char keys[4][WF_PS_KEY_Z85];
	int rc = wf_ps_curve_check(err);
	if (rc)
		return rc;
	if (wf_mkdirs(dir) != 0)
		return wf_errf(err, WF_EIO, "keygen: cannot create directory %s: %s", dir,
			       strerror(errno));
	for (int i = 0; i < 4; i += 2)
		if (zmq_curve_keypair(keys[i], keys[i + 1]) != 0)
			return wf_errf(err, WF_EINTERNAL, "keygen: zmq_curve_keypair: %s",
				       zmq_strerror(zmq_errno()));
	for (int i = 0; i < 4 && !rc; i++)
		rc = write_key(dir, key_names[i], keys[i], i % 2, overwrite, err);
	memset(keys, 0, sizeof(keys));
	return rc;
}

/* ---- socket options --------------------------------------------------------- */

int wf_ps_curve_server(void *sock, const wf_ps_keys *k, wf_err *err)
{
	int one = 1;
	if (zmq_setsockopt(sock, ZMQ_CURVE_SERVER, &one, sizeof(one)) ||
	    zmq_setsockopt(sock, ZMQ_CURVE_SECRETKEY, k->server_secret, WF_PS_KEY_Z85) ||
	    zmq_setsockopt(sock, ZMQ_ZAP_DOMAIN, "weft", 4))
		return wf_errf(err, WF_EINTERNAL, "ps: CURVE server options: %s",
			       zmq_strerror(zmq_errno()));
	return 0;
}

int wf_ps_curve_client(void *sock, const wf_ps_keys *k, wf_err *err)
{
	if (zmq_setsockopt(sock, ZMQ_CURVE_SERVERKEY, k->server_public, WF_PS_KEY_Z85) ||
	    zmq_setsockopt(sock, ZMQ_CURVE_PUBLICKEY, k->client_public, WF_PS_KEY_Z85) ||
	    zmq_setsockopt(sock, ZMQ_CURVE_SECRETKEY, k->client_secret, WF_PS_KEY_Z85))
		return wf_errf(err, WF_EINTERNAL, "ps client: CURVE options: %s",
			       zmq_strerror(zmq_errno()));
	return 0;
}

/* ---- ZAP handler (RFC 27) ------------------------------------------------------- */

struct wf_ps_zap {
	void *sock;
	pthread_t thread;
	atomic_int stop;
	atomic_uint_fast64_t refused;
	uint8_t client_key[32];
	int index;
};

static void zap_reply(void *sock, const zmq_msg_t *reqid, const char *code, const char *text)
{
	zmq_send(sock, "1.0", 3, ZMQ_SNDMORE);
	zmq_send(sock, zmq_msg_data((zmq_msg_t *)reqid), zmq_msg_size((zmq_msg_t *)reqid),
		 ZMQ_SNDMORE);
	zmq_send(sock, code, strlen(code), ZMQ_SNDMORE);
	zmq_send(sock, text, strlen(text), ZMQ_SNDMORE);
	zmq_send(sock, "", 0, ZMQ_SNDMORE); /* user id */
	zmq_send(sock, "", 0, 0);	    /* metadata */
}

/* One request: frames version, request id, domain, address, routing id,
 * mechanism, credentials... Admit CURVE with the client key only. */
static void zap_handle(wf_ps_zap *z)
{
	zmq_msg_t f[8];
	int n = 0, more = 1;
	while (more) {
		zmq_msg_t tmp, *m = n < 8 ? &f[n] : &tmp;
		zmq_msg_init(m);
		if (zmq_msg_recv(m, z->sock, 0) < 0) {
			zmq_msg_close(m);
			goto cleanup;
		}
		more = zmq_msg_more(m);
		if (m == &tmp)
			zmq_msg_close(m);
		else
			n++;
	}
	if (n < 2) { /* cannot even echo a request id: answer something REP accepts */
		zmq_send(z->sock, "", 0, 0);
		goto cleanup;
	}
	int ok = n >= 7 && zmq_msg_size(&f[0]) == 3 && !memcmp(zmq_msg_data(&f[0]), "1.0", 3) &&
		 zmq_msg_size(&f[5]) == 5 && !memcmp(zmq_msg_data(&f[5]), "CURVE", 5) &&
		 zmq_msg_size(&f[6]) == 32 && !memcmp(zmq_msg_data(&f[6]), z->client_key, 32);
	if (ok) {
		zap_reply(z->sock, &f[1], "200", "OK");
	} else {
		uint64_t k = atomic_fetch_add(&z->refused, 1) + 1;
		char addr[64] = "?";
		if (n > 3) {
			size_t len = zmq_msg_size(&f[3]);
			len = len < sizeof(addr) - 1 ? len : sizeof(addr) - 1;
			memcpy(addr, zmq_msg_data(&f[3]), len);
			addr[len] = '\0';
		}
		if (k <= 10 || !(k & (k - 1)))
			wf_warn("ps %d: refused a connection from %s: its CURVE key is not the "
				"cluster's client key (%llu refused so far)",
				z->index, addr, (unsigned long long)k);
		zap_reply(z->sock, &f[1], "400", "key not admitted");
	}
cleanup:
	for (int i = 0; i < n; i++)
		zmq_msg_close(&f[i]);
}

static void *zap_main(void *arg)
{
	wf_ps_zap *z = arg;
	while (!atomic_load(&z->stop)) {
		zmq_pollitem_t item = {.socket = z->sock, .events = ZMQ_POLLIN};
		int r = zmq_poll(&item, 1, 100);
		if (r < 0 && zmq_errno() == ETERM)
			break;
		if (r > 0)
			zap_handle(z);
	}
	return NULL;
}

int wf_ps_zap_start(wf_ps_zap **out, void *zctx, const wf_ps_keys *k, int server_index, wf_err *err)
{
	*out = NULL;
	wf_ps_zap *z = calloc(1, sizeof(*z));
	int linger = 0;
	if (!z)
		return wf_errf(err, WF_ENOMEM, "ps: out of memory");
	z->index = server_index;
	if (!zmq_z85_decode(z->client_key, k->client_public)) {
		free(z);
		return wf_errf(err, WF_EINVAL, "ps: the client public key is not Z85");
	}
	if (!(z->sock = zmq_socket(zctx, ZMQ_REP)) ||
	    zmq_setsockopt(z->sock, ZMQ_LINGER, &linger, sizeof(linger)) ||
	    zmq_bind(z->sock, ZAP_ENDPOINT)) {
		int rc = wf_errf(err, WF_EINTERNAL, "ps: ZAP handler at %s: %s", ZAP_ENDPOINT,
				 zmq_strerror(zmq_errno()));
		if (z->sock)
			zmq_close(z->sock);
		free(z);
		return rc;
	}
	if (pthread_create(&z->thread, NULL, zap_main, z)) {
		zmq_close(z->sock);
		free(z);
		return wf_errf(err, WF_EINTERNAL, "ps: cannot start the ZAP handler thread");
	}
	*out = z;
	return 0;
}

uint64_t wf_ps_zap_refused(const wf_ps_zap *z)
{
	return z ? atomic_load(&((wf_ps_zap *)z)->refused) : 0;
}

void wf_ps_zap_stop(wf_ps_zap *z)
{
	if (!z)
		return;
	atomic_store(&z->stop, 1);
	pthread_join(z->thread, NULL);
	zmq_close(z->sock);
	memset(z->client_key, 0, sizeof(z->client_key));
	free(z);
}

void *wf_ps_monitor_open(void *zctx, void *sock, int events)
{
	char addr[64];
	int linger = 0;
	snprintf(addr, sizeof(addr), "inproc://wf-ps-monitor-%p", sock);
	if (zmq_socket_monitor(sock, addr, events) != 0)
		return NULL;
	void *mon = zmq_socket(zctx, ZMQ_PAIR);
	if (mon &&
	    (zmq_setsockopt(mon, ZMQ_LINGER, &linger, sizeof(linger)) || zmq_connect(mon, addr))) {
		zmq_close(mon);
		mon = NULL;
	}
	if (!mon)
		zmq_socket_monitor(sock, NULL, 0);
	return mon;
}

int wf_ps_monitor_next(void *mon, uint16_t *event, uint32_t *value)
{
	zmq_msg_t ev, where;
	int got = 0;
	zmq_msg_init(&ev);
	zmq_msg_init(&where);
	/* two frames: u16 event and u32 value, then the endpoint */
	while (!got && zmq_msg_recv(&ev, mon, ZMQ_DONTWAIT) >= 0) {
		if (zmq_msg_more(&ev))
			zmq_msg_recv(&where, mon, 0);
		if (zmq_msg_size(&ev) < 6)
			continue;
		const uint8_t *b = zmq_msg_data(&ev);
		memcpy(event, b, 2);
		memcpy(value, b + 2, 4);
		got = 1;
	}
	zmq_msg_close(&ev);
	zmq_msg_close(&where);
	return got;
}
