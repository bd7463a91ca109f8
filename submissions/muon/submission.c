/*
 * Muon: momentum orthogonalised by Newton-Schulz for the hidden matrices,
 * AdamW for the rest (Jordan et al., 2024, "Muon: An optimizer for hidden
 * layers in neural networks"; Liu et al., 2025, "Muon is Scalable for LLM
 * Training", arXiv:2502.16982), written for apf from the published
 * mathematics and the defaults of AlgoPerf's self-tuning MuonTorch
 * submission (mlcommons/submissions_algorithms, submissions/self_tuning/
 * muon_torch, scored 0.423 in results/scores.csv of branch a100_scoring,
 * Ajroldi): apf_hp()'s defaults below are its HPARAMS.
 *
 * Which rule a parameter gets, by apf's kinds: Muon for every parameter of
 * two or more dimensions (weights, convolution weights, attention
 * projections, the output layer included) except embeddings; AdamW for
 * embeddings (token and position) and every one-dimensional parameter
 * (biases, norm scales and biases), as the published split does (AdamW
 * for what is named embedding or embed_tokens and for one dimension, the
 * output layer in Muon).
 *
 * Muon, each step t (from 1), a parameter's gradient g as its matrix view
 * (rows x cols, ops.h), momentum M:
 *
 *   M = beta M + (1 - beta) g
 *   U = nesterov ? (1 - beta) g + beta M : M
 *   X = U / (||U||_F + ns_eps), transposed when rows > cols (s = the
 *       smaller dimension), then ns_steps times, in float32:
 *         A = X X^T (s x s);  B = b A + c A A;  X = a X + B X
 *       with (a, b, c) = (3.4445, -4.7750, 2.0315)
 *   w = w (1 - lr_t weight_decay) - lr_t scale X
 *
 * The transposes are apf_matmul's flags: X stays rows x cols, and a tall
 * one computes A = X^T X and X = a X + X B^T. The published iteration runs
 * in bfloat16; this one in float32. The scale is the published default,
 * muon_adjust_lr = spectral_norm: max(1, sqrt(fan_out / fan_in)), the RMS
 * to RMS operator norm of an orthogonal update (Bernstein's modular norm,
 * arXiv:2310.17813), with fan_out, fan_in the first two of PyTorch's
 * dimensions: out and in, also for a convolution (apf's (out, kh, kw, in)
 * gives in as its last). match_adam gives 0.2 sqrt(max(fan_out, fan_in))
 * (Liu et al.'s scale, matching AdamW's update RMS) and none gives 1.
 *
 * AdamW (PyTorch's): w *= 1 - lr_t adamw_weight_decay; m, v the moments
 * of g with adamw_beta1, adamw_beta2; w -= lr_t m / (1 - b1^t) /
 * (sqrt(v / (1 - b2^t)) + adamw_eps).
 *
 * Both share lr_t: linear warmup over floor(warmup_factor step_hint)
 * steps, then a cosine to 0 at floor(step_reduce step_hint), where
 * training ends (APF_TRAINING_COMPLETE), as published. The published
 * warmup starts at 1e-10 lr, this one at 0. dropout_rate 0.1 and
 * label_smoothing 0.1 are published defaults that the runner applies from
 * the hyperparameters (docs/submitting.md): the search space carries them;
 * a self-tuning entry, which has none, trains the workload as it is.
 * Batch sizes are apf's, as its baselines choose them.
 *
 * State: slot m (every parameter: Muon's momentum, AdamW's first moment),
 * slot v (the AdamW parameters' second moments, in parameter order), the
 * step count t. The iteration's matrices are scratch.
 *
 * Self-tuning: apf packs one ruleset per folder. This folder is the
 * external-tuning entry (tuning_search_space.ini: apf's space around the
 * published defaults, the published values as single points where it does
 * not search); the self-tuning entry, the published submission's own
 * ruleset, is a copy of it with `ruleset = self` in submission.ini, which
 * trains with the defaults below.
 */
#include <apf/submission.h>
#include <math.h>
#include <string.h>

const int apf_abi_version = APF_ABI_VERSION;

#define NS_A 3.4445f
#define NS_B -4.7750f
#define NS_C 2.0315f

int get_batch_size(const char *workload)
{
	if (!strncmp(workload, "fmnist_mlp", 10))
		return 256;
	if (!strncmp(workload, "text_lm", 7) ||
	    !strncmp(workload, "fmnist_unet", 11))
		return 32;
	return 128;
}

enum adjust { ADJUST_NONE, ADJUST_SPECTRAL, ADJUST_ADAM };

/* Read in full at every call, so every name of the search space is read
 * by the end of the first step. */
struct hps {
	double lr, muon_wd, beta, ns_eps, adam_wd, b1, b2, adam_eps, warmup,
		step_reduce;
	int nesterov, ns_steps;
	enum adjust adjust;
};

