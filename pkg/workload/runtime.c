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
#include "workload/recon.h"

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
	&apf_model_dlrm,
	&apf_model_transformer,
	&apf_model_unet,
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

int apf_model_long(long *out, const apf_workload_spec *w,
		   const char *variant, const char *key, long dflt, long min, long max)
{
	*out = dflt;
	char sec[256];
	const char *s = value_section(w, variant, key, sec, sizeof sec);
	int rc = apf_config_opt_long(out, w->ini, s, key);
	if (!rc && (*out < min || *out > max))
		rc = apf_config_error(w->ini, s, key,
				      "%ld is outside [%ld, %ld]", *out, min,
				      max);
	return rc;
}

int apf_model_double(double *out, const apf_workload_spec *w,
		     const char *variant, const char *key, double dflt, double min,
		     double max)
{
	*out = dflt;
	char sec[256];
	const char *s = value_section(w, variant, key, sec, sizeof sec);
	int rc = apf_config_opt_double(out, w->ini, s, key);
	if (!rc && !(*out >= min && *out <= max))
		rc = apf_config_error(w->ini, s, key,
				      "%g is outside [%g, %g]", *out, min, max);
	return rc;
}

int apf_model_string(const char **out, const apf_workload_spec *w,
		     const char *variant, const char *key, const char *dflt)
{
	const char *v = apf_workload_model_value(w, variant, key);
	*out = v ? v : dflt;
	return 0;
}

int apf_model_widths(const apf_workload_spec *w, const char *variant,
		     const char *key, const char *dflt, int max_n, int *widths,
		     int *n)
{
	const char *v = apf_workload_model_value(w, variant, key);
	char what[80];
	snprintf(what, sizeof what, "[model] %s", key);
	*n = 0;
	if (!v)
		v = dflt;
	for (const char *p = v; *p;) {
		while (*p == ' ' || *p == '\t')
			p++;
		char *end;
		errno = 0;
		long x = strtol(p, &end, 10);
		if (end == p || errno || x < 1 || x > 65536 || *n == max_n)
			return apf_error(APF_EINPUT, what,
					 "expected up to %d widths in [1, "
					 "65536] separated by commas, got '%s'",
					 max_n, v);
		widths[(*n)++] = (int)x;
		p = end;
		while (*p == ' ' || *p == '\t')
			p++;
		if (*p == ',')
			p++;
		else if (*p)
			return apf_error(APF_EINPUT, what, "unexpected '%s'", p);
	}
	return 0;
}

enum loss_kind { LOSS_SOFTMAX_XENT = 1, LOSS_SIGMOID_XENT, LOSS_L1 };

static int check_metrics(const apf_workload_spec *w, int loss);

struct apf_workload {
	const apf_workload_spec *spec;
	char *variant;
	apf_backend *be;
	apf_trial_key key;
	apf_net *net;
	apf_dataset *ds;
	int kind;        /* enum apf_data_kind */
	int loss;        /* enum loss_kind */
	apf_batcher *batcher;
	int H, W, C, classes; /* classes: the outputs the loss takes */
	int nidx;             /* int32 inputs per example (categorical ids) */
	int tokens;           /* a tokens dataset's context T; 0: none */
	int ny;               /* labels per example: 1, T for tokens, or the
				 target's floats (l1) */
	/* l1: the k-space corruption an example's input is made with */
	int center_rows;
	double keep_rows;
	uint32_t corruption_key[2];
	float *host_yf, *dev_yf; /* (cap, ny) target images */
	float *host_pred;        /* (EVAL_BATCH, ny) an eval batch's output */
	int shape_known; /* H, W, C are the dataset's, not the stand-in */
	/* Opened deferred: the training split's layout, until it is attached
	 * (apf_workload_attach_train) */
	int deferred;
	struct apf_train_layout layout;
	float smoothing;
	float *params, *state;
	/* private buffers, sized for `cap` examples */
	int cap;
	float *host_x;
	int32_t *host_y, *host_xi;
	float *dev_x, *losses, *probs, *dlogits;
	int32_t *dev_y, *dev_xi;
	/* evaluation of sigmoid_xent: a split's logits and labels, for AUC */
	float *scores;
	int32_t *score_labels;
	size_t scores_cap;
};

#define MAX_TABLE_COLS 4096

/* "1000, 500, ..." -> counts, each in [1, 2^30]. */
int apf_workload_table_rows(const apf_workload_spec *w, int *rows, int max,
			    int *n)
{
	*n = 0;
	const char *v = apf_config_get(w->ini, "dataset", "categorical_rows");
	if (!v)
		return 0;
	for (const char *p = v; *p;) {
		while (*p == ' ' || *p == '\t')
			p++;
		char *end;
		errno = 0;
		long x = strtol(p, &end, 10);
		if (end == p || errno || x < 1 || x > (1L << 30) || *n == max)
			return apf_config_error(w->ini, "dataset",
						"categorical_rows",
						"expected up to %d counts in "
						"[1, 2^30] separated by commas",
						max);
		rows[(*n)++] = (int)x;
		p = end;
		while (*p == ' ' || *p == '\t')
			p++;
		if (*p == ',')
			p++;
		else if (*p)
			return apf_config_error(w->ini, "dataset",
						"categorical_rows",
						"unexpected '%s'", p);
	}
	return 0;
}

/* A table dataset's declared columns: dense_features and categorical_rows. */
static int table_columns(const apf_workload_spec *w, long *dense, int *rows,
			 int *ncat)
{
	*dense = 0;
	int rc = apf_config_long(dense, w->ini, "dataset", "dense_features");
	if (!rc && (*dense < 1 || *dense > MAX_TABLE_COLS))
		rc = apf_config_error(w->ini, "dataset", "dense_features",
				      "must be in [1, %d]", MAX_TABLE_COLS);
	if (!rc)
		rc = apf_workload_table_rows(w, rows, MAX_TABLE_COLS, ncat);
	return rc;
}

