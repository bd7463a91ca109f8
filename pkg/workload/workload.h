/*
 * workload: the workload specification (workloads/<name>/workload.ini) and
 * where workloads and their datasets are found.
 *
 * workload.ini:
 *
 *     [workload]      name, description, model (the model code's name), loss
 *                     (cross_entropy | sigmoid_xent | l1), metric (e.g.
 *                     accuracy, log_loss, cross_entropy for tokens, ssim
 *                     for l1), direction (max|min), metrics (what each
 *                     split reports besides its loss: "log_loss, auc";
 *                     default the metric alone),
 *                     validation_target, test_target,
 *                     targets (provisional|derived), max_steps (a cap:
 *                     the trial ends there), step_hint (what a submission
 *                     is told to expect, AlgoPerf's step_hint: the steps
 *                     of a whole budget at the target-setting pace;
 *                     default max_steps), eval_examples (each split is
 *                     evaluated on its first N examples in file order;
 *                     default: validation and test whole, train as many
 *                     as validation)
 *     [dataset]       name, path (absolute, or relative to the workload
 *                     directory), digest (its tree digest, `apf hash PATH`),
 *                     format (idx | table | tokens) and its keys: idx
 *                     images (train_images, ..., validation_size, classes,
 *                     mean, std; for the l1 loss also the corruption the
 *                     model undoes: corruption = kspace_rows, center_rows,
 *                     keep_rows, corruption_seed), tables (train, validation, test: table
 *                     files; dense_features; categorical_rows, one count
 *                     per categorical feature) or tokens (train,
 *                     validation, test: table files of windows, each row
 *                     context + 1 tokens as categorical columns of vocab
 *                     rows, no dense features, label 0; an example's input
 *                     is its first context tokens, its labels the next
 *                     token at each position)
 *     [model]         model-specific keys (width, activation, norm, ...)
 *     [budget.cpu]    max_runtime_s, eval_period_s (per hardware class)
 *     [budget.gpu]
 *     [variant.<v>]   overrides of [model] keys, and optionally the variant's
 *                     own validation_target / test_target
 *
 * The runtime half (below the spec functions) binds a spec and a variant to
 * its model code (workloads/<name>/model.c, found by the [workload] model name),
 * its dataset, the loss and the metrics, on a backend.
 *
 * Workloads live in $APF_WORKLOADS_DIR, else <prefix>/share/apf/workloads
 * next to an installed binary, else the source tree's workloads/. A dataset's
 * path can be redirected with $APF_DATASETS_DIR/<dataset name>.
 */
#ifndef APF_WORKLOAD_H
#define APF_WORKLOAD_H

#include "config/config.h"
#include "data/data.h"
#include "nn/nn.h"

#define APF_WORKLOAD_MAX_METRICS 8

struct apf_budget {
	double max_runtime_s;
	double eval_period_s;
	/* provisional = true: set by hand, not yet derived by timing the
	 * baselines on the device (apf workloads says so) */
	int provisional;
};

/* How a variant's targets came about ([variant.V] targets = ...). */
enum apf_variant_targets {
	APF_VARIANT_TARGETS_BASE = 0,  /* none of its own: the base's */
	APF_VARIANT_TARGETS_SET,       /* its own, set by hand (provisional) */
	APF_VARIANT_TARGETS_DERIVED,   /* by AlgoPerf's rule, its own tuning */
	APF_VARIANT_TARGETS_RETUNED,   /* the cheaper rule: the base's
					* configuration retuned around its
					* point (workloads/derive_targets.py) */
};

struct apf_workload_variant {
	char *name;
	double validation_target; /* the base's unless the variant sets its own */
	double test_target;
	int targets;              /* enum apf_variant_targets */
};
/* "base", "provisional", "derived", "retuned". */
const char *apf_variant_targets_name(int targets);

typedef struct apf_workload_spec {
	char *name;
	char *dir;          /* the workload's directory */
	char *description;
	char *model;
	char *loss;
	char *metric;
	char *metrics[APF_WORKLOAD_MAX_METRICS]; /* reported per split, in
						    order; the metric among
						    them */
	size_t nmetrics;
	int direction;      /* +1: higher is better (max), -1: lower (min) */
	double validation_target, test_target;
	int targets_provisional;
	long max_steps;
	long step_hint;     /* max_steps when not given */
	long eval_examples; /* 0: every example (train: validation's count) */
	char *dataset_name;
	char *dataset_path; /* resolved */
	char *dataset_digest; /* 64 hex digits, or NULL when not declared */
	struct apf_budget cpu, gpu;
	struct apf_workload_variant *variants;
	size_t nvariants;
	apf_config *ini;    /* the parsed file, for model- and reader-specific keys */
} apf_workload_spec;

