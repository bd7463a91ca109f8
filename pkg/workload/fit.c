/*
 * fit.c: the reference AdamW training loop (see workload.h). It exists so
 * tests, benchmarks and provisional targets can train a workload before the
 * sealed runner and the baseline submissions exist, and it already keeps all
 * trainable state in one caller-style arena:
 *
 *     [parameters | model state | AdamW m | AdamW v]
 *
 * AdamW is written with the backend's vector operations, as a submission
 * is, so it runs unchanged on every backend; where the backend has the
 * one-pass adamw (the CPU's), that gives the same bits moving about half
 * the bytes.
 */
#include "workload/workload.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "hash/hash.h"

double apf_adamw_lr(const struct apf_adamw *h, long step, long total)
{
	long warm = (long)(h->warmup_frac * (double)total);
	if (warm > 0 && step < warm)
		return h->lr * (double)(step + 1) / (double)warm;
	long rest = total - warm;
	if (rest <= 0)
		return h->lr;
	double frac = (double)(step - warm) / (double)rest;
	return h->lr * 0.5 * (1.0 + cos(3.141592653589793 * frac));
}

static int decayed(const apf_param *p, const struct apf_adamw *h)
{
	return h->weight_decay > 0.0 && (p->kind == APF_PARAM_WEIGHT ||
					 p->kind == APF_PARAM_CONV_WEIGHT);
}

/* Appends [.., end) with factor d to a pass's segments, merged into the
 * last one when its factor is the same. */
static void segment(size_t *end, float *decay, int *k, size_t e, float d)
{
	if (e == (*k > 0 ? end[*k - 1] : 0))
		return; /* empty */
	if (*k > 0 && decay[*k - 1] == d)
		end[*k - 1] = e;
	else
		end[*k] = e, decay[(*k)++] = d;
}

/* The backend's one-pass AdamW (nn.h's adamw): each parameter a segment
 * with its factor, the alignment padding after it one with none. 1 when
 * it cannot (no memory, or offsets out of order), and the caller composes
 * the ops instead: the same bits either way. */
static int adamw_fused(apf_backend *be, const apf_net *net, float *params,
		       const float *grads, float *m, float *v,
		       struct apf_adamw_pass *a, const struct apf_adamw *h,
		       float wd)
{
	size_t np = apf_net_nparams(net), n = apf_net_param_floats(net);
	size_t *end = malloc((2 * np + 1) * sizeof *end);
	float *decay = malloc((2 * np + 1) * sizeof *decay);
	int k = 0, rc = !end || !decay;
	size_t at = 0;
	for (size_t i = 0; !rc && i < np; i++) {
		const apf_param *p = apf_net_param(net, i);
		rc = p->offset < at || p->offset + p->numel > n;
		if (!rc) {
			segment(end, decay, &k, p->offset, 1.0f);
			at = p->offset + p->numel;
			segment(end, decay, &k, at, decayed(p, h) ? wd : 1.0f);
		}
	}
	if (!rc) {
		segment(end, decay, &k, n, 1.0f);
		a->nseg = k, a->end = end, a->decay = decay;
		be->adamw(be, params, m, v, grads, a, n);
	}
	free(end);
	free(decay);
	return rc;
}

void apf_adamw_update(apf_backend *be, const apf_net *net, float *params,
		      const float *grads, float *m, float *v, float *scratch,
		      const struct apf_adamw *h, double lr, long t)
{
	size_t n = apf_net_param_floats(net);
	float c1 = (float)(1.0 / (1.0 - pow(h->b1, (double)t)));
	float c2 = (float)(1.0 / (1.0 - pow(h->b2, (double)t)));
	float wd = (float)(1.0 - lr * h->weight_decay);
	struct apf_adamw_pass a = {.b1 = (float)h->b1, .b2 = (float)h->b2,
				   .c1 = c1, .c2 = c2, .eps = (float)h->eps,
				   .step = (float)-lr};
	if (be->adamw &&
	    !adamw_fused(be, net, params, grads, m, v, &a, h, wd))
		return;
	be->moments(be, m, v, grads, a.b1, a.b2, n);
	be->adam_direction(be, scratch, m, v, c1, c2, a.eps, n);
	/* Decoupled weight decay on weights only: biases and norm parameters
	 * are left alone, which is what the parameter kinds are for. */
	for (size_t i = 0; i < apf_net_nparams(net); i++) {
		const apf_param *p = apf_net_param(net, i);
		if (decayed(p, h))
			be->scale(be, params + p->offset, wd, p->numel);
	}
	be->axpy(be, params, a.step, scratch, n);
}

