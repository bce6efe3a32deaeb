/* sslconfig.h: TF Serving's --ssl_config_file, an SSLConfig message in
 * protobuf text format: server_key and server_cert (PEM text), custom_ca and
 * client_verify. Strings may be split into adjacent literals and use C
 * escapes (\n, \", \\, octal, \x); raw newlines inside a string are also
 * taken, as PEM pasted between quotes has them. */
#ifndef WF_SERVE_SSLCONFIG_H
#define WF_SERVE_SSLCONFIG_H

#include "common/error.h"

#include <stddef.h>

typedef struct wf_serve_ssl_config {
	char *server_key;  /* PEM, malloc'd, or NULL */
	char *server_cert; /* PEM, malloc'd, or NULL */
	char *custom_ca;   /* PEM, malloc'd, or NULL */
	int client_verify;
} wf_serve_ssl_config;

/* Parse text[0..len); errors name the field or line. Pure, thread-safe. */
int wf_serve_ssl_config_parse(const char *text, size_t len, wf_serve_ssl_config *out, wf_err *err);
void wf_serve_ssl_config_free(wf_serve_ssl_config *c);

#endif
