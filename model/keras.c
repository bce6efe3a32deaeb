/* keras.c: the Keras .h5 importer (see keras.h). Steps: read the root
 * `model_config` JSON (Functional or Sequential); walk its layers in order,
 * turning each into weft layers through the graph builder of zoo_build.h
 * while an alias table maps every Keras layer to the weft layer holding its
 * output (each Keras class through its entry in the table of converters
 * in keras_layers.c); build the model; then copy each weight from
 * model_weights/<layer>/<weight_name>, matched by the weight's own name
 * ("kernel:0" in Keras 2, "kernel" in Keras 3).
 *
 * Formats handled: inbound_nodes as Keras 2 lists ([[["name", 0, 0, {}]]])
 * and as Keras 3 call records ({"args": [{"class_name": "__keras_tensor__",
 * "config": {"keras_history": ["name", 0, 0]}}]}); string-list attributes
 * whole or split into name0, name1, ... (Keras does so past 64 KB); strings
 * of variable or fixed length.
 *
 * A Functional or Sequential model used as a layer (the transfer-learning
 * recipe: base(inp, training=False) + a new head) is walked in place, its
 * layers under their own Keras names; legacy .h5 keeps their weights in the
 * nested model's group, named "<layer>/<weight>". Keras 3 .keras archives
 * are zips read here through their central directory (stored or deflated
 * entries, bounded sizes, CRC checked, no name used as a path): config.json
 * is the model config and model.weights.h5, opened from memory, holds each
 * layer's variables in order at layers/<snake_case class>[_N]/vars/<i>. */
#include "model/keras_priv.h"
#include "model/model_priv.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int wf_keras_fail(kimp *k, int code, const char *fmt, ...)
{
	char msg[900];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (!k->rc)
		k->rc = code;
	return wf_errf(k->err, code, "%s: %s", k->path, msg);
}

int wf_keras_lfail(kimp *k, const char *name, const char *cls, const char *fmt, ...)
{
	char msg[700];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (!k->rc)
		k->rc = WF_EINVAL;
	return wf_errf(k->err, WF_EINVAL, "%s: layer '%s' (%s): %s", k->path, name, cls, msg);
}

int wf_keras_add_load(kimp *k, const char *view, const char *layer, const char *key, int dw)
{
	if (k->nloads == k->capl) {
		int cap = k->capl ? 2 * k->capl : 64;
		wload *g = realloc(k->loads, sizeof(*g) * (size_t)cap);
		if (!g)
			return wf_keras_fail(k, WF_ENOMEM, "out of memory");
		k->loads = g;
		k->capl = cap;
	}
	wload *w = &k->loads[k->nloads++];
	snprintf(w->view, sizeof(w->view), "%s", view);
	snprintf(w->layer, sizeof(w->layer), "%s", layer);
	snprintf(w->scope, sizeof(w->scope), "%s", k->scope);
	snprintf(w->v3path, sizeof(w->v3path), "%s", k->v3layer);
	snprintf(w->key, sizeof(w->key), "%s", key);
	w->depthwise = dw;
	return 0;
}

/* ---- the model config ------------------------------------------------------ */

static const char *layer_name(json_t *jl)
{
	const char *n = json_string_value(json_object_get(jl, "name"));
	return n ? n : json_string_value(json_object_get(json_object_get(jl, "config"), "name"));
}

