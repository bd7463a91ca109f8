/*
 * runtime.c: a workload spec bound to a variant, its model code, its dataset
 * and a backend: batches, loss and gradient, evaluation (see workload.h).
 *
 * Invariants: evaluation reads the caller's parameters and state and writes
 * nothing of them; it runs fixed-size batches in file order, so its metrics
 * depend only on that memory, the spec and the variant. Training randomness
 * (data order, dropout) comes from the trial key with its own purpose.
 */
#include "workload/workload.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Evaluation batch size: fixed here, not chosen by a submission, because
 * re-evaluation must reproduce the same sums bit for bit. */
#define EVAL_BATCH 200

/* The model code apf is built with (workloads/<name>/model.c). */
static const struct apf_model_def *const models[] = {
	&apf_model_mlp,
	&apf_model_resnet,
};

const struct apf_model_def *apf_model_find(const char *name)
{
	for (size_t i = 0; i < sizeof models / sizeof models[0]; i++)
		if (!strcmp(models[i]->name, name))
			return models[i];
	return NULL;
}

/* The section a [model] key's value comes from, for error messages. */
static const char *value_section(const apf_workload_spec *w,
				 const char *variant, const char *key,
				 char *buf, size_t size)
{
	if (variant && strcmp(variant, "base")) {
		snprintf(buf, size, "variant.%s", variant);
		if (apf_config_get(w->ini, buf, key))
			return buf;
	}
	return "model";
}

int apf_model_long(const apf_workload_spec *w, const char *variant,
		   const char *key, long dflt, long min, long max, long *out)
{
	*out = dflt;
	char sec[256];
	const char *s = value_section(w, variant, key, sec, sizeof sec);
	int rc = apf_config_opt_long(w->ini, s, key, out);
	if (!rc && (*out < min || *out > max))
		rc = apf_config_error(w->ini, s, key,
				      "%ld is outside [%ld, %ld]", *out, min,
				      max);
	return rc;
}

int apf_model_double(const apf_workload_spec *w, const char *variant,
		     const char *key, double dflt, double min, double max,
		     double *out)
{
	*out = dflt;
	char sec[256];
	const char *s = value_section(w, variant, key, sec, sizeof sec);
	int rc = apf_config_opt_double(w->ini, s, key, out);
	if (!rc && !(*out >= min && *out <= max))
		rc = apf_config_error(w->ini, s, key,
				      "%g is outside [%g, %g]", *out, min, max);
	return rc;
}

int apf_model_string(const apf_workload_spec *w, const char *variant,
		     const char *key, const char *dflt, const char **out)
{
	const char *v = apf_workload_model_value(w, variant, key);
	*out = v ? v : dflt;
	return 0;
}

struct apf_workload {
	const apf_workload_spec *spec;
	char *variant;
	apf_backend *be;
	apf_trial_key key;
	apf_net *net;
	apf_image_dataset *ds;
	apf_batcher *batcher;
	int H, W, C, classes;
	int shape_known; /* H, W, C are the dataset's, not the stand-in */
	float smoothing;
	float *params, *state;
	/* private buffers, sized for `cap` examples */
	int cap;
	float *host_x;
	int32_t *host_y;
	float *dev_x, *losses, *probs, *dlogits;
	int32_t *dev_y;
};

/* The dataset the spec names, or (train_fd >= 0) the train split a
 * supervisor handed over: the trial never opens the dataset itself. */
