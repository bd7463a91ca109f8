/*
 * apf/ops.h: what a submission can do, through its context (ABI version 2;
 * an ABI 1 entry, built against the table up to `uniform`, runs unchanged).
 *
 * A submission sees the model's parameters as a list of tensors with a kind
 * (weight, bias, ...), asks the workload for the loss and the gradient of a
 * batch, keeps everything that must persist across steps in *state slots*
 * the harness allocates, and does its arithmetic with the vector operations
 * below. The operations run on the trial's backend (CPU or CUDA), so one
 * optimizer runs on both: an apf_vec may be device memory, and only the
 * operations here may touch it.
 *
 * Every operation checks its vectors' lengths; a mismatch or any other
 * misuse is recorded in the context (the first error wins), and the harness
 * fails the trial with that message when the submission's call returns.
 *
 * State slots are what makes checkpoints, resume and replay complete
 * without the submission's help: they live in the trial's arena beside the
 * parameters. State kept anywhere else - a static variable, a malloc'd
 * buffer kept across calls - is a rules violation, and `apf verify --replay`
 * exposes it, because a replayed interval starts from a checkpoint in a new
 * process. Slot addresses may change between calls (a resumed trial maps
 * its arena elsewhere): look slots up in each call, never cache them.
 */
#ifndef APF_OPS_H
#define APF_OPS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct apf_ctx apf_ctx;           /* the harness; opaque */
typedef struct apf_hparams apf_hparams;   /* one trial's hyperparameters */
typedef struct apf_batch apf_batch;       /* a batch of the workload's data */

/* A vector of floats in backend memory. */
typedef struct apf_vec {
	float *p;
	size_t n;
} apf_vec;

/* A row-major matrix view: element (r, c) is v.p[r ld + c], rows x cols
 * with ld >= cols; v is the storage the view spans ((rows - 1) ld + cols
 * floats from the first element). apf_param_mat gives every parameter's
 * view, apf_mat_of views a slot, a gradient or scratch, apf_block a
 * rectangle of a view. Only the matrix operations below take views; a view
 * with ld == cols is contiguous, and its v is a vector like any other. */
typedef struct apf_mat {
	apf_vec v;
	int rows, cols, ld;
} apf_mat;

/* Randomness handed to the submission: a Philox stream, distinct per
 * trial and step; draw from it with apf_uniform. */
typedef struct apf_prng {
	uint64_t key;
	uint64_t step;
} apf_prng;

/* Parameter kinds (docs/submitting.md, the ABI). */
enum apf_kind {
	APF_KIND_WEIGHT = 1,
	APF_KIND_BIAS,
	APF_KIND_CONV_WEIGHT,
	APF_KIND_NORM_SCALE,
	APF_KIND_NORM_BIAS,
	APF_KIND_EMBEDDING,
	APF_KIND_ATTN_Q,
	APF_KIND_ATTN_K,
	APF_KIND_ATTN_V,
	APF_KIND_ATTN_OUT,
};

typedef struct apf_param_info {
	const char *name;  /* "block1.conv1.weight" */
	int kind;          /* enum apf_kind */
	int ndim;
	int shape[4];
	size_t numel;
	size_t offset;     /* floats from the start of the flat parameters */
} apf_param_info;

/* What the submission knows about the training run. */
typedef struct apf_train_state {
	int64_t global_step;        /* steps completed before this call */
	double submission_time_s;   /* accumulated, as the supervisor measured
				       it at the latest eval */
	double max_runtime_s;       /* the budget */
	int64_t max_steps;          /* 0: none */
	int64_t step_hint;          /* the workload's expected step count */
	int evals;                  /* evaluations so far */
} apf_train_state;

/* The latest evaluation (all NAN before the first). */
typedef struct apf_eval_results {
	int index;                  /* 0 before the first eval */
	int64_t global_step;
	double train_loss, train_metric;
	double validation_loss, validation_metric;
	double test_loss, test_metric;
	double validation_target;
	int direction;              /* +1 higher is better, -1 lower */
} apf_eval_results;

/* The workload, as far as a submission may know it. */
typedef struct apf_workload_info {
	const char *name;           /* "fmnist_mlp" */
	const char *variant;        /* "base" or the variant's name */
	const char *metric;         /* "accuracy" */
	const char *device;         /* "cpu" or "cuda" */
	int64_t train_examples;
} apf_workload_info;

/* The operations table the harness provides. Its layout is the ABI: new
 * operations are only ever appended, and `size` tells which exist. */