/* Collect the Keras 3 keras_history names found anywhere in v. */
static int walk_k3(json_t *v, const char **in, int *nin, int *bad)
{
	if (json_is_object(v)) {
		const char *cls = json_string_value(json_object_get(v, "class_name"));
		if (cls && strcmp(cls, "__keras_tensor__") == 0) {
			json_t *h = json_object_get(json_object_get(v, "config"), "keras_history");
			const char *src = json_string_value(json_array_get(h, 0));
			if (!src || *nin >= WF_MAX_INPUTS)
				return -1;
			/* the node index is not 0 for a nested model (its own
			 * construction is node 0); a shared layer has more than
			 * one inbound node, refused where it is converted */
			if (json_integer_value(json_array_get(h, 2)) != 0)
				*bad = 1;
			in[(*nin)++] = src;
			return 0;
		}
		const char *key;
		json_t *val;
		json_object_foreach(v, key, val)
		{
			if (walk_k3(val, in, nin, bad))
				return -1;
		}
	} else if (json_is_array(v)) {
		for (size_t i = 0; i < json_array_size(v); i++)
			if (walk_k3(json_array_get(v, i), in, nin, bad))
				return -1;
	}
	return 0;
}

/* The Keras layers feeding jl (names borrowed from the JSON). */
static int inbound(kimp *k, json_t *jl, const char *name, const char *cls, const char **in,
		   int *nin)
{
	json_t *nodes = json_object_get(jl, "inbound_nodes");
	int bad = 0;
	*nin = 0;
	if (!nodes || json_array_size(nodes) == 0)
		return 0;
	if (!json_is_array(nodes) || json_array_size(nodes) > 1)
		return wf_keras_lfail(k, name, cls,
				      "is called %zu times (shared layers are not supported)",
				      json_array_size(nodes));
	json_t *node = json_array_get(nodes, 0);
	if (json_is_array(node)) { /* Keras 2: [["name", node, tensor, {}], ...] */
		for (size_t i = 0; i < json_array_size(node); i++) {
			json_t *e = json_array_get(node, i);
			const char *src = json_string_value(json_array_get(e, 0));
			if (!src || *nin >= WF_MAX_INPUTS)
				return wf_keras_lfail(k, name, cls, "inbound_nodes: malformed");
			if (json_integer_value(json_array_get(e, 2)) != 0)
				bad = 1; /* node index: see walk_k3 */
			in[(*nin)++] = src;
		}
	} else if (json_is_object(node)) { /* Keras 3 */
		if (walk_k3(json_object_get(node, "args"), in, nin, &bad))
			return wf_keras_lfail(k, name, cls, "inbound_nodes: malformed");
	} else {
		return wf_keras_lfail(k, name, cls, "inbound_nodes: malformed");
	}
	if (bad)
		return wf_keras_lfail(
			k, name, cls,
			"takes a tensor of a shared or multi-output layer (not supported)");
	return 0;
}

/* ---- the layer walk -------------------------------------------------------------- */

static int input_shape(kimp *k, json_t *cfg, const char *name, int *h, int *w, int *c)
{
	json_t *s = json_object_get(cfg, "batch_shape");
	if (!s)
		s = json_object_get(cfg, "batch_input_shape");
	if (!json_is_array(s) || json_array_size(s) != 4)
		return wf_keras_fail(k, WF_EINVAL,
				     "input '%s': expected a [batch, H, W, C] image input shape",
				     name);
	int d[3];
	for (int i = 0; i < 3; i++) {
		json_t *v = json_array_get(s, (size_t)i + 1);
		if (!json_is_integer(v) || json_integer_value(v) < 1 ||
		    json_integer_value(v) > 65536)
			return wf_keras_fail(
				k, WF_EINVAL,
				"input '%s': dimension %d is %s; weft needs a fixed input "
				"size (build the Keras model with input_shape=(H, W, C))",
				name, i + 1, json_is_null(v) ? "None" : "not a size");
		d[i] = (int)json_integer_value(v);
	}
	*h = d[0], *w = d[1], *c = d[2];
	return 0;
}

