#include "serve/secrets.h"

#include "serve/sslconfig.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* The whole of a small text file (PEM, token) into *out (malloc'd). */
static int read_small_file(const char *path, const char *what, char **out, wf_err *err)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return wf_errf(err, WF_EIO, "cannot open %s %s", what, path);
	char *buf = malloc(1 << 20);
	size_t n = buf ? fread(buf, 1, (1 << 20) - 1, f) : 0;
	int toolong = buf && n == (1 << 20) - 1 && fgetc(f) != EOF;
	fclose(f);
	if (!buf)
		return wf_errf(err, WF_ENOMEM, "out of memory reading %s", path);
	if (toolong || n == 0) {
		free(buf);
		return wf_errf(err, WF_EINVAL, "%s %s is %s", what, path,
			       n ? "larger than 1 MiB" : "empty");
	}
	buf[n] = 0;
	*out = buf;
	return 0;
}

static int load_tls(wf_serve_secrets *s, const char *cert_file, const char *key_file,
		    const char *ssl_config_file, wf_err *err)
{
	if (!cert_file != !key_file)
		return wf_errf(err, WF_EINVAL,
			       "TLS needs both --ssl_cert_file and --ssl_key_file (got only %s)",
			       cert_file ? "the certificate" : "the key");
	if (ssl_config_file && cert_file)
		return wf_errf(err, WF_EINVAL,
			       "give either --ssl_config_file or --ssl_cert_file/--ssl_key_file");
	if (cert_file) {
		int rc = read_small_file(cert_file, "TLS certificate", &s->tls_cert, err);
		return rc ? rc : read_small_file(key_file, "TLS key", &s->tls_key, err);
	}
	if (!ssl_config_file)
		return 0;
	char *text = NULL;
	wf_serve_ssl_config sc;
	int rc = read_small_file(ssl_config_file, "SSL config", &text, err);
	if (rc)
		return rc;
	rc = wf_serve_ssl_config_parse(text, strlen(text), &sc, err);
	free(text);
	if (rc)
		return wf_err_wrap(err, "--ssl_config_file %s", ssl_config_file);
	int verify = sc.client_verify;
	if (!sc.server_key || !sc.server_cert || verify) {
		wf_serve_ssl_config_free(&sc);
		return wf_errf(err, verify ? WF_ENOTSUP : WF_EINVAL, "--ssl_config_file %s: %s",
			       ssl_config_file,
			       verify ? "client_verify (client certificates) is not supported"
				      : "server_key and server_cert are required");
	}
	s->tls_key = sc.server_key;
	s->tls_cert = sc.server_cert;
	free(sc.custom_ca); /* only used to verify clients */
	return 0;
}

static int load_token(wf_serve_secrets *s, const char *file, wf_err *err)
{
	int rc = read_small_file(file, "token file", &s->token, err);
	if (rc)
		return rc;
	char *t = s->token;
	t[strcspn(t, "\r\n")] = 0;
	if (strlen(t) < 16 || strspn(t, " \t") == strlen(t))
		return wf_errf(err, WF_EINVAL,
			       "token file %s: the token (its first line) must have at least 16 "
			       "characters",
			       file);
	return 0;
}

int wf_serve_secrets_load(wf_serve_secrets *s, const char *cert_file, const char *key_file,
			  const char *ssl_config_file, const char *token_file, wf_err *err)
{
	memset(s, 0, sizeof(*s));
	int rc = load_tls(s, cert_file, key_file, ssl_config_file, err);
	if (!rc && token_file)
		rc = load_token(s, token_file, err);
	if (rc)
		wf_serve_secrets_free(s);
	return rc;
}

static void wipe(char **p)
{
	if (*p)
		memset(*p, 0, strlen(*p));
	free(*p);
	*p = NULL;
}

void wf_serve_secrets_free(wf_serve_secrets *s)
{
	free(s->tls_cert);
	s->tls_cert = NULL;
	wipe(&s->tls_key);
	wipe(&s->token);
}

int wf_serve_bearer_ok(const char *token, const char *value, size_t len)
{
	if (!token || !value || len < 7 || strncasecmp(value, "Bearer ", 7) != 0)
		return 0;
	value += 7;
	len -= 7;
	size_t t = strlen(token);
	unsigned diff = len != t;
	for (size_t i = 0; i < t; i++)
		diff |= (unsigned char)token[i] ^ (unsigned char)(i < len ? value[i] : 0);
	return diff == 0;
}
