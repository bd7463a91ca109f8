/*
 * layers.c: where a training step's time goes, layer call by layer call.
 * A diagnostic beside bench/train_step (its `run` script does not call it):
 * it wraps the CPU backend's function table with timers, runs training
 * steps of a workload's base model as train_step.c does, and prints each
 * call site (function and shape) with its milliseconds per step and its
 * share of the step, largest first.
 *
 *     layers WORKLOAD BATCH THREADS STEPS
 *
 * The timers sit outside the calls, so the figures include the thread
 * pool's hand-offs; the step total is measured around whole steps.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "workload/workload.h"

#define MAX_SITES 256

struct site {
	char key[96];
	double ns;
	long calls;
};

static struct site sites[MAX_SITES];
static int nsites;
static apf_backend orig; /* the real table */

static void record(const char *key, uint64_t t0)
{
	double ns = (double)(apf_now_ns() - t0);
	for (int i = 0; i < nsites; i++)
		if (!strcmp(sites[i].key, key)) {
			sites[i].ns += ns;
			sites[i].calls++;
			return;
		}
	if (nsites == MAX_SITES)
		return;
	snprintf(sites[nsites].key, sizeof sites[nsites].key, "%s", key);
	sites[nsites].ns = ns;
	sites[nsites].calls = 1;
	nsites++;
}

static void w_conv2d_forward(apf_backend *be, float *out, const float *inp,
			     const float *weight, const float *bias, int B,
			     int H, int W, int C, int OC, int K, int S, int P,
			     float *work)
{
	char key[96];
	snprintf(key, sizeof key, "conv fwd     %2dx%-2d %2d->%-2d k%d s%d", H,
		 W, C, OC, K, S);
	uint64_t t0 = apf_now_ns();
	orig.conv2d_forward(be, out, inp, weight, bias, B, H, W, C, OC, K, S,
			    P, work);
	record(key, t0);
}

static void w_conv2d_backward(apf_backend *be, float *dinp, float *dweight,
			      float *dbias, const float *dout,
			      const float *inp, const float *weight, int B,
			      int H, int W, int C, int OC, int K, int S, int P,
			      float *work, int accum)
{
	char key[96];
	snprintf(key, sizeof key, "conv bwd     %2dx%-2d %2d->%-2d k%d s%d%s", H,
		 W, C, OC, K, S, dinp ? "" : " (no dx)");
	uint64_t t0 = apf_now_ns();
	orig.conv2d_backward(be, dinp, dweight, dbias, dout, inp, weight, B, H,
			     W, C, OC, K, S, P, work, accum);
	record(key, t0);
}

static void w_batchnorm_forward(apf_backend *be, float *out, float *save_mean,
				float *save_rstd, const float *inp,
				const float *scale, const float *bias,
				float *run_mean, float *run_var, int N, int C,
				float momentum, float eps, int train)
{
	char key[96];
	snprintf(key, sizeof key, "bn fwd       %7d x %d", N, C);
	uint64_t t0 = apf_now_ns();
	orig.batchnorm_forward(be, out, save_mean, save_rstd, inp, scale, bias,
			       run_mean, run_var, N, C, momentum, eps, train);
	record(key, t0);
}

static void w_batchnorm_relu_forward(apf_backend *be, float *out,
				     float *save_mean, float *save_rstd,
				     const float *inp, const float *res,
				     const float *scale, const float *bias,
				     float *run_mean, float *run_var, int N,
				     int C, float momentum, float eps, int train)
{
	char key[96];
	snprintf(key, sizeof key, "bn+relu fwd  %7d x %d%s", N, C,
		 res ? " +res" : "");
	uint64_t t0 = apf_now_ns();
	orig.batchnorm_relu_forward(be, out, save_mean, save_rstd, inp, res,
				    scale, bias, run_mean, run_var, N, C,
				    momentum, eps, train);
	record(key, t0);
}

