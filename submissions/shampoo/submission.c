/*
 * Shampoo with Adam grafting: AlgoPerf v0.5's external-tuning winner,
 * Distributed Shampoo (Shi et al., 2023, "A Distributed Data-Parallel
 * PyTorch Implementation of the Distributed Shampoo Optimizer for Training
 * Neural Networks At-Scale", arXiv:2309.06497; Gupta et al., 2018; Anil et
 * al., 2020), written for apf from the published mathematics and the
 * hyperparameters of mlcommons/submissions_algorithms,
 * previous_leaderboards/algoperf_v05/submissions/external_tuning/
 * shampoo_submission (tuning_search_space.json: five points, the first of
 * which are apf_hp()'s defaults here).
 *
 * Each parameter is seen through its matrix view (rows x cols, ops.h) and
 * cut into blocks of at most B = max_preconditioner_dim rows and columns,
 * as the published optimizer blocks its merged dimensions:
 *
 *   - a matrix view with rows, cols > 1 and rows cols > B: order 2, blocks
 *     G of the row and column splits, each with factors
 *       L = b2 L + (1 - b2) G G^T      R = b2 R + (1 - b2) G^T G
 *     and the direction L^(-1/4) G R^(-1/4);
 *   - a vector (bias, norm scale: 1 x n), or a matrix with a dimension of
 *     1 or at most B elements in all: order 1, its flat values cut into
 *     chunks g of at most B, each with one full factor L = b2 L +
 *     (1 - b2) g g^T and the direction L^(-1/2) g. The published
 *     optimizer does this for every one-dimensional tensor (its default
 *     root is 2 x the order): neither Adam-only nor diagonal;
 *   - a parameter with a dimension of 1,000,000 or more: Adam only, as the
 *     published submission gives such embedding tables to a second
 *     optimizer that never preconditions.
 *
 * apf's arena holds slots of at most 16 times the parameters; where the
 * factors, roots and moments would need more (a vector or a small matrix
 * of up to B values has a B^2 factor: fmnist_cnn needs 35 times with the
 * published B of 1024, clicks_dlrm 85), B is halved until they fit, and
 * the trial's log says so (fmnist_mlp and text_lm keep 1024).
 *
 * The roots are (L / (1 - b2^t) + epsilon I)^(-exponent_multiplier/root),
 * root = 2 x order or inv_root_override, by apf_inv_root (eigenvalues
 * below 0 or within n ulps of the largest taken as 0; the published code
 * shifts all of them up by the most negative one instead, a difference
 * of rounding only), computed at
 * step start_preconditioning_step (-1: precondition_frequency) and every
 * precondition_frequency steps after it, and kept in a slot with the
 * factors, so that a resumed trial has them. Before the start the step is
 * the grafted method's alone. Each step t (from 1):
 *
 *   m = b1 m + (1 - b1) g;  F = (use_nadam ? b1 m + (1 - b1) g : m) / (1 - b1^t)
 *   v = b2 v + (1 - b2) g^2;  A = F / (sqrt(v / (1 - b2^t)) + grafting_epsilon)
 *     (grafting_type ADAM; SGD: A = F)
 *   D = A before the start, else per block P = precond(F),
 *       D = P ||A_block|| / (||P|| + 1e-16)
 *   D += weight_decay w                                  (decoupled)
 *   use_momentum: M = mu M + (1 - mu) D;  D = (1 - mu) D + mu M   (Nesterov)
 *   w -= lr_t D
 *
 * with lr_t linear warmup over floor(warmup_factor T) steps then cosine
 * decay to 0 at T = step_hint_factor x step_hint (constant after the
 * warmup without use_cosine_decay). The published scheduler starts its
 * warmup at 1e-10 lr, apf_warmup_cosine at 0, and PyTorch's cosine rises
 * again past T where apf's stays at 0.
 *
 * What differs from the published optimizer, by apf's means: a
 * convolution's view is out x (kh kw in), one order-2 block grid, where
 * the published merges PyTorch's (out, in, kh, kw) greedily and may keep
 * three dimensions; the factors and roots are float32 with the root's
 * eigendecomposition in double (published: float32, double on failure);
 * single process, so its communication settings (communication_dtype,
 * communicate_params) do not apply and are not in the search space, and
 * neither is use_normalized_grafting (false in every published point).
 * Batch sizes are apf's, as its baselines choose them.
 *
 * State: slots m, v (and M with momentum) of every parameter's size, and
 * the factors and their roots, one slot each, laid out block after block
 * in parameter order (the layout follows from the parameters and B
 * alone); the step count t. Work vectors are scratch.
 *
 * Self-tuning: apf packs one ruleset per folder. This folder is the
 * external-tuning entry (tuning_search_space.ini, the published points);
 * the self-tuning entry is a copy of it with `ruleset = self` in
 * submission.ini, which trains with the defaults below (point 1).
 */
