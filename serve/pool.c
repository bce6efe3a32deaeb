/* pool.c: the handler threads both transports run their jobs on. */
#include "serve/pool.h"

#include "common/cpus.h"

#include <stdlib.h>

static wf_serve_job *pop(wf_serve_pool *p)
{
	wf_serve_job *j = p->head;
	if (!j)
		return NULL;
	p->head = j->next;
	if (!p->head)
		p->tail = NULL;
	p->queued--;
	j->next = NULL;
	return j;
}

static void *thread_main(void *arg)
{
	wf_serve_pool *p = arg;
	wf_cpus_io_thread(p->o.name);
	pthread_mutex_lock(&p->mu);
	for (;;) {
		p->idle++;
		while (!p->head && !p->stop)
			pthread_cond_wait(&p->more, &p->mu);
		p->idle--;
		wf_serve_job *j = p->stop && !p->o.drain ? NULL : pop(p);
		if (!j)
			break;
		pthread_mutex_unlock(&p->mu);
		p->o.run(p->o.ctx, j);
		pthread_mutex_lock(&p->mu);
	}
	pthread_mutex_unlock(&p->mu);
	return NULL;
}

/* With mu held: one more thread unless stopping or at o.threads. */
static int start_thread(wf_serve_pool *p)
{
	pthread_attr_t attr;
	int rc = -1;
	if (p->stop || p->nthreads >= p->o.threads || pthread_attr_init(&attr))
		return -1;
	if (p->o.stack)
		pthread_attr_setstacksize(&attr, p->o.stack);
	if (pthread_create(&p->threads[p->nthreads], &attr, thread_main, p) == 0) {
		p->nthreads++;
		rc = 0;
	}
	pthread_attr_destroy(&attr);
	return rc;
}

int wf_serve_pool_init(wf_serve_pool *p, const wf_serve_pool_opts *o, wf_err *err)
{
	*p = (wf_serve_pool){.o = *o};
	pthread_mutex_init(&p->mu, NULL);
	pthread_cond_init(&p->more, NULL);
	if (o->threads > 0 && !(p->threads = calloc((size_t)o->threads, sizeof(*p->threads))))
		return wf_errf(err, WF_ENOMEM, "out of memory");
	pthread_mutex_lock(&p->mu);
	while (p->nthreads < o->start && start_thread(p) == 0)
		;
	int started = p->nthreads;
	pthread_mutex_unlock(&p->mu);
	if (started < o->start)
		return wf_errf(err, WF_EINTERNAL, "cannot start %s thread %d", o->name, started);
	return 0;
}

int wf_serve_pool_push(wf_serve_pool *p, wf_serve_job *j, void (*admitted)(wf_serve_job *j))
{
	pthread_mutex_lock(&p->mu);
	int rc = p->stop					     ? WF_ESTOPPED
		 : p->o.max_queue > 0 && p->queued >= p->o.max_queue ? WF_ETRANSIENT
								     : 0;
	if (!rc) {
		if (admitted)
			admitted(j);
		j->next = NULL;
		if (p->tail)
			p->tail->next = j;
		else
			p->head = j;
		p->tail = j;
		p->queued++;
		if (p->queued > p->idle) /* none idle: one more, where o.threads allows */
			start_thread(p);
		pthread_cond_signal(&p->more);
	}
	pthread_mutex_unlock(&p->mu);
	return rc;
}

wf_serve_job *wf_serve_pool_take(wf_serve_pool *p)
{
	pthread_mutex_lock(&p->mu);
	wf_serve_job *j = pop(p);
	pthread_mutex_unlock(&p->mu);
	return j;
}

void wf_serve_pool_stop(wf_serve_pool *p)
{
	pthread_mutex_lock(&p->mu);
	p->stop = 1; /* no thread starts after this */
	pthread_cond_broadcast(&p->more);
	pthread_mutex_unlock(&p->mu);
	for (int i = 0; i < p->nthreads; i++)
		pthread_join(p->threads[i], NULL);
	p->nthreads = 0;
}

void wf_serve_pool_free(wf_serve_pool *p)
{
	free(p->threads);
	p->threads = NULL;
	pthread_cond_destroy(&p->more);
	pthread_mutex_destroy(&p->mu);
}
