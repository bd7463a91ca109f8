/*
 * AdEMAMix: Adam with a mixture of two gradient averages, a fast one and a
 * slow one that remembers tens of thousands of steps (Pagliardini, Ablin &
 * Grangier, "The AdEMAMix Optimizer: Better, Faster, Older", ICLR 2025,
 * arXiv:2409.03137, Algorithm 1), with the paper's warmup schedulers for
 * alpha and beta3, as AlgoPerf's self-tuning AdEMAMix entry
 * (mlcommons/submissions_algorithms, submissions/self_tuning/ademamix)
 * runs it: global gradient-norm clipping first, linear warmup then cosine
 * decay of the learning rate over the workload's step hint.
 *
 *   g = g min(1, clip / (|g| + 1e-6))               |g| over all parameters
 *   alpha_t = alpha min(t / T_alpha, 1)
 *   beta3_t = f^-1((1 - t/T_b3) f(b1) + t/T_b3 f(b3))   while t < T_b3
 *             where f(b) = ln(1/2) / ln(b + 1e-8) - 1, f^-1(x) = 2^(-1/(x+1))
 *             (the half-life of the slow average grows linearly from the
 *             fast average's; past T_b3, beta3_t = b3)
 *   m1 = b1 m1 + (1 - b1) g     m2 = beta3_t m2 + (1 - beta3_t) g
 *   v  = b2 v + (1 - b2) g^2
 *   w -= lr_t ((m1 / (1 - b1^t) + alpha_t m2) / (sqrt(v / (1 - b2^t)) + eps)
 *              + wd w)
 *
 * with t counting updates from 1 and eps = 1e-8. The slow average m2 is
 * not bias-corrected (the paper's choice: alpha_t and beta3_t start small).
 *
 * Defaults: the published self-tuning entry's, "optimal parameters across
 * all workloads": learning_rate 2e-3, one_minus_beta1 0.2, beta2 0.995,
 * beta3 0.9995, alpha 8, weight_decay 0.1, warmup_factor 0.02, grad_clip
 * 0.5, and alpha_warmup = beta3_warmup = 500,000 steps (so on AlgoPerf's
 * workloads, and apf's, alpha and beta3 are still rising when training
 * ends). The paper itself sets T_alpha = T_b3 = the run's length; the
 * search space does that with alpha_warmup_factor and beta3_warmup_factor
 * (fractions of the step hint), which, when present, replace the
 * warmups in steps.
 *
 * apf packs a folder under one ruleset: this one is `external`, drawing
 * from tuning_search_space.ini. The self-tuning entry is the same code
 * with the published defaults: copy the folder, set `ruleset = self` (and
 * a name of its own) in submission.ini, and pack that; the search space is
 * then ignored and every apf_hp() below returns its default.
 */
#include <apf/schedule.h>
#include <apf/submission.h>
#include <math.h>
#include <string.h>

const int apf_abi_version = APF_ABI_VERSION;

/* As the baselines: the MLP takes 256; the Transformer's windows (64
 * tokens each) and the U-Net's images 32, for steps enough in their
 * budgets; the others 128. */
int get_batch_size(const char *workload)
{
	if (!strncmp(workload, "fmnist_mlp", 10))
		return 256;
	if (!strncmp(workload, "text_lm", 7) ||
	    !strncmp(workload, "fmnist_unet", 11))
		return 32;
	return 128;
}

int init_optimizer_state(apf_ctx *ctx, const apf_hparams *hp, apf_prng rng)
{
	(void)hp;
	(void)rng;
	size_t n = apf_all_params(ctx).n;
	apf_vec v;
	double *t;
	if (apf_slot(ctx, "m_fast", n, &v) || apf_slot(ctx, "m_slow", n, &v) ||
	    apf_slot(ctx, "v", n, &v) || apf_scalar(ctx, "t", &t))
		return -1;
	*t = 0;
	return 0;
}

/* A warmup length in steps: `factor` of the step hint when the trial has
 * it, else `steps` (default: the published 500,000). */
static double warmup_steps(apf_ctx *ctx, const apf_hparams *hp,
			   const char *factor, const char *steps,
			   int64_t step_hint)
{
	if (apf_hp_has(ctx, hp, factor))
		return apf_hp(ctx, hp, factor, 1.0) * (double)step_hint;
	return apf_hp(ctx, hp, steps, 500e3);
}

/* The half-life, in steps and less one, of an average with factor b. */
static double half_life(double b)
{
	return log(0.5) / log(b + 1e-8) - 1.0;
}

int update_params(apf_ctx *ctx, const apf_hparams *hp, const apf_batch *batch,
		  const apf_eval_results *last_eval, int64_t global_step,
		  apf_prng rng, const apf_train_state *ts)
{
	(void)last_eval;
	(void)global_step;
	(void)rng;
	apf_vec w = apf_all_params(ctx), g = apf_all_grads(ctx), m1, m2, v, d;
	double *tp, loss;
	if (apf_slot(ctx, "m_fast", 0, &m1) || apf_slot(ctx, "m_slow", 0, &m2) ||
	    apf_slot(ctx, "v", 0, &v) || apf_scalar(ctx, "t", &tp) ||
	    apf_scratch(ctx, w.n, &d) || apf_loss_grad(ctx, batch, &loss))
		return -1;
	double lr = apf_hp(ctx, hp, "learning_rate", 2e-3);
	double b1 = 1.0 - apf_hp(ctx, hp, "one_minus_beta1", 0.2);
	double b2 = apf_hp(ctx, hp, "beta2", 0.995);
	double b3 = apf_hp(ctx, hp, "beta3", 0.9995);
	double alpha = apf_hp(ctx, hp, "alpha", 8.0);
	double wd = apf_hp(ctx, hp, "weight_decay", 0.1);
	double warmup = apf_hp(ctx, hp, "warmup_factor", 0.02);
	double clip = apf_hp(ctx, hp, "grad_clip", 0.5);
	double t_alpha = warmup_steps(ctx, hp, "alpha_warmup_factor",
				      "alpha_warmup", ts->step_hint);
	double t_b3 = warmup_steps(ctx, hp, "beta3_warmup_factor",
				   "beta3_warmup", ts->step_hint);
	double lr_t = apf_warmup_cosine(lr, (int64_t)*tp, (double)ts->step_hint,
					warmup);
	double t = (*tp += 1);

	if (clip > 0) {
		double coef = clip / (apf_norm2(ctx, g) + 1e-6);
		if (coef < 1.0)
			apf_scale(ctx, g, (float)coef);
	}
	double alpha_t = t < t_alpha ? alpha * t / t_alpha : alpha;
	double b3_t = b3;
	if (t < t_b3) {
		double a = t / t_b3;
		double h = (1.0 - a) * half_life(b1) + a * half_life(b3);
		b3_t = pow(0.5, 1.0 / (h + 1.0));
	}

	apf_moments(ctx, m1, v, g, (float)b1, (float)b2);
	apf_axpby(ctx, m2, (float)(1.0 - b3_t), g, (float)b3_t);
	apf_copy(ctx, d, m2);
	apf_axpby(ctx, d, (float)(1.0 / (1.0 - pow(b1, t))), m1, (float)alpha_t);
	apf_adam_direction(ctx, d, d, v, 1.0f,
			   (float)(1.0 / (1.0 - pow(b2, t))), 1e-8f);
	apf_axpy(ctx, d, (float)wd, w);
	apf_axpy(ctx, w, (float)-lr_t, d);
	return 0;
}