#include <apf/schedule.h>
#include <apf/submission.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const int apf_abi_version = APF_ABI_VERSION;

#define GRAFT_NORM_EPS 1e-16
#define ADAM_ONLY_DIM 1000000
/* The slot space of a trial's arena in parameter-sized vectors
 * (pkg/host/host.c). */
#define ARENA_SLOT_FACTOR 16

int get_batch_size(const char *workload)
{
	if (!strncmp(workload, "fmnist_mlp", 10))
		return 256;
	if (!strncmp(workload, "text_lm", 7) ||
	    !strncmp(workload, "fmnist_unet", 11))
		return 32;
	return 128;
}

/* The hyperparameters, read in full at every call so that every name of
 * the search space is read by the end of the first step. */
struct hps {
	double lr, b1, b2, eps, mu, wd, warmup, step_hint_factor;
	double exponent_multiplier, graft_eps;
	int block, frequency, start, root_override, graft_adam, nadam,
	    cosine;
};

static int word_is(apf_ctx *ctx, const apf_hparams *hp, const char *name,
		   const char *dflt, const char *value)
{
	return !strcmp(apf_hp_word(ctx, hp, name, dflt), value);
}

static int read_hps(apf_ctx *ctx, const apf_hparams *hp, struct hps *h)
{
	h->lr = apf_hp(ctx, hp, "learning_rate", 0.0017486387539278373);
	h->b1 = 1.0 - apf_hp(ctx, hp, "one_minus_beta1", 0.06733926164);
	h->b2 = 1.0 - apf_hp(ctx, hp, "one_minus_beta2", 0.00448403102);
	h->eps = apf_hp(ctx, hp, "epsilon", 1e-8);
	double one_minus_mu = apf_hp(ctx, hp, "one_minus_momentum", 0.0);
	int use_momentum = word_is(ctx, hp, "use_momentum", "false", "true");
	h->mu = use_momentum ? 1.0 - one_minus_mu : 0.0;
	h->wd = apf_hp(ctx, hp, "weight_decay", 0.08121616522670176);
	h->block = (int)apf_hp(ctx, hp, "max_preconditioner_dim", 1024);
	h->frequency = (int)apf_hp(ctx, hp, "precondition_frequency", 100);
	h->start = (int)apf_hp(ctx, hp, "start_preconditioning_step", -1);
	h->root_override = (int)apf_hp(ctx, hp, "inv_root_override", 0);
	h->exponent_multiplier = apf_hp(ctx, hp, "exponent_multiplier", 1.0);
	const char *graft = apf_hp_word(ctx, hp, "grafting_type", "ADAM");
	h->graft_eps = apf_hp(ctx, hp, "grafting_epsilon", 1e-8);
	h->cosine = word_is(ctx, hp, "use_cosine_decay", "true", "true");
	h->warmup = apf_hp(ctx, hp, "warmup_factor", 0.02);
	h->nadam = word_is(ctx, hp, "use_nadam", "true", "true");
	h->step_hint_factor = apf_hp(ctx, hp, "step_hint_factor", 1.0);
	/* label_smoothing and dropout_rate go to the workload (the runner
	 * applies them); read here so the log does not call them unused. */
	(void)apf_hp(ctx, hp, "label_smoothing", 0.0);
	(void)apf_hp(ctx, hp, "dropout_rate", 0.1);
	if (h->start == -1)
		h->start = h->frequency;
	h->graft_adam = !strcmp(graft, "ADAM");
	if (!h->graft_adam && strcmp(graft, "SGD")) {
		apf_log(ctx, "shampoo: grafting_type must be ADAM or SGD");
		return -1;
	}
	if (h->block < 1 || h->frequency < 1 || h->start < h->frequency ||
	    h->root_override < 0 || !(h->exponent_multiplier > 0) ||
	    !(h->b1 >= 0 && h->b1 < 1) || !(h->b2 > 0 && h->b2 <= 1) ||
	    !(h->mu >= 0 && h->mu < 1) || !(h->eps > 0)) {
		apf_log(ctx, "shampoo: a hyperparameter is out of range");
		return -1;
	}
	return 0;
}