/* The files' columns must be the ones the spec declares: the model is
 * built from the spec, and its embedding tables from categorical_rows. */
static int check_table_columns(apf_workload *wl)
{
	const apf_workload_spec *w = wl->spec;
	long dense;
	int *rows = malloc(MAX_TABLE_COLS * sizeof *rows), ncat = 0;
	if (!rows)
		return apf_error(APF_ENOMEM, w->name, "out of memory");
	int rc = table_columns(w, &dense, rows, &ncat);
	const apf_table *t = wl->ds->table[APF_SPLIT_TRAIN];
	if (!rc && (t->n_dense != dense || t->n_cat != ncat))
		rc = apf_error(APF_EINPUT, w->name,
			       "the tables have %d dense and %d categorical "
			       "columns, the spec says %ld and %d",
			       t->n_dense, t->n_cat, dense, ncat);
	for (int f = 0; !rc && f < ncat; f++)
		if (t->rows[f] != (uint32_t)rows[f])
			rc = apf_error(APF_EINPUT, w->name,
				       "categorical feature %d has %u rows in "
				       "the tables, %d in the spec",
				       f, t->rows[f], rows[f]);
	free(rows);
	return rc;
}

#define MAX_CONTEXT 4096
#define MAX_VOCAB 65536

int apf_workload_tokens(const apf_workload_spec *w, int *T, int *V)
{
	*T = *V = 0;
	const char *format = apf_config_get(w->ini, "dataset", "format");
	if (!format || strcmp(format, "tokens"))
		return 0;
	long t = 0, v = 0;
	int rc = apf_config_long(&t, w->ini, "dataset", "context");
	if (!rc && (t < 1 || t > MAX_CONTEXT))
		rc = apf_config_error(w->ini, "dataset", "context",
				      "must be in [1, %d]", MAX_CONTEXT);
	if (!rc)
		rc = apf_config_long(&v, w->ini, "dataset", "vocab");
	if (!rc && (v < 2 || v > MAX_VOCAB))
		rc = apf_config_error(w->ini, "dataset", "vocab",
				      "must be in [2, %d]", MAX_VOCAB);
	if (!rc)
		*T = (int)t, *V = (int)v;
	return rc;
}

/* The [dataset] format: idx (images), table, or tokens (tables of token
 * windows: *tokens is then the context). */
static int data_kind(const apf_workload_spec *w, int *kind, int *tokens)
{
	const char *format = "idx";
	*tokens = 0;
	int rc = apf_config_opt_string(&format, w->ini, "dataset", "format");
	if (rc)
		return rc;
	if (!strcmp(format, "idx")) {
		*kind = APF_DATA_IMAGES;
	} else if (!strcmp(format, "table")) {
		*kind = APF_DATA_TABLE;
	} else if (!strcmp(format, "tokens")) {
		int V;
		*kind = APF_DATA_TABLE;
		return apf_workload_tokens(w, tokens, &V);
	} else {
		return apf_config_error(w->ini, "dataset", "format",
					"unknown format '%s' (idx, table, "
					"tokens)",
					format);
	}
	return 0;
}

/* A tokens dataset's files hold windows of context + 1 tokens of the
 * declared vocabulary, and nothing else. */
static int check_token_columns(apf_workload *wl)
{
	const apf_table *t = wl->ds->table[APF_SPLIT_TRAIN];
	if (t->n_dense != 0 || t->n_cat != wl->tokens + 1)
		return apf_error(APF_EINPUT, wl->spec->name,
				 "the token tables have %d dense and %d token "
				 "columns, the spec's context %d needs 0 and %d",
				 t->n_dense, t->n_cat, wl->tokens,
				 wl->tokens + 1);
	for (int f = 0; f < t->n_cat; f++)
		if (t->rows[f] != (uint32_t)wl->classes)
			return apf_error(APF_EINPUT, wl->spec->name,
					 "token column %d has a vocabulary of "
					 "%u, the spec says %d",
					 f, t->rows[f], wl->classes);
	return 0;
}

/* ---- reconstruction (loss l1) ----------------------------------------------
 *
 * An example's target is its image, pixels v / 255 in [0, 1]; its input is
 * the image corrupted as [dataset] says. corruption = kspace_rows: the
 * image's 2-D DFT keeps the center_rows lowest frequencies along H and each
 * other row with probability keep_rows, the rest set to 0, and the input is
 * the magnitude of the inverse (recon.h: accelerated MRI's zero-filled
 * reconstruction). An image's mask is drawn from Philox words at
 * (corruption_seed, FNV-1a 64 of its pixels), so it is a function of the
 * image alone: the same in every epoch, in evaluation and in a replay,
 * with no index to carry.
 */
static int recon_config(apf_workload *wl)
{
	const apf_config *c = wl->spec->ini;
	const char *kind = "kspace_rows";
	long center = 4, seed = 0;
	double keep = 0.25, mean = 0.0, std = 1.0;
	int rc = apf_config_opt_string(&kind, c, "dataset", "corruption");
	if (!rc && strcmp(kind, "kspace_rows"))
		rc = apf_config_error(c, "dataset", "corruption",
				      "unknown corruption '%s' (kspace_rows)",
				      kind);
	if (!rc)
		rc = apf_config_opt_long(&center, c, "dataset", "center_rows");
	if (!rc && (center < 0 || center > APF_RECON_MAX))
		rc = apf_config_error(c, "dataset", "center_rows",
				      "must be in [0, %d]", APF_RECON_MAX);
	if (!rc)
		rc = apf_config_opt_double(&keep, c, "dataset", "keep_rows");
	if (!rc && !(keep >= 0.0 && keep <= 1.0))
		rc = apf_config_error(c, "dataset", "keep_rows",
				      "must be in [0, 1]");
	if (!rc)
		rc = apf_config_long(&seed, c, "dataset", "corruption_seed");
	if (!rc)
		rc = apf_config_opt_double(&mean, c, "dataset", "mean");
	if (!rc)
		rc = apf_config_opt_double(&std, c, "dataset", "std");
	if (!rc && (mean != 0.0 || std != 1.0))
		rc = apf_config_error(c, "dataset", "mean",
				      "a reconstruction reads pixels in [0, 1]: "
				      "mean 0, std 1");
	if (rc)
		return rc;
	wl->center_rows = (int)center;
	wl->keep_rows = keep;
	apf_rng_key k = {(uint64_t)seed, 0, 0, APF_RNG_CORRUPTION};
	uint64_t pk = apf_rng_philox_key(&k);
	wl->corruption_key[0] = (uint32_t)pk;
	wl->corruption_key[1] = (uint32_t)(pk >> 32);
	return 0;
}

