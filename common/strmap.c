/* strmap.c: FNV-1a hashing, linear probing, doubling at half load. */
#include "common/strmap.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static uint64_t hash(const char *s)
{
	uint64_t h = 1469598103934665603ull;
	for (; *s; s++)
		h = (h ^ (unsigned char)*s) * 1099511628211ull;
	return h;
}

/* The slot of key, or the free slot where it would go. */
static size_t slot(char *const *keys, size_t cap, const char *key)
{
	size_t i = (size_t)hash(key) & (cap - 1);
	while (keys[i] && strcmp(keys[i], key) != 0)
		i = (i + 1) & (cap - 1);
	return i;
}

static int grow(wf_strmap *m)
{
	size_t cap = m->cap ? 2 * m->cap : 64;
	char **keys = calloc(cap, sizeof(*keys));
	int *vals = malloc(cap * sizeof(*vals));
	if (!keys || !vals) {
		free(keys);
		free(vals);
		return -1;
	}
	for (size_t i = 0; i < m->cap; i++)
		if (m->keys[i]) {
			size_t j = slot(keys, cap, m->keys[i]);
			keys[j] = m->keys[i];
			vals[j] = m->vals[i];
		}
	free(m->keys);
	free(m->vals);
	m->keys = keys;
	m->vals = vals;
	m->cap = cap;
	return 0;
}

int wf_strmap_put(wf_strmap *m, const char *key, int val)
{
	if (2 * (m->n + 1) > m->cap && grow(m) != 0)
		return -1;
	size_t i = slot(m->keys, m->cap, key);
	if (!m->keys[i]) {
		if (!(m->keys[i] = strdup(key)))
			return -1;
		m->n++;
	}
	m->vals[i] = val;
	return 0;
}

int wf_strmap_get(const wf_strmap *m, const char *key)
{
	if (!m->cap)
		return -1;
	size_t i = slot(m->keys, m->cap, key);
	return m->keys[i] ? m->vals[i] : -1;
}

void wf_strmap_free(wf_strmap *m)
{
	for (size_t i = 0; i < m->cap; i++)
		free(m->keys[i]);
	free(m->keys);
	free(m->vals);
	memset(m, 0, sizeof(*m));
}
