/* test_shm.c: the system shared memory registry (serve/shm.h) on real POSIX
 * shared memory objects: what a view reads and writes is the client's
 * object at the registered offset; a region unregistered while a view holds
 * it stays mapped until the view is put; bad keys, sizes, names and ranges
 * are errors that name them; an object shrunk under a registered region
 * gives WF_EIO instead of SIGBUS; the policy admits loopback clients only
 * under "local". */
#include "serve/shm.h"
#include "tests/test.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* A fresh object of n bytes (0..n-1 mod 251) under a per-process key; its fd. */
static int object(char *key, size_t cap, const char *tag, size_t n)
{
	snprintf(key, cap, "/weft_test_shm_%s_%d", tag, (int)getpid());
	shm_unlink(key);
	int fd = shm_open(key, O_RDWR | O_CREAT | O_EXCL, 0600);
	WF_CHECK(fd >= 0 && ftruncate(fd, (off_t)n) == 0);
	uint8_t *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	for (size_t i = 0; i < n; i++)
		p[i] = (uint8_t)(i % 251);
	munmap(p, n);
	return fd;
}

static void test_views_read_and_write_the_object(void)
{
	char key[64];
	int fd = object(key, sizeof(key), "rw", 8192);
	wf_serve_shm *s = wf_serve_shm_create(WF_SHM_LOCAL);
	wf_err err = {0};
	WF_CHECK_INT(wf_serve_shm_register(s, "r", key, 100, 4000, &err), 0);
	wf_serve_shm_view v;
	WF_CHECK_INT(wf_serve_shm_view_get(s, "r", 10, 50, &v, &err), 0);
	uint8_t buf[50];
	WF_CHECK_INT(wf_serve_shm_read(&v, 0, buf, 50, &err), 0);
	WF_CHECK_INT(buf[0], 110 % 251);
	WF_CHECK_INT(buf[49], 159 % 251);
	WF_CHECK_INT(wf_serve_shm_write(&v, 5, "xyz", 3, &err), 0);
	WF_CHECK_INT(wf_serve_shm_read(&v, 40, buf, 11, &err), WF_EINVAL); /* past the view */
	/* unregistered while held: still mapped, and no longer listed */
	wf_serve_shm_unregister(s, "r");
	wf_serve_shm_info *info;
	int n;
	WF_CHECK_INT(wf_serve_shm_status(s, NULL, &info, &n, &err), 0);
	WF_CHECK_INT(n, 0);
	free(info);
	WF_CHECK_INT(wf_serve_shm_read(&v, 5, buf, 3, &err), 0);
	WF_CHECK(memcmp(buf, "xyz", 3) == 0);
	wf_serve_shm_view_put(&v);
	uint8_t *p = mmap(NULL, 8192, PROT_READ, MAP_SHARED, fd, 0);
	WF_CHECK(memcmp(p + 115, "xyz", 3) == 0); /* offset 100 + view 10 + 5 */
	munmap(p, 8192);
	WF_CHECK_INT(wf_serve_shm_view_get(s, "r", 0, 1, &v, &err), WF_EINVAL);
	WF_CHECK(strstr(err.msg, "'r'") != NULL);
	close(fd);
	shm_unlink(key);
	wf_serve_shm_free(s);
}

static void test_bad_registrations_name_what_is_wrong(void)
{
	char key[64];
	int fd = object(key, sizeof(key), "bad", 4096);
	wf_serve_shm *s = wf_serve_shm_create(WF_SHM_ALL);
	wf_err err = {0};
	WF_CHECK_INT(wf_serve_shm_register(s, "a", key, 0, 4096, &err), 0);
	WF_CHECK_INT(wf_serve_shm_register(s, "a", key, 0, 16, &err), WF_EINVAL);
	WF_CHECK(strstr(err.msg, "already in manager") != NULL);
	WF_CHECK_INT(wf_serve_shm_register(s, "b", key, 4000, 200, &err), WF_EINVAL);
	WF_CHECK(strstr(err.msg, "4096 bytes") != NULL);
	WF_CHECK_INT(wf_serve_shm_register(s, "c", "/weft_no_such_object", 0, 16, &err), WF_EINVAL);
	WF_CHECK(strstr(err.msg, "/weft_no_such_object") != NULL);
	WF_CHECK_INT(wf_serve_shm_register(s, "d", "/../etc/passwd", 0, 16, &err), WF_EINVAL);
	WF_CHECK_INT(wf_serve_shm_register(s, "", key, 0, 16, &err), WF_EINVAL);
	WF_CHECK_INT(wf_serve_shm_register(s, "e", key, 0, 0, &err), WF_EINVAL);
	wf_serve_shm_view v;
	WF_CHECK_INT(wf_serve_shm_view_get(s, "a", 4000, 97, &v, &err), WF_EINVAL);
	WF_CHECK_INT(wf_serve_shm_view_get(s, "a", UINT64_MAX, 2, &v, &err), WF_EINVAL);
	WF_CHECK_INT(wf_serve_shm_view_get(NULL, "a", 0, 1, &v, &err), WF_EINVAL);
	wf_serve_shm_info *info;
	int n;
	WF_CHECK_INT(wf_serve_shm_status(s, "zz", &info, &n, &err), WF_EINVAL);
	WF_CHECK_INT(wf_serve_shm_status(s, "a", &info, &n, &err), 0);
	WF_CHECK(n == 1 && info[0].byte_size == 4096 && strcmp(info[0].key, key) == 0);
	free(info);
	wf_serve_shm_unregister(s, "never registered"); /* not an error, as in Triton */
	char name[32];
	int made = 1; /* "a" */
	for (int i = 0;
	     i < 1100 && wf_serve_shm_register(s, (snprintf(name, sizeof(name), "r%d", i), name),
					       key, 0, 64, &err) == 0;
	     i++)
		made++;
	WF_CHECK_INT(made, 1024);
	WF_CHECK(strstr(err.msg, "the limit") != NULL);
	wf_serve_shm_unregister(s, "r5");
	WF_CHECK_INT(wf_serve_shm_register(s, "again", key, 0, 64, &err), 0);
	close(fd);
	shm_unlink(key);
	wf_serve_shm_free(s); /* unmaps "a" */
}

