/* strmap.h: a map from strings to non-negative ints (open addressing, the
 * keys copied), for name lookups that must stay linear in the number of
 * names a file lists (layer names of an imported model). Not thread-safe. */
#ifndef WF_STRMAP_H
#define WF_STRMAP_H

#include <stddef.h>

typedef struct wf_strmap {
	char **keys; /* [cap] malloc'd copies, NULL: free slot */
	int *vals;   /* [cap] */
	size_t cap;  /* a power of two, or 0 */
	size_t n;    /* keys held */
} wf_strmap;

/* Set key to val (>= 0), replacing its value when present; 0, or -1 when
 * out of memory (the map is unchanged then). */
int wf_strmap_put(wf_strmap *m, const char *key, int val);
/* The value of key, or -1 when absent. */
int wf_strmap_get(const wf_strmap *m, const char *key);
/* Free the keys and tables; accepts a zeroed map, leaves it zeroed. */
void wf_strmap_free(wf_strmap *m);

#endif
