/* Keeps momentum in a static buffer instead of a state slot: training
 * works, but a replay from a checkpoint in a new process diverges. */
#include <apf/submission.h>
#include <stdlib.h>
const int apf_abi_version = APF_ABI_VERSION;
static float *momentum;
static size_t n;
int get_batch_size(const char *w) { (void)w; return 64; }
int init_optimizer_state(apf_ctx *c, const apf_hparams *h, apf_prng r)
{
	(void)h; (void)r;
	apf_vec d;
	n = apf_all_params(c).n;
	return apf_slot(c, "direction", n, &d);
}
int update_params(apf_ctx *c, const apf_hparams *h, const apf_batch *b, const apf_eval_results *e, int64_t s, apf_prng r, const apf_train_state *t)
{
	(void)h; (void)e; (void)s; (void)r; (void)t;
	apf_vec w = apf_all_params(c), g = apf_all_grads(c), d;
	double loss;
	if (apf_slot(c, "direction", 0, &d) || apf_loss_grad(c, b, &loss))
		return -1;
	if (!momentum && !(momentum = calloc(n, sizeof *momentum)))
		return -1;
	/* momentum lives outside the arena: on CPU the harness refuses the
	 * vector, so mirror it through the direction slot by hand */
	apf_copy(c, d, g);
	float *gp = d.p;
	for (size_t i = 0; i < n; i++)
		gp[i] = momentum[i] = 0.9f * momentum[i] + gp[i];
	apf_axpy(c, w, -0.01f, d);
	return 0;
}
