/* repo_internal.h: what the files of the model repository (serve/repo*.c)
 * share: the repository, model and version records, and the helpers one file
 * defines and another calls (not an API: only serve/repo*.c include it). */
#ifndef WF_SERVE_REPO_INTERNAL_H
#define WF_SERVE_REPO_INTERNAL_H

#include "serve/repo.h"

#include "common/log.h"
#include "common/util.h"

#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

/* ---- the repository ---------------------------------------------------- */

enum { VS_LOADING, VS_AVAILABLE, VS_END };
static const char *const vs_names[] = {"LOADING", "AVAILABLE", "END"};

/* A version the repository knows of. */
typedef struct vrec {
	long version;
	int state;
	wf_serve_version *v; /* AVAILABLE: the repository's reference */
	char error[1024];    /* END after a failed load: why */
	int failed;
	long long stamp; /* mtime and size of the file that failed */
	int stale;	 /* AVAILABLE under an older configuration: load again */
} vrec;

typedef struct model_ent {
	wf_serve_model_config cfg;
	int active; /* to be served */
	vrec *vs;
	int nvs, cap;
	char note[9000]; /* the last "skipped" log line (logged once) */
	int kept;	 /* versions its policy keeps that its last sync has loaded */
} model_ent;

struct wf_serve_repo {
	wf_serve_repo_opts o;
	char *device, *config_file, *repository;
	pthread_mutex_t mu;	 /* models, versions, states */
	pthread_mutex_t load_mu; /* one loader at a time: the poller or the load API */
	pthread_cond_t wake;
	pthread_t poller;
	int poller_started;
	int stop;
	model_ent **models;
	int nmodels, cap;
	long swaps;
	long scans; /* poller passes completed */
	long load_failures;
	long long config_stamp; /* file_stamp of the config file last read */
};

typedef struct found {
	long version;
	long long stamp; /* model.h5's mtime and size; 0: no model.h5 */
} found;

/* Shared between the serve/repo*.c files (defined where named). */
model_ent *find_model(wf_serve_repo *r, const char *name);
vrec *find_vrec(model_ent *m, long version);
vrec *get_vrec(model_ent *m, long version);
long long file_stamp(const char *path);
void unload_vrec(model_ent *m, vrec *x);
/* Load what m's policy and files ask for (load_mu held); with unload, also
 * drop the versions they no longer keep. */
void sync_model(wf_serve_repo *r, model_ent *m, int unload);
void scan_repository(wf_serve_repo *r, int activate_all);

#endif
