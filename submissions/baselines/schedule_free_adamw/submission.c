/*
 * Schedule-Free AdamW (Defazio et al., "The Road Less Scheduled", 2024), the
 * strongest published self-tuning entry of AlgoPerf v0.5. No decay schedule:
 * gradients are taken at y, an interpolation between the base sequence z and
 * its weighted average x, and evaluation uses x.
 *
 *   v = b2 v + (1 - b2) g^2                          (g at y)
 *   lr_t = lr * warmup(t) * sqrt(1 - b2^t);  lr_max = max(lr_max, lr_t)
 *   c = lr_max^2 / sum of lr_max^2 so far
 *   n = g / (sqrt(v) + eps) + wd y
 *   y = (1 - c) y + c z + lr_t (b1 (1 - c) - 1) n;   z -= lr_t n
 *
 * The parameters hold y while training; prepare_for_eval moves them to
 * x = y + (1 - 1/b1)(z - y), and the next update moves them back.
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
	apf_vec w = apf_all_params(ctx), z, v;
	double *s;
	if (apf_slot(ctx, "z", w.n, &z) || apf_slot(ctx, "v", w.n, &v) ||
	    apf_slot(ctx, "scratch", w.n, &v) || apf_scalar(ctx, "t", &s) ||
	    apf_scalar(ctx, "lr_max", &s) || apf_scalar(ctx, "weight_sum", &s) ||
	    apf_scalar(ctx, "at_x", &s))
		return -1;
	apf_copy(ctx, z, w); /* z starts at the initial parameters */
	return 0;
}

static double beta1(apf_ctx *ctx, const apf_hparams *hp)
{
	return 1.0 - apf_hp(ctx, hp, "one_minus_beta1", 0.1);
}

/* Parameters from x back to y: y = b1 x + (1 - b1) z. */
static int back_to_y(apf_ctx *ctx, const apf_hparams *hp)
{
	apf_vec w = apf_all_params(ctx), z;
	double *at_x;
	if (apf_slot(ctx, "z", 0, &z) || apf_scalar(ctx, "at_x", &at_x))
		return -1;
	if (*at_x != 0.0) {
		double b1 = beta1(ctx, hp);
		apf_axpby(ctx, w, (float)(1.0 - b1), z, (float)b1);
		*at_x = 0.0;
	}
	return 0;
}

int update_params(apf_ctx *ctx, const apf_hparams *hp, const apf_batch *batch,
		  const apf_eval_results *last_eval, int64_t global_step,
		  apf_prng rng, const apf_train_state *ts)
{
	(void)last_eval;
	(void)global_step;
	(void)rng;
	apf_vec y = apf_all_params(ctx), g = apf_all_grads(ctx), z, v, n;
	double *t, *lr_max, *wsum, loss;
	if (back_to_y(ctx, hp) || apf_slot(ctx, "z", 0, &z) ||
	    apf_slot(ctx, "v", 0, &v) || apf_slot(ctx, "scratch", 0, &n) ||
	    apf_scalar(ctx, "t", &t) || apf_scalar(ctx, "lr_max", &lr_max) ||
	    apf_scalar(ctx, "weight_sum", &wsum) ||
	    apf_loss_grad(ctx, batch, &loss))
		return -1;
	double lr = apf_hp(ctx, hp, "learning_rate", 2.5e-3);
	double b1 = beta1(ctx, hp);
	double b2 = apf_hp(ctx, hp, "beta2", 0.9955);
	double wd = apf_hp(ctx, hp, "weight_decay", 0.08);
	double warmup = apf_hp(ctx, hp, "warmup_factor", 0.02);
	double power = apf_hp(ctx, hp, "weight_lr_power", 2.0);
	double lr_t = apf_warmup_constant(lr, (int64_t)*t,
					  warmup * ts->step_hint) *
		      sqrt(1.0 - pow(b2, *t + 1.0));
	*t += 1;
	if (lr_t > *lr_max)
		*lr_max = lr_t;
	double weight = pow(*lr_max, power);
	*wsum += weight;
	double c = *wsum > 0.0 ? weight / *wsum : 0.0;
	apf_mul(ctx, n, g, g);
	apf_axpby(ctx, v, (float)(1.0 - b2), n, (float)b2);
	apf_sqrt(ctx, n, v);
	apf_add_scalar(ctx, n, 1e-8f);
	apf_div(ctx, n, g, n);
	apf_axpy(ctx, n, (float)wd, y);
	apf_axpby(ctx, y, (float)c, z, (float)(1.0 - c));
	apf_axpy(ctx, y, (float)(lr_t * (b1 * (1.0 - c) - 1.0)), n);
	apf_axpy(ctx, z, (float)-lr_t, n);
	return 0;
}

int prepare_for_eval(apf_ctx *ctx, const apf_hparams *hp, int64_t global_step,
		     apf_prng rng)
{
	(void)global_step;
	(void)rng;
	apf_vec w = apf_all_params(ctx), z;
	double *at_x;
	if (apf_slot(ctx, "z", 0, &z) || apf_scalar(ctx, "at_x", &at_x))
		return -1;
	if (*at_x == 0.0) {
		double b1 = beta1(ctx, hp);
		apf_axpby(ctx, w, (float)(1.0 - 1.0 / b1), z, (float)(1.0 / b1));
		*at_x = 1.0;
	}
	return 0;
}