static int load_dataset(apf_workload *wl, int train_fd)
{
	const apf_workload_spec *w = wl->spec;
	const apf_config *c = w->ini;
	static const char *const keys[] = {
		"name", "path", "digest", "format", "train_images",
		"train_labels", "test_images", "test_labels", "validation_size",
		"train_size", "classes", "mean", "std", NULL};
	int rc = apf_config_check_keys(c, "dataset", keys);
	const char *format = "idx";
	if (!rc)
		rc = apf_config_opt_string(c, "dataset", "format", &format);
	if (!rc && strcmp(format, "idx"))
		return apf_config_error(c, "dataset", "format",
					"unknown format '%s' (idx)", format);
	apf_image_dataset_opts o = {.dir = w->dataset_path, .classes = 10,
				    .mean = 0.0f, .std = 1.0f};
	long nvalid = 0, ntrain = 0, classes = 10;
	double mean = 0.0, std = 1.0;
	if (!rc)
		rc = apf_config_string(c, "dataset", "train_images",
				       &o.train_images);
	if (!rc)
		rc = apf_config_string(c, "dataset", "train_labels",
				       &o.train_labels);
	if (!rc)
		rc = apf_config_string(c, "dataset", "test_images",
				       &o.test_images);
	if (!rc)
		rc = apf_config_string(c, "dataset", "test_labels",
				       &o.test_labels);
	if (!rc)
		rc = apf_config_long(c, "dataset", "validation_size", &nvalid);
	if (!rc)
		rc = apf_config_opt_long(c, "dataset", "train_size", &ntrain);
	if (!rc)
		rc = apf_config_opt_long(c, "dataset", "classes", &classes);
	if (!rc)
		rc = apf_config_opt_double(c, "dataset", "mean", &mean);
	if (!rc)
		rc = apf_config_opt_double(c, "dataset", "std", &std);
	if (!rc && (nvalid <= 0 || ntrain < 0))
		rc = apf_config_error(c, "dataset", "validation_size",
				      "split sizes must be positive");
	if (rc)
		return rc;
	o.validation_size = (size_t)nvalid;
	o.train_size = (size_t)ntrain;
	o.classes = (int)classes;
	o.mean = (float)mean;
	o.std = (float)std;
	if (train_fd >= 0) {
		rc = apf_image_dataset_import_train(&wl->ds, train_fd, o.mean,
						    o.std);
		if (!rc && wl->ds->classes != o.classes)
			rc = apf_error(APF_EINPUT, "train split",
				       "%d classes, the spec says %d",
				       wl->ds->classes, o.classes);
	} else {
		rc = apf_image_dataset_load(&wl->ds, &o);
	}
	if (rc)
		return apf_error_prefix(rc, w->name);
	return 0;
}

/* The input shape (H, W, C) of the dataset the spec names, from the IDX
 * header of its training images alone, so a listing can build the model a
 * trial trains without decompressing the data. apf_idx_read checks the
 * whole file when a trial loads it; here only the header's shape matters.
 * A spec that names no training images (a model-only spec, as in the
 * tests of model keys), or whose dataset is not on this machine, has no
 * shape to read: it keeps the 28x28x1 stand-in, shape_known stays 0, and
 * the net is only good for checking the model's keys. A file that is
 * there but is not IDX images is an error. */
static int input_shape(apf_workload *wl)
{
	const apf_workload_spec *w = wl->spec;
	const char *name = apf_config_get(w->ini, "dataset", "train_images");
	if (!name)
		return 0;
	char *path = apf_path_join(w->dataset_path, name);
	if (!path)
		return apf_error(APF_ENOMEM, w->name, "out of memory");
	if (access(path, F_OK) != 0 && errno == ENOENT) {
		free(path);
		return 0;
	}
	apf_idx h;
	int rc = apf_idx_read_header(&h, path, (size_t)1 << 40);
	if (!rc && (h.ndim != 3 || h.dims[1] > 65536 || h.dims[2] > 65536))
		rc = apf_error(APF_EINPUT, path,
			       "expected IDX images (N x rows x cols), got %d "
			       "dimensions",
			       h.ndim);
	if (!rc) {
		wl->H = (int)h.dims[1], wl->W = (int)h.dims[2], wl->C = 1;
		wl->shape_known = 1;
	}
	free(path);
	return rc ? apf_error_prefix(rc, w->name) : 0;
}