struct apf_ops {
	size_t size;

	/* ---- parameters and gradients ---- */
	int (*nparams)(apf_ctx *ctx);
	int (*param_info)(apf_ctx *ctx, int i, apf_param_info *out);
	apf_vec (*param)(apf_ctx *ctx, int i);
	apf_vec (*grad)(apf_ctx *ctx, int i);
	apf_vec (*params_flat)(apf_ctx *ctx); /* all parameters, contiguous */
	apf_vec (*grads_flat)(apf_ctx *ctx);
	/* Loss of a batch, its gradient written to the gradient vectors. */
	int (*loss_grad)(apf_ctx *ctx, const apf_batch *batch, double *loss);
	/* The next batch of training data (for data_selection). */
	int (*next_batch)(apf_ctx *ctx, const apf_batch **out);

	/* ---- state slots ---- */
	/* In init_optimizer_state: allocates a zeroed vector of n floats named
	 * `name`. Later (n == 0): finds it. */
	int (*slot)(apf_ctx *ctx, const char *name, size_t n, apf_vec *out);
	/* A persistent double, allocated and found the same way. */
	int (*scalar)(apf_ctx *ctx, const char *name, double **out);

	/* ---- hyperparameters (absent ones give the default) ---- */
	double (*hparam)(const apf_hparams *hp, const char *name, double dflt);
	const char *(*hparam_word)(const apf_hparams *hp, const char *name,
				   const char *dflt);
	int (*hparam_has)(const apf_hparams *hp, const char *name);

	/* ---- vector operations; outputs may alias inputs ---- */
	void (*fill)(apf_ctx *ctx, apf_vec x, float v);
	void (*copy)(apf_ctx *ctx, apf_vec dst, apf_vec src);
	void (*scale)(apf_ctx *ctx, apf_vec x, float a);             /* x *= a */
	void (*axpy)(apf_ctx *ctx, apf_vec y, float a, apf_vec x);   /* y += a x */
	void (*axpby)(apf_ctx *ctx, apf_vec y, float a, apf_vec x,
		      float b);                                      /* y = a x + b y */
	void (*add_scalar)(apf_ctx *ctx, apf_vec x, float a);        /* x += a */
	void (*mul)(apf_ctx *ctx, apf_vec z, apf_vec x, apf_vec y);  /* z = x y */
	void (*div)(apf_ctx *ctx, apf_vec z, apf_vec x, apf_vec y);  /* z = x / y */
	void (*sqrt)(apf_ctx *ctx, apf_vec y, apf_vec x);            /* y = sqrt x */
	void (*max)(apf_ctx *ctx, apf_vec z, apf_vec x, apf_vec y);  /* z = max(x, y) */
	void (*clamp)(apf_ctx *ctx, apf_vec x, float lo, float hi);
	/* m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2 */
	void (*moments)(apf_ctx *ctx, apf_vec m, apf_vec v, apf_vec g, float b1,
			float b2);
	/* d = (m c1) / (sqrt(v c2) + eps) */
	void (*adam_direction)(apf_ctx *ctx, apf_vec d, apf_vec m, apf_vec v,
			       float c1, float c2, float eps);
	/* Reductions, accumulated in double in a fixed order. */
	double (*dot)(apf_ctx *ctx, apf_vec x, apf_vec y);
	double (*sum)(apf_ctx *ctx, apf_vec x);
	double (*norm2)(apf_ctx *ctx, apf_vec x);
	double (*max_abs)(apf_ctx *ctx, apf_vec x);

	/* ---- the rest ---- */
	int (*workload)(apf_ctx *ctx, apf_workload_info *out);
	/* A sub-vector: n floats from offset (bounds checked). */
	apf_vec (*slice)(apf_ctx *ctx, apf_vec x, size_t offset, size_t n);
	/* A diagnostic line in the trial's output (rate-limited). */
	void (*log)(apf_ctx *ctx, const char *message);
	/* Uniform in [0, 1): word `index` of the stream. */
	double (*uniform)(apf_prng rng, uint64_t index);