static int digest_arena(apf_backend *be, const float *arena, size_t floats,
			uint8_t out[32])
{
	float *host = malloc(floats ? floats * sizeof *host : 1);
	if (!host)
		return apf_error(APF_ENOMEM, "fit", "out of memory");
	be->download(be, host, arena, floats * sizeof *host);
	int rc = be->sync(be);
	if (!rc)
		rc = apf_sha256_buf(out, host, floats * sizeof *host);
	free(host);
	return rc;
}

int apf_workload_fit(struct apf_fit_result *res, apf_workload *wl,
		     const struct apf_fit_opts *o)
{
	memset(res, 0, sizeof *res);
	apf_net *net = apf_workload_net(wl);
	apf_backend *be = apf_workload_backend(wl);
	size_t np = apf_net_param_floats(net), ns = apf_net_state_floats(net);
	float *arena = NULL, *grads = NULL, *scratch = NULL;
	int rc = be->alloc(be, (np * 3 + ns) * sizeof(float), (void **)&arena);
	if (!rc)
		rc = be->alloc(be, np * sizeof(float), (void **)&grads);
	if (!rc)
		rc = be->alloc(be, np * sizeof(float), (void **)&scratch);
	float *params = arena, *state = arena + np, *m = state + ns, *v = m + np;
	if (!rc)
		rc = apf_workload_bind(wl, params, state);
	if (!rc)
		rc = apf_workload_init(wl);
	apf_data_pos pos = {0, 0};
	unsigned splits = o->eval_splits ? o->eval_splits
					 : 1u << APF_SPLIT_VALIDATION;
	int dir = apf_workload_direction(wl);
	res->best_validation = dir > 0 ? -INFINITY : INFINITY;
	uint64_t train_ns = 0;
	for (long step = 0; !rc && step < o->steps; step++) {
		uint64_t t0 = apf_now_ns();
		apf_batch b;
		rc = apf_workload_next_batch(&b, wl, &pos, o->batch);
		if (!rc)
			rc = apf_workload_loss_grad(wl, &b, (uint64_t)step,
						    &res->last_loss, grads);
		if (!rc && !isfinite(res->last_loss))
			rc = apf_error(APF_EINPUT, "fit",
				       "training diverged: the loss is not "
				       "finite at step %ld (lower the learning "
				       "rate)",
				       step + 1);
		if (rc)
			break;
		double lr = apf_adamw_lr(&o->adamw, step, o->steps);
		apf_adamw_update(be, net, params, grads, m, v, scratch,
				 &o->adamw, lr, step + 1);
		rc = be->sync(be);
		train_ns += apf_now_ns() - t0;
		res->steps_done = step + 1;
		int last = step + 1 == o->steps && o->eval_every >= 0;
		if (rc || !(last || (o->eval_every > 0 &&
				     (step + 1) % o->eval_every == 0)))
			continue;
		rc = apf_workload_evaluate(&res->last, wl, params, state,
					   splits);
		if (rc)
			break;
		double val = apf_workload_metric(
			wl, &res->last.split[APF_SPLIT_VALIDATION]);
		if ((splits & (1u << APF_SPLIT_VALIDATION)) &&
		    (dir > 0 ? val > res->best_validation
			     : val < res->best_validation))
			res->best_validation = val;
		if (o->on_eval && o->on_eval(o->user, step + 1,
					     (double)train_ns / 1e9, &res->last))
			break;
	}
	res->train_seconds = (double)train_ns / 1e9;
	if (!rc)
		rc = digest_arena(be, arena, np + ns, res->digest);
	apf_workload_bind(wl, NULL, NULL);
	be->free(be, arena);
	be->free(be, grads);
	be->free(be, scratch);
	return rc;
}