/* Once the images' shape is known: the target is the whole image. */
static int recon_shape(apf_workload *wl)
{
	if (wl->loss != LOSS_L1)
		return 0;
	if (wl->C != 1 || wl->H > APF_RECON_MAX || wl->W > APF_RECON_MAX)
		return apf_error(APF_EINPUT, wl->spec->name,
				 "a k-space corruption takes single-channel "
				 "images of at most %dx%d, not %dx%dx%d",
				 APF_RECON_MAX, APF_RECON_MAX, wl->H, wl->W,
				 wl->C);
	wl->ny = wl->H * wl->W;
	wl->classes = 1;
	return 0;
}

static uint64_t fnv1a64(const void *p, size_t n)
{
	const unsigned char *b = p;
	uint64_t h = 0xcbf29ce484222325ull;
	for (size_t i = 0; i < n; i++)
		h = (h ^ b[i]) * 0x100000001b3ull;
	return h;
}

/* host_x's B images become the targets (host_yf) and their corruptions. */
static void corrupt_batch(apf_workload *wl, int B)
{
	size_t n = (size_t)wl->ny;
	uint8_t mask[APF_RECON_MAX];
	for (int b = 0; b < B; b++) {
		float *x = wl->host_x + b * n, *y = wl->host_yf + b * n;
		memcpy(y, x, n * sizeof *y);
		apf_kspace_mask(mask, wl->H, wl->center_rows, wl->keep_rows,
				wl->corruption_key, fnv1a64(y, n * sizeof *y));
		apf_kspace_corrupt(x, y, wl->H, wl->W, mask);
	}
}

static int load_table_dataset(apf_workload *wl, int train_fd)
{
	const apf_workload_spec *w = wl->spec;
	const apf_config *c = w->ini;
	static const char *const keys[] = {
		"name",	      "path",	  "digest",	     "format",
		"train",      "validation", "test",	     "dense_features",
		"categorical_rows", NULL};
	static const char *const token_keys[] = {
		"name", "path", "digest", "format", "train", "validation",
		"test", "context", "vocab", NULL};
	int rc = apf_config_check_keys(c, "dataset",
				       wl->tokens ? token_keys : keys);
	const char *names[3];
	static const char *const split_keys[3] = {"train", "validation",
						  "test"};
	for (int s = 0; !rc && s < 3; s++)
		rc = apf_config_string(&names[s], c, "dataset", split_keys[s]);
	if (rc)
		return rc;
	if (train_fd >= 0)
		rc = apf_dataset_import_train(&wl->ds, train_fd, APF_DATA_TABLE,
					      0.0f, 1.0f);
	else
		rc = apf_dataset_load_tables(&wl->ds, w->dataset_path, names);
	if (!rc)
		rc = wl->tokens ? check_token_columns(wl)
				: check_table_columns(wl);
	return rc ? apf_error_prefix(rc, w->name) : 0;
}

