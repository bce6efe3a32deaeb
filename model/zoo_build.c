/* zoo_build.c: the graph builder (see zoo_build.h). Shapes are inferred
 * from each layer's JSON config with the rules of graph.c, which validates
 * the finished graph again: the builder only needs shapes to be right for
 * graphs that are valid. */
#include "model/zoo_build.h"

#include "kernels/kernels.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void fail(wf_builder *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void fail(wf_builder *b, const char *fmt, ...)
{
	if (!b->failed) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(b->why, sizeof(b->why), fmt, ap);
		va_end(ap);
	}
	b->failed = 1;
}

int wf_builder_init(wf_builder *b, int h, int w, int c)
{
	memset(b, 0, sizeof(*b));
	b->in_h = h, b->in_w = w, b->in_c = c;
	b->layers = json_array();
	return b->layers ? 0 : WF_ENOMEM;
}

void wf_builder_free(wf_builder *b)
{
	json_decref(b->layers);
	for (int i = 0; i < b->n; i++)
		free(b->names[i]);
	free(b->names);
	free(b->shapes);
	wf_strmap_free(&b->index);
	memset(b, 0, sizeof(*b));
}

/* The latest layer of that name, or -1 (a map: an imported file may list
 * many layers, and a scan per input would make its import quadratic). */
static int find(const wf_builder *b, const char *name)
{
	return wf_strmap_get(&b->index, name);
}

const wf_bshape *wf_builder_shape(const wf_builder *b, const char *name)
{
	int i = name ? find(b, name) : -1;
	return i < 0 ? NULL : &b->shapes[i];
}

/* n or [a, b] from config key (def when absent or null). */
static void pair(json_t *cfg, const char *key, int def, int *a, int *b)
{
	json_t *v = json_object_get(cfg, key);
	*a = *b = def;
	if (json_is_integer(v)) {
		*a = *b = (int)json_integer_value(v);
	} else if (json_is_array(v) && json_array_size(v) == 2) {
		*a = (int)json_integer_value(json_array_get(v, 0));
		*b = (int)json_integer_value(json_array_get(v, 1));
	}
}

/* [[t,b],[l,r]] (or n, or [h,w]) into p[4]. */
static void pad4(json_t *cfg, const char *key, int def, int p[4])
{
	json_t *v = json_object_get(cfg, key);
	p[0] = p[1] = p[2] = p[3] = def;
	if (json_is_integer(v)) {
		p[0] = p[1] = p[2] = p[3] = (int)json_integer_value(v);
	} else if (json_is_array(v) && json_array_size(v) == 2) {
		for (int k = 0; k < 2; k++) {
			json_t *e = json_array_get(v, (size_t)k);
			if (json_is_integer(e)) {
				p[2 * k] = p[2 * k + 1] = (int)json_integer_value(e);
			} else {
				p[2 * k] = (int)json_integer_value(json_array_get(e, 0));
				p[2 * k + 1] = (int)json_integer_value(json_array_get(e, 1));
			}
		}
	}
}

static int window_out(int in, int k, int s, int d, int same)
{
	int out, before, after;
	if (s < 1)
		return 0;
	if (same) {
		wf_same_pad(in, k, s, d, &out, &before, &after);
		return out;
	}
	int ek = (k - 1) * d + 1;
	return in < ek ? 0 : (in - ek) / s + 1;
}

