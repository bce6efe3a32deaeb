/* shm.c: the system shared memory registry (shm.h). */
#include "serve/shm.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

struct wf_shm_region {
	wf_serve_shm_info info;
	uint8_t *map; /* [0, map_len) of the object: offset need not be page-aligned */
	size_t map_len;
	atomic_int refs; /* the registry's one, and one per view */
	wf_shm_region *next;
};

/* Regions registered at once: each is a mapping, and a process has a
 * bounded number of them (vm.max_map_count) that malloc needs too. */
#define MAX_REGIONS 1024

struct wf_serve_shm {
	pthread_mutex_t mu;
	wf_shm_region *head;
	int count;
	wf_serve_shm_policy policy;
};

/* ---- copies that survive a shrunk object ----------------------------- */

/* Where a SIGBUS of this thread returns to: set only around a copy
 * (volatile: the compiler must not drop the store around memcpy). */
static _Thread_local sigjmp_buf *volatile bus_return;

static void on_bus(int sig, siginfo_t *si, void *uc)
{
	(void)si, (void)uc;
	if (bus_return)
		siglongjmp(*bus_return, 1);
	signal(sig, SIG_DFL); /* not ours: the fault repeats and kills as before */
}

static void install_bus(void)
{
	struct sigaction sa = {.sa_sigaction = on_bus, .sa_flags = SA_SIGINFO | SA_NODEFER};
	sigemptyset(&sa.sa_mask);
	sigaction(SIGBUS, &sa, NULL);
}

int wf_serve_copy_guarded(void *dst, const void *src, size_t n)
{
	static _Thread_local int unblocked;
	if (!unblocked) { /* a fault while SIGBUS is blocked kills the process anyway */
		sigset_t bus;
		sigemptyset(&bus);
		sigaddset(&bus, SIGBUS);
		pthread_sigmask(SIG_UNBLOCK, &bus, NULL);
		unblocked = 1;
	}
	sigjmp_buf jb;
	if (sigsetjmp(jb, 0)) {
		bus_return = NULL;
		return -1;
	}
	bus_return = &jb;
	memcpy(dst, src, n);
	bus_return = NULL;
	return 0;
}

static int view_copy(const wf_serve_shm_view *v, size_t at, void *dst, const void *src, size_t n,
		     wf_err *err)
{
	if (at > v->len || n > v->len - at)
		return wf_errf(err, WF_EINVAL,
			       "%zu bytes at %zu are out of shared memory region '%s' (%zu bytes)",
			       n, at, v->region->info.name, v->len);
	if (wf_serve_copy_guarded(dst, src, n))
		return wf_errf(err, WF_EIO,
			       "shared memory region '%s' (key '%s') is shorter than registered: "
			       "the object was truncated",
			       v->region->info.name, v->region->info.key);
	return 0;
}

int wf_serve_shm_read(const wf_serve_shm_view *v, size_t at, void *dst, size_t n, wf_err *err)
{
	return view_copy(v, at, dst, v->p + at, n, err);
}

int wf_serve_shm_write(const wf_serve_shm_view *v, size_t at, const void *src, size_t n,
		       wf_err *err)
{
	return view_copy(v, at, v->p + at, src, n, err);
}

/* ---- the registry --------------------------------------------------- */

wf_serve_shm *wf_serve_shm_create(wf_serve_shm_policy policy)
{
	static pthread_once_t once = PTHREAD_ONCE_INIT;
	if (policy != WF_SHM_NONE)
		pthread_once(&once, install_bus);
	wf_serve_shm *s = calloc(1, sizeof(*s));
	if (s) {
		pthread_mutex_init(&s->mu, NULL);
		s->policy = policy;
	}
	return s;
}

static void region_put(wf_shm_region *r)
{
	if (r && atomic_fetch_sub(&r->refs, 1) == 1) {
		munmap(r->map, r->map_len);
		free(r);
	}
}

void wf_serve_shm_free(wf_serve_shm *s)
{
	if (!s)
		return;
	wf_serve_shm_unregister(s, NULL);
	pthread_mutex_destroy(&s->mu);
	free(s);
}

int wf_serve_shm_policy_parse(const char *s)
{
	static const char *const names[] = {"none", "local", "all"};
	for (int i = 0; s && i < 3; i++)
		if (strcmp(s, names[i]) == 0)
			return i;
	return -1;
}