static void w_batchnorm_relu_backward(apf_backend *be, float *dinp,
				      float *dres, float *dscale, float *dbias,
				      const float *dout, const float *out,
				      const float *inp, const float *scale,
				      const float *save_mean,
				      const float *save_rstd, int N, int C,
				      int accum, int accum_res)
{
	char key[96];
	snprintf(key, sizeof key, "bn+relu bwd  %7d x %d%s", N, C,
		 dres ? " +res" : "");
	uint64_t t0 = apf_now_ns();
	orig.batchnorm_relu_backward(be, dinp, dres, dscale, dbias, dout, out,
				     inp, scale, save_mean, save_rstd, N, C,
				     accum, accum_res);
	record(key, t0);
}

static void w_maxpool2d_forward(apf_backend *be, float *out, int32_t *argmax,
				const float *inp, int B, int H, int W, int C,
				int K, int S, int P)
{
	char key[96];
	snprintf(key, sizeof key, "maxpool fwd  %2dx%-2d %d k%d s%d", H, W, C,
		 K, S);
	uint64_t t0 = apf_now_ns();
	orig.maxpool2d_forward(be, out, argmax, inp, B, H, W, C, K, S, P);
	record(key, t0);
}

static void w_maxpool2d_backward(apf_backend *be, float *dinp,
				 const float *dout, const int32_t *argmax,
				 int B, int H, int W, int C, int K, int S,
				 int P, int accum)
{
	char key[96];
	snprintf(key, sizeof key, "maxpool bwd  %2dx%-2d %d k%d s%d", H, W, C,
		 K, S);
	uint64_t t0 = apf_now_ns();
	orig.maxpool2d_backward(be, dinp, dout, argmax, B, H, W, C, K, S, P,
				accum);
	record(key, t0);
}

static void w_upconv2x2_forward(apf_backend *be, float *out, const float *inp,
				const float *weight, const float *bias, int B,
				int H, int W, int C, int OC)
{
	char key[96];
	snprintf(key, sizeof key, "upconv fwd   %2dx%-2d %2d->%-2d", H, W, C,
		 OC);
	uint64_t t0 = apf_now_ns();
	orig.upconv2x2_forward(be, out, inp, weight, bias, B, H, W, C, OC);
	record(key, t0);
}

static void w_upconv2x2_backward(apf_backend *be, float *dinp, float *dweight,
				 float *dbias, const float *dout,
				 const float *inp, const float *weight, int B,
				 int H, int W, int C, int OC, int accum)
{
	char key[96];
	snprintf(key, sizeof key, "upconv bwd   %2dx%-2d %2d->%-2d", H, W, C,
		 OC);
	uint64_t t0 = apf_now_ns();
	orig.upconv2x2_backward(be, dinp, dweight, dbias, dout, inp, weight, B,
				H, W, C, OC, accum);
	record(key, t0);
}

static void w_concat_forward(apf_backend *be, float *out, const float *a,
			     const float *b, int N, int Ca, int Cb)
{
	char key[96];
	snprintf(key, sizeof key, "concat fwd   %7d x %d+%d", N, Ca, Cb);
	uint64_t t0 = apf_now_ns();
	orig.concat_forward(be, out, a, b, N, Ca, Cb);
	record(key, t0);
}

static void w_concat_backward(apf_backend *be, float *da, float *db,
			      const float *dout, int N, int Ca, int Cb,
			      int accum_a, int accum_b)
{
	char key[96];
	snprintf(key, sizeof key, "concat bwd   %7d x %d+%d", N, Ca, Cb);
	uint64_t t0 = apf_now_ns();
	orig.concat_backward(be, da, db, dout, N, Ca, Cb, accum_a, accum_b);
	record(key, t0);
}

static void w_instnorm_forward(apf_backend *be, float *out, float *mean,
			       float *rstd, const float *inp,
			       const float *scale, const float *bias, int B,
			       int HW, int C, float eps)
{
	char key[96];
	snprintf(key, sizeof key, "in fwd       %4d x %d x %d", B, HW, C);
	uint64_t t0 = apf_now_ns();
	orig.instnorm_forward(be, out, mean, rstd, inp, scale, bias, B, HW, C,
			      eps);
	record(key, t0);
}

static void w_instnorm_backward(apf_backend *be, float *dinp, float *dscale,
				float *dbias, const float *dout,
				const float *inp, const float *scale,
				const float *mean, const float *rstd, int B,
				int HW, int C, int accum)
{
	char key[96];
	snprintf(key, sizeof key, "in bwd       %4d x %d x %d", B, HW, C);
	uint64_t t0 = apf_now_ns();
	orig.instnorm_backward(be, dinp, dscale, dbias, dout, inp, scale, mean,
			       rstd, B, HW, C, accum);
	record(key, t0);
}