static int load_dataset(apf_workload *wl, int train_fd)
{
	const apf_workload_spec *w = wl->spec;
	const apf_config *c = w->ini;
	if (wl->kind == APF_DATA_TABLE)
		return load_table_dataset(wl, train_fd);
	static const char *const keys[] = {
		"name", "path", "digest", "format", "train_images",
		"train_labels", "test_images", "test_labels", "validation_size",
		"train_size", "classes", "mean", "std", NULL};
	static const char *const recon_keys[] = {
		"name", "path", "digest", "format", "train_images",
		"train_labels", "test_images", "test_labels", "validation_size",
		"train_size", "classes", "mean", "std", "corruption",
		"center_rows", "keep_rows", "corruption_seed", NULL};
	int rc = apf_config_check_keys(c, "dataset",
				       wl->loss == LOSS_L1 ? recon_keys : keys);
	apf_image_dataset_opts o = {.dir = w->dataset_path, .classes = 10,
				    .mean = 0.0f, .std = 1.0f};
	long nvalid = 0, ntrain = 0, classes = 10;
	double mean = 0.0, std = 1.0;
	if (!rc)
		rc = apf_config_string(&o.train_images, c, "dataset",
				       "train_images");
	if (!rc)
		rc = apf_config_string(&o.train_labels, c, "dataset",
				       "train_labels");
	if (!rc)
		rc = apf_config_string(&o.test_images, c, "dataset",
				       "test_images");
	if (!rc)
		rc = apf_config_string(&o.test_labels, c, "dataset",
				       "test_labels");
	if (!rc)
		rc = apf_config_long(&nvalid, c, "dataset", "validation_size");
	if (!rc)
		rc = apf_config_opt_long(&ntrain, c, "dataset", "train_size");
	if (!rc)
		rc = apf_config_opt_long(&classes, c, "dataset", "classes");
	if (!rc)
		rc = apf_config_opt_double(&mean, c, "dataset", "mean");
	if (!rc)
		rc = apf_config_opt_double(&std, c, "dataset", "std");
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
	apf_image_dataset *im = NULL;
	if (train_fd >= 0) {
		rc = apf_image_dataset_import_train(&im, train_fd, o.mean,
						    o.std);
		if (!rc && im->classes != o.classes)
			rc = apf_error(APF_EINPUT, "train split",
				       "%d classes, the spec says %d",
				       im->classes, o.classes);
	} else {
		rc = apf_image_dataset_load(&im, &o);
	}
	if (!rc) {
		rc = apf_dataset_of_images(&wl->ds, im);
		im = NULL;
	}
	apf_image_dataset_free(im);
	if (rc)
		return apf_error_prefix(rc, w->name);
	wl->H = wl->ds->images->H, wl->W = wl->ds->images->W;
	wl->C = wl->ds->images->C;
	wl->classes = wl->ds->images->classes;
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
	if (wl->kind == APF_DATA_TABLE)
		return 0; /* declared by the spec (open_workload) */
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
	free(wl->host_xi);
	be->free(be, wl->dev_x);
	be->free(be, wl->dev_y);
	be->free(be, wl->dev_xi);
	be->free(be, wl->losses);
	be->free(be, wl->probs);
	be->free(be, wl->dlogits);
	free(wl->host_yf);
	free(wl->host_pred);
	be->free(be, wl->dev_yf);
	wl->dev_x = wl->losses = wl->probs = wl->dlogits = NULL;
	wl->dev_y = wl->dev_xi = wl->host_xi = NULL;
	wl->host_yf = wl->dev_yf = wl->host_pred = NULL;
	wl->cap = 0;
	/* in is 0 for a net of indices alone (tokens): one float stands in */
	size_t in = (size_t)B * wl->H * wl->W * wl->C;
	size_t ny = (size_t)B * wl->ny, out = ny * wl->classes;
	size_t nxi = (size_t)B * wl->nidx;
	if (!in)
		in = 1;
	wl->host_x = apf_calloc(in, sizeof *wl->host_x);
	wl->host_y = malloc(ny * sizeof *wl->host_y);
	wl->host_xi = malloc((nxi ? nxi : 1) * sizeof *wl->host_xi);
	if (!wl->host_x || !wl->host_y || !wl->host_xi)
		return apf_error(APF_ENOMEM, wl->spec->name, "out of memory");
	int rc = be->alloc(be, in * sizeof(float), (void **)&wl->dev_x);
	if (!rc && nxi)
		rc = be->alloc(be, nxi * sizeof(int32_t), (void **)&wl->dev_xi);
	if (!rc)
		rc = be->alloc(be, ny * sizeof(int32_t), (void **)&wl->dev_y);
	if (!rc)
		rc = be->alloc(be, ny * sizeof(float), (void **)&wl->losses);
	if (!rc)
		rc = be->alloc(be, out * sizeof(float), (void **)&wl->probs);
	if (!rc)
		rc = be->alloc(be, out * sizeof(float), (void **)&wl->dlogits);
	if (!rc && wl->loss == LOSS_L1) {
		wl->host_yf = malloc(ny * sizeof *wl->host_yf);
		wl->host_pred = malloc(ny * sizeof *wl->host_pred);
		rc = wl->host_yf && wl->host_pred
			     ? be->alloc(be, ny * sizeof(float),
					 (void **)&wl->dev_yf)
			     : apf_error(APF_ENOMEM, wl->spec->name,
					 "out of memory");
	}
	if (!rc)
		wl->cap = B;
	return rc;
}

