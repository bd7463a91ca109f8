/*
 * SGD with Nesterov momentum and decoupled weight decay, with linear warmup
 * then cosine decay over 0.75 of the workload's step hint.
 *
 *   u = b u + g                      d = g + b u
 *   w -= lr_t (d + wd w)
 */
#include <apf/schedule.h>
#include <apf/submission.h>
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
	if (apf_slot(ctx, "momentum", n, &v) ||
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
	apf_vec w = apf_all_params(ctx), g = apf_all_grads(ctx), u, d;
	double *t, loss;
	if (apf_slot(ctx, "momentum", 0, &u) ||
	    apf_slot(ctx, "direction", 0, &d) || apf_scalar(ctx, "t", &t) ||
	    apf_loss_grad(ctx, batch, &loss))
		return -1;
	double lr = apf_hp(ctx, hp, "learning_rate", 0.1);
	double b = 1.0 - apf_hp(ctx, hp, "one_minus_beta1", 0.1);
	double wd = apf_hp(ctx, hp, "weight_decay", 5e-4);
	double warmup = apf_hp(ctx, hp, "warmup_factor", 0.05);
	double lr_t = apf_warmup_cosine(lr, (int64_t)*t, 0.75 * ts->step_hint,
					warmup);
	*t += 1;
	apf_axpby(ctx, u, 1.0f, g, (float)b);
	apf_copy(ctx, d, g);
	apf_axpy(ctx, d, (float)b, u);
	apf_axpy(ctx, d, (float)wd, w);
	apf_axpy(ctx, w, (float)-lr_t, d);
	return 0;
}