static int reserve(apf_workload *wl, int B)
{
	if (B <= wl->cap)
		return 0;
	apf_backend *be = wl->be;
	free(wl->host_x);
	free(wl->host_y);
	be->free(be, wl->dev_x);
	be->free(be, wl->dev_y);
	be->free(be, wl->losses);
	be->free(be, wl->probs);
	be->free(be, wl->dlogits);
	wl->dev_x = wl->losses = wl->probs = wl->dlogits = NULL;
	wl->dev_y = NULL;
	wl->cap = 0;
	size_t in = (size_t)B * wl->H * wl->W * wl->C, out = (size_t)B * wl->classes;
	wl->host_x = malloc(in * sizeof *wl->host_x);
	wl->host_y = malloc((size_t)B * sizeof *wl->host_y);
	if (!wl->host_x || !wl->host_y)
		return apf_error(APF_ENOMEM, wl->spec->name, "out of memory");
	int rc = be->alloc(be, in * sizeof(float), (void **)&wl->dev_x);
	if (!rc)
		rc = be->alloc(be, (size_t)B * sizeof(int32_t),
			       (void **)&wl->dev_y);
	if (!rc)
		rc = be->alloc(be, (size_t)B * sizeof(float),
			       (void **)&wl->losses);
	if (!rc)
		rc = be->alloc(be, out * sizeof(float), (void **)&wl->probs);
	if (!rc)
		rc = be->alloc(be, out * sizeof(float), (void **)&wl->dlogits);
	if (!rc)
		wl->cap = B;
	return rc;
}

static int open_workload(apf_workload **out, const apf_workload_spec *spec,
			 const char *variant, apf_backend *be,
			 const apf_trial_key *key, int flags, int train_fd)
{
	*out = NULL;
	if (variant && strcmp(variant, "base") &&
	    !apf_workload_variant(spec, variant))
		return apf_error(APF_EINPUT, spec->name, "no variant '%s'",
				 variant);
	const struct apf_model_def *md = apf_model_find(spec->model);
	if (!md)
		return apf_config_error(spec->ini, "workload", "model",
					"no model code named '%s'",
					spec->model);
	if (strcmp(spec->loss, "cross_entropy"))
		return apf_config_error(spec->ini, "workload", "loss",
					"unknown loss '%s' (cross_entropy)",
					spec->loss);
	if (strcmp(spec->metric, "accuracy") || spec->direction != 1)
		return apf_config_error(spec->ini, "workload", "metric",
					"classification workloads report "
					"accuracy, direction max");
	int rc = apf_config_check_keys(spec->ini, "model", md->keys);
	if (rc)
		return rc;
	apf_workload *wl = apf_calloc(1, sizeof *wl);
	if (!wl)
		return apf_error(APF_ENOMEM, spec->name, "out of memory");
	wl->spec = spec;
	wl->be = be;
	wl->key = key ? *key : (apf_trial_key){0};
	wl->variant = apf_strdup(variant ? variant : "base");
	/* Without the data, the shape comes from the images' header
	 * (input_shape); the 28x28x1 stand-in stays only where there are no
	 * images to read it from, and shape_known says so. */
	wl->H = 28, wl->W = 28, wl->C = 1, wl->classes = 10;
	long classes = 10;
	rc = wl->variant ? 0 : apf_error(APF_ENOMEM, spec->name, "out of memory");
	if (!rc)
		rc = apf_config_opt_long(spec->ini, "dataset", "classes", &classes);
	wl->classes = (int)classes;
	if (!rc && (flags & APF_WORKLOAD_NO_DATA))
		rc = input_shape(wl);
	if (!rc && !(flags & APF_WORKLOAD_NO_DATA)) {
		rc = load_dataset(wl, train_fd);
		if (!rc) {
			wl->H = wl->ds->H, wl->W = wl->ds->W, wl->C = wl->ds->C;
			wl->shape_known = 1;
			wl->classes = wl->ds->classes;
			apf_rng_key k = {wl->key.seed, wl->key.study,
					 wl->key.trial, APF_RNG_SHUFFLE};
			rc = apf_batcher_new(&wl->batcher, wl->ds,
					     APF_SPLIT_TRAIN, &k);
		}
	}
	double smoothing = 0.0;
	if (!rc)
		rc = apf_model_double(spec, wl->variant, "label_smoothing", 0.0,
				      0.0, 0.5, &smoothing);
	wl->smoothing = (float)smoothing;
	if (!rc) {
		rc = md->build(&wl->net, be, spec, wl->variant, wl->H, wl->W,
			       wl->C, wl->classes);
		if (rc)
			apf_error_prefix(rc, spec->name);
	}
	if (!rc && apf_net_out_features(wl->net) != wl->classes)
		rc = apf_error(APF_EINTERNAL, spec->name,
			       "model gives %d outputs for %d classes",
			       apf_net_out_features(wl->net), wl->classes);
	if (rc) {
		apf_workload_close(wl);
		return rc;
	}
	*out = wl;
	return 0;
}