static int open_workload(apf_workload **out, const apf_workload_spec *spec,
			 const char *variant, apf_backend *be,
			 const apf_trial_key *key, int flags, int train_fd,
			 const struct apf_train_layout *layout)
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
	int loss = !strcmp(spec->loss, "cross_entropy")	? LOSS_SOFTMAX_XENT
		   : !strcmp(spec->loss, "sigmoid_xent") ? LOSS_SIGMOID_XENT
		   : !strcmp(spec->loss, "l1")		  ? LOSS_L1
							  : 0;
	if (!loss)
		return apf_config_error(spec->ini, "workload", "loss",
					"unknown loss '%s' (cross_entropy, "
					"sigmoid_xent, l1)",
					spec->loss);
	int rc = check_metrics(spec, loss);
	if (rc)
		return rc;
	int kind = 0, tokens = 0;
	rc = data_kind(spec, &kind, &tokens);
	if (!rc && tokens && loss != LOSS_SOFTMAX_XENT)
		rc = apf_config_error(spec->ini, "workload", "loss",
				      "next-token labels take cross_entropy");
	else if (!rc && !tokens && kind == APF_DATA_TABLE &&
		 loss != LOSS_SIGMOID_XENT)
		rc = apf_config_error(spec->ini, "workload", "loss",
				      "a table's 0/1 labels take sigmoid_xent");
	if (!rc && kind == APF_DATA_IMAGES && loss == LOSS_SIGMOID_XENT)
		rc = apf_config_error(spec->ini, "workload", "loss",
				      "images take cross_entropy (their "
				      "classes) or l1 (their pixels)");
	if (!rc && kind != APF_DATA_IMAGES && loss == LOSS_L1)
		rc = apf_config_error(spec->ini, "workload", "loss",
				      "l1 reconstructs images (format idx)");
	if (!rc)
		rc = apf_config_check_keys(spec->ini, "model", md->keys);
	if (rc)
		return rc;
	apf_workload *wl = apf_calloc(1, sizeof *wl);
	if (!wl)
		return apf_error(APF_ENOMEM, spec->name, "out of memory");
	wl->spec = spec;
	wl->be = be;
	wl->kind = kind;
	wl->loss = loss;
	wl->tokens = tokens;
	wl->ny = 1;
	wl->key = key ? *key : (apf_trial_key){0};
	wl->variant = apf_strdup(variant ? variant : "base");
	/* Without the data, the shape comes from the images' header
	 * (input_shape); the 28x28x1 stand-in stays only where there are no
	 * images to read it from, and shape_known says so. */
	wl->H = 28, wl->W = 28, wl->C = 1, wl->classes = 10;
	long classes = 10;
	rc = wl->variant ? 0 : apf_error(APF_ENOMEM, spec->name, "out of memory");
	if (!rc && kind == APF_DATA_IMAGES)
		rc = apf_config_opt_long(&classes, spec->ini, "dataset", "classes");
	wl->classes = (int)classes;
	if (!rc && tokens) {
		/* Indices alone: T + 1 tokens a window, T next-token labels
		 * (check_token_columns holds the files to it). */
		int T, V;
		rc = apf_workload_tokens(spec, &T, &V);
		wl->H = 1, wl->W = 1, wl->C = 0;
		wl->nidx = T + 1;
		wl->ny = T;
		wl->classes = V;
		wl->shape_known = 1;
	} else if (!rc && kind == APF_DATA_TABLE) {
		/* The model's shapes are the spec's; the files must agree
		 * (check_table_columns). */
		long dense;
		int *rows = malloc(MAX_TABLE_COLS * sizeof *rows), ncat = 0;
		rc = rows ? table_columns(spec, &dense, rows, &ncat)
			  : apf_error(APF_ENOMEM, spec->name, "out of memory");
		free(rows);
		if (!rc) {
			wl->H = 1, wl->W = 1, wl->C = (int)dense;
			wl->nidx = ncat;
			wl->classes = 1;
			wl->shape_known = 1;
		}
	}
	if (!rc && loss == LOSS_L1)
		rc = recon_config(wl);
	static const char *const recon_only[] = {"corruption", "center_rows",
						 "keep_rows", "corruption_seed"};
	for (size_t k = 0; !rc && loss != LOSS_L1 && k < 4; k++)
		if (apf_config_get(spec->ini, "dataset", recon_only[k]))
			rc = apf_config_error(spec->ini, "dataset", recon_only[k],
					      "a corruption is what an l1 "
					      "reconstruction undoes; loss %s "
					      "takes none",
					      spec->loss);
	if (!rc && (flags & APF_WORKLOAD_NO_DATA))
		rc = input_shape(wl);
	if (!rc && layout) {
		/* The split comes later; the model is built for its layout now,
		 * and attaching it checks the two agree. */
		if (layout->H < 1 || layout->W < 1 || layout->C < 0 ||
		    layout->classes < 1 || layout->n < 1)
			rc = apf_error(APF_EINPUT, spec->name,
				       "a training split layout of %dx%dx%d, %d "
				       "classes, %llu examples",
				       layout->H, layout->W, layout->C,
				       layout->classes,
				       (unsigned long long)layout->n);
		else if (kind == APF_DATA_IMAGES) {
			wl->H = layout->H, wl->W = layout->W, wl->C = layout->C;
			wl->classes = layout->classes;
		}
		wl->deferred = 1;
		wl->layout = *layout;
		wl->shape_known = 1;
	} else if (!rc && !(flags & APF_WORKLOAD_NO_DATA)) {
		rc = load_dataset(wl, train_fd);
		if (!rc) {
			wl->shape_known = 1;
			apf_rng_key k = {wl->key.seed, wl->key.study,
					 wl->key.trial, APF_RNG_SHUFFLE};
			rc = apf_dataset_batcher_new(&wl->batcher, wl->ds,
						     APF_SPLIT_TRAIN, &k);
		}
	}
	if (!rc)
		rc = recon_shape(wl);
	double smoothing = 0.0;
	if (!rc)
		rc = apf_model_double(&smoothing, spec, wl->variant, "label_smoothing",
				      0.0, 0.0, 0.5);
	wl->smoothing = (float)smoothing;
	if (!rc) {
		rc = md->build(&wl->net, be, spec, wl->variant, wl->H, wl->W,
			       wl->C, wl->classes);
		if (rc)
			apf_error_prefix(rc, spec->name);
	}
	if (!rc) {
		/* logits (1, ny, classes), or an image of the input's shape */
		int oh, ow, oc;
		apf_net_tensor_shape(wl->net, apf_net_output(wl->net), &oh, &ow,
				     &oc);
		int ok = loss == LOSS_L1
				 ? oh == wl->H && ow == wl->W && oc == wl->C
				 : oh == 1 && ow == wl->ny && oc == wl->classes;
		if (!ok)
			rc = apf_error(APF_EINTERNAL, spec->name,
				       "model gives %dx%dx%d outputs for %s "
				       "%dx%dx%d",
				       oh, ow, oc,
				       loss == LOSS_L1 ? "images of"
						       : "labels",
				       loss == LOSS_L1 ? wl->H : 1,
				       loss == LOSS_L1 ? wl->W : wl->ny,
				       loss == LOSS_L1 ? wl->C : wl->classes);
	}
	if (!rc && apf_net_index_count(wl->net) != wl->nidx)
		rc = apf_error(APF_EINTERNAL, spec->name,
			       "model reads %d categorical inputs of %d",
			       apf_net_index_count(wl->net), wl->nidx);
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
	return open_workload(out, spec, variant, be, key, flags, -1, NULL);
}

int apf_workload_open_deferred(apf_workload **out,
			       const apf_workload_spec *spec,
			       const char *variant, apf_backend *be,
			       const apf_trial_key *key,
			       const struct apf_train_layout *layout)
{
	return open_workload(out, spec, variant, be, key, 0, -1, layout);
}

int apf_workload_train_layout(struct apf_train_layout *out,
			      const apf_workload *wl)
{
	memset(out, 0, sizeof *out);
	if (!wl->ds)
		return apf_error(APF_EINTERNAL, wl->spec->name,
				 "opened without data");
	*out = (struct apf_train_layout){
		wl->H, wl->W, wl->C, wl->classes,
		(uint64_t)apf_dataset_size(wl->ds, APF_SPLIT_TRAIN)};
	return 0;
}