/* The directory that holds the workloads. Caller frees. */
int apf_workloads_dir(char **out);
/* Names of the workloads there (subdirectories with a workload.ini), sorted. */
int apf_workloads_list(char ***names, size_t *n);
void apf_workloads_list_free(char **names, size_t n);

/* Loads and validates workloads/<name>/workload.ini. */
int apf_workload_spec_load(apf_workload_spec **out, const char *name);
int apf_workload_spec_load_dir(apf_workload_spec **out, const char *dir);
/* The rule for workload and variant names: non-empty, [a-z0-9_-] only. */
int apf_workload_name_ok(const char *s);
void apf_workload_spec_free(apf_workload_spec *w);

/* A variant by name ("base" or NULL for the base workload); NULL if absent. */
const struct apf_workload_variant *
apf_workload_variant(const apf_workload_spec *w, const char *name);
/* A [model] value under a variant's overrides; NULL when neither sets it. */
const char *apf_workload_model_value(const apf_workload_spec *w,
				     const char *variant, const char *key);
const struct apf_budget *apf_workload_budget(const apf_workload_spec *w,
					     const char *device);
/* A unit's budget and eval period in ns: the budget's seconds times the
 * ruleset's multiplier (self-tuning's 1.5) and the run's budget scale
 * (`apf run --budget-scale`, 1 for a result); the period times the scale,
 * so that a scaled run evaluates as often over its budget. Rounded to the
 * nearest ns, one rule for the runner and the verifier. */
uint64_t apf_workload_budget_ns(const struct apf_budget *b, double multiplier,
				double scale);
uint64_t apf_workload_eval_period_ns(const struct apf_budget *b, double scale);
/* The allowance for a trial's untimed submission code (loading the shared
 * object, its constructors, init_optimizer_state): 1% of the budget, at
 * least 5 s. Over it the runner faults the trial; the verifier checks the
 * log keeps to it. */
uint64_t apf_workload_init_allowance_ns(uint64_t budget_ns);
/* True when value meets target in the workload's direction. */
int apf_workload_meets(int direction, double value, double target);

/* ---- runtime ------------------------------------------------------------------
 *
 * A trial's trainable state lives in memory the caller provides (the runner's
 * shared arena): apf_workload_bind points the model at the parameters and the
 * model state, apf_workload_data_pos is the data stream's position. The
 * workload's own memory (activations, gradients, batches) is private.
 *
 * Evaluation needs only the spec, the variant and that memory: it runs the
 * model in eval mode over fixed batches in file order, never writes the
 * memory, and gives bit-identical metrics for a fixed thread count.
 */

/* Model code: builds the net for a variant. `keys` lists the [model] keys it
 * reads (NULL-terminated); others are refused. The input is H, W, C floats
 * per example (a table's dense features: 1, 1, n) plus, for a table, its
 * categorical ids (apf_workload_table_rows); `classes` is the number of
 * outputs the loss takes (1 for sigmoid_xent). */
struct apf_model_def {
	const char *name;
	const char *const *keys;
	int (*build)(apf_net **out, apf_backend *be,
		     const apf_workload_spec *w, const char *variant, int H,
		     int W, int C, int classes);
};
/* The model code apf knows, by [workload] model name; NULL if none. */
const struct apf_model_def *apf_model_find(const char *name);
extern const struct apf_model_def apf_model_mlp, apf_model_resnet,
	apf_model_dlrm, apf_model_transformer, apf_model_unet;

/* A tokens dataset's [dataset] context (T) and vocab (V); both 0 when the
 * format is not tokens. */
int apf_workload_tokens(const apf_workload_spec *w, int *T, int *V);
/* A table dataset's [dataset] categorical_rows: the rows of each
 * categorical feature, at most max of them; *n = 0 when the key is absent. */
int apf_workload_table_rows(const apf_workload_spec *w, int *rows, int max,
			    int *n);