/* The name of a model's single output layer (Functional or Sequential). */
static const char *output_name(json_t *cfg, json_t *layers, int seq)
{
	if (seq)
		return layer_name(json_array_get(layers, json_array_size(layers) - 1));
	json_t *outs = json_object_get(cfg, "output_layers");
	json_t *o = json_array_get(outs, 0);
	if (json_is_array(json_array_get(o, 0))) /* [[["name", 0, 0]]] */
		o = json_array_get(o, 0);
	if (json_is_string(json_array_get(outs, 0))) /* a single ["name", 0, 0] */
		o = outs;
	if (json_array_size(outs) != 1 && !json_is_string(json_array_get(outs, 0)))
		return NULL;
	return json_string_value(json_array_get(o, 0));
}

static int is_model_class(const char *cls)
{
	return strcmp(cls, "Functional") == 0 || strcmp(cls, "Model") == 0 ||
	       strcmp(cls, "Sequential") == 0;
}

#define MAX_NESTING 8

static int walk(kimp *k, json_t *layers, int seq, const char *feed, const char *outname, int final,
		int depth, const char **yout);

/* A model used as a layer (the Keras transfer-learning recipe: a base model
 * called on the new model's input): its layers are walked in place, under
 * their own Keras names, fed by x; *y is the weft layer of its output. */
static int nested(kimp *k, const char *name, const char *cls, json_t *cfg, const char *x, int final,
		  int depth, const char **y)
{
	int seq = strcmp(cls, "Sequential") == 0;
	json_t *layers = json_is_array(cfg) ? cfg : json_object_get(cfg, "layers");
	const char *out = json_is_array(layers) && json_array_size(layers)
				  ? output_name(cfg, layers, seq)
				  : NULL;
	if (!k->base_name[0])
		snprintf(k->base_name, sizeof(k->base_name), "%s", name);
	char feed[NM]; /* x lives in the alias table, which the walk grows */
	snprintf(feed, sizeof(feed), "%s", x);
	if (depth >= MAX_NESTING)
		return wf_keras_lfail(k, name, cls, "models nested more than %d deep", MAX_NESTING);
	if (!out)
		return wf_keras_lfail(k, name, cls,
				      "a nested model needs layers and exactly one output");
	char saved[sizeof(k->scope)], saved_dir[sizeof(k->v3dir)];
	memcpy(saved, k->scope, sizeof(saved));
	memcpy(saved_dir, k->v3dir, sizeof(saved_dir));
	snprintf(k->v3dir, sizeof(k->v3dir), "%.*s/", (int)sizeof(k->v3dir) - 2, k->v3layer);
	if (strlen(k->scope) + strlen(name) + 2 > sizeof(k->scope))
		return wf_keras_lfail(k, name, cls, "nested model path too long");
	if (k->scope[0])
		strcat(k->scope, "/");
	strcat(k->scope, name);
	int rc = walk(k, layers, seq, feed, out, final, depth + 1, y);
	memcpy(k->scope, saved, sizeof(saved));
	memcpy(k->v3dir, saved_dir, sizeof(saved_dir));
	return rc;
}

/* Keras's naming.to_snake_case of a class name ("DepthwiseConv2D" ->
 * "depthwise_conv2d", "ReLU" -> "re_lu"): the names of a model's layers in
 * a .keras weights file, which never uses the layers' own names. */
static void snake(const char *cls, char *out, size_t n)
{
	char a[NM], b[2 * NM];
	size_t la = 0, lb = 0, o = 0;
	for (const char *p = cls; *p && la < sizeof(a) - 1; p++) /* drop \W */
		if ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
		    (*p >= '0' && *p <= '9') || *p == '_')
			a[la++] = *p;
	a[la] = '\0';
	/* (.)([A-Z][a-z]+) -> \1_\2 */
	for (size_t i = 0; i < la && lb < sizeof(b) - 3;) {
		if (i + 2 < la + 1 && a[i + 1] >= 'A' && a[i + 1] <= 'Z' && a[i + 2] >= 'a' &&
		    a[i + 2] <= 'z') {
			b[lb++] = a[i], b[lb++] = '_', b[lb++] = a[i + 1];
			i += 2;
			while (i < la && a[i] >= 'a' && a[i] <= 'z' && lb < sizeof(b) - 1)
				b[lb++] = a[i++];
		} else {
			b[lb++] = a[i++];
		}
	}
	b[lb] = '\0';
	/* ([a-z])([A-Z]) -> \1_\2, then lower case */
	for (size_t i = 0; i < lb && o + 3 < n;) {
		if (b[i] >= 'a' && b[i] <= 'z' && b[i + 1] >= 'A' && b[i + 1] <= 'Z') {
			out[o++] = b[i], out[o++] = '_', out[o++] = (char)(b[i + 1] - 'A' + 'a');
			i += 2;
		} else {
			char c = b[i++];
			out[o++] = c >= 'A' && c <= 'Z' ? (char)(c - 'A' + 'a') : c;
		}
	}
	out[o] = '\0';
}

