/*
 * Lion: EvoLved Sign Momentum (Chen et al., "Symbolic Discovery of
 * Optimization Algorithms", NeurIPS 2023, arXiv:2302.06675, Algorithm 2),
 * with linear warmup then cosine decay over the workload's step hint, as
 * AlgoPerf's self-tuning Lion entry (mlcommons/submissions_algorithms,
 * submissions/self_tuning/lion) runs it.
 *
 *   c = b1 m + (1 - b1) g                 the update's direction
 *   w = w (1 - lr_t wd) - lr_t sign(c)    decoupled weight decay, then step
 *   m = b2 m + (1 - b2) g                 momentum, a slower average
 *
 * Every coordinate moves by exactly lr_t (or 0 where c is 0), so Lion's
 * learning rate is some 3-10x below AdamW's and its weight decay as much
 * above, to keep lr wd alike.
 *
 * Defaults: the published self-tuning entry's, "optimal parameters across
 * all workloads, excluding ogbg": learning_rate 2e-4, one_minus_beta1 0.05,
 * beta2 0.98, weight_decay 0.5, warmup_factor 0.02; warmup over
 * floor(0.02 step_hint) steps from 0 (PyTorch's LinearLR starts at 1e-10
 * of the peak), then a cosine to 0 at the step hint. The entry also sets
 * dropout_rate 0.1, which apf applies only as a hyperparameter of the
 * trial (the search space here has it).
 *
 * apf packs a folder under one ruleset: this one is `external`, drawing
 * from tuning_search_space.ini. The self-tuning entry is the same code
 * with the published defaults: copy the folder, set `ruleset = self` (and
 * a name of its own) in submission.ini, and pack that; the search space is
 * then ignored and every apf_hp() below returns its default.
 */
#include <apf/schedule.h>
#include <apf/submission.h>
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
	apf_vec m;
	double *t;
	if (apf_slot(ctx, "m", apf_all_params(ctx).n, &m) ||
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
	apf_vec w = apf_all_params(ctx), g = apf_all_grads(ctx), m, c;
	double *t, loss;
	if (apf_slot(ctx, "m", 0, &m) || apf_scalar(ctx, "t", &t) ||
	    apf_scratch(ctx, w.n, &c) || apf_loss_grad(ctx, batch, &loss))
		return -1;
	double lr = apf_hp(ctx, hp, "learning_rate", 2e-4);
	double b1 = 1.0 - apf_hp(ctx, hp, "one_minus_beta1", 0.05);
	double b2 = apf_hp(ctx, hp, "beta2", 0.98);
	double wd = apf_hp(ctx, hp, "weight_decay", 0.5);
	double warmup = apf_hp(ctx, hp, "warmup_factor", 0.02);
	double lr_t = apf_warmup_cosine(lr, (int64_t)*t, (double)ts->step_hint,
					warmup);
	*t += 1;
	apf_copy(ctx, c, g);
	apf_axpby(ctx, c, (float)b1, m, (float)(1.0 - b1));
	apf_sign(ctx, c, c);
	apf_scale(ctx, w, (float)(1.0 - lr_t * wd));
	apf_axpy(ctx, w, (float)-lr_t, c);
	apf_axpby(ctx, m, (float)(1.0 - b2), g, (float)b2);
	return 0;
}
