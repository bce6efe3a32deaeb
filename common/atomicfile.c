/* atomicfile.c: temporary name, fsync, rename, directory fsync. */
#include "common/atomicfile.h"

#include "common/util.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

int wf_atomic_tmp(const char *path, char *tmp, size_t n, wf_err *err)
{
	int len = snprintf(tmp, n, "%s.tmp-%d", path, (int)getpid());
	if (len < 0 || (size_t)len >= n)
		return wf_errf(err, WF_EINVAL, "%s: path too long", path);
	return 0;
}

int wf_fsync_parent(const char *path)
{
	char buf[PATH_MAX];
	if (snprintf(buf, sizeof(buf), "%s", path) >= (int)sizeof(buf)) {
		errno = ENAMETOOLONG;
		return WF_EIO;
	}
	return wf_fsync_path(dirname(buf));
}

void wf_atomic_abort(const char *tmp)
{
	if (tmp && tmp[0])
		unlink(tmp);
}

int wf_atomic_commit(const char *tmp, const char *path, wf_err *err)
{
	if (wf_fsync_path(tmp) != 0) {
		int e = errno;
		wf_atomic_abort(tmp);
		return wf_errf(err, WF_EIO, "%s: fsync of %s failed: %s", path, tmp, strerror(e));
	}
	if (rename(tmp, path) != 0) {
		int e = errno;
		wf_atomic_abort(tmp);
		return wf_errf(err, WF_EIO, "%s: cannot rename %s to it: %s", path, tmp,
			       strerror(e));
	}
	if (wf_fsync_parent(path) != 0)
		return wf_errf(err, WF_EIO, "%s: fsync of its directory failed: %s", path,
			       strerror(errno));
	return 0;
}

int wf_atomic_write(const char *path, const void *data, size_t n, wf_err *err)
{
	char tmp[PATH_MAX];
	int rc = wf_atomic_tmp(path, tmp, sizeof(tmp), err);
	if (rc)
		return rc;
	int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0)
		return wf_errf(err, WF_EIO, "%s: cannot create %s: %s", path, tmp, strerror(errno));
	const char *p = data;
	while (n > 0) {
		ssize_t w = write(fd, p, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0) {
			int e = w < 0 ? errno : EIO;
			close(fd);
			wf_atomic_abort(tmp);
			return wf_errf(err, WF_EIO, "%s: writing %s: %s", path, tmp, strerror(e));
		}
		p += w;
		n -= (size_t)w;
	}
	if (close(fd) != 0) {
		int e = errno;
		wf_atomic_abort(tmp);
		return wf_errf(err, WF_EIO, "%s: writing %s: %s", path, tmp, strerror(e));
	}
	return wf_atomic_commit(tmp, path, err);
}