	/* ==== ABI 2 (size > offsetof(struct apf_ops, sub)) ====
	 *
	 * Elementwise, outputs may alias inputs, the same bits on every CPU
	 * instruction-set path and thread count (and the CUDA plugin's):
	 * each is one IEEE operation rounded once, or (exp, ln, pow) computed
	 * in double by apf's own fixed sequence of operations and rounded
	 * once to float, within one float ulp of the true value. IEEE
	 * special values propagate as stated; nothing is refused.
	 * Subnormals: under the CPU backend's numerics 3 (the default since
	 * 2026-12-06; run.json's "numerics") a subnormal input reads as a
	 * zero of its sign and a subnormal result is written as one, in
	 * these operations and in the submission's own float arithmetic
	 * alike (x86's DAZ and FTZ: each subnormal result costs an Intel
	 * core a microcode assist otherwise). Under 1 and 2 they are IEEE's. The
	 * CUDA plugin keeps IEEE subnormals. */
	void (*sub)(apf_ctx *ctx, apf_vec z, apf_vec x, apf_vec y);  /* z = x - y */
	/* z = x < y ? x : y (as max: a NaN in y is kept, one in x is not) */
	void (*min)(apf_ctx *ctx, apf_vec z, apf_vec x, apf_vec y);
	/* y = -1, +1 by the sign of x; a zero stays the same zero; NaN stays */
	void (*sign)(apf_ctx *ctx, apf_vec y, apf_vec x);
	void (*abs)(apf_ctx *ctx, apf_vec y, apf_vec x);             /* y = |x| */
	/* y = e^x: inf past 88.72, 0 below -103.97, NaN stays */
	void (*exp)(apf_ctx *ctx, apf_vec y, apf_vec x);
	/* y = ln x: -inf at +-0, NaN below 0, inf at inf */
	void (*ln)(apf_ctx *ctx, apf_vec y, apf_vec x);
	void (*reciprocal)(apf_ctx *ctx, apf_vec y, apf_vec x);      /* y = 1 / x */
	/* y = 1 / sqrt(x + eps) (NaN where x + eps < 0) */
	void (*rsqrt)(apf_ctx *ctx, apf_vec y, apf_vec x, float eps);
	/* y = x^p as C's pow: x < 0 gives NaN unless p is an integer, 0^p
	 * is 0 (p > 0), 1 (p == 0) or inf (p < 0) */
	void (*pow)(apf_ctx *ctx, apf_vec y, apf_vec x, float p);
	/* z = 1 where x and y are both > 0 or both < 0 (compared, not
	 * multiplied, so a product that underflows still counts), else 0:
	 * the mask of Cautious optimizers */
	void (*agree)(apf_ctx *ctx, apf_vec z, apf_vec x, apf_vec y);
	/* z = c > 0 ? x : y */
	void (*select)(apf_ctx *ctx, apf_vec z, apf_vec c, apf_vec x, apf_vec y);

	/* Matrices. A parameter's view (and its gradient's) is rows =
	 * shape[0], cols = the product of the other dimensions: a linear or
	 * attention weight (out, in) is out x in, a convolution weight
	 * (out, kh, kw, in) out x kh*kw*in, an embedding (rows, dim) rows x
	 * dim; a one-dimensional parameter (bias, norm scale) is 1 x n. */
	apf_mat (*param_mat)(apf_ctx *ctx, int i);
	apf_mat (*grad_mat)(apf_ctx *ctx, int i);
	/* A contiguous vector as rows x cols (rows cols == x.n). */
	apf_mat (*mat_of)(apf_ctx *ctx, apf_vec x, int rows, int cols);
	/* rows x cols of m from (r0, c0), m's ld. */
	apf_mat (*block)(apf_ctx *ctx, apf_mat m, int r0, int c0, int rows,
			 int cols);
	/* C = alpha op(A) op(B) + beta C, op transposing when trans_* is 1;
	 * shapes checked; C may not overlap A or B. Each output is summed in
	 * k order (CPU: fma, the same bits on every path and thread count;
	 * CUDA: the plugin's fixed-order kernel). beta == 0 ignores C's old
	 * values (NaN included). */
	void (*matmul)(apf_ctx *ctx, apf_mat c, float alpha, apf_mat a,
		       int trans_a, apf_mat b, int trans_b, float beta);
	/* dst = src, view to view of the same shape (no overlap). */
	void (*copy_mat)(apf_ctx *ctx, apf_mat dst, apf_mat src);
	/* out[r] = sum over c of a(r, c)^2 (out: rows floats), and out[c] =
	 * sum over r (cols floats): factored second moments. Accumulated in
	 * double in index order, rounded once. */
	void (*row_sumsq)(apf_ctx *ctx, apf_vec out, apf_mat a);
	void (*col_sumsq)(apf_ctx *ctx, apf_vec out, apf_mat a);
	/* out = (S + ridge I)^(-1/p) for S the symmetric part (A + A^T)/2 of
	 * the n x n matrix A, p > 0, ridge >= 0: S's eigendecomposition in
	 * double (Householder tridiagonalisation, then implicit QL), its
	 * eigenvalues at most n 2^-52 of the largest (below 0, or within the
	 * decomposition's rounding of 0) taken as 0, each lambda mapped to
	 * (lambda + ridge)^(-1/p); an eigenvalue that maps to inf or NaN
	 * (ridge 0 and a null space) fails the call. out may be A. O(n^3) on the host (device matrices
	 * are copied); n at most 4096. */
	void (*inv_root)(apf_ctx *ctx, apf_mat out, apf_mat a, double p,
			 double ridge);
	/* Scratch: n floats of backend memory for work within this call of
	 * the submission, neither state nor checkpointed. Every call of
	 * init_optimizer_state, update_params, prepare_for_eval and
	 * data_selection starts with all scratch released; its contents at
	 * the first use are unspecified (not zeroed), so what a submission
	 * carries in it from call to call is lost in a resumed or replayed
	 * interval, which `apf verify --replay` reports as a divergence. At
	 * most 2^28 floats (1 GiB) at once. */
	int (*scratch)(apf_ctx *ctx, size_t n, apf_vec *out);
};

