/* netio.c: plain-TCP plumbing (see netio.h). */
#include "worker/netio.h"

#include "common/util.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

void wf_net_put32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)(v >> 24);
	p[1] = (uint8_t)(v >> 16);
	p[2] = (uint8_t)(v >> 8);
	p[3] = (uint8_t)v;
}

uint32_t wf_net_get32(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

void wf_net_put64(uint8_t *p, uint64_t v)
{
	wf_net_put32(p, (uint32_t)(v >> 32));
	wf_net_put32(p + 4, (uint32_t)v);
}

uint64_t wf_net_get64(const uint8_t *p)
{
	return (uint64_t)wf_net_get32(p) << 32 | wf_net_get32(p + 4);
}

int wf_net_ms_left(double deadline)
{
	double left = deadline - wf_now();
	return left <= 0 ? 0 : left > 1e6 ? 1000000000 : (int)(left * 1000.0) + 1;
}

int wf_net_wait(int fd, short events, double deadline)
{
	for (;;) {
		int ms = wf_net_ms_left(deadline);
		if (ms == 0)
			return 0;
		struct pollfd p = {.fd = fd, .events = events};
		int n = poll(&p, 1, ms);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return n;
		return 1;
	}
}

int wf_net_io(int fd, void *buf, size_t n, int writing, double deadline)
{
	uint8_t *p = buf;
	while (n > 0) {
		int ready = wf_net_wait(fd, writing ? POLLOUT : POLLIN, deadline);
		if (ready <= 0) {
			if (ready == 0)
				errno = ETIMEDOUT;
			return -1;
		}
		ssize_t k = writing ? send(fd, p, n, MSG_NOSIGNAL) : recv(fd, p, n, 0);
		if (k < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK))
			continue;
		if (k < 0)
			return -1;
		if (k == 0) {
			errno = ECONNRESET;
			return -1;
		}
		p += k;
		n -= (size_t)k;
	}
	return 0;
}

int wf_net_nonblocking(int fd)
{
	int fl = fcntl(fd, F_GETFL, 0);
	return fl < 0 ? -1 : fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

int wf_net_split_hostport(const char *hp, char *host, size_t n, int *port)
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

/* A bound socket of family fam on every address, port port; -1 (errno). */
static int bind_any(int fam, int port)
{
	int one = 1, zero = 0;
	int fd = socket(fam, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -1;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	struct sockaddr_in6 a6 = {.sin6_family = AF_INET6,
				  .sin6_port = htons((uint16_t)port),
				  .sin6_addr = in6addr_any};
	struct sockaddr_in a4 = {.sin_family = AF_INET,
				 .sin_port = htons((uint16_t)port),
				 .sin_addr.s_addr = htonl(INADDR_ANY)};
	int rc;
	if (fam == AF_INET6) { /* dual stack: IPv4 peers arrive as ::ffff:a.b.c.d */
		setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));
		rc = bind(fd, (struct sockaddr *)&a6, sizeof(a6));
	} else {
		rc = bind(fd, (struct sockaddr *)&a4, sizeof(a4));
	}
	if (rc != 0) {
		int e = errno;
		close(fd);
		errno = e;
		return -1;
	}
	return fd;
}

int wf_net_listen(int port, int backlog, const char *what, wf_err *err)
{
	int fd = bind_any(AF_INET6, port);
	if (fd < 0 && errno != EADDRINUSE) /* no IPv6 in this kernel or pod */
		fd = bind_any(AF_INET, port);
	if (fd < 0 || listen(fd, backlog) != 0 || wf_net_nonblocking(fd) != 0) {
		int e = errno;
		if (fd >= 0)
			close(fd);
		/* Usually a previous process's socket still holds the port: a restart helps. */
		return wf_errf(err, WF_ETRANSIENT, "%s cannot listen on port %d: %s", what, port,
			       strerror(e));
	}
	return fd;
}

int wf_net_local_port(int fd)
{
	struct sockaddr_storage sa;
	socklen_t len = sizeof(sa);
	if (getsockname(fd, (struct sockaddr *)&sa, &len) != 0)
		return -1;
	if (sa.ss_family == AF_INET6)
		return ntohs(((struct sockaddr_in6 *)&sa)->sin6_port);
	return ntohs(((struct sockaddr_in *)&sa)->sin_port);
}

int wf_net_connect(const char *host, int port, double deadline, char *why, size_t n)
{
	char serv[16];
	snprintf(serv, sizeof(serv), "%d", port);
	struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *ai = NULL;
	int gai = getaddrinfo(host, serv, &hints, &ai);
	if (gai != 0) { /* pods come up before their DNS names do */
		snprintf(why, n, "cannot resolve %s: %s", host, gai_strerror(gai));
		return -1;
	}
	int fd = -1;
	for (struct addrinfo *a = ai; a && fd < 0; a = a->ai_next) {
		fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK,
			    a->ai_protocol);
		if (fd < 0)
			continue;
		if (connect(fd, a->ai_addr, a->ai_addrlen) != 0 && errno != EINPROGRESS)
			goto next;
		int so = 0;
		socklen_t sl = sizeof(so);
		if (wf_net_wait(fd, POLLOUT, deadline) != 1) {
			errno = ETIMEDOUT;
			goto next;
		}
		if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &so, &sl) != 0 || so != 0) {
			errno = so ? so : errno;
			goto next;
		}
		continue; /* connected */
	next:
		snprintf(why, n, "%s", strerror(errno));
		close(fd);
		fd = -1;
	}
	freeaddrinfo(ai);
	if (fd >= 0) {
		int one = 1;
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	}
	return fd;
}

void wf_net_peer_name(int fd, char *buf, size_t n)
{
	struct sockaddr_storage sa;
	socklen_t len = sizeof(sa);
	char host[NI_MAXHOST], serv[NI_MAXSERV];
	if (getpeername(fd, (struct sockaddr *)&sa, &len) == 0 &&
	    getnameinfo((const struct sockaddr *)&sa, len, host, sizeof(host), serv, sizeof(serv),
			NI_NUMERICHOST | NI_NUMERICSERV) == 0)
		snprintf(buf, n, "%s:%s", host, serv);
	else
		snprintf(buf, n, "a peer");
}