static int read_hps(apf_ctx *ctx, const apf_hparams *hp, struct hps *h)
{
	h->lr = apf_hp(ctx, hp, "learning_rate", 0.01);
	h->muon_wd = apf_hp(ctx, hp, "muon_weight_decay", 0.0);
	h->beta = apf_hp(ctx, hp, "muon_beta", 0.9);
	const char *adj = apf_hp_word(ctx, hp, "muon_adjust_lr",
				      "spectral_norm");
	h->nesterov = !strcmp(apf_hp_word(ctx, hp, "muon_nesterov", "true"),
			      "true");
	h->ns_steps = (int)apf_hp(ctx, hp, "muon_ns_steps", 5);
	h->ns_eps = apf_hp(ctx, hp, "muon_ns_eps", 1e-7);
	h->adam_wd = apf_hp(ctx, hp, "adamw_weight_decay", 0.0);
	h->b1 = apf_hp(ctx, hp, "adamw_beta1", 0.9);
	h->b2 = apf_hp(ctx, hp, "adamw_beta2", 0.999);
	h->adam_eps = apf_hp(ctx, hp, "adamw_eps", 1e-8);
	h->warmup = apf_hp(ctx, hp, "warmup_factor", 0.05);
	h->step_reduce = apf_hp(ctx, hp, "step_reduce", 1.0);
	/* The runner applies these two to the workload. */
	(void)apf_hp(ctx, hp, "dropout_rate", 0.1);
	(void)apf_hp(ctx, hp, "label_smoothing", 0.1);
	if (!strcmp(adj, "spectral_norm"))
		h->adjust = ADJUST_SPECTRAL;
	else if (!strcmp(adj, "match_adam"))
		h->adjust = ADJUST_ADAM;
	else if (!strcmp(adj, "none"))
		h->adjust = ADJUST_NONE;
	else {
		apf_log(ctx, "muon: muon_adjust_lr must be spectral_norm, "
			     "match_adam or none");
		return -1;
	}
	if (!(h->beta >= 0 && h->beta < 1) || h->ns_steps < 1 ||
	    !(h->ns_eps >= 0) || !(h->b1 >= 0 && h->b1 < 1) ||
	    !(h->b2 >= 0 && h->b2 < 1) || !(h->step_reduce > 0)) {
		apf_log(ctx, "muon: a hyperparameter is out of range");
		return -1;
	}
	return 0;
}

/* Muon's parameters: two or more dimensions, not an embedding. */
static int is_muon(const apf_param_info *p)
{
	return p->ndim >= 2 && p->kind != APF_KIND_EMBEDDING;
}

/* The published schedule at k steps done: linear warmup over
 * floor(warmup_factor step_hint) steps, then a cosine to 0 at
 * floor(step_reduce step_hint). */
static double schedule(const struct hps *h, int64_t k, int64_t step_hint)
{
	double warm = floor(h->warmup * (double)step_hint);
	double total = floor((double)step_hint * h->step_reduce);
	double s = (double)k;
	if (s < warm)
		return h->lr * s / warm;
	double x = (s - warm) / fmax(total - warm, 1.0);
	return h->lr * 0.5 * (1.0 + cos(3.14159265358979323846 * fmin(x, 1.0)));
}

static double lr_scale(const struct hps *h, const apf_param_info *p)
{
	double out = p->shape[0];
	double in = p->kind == APF_KIND_CONV_WEIGHT && p->ndim == 4
			    ? p->shape[3]
			    : p->shape[1];
	switch (h->adjust) {
	case ADJUST_SPECTRAL:
		return fmax(1.0, sqrt(out / in));
	case ADJUST_ADAM:
		return 0.2 * sqrt(fmax(out, in));
	default:
		return 1.0;
	}
}

int init_optimizer_state(apf_ctx *ctx, const apf_hparams *hp, apf_prng rng)
{
	(void)rng;
	struct hps h;
	if (read_hps(ctx, hp, &h))
		return -1;
	size_t nadam = 0;
	for (int i = 0; i < apf_nparams(ctx); i++) {
		apf_param_info p;
		if (apf_get_param(ctx, i, &p))
			return -1;
		if (!is_muon(&p))
			nadam += p.numel;
	}
	apf_vec s;
	double *t;
	if (apf_slot(ctx, "m", apf_all_params(ctx).n, &s) ||
	    (nadam && apf_slot(ctx, "v", nadam, &s)) ||
	    apf_scalar(ctx, "t", &t))
		return -1;
	*t = 0;
	return 0;
}

/* The Newton-Schulz orthogonalisation of U (rows x cols, contiguous) in X
 * or Y (views of the same shape; the steps alternate between them),
 * with A and B scratch of at least s^2 floats; returns the view that
 * holds it. */
