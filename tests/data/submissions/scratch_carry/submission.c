/* Carries momentum from step to step in scratch memory, which is released
 * at every call and not checkpointed: in its own process the chunk comes
 * back with last step's contents, so training works; a replay from a
 * checkpoint starts with fresh scratch and diverges. */
#include <apf/submission.h>
const int apf_abi_version = APF_ABI_VERSION;
int get_batch_size(const char *w) { (void)w; return 64; }
int init_optimizer_state(apf_ctx *c, const apf_hparams *h, apf_prng r)
{
	(void)c; (void)h; (void)r;
	return 0;
}
int update_params(apf_ctx *c, const apf_hparams *h, const apf_batch *b, const apf_eval_results *e, int64_t s, apf_prng r, const apf_train_state *t)
{
	(void)h; (void)e; (void)s; (void)r; (void)t;
	apf_vec w = apf_all_params(c), g = apf_all_grads(c), m;
	double loss;
	if (apf_loss_grad(c, b, &loss) || apf_scratch(c, w.n, &m))
		return -1;
	apf_axpby(c, m, 1.0f, g, 0.9f); /* m = g + 0.9 m, m from last step */
	apf_axpy(c, w, -0.01f, m);
	return 0;
}