/* The published schedule at k steps done: linear warmup over
 * floor(warmup_factor T) steps, then a cosine to 0 at T =
 * step_hint_factor x step_hint, or the peak from then on without
 * use_cosine_decay. */
static double schedule(const struct hps *h, int64_t k, double step_hint)
{
	double total = h->step_hint_factor * step_hint;
	if (h->cosine)
		return apf_warmup_cosine(h->lr, k, total, h->warmup);
	double warm = floor(h->warmup * total);
	return (double)k < warm ? h->lr * (double)k / warm : h->lr;
}

/* One preconditioned block. Order 2: rows x cols of the parameter's view
 * from (r0, c0), factors L (rows^2 floats at lfac) and R (cols^2 at
 * rfac). Order 1: n = rows floats of the flat parameter from off, one
 * factor L (n^2 at lfac). */
struct block {
	int param, order;
	int r0, c0, rows, cols;
	size_t off, lfac, rfac;
};

struct plan {
	struct block *b;
	int nblocks, B;       /* B: the block size the state fits with */
	size_t factor_floats; /* all factors; their roots take as many */
	size_t max_block;     /* the largest block's floats */
};

static int min_int(int a, int b)
{
	return a < b ? a : b;
}

/* The blocks of every parameter, in parameter order, each block's rows
 * before its columns; the same parameters and B give the same plan. */
static int plan_blocks(apf_ctx *ctx, int B, struct plan *pl)
{
	memset(pl, 0, sizeof *pl);
	pl->B = B;
	int np = apf_nparams(ctx), cap = 0;
	size_t fac = 0;
	for (int i = 0; i < np; i++) {
		apf_param_info info;
		if (apf_get_param(ctx, i, &info))
			return -1;
		int adam_only = 0;
		for (int d = 0; d < info.ndim; d++)
			adam_only |= info.shape[d] >= ADAM_ONLY_DIM;
		if (adam_only)
			continue;
		apf_mat w = apf_param_mat(ctx, i);
		int order2 = w.rows > 1 && w.cols > 1 &&
			     (size_t)w.rows * (size_t)w.cols > (size_t)B;
		for (int r0 = 0; r0 < (order2 ? w.rows : 1); r0 += B)
			for (size_t c0 = 0; c0 < (order2 ? (size_t)w.cols
							 : info.numel);
			     c0 += (size_t)B) {
				if (pl->nblocks == cap) {
					cap = cap ? 2 * cap : 64;
					struct block *nb = realloc(
						pl->b, (size_t)cap * sizeof *nb);
					if (!nb) {
						free(pl->b);
						return -1;
					}
					pl->b = nb;
				}
				struct block *b = &pl->b[pl->nblocks++];
				memset(b, 0, sizeof *b);
				b->param = i;
				b->order = order2 ? 2 : 1;
				if (order2) {
					b->r0 = r0, b->c0 = (int)c0;
					b->rows = min_int(B, w.rows - r0);
					b->cols = min_int(B, w.cols - (int)c0);
				} else {
					b->off = c0;
					b->rows = (int)(info.numel - c0 <
								(size_t)B
							? info.numel - c0
							: (size_t)B);
					b->cols = 1;
				}
				size_t nr = (size_t)b->rows, nc = (size_t)b->cols;
				b->lfac = fac;
				fac += nr * nr;
				if (order2) {
					b->rfac = fac;
					fac += nc * nc;
				}
				if (nr * nc > pl->max_block)
					pl->max_block = nr * nc;
			}
	}
	pl->factor_floats = fac;
	return 0;
}

/* The plan for B = max_preconditioner_dim, halved until the factors, the
 * roots and the parameter-sized slots fit the slot space apf's arena has:
 * ARENA_SLOT_FACTOR times the parameters. Small models with the
 * published B need more (fmnist_cnn 35 times, clicks_dlrm 85: a vector or
 * a small matrix of up to B values has a B^2 factor), so they run with
 * smaller blocks; what B a trial used is in its log. */
static int plan_make(apf_ctx *ctx, const struct hps *h, struct plan *pl)
{
	size_t n = apf_all_params(ctx).n;
	size_t vectors = h->mu != 0 ? 3 : 2; /* m, v and the momentum */
	for (int B = h->block;; B /= 2) {
		if (plan_blocks(ctx, B, pl))
			return -1;
		if (B == 1 || 2 * pl->factor_floats + vectors * n <=
				      (size_t)ARENA_SLOT_FACTOR * n)
			return 0;
		free(pl->b);
	}
}