/* The context begins with the table; the rest is the harness's. */
struct apf_ctx {
	const struct apf_ops *ops;
};

/* ---- short forms --------------------------------------------------------- */

static inline int apf_nparams(apf_ctx *c) { return c->ops->nparams(c); }
static inline int apf_get_param(apf_ctx *c, int i, apf_param_info *o) { return c->ops->param_info(c, i, o); }
static inline apf_vec apf_param_vec(apf_ctx *c, int i) { return c->ops->param(c, i); }
static inline apf_vec apf_grad_vec(apf_ctx *c, int i) { return c->ops->grad(c, i); }
static inline apf_vec apf_all_params(apf_ctx *c) { return c->ops->params_flat(c); }
static inline apf_vec apf_all_grads(apf_ctx *c) { return c->ops->grads_flat(c); }
static inline int apf_loss_grad(apf_ctx *c, const apf_batch *b, double *loss) { return c->ops->loss_grad(c, b, loss); }
static inline int apf_next_batch(apf_ctx *c, const apf_batch **b) { return c->ops->next_batch(c, b); }
static inline int apf_slot(apf_ctx *c, const char *name, size_t n, apf_vec *o) { return c->ops->slot(c, name, n, o); }
static inline int apf_scalar(apf_ctx *c, const char *name, double **o) { return c->ops->scalar(c, name, o); }
static inline double apf_hp(apf_ctx *c, const apf_hparams *h, const char *name, double dflt) { return c->ops->hparam(h, name, dflt); }
static inline const char *apf_hp_word(apf_ctx *c, const apf_hparams *h, const char *name, const char *dflt) { return c->ops->hparam_word(h, name, dflt); }
static inline int apf_hp_has(apf_ctx *c, const apf_hparams *h, const char *name) { return c->ops->hparam_has(h, name); }
static inline void apf_fill(apf_ctx *c, apf_vec x, float v) { c->ops->fill(c, x, v); }
static inline void apf_copy(apf_ctx *c, apf_vec d, apf_vec s) { c->ops->copy(c, d, s); }
static inline void apf_scale(apf_ctx *c, apf_vec x, float a) { c->ops->scale(c, x, a); }
static inline void apf_axpy(apf_ctx *c, apf_vec y, float a, apf_vec x) { c->ops->axpy(c, y, a, x); }
static inline void apf_axpby(apf_ctx *c, apf_vec y, float a, apf_vec x, float b) { c->ops->axpby(c, y, a, x, b); }
static inline void apf_add_scalar(apf_ctx *c, apf_vec x, float a) { c->ops->add_scalar(c, x, a); }
static inline void apf_mul(apf_ctx *c, apf_vec z, apf_vec x, apf_vec y) { c->ops->mul(c, z, x, y); }
static inline void apf_div(apf_ctx *c, apf_vec z, apf_vec x, apf_vec y) { c->ops->div(c, z, x, y); }
static inline void apf_sqrt(apf_ctx *c, apf_vec y, apf_vec x) { c->ops->sqrt(c, y, x); }
static inline void apf_max(apf_ctx *c, apf_vec z, apf_vec x, apf_vec y) { c->ops->max(c, z, x, y); }
static inline void apf_clamp(apf_ctx *c, apf_vec x, float lo, float hi) { c->ops->clamp(c, x, lo, hi); }
static inline void apf_moments(apf_ctx *c, apf_vec m, apf_vec v, apf_vec g, float b1, float b2) { c->ops->moments(c, m, v, g, b1, b2); }
static inline void apf_adam_direction(apf_ctx *c, apf_vec d, apf_vec m, apf_vec v, float c1, float c2, float eps) { c->ops->adam_direction(c, d, m, v, c1, c2, eps); }
static inline double apf_dot(apf_ctx *c, apf_vec x, apf_vec y) { return c->ops->dot(c, x, y); }
static inline double apf_sum(apf_ctx *c, apf_vec x) { return c->ops->sum(c, x); }
static inline double apf_norm2(apf_ctx *c, apf_vec x) { return c->ops->norm2(c, x); }
static inline double apf_max_abs(apf_ctx *c, apf_vec x) { return c->ops->max_abs(c, x); }
static inline apf_vec apf_slice(apf_ctx *c, apf_vec x, size_t off, size_t n) { return c->ops->slice(c, x, off, n); }
static inline int apf_get_workload(apf_ctx *c, apf_workload_info *o) { return c->ops->workload(c, o); }
static inline void apf_log(apf_ctx *c, const char *m) { c->ops->log(c, m); }
static inline double apf_uniform(apf_ctx *c, apf_prng r, uint64_t i) { return c->ops->uniform(r, i); }