static wf_bshape infer(const wf_builder *b, const char *type, json_t *cfg, int nin, const int *in)
{
	wf_bshape s = {0, 0, 0, 0};
	if (strcmp(type, "input") == 0) {
		s.h = b->in_h, s.w = b->in_w, s.c = b->in_c;
		return s;
	}
	if (nin < 1)
		return s;
	wf_bshape x = b->shapes[in[0]];
	s = x;
	const char *pad = json_string_value(json_object_get(cfg, "padding"));
	int same = pad && strcmp(pad, "same") == 0;
	int kh, kw, sh, sw, dh, dw;
	if (strcmp(type, "conv2d") == 0) {
		pair(cfg, "kernel_size", 1, &kh, &kw);
		pair(cfg, "strides", 1, &sh, &sw);
		pair(cfg, "dilation_rate", 1, &dh, &dw);
		s.h = window_out(x.h, kh, sh, dh, same);
		s.w = window_out(x.w, kw, sw, dw, same);
		s.c = (int)json_integer_value(json_object_get(cfg, "filters"));
	} else if (strcmp(type, "maxpool") == 0 || strcmp(type, "avgpool") == 0) {
		pair(cfg, "pool_size", 2, &kh, &kw);
		json_t *st = json_object_get(cfg, "strides");
		if (!st || json_is_null(st))
			sh = kh, sw = kw;
		else
			pair(cfg, "strides", 1, &sh, &sw);
		s.h = window_out(x.h, kh, sh, 1, same);
		s.w = window_out(x.w, kw, sw, 1, same);
	} else if (strcmp(type, "zeropad") == 0 || strcmp(type, "crop") == 0) {
		int p[4], sign = type[0] == 'z' ? 1 : -1;
		pad4(cfg, sign > 0 ? "padding" : "cropping", sign > 0 ? 1 : 0, p);
		s.h = x.h + sign * (p[0] + p[1]);
		s.w = x.w + sign * (p[2] + p[3]);
	} else if (strcmp(type, "gap") == 0) {
		s.h = s.w = 1, s.flat = 1;
	} else if (strcmp(type, "flatten") == 0) {
		s.c = x.h * x.w * x.c, s.h = s.w = 1, s.flat = 1;
	} else if (strcmp(type, "dense") == 0) {
		s.c = (int)json_integer_value(json_object_get(cfg, "units"));
		s.h = s.w = 1, s.flat = 1;
	} else if (strcmp(type, "concat") == 0) {
		for (int k = 1; k < nin; k++)
			s.c += b->shapes[in[k]].c;
	}
	return s;
}

const char *wf_b_add(wf_builder *b, const char *name, const char *type, json_t *config, int nin,
		     const char *const *inputs)
{
	int idx[WF_MAX_INPUTS];
	if (!config)
		config = json_object();
	if (b->failed || !config)
		goto fail;
	if (strlen(name) >= WF_NAME_MAX || nin > WF_MAX_INPUTS) {
		fail(b, "layer '%.64s': name too long or too many inputs", name);
		goto fail;
	}
	json_t *ins = json_array();
	for (int k = 0; k < nin; k++) {
		idx[k] = find(b, inputs[k]);
		if (idx[k] < 0) {
			fail(b, "layer '%s': input '%.64s' is not a layer yet", name, inputs[k]);
			json_decref(ins);
			goto fail;
		}
		json_array_append_new(ins, json_string(inputs[k]));
	}
	if (b->n == b->cap) {
		int cap = b->cap ? 2 * b->cap : 256;
		void *nn = realloc(b->names, sizeof(*b->names) * (size_t)cap);
		if (nn)
			b->names = nn;
		void *ns = realloc(b->shapes, sizeof(*b->shapes) * (size_t)cap);
		if (ns)
			b->shapes = ns;
		if (!nn || !ns) {
			fail(b, "out of memory");
			json_decref(ins);
			goto fail;
		}
		b->cap = cap;
	}
	char *copy = strdup(name);
	json_t *l = json_pack("{s:s, s:s, s:o, s:O}", "name", name, "type", type, "inputs", ins,
			      "config", config);
	if (!copy || !l || wf_strmap_put(&b->index, name, b->n) != 0) {
		free(copy);
		json_decref(l);
		fail(b, "out of memory");
		goto fail;
	}
	if (json_array_append_new(b->layers, l) != 0) { /* it took l */
		free(copy);
		fail(b, "out of memory");
		goto fail;
	}
	b->names[b->n] = copy;
	b->shapes[b->n] = infer(b, type, config, nin, idx);
	json_decref(config);
	return b->names[b->n++];
fail:
	json_decref(config);
	b->failed = 1;
	return name;
}

const char *wf_b_input(wf_builder *b, const char *name)
{
	return wf_b_add(b, b->input_name ? b->input_name : name, "input", NULL, 0, NULL);
}