static void test_shrunk_object_is_an_error_not_a_crash(void)
{
	char key[64];
	int fd = object(key, sizeof(key), "shrink", 3 * 4096);
	wf_serve_shm *s = wf_serve_shm_create(WF_SHM_LOCAL);
	wf_err err = {0};
	WF_CHECK_INT(wf_serve_shm_register(s, "r", key, 0, 3 * 4096, &err), 0);
	WF_CHECK_INT(ftruncate(fd, 100), 0);
	wf_serve_shm_view v;
	uint8_t buf[4096];
	WF_CHECK_INT(wf_serve_shm_view_get(s, "r", 4096, 4096, &v, &err), 0);
	WF_CHECK_INT(wf_serve_shm_read(&v, 0, buf, 4096, &err), WF_EIO);
	WF_CHECK(strstr(err.msg, "truncated") != NULL);
	WF_CHECK_INT(wf_serve_shm_write(&v, 0, buf, 16, &err), WF_EIO);
	wf_serve_shm_view_put(&v);
	WF_CHECK_INT(wf_serve_shm_view_get(s, "r", 0, 64, &v, &err), 0);
	WF_CHECK_INT(wf_serve_shm_read(&v, 0, buf, 64, &err), 0); /* still inside */
	wf_serve_shm_view_put(&v);
	close(fd);
	shm_unlink(key);
	wf_serve_shm_free(s);
}

static void test_policy(void)
{
	struct sockaddr_in lo = {.sin_family = AF_INET}, far = {.sin_family = AF_INET};
	lo.sin_addr.s_addr = htonl(0x7f000001);
	far.sin_addr.s_addr = htonl(0x0a000001);
	struct sockaddr_in6 lo6 = {.sin6_family = AF_INET6, .sin6_addr = IN6ADDR_LOOPBACK_INIT};
	WF_CHECK(wf_serve_addr_is_loopback((struct sockaddr *)&lo));
	WF_CHECK(wf_serve_addr_is_loopback((struct sockaddr *)&lo6));
	WF_CHECK(!wf_serve_addr_is_loopback((struct sockaddr *)&far));
	WF_CHECK(!wf_serve_addr_is_loopback(NULL));
	wf_serve_shm *local = wf_serve_shm_create(WF_SHM_LOCAL),
		     *all = wf_serve_shm_create(WF_SHM_ALL);
	wf_err err = {0};
	WF_CHECK_INT(wf_serve_shm_allowed(local, 1, &err), 0);
	WF_CHECK_INT(wf_serve_shm_allowed(local, 0, &err), WF_ENOTSUP);
	WF_CHECK(strstr(err.msg, "--shared_memory=local") != NULL);
	WF_CHECK_INT(wf_serve_shm_allowed(all, 0, &err), 0);
	WF_CHECK_INT(wf_serve_shm_allowed(NULL, 1, &err), WF_ENOTSUP);
	WF_CHECK(strstr(err.msg, "--shared_memory=none") != NULL);
	WF_CHECK_INT(wf_serve_shm_policy_parse("local"), WF_SHM_LOCAL);
	WF_CHECK_INT(wf_serve_shm_policy_parse("yes"), -1);
	wf_serve_shm_free(local);
	wf_serve_shm_free(all);
}

int main(void)
{
	WF_RUN(test_views_read_and_write_the_object);
	WF_RUN(test_bad_registrations_name_what_is_wrong);
	WF_RUN(test_shrunk_object_is_an_error_not_a_crash);
	WF_RUN(test_policy);
	return wf_test_summary();
}
