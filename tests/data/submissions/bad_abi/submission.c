/* Claims an ABI version this apf does not implement. */
#include <apf/submission.h>
const int apf_abi_version = 42;
int get_batch_size(const char *w) { (void)w; return 8; }
int init_optimizer_state(apf_ctx *c, const apf_hparams *h, apf_prng r) { (void)c; (void)h; (void)r; return 0; }
int update_params(apf_ctx *c, const apf_hparams *h, const apf_batch *b, const apf_eval_results *e, int64_t s, apf_prng r, const apf_train_state *t)
{ (void)c; (void)h; (void)b; (void)e; (void)s; (void)r; (void)t; return 0; }