/* [model] values under a variant, typed, with a default when unset;
 * malformed values fail naming the section that set them. */
int apf_model_long(long *out, const apf_workload_spec *w,
		   const char *variant, const char *key, long dflt, long min, long max);
int apf_model_double(double *out, const apf_workload_spec *w,
		     const char *variant, const char *key, double dflt, double min,
		     double max);
int apf_model_string(const char **out, const apf_workload_spec *w,
		     const char *variant, const char *key, const char *dflt);
/* A list of layer widths, "1024, 1024" (dflt when unset): up to max_n
 * numbers in [1, 65536] separated by commas, into widths; *n of them. */
int apf_model_widths(const apf_workload_spec *w, const char *variant,
		     const char *key, const char *dflt, int max_n, int *widths,
		     int *n);

typedef struct apf_workload apf_workload;

/* Where a trial's randomness comes from: (seed, study, trial); the purpose
 * is set per use. */
typedef struct apf_trial_key {
	uint64_t seed;
	uint32_t study, trial;
} apf_trial_key;

/* Open flags. NO_DATA: the model only (a listing): its input shape is read
 * from the header of the training images' IDX file, never the data. A spec
 * that names no image files, or whose images are not on this machine, is
 * built for a 28x28x1 stand-in, only so that its model keys are checked
 * (apf_workload_shape_known says which). */
enum { APF_WORKLOAD_NO_DATA = 1 };

int apf_workload_open(apf_workload **out, const apf_workload_spec *spec,
		      const char *variant, apf_backend *be,
		      const apf_trial_key *key, int flags);
/* The training split's shape, what a model is built for: the input's
 * H x W x C (1 x 1 x dense features for a table, 1 x 1 x 0 for tokens),
 * the classes, and the examples in the split. */
struct apf_train_layout {
	int H, W, C, classes;
	uint64_t n;
};
/* A workload opened with its data: the layout of its training split. */
int apf_workload_train_layout(struct apf_train_layout *out,
			      const apf_workload *wl);
/* A trial's workload, opened before its data exists in the process: the
 * model is built for `layout`, the dataset's files are never opened, and
 * batches are refused until apf_workload_attach_train hands it the
 * training split (train_fd, a sealed memfd the supervisor made with
 * apf_dataset_export_train and passes when the clock starts), which must
 * have that layout. Evaluation is always refused. */
int apf_workload_open_deferred(apf_workload **out,
			       const apf_workload_spec *spec,
			       const char *variant, apf_backend *be,
			       const apf_trial_key *key,
			       const struct apf_train_layout *layout);
int apf_workload_attach_train(apf_workload *wl, int train_fd);
void apf_workload_close(apf_workload *wl);

apf_net *apf_workload_net(apf_workload *wl);
apf_backend *apf_workload_backend(apf_workload *wl);
const apf_dataset *apf_workload_dataset(const apf_workload *wl);
const char *apf_workload_variant_name(const apf_workload *wl);
/* The spec's direction: +1 when its metric improves as it grows. */
int apf_workload_direction(const apf_workload *wl);
/* 0 only when opened with NO_DATA and no training images gave the input
 * shape (none named, or none on this machine): the net was built for the
 * 28x28x1 stand-in, so its size is not that of the model a trial trains. */
int apf_workload_shape_known(const apf_workload *wl);

/* Binds parameters and model state (backend memory of the net's
 * param_floats and state_floats floats) and initialises them from the
 * trial key (purpose APF_RNG_INIT) with the variant's init scheme. */
int apf_workload_bind(apf_workload *wl, float *params, float *state);
int apf_workload_init(apf_workload *wl);

/* A batch in backend memory, owned by the workload. */
typedef struct apf_batch {
	const float *x;   /* (B,H,W,C) images, or (B,n_dense) features */
	const int32_t *y; /* (B, ny) */
	int B;
	int ny;           /* labels per example: 1, T for tokens, or the
			     target image's floats for a reconstruction */
	const int32_t *xi;      /* (B,n_cat) categorical ids; NULL: none */
	const int32_t *host_xi; /* the same in host memory */
	const float *yf;        /* (B, ny) target images (l1); NULL: none */
} apf_batch;

/* The next training batch after *pos (shuffled per epoch from the trial
 * key); advances *pos. The batch stays valid until the next call. */