int wf_serve_addr_is_loopback(const struct sockaddr *sa)
{
	if (sa && sa->sa_family == AF_INET)
		return ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr) >> 24 == 127;
	if (sa && sa->sa_family == AF_INET6) {
		const struct in6_addr *a = &((const struct sockaddr_in6 *)sa)->sin6_addr;
		return IN6_IS_ADDR_LOOPBACK(a) ||
		       (IN6_IS_ADDR_V4MAPPED(a) && a->s6_addr[12] == 127);
	}
	return 0;
}

int wf_serve_shm_allowed(const wf_serve_shm *s, int local, wf_err *err)
{
	if (s && (s->policy == WF_SHM_ALL || (s->policy == WF_SHM_LOCAL && local)))
		return 0;
	if (s && s->policy == WF_SHM_LOCAL)
		return wf_errf(err, WF_ENOTSUP,
			       "system shared memory is only for clients on this machine "
			       "(--shared_memory=local); this one connected from another host");
	return wf_errf(err, WF_ENOTSUP,
		       "system shared memory is off on this server (--shared_memory=none)");
}

/* The region called name; the caller holds s->mu. */
static wf_shm_region **find(wf_serve_shm *s, const char *name)
{
	wf_shm_region **p = &s->head;
	while (*p && strcmp((*p)->info.name, name) != 0)
		p = &(*p)->next;
	return p;
}

int wf_serve_shm_register(wf_serve_shm *s, const char *name, const char *key, uint64_t offset,
			  uint64_t byte_size, wf_err *err)
{
	wf_serve_shm_info in = {.offset = offset, .byte_size = byte_size};
	if (!name || !*name || strlen(name) >= sizeof(in.name))
		return wf_errf(err, WF_EINVAL, "shared memory region name must be 1 to %zu bytes",
			       sizeof(in.name) - 1);
	if (!key || !*key || strlen(key) >= sizeof(in.key) || strchr(key + 1, '/'))
		return wf_errf(err, WF_EINVAL,
			       "shared memory key \"%.200s\" is not a shm_open name (like "
			       "\"/name\", no further '/')",
			       key ? key : "");
	if (byte_size == 0 || offset > SIZE_MAX / 2 || byte_size > SIZE_MAX / 2)
		return wf_errf(err, WF_EINVAL,
			       "shared memory region '%s': byte_size must be positive and offset "
			       "and byte_size reasonable",
			       name);
	snprintf(in.name, sizeof(in.name), "%s", name);
	snprintf(in.key, sizeof(in.key), "%s", key);
	int fd = shm_open(key, O_RDWR, 0);
	if (fd < 0)
		return wf_errf(err, WF_EINVAL,
			       "Unable to open shared memory region '%s' with key '%s': %s", name,
			       key, strerror(errno));
	struct stat st;
	size_t len = (size_t)(offset + byte_size);
	int rc = 0;
	if (fstat(fd, &st) != 0 || (uint64_t)st.st_size < offset + byte_size) {
		rc = wf_errf(err, WF_EINVAL,
			     "shared memory object '%s' has %lld bytes; region '%s' needs %llu "
			     "(offset %llu + byte_size %llu)",
			     key, (long long)st.st_size, name,
			     (unsigned long long)(offset + byte_size), (unsigned long long)offset,
			     (unsigned long long)byte_size);
		close(fd);
		return rc;
	}
	void *map = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	if (map == MAP_FAILED)
		return wf_errf(err, WF_EINVAL, "cannot map shared memory '%s' (%zu bytes): %s", key,
			       len, strerror(errno));
	wf_shm_region *r = calloc(1, sizeof(*r));
	if (!r) {
		munmap(map, len);
		return wf_errf(err, WF_ENOMEM, "out of memory");
	}
	r->info = in;
	r->map = map;
	r->map_len = len;
	atomic_init(&r->refs, 1);
	pthread_mutex_lock(&s->mu);
	wf_shm_region **at = find(s, name);
	if (*at)
		rc = wf_errf(err, WF_EINVAL, "shared memory region '%s' already in manager", name);
	else if (s->count >= MAX_REGIONS)
		rc = wf_errf(err, WF_EINVAL,
			     "%d shared memory regions are registered (the limit); unregister "
			     "some first",
			     MAX_REGIONS);
	else
		*at = r, s->count++;
	pthread_mutex_unlock(&s->mu);
	if (rc)
		region_put(r);
	return rc;
}

