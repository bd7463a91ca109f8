/* Hands the harness a vector of its own memory and a mismatched length. */
#include <apf/submission.h>
const int apf_abi_version = APF_ABI_VERSION;
static float mine[16];
int get_batch_size(const char *w) { (void)w; return 8; }
int init_optimizer_state(apf_ctx *c, const apf_hparams *h, apf_prng r) { (void)c; (void)h; (void)r; return 0; }
int update_params(apf_ctx *c, const apf_hparams *h, const apf_batch *b, const apf_eval_results *e, int64_t s, apf_prng r, const apf_train_state *t)
{
	(void)h; (void)b; (void)e; (void)r; (void)t;
	apf_vec w = apf_all_params(c);
	if (s == 0) {
		apf_vec outside = {mine, 16};
		apf_fill(c, outside, 1.0f);
	} else {
		apf_vec shorter = {w.p, w.n - 1};
		apf_axpy(c, w, 1.0f, shorter);
	}
	return 0;
}