int apf_workload_next_batch(apf_batch *out, apf_workload *wl, apf_data_pos *pos,
			    int B);
/* Mean training loss of the batch (label smoothing as the variant says) and
 * its gradient, written to grads (param_floats floats of backend memory).
 * Batch-norm running statistics in the bound state are updated; dropout
 * draws from (trial key, APF_RNG_DROPOUT, step). */
int apf_workload_loss_grad(apf_workload *wl, const apf_batch *batch,
			   uint64_t step, double *loss, float *grads);

struct apf_split_metrics {
	double loss;      /* mean of the workload's loss, no smoothing */
	double accuracy;  /* cross_entropy */
	double log_loss;  /* sigmoid_xent: the mean loss, by its usual name */
	double auc;       /* sigmoid_xent: area under the ROC curve, exact */
	double cross_entropy; /* tokens: mean loss per token, nats */
	double perplexity;    /* tokens: exp(cross_entropy) */
	double l1_loss;       /* l1: mean absolute error per pixel */
	double ssim;          /* l1: mean over images of fastMRI's SSIM */
	double psnr;          /* l1: mean over images of the PSNR, dB */
	size_t n;         /* examples evaluated (windows, for tokens) */
};

/* A split's metric by name (accuracy, log_loss, auc, cross_entropy,
 * perplexity, l1_loss, ssim, psnr); NAN for others. */
double apf_split_metric(const struct apf_split_metrics *m, const char *name);
/* The exact ROC AUC of scores (n) against 0/1 labels (n): tied scores
 * share their average rank, sums run in double in sorted order (ties in
 * index order), so the value is a function of the inputs alone; NAN when
 * one class is absent. */
int apf_auc(double *out, const float *scores, const int32_t *labels,
	    size_t n);

typedef struct apf_workload_eval {
	struct apf_split_metrics split[3]; /* by enum apf_split_id; train is
					      the first `validation size`
					      examples of the train split */
} apf_workload_eval;

/* Evaluates params and state (read, never written) on the splits in
 * `splits` (bit mask of 1 << apf_split_id). */
int apf_workload_evaluate(apf_workload_eval *out, apf_workload *wl,
			  const float *params, const float *state,
			  unsigned splits);
/* The workload's metric (accuracy here) of one split's metrics. */
double apf_workload_metric(const apf_workload *wl,
			   const struct apf_split_metrics *m);

/* ---- the reference AdamW loop ---------------------------------------------
 *
 * Until the sealed runner and the submissions exist, this loop trains a
 * workload for tests, benchmarks and provisional targets. It keeps all
 * trainable state in one arena exactly as the runner will: [parameters |
 * model state | AdamW m | AdamW v], one allocation.
 */
struct apf_adamw {
	double lr, b1, b2, eps, weight_decay;
	double warmup_frac; /* linear warmup over this share of steps, then
			       cosine decay to 0 */
};

/* One AdamW update of all parameters, built from the backend's vector ops,
 * or by its one-pass adamw where it has one (the same bits): weight decay
 * only on weight kinds; t is the 1-based step. scratch holds param_floats
 * floats (the composed ops' direction; the one pass leaves it alone). */
void apf_adamw_update(apf_backend *be, const apf_net *net, float *params,
		      const float *grads, float *m, float *v, float *scratch,
		      const struct apf_adamw *h, double lr, long t);
double apf_adamw_lr(const struct apf_adamw *h, long step, long total);

struct apf_fit_opts {
	long steps;
	int batch;
	struct apf_adamw adamw;
	long eval_every;      /* 0: only at the end; < 0: never */
	unsigned eval_splits; /* bit mask; 0: validation */
	/* Called after each evaluation; non-zero stops the loop. */
	int (*on_eval)(void *user, long step, double seconds,
		       const apf_workload_eval *ev);
	void *user;
};

struct apf_fit_result {
	apf_workload_eval last;
	double best_validation; /* best validation metric seen, in the
				   metric's direction */
	long steps_done;
	double train_seconds;   /* excluding evaluation */
	double last_loss;
	uint8_t digest[32];     /* SHA-256 of parameters and model state */
};

int apf_workload_fit(struct apf_fit_result *res, apf_workload *wl,
		     const struct apf_fit_opts *o);

#endif