/* .keras: the group of layer i of a model's layer list (class names in
 * snake case, numbered _1, _2, ... from their second use); seen counts the
 * uses of each snake-case name so far in this list. */
static int v3_layer_path(kimp *k, const char *cls, wf_strmap *seen)
{
	char me[NM];
	snake(cls, me, sizeof(me));
	int used = wf_strmap_get(seen, me);
	if (used < 0)
		used = 0;
	if (wf_strmap_put(seen, me, used + 1) != 0)
		return wf_keras_fail(k, WF_ENOMEM, "out of memory");
	if (used)
		snprintf(k->v3layer, sizeof(k->v3layer), "%.*slayers/%s_%d", 2 * NM, k->v3dir, me,
			 used);
	else
		snprintf(k->v3layer, sizeof(k->v3layer), "%.*slayers/%s", 2 * NM, k->v3dir, me);
	return 0;
}

/* Make room for n more Keras layers in the alias table. */
static int grow(kimp *k, int n)
{
	size_t want = (size_t)k->n + (size_t)n + 1;
	char(*kn)[NM] = realloc(k->kname, want * sizeof(*kn));
	if (kn)
		k->kname = kn;
	char(*al)[NM] = realloc(k->alias, want * sizeof(*al));
	if (al)
		k->alias = al;
	int *co = realloc(k->consumers, want * sizeof(int));
	if (co)
		k->consumers = co;
	if (!kn || !al || !co)
		return wf_keras_fail(k, WF_ENOMEM, "out of memory");
	memset(k->alias + k->n, 0, (want - (size_t)k->n) * sizeof(*al));
	memset(k->consumers + k->n, 0, (want - (size_t)k->n) * sizeof(int));
	return 0;
}

/* Index of Keras layer name among entries [base, k->n) (the latest), or
 * -1: the latest of all entries is that one when it is >= base. */
static int kindex_from(const kimp *k, int base, const char *name)
{
	int i = wf_strmap_get(&k->kindex, name);
	return i >= base ? i : -1;
}

/* Walk the layers (JSON array) in order; seq: a Sequential model. feed: NULL
 * for the outer model, else the weft layer feeding a nested model's input.
 * outname: this model's output layer; final: it is the whole model's output.
 * *yout: the weft layer holding outname's output. */
static int walk_layers(kimp *k, json_t *layers, int seq, const char *feed, const char *outname,
		       int final, int depth, wf_strmap *v3seen, const char **yout);

static int walk(kimp *k, json_t *layers, int seq, const char *feed, const char *outname, int final,
		int depth, const char **yout)
{
	/* refused before any work: the walk and the graph cost per layer */
	size_t n = json_array_size(layers);
	if ((size_t)k->n + n > WF_MODEL_MAX_LAYERS)
		return wf_keras_fail(k, WF_EINVAL,
				     "model_config: %zu layers%s, more than the %d a weft model "
				     "may have: this model cannot be imported",
				     (size_t)k->n + n, k->n ? " (nested models included)" : "",
				     WF_MODEL_MAX_LAYERS);
	wf_strmap v3seen = {0};
	int rc = walk_layers(k, layers, seq, feed, outname, final, depth, &v3seen, yout);
	wf_strmap_free(&v3seen);
	return rc;
}