int apf_workload_attach_train(apf_workload *wl, int train_fd)
{
	if (!wl->deferred || wl->ds)
		return apf_error(APF_EINTERNAL, wl->spec->name,
				 "the training split is attached once, to a "
				 "workload opened deferred");
	if (train_fd < 0)
		return apf_error(APF_EINPUT, wl->spec->name, "no training split");
	const struct apf_train_layout want = {wl->H, wl->W, wl->C, wl->classes,
					      wl->layout.n};
	int rc = load_dataset(wl, train_fd);
	/* What the model is built for, as at open (an l1 reconstruction's
	 * outputs are images, its classes 1). */
	if (!rc)
		rc = recon_shape(wl);
	struct apf_train_layout got = {0};
	if (!rc)
		rc = apf_workload_train_layout(&got, wl);
	if (!rc && memcmp(&got, &want, sizeof got))
		rc = apf_error(APF_EINPUT, wl->spec->name,
			       "the training split is %dx%dx%d, %d classes, %llu "
			       "examples; the model was built for %dx%dx%d, %d, "
			       "%llu",
			       got.H, got.W, got.C, got.classes,
			       (unsigned long long)got.n, want.H, want.W, want.C,
			       want.classes, (unsigned long long)want.n);
	if (!rc) {
		apf_rng_key k = {wl->key.seed, wl->key.study, wl->key.trial,
				 APF_RNG_SHUFFLE};
		rc = apf_dataset_batcher_new(&wl->batcher, wl->ds,
					     APF_SPLIT_TRAIN, &k);
	}
	return rc ? apf_error_prefix(rc, wl->spec->name) : 0;
}