static apf_mat newton_schulz(apf_ctx *ctx, const struct hps *h, apf_vec U,
			     apf_mat X, apf_mat Y, apf_vec A, apf_vec B)
{
	int tall = X.rows > X.cols, s = tall ? X.cols : X.rows;
	A = apf_slice(ctx, A, 0, (size_t)s * (size_t)s);
	B = apf_slice(ctx, B, 0, (size_t)s * (size_t)s);
	apf_mat Am = apf_mat_of(ctx, A, s, s), Bm = apf_mat_of(ctx, B, s, s);
	apf_copy(ctx, X.v, U);
	apf_scale(ctx, X.v,
		  (float)(1.0 / (apf_norm2(ctx, X.v) + h->ns_eps)));
	for (int k = 0; k < h->ns_steps; k++) {
		apf_matmul(ctx, Am, 1.0f, X, tall, X, !tall, 0.0f);
		apf_matmul(ctx, Bm, 1.0f, Am, 0, Am, 0, 0.0f);
		apf_axpby(ctx, B, NS_B, A, NS_C);
		if (tall)
			apf_matmul(ctx, Y, 1.0f, X, 0, Bm, 1, 0.0f);
		else
			apf_matmul(ctx, Y, 1.0f, Bm, 0, X, 0, 0.0f);
		apf_axpby(ctx, Y.v, NS_A, X.v, 1.0f);
		apf_mat swap = X;
		X = Y;
		Y = swap;
	}
	return X;
}

int update_params(apf_ctx *ctx, const apf_hparams *hp, const apf_batch *batch,
		  const apf_eval_results *last_eval, int64_t global_step,
		  apf_prng rng, const apf_train_state *ts)
{
	(void)last_eval;
	(void)rng;
	struct hps h;
	if (read_hps(ctx, hp, &h))
		return -1;
	if ((double)global_step >=
	    floor((double)ts->step_hint * h.step_reduce))
		return APF_TRAINING_COMPLETE;
	apf_vec m, v = {0}, U, X, Y, A, B, D;
	double *t, loss;
	int np = apf_nparams(ctx);
	size_t max_muon = 0, max_s = 0, nadam = 0, max_adam = 0;
	for (int i = 0; i < np; i++) {
		apf_param_info p;
		if (apf_get_param(ctx, i, &p))
			return -1;
		apf_mat w = apf_param_mat(ctx, i);
		size_t s = (size_t)(w.rows < w.cols ? w.rows : w.cols);
		if (is_muon(&p)) {
			max_muon = p.numel > max_muon ? p.numel : max_muon;
			max_s = s * s > max_s ? s * s : max_s;
		} else {
			nadam += p.numel;
			max_adam = p.numel > max_adam ? p.numel : max_adam;
		}
	}
	if (apf_slot(ctx, "m", 0, &m) || (nadam && apf_slot(ctx, "v", 0, &v)) ||
	    apf_scalar(ctx, "t", &t) ||
	    (max_muon && (apf_scratch(ctx, max_muon, &U) ||
			  apf_scratch(ctx, max_muon, &X) ||
			  apf_scratch(ctx, max_muon, &Y) ||
			  apf_scratch(ctx, max_s, &A) ||
			  apf_scratch(ctx, max_s, &B))) ||
	    (max_adam && apf_scratch(ctx, max_adam, &D)) ||
	    apf_loss_grad(ctx, batch, &loss))
		return -1;
	double lr = schedule(&h, (int64_t)*t, ts->step_hint);
	*t += 1;
	double bc1 = 1.0 - pow(h.b1, *t), bc2 = 1.0 - pow(h.b2, *t);
	size_t voff = 0;
	for (int i = 0; i < np; i++) {
		apf_param_info p;
		apf_get_param(ctx, i, &p);
		apf_vec w = apf_param_vec(ctx, i), g = apf_grad_vec(ctx, i);
		apf_vec mi = apf_slice(ctx, m, p.offset, p.numel);
		if (!is_muon(&p)) {
			apf_vec vi = apf_slice(ctx, v, voff, p.numel);
			apf_vec d = apf_slice(ctx, D, 0, p.numel);
			voff += p.numel;
			if (h.adam_wd != 0)
				apf_scale(ctx, w, (float)(1.0 - lr * h.adam_wd));
			apf_moments(ctx, mi, vi, g, (float)h.b1, (float)h.b2);
			apf_adam_direction(ctx, d, mi, vi, (float)(1.0 / bc1),
					   (float)(1.0 / bc2),
					   (float)h.adam_eps);
			apf_axpy(ctx, w, (float)-lr, d);
			continue;
		}
		apf_mat gm = apf_grad_mat(ctx, i);
		apf_vec u = apf_slice(ctx, U, 0, p.numel);
		apf_axpby(ctx, mi, (float)(1.0 - h.beta), g, (float)h.beta);
		if (h.nesterov) {
			apf_copy(ctx, u, g);
			apf_axpby(ctx, u, (float)h.beta, mi,
				  (float)(1.0 - h.beta));
		} else {
			u = mi;
		}
		apf_mat xm = apf_mat_of(ctx, apf_slice(ctx, X, 0, p.numel),
					gm.rows, gm.cols);
		apf_mat ym = apf_mat_of(ctx, apf_slice(ctx, Y, 0, p.numel),
					gm.rows, gm.cols);
		apf_mat o = newton_schulz(ctx, &h, u, xm, ym, A, B);
		if (h.muon_wd != 0)
			apf_scale(ctx, w, (float)(1.0 - lr * h.muon_wd));
		apf_axpy(ctx, w, (float)(-lr * lr_scale(&h, &p)), o.v);
	}
	return 0;
}