static void w_instnorm_relu_forward(apf_backend *be, float *out, float *mean,
				    float *rstd, const float *inp,
				    const float *scale, const float *bias,
				    int B, int HW, int C, float eps)
{
	char key[96];
	snprintf(key, sizeof key, "in+relu fwd  %4d x %d x %d", B, HW, C);
	uint64_t t0 = apf_now_ns();
	orig.instnorm_relu_forward(be, out, mean, rstd, inp, scale, bias, B,
				   HW, C, eps);
	record(key, t0);
}

static void w_instnorm_relu_backward(apf_backend *be, float *dinp,
				     float *dscale, float *dbias,
				     const float *dout, const float *out,
				     const float *inp, const float *scale,
				     const float *mean, const float *rstd,
				     int B, int HW, int C, int accum)
{
	char key[96];
	snprintf(key, sizeof key, "in+relu bwd  %4d x %d x %d", B, HW, C);
	uint64_t t0 = apf_now_ns();
	orig.instnorm_relu_backward(be, dinp, dscale, dbias, dout, out, inp,
				    scale, mean, rstd, B, HW, C, accum);
	record(key, t0);
}

static void w_l1_forward(apf_backend *be, float *losses, const float *pred,
			 const float *target, int B, int n)
{
	uint64_t t0 = apf_now_ns();
	orig.l1_forward(be, losses, pred, target, B, n);
	record("l1 loss fwd", t0);
}

static void w_l1_backward(apf_backend *be, float *dpred, const float *pred,
			  const float *target, int B, int n, float dloss)
{
	uint64_t t0 = apf_now_ns();
	orig.l1_backward(be, dpred, pred, target, B, n, dloss);
	record("l1 loss bwd", t0);
}

static void w_batchnorm_backward(apf_backend *be, float *dinp, float *dscale,
				 float *dbias, const float *dout,
				 const float *inp, const float *scale,
				 const float *save_mean, const float *save_rstd,
				 int N, int C, int accum)
{
	char key[96];
	snprintf(key, sizeof key, "bn bwd       %7d x %d", N, C);
	uint64_t t0 = apf_now_ns();
	orig.batchnorm_backward(be, dinp, dscale, dbias, dout, inp, scale,
				save_mean, save_rstd, N, C, accum);
	record(key, t0);
}

static void w_activation_forward(apf_backend *be, int act, float *out,
				 const float *inp, size_t n)
{
	char key[96];
	snprintf(key, sizeof key, "act fwd      %9zu", n);
	uint64_t t0 = apf_now_ns();
	orig.activation_forward(be, act, out, inp, n);
	record(key, t0);
}

static void w_activation_backward(apf_backend *be, int act, float *dinp,
				  const float *dout, const float *inp,
				  const float *out, size_t n, int accum)
{
	char key[96];
	snprintf(key, sizeof key, "act bwd      %9zu", n);
	uint64_t t0 = apf_now_ns();
	orig.activation_backward(be, act, dinp, dout, inp, out, n, accum);
	record(key, t0);
}

static void w_add_forward(apf_backend *be, float *out, const float *a,
			  const float *b, size_t n)
{
	char key[96];
	snprintf(key, sizeof key, "add fwd      %9zu", n);
	uint64_t t0 = apf_now_ns();
	orig.add_forward(be, out, a, b, n);
	record(key, t0);
}

static void w_accumulate(apf_backend *be, float *dst, const float *src,
			 size_t n, int accum)
{
	char key[96];
	snprintf(key, sizeof key, "accumulate%s %9zu", accum ? "+" : "=", n);
	uint64_t t0 = apf_now_ns();
	orig.accumulate(be, dst, src, n, accum);
	record(key, t0);
}

static void w_global_avgpool_forward(apf_backend *be, float *out,
				     const float *inp, int B, int HW, int C)
{
	uint64_t t0 = apf_now_ns();
	orig.global_avgpool_forward(be, out, inp, B, HW, C);
	record("gap fwd", t0);
}