/* The names of layers [base, base + n) into k->kname and k->kindex, and how
 * many layers consume each. */
static int index_layers(kimp *k, json_t *layers, int seq, int base)
{
	int n = (int)json_array_size(layers), rc = 0;
	for (int i = 0; i < n; i++) {
		const char *name = layer_name(json_array_get(layers, (size_t)i));
		if (!name || strlen(name) >= NM)
			return wf_keras_fail(k, WF_EFORMAT,
					     "model_config: layer %d has no usable name", i);
		snprintf(k->kname[base + i], NM, "%s", name);
		if (wf_strmap_put(&k->kindex, name, base + i) != 0)
			return wf_keras_fail(k, WF_ENOMEM, "out of memory");
	}
	k->n = base + n;
	for (int i = 0; i < n; i++) {
		const char *in[WF_MAX_INPUTS];
		int nin = 0;
		if (seq) {
			if (i > 0)
				in[nin++] = k->kname[base + i - 1];
		} else if ((rc = inbound(k, json_array_get(layers, (size_t)i), k->kname[base + i],
					 "?", in, &nin))) {
			return rc;
		}
		for (int j = 0; j < nin; j++) {
			int p = kindex_from(k, base, in[j]);
			if (p >= 0)
				k->consumers[p]++;
		}
	}
	return 0;
}

/* Layer `name` as the model's input: an InputLayer, or the first layer of a
 * Keras 2 Sequential without one (*first_in: it also takes the input). In a
 * nested model the input stands for feed, the outer layer that feeds it.
 * *own_input: the weft layer this (nested) model's input is, set here.
 * *only_input: the layer is nothing but the input (its alias is set). */
static int take_input(kimp *k, const char *name, const char *cls, json_t *cfg, char *alias,
		      const char *feed, const char **own_input, int *first_in, int *only_input)
{
	int is_input = strcmp(cls, "InputLayer") == 0;
	if (*own_input || (!feed && k->input))
		return wf_keras_lfail(k, name, cls, "a second input (one image input only)");
	if (feed) {
		*own_input = feed;
	} else {
		int h = 0, w = 0, c = 0, rc;
		if ((rc = input_shape(k, cfg, name, &h, &w, &c)) ||
		    (rc = wf_builder_init(&k->b, h, w, c)))
			return rc ? rc : wf_keras_fail(k, WF_ENOMEM, "out of memory");
		k->input = wf_b_input(&k->b, is_input ? name : "input");
		*own_input = k->input;
		for (int q = 0; q < 4; q++)
			k->pa[q] = 1.0, k->pc[q] = 0.0;
	}
	if (is_input)
		snprintf(alias, NM, "%s", *own_input);
	*first_in = !is_input;
	*only_input = is_input;
	return 0;
}

/* Layer base + i of class cls, whose inputs (Keras names in, weft layers
 * win) are all converted: converted too, its weft layer in k->alias. */
