#include "common/events.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <unistd.h>

static pthread_mutex_t ev_lock = PTHREAD_MUTEX_INITIALIZER;
static int ev_fd = -1;
static int ev_failed;
static char ev_who[64];

int wf_events_open(const char *path, const char *who, wf_err *err)
{
	wf_events_close();
	if (!path || !path[0])
		return 0;
	int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
	if (fd < 0)
		return wf_errf(err, WF_EIO, "log.events: cannot open %s: %s", path,
			       strerror(errno));
	pthread_mutex_lock(&ev_lock);
	ev_fd = fd;
	ev_failed = 0;
	snprintf(ev_who, sizeof(ev_who), "%s", who ? who : "");
	pthread_mutex_unlock(&ev_lock);
	return 0;
}

void wf_event(const char *name, json_t *fields)
{
	if (ev_fd < 0) {
		json_decref(fields);
		return;
	}
	struct timeval tv;
	gettimeofday(&tv, NULL);
	json_t *o = json_object();
	json_object_set_new(o, "time", json_real((double)tv.tv_sec + tv.tv_usec / 1e6));
	pthread_mutex_lock(&ev_lock);
	json_object_set_new(o, "who", json_string(ev_who));
	pthread_mutex_unlock(&ev_lock);
	json_object_set_new(o, "pid", json_integer((json_int_t)getpid()));
	json_object_set_new(o, "event", json_string(name));
	if (json_is_object(fields))
		json_object_update(o, fields);
	json_decref(fields);
	char *line = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(13));
	json_decref(o);
	if (!line)
		return;
	size_t n = strlen(line);
	line[n] = '\n'; /* json_dumps's terminator becomes the newline */
	pthread_mutex_lock(&ev_lock);
	if (ev_fd >= 0 && write(ev_fd, line, n + 1) != (ssize_t)(n + 1) && !ev_failed) {
		ev_failed = 1;
		fprintf(stderr, "warning: log.events: cannot write an event: %s\n",
			strerror(errno));
	}
	pthread_mutex_unlock(&ev_lock);
	free(line);
}

void wf_events_close(void)
{
	pthread_mutex_lock(&ev_lock);
	if (ev_fd >= 0)
		close(ev_fd);
	ev_fd = -1;
	pthread_mutex_unlock(&ev_lock);
}