/* ABI 2 */
static inline void apf_sub(apf_ctx *c, apf_vec z, apf_vec x, apf_vec y) { c->ops->sub(c, z, x, y); }
static inline void apf_min(apf_ctx *c, apf_vec z, apf_vec x, apf_vec y) { c->ops->min(c, z, x, y); }
static inline void apf_sign(apf_ctx *c, apf_vec y, apf_vec x) { c->ops->sign(c, y, x); }
static inline void apf_abs(apf_ctx *c, apf_vec y, apf_vec x) { c->ops->abs(c, y, x); }
static inline void apf_exp(apf_ctx *c, apf_vec y, apf_vec x) { c->ops->exp(c, y, x); }
static inline void apf_ln(apf_ctx *c, apf_vec y, apf_vec x) { c->ops->ln(c, y, x); }
static inline void apf_reciprocal(apf_ctx *c, apf_vec y, apf_vec x) { c->ops->reciprocal(c, y, x); }
static inline void apf_rsqrt(apf_ctx *c, apf_vec y, apf_vec x, float eps) { c->ops->rsqrt(c, y, x, eps); }
static inline void apf_pow(apf_ctx *c, apf_vec y, apf_vec x, float p) { c->ops->pow(c, y, x, p); }
static inline void apf_agree(apf_ctx *c, apf_vec z, apf_vec x, apf_vec y) { c->ops->agree(c, z, x, y); }
static inline void apf_select(apf_ctx *c, apf_vec z, apf_vec m, apf_vec x, apf_vec y) { c->ops->select(c, z, m, x, y); }
static inline apf_mat apf_param_mat(apf_ctx *c, int i) { return c->ops->param_mat(c, i); }
static inline apf_mat apf_grad_mat(apf_ctx *c, int i) { return c->ops->grad_mat(c, i); }
static inline apf_mat apf_mat_of(apf_ctx *c, apf_vec x, int rows, int cols) { return c->ops->mat_of(c, x, rows, cols); }
static inline apf_mat apf_block(apf_ctx *c, apf_mat m, int r0, int c0, int rows, int cols) { return c->ops->block(c, m, r0, c0, rows, cols); }
static inline void apf_matmul(apf_ctx *c, apf_mat C, float alpha, apf_mat A, int ta, apf_mat B, int tb, float beta) { c->ops->matmul(c, C, alpha, A, ta, B, tb, beta); }
static inline void apf_copy_mat(apf_ctx *c, apf_mat d, apf_mat s) { c->ops->copy_mat(c, d, s); }
static inline void apf_row_sumsq(apf_ctx *c, apf_vec o, apf_mat a) { c->ops->row_sumsq(c, o, a); }
static inline void apf_col_sumsq(apf_ctx *c, apf_vec o, apf_mat a) { c->ops->col_sumsq(c, o, a); }
static inline void apf_inv_root(apf_ctx *c, apf_mat o, apf_mat a, double p, double ridge) { c->ops->inv_root(c, o, a, p, ridge); }
static inline int apf_scratch(apf_ctx *c, size_t n, apf_vec *o) { return c->ops->scratch(c, n, o); }

#ifdef __cplusplus
}
#endif

#endif