static int convert_layer(kimp *k, int base, int i, const char *cls, json_t *cfg,
			 const char *const *in, const char **win, int nin, int is_output, int depth)
{
	/* k->kname and k->alias move when a nested model grows them: indexed
	 * after each call */
	const char *name = k->kname[base + i], *y = NULL;
	int rc;
	if (strcmp(cls, "Rescaling") == 0 || strcmp(cls, "Normalization") == 0) {
		int p = kindex_from(k, base, in[0]);
		if (!k->pre_ok || strcmp(win[0], k->input) != 0 || (p >= 0 && k->consumers[p] != 1))
			return wf_keras_lfail(k, name, cls,
					      "is supported only as the first layers, right after "
					      "the input (it becomes the model's preprocessing)");
		if ((rc = wf_keras_fold_pre(k, name, cls, cfg)))
			return rc;
		snprintf(k->alias[base + i], NM, "%s", k->input);
		return 0;
	}
	if (is_model_class(cls)) {
		if (nin != 1)
			return wf_keras_lfail(k, name, cls, "a nested model with %d inputs", nin);
		if ((rc = nested(k, name, cls, cfg, win[0], is_output, depth, &y)))
			return rc;
		snprintf(k->alias[base + i], NM, "%s", y);
		return 0;
	}
	k->pre_ok = 0;
	const char *a = wf_keras_activation(cfg);
	if (strcmp(cls, "Activation") == 0 && strcmp(a, "linear") != 0 &&
	    strcmp(a, "softmax") != 0) {
		/* a plain activation layer keeps its own name */
		if (strcmp(a, "relu") != 0 && strcmp(a, "relu6") != 0)
			return wf_keras_lfail(k, name, cls,
					      "activation '%s' is not supported (relu, relu6, "
					      "linear, softmax at the output)",
					      a);
		y = wf_b_act(&k->b, name, a, win[0]);
		if (k->b.failed)
			return wf_keras_lfail(k, name, cls, "%s", k->b.why);
	} else if ((rc = wf_keras_convert(k, name, cls, cfg, nin, win, is_output, &y))) {
		return rc;
	}
	snprintf(k->alias[base + i], NM, "%s", y);
	return 0;
}

static int walk_layers(kimp *k, json_t *layers, int seq, const char *feed, const char *outname,
		       int final, int depth, wf_strmap *v3seen, const char **yout)
{
	int n = (int)json_array_size(layers), rc = 0, base = k->n;
	if ((rc = grow(k, n)) || (rc = index_layers(k, layers, seq, base)))
		return rc;
	const char *own_input = NULL; /* the weft layer a nested model's input stands for */
	for (int i = 0; i < n; i++) {
		if ((rc = wf_cancel_check(k->path, k->err)))
			return rc;
		json_t *jl = json_array_get(layers, (size_t)i);
		json_t *cfg = json_object_get(jl, "config");
		const char *cls = json_string_value(json_object_get(jl, "class_name"));
		const char *name = k->kname[base + i];
		const char *in[WF_MAX_INPUTS], *win[WF_MAX_INPUTS];
		int nin = 0, first_in = 0;
		if (!cls || !json_is_object(cfg))
			return wf_keras_fail(k, WF_EFORMAT,
					     "model_config: layer '%s' has no class_name "
					     "or config",
					     name);
		if (k->v3 && (rc = v3_layer_path(k, cls, v3seen)))
			return rc;
		if (seq && i > 0)
			in[nin++] = k->kname[base + i - 1];
		else if (!seq && (rc = inbound(k, jl, name, cls, in, &nin)))
			return rc;
		int input_here =
			strcmp(cls, "InputLayer") == 0 || (seq && i == 0 && (feed || !k->input));
		if (input_here) {
			int only_input = 0;
			if ((rc = take_input(k, name, cls, cfg, k->alias[base + i], feed,
					     &own_input, &first_in, &only_input)))
				return rc;
			if (only_input)
				continue;
		}
		if (!k->input)
			return wf_keras_lfail(k, name, cls, "comes before the model's input layer");
		if (first_in) {
			nin = 1;
			in[0] = "(input)";
			win[0] = own_input;
		}
		for (int j = 0; j < nin && !first_in; j++) {
			int p = kindex_from(k, base, in[j]);
			if (p < 0 || p >= base + i || !k->alias[p][0])
				return wf_keras_lfail(k, name, cls,
						      "input '%s' is not a layer before it", in[j]);
			win[j] = k->alias[p];
		}
		if (nin < 1)
			return wf_keras_lfail(k, name, cls, "has no inputs");
		if ((rc = convert_layer(k, base, i, cls, cfg, in, win, nin,
					final && strcmp(name, outname) == 0, depth)))
			return rc;
	}
	int oi = outname ? kindex_from(k, base, outname) : -1;
	if (oi < 0 || !k->alias[oi][0])
		return wf_keras_fail(k, WF_EINVAL, "model_config: output layer '%s' is not a layer",
				     outname ? outname : "(none)");
	*yout = k->alias[oi];
	return 0;
}

