/* secrets.h: weft-serve's TLS key pair and bearer token, read once at start
 * from --ssl_cert_file/--ssl_key_file or TF Serving's --ssl_config_file and
 * --auth_token_file, then handed to the HTTP server and both gRPC servers
 * (the same certificate and token guard every port). */
#ifndef WF_SERVE_SECRETS_H
#define WF_SERVE_SECRETS_H

#include "common/error.h"

#include <stddef.h>

typedef struct wf_serve_secrets {
	char *tls_cert; /* PEM text, or NULL: no TLS */
	char *tls_key;	/* PEM text (with tls_cert) */
	char *token;	/* bearer token (the token file's first line), or NULL */
} wf_serve_secrets;

/* Read the files that are given (NULL: not given); errors name the flag and
 * file. On failure nothing is left allocated. */
int wf_serve_secrets_load(wf_serve_secrets *s, const char *cert_file, const char *key_file,
			  const char *ssl_config_file, const char *token_file, wf_err *err);
/* 1 when value[len] is "Bearer <token>" (the scheme in any case), in time
 * that depends on the token's length only; 0 without a token. */
int wf_serve_bearer_ok(const char *token, const char *value, size_t len);
/* Wipe and free. */
void wf_serve_secrets_free(wf_serve_secrets *s);

#endif