static void w_global_avgpool_backward(apf_backend *be, float *dinp,
				      const float *dout, int B, int HW, int C,
				      int accum)
{
	uint64_t t0 = apf_now_ns();
	orig.global_avgpool_backward(be, dinp, dout, B, HW, C, accum);
	record("gap bwd", t0);
}

static void w_linear_forward(apf_backend *be, float *out, const float *inp,
			     const float *weight, const float *bias, int B,
			     int C, int OC)
{
	char key[96];
	snprintf(key, sizeof key, "linear fwd   %7d x %d->%d", B, C, OC);
	uint64_t t0 = apf_now_ns();
	orig.linear_forward(be, out, inp, weight, bias, B, C, OC);
	record(key, t0);
}

static void w_linear_backward(apf_backend *be, float *dinp, float *dweight,
			      float *dbias, const float *dout,
			      const float *inp, const float *weight, int B,
			      int C, int OC, int accum)
{
	char key[96];
	snprintf(key, sizeof key, "linear bwd   %7d x %d->%d%s", B, C, OC,
		 dinp ? "" : " (no dx)");
	uint64_t t0 = apf_now_ns();
	orig.linear_backward(be, dinp, dweight, dbias, dout, inp, weight, B, C,
			     OC, accum);
	record(key, t0);
}

static void w_layernorm_forward(apf_backend *be, float *out, float *mean,
				float *rstd, const float *inp,
				const float *scale, const float *bias, int N,
				int C, float eps)
{
	char key[96];
	snprintf(key, sizeof key, "ln fwd       %7d x %d", N, C);
	uint64_t t0 = apf_now_ns();
	orig.layernorm_forward(be, out, mean, rstd, inp, scale, bias, N, C, eps);
	record(key, t0);
}

static void w_layernorm_backward(apf_backend *be, float *dinp, float *dscale,
				 float *dbias, const float *dout,
				 const float *inp, const float *scale,
				 const float *mean, const float *rstd, int N,
				 int C, int accum)
{
	char key[96];
	snprintf(key, sizeof key, "ln bwd       %7d x %d", N, C);
	uint64_t t0 = apf_now_ns();
	orig.layernorm_backward(be, dinp, dscale, dbias, dout, inp, scale, mean,
				rstd, N, C, accum);
	record(key, t0);
}

static void w_softmax_xent_forward(apf_backend *be, float *losses,
				   float *probs, const float *logits,
				   const int32_t *labels, int B, int V,
				   float smoothing)
{
	char key[96];
	snprintf(key, sizeof key, "softmax loss fwd %5d x %d", B, V);
	uint64_t t0 = apf_now_ns();
	orig.softmax_xent_forward(be, losses, probs, logits, labels, B, V,
				  smoothing);
	record(key, t0);
}

static void w_softmax_xent_backward(apf_backend *be, float *dlogits,
				    const float *probs, const int32_t *labels,
				    int B, int V, float smoothing, float dloss)
{
	char key[96];
	snprintf(key, sizeof key, "softmax loss bwd %5d x %d", B, V);
	uint64_t t0 = apf_now_ns();
	orig.softmax_xent_backward(be, dlogits, probs, labels, B, V, smoothing,
				   dloss);
	record(key, t0);
}

static void w_embedding_forward(apf_backend *be, float *out,
				const int32_t *idx, int ldi,
				const int32_t *offset, const float *table,
				int B, int F, int D)
{
	char key[96];
	snprintf(key, sizeof key, "embedding fwd %5d x %d x %d", B, F, D);
	uint64_t t0 = apf_now_ns();
	orig.embedding_forward(be, out, idx, ldi, offset, table, B, F, D);
	record(key, t0);
}

static void w_embedding_backward(apf_backend *be, float *dtable,
				 const float *dout, const int32_t *idx,
				 int ldi, const int32_t *offset, int B, int F,
				 int V, int D)
{
	char key[96];
	snprintf(key, sizeof key, "embedding bwd %5d x %d x %d", B, F, D);
	uint64_t t0 = apf_now_ns();
	orig.embedding_backward(be, dtable, dout, idx, ldi, offset, B, F, V, D);
	record(key, t0);
}

