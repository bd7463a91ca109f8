/* Allocates optimizer state after init, which the rules forbid. */
#include <apf/submission.h>
const int apf_abi_version = APF_ABI_VERSION;
int get_batch_size(const char *w) { (void)w; return 8; }
int init_optimizer_state(apf_ctx *c, const apf_hparams *h, apf_prng r) { (void)c; (void)h; (void)r; return 0; }
int update_params(apf_ctx *c, const apf_hparams *h, const apf_batch *b, const apf_eval_results *e, int64_t s, apf_prng r, const apf_train_state *t)
{
	(void)h; (void)b; (void)e; (void)s; (void)r; (void)t;
	apf_vec late;
	return apf_slot(c, "late", 4, &late);
}