int apf_workload_open(apf_workload **out, const apf_workload_spec *spec,
		      const char *variant, apf_backend *be,
		      const apf_trial_key *key, int flags)
{
	return open_workload(out, spec, variant, be, key, flags, -1);
}

int apf_workload_open_train(apf_workload **out, const apf_workload_spec *spec,
			    const char *variant, apf_backend *be,
			    const apf_trial_key *key, int train_fd)
{
	if (train_fd < 0)
		return apf_error(APF_EINTERNAL, spec->name, "no train split");
	return open_workload(out, spec, variant, be, key, 0, train_fd);
}

void apf_workload_close(apf_workload *wl)
{
	if (!wl)
		return;
	apf_backend *be = wl->be;
	apf_net_free(wl->net);
	apf_batcher_free(wl->batcher);
	apf_image_dataset_free(wl->ds);
	free(wl->host_x);
	free(wl->host_y);
	be->free(be, wl->dev_x);
	be->free(be, wl->dev_y);
	be->free(be, wl->losses);
	be->free(be, wl->probs);
	be->free(be, wl->dlogits);
	free(wl->variant);
	free(wl);
}

apf_net *apf_workload_net(apf_workload *wl)
{
	return wl->net;
}

apf_backend *apf_workload_backend(apf_workload *wl)
{
	return wl->be;
}

const apf_image_dataset *apf_workload_dataset(const apf_workload *wl)
{
	return wl->ds;
}

const char *apf_workload_variant_name(const apf_workload *wl)
{
	return wl->variant;
}

int apf_workload_shape_known(const apf_workload *wl)
{
	return wl->shape_known;
}

int apf_workload_bind(apf_workload *wl, float *params, float *state)
{
	wl->params = params;
	wl->state = state;
	apf_net_bind(wl->net, params, state);
	return 0;
}

int apf_workload_init(apf_workload *wl)
{
	const char *init;
	apf_model_string(wl->spec, wl->variant, "init", "kaiming_uniform",
			 &init);
	apf_rng_key k = {wl->key.seed, wl->key.study, wl->key.trial,
			 APF_RNG_INIT};
	int rc = apf_net_init(wl->net, &k, init);
	return rc ? apf_error_prefix(rc, wl->spec->name) : 0;
}

static int upload_batch(apf_workload *wl, int B, apf_batch *out)
{
	apf_backend *be = wl->be;
	be->upload(be, wl->dev_x, wl->host_x,
		   (size_t)B * wl->H * wl->W * wl->C * sizeof(float));
	be->upload(be, wl->dev_y, wl->host_y, (size_t)B * sizeof(int32_t));
	*out = (apf_batch){wl->dev_x, wl->dev_y, B};
	return 0;
}

int apf_workload_next_batch(apf_workload *wl, apf_data_pos *pos, int B,
			    apf_batch *out)
{
	if (!wl->batcher)
		return apf_error(APF_EINTERNAL, wl->spec->name,
				 "opened without data");
	if (B <= 0)
		return apf_error(APF_EINPUT, wl->spec->name, "batch size %d", B);
	int rc = reserve(wl, B);
	if (!rc)
		rc = apf_batcher_next(wl->batcher, pos, (size_t)B, wl->host_x,
				      wl->host_y);
	if (!rc)
		rc = upload_batch(wl, B, out);
	return rc ? apf_error_prefix(rc, wl->spec->name) : 0;
}