static void w_interaction_forward(apf_backend *be, float *out,
				  const float *dense, const float *emb, int B,
				  int E, int D)
{
	char key[96];
	snprintf(key, sizeof key, "interaction fwd %5d x %d x %d", B, E + 1, D);
	uint64_t t0 = apf_now_ns();
	orig.interaction_forward(be, out, dense, emb, B, E, D);
	record(key, t0);
}

static void w_interaction_backward(apf_backend *be, float *ddense,
				   float *demb, const float *dout,
				   const float *dense, const float *emb, int B,
				   int E, int D, int accum_dense, int accum_emb)
{
	char key[96];
	snprintf(key, sizeof key, "interaction bwd %5d x %d x %d", B, E + 1, D);
	uint64_t t0 = apf_now_ns();
	orig.interaction_backward(be, ddense, demb, dout, dense, emb, B, E, D,
				  accum_dense, accum_emb);
	record(key, t0);
}

static void w_attention_forward(apf_backend *be, float *out, float *att,
				const float *qkv, int B, int T, int C, int NH,
				float scale)
{
	char key[96];
	snprintf(key, sizeof key, "attention fwd %3d x %d, %d heads of %d", B,
		 T, NH, C / NH);
	uint64_t t0 = apf_now_ns();
	orig.attention_forward(be, out, att, qkv, B, T, C, NH, scale);
	record(key, t0);
}

static void w_attention_backward(apf_backend *be, float *dqkv,
				 const float *dout, const float *qkv,
				 const float *att, int B, int T, int C, int NH,
				 float scale, int accum)
{
	char key[96];
	snprintf(key, sizeof key, "attention bwd %3d x %d, %d heads of %d", B,
		 T, NH, C / NH);
	uint64_t t0 = apf_now_ns();
	orig.attention_backward(be, dqkv, dout, qkv, att, B, T, C, NH, scale,
				accum);
	record(key, t0);
}

static int cmp_site(const void *a, const void *b)
{
	double x = ((const struct site *)a)->ns, y = ((const struct site *)b)->ns;
	return (x < y) - (x > y);
}

static int die(void)
{
	fprintf(stderr, "layers: %s\n", apf_error_message());
	return 2;
}