/* ---- entry points ---------------------------------------------------------------------- */

int wf_keras_is_model_file(int64_t file)
{
	return H5Aexists((hid_t)file, "model_config") > 0 &&
	       H5Aexists((hid_t)file, "weft_format") <= 0;
}

static int read_config(kimp *k, json_t **root)
{
	char *s = NULL;
	json_error_t jerr;
	*root = NULL;
	if (H5Aexists(k->file, "model_config") <= 0)
		return wf_keras_fail(k, WF_EFORMAT,
				     "not a Keras model file (no model_config attribute)");
	int rc = wf_h5_attr_read_str(k->file, "model_config", &s, k->path, k->err);
	if (!rc && !(*root = json_loads(s, 0, &jerr)))
		rc = wf_keras_fail(k, WF_EFORMAT, "model_config: invalid JSON at line %d: %s",
				   jerr.line, jerr.text);
	free(s);
	return rc;
}

/* Import from the open file: the config from its model_config attribute,
 * or, for a .keras archive, config (its config.json) with the weights laid
 * out as in model.weights.h5. */
static int import_model(hid_t file, json_t *config, wf_model **out, wf_model_meta *meta,
			const char *path, wf_err *err)
{
	kimp k;
	json_t *root = NULL;
	char *graph = NULL;
	wf_model *m = NULL;
	memset(&k, 0, sizeof(k));
	k.path = path, k.file = file, k.err = err, k.weights = -1, k.v3 = config != NULL;
	*out = NULL;
	int rc = config ? (root = json_incref(config), 0) : read_config(&k, &root);
	if (rc)
		goto done;
	const char *cls = json_string_value(json_object_get(root, "class_name"));
	json_t *cfg = json_object_get(root, "config");
	json_t *layers = json_is_array(cfg) ? cfg : json_object_get(cfg, "layers");
	int seq = cls && strcmp(cls, "Sequential") == 0;
	if (!cls || (!seq && strcmp(cls, "Functional") != 0 && strcmp(cls, "Model") != 0)) {
		rc = wf_keras_fail(&k, WF_EINVAL,
				   "model_config: class '%s' is not supported (Functional "
				   "or Sequential)",
				   cls ? cls : "(none)");
		goto done;
	}
	if (!json_is_array(layers) || json_array_size(layers) == 0) {
		rc = wf_keras_fail(&k, WF_EFORMAT, "model_config: no layers");
		goto done;
	}
	if (!(k.output = output_name(cfg, layers, seq))) {
		rc = wf_keras_fail(&k, WF_EINVAL,
				   "model_config: output_layers: exactly one output "
				   "is supported");
		goto done;
	}
	if (!k.v3 && H5Lexists(k.file, "model_weights", H5P_DEFAULT) > 0)
		k.weights = H5Gopen2(k.file, "model_weights", H5P_DEFAULT);
	else if (k.v3)
		k.weights = H5Gopen2(k.file, "/", H5P_DEFAULT);
	k.pre_ok = 1;
	const char *yout = NULL;
	int classes = 0;
	if ((rc = walk(&k, layers, seq, NULL, k.output, 1, 0, &yout)))
		goto done;
	const wf_bshape *os = wf_builder_shape(&k.b, yout);
	if (!os || !os->flat) {
		rc = wf_keras_fail(
			&k, WF_EINVAL,
			"output '%s' is not a [batch, classes] tensor (weft models end in "
			"logits: add GlobalAveragePooling2D or Flatten and a Dense layer)",
			k.output);
		goto done;
	}
	if (k.nloads && k.weights < 0) {
		rc = wf_keras_fail(&k, WF_EFORMAT,
				   "no model_weights group (saved without weights?)");
		goto done;
	}
	if (!(graph = wf_builder_json(&k.b, yout, &classes))) {
		rc = wf_keras_fail(&k, WF_EINVAL, "%s", k.b.why);
		goto done;
	}
	if ((rc = wf_model_from_json(&m, graph, err))) {
		wf_err_wrap(err, "%s: the imported graph", path);
		goto done;
	}
	wf_model_init_params(m, 0);
	if ((rc = wf_keras_load_weights(&k, m)))
		goto done;
	if (meta)
		wf_keras_set_meta(&k, json_string_value(json_object_get(cfg, "name")), meta);
	*out = m;
	m = NULL;
done:
	wf_model_free(m);
	free(graph);
	json_decref(root);
	wf_h5_close(&k.weights);
	wf_builder_free(&k.b);
	free(k.kname);
	wf_strmap_free(&k.kindex);
	free(k.alias);
	free(k.consumers);
	free(k.loads);
	return rc;
}