/* n x n at offset off of a slot. */
static apf_mat square(apf_ctx *ctx, apf_vec slot, size_t off, int n)
{
	return apf_mat_of(ctx, apf_slice(ctx, slot, off, (size_t)n * n), n, n);
}

/* The block's view of a flat vector laid out like the parameters. */
static apf_mat block_of(apf_ctx *ctx, apf_vec flat, const struct block *b)
{
	apf_param_info info;
	apf_get_param(ctx, b->param, &info);
	apf_vec p = apf_slice(ctx, flat, info.offset, info.numel);
	if (b->order == 1)
		return apf_mat_of(ctx, apf_slice(ctx, p, b->off, (size_t)b->rows),
				  b->rows, 1);
	apf_mat w = apf_param_mat(ctx, b->param);
	return apf_block(ctx, apf_mat_of(ctx, p, w.rows, w.cols), b->r0, b->c0,
			 b->rows, b->cols);
}

int init_optimizer_state(apf_ctx *ctx, const apf_hparams *hp, apf_prng rng)
{
	(void)rng;
	struct hps h;
	struct plan pl;
	if (read_hps(ctx, hp, &h) || plan_make(ctx, &h, &pl))
		return -1;
	if (pl.B != h.block) {
		char msg[160];
		snprintf(msg, sizeof msg,
			 "shampoo: blocks of at most %d, not %d, for the "
			 "factors to fit the arena",
			 pl.B, h.block);
		apf_log(ctx, msg);
	}
	size_t n = apf_all_params(ctx).n;
	apf_vec s;
	double *t;
	int rc = apf_slot(ctx, "m", n, &s) || apf_slot(ctx, "v", n, &s) ||
		 (h.mu != 0 && apf_slot(ctx, "momentum", n, &s)) ||
		 apf_scalar(ctx, "t", &t);
	/* A model with nothing to precondition has no factors. */
	if (!rc && pl.factor_floats)
		rc = apf_slot(ctx, "factors", pl.factor_floats, &s) ||
		     apf_slot(ctx, "roots", pl.factor_floats, &s);
	free(pl.b);
	if (rc)
		return -1;
	*t = 0;
	return 0;
}

/* (1 - b2) G G^T + b2 L into L, or the sum with b2 = 1, as published. */
static void factor_update(apf_ctx *ctx, apf_mat f, apf_mat g, int trans,
			  double b2)
{
	float alpha = b2 != 1.0 ? (float)(1.0 - b2) : 1.0f;
	apf_matmul(ctx, f, alpha, g, trans, g, !trans, (float)b2);
}

/* The root slot's square gets (factor / bc2 + eps I)^(-1/p). */
static void refresh_root(apf_ctx *ctx, apf_vec fac, apf_vec root, size_t off,
			 int n, double bc2, double p, double eps)
{
	apf_vec f = apf_slice(ctx, fac, off, (size_t)n * n);
	apf_vec r = apf_slice(ctx, root, off, (size_t)n * n);
	apf_copy(ctx, r, f);
	apf_scale(ctx, r, (float)(1.0 / bc2));
	apf_mat rm = apf_mat_of(ctx, r, n, n);
	apf_inv_root(ctx, rm, rm, p, eps);
}

