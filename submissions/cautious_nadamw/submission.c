/*
 * Cautious NAdamW: NAdamW whose update is kept only where it agrees in
 * sign with the current gradient (Liang, Chen, Liu & Liu, "Cautious
 * Optimizers: Improving Training with One Line of Code", 2024,
 * arXiv:2411.16085), as AlgoPerf's self-tuning Cautious NAdamW entry
 * (mlcommons/submissions_algorithms, submissions/self_tuning/
 * cautious_nadamw) runs it on AlgoPerf's NAdamW (the baseline's, see
 * submissions/baselines/nadamw):
 *
 *   m = b1 m + (1 - b1) g            v = b2 v + (1 - b2) g^2
 *   u = (b1 m + (1 - b1) g) / (1 - b1^t)      Nesterov's momentum
 *   mask = 1 where u g > 0, else 0
 *   u = u mask / max(mean(mask), 1e-3)        mean over the tensor
 *   w -= lr_t (u / (sqrt(v / (1 - b2^t)) + eps) + wd w)
 *
 * with t counting updates from 1 and eps = 1e-8. The mask's mean is taken
 * per parameter tensor, as the entry's per-leaf mapping does; rescaling by
 * it keeps the update's size as the mask thins it (the paper's reference
 * code divides by (sum(mask) + 1) / n instead; the entry's 1e-3 floor
 * bounds the gain at 1000).
 *
 * Defaults: the published self-tuning entry's, which are NAdamW's
 * qualification-baseline values: learning_rate 0.0017486387539278373,
 * one_minus_beta1 0.06733926164, beta2 0.9955159689799007, weight_decay
 * 0.08121616522670176, warmup_factor 0.02; warmup over floor(0.02
 * step_hint) steps from 0, then a cosine to 0 at the step hint (not 0.75
 * of it, as the external baseline schedules). The entry also sets
 * dropout_rate 0.1, which apf applies only as a hyperparameter of the
 * trial (the search space here has it), and no gradient clipping.
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
	if (apf_slot(ctx, "m", n, &v) || apf_slot(ctx, "v", n, &v) ||
	    apf_scalar(ctx, "t", &t))
		return -1;
	*t = 0;
	return 0;
}

int update_params(apf_ctx *ctx, const apf_hparams *hp, const apf_batch *batch,
		  const apf_eval_results *last_eval, int64_t global_step,
		  apf_prng rng, const apf_train_state *ts)
{
	(void)last_eval;
	(void)global_step;
	(void)rng;
	apf_vec w = apf_all_params(ctx), g = apf_all_grads(ctx), m, v, u, mask;
	double *tp, loss;
	if (apf_slot(ctx, "m", 0, &m) || apf_slot(ctx, "v", 0, &v) ||
	    apf_scalar(ctx, "t", &tp) || apf_scratch(ctx, w.n, &u) ||
	    apf_scratch(ctx, w.n, &mask) || apf_loss_grad(ctx, batch, &loss))
		return -1;
	double lr = apf_hp(ctx, hp, "learning_rate", 0.0017486387539278373);
	double b1 = 1.0 - apf_hp(ctx, hp, "one_minus_beta1", 0.06733926164);
	double b2 = apf_hp(ctx, hp, "beta2", 0.9955159689799007);
	double wd = apf_hp(ctx, hp, "weight_decay", 0.08121616522670176);
	double warmup = apf_hp(ctx, hp, "warmup_factor", 0.02);
	double lr_t = apf_warmup_cosine(lr, (int64_t)*tp, (double)ts->step_hint,
					warmup);
	double t = (*tp += 1);
	double c1 = 1.0 / (1.0 - pow(b1, t)), c2 = 1.0 / (1.0 - pow(b2, t));

	apf_moments(ctx, m, v, g, (float)b1, (float)b2);
	apf_copy(ctx, u, g);
	apf_axpby(ctx, u, (float)b1, m, (float)(1.0 - b1));
	apf_agree(ctx, mask, u, g);
	apf_mul(ctx, u, u, mask);
	for (int i = 0, np = apf_nparams(ctx); i < np; i++) {
		apf_param_info p;
		if (apf_get_param(ctx, i, &p))
			return -1;
		apf_vec ui = apf_slice(ctx, u, p.offset, p.numel);
		double kept = apf_sum(ctx, apf_slice(ctx, mask, p.offset,
						     p.numel)) /
			      (double)p.numel;
		apf_adam_direction(ctx, ui, ui,
				   apf_slice(ctx, v, p.offset, p.numel),
				   (float)(c1 / fmax(kept, 1e-3)), (float)c2,
				   1e-8f);
	}
	apf_axpy(ctx, u, (float)wd, w);
	apf_axpy(ctx, w, (float)-lr_t, u);
	return 0;
}
