/* ckptdir.h: the checkpoint directory layout (docs/formats.md), one module
 * for the trainer (model.h5, optimizer state) and the parameter servers
 * (ps-<i>-of-<n>.h5 shards):
 *
 *   <dir>/step-<N>/<files...>   each written atomically (common/atomicfile)
 *   <dir>/step-<N>/DONE         written last: JSON listing every file of the
 *                               step with its size and CRC32C
 *   <dir>/step-<N>/EXPORTED     the final step only, after DONE: the record of
 *                               its export (trainer/export.c); not in DONE
 *   <dir>/step-<N>/DIVERGED     instead of DONE: the step was written while
 *                               the run was diverging (why, one line); the
 *                               files stay for inspection, never loaded
 *
 * A step is complete when it has DONE; it is trusted when every file DONE
 * lists has that size and checksum. Readers take the newest step that is
 * complete and verifies and say which newer ones they skipped and why. A
 * DONE written by an older weft is empty: complete, with nothing to verify. */
#ifndef WF_CKPTDIR_H
#define WF_CKPTDIR_H

#include "common/error.h"

#include <stddef.h>

#define WF_CKPTDIR_EXPORTED "EXPORTED"
#define WF_CKPTDIR_DIVERGED "DIVERGED"

/* "<dir>/step-<step>" into out. */
void wf_ckptdir_step_path(char *out, size_t n, const char *dir, long step);
/* All step-<N> directories under dir, ascending, into *steps (malloc'd, *n
 * entries; a missing dir is an empty list). */
int wf_ckptdir_list(const char *dir, long **steps, int *n, wf_err *err);
/* 1 when step_dir has a DONE file. */
int wf_ckptdir_has_done(const char *step_dir);
/* Remove step_dir/DONE, its export record and a DIVERGED mark (before
 * rewriting a step); 0 when there was no DONE. */
int wf_ckptdir_undone(const char *step_dir, wf_err *err);
/* Take DONE away from step_dir and leave DIVERGED saying why: readers skip
 * the step with that reason from then on. */
int wf_ckptdir_mark_diverged(const char *step_dir, const char *why, wf_err *err);
/* Checksum every regular file of step_dir (not DONE, not temporaries) and
 * write DONE atomically; the step is complete from then on. */
int wf_ckptdir_seal(const char *step_dir, long step, wf_err *err);
/* 0 when step_dir has DONE and every file it lists has its recorded size and
 * CRC32C, and the file need (NULL: none) exists and, when DONE lists
 * anything, is listed; WF_EFORMAT with the reason otherwise. */
int wf_ckptdir_verify(const char *step_dir, const char *need, wf_err *err);
/* The newest step (want_step >= 0: exactly that one) under dir that
 * verifies with need: returns 1 and fills *step and path, 0 when none does
 * (err says why for want_step or when one was skipped). Each newer step
 * skipped is logged as a warning with its reason. */
int wf_ckptdir_newest(const char *dir, long want_step, const char *need, long *step, char *path,
		      size_t n, wf_err *err);
/* A reader's own check of a step that verified (a file's internal checksum):
 * 0 to accept step_dir, WF_EFORMAT with the reason to skip it, any other
 * code to stop the search with that error. */
typedef int (*wf_ckptdir_check_fn)(const char *step_dir, void *arg, wf_err *err);
/* As wf_ckptdir_newest, and a step must also pass check (NULL: none): a
 * step that verifies against DONE but fails check with WF_EFORMAT is
 * skipped with a warning as any other corrupt step is. Returns < 0 when
 * check fails otherwise. */
int wf_ckptdir_newest_checked(const char *dir, long want_step, const char *need,
			      wf_ckptdir_check_fn check, void *arg, long *step, char *path,
			      size_t n, wf_err *err);
/* Delete all but the newest keep complete steps, and incomplete ones older
 * than the newest complete one. With keep >= 2, the newest complete step
 * below healthy (one whose weights a later healthy loss confirmed; 0: none)
 * is one of the keep, so that a divergence found later still has a
 * checkpoint to go back to: the newest keep - 1 and it. */
int wf_ckptdir_prune(const char *dir, int keep, long healthy, wf_err *err);

#endif
