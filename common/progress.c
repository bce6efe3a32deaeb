#include "common/progress.h"

#include "common/util.h"

#include <stdarg.h>
#include <unistd.h>

void wf_progress_init(wf_progress *p, FILE *out, int tty, long first, long total, long every)
{
	p->out = out;
	p->tty = tty < 0 ? isatty(fileno(out)) : tty;
	p->first = first;
	p->total = total;
	p->every = every > 0 ? every : 1;
	p->t0 = wf_now();
	p->last_draw = 0;
	p->line_open = 0;
}

void wf_progress_format_eta(char *buf, size_t n, double s)
{
	if (!(s >= 0) || s > 1e9) {
		snprintf(buf, n, "?");
		return;
	}
	long t = (long)(s + 0.5);
	if (t >= 3600)
		snprintf(buf, n, "%ldh%02ldm", t / 3600, (t % 3600) / 60);
	else if (t >= 60)
		snprintf(buf, n, "%ldm%02lds", t / 60, t % 60);
	else
		snprintf(buf, n, "%lds", t);
}

static void draw(wf_progress *p, const wf_progress_stats *s)
{
	char eta[32];
	double el = wf_now() - p->t0;
	long done = s->step - p->first;
	wf_progress_format_eta(eta, sizeof(eta),
			       done > 0 ? el / (double)done * (double)(p->total - s->step) : -1);
	int w = 1;
	for (long t = p->total; t >= 10; t /= 10)
		w++;
	fprintf(p->out,
		"%sstep %*ld/%ld  epoch %.2f  loss %.4f  acc %.4f  %.0f img/s  lr %.3g  ETA %s%s",
		p->tty ? "\r" : "", w, s->step, p->total, s->epoch, s->loss, s->accuracy, s->ips,
		s->lr, eta, p->tty ? "\033[K" : "\n");
	fflush(p->out);
	p->line_open = p->tty;
}

void wf_progress_update(wf_progress *p, const wf_progress_stats *s)
{
	int last = s->step >= p->total;
	if (p->tty) {
		double now = wf_now();
		if (last || now - p->last_draw >= 0.1) {
			p->last_draw = now;
			draw(p, s);
		}
	} else if (last || s->step % p->every == 0) {
		draw(p, s);
	}
}

void wf_progress_message(wf_progress *p, const char *fmt, ...)
{
	if (p->line_open) {
		fputs("\r\033[K", p->out);
		p->line_open = 0;
	}
	va_list ap;
	va_start(ap, fmt);
	vfprintf(p->out, fmt, ap);
	va_end(ap);
	fputc('\n', p->out);
	fflush(p->out);
}

void wf_progress_finish(wf_progress *p)
{
	if (p->line_open) {
		fputc('\n', p->out);
		fflush(p->out);
		p->line_open = 0;
	}
}
