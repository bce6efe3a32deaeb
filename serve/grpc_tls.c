#include "serve/grpc_tls.h"

#include <errno.h>
#include <gnutls/gnutls.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct wf_tls_server {
	gnutls_certificate_credentials_t cred;
};

struct wf_tls_conn {
	gnutls_session_t s;
	int again; /* a send returned EAGAIN: repeat it with NULL data */
};

int wf_tls_server_create(wf_tls_server **out, const char *cert_pem, const char *key_pem,
			 wf_err *err)
{
	*out = NULL;
	wf_tls_server *t = calloc(1, sizeof(*t));
	if (!t || gnutls_certificate_allocate_credentials(&t->cred) != GNUTLS_E_SUCCESS) {
		free(t);
		return wf_errf(err, WF_ENOMEM, "gRPC TLS: out of memory");
	}
	gnutls_datum_t cert = {(unsigned char *)cert_pem, (unsigned)strlen(cert_pem)};
	gnutls_datum_t key = {(unsigned char *)key_pem, (unsigned)strlen(key_pem)};
	int r = gnutls_certificate_set_x509_key_mem(t->cred, &cert, &key, GNUTLS_X509_FMT_PEM);
	if (r < 0) {
		wf_tls_server_free(t);
		return wf_errf(err, WF_EINVAL, "gRPC TLS: the certificate and key: %s",
			       gnutls_strerror(r));
	}
	*out = t;
	return 0;
}

void wf_tls_server_free(wf_tls_server *t)
{
	if (!t)
		return;
	gnutls_certificate_free_credentials(t->cred);
	free(t);
}

wf_tls_conn *wf_tls_conn_new(wf_tls_server *t, int fd)
{
	wf_tls_conn *c = calloc(1, sizeof(*c));
	if (!c)
		return NULL;
	if (gnutls_init(&c->s, GNUTLS_SERVER | GNUTLS_NONBLOCK) != GNUTLS_E_SUCCESS) {
		free(c);
		return NULL;
	}
	gnutls_datum_t h2 = {(unsigned char *)"h2", 2};
	if (gnutls_set_default_priority(c->s) != GNUTLS_E_SUCCESS ||
	    gnutls_credentials_set(c->s, GNUTLS_CRD_CERTIFICATE, t->cred) != GNUTLS_E_SUCCESS ||
	    gnutls_alpn_set_protocols(c->s, &h2, 1, GNUTLS_ALPN_SERVER_PRECEDENCE) !=
		    GNUTLS_E_SUCCESS) {
		wf_tls_conn_free(c);
		return NULL;
	}
	gnutls_certificate_server_set_request(c->s, GNUTLS_CERT_IGNORE);
	gnutls_transport_set_int(c->s, fd);
	gnutls_handshake_set_timeout(c->s, 0); /* the event loop's sweep bounds it */
	return c;
}

int wf_tls_handshake(wf_tls_conn *c, int *want_write, char *why, size_t cap)
{
	*want_write = 0;
	int r = gnutls_handshake(c->s);
	if (r == GNUTLS_E_AGAIN || r == GNUTLS_E_INTERRUPTED) {
		*want_write = gnutls_record_get_direction(c->s) == 1;
		return 0;
	}
	if (r < 0) {
		snprintf(why, cap, "TLS handshake: %s", gnutls_strerror(r));
		return -1;
	}
	gnutls_datum_t p = {0};
	if (gnutls_alpn_get_selected_protocol(c->s, &p) != GNUTLS_E_SUCCESS || p.size != 2 ||
	    memcmp(p.data, "h2", 2) != 0) {
		snprintf(why, cap, "TLS: the client did not offer ALPN \"h2\" (gRPC needs it)");
		return -1;
	}
	return 1;
}

static ssize_t result(ssize_t r)
{
	if (r >= 0)
		return r;
	errno = r == GNUTLS_E_AGAIN || r == GNUTLS_E_INTERRUPTED ? EAGAIN : EPIPE;
	return -1;
}

ssize_t wf_tls_recv(wf_tls_conn *c, void *buf, size_t n)
{
	ssize_t r = gnutls_record_recv(c->s, buf, n);
	/* a client that closes without close_notify: an end like any other */
	if (r == GNUTLS_E_PREMATURE_TERMINATION)
		return 0;
	return result(r);
}

ssize_t wf_tls_send(wf_tls_conn *c, const void *buf, size_t n)
{
	ssize_t r = c->again ? gnutls_record_send(c->s, NULL, 0) : gnutls_record_send(c->s, buf, n);
	c->again = r == GNUTLS_E_AGAIN || r == GNUTLS_E_INTERRUPTED;
	return result(r);
}

size_t wf_tls_pending(wf_tls_conn *c)
{
	return gnutls_record_check_pending(c->s);
}

void wf_tls_conn_free(wf_tls_conn *c)
{
	if (!c)
		return;
	gnutls_deinit(c->s);
	free(c);
}