int update_params(apf_ctx *ctx, const apf_hparams *hp, const apf_batch *batch,
		  const apf_eval_results *last_eval, int64_t global_step,
		  apf_prng rng, const apf_train_state *ts)
{
	(void)last_eval;
	(void)global_step;
	(void)rng;
	struct hps h;
	struct plan pl = {0};
	if (read_hps(ctx, hp, &h))
		return -1;
	apf_vec w = apf_all_params(ctx), g = apf_all_grads(ctx);
	size_t n = w.n;
	apf_vec m, v, mom = {0}, fac = {0}, root = {0}, F, A, T = {0}, P = {0},
			  Ab = {0};
	double *t, loss;
	if (apf_slot(ctx, "m", 0, &m) || apf_slot(ctx, "v", 0, &v) ||
	    (h.mu != 0 && apf_slot(ctx, "momentum", 0, &mom)) ||
	    apf_scalar(ctx, "t", &t) || plan_make(ctx, &h, &pl))
		return -1;
	int rc = pl.factor_floats && (apf_slot(ctx, "factors", 0, &fac) ||
				      apf_slot(ctx, "roots", 0, &root));
	/* F: the filtered gradient; A: the grafted direction, then the
	 * step's direction in place; T, P, Ab: one block's work. */
	rc = rc || apf_scratch(ctx, n, &F) ||
	     (h.graft_adam && apf_scratch(ctx, n, &A)) ||
	     (pl.max_block && (apf_scratch(ctx, pl.max_block, &T) ||
			       apf_scratch(ctx, pl.max_block, &P) ||
			       apf_scratch(ctx, pl.max_block, &Ab)));
	if (rc || apf_loss_grad(ctx, batch, &loss)) {
		free(pl.b);
		return -1;
	}
	double lr = schedule(&h, (int64_t)*t, (double)ts->step_hint);
	*t += 1;
	int64_t step = (int64_t)*t;
	double bc1 = 1.0 - pow(h.b1, (double)step);
	double bc2 = h.b2 < 1.0 ? 1.0 - pow(h.b2, (double)step) : 1.0;

	/* Factors from the raw gradient, then their roots when due. */
	int refresh = step == h.start ||
		      (step > h.start && step % h.frequency == 0);
	for (int k = 0; k < pl.nblocks; k++) {
		const struct block *b = &pl.b[k];
		apf_mat gb = block_of(ctx, g, b);
		factor_update(ctx, square(ctx, fac, b->lfac, b->rows), gb, 0,
			      h.b2);
		if (b->order == 2)
			factor_update(ctx, square(ctx, fac, b->rfac, b->cols),
				      gb, 1, h.b2);
		if (!refresh)
			continue;
		int r = h.root_override ? h.root_override : 2 * b->order;
		double p = r / h.exponent_multiplier;
		refresh_root(ctx, fac, root, b->lfac, b->rows, bc2, p, h.eps);
		if (b->order == 2)
			refresh_root(ctx, fac, root, b->rfac, b->cols, bc2, p,
				     h.eps);
	}

	/* Filtered gradient and the grafted method's direction. */
	apf_moments(ctx, m, v, g, (float)h.b1, (float)h.b2);
	apf_copy(ctx, F, m);
	if (h.nadam)
		apf_axpby(ctx, F, (float)(1.0 - h.b1), g, (float)h.b1);
	apf_scale(ctx, F, (float)(1.0 / bc1));
	if (h.graft_adam)
		apf_adam_direction(ctx, A, F, v, 1.0f, (float)(1.0 / bc2),
				   (float)h.graft_eps);
	else
		A = F; /* SGD grafting; each block reads F before its write */

	/* From the start: Shampoo's direction per block, at the norm of the
	 * grafted one's block. */
	for (int k = 0; step >= h.start && k < pl.nblocks; k++) {
		const struct block *b = &pl.b[k];
		size_t nb = (size_t)b->rows * (size_t)b->cols;
		apf_mat fb = block_of(ctx, F, b), ab = block_of(ctx, A, b);
		apf_mat pm = apf_mat_of(ctx, apf_slice(ctx, P, 0, nb), b->rows,
					b->cols);
		apf_mat L = square(ctx, root, b->lfac, b->rows);
		if (b->order == 2) {
			apf_mat tm = apf_mat_of(ctx, apf_slice(ctx, T, 0, nb),
						b->rows, b->cols);
			apf_matmul(ctx, tm, 1.0f, L, 0, fb, 0, 0.0f);
			apf_matmul(ctx, pm, 1.0f, tm, 0,
				   square(ctx, root, b->rfac, b->cols), 0, 0.0f);
		} else {
			apf_matmul(ctx, pm, 1.0f, L, 0, fb, 0, 0.0f);
		}
		/* The grafted block's norm, from a copy where the block is
		 * not contiguous. */
		apf_vec av = ab.v;
		if (ab.ld != ab.cols) {
			apf_mat abm = apf_mat_of(ctx, apf_slice(ctx, Ab, 0, nb),
						 b->rows, b->cols);
			apf_copy_mat(ctx, abm, ab);
			av = abm.v;
		}
		double graft = apf_norm2(ctx, av);
		double pn = apf_norm2(ctx, pm.v);
		apf_scale(ctx, pm.v, (float)(graft / (pn + GRAFT_NORM_EPS)));
		apf_copy_mat(ctx, ab, pm);
	}
	free(pl.b);

	if (h.wd != 0)
		apf_axpy(ctx, A, (float)h.wd, w);
	if (h.mu != 0) {
		apf_axpby(ctx, mom, (float)(1.0 - h.mu), A, (float)h.mu);
		apf_axpby(ctx, A, (float)h.mu, mom, (float)(1.0 - h.mu));
	}
	apf_axpy(ctx, w, (float)-lr, A);
	return 0;
}
