/* json_budget.c: a jansson allocator that counts into the calling thread's
 * wf_json_budget. Sizes come from malloc_usable_size, so no header is added
 * and a block may be freed on any thread, counted or not. */
#include "serve/json_budget.h"

#include <jansson.h>
#include <malloc.h>
#include <stdlib.h>

#define GROW_STEP ((size_t)64 << 10) /* bytes reserved at a time */

static __thread wf_json_budget *cur;

/* What a block costs: its usable size and glibc's chunk header. */
static size_t cost(void *p)
{
	return malloc_usable_size(p) + sizeof(size_t);
}

void *wf_json_budget_malloc(size_t size)
{
	wf_json_budget *b = cur;
	if (b) {
		size_t need = b->used + size + 2 * sizeof(size_t);
		if (need > b->granted) {
			size_t more = need - b->granted;
			if (more < GROW_STEP)
				more = GROW_STEP;
			if (b->refused || !b->grow(b->arg, more)) {
				b->refused = 1;
				return NULL;
			}
			b->granted += more;
		}
	}
	void *p = malloc(size);
	if (b && p)
		b->used += cost(p);
	return p;
}

void wf_json_budget_free(void *p)
{
	wf_json_budget *b = cur;
	if (b && p) {
		size_t c = cost(p);
		b->used = b->used > c ? b->used - c : 0;
	}
	free(p);
}

void wf_json_budget_install(void)
{
	json_set_alloc_funcs(wf_json_budget_malloc, wf_json_budget_free);
}

void wf_json_budget_begin(wf_json_budget *b)
{
	b->granted = b->used = 0;
	b->refused = 0;
	cur = b;
}

void wf_json_budget_end(void)
{
	cur = NULL;
}