void apf_workload_close(apf_workload *wl)
{
	if (!wl)
		return;
	apf_backend *be = wl->be;
	apf_net_free(wl->net);
	apf_batcher_free(wl->batcher);
	apf_dataset_free(wl->ds);
	free(wl->host_x);
	free(wl->host_y);
	free(wl->host_xi);
	free(wl->scores);
	free(wl->score_labels);
	free(wl->host_yf);
	free(wl->host_pred);
	be->free(be, wl->dev_yf);
	be->free(be, wl->dev_x);
	be->free(be, wl->dev_y);
	be->free(be, wl->dev_xi);
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

const apf_dataset *apf_workload_dataset(const apf_workload *wl)
{
	return wl->ds;
}

int apf_workload_direction(const apf_workload *wl)
{
	return wl->spec->direction;
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
	apf_model_string(&init, wl->spec, wl->variant, "init",
			 "kaiming_uniform");
	apf_rng_key k = {wl->key.seed, wl->key.study, wl->key.trial,
			 APF_RNG_INIT};
	int rc = apf_net_init(wl->net, &k, init);
	return rc ? apf_error_prefix(rc, wl->spec->name) : 0;
}

static int upload_batch(apf_workload *wl, int B, apf_batch *out)
{
	apf_backend *be = wl->be;
	/* A window's labels are its tokens shifted by one: the next token at
	 * each of its T positions. */
	if (wl->tokens)
		for (int b = 0; b < B; b++)
			memcpy(wl->host_y + (size_t)b * wl->tokens,
			       wl->host_xi + (size_t)b * wl->nidx + 1,
			       (size_t)wl->tokens * sizeof *wl->host_y);
	if (wl->loss == LOSS_L1) {
		corrupt_batch(wl, B);
		be->upload(be, wl->dev_yf, wl->host_yf,
			   (size_t)B * wl->ny * sizeof(float));
	}
	be->upload(be, wl->dev_x, wl->host_x,
		   (size_t)B * wl->H * wl->W * wl->C * sizeof(float));
	/* image labels (B) of a reconstruction ride along, unused */
	be->upload(be, wl->dev_y, wl->host_y,
		   (size_t)B * (wl->loss == LOSS_L1 ? 1 : wl->ny) *
			   sizeof(int32_t));
	if (wl->nidx)
		be->upload(be, wl->dev_xi, wl->host_xi,
			   (size_t)B * wl->nidx * sizeof(int32_t));
	*out = (apf_batch){wl->dev_x, wl->dev_y, B, wl->ny,
			   wl->nidx ? wl->dev_xi : NULL,
			   wl->nidx ? wl->host_xi : NULL,
			   wl->loss == LOSS_L1 ? wl->dev_yf : NULL};
	return 0;
}

int apf_workload_next_batch(apf_batch *out, apf_workload *wl, apf_data_pos *pos,
			    int B)
{
	if (!wl->batcher)
		return apf_error(APF_EINTERNAL, wl->spec->name,
				 "opened without data");
	if (B <= 0)
		return apf_error(APF_EINPUT, wl->spec->name, "batch size %d", B);
	int rc = reserve(wl, B);
	if (!rc)
		rc = apf_batcher_next_ex(wl->batcher, pos, (size_t)B,
					 wl->host_x, wl->host_xi, wl->host_y);
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
	rc = apf_net_forward_idx(wl->net, &logits, batch->x, batch->xi,
				 batch->host_xi, B, 1, dkey, step);
	if (rc)
		return rc;
	if (wl->loss == LOSS_L1) {
		if (!batch->yf)
			return apf_error(APF_EINTERNAL, wl->spec->name,
					 "a batch without target images");
		be->l1_forward(be, wl->losses, logits, batch->yf, B, wl->ny);
		*loss = be->sum(be, wl->losses, (size_t)B) / B;
		be->l1_backward(be, wl->dlogits, logits, batch->yf, B, wl->ny,
				1.0f / (float)B);
		return apf_net_backward(wl->net, grads, wl->dlogits);
	}
	if (wl->loss == LOSS_SIGMOID_XENT) {
		be->sigmoid_xent_forward(be, wl->losses, wl->probs, logits,
					 batch->y, B, wl->smoothing);
		*loss = be->sum(be, wl->losses, (size_t)B) / B;
		be->sigmoid_xent_backward(be, wl->dlogits, wl->probs, batch->y,
					  B, wl->smoothing, 1.0f / (float)B);
		return apf_net_backward(wl->net, grads, wl->dlogits);
	}
	/* Rows of logits: one per example, or one per position (tokens);
	 * the loss is their mean. */
	int rows = B * wl->ny;
	be->softmax_xent_forward(be, wl->losses, wl->probs, logits, batch->y,
				 rows, wl->classes, wl->smoothing);
	*loss = be->sum(be, wl->losses, (size_t)rows) / rows;
	be->softmax_xent_backward(be, wl->dlogits, wl->probs, batch->y, rows,
				  wl->classes, wl->smoothing,
				  1.0f / (float)rows);
	/* A non-finite loss is returned as it is: whether a diverged trial
	 * ends is the caller's rule, not the workload's. */
	return apf_net_backward(wl->net, grads, wl->dlogits);
}

/* Adds the SSIM and PSNR of the eval batch's B reconstructions
 * (host_pred) against their targets (host_yf), each as fastMRI's
 * evaluation computes them on a volume: the data range is the target's
 * maximum; in sums over images in order. */
static void recon_scores(apf_workload *wl, int B, double *ssim, double *psnr)
{
	size_t n = (size_t)wl->ny;
	for (int b = 0; b < B; b++) {
		const float *x = wl->host_pred + b * n, *y = wl->host_yf + b * n;
		double peak = 0.0, se = 0.0;
		for (size_t i = 0; i < n; i++) {
			peak = y[i] > peak ? y[i] : peak;
			se += ((double)x[i] - y[i]) * ((double)x[i] - y[i]);
		}
		if (peak <= 0.0)
			peak = 1.0; /* an all-black target: the pixels' range */
		*ssim += apf_ssim(x, y, wl->H, wl->W, peak);
		/* a perfect reconstruction scores 100 dB over its peak, not
		 * infinity, so means stay finite */
		double mse = se / (double)n;
		*psnr += 10.0 * log10(peak * peak /
				      (mse > peak * peak * 1e-10
					       ? mse
					       : peak * peak * 1e-10));
	}
}

static int eval_split(apf_workload *wl, int split, size_t n,
		      struct apf_split_metrics *m)
{
	apf_backend *be = wl->be;
	int rc = reserve(wl, EVAL_BATCH);
	if (rc)
		return rc;
	int sigmoid = wl->loss == LOSS_SIGMOID_XENT;
	if (sigmoid && n > wl->scores_cap) {
		free(wl->scores);
		free(wl->score_labels);
		wl->scores_cap = 0;
		wl->scores = malloc(n * sizeof *wl->scores);
		wl->score_labels = malloc(n * sizeof *wl->score_labels);
		if (!wl->scores || !wl->score_labels)
			return apf_error(APF_ENOMEM, wl->spec->name,
					 "out of memory");
		wl->scores_cap = n;
	}
	double loss = 0.0, ssim = 0.0, psnr = 0.0;
	long correct = 0;
	for (size_t first = 0; first < n; first += EVAL_BATCH) {
		int B = (int)(n - first < EVAL_BATCH ? n - first : EVAL_BATCH);
		apf_dataset_gather(wl->ds, split, NULL, first, (size_t)B,
				   wl->host_x, wl->host_xi, wl->host_y);
		apf_batch b;
		upload_batch(wl, B, &b);
		const float *logits;
		rc = apf_net_forward_idx(wl->net, &logits, b.x, b.xi, b.host_xi,
					 B, 0, NULL, 0);
		if (rc)
			return rc;
		if (wl->loss == LOSS_L1) {
			be->l1_forward(be, wl->losses, logits, b.yf, B, wl->ny);
			loss += be->sum(be, wl->losses, (size_t)B);
			be->download(be, wl->host_pred, logits,
				     (size_t)B * wl->ny * sizeof(float));
			recon_scores(wl, B, &ssim, &psnr);
			continue;
		}
		if (sigmoid) {
			be->sigmoid_xent_forward(be, wl->losses, wl->probs,
						 logits, b.y, B, 0.0f);
			loss += be->sum(be, wl->losses, (size_t)B);
			be->download(be, wl->scores + first, logits,
				     (size_t)B * sizeof(float));
			memcpy(wl->score_labels + first, wl->host_y,
			       (size_t)B * sizeof(int32_t));
			continue;
		}
		int rows = B * wl->ny;
		be->softmax_xent_forward(be, wl->losses, wl->probs, logits, b.y,
					 rows, wl->classes, 0.0f);
		loss += be->sum(be, wl->losses, (size_t)rows);
		correct += be->count_correct(be, logits, b.y, rows,
					     wl->classes);
	}
	rc = be->sync(be);
	/* Means over labels: examples, or every position of every window
	 * (an l1 loss is already a mean over its image's pixels). */
	int softmax = wl->loss == LOSS_SOFTMAX_XENT, l1 = wl->loss == LOSS_L1;
	double labels = (double)n * (softmax ? wl->ny : 1);
	m->n = n;
	m->loss = n ? loss / labels : 0.0;
	m->accuracy = n && softmax ? (double)correct / labels : NAN;
	m->log_loss = sigmoid ? m->loss : NAN;
	m->cross_entropy = softmax ? m->loss : NAN;
	m->perplexity = softmax ? exp(m->loss) : NAN;
	m->l1_loss = l1 ? m->loss : NAN;
	m->ssim = l1 && n ? ssim / (double)n : NAN;
	m->psnr = l1 && n ? psnr / (double)n : NAN;
	m->auc = NAN;
	if (!rc && sigmoid)
		rc = apf_auc(&m->auc, wl->scores, wl->score_labels, n);
	return rc;
}

int apf_workload_evaluate(apf_workload_eval *out, apf_workload *wl,
			  const float *params, const float *state,
			  unsigned splits)
{
	memset(out, 0, sizeof *out);
	if (!wl->ds || !wl->ds->holds_eval)
		return apf_error(APF_EINTERNAL, wl->spec->name,
				 "opened without the evaluation splits");
	/* Eval-mode layers only read what is bound; the cast lets the same
	 * net serve training, which writes running statistics. */
	apf_net_bind(wl->net, (float *)params, (float *)state);
	int rc = 0;
	for (int s = 0; !rc && s < 3; s++) {
		if (!(splits & (1u << s)))
			continue;
		size_t n = apf_dataset_size(wl->ds, s);
		if (s == APF_SPLIT_TRAIN)
			n = apf_dataset_size(wl->ds, APF_SPLIT_VALIDATION);
		/* The first eval_examples of each split: an evaluation the
		 * budget can afford many of (workloads/README.md). */
		long cap = wl->spec->eval_examples;
		if (cap > 0 && n > (size_t)cap)
			n = (size_t)cap;
		rc = eval_split(wl, s, n, &out->split[s]);
	}
	apf_net_bind(wl->net, wl->params, wl->state);
	return rc ? apf_error_prefix(rc, wl->spec->name) : 0;
}

double apf_workload_metric(const apf_workload *wl,
			   const struct apf_split_metrics *m)
{
	return apf_split_metric(m, wl->spec->metric);
}

double apf_split_metric(const struct apf_split_metrics *m, const char *name)
{
	if (!strcmp(name, "accuracy"))
		return m->accuracy;
	if (!strcmp(name, "log_loss"))
		return m->log_loss;
	if (!strcmp(name, "auc"))
		return m->auc;
	if (!strcmp(name, "cross_entropy"))
		return m->cross_entropy;
	if (!strcmp(name, "perplexity"))
		return m->perplexity;
	if (!strcmp(name, "l1_loss"))
		return m->l1_loss;
	if (!strcmp(name, "ssim"))
		return m->ssim;
	if (!strcmp(name, "psnr"))
		return m->psnr;
	return NAN;
}

/* The metrics a loss can report, and the direction each improves in. */
static const struct {
	const char *name;
	int loss, direction;
} known_metrics[] = {
	{"accuracy", LOSS_SOFTMAX_XENT, 1},
	{"cross_entropy", LOSS_SOFTMAX_XENT, -1},
	{"perplexity", LOSS_SOFTMAX_XENT, -1},
	{"ssim", LOSS_L1, 1},
	{"psnr", LOSS_L1, 1},
	{"l1_loss", LOSS_L1, -1},
	{"log_loss", LOSS_SIGMOID_XENT, -1},
	{"auc", LOSS_SIGMOID_XENT, 1},
};

static int check_metrics(const apf_workload_spec *w, int loss)
{
	for (size_t i = 0; i < w->nmetrics; i++) {
		size_t k = 0, nk = sizeof known_metrics / sizeof *known_metrics;
		while (k < nk && (strcmp(known_metrics[k].name, w->metrics[i]) ||
				  known_metrics[k].loss != loss))
			k++;
		if (k == nk)
			return apf_config_error(
				w->ini, "workload",
				apf_config_get(w->ini, "workload", "metrics")
					? "metrics"
					: "metric",
				"%s reports %s, not '%s'", w->loss,
				loss == LOSS_SOFTMAX_XENT
					? "accuracy, cross_entropy and "
					  "perplexity"
				: loss == LOSS_L1 ? "ssim, psnr and l1_loss"
						  : "log_loss and auc",
				w->metrics[i]);
		if (!strcmp(w->metrics[i], w->metric) &&
		    known_metrics[k].direction != w->direction)
			return apf_config_error(w->ini, "workload", "direction",
						"%s improves as it %s", w->metric,
						known_metrics[k].direction > 0
							? "grows (max)"
							: "falls (min)");
	}
	return 0;
}

/* Pairs of (score, index) sorted by score, ties by index: a total order,
 * so the ranks do not depend on the sort's implementation. */
struct scored {
	float s;
	uint32_t i;
};

static int cmp_scored(const void *a, const void *b)
{
	const struct scored *x = a, *y = b;
	if (x->s != y->s)
		return x->s < y->s ? -1 : 1;
	return x->i < y->i ? -1 : x->i > y->i;
}

int apf_auc(double *out, const float *scores, const int32_t *labels, size_t n)
{
	*out = NAN;
	struct scored *v = malloc((n ? n : 1) * sizeof *v);
	if (!v)
		return apf_error(APF_ENOMEM, "auc", "out of memory");
	size_t pos = 0;
	for (size_t i = 0; i < n; i++) {
		if (isnan(scores[i])) {
			free(v); /* no order: the AUC of a diverged model */
			return 0;
		}
		v[i] = (struct scored){scores[i], (uint32_t)i};
		pos += labels[i] != 0;
	}
	qsort(v, n, sizeof *v, cmp_scored);
	/* Mann-Whitney: the positives' rank sum, ties at their average
	 * rank (1-based). */
	double rank_sum = 0.0;
	for (size_t i = 0; i < n;) {
		size_t j = i;
		while (j + 1 < n && v[j + 1].s == v[i].s)
			j++;
		double avg = 0.5 * ((double)i + (double)j) + 1.0;
		for (size_t k = i; k <= j; k++)
			if (labels[v[k].i])
				rank_sum += avg;
		i = j + 1;
	}
	free(v);
	size_t neg = n - pos;
	if (pos && neg)
		*out = (rank_sum - 0.5 * (double)pos * (double)(pos + 1)) /
		       ((double)pos * (double)neg);
	return 0;
}
