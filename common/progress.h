/* progress.h: the training progress display. On a terminal, one line that
 * updates in place (step/total, epoch, loss, accuracy, images/s, ETA); on a
 * pipe or file, one plain line every `every` steps. Not thread-safe. */
#ifndef WF_PROGRESS_H
#define WF_PROGRESS_H

#include <stdio.h>

typedef struct wf_progress {
	FILE *out;
	int tty;	  /* 1: update one line with \r */
	long total;	  /* steps in the run */
	long first;	  /* step the run (re)started from */
	long every;	  /* plain mode: print every `every` steps */
	double t0;	  /* wf_now() at start, seconds */
	double last_draw; /* tty: last redraw time, seconds */
	int line_open;	  /* tty: a line without newline is on screen */
} wf_progress;

typedef struct wf_progress_stats {
	long step;	 /* steps completed (1-based) */
	double epoch;	 /* fractional epoch */
	double loss;	 /* window mean */
	double accuracy; /* window mean, 0..1 */
	double ips;	 /* images per second */
	double lr;
} wf_progress_stats;

/* Start a display on out; tty < 0 detects it with isatty(). */
void wf_progress_init(wf_progress *p, FILE *out, int tty, long first, long total, long every);
/* Report the state after a step (call every step; it decides when to draw). */
void wf_progress_update(wf_progress *p, const wf_progress_stats *s);
/* Print a full line (e.g. evaluation results) without breaking the display. */
void wf_progress_message(wf_progress *p, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
/* End the display (closes the in-place line). */
void wf_progress_finish(wf_progress *p);
/* Format seconds as "1h02m", "3m05s" or "12s" into buf. */
void wf_progress_format_eta(char *buf, size_t n, double seconds);

#endif