int apf_workload_loss_grad(apf_workload *wl, const apf_batch *batch,
			   uint64_t step, double *loss, float *grads)
{
	apf_backend *be = wl->be;
	int B = batch->B;
	int rc = reserve(wl, B);
	if (rc)
		return rc;
	apf_rng_key k = {wl->key.seed, wl->key.study, wl->key.trial,
			 APF_RNG_DROPOUT};
	uint64_t pk = apf_rng_philox_key(&k);
	uint32_t dkey[2] = {(uint32_t)pk, (uint32_t)(pk >> 32)};
	const float *logits;
	rc = apf_net_forward(wl->net, &logits, batch->x, B, 1, dkey, step);
	if (rc)
		return rc;
	be->softmax_xent_forward(be, wl->losses, wl->probs, logits, batch->y, B,
				 wl->classes, wl->smoothing);
	*loss = be->sum(be, wl->losses, (size_t)B) / B;
	be->softmax_xent_backward(be, wl->dlogits, wl->probs, batch->y, B,
				  wl->classes, wl->smoothing, 1.0f / (float)B);
	/* A non-finite loss is returned as it is: whether a diverged trial
	 * ends is the caller's rule, not the workload's. */
	return apf_net_backward(wl->net, grads, wl->dlogits);
}

static int eval_split(apf_workload *wl, int split, size_t n,
		      struct apf_split_metrics *m)
{
	apf_backend *be = wl->be;
	int rc = reserve(wl, EVAL_BATCH);
	if (rc)
		return rc;
	double loss = 0.0;
	long correct = 0;
	for (size_t first = 0; first < n; first += EVAL_BATCH) {
		int B = (int)(n - first < EVAL_BATCH ? n - first : EVAL_BATCH);
		apf_image_gather(wl->ds, split, NULL, first, (size_t)B,
				 wl->host_x, wl->host_y);
		apf_batch b;
		upload_batch(wl, B, &b);
		const float *logits;
		rc = apf_net_forward(wl->net, &logits, b.x, B, 0, NULL, 0);
		if (rc)
			return rc;
		be->softmax_xent_forward(be, wl->losses, wl->probs, logits, b.y,
					 B, wl->classes, 0.0f);
		loss += be->sum(be, wl->losses, (size_t)B);
		correct += be->count_correct(be, logits, b.y, B, wl->classes);
	}
	rc = be->sync(be);
	m->n = n;
	m->loss = n ? loss / (double)n : 0.0;
	m->accuracy = n ? (double)correct / (double)n : 0.0;
	return rc;
}

int apf_workload_evaluate(apf_workload *wl, const float *params,
			  const float *state, unsigned splits,
			  apf_workload_eval *out)
{
	memset(out, 0, sizeof *out);
	if (!wl->ds || wl->ds->map)
		return apf_error(APF_EINTERNAL, wl->spec->name,
				 "opened without the evaluation splits");
	/* Eval-mode layers only read what is bound; the cast lets the same
	 * net serve training, which writes running statistics. */
	apf_net_bind(wl->net, (float *)params, (float *)state);
	int rc = 0;
	for (int s = 0; !rc && s < 3; s++) {
		if (!(splits & (1u << s)))
			continue;
		size_t n = wl->ds->split[s].n;
		if (s == APF_SPLIT_TRAIN)
			n = wl->ds->split[APF_SPLIT_VALIDATION].n;
		rc = eval_split(wl, s, n, &out->split[s]);
	}
	apf_net_bind(wl->net, wl->params, wl->state);
	return rc ? apf_error_prefix(rc, wl->spec->name) : 0;
}

double apf_workload_metric(const apf_workload *wl,
			   const struct apf_split_metrics *m)
{
	(void)wl;
	return m->accuracy;
}
