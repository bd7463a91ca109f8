/*
 * AdamW: Adam with decoupled weight decay (Loshchilov & Hutter, 2019), with
 * linear warmup then cosine decay over 0.75 of the workload's step hint.
 *
 *   m = b1 m + (1 - b1) g            v = b2 v + (1 - b2) g^2
 *   d = (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps)
 *   w -= lr_t (d + wd w)
 */
#include <apf/schedule.h>
#include <apf/submission.h>
#include <math.h>
#include <string.h>

const int apf_abi_version = APF_ABI_VERSION;

/* The MLP takes 256; the Transformer's windows (64 tokens each) and the
 * U-Net's images 32, for steps enough in their budgets; the others 128. */
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
	    apf_slot(ctx, "direction", n, &v) || apf_scalar(ctx, "t", &t))
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
	apf_vec w = apf_all_params(ctx), g = apf_all_grads(ctx), m, v, d;
	double *t, loss;
	if (apf_slot(ctx, "m", 0, &m) || apf_slot(ctx, "v", 0, &v) ||
	    apf_slot(ctx, "direction", 0, &d) || apf_scalar(ctx, "t", &t) ||
	    apf_loss_grad(ctx, batch, &loss))
		return -1;
	double lr = apf_hp(ctx, hp, "learning_rate", 2e-3);
	double b1 = 1.0 - apf_hp(ctx, hp, "one_minus_beta1", 0.1);
	double b2 = apf_hp(ctx, hp, "beta2", 0.999);
	double wd = apf_hp(ctx, hp, "weight_decay", 0.05);
	double warmup = apf_hp(ctx, hp, "warmup_factor", 0.05);
	double lr_t = apf_warmup_cosine(lr, (int64_t)*t, 0.75 * ts->step_hint,
					warmup);
	*t += 1;
	apf_moments(ctx, m, v, g, (float)b1, (float)b2);
	apf_adam_direction(ctx, d, m, v, (float)(1.0 / (1.0 - pow(b1, *t))),
			   (float)(1.0 / (1.0 - pow(b2, *t))), 1e-8f);
	apf_axpy(ctx, d, (float)wd, w);
	apf_axpy(ctx, w, (float)-lr_t, d);
	return 0;
}
