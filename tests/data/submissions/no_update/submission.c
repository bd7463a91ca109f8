/* Breaks the ABI: update_params is missing. */
#include <apf/submission.h>
const int apf_abi_version = APF_ABI_VERSION;
int get_batch_size(const char *w) { (void)w; return 8; }
int init_optimizer_state(apf_ctx *c, const apf_hparams *h, apf_prng r) { (void)c; (void)h; (void)r; return 0; }