void wf_serve_shm_unregister(wf_serve_shm *s, const char *name)
{
	wf_shm_region *gone = NULL;
	pthread_mutex_lock(&s->mu);
	if (!name || !*name) {
		gone = s->head;
		s->head = NULL;
		s->count = 0;
	} else {
		wf_shm_region **at = find(s, name);
		if (*at) {
			gone = *at;
			*at = gone->next;
			gone->next = NULL;
			s->count--;
		}
	}
	pthread_mutex_unlock(&s->mu);
	while (gone) {
		wf_shm_region *next = gone->next;
		region_put(gone);
		gone = next;
	}
}

int wf_serve_shm_status(wf_serve_shm *s, const char *name, wf_serve_shm_info **out, int *n,
			wf_err *err)
{
	*out = NULL;
	*n = 0;
	int rc = 0, cnt = 0;
	pthread_mutex_lock(&s->mu);
	for (wf_shm_region *r = s->head; r; r = r->next)
		cnt++;
	wf_serve_shm_info *a = calloc((size_t)cnt + 1, sizeof(*a));
	if (!a) {
		rc = wf_errf(err, WF_ENOMEM, "out of memory");
	} else {
		for (wf_shm_region *r = s->head; r; r = r->next)
			if (!name || !*name || strcmp(r->info.name, name) == 0)
				a[(*n)++] = r->info;
		if (name && *name && !*n)
			rc = wf_errf(err, WF_EINVAL,
				     "Unable to find system shared memory region: '%s'", name);
	}
	pthread_mutex_unlock(&s->mu);
	if (rc) {
		free(a);
		*n = 0;
	} else {
		*out = a;
	}
	return rc;
}

int wf_serve_shm_view_get(wf_serve_shm *s, const char *name, uint64_t offset, uint64_t size,
			  wf_serve_shm_view *v, wf_err *err)
{
	*v = (wf_serve_shm_view){0};
	if (!s)
		return wf_errf(
			err, WF_EINVAL,
			"shared memory region '%s': system shared memory is not available to "
			"this client (weft-serve --shared_memory)",
			name);
	int rc = 0;
	pthread_mutex_lock(&s->mu);
	wf_shm_region *r = *find(s, name);
	if (!r)
		rc = wf_errf(err, WF_EINVAL, "Unable to find system shared memory region: '%s'",
			     name);
	else if (offset > r->info.byte_size || size > r->info.byte_size - offset)
		rc = wf_errf(err, WF_EINVAL,
			     "%llu bytes at offset %llu are out of shared memory region '%s' "
			     "(%llu bytes)",
			     (unsigned long long)size, (unsigned long long)offset, name,
			     (unsigned long long)r->info.byte_size);
	else
		atomic_fetch_add(&r->refs, 1);
	pthread_mutex_unlock(&s->mu);
	if (!rc) {
		v->region = r;
		v->p = r->map + r->info.offset + offset;
		v->len = (size_t)size;
	}
	return rc;
}

void wf_serve_shm_view_put(wf_serve_shm_view *v)
{
	if (v && v->region) {
		region_put(v->region);
		*v = (wf_serve_shm_view){0};
	}
}

int wf_serve_shm_copy_out(wf_serve_shm *s, const char *name, uint64_t offset, uint64_t size,
			  uint8_t **out, wf_err *err)
{
	*out = NULL;
	wf_serve_shm_view v;
	int rc = wf_serve_shm_view_get(s, name, offset, size, &v, err);
	if (!rc && !(*out = malloc((size_t)size)))
		rc = wf_errf(err, WF_ENOMEM, "out of memory");
	if (!rc && (rc = wf_serve_shm_read(&v, 0, *out, (size_t)size, err)) != 0) {
		free(*out);
		*out = NULL;
	}
	wf_serve_shm_view_put(&v);
	return rc;
}

int wf_serve_shm_copy_in(wf_serve_shm *s, const char *name, uint64_t offset, uint64_t size,
			 const void *src, size_t n, const char *what, wf_err *err)
{
	if (n > size)
		return wf_errf(err, WF_EINVAL,
			       "output '%s' is %zu bytes; shared_memory_byte_size offers %llu",
			       what, n, (unsigned long long)size);
	wf_serve_shm_view v;
	int rc = wf_serve_shm_view_get(s, name, offset, size, &v, err);
	if (!rc)
		rc = wf_serve_shm_write(&v, 0, src, n, err);
	wf_serve_shm_view_put(&v);
	return rc;
}
