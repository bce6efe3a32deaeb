/* json_budget.h: jansson's memory counted while a request body is parsed, so
 * that a JSON tree (about 20 times its text: NaN bodies, KServe JSON
 * tensors) is held to weft-serve's body budget like the body itself and is
 * refused before it takes the server's memory, not after. */
#ifndef WF_SERVE_JSON_BUDGET_H
#define WF_SERVE_JSON_BUDGET_H

#include <stddef.h>

/* One parse's account. grow(arg, n) reserves n more bytes and returns 1, or
 * 0 to refuse (the allocation then fails and so does the parse). */
typedef struct wf_json_budget {
	int (*grow)(void *arg, size_t n);
	void *arg;
	size_t granted; /* bytes reserved through grow */
	size_t used;	/* bytes of jansson's live allocations in this parse */
	int refused;	/* grow refused: the parse failed for memory */
} wf_json_budget;

/* Route jansson's allocations through the budget's counter (once, at start,
 * before any thread; blocks allocated before stay valid). */
void wf_json_budget_install(void);
/* Count this thread's jansson allocations in b until wf_json_budget_end. */
void wf_json_budget_begin(wf_json_budget *b);
void wf_json_budget_end(void);
/* malloc and free counted as jansson's are: a parser's own buffers. */
void *wf_json_budget_malloc(size_t n);
void wf_json_budget_free(void *p);

#endif