const char *wf_b_conv(wf_builder *b, const char *name, const char *in, int filters, int kh, int kw,
		      int sh, int sw, int d, int groups, int same, int use_bias)
{
	json_t *c =
		json_pack("{s:i, s:[ii], s:[ii], s:[ii], s:i, s:s, s:b}", "filters", filters,
			  "kernel_size", kh, kw, "strides", sh, sw, "dilation_rate", d, d, "groups",
			  groups, "padding", same ? "same" : "valid", "use_bias", use_bias);
	return wf_b_add(b, name, "conv2d", c, 1, &in);
}

const char *wf_b_dwconv(wf_builder *b, const char *name, const char *in, int k, int s, int same,
			int use_bias)
{
	const wf_bshape *x = wf_builder_shape(b, in);
	int c = x ? x->c : 1;
	return wf_b_conv(b, name, in, c, k, k, s, s, 1, c, same, use_bias);
}

const char *wf_b_bn(wf_builder *b, const char *name, const char *in, double eps, double momentum)
{
	json_t *c = json_pack("{s:f, s:f}", "epsilon", eps, "momentum", momentum);
	return wf_b_add(b, name, "batchnorm", c, 1, &in);
}

const char *wf_b_act(wf_builder *b, const char *name, const char *type, const char *in)
{
	return wf_b_add(b, name, type, NULL, 1, &in);
}

const char *wf_b_add2(wf_builder *b, const char *name, const char *x, const char *y)
{
	const char *in[2] = {x, y};
	return wf_b_add(b, name, "add", NULL, 2, in);
}

const char *wf_b_concat(wf_builder *b, const char *name, int n, const char *const *in)
{
	return wf_b_add(b, name, "concat", NULL, n, in);
}

const char *wf_b_pool(wf_builder *b, const char *name, const char *type, const char *in, int k,
		      int s, int same)
{
	json_t *c = json_pack("{s:[ii], s:[ii], s:s}", "pool_size", k, k, "strides", s, s,
			      "padding", same ? "same" : "valid");
	return wf_b_add(b, name, type, c, 1, &in);
}

const char *wf_b_pad(wf_builder *b, const char *name, const char *type, const char *in, int t,
		     int bot, int l, int r)
{
	json_t *c = json_pack("{s:[[ii][ii]]}", strcmp(type, "crop") == 0 ? "cropping" : "padding",
			      t, bot, l, r);
	return wf_b_add(b, name, type, c, 1, &in);
}

const char *wf_b_gap(wf_builder *b, const char *name, const char *in)
{
	return wf_b_add(b, name, "gap", NULL, 1, &in);
}

const char *wf_b_flatten(wf_builder *b, const char *name, const char *in)
{
	return wf_b_add(b, name, "flatten", NULL, 1, &in);
}

const char *wf_b_dense(wf_builder *b, const char *name, const char *in, int units, int use_bias)
{
	json_t *c = json_pack("{s:i, s:b}", "units", units, "use_bias", use_bias);
	return wf_b_add(b, name, "dense", c, 1, &in);
}

const char *wf_b_dropout(wf_builder *b, const char *name, const char *in, double rate)
{
	return wf_b_add(b, name, "dropout", json_pack("{s:f}", "rate", rate), 1, &in);
}

void wf_b_correct_pad(const wf_builder *b, const char *x, int k, int pad[4])
{
	const wf_bshape *s = wf_builder_shape(b, x);
	int ah = s ? 1 - s->h % 2 : 1, aw = s ? 1 - s->w % 2 : 1;
	pad[0] = k / 2 - ah, pad[1] = k / 2;
	pad[2] = k / 2 - aw, pad[3] = k / 2;
}

char *wf_builder_json(wf_builder *b, const char *output, int *classes)
{
	if (b->failed)
		return NULL;
	if (b->n == 0) {
		fail(b, "no layers");
		return NULL;
	}
	int o = output ? find(b, output) : b->n - 1;
	if (o < 0) {
		fail(b, "output '%.64s' is not a layer", output);
		return NULL;
	}
	*classes = b->shapes[o].c;
	json_t *root = json_pack("{s:i, s:[iii], s:i, s:s, s:O}", "format", 1, "input_shape",
				 b->in_h, b->in_w, b->in_c, "classes", b->shapes[o].c, "output",
				 b->names[o], "layers", b->layers);
	char *text = root ? json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
	json_decref(root);
	if (!text)
		fail(b, "out of memory");
	return text;
}