int main(int argc, char **argv)
{
	if (argc != 5) {
		fprintf(stderr, "usage: layers WORKLOAD BATCH THREADS STEPS\n");
		return 2;
	}
	int B = atoi(argv[2]), threads = atoi(argv[3]);
	long steps = atol(argv[4]);
	if (B <= 0 || threads <= 0 || steps <= 0)
		return fprintf(stderr, "layers: bad arguments\n"), 2;
	apf_workload_spec *spec;
	apf_backend *real;
	if (apf_workload_spec_load(&spec, argv[1]) ||
	    apf_backend_cpu_new(&real, threads))
		return die();
	orig = *real;
	apf_backend prof = *real, *be = &prof;
	prof.conv2d_forward = w_conv2d_forward;
	prof.conv2d_backward = w_conv2d_backward;
	prof.batchnorm_forward = w_batchnorm_forward;
	prof.batchnorm_backward = w_batchnorm_backward;
	if (real->batchnorm_relu_forward && real->batchnorm_relu_backward) {
		prof.batchnorm_relu_forward = w_batchnorm_relu_forward;
		prof.batchnorm_relu_backward = w_batchnorm_relu_backward;
	}
	prof.activation_forward = w_activation_forward;
	prof.activation_backward = w_activation_backward;
	prof.add_forward = w_add_forward;
	prof.accumulate = w_accumulate;
	prof.global_avgpool_forward = w_global_avgpool_forward;
	prof.global_avgpool_backward = w_global_avgpool_backward;
	prof.linear_forward = w_linear_forward;
	prof.linear_backward = w_linear_backward;
	prof.layernorm_forward = w_layernorm_forward;
	prof.layernorm_backward = w_layernorm_backward;
	prof.softmax_xent_forward = w_softmax_xent_forward;
	prof.softmax_xent_backward = w_softmax_xent_backward;
	prof.embedding_forward = w_embedding_forward;
	prof.embedding_backward = w_embedding_backward;
	prof.interaction_forward = w_interaction_forward;
	prof.interaction_backward = w_interaction_backward;
	prof.attention_forward = w_attention_forward;
	prof.attention_backward = w_attention_backward;
	prof.maxpool2d_forward = w_maxpool2d_forward;
	prof.maxpool2d_backward = w_maxpool2d_backward;
	prof.upconv2x2_forward = w_upconv2x2_forward;
	prof.upconv2x2_backward = w_upconv2x2_backward;
	prof.concat_forward = w_concat_forward;
	prof.concat_backward = w_concat_backward;
	prof.instnorm_forward = w_instnorm_forward;
	prof.instnorm_backward = w_instnorm_backward;
	if (real->instnorm_relu_forward && real->instnorm_relu_backward) {
		prof.instnorm_relu_forward = w_instnorm_relu_forward;
		prof.instnorm_relu_backward = w_instnorm_relu_backward;
	}
	prof.l1_forward = w_l1_forward;
	prof.l1_backward = w_l1_backward;
	apf_workload *wl;
	apf_trial_key key = {1, 0, 0};
	if (apf_workload_open(&wl, spec, "base", be, &key, 0))
		return die();
	apf_net *net = apf_workload_net(wl);
	size_t np = apf_net_param_floats(net), ns = apf_net_state_floats(net);
	float *arena, *grads, *scratch;
	if (be->alloc(be, (3 * np + ns) * sizeof(float), (void **)&arena) ||
	    be->alloc(be, np * sizeof(float), (void **)&grads) ||
	    be->alloc(be, np * sizeof(float), (void **)&scratch))
		return die();
	float *params = arena, *state = arena + np, *m = state + ns, *v = m + np;
	if (apf_workload_bind(wl, params, state) || apf_workload_init(wl))
		return die();
	struct apf_adamw h = {1e-3, 0.9, 0.999, 1e-8, 1e-4, 0.0};
	apf_data_pos pos = {0, 0};
	uint64_t total = 0, batch_ns = 0, update_ns = 0;
	for (long t = 0; t < steps + 2; t++) {
		if (t == 2) /* warm-up done */
			nsites = 0;
		uint64_t t0 = apf_now_ns();
		apf_batch b;
		double loss;
		if (apf_workload_next_batch(&b, wl, &pos, B))
			return die();
		uint64_t t1 = apf_now_ns();
		if (apf_workload_loss_grad(wl, &b, (uint64_t)t, &loss, grads))
			return die();
		uint64_t t2 = apf_now_ns();
		apf_adamw_update(be, net, params, grads, m, v, scratch, &h, h.lr,
				 t + 1);
		uint64_t t3 = apf_now_ns();
		if (t >= 2) {
			total += t3 - t0;
			batch_ns += t1 - t0;
			update_ns += t3 - t2;
		}
	}
	qsort(sites, (size_t)nsites, sizeof *sites, cmp_site);
	double step_ms = (double)total / 1e6 / (double)steps;
	printf("%s, batch %d, %d threads: %.2f ms/step, %.0f samples/s\n",
	       argv[1], B, threads, step_ms, B / step_ms * 1e3);
	double listed = 0;
	for (int i = 0; i < nsites; i++) {
		double ms = sites[i].ns / 1e6 / (double)steps;
		listed += ms;
		printf("  %-44s %7.3f ms %5.1f%%\n", sites[i].key, ms,
		       100 * ms / step_ms);
	}
	double bms = (double)batch_ns / 1e6 / (double)steps;
	double ums = (double)update_ns / 1e6 / (double)steps;
	printf("  %-44s %7.3f ms %5.1f%%\n", "next batch", bms,
	       100 * bms / step_ms);
	printf("  %-44s %7.3f ms %5.1f%%\n", "adamw update", ums,
	       100 * ums / step_ms);
	printf("  %-44s %7.3f ms %5.1f%%\n", "the rest (unwrapped calls, copies)",
	       step_ms - listed - bms - ums,
	       100 * (step_ms - listed - bms - ums) / step_ms);
	be->free(be, arena);
	be->free(be, grads);
	be->free(be, scratch);
	apf_workload_close(wl);
	apf_workload_spec_free(spec);
	apf_backend_free(real);
	return 0;
}
