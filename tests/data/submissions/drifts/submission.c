/* Plain SGD whose step size wobbles by a few parts in a million with the
 * clock: no two executions give the same bits, yet each lands where any
 * other would up to that wobble. A replay compared bit for bit fails; one
 * compared within a tolerance (as for a cuda run replayed on a CPU)
 * passes, which is what the tolerance is for. */
#define _POSIX_C_SOURCE 200809L
#include <apf/submission.h>
#include <time.h>
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
	apf_vec w = apf_all_params(c), g = apf_all_grads(c);
	double loss;
	if (apf_loss_grad(c, b, &loss))
		return -1;
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	float wobble = 1.0f + 4e-6f * (float)(ts.tv_nsec % 1000) / 1000.0f;
	apf_axpy(c, w, -0.01f * wobble, g);
	return 0;
}