int wf_keras_load_h5(int64_t file, wf_model **out, wf_model_meta *meta, const char *path,
		     wf_err *err)
{
	return import_model((hid_t)file, NULL, out, meta, path, err);
}

/* Import a .keras archive: the weights file is opened from memory. */
static int load_archive(wf_model **out, wf_model_meta *meta, const char *path, wf_err *err)
{
	static unsigned long seq;
	json_t *config = NULL;
	unsigned char *img = NULL;
	size_t n = 0;
	hid_t fapl = -1, f = -1;
	wf_h5_quiet q;
	int rc = wf_keras_read_archive(path, &config, &img, &n, err);
	if (rc)
		return rc;
	wf_h5_quiet_begin(&q);
	char name[64];
	snprintf(name, sizeof(name), "weft-keras-%lu",
		 __atomic_add_fetch(&seq, 1, __ATOMIC_RELAXED));
	fapl = H5Pcreate(H5P_FILE_ACCESS);
	if (fapl < 0 || H5Pset_fapl_core(fapl, 1 << 20, 0) < 0 ||
	    H5Pset_file_image(fapl, img, n) < 0 || (f = H5Fopen(name, H5F_ACC_RDONLY, fapl)) < 0)
		rc = wf_errf(err, WF_EFORMAT,
			     "%s: model.weights.h5 in the archive is not a readable HDF5 file",
			     path);
	free(img);
	if (!rc)
		rc = import_model(f, config, out, meta, path, err);
	wf_h5_close(&f);
	wf_h5_close(&fapl);
	wf_h5_quiet_end(&q);
	json_decref(config);
	return rc;
}

int wf_keras_is_archive(const char *path)
{
	return wf_keras_is_zip(path);
}

int wf_keras_check_archive(const char *path, wf_err *err)
{
	json_t *config = NULL;
	unsigned char *img = NULL;
	size_t n = 0;
	if (!wf_keras_is_zip(path))
		return 0;
	int rc = wf_keras_read_archive(path, &config, &img, &n, err);
	json_decref(config);
	free(img);
	return rc;
}

int wf_keras_load(wf_model **out, wf_model_meta *meta, const char *path, wf_err *err)
{
	wf_h5_quiet q;
	hid_t f = H5I_INVALID_HID;
	*out = NULL;
	if (meta)
		wf_model_meta_init(meta);
	if (wf_keras_is_zip(path))
		return load_archive(out, meta, path, err);
	int rc = wf_h5_open(path, H5F_ACC_RDONLY, &f, err);
	if (rc != 0)
		return rc;
	wf_h5_quiet_begin(&q);
	rc = wf_keras_load_h5(f, out, meta, path, err);
	wf_h5_close(&f);
	wf_h5_quiet_end(&q);
	return rc;
}
