/*
 * wlcheck.h: what the tests of whole workloads share (test_dlrm.c,
 * test_text_lm.c, test_unet.c).
 *
 * One batch's loss and gradient at perturbed initial parameters
 * (wlcheck_batch), and the PyTorch cross-check of them: a test writes the
 * model's shapes, its parameter table (wlcheck_params) and the batch into a
 * directory, a script under tests/unit/lib rebuilds the model in float64
 * and writes torch.bin (the loss, then every parameter's gradient in apf's
 * flat layout), and wlcheck_compare holds apf's loss and gradients to it:
 * the loss to 1e-4 relative, each parameter's gradient to 1e-4 of its
 * largest entry, every parameter taking a gradient.
 *
 * Short runs of the reference AdamW loop (wlcheck_fit) on 2 threads from
 * trial key (2024, 0, 1): for the stated validation figures and the
 * bit-for-bit repeats.
 */
#ifndef APF_WLCHECK_H
#define APF_WLCHECK_H

#include <stddef.h>

#include <jansson.h>

#include "workload/workload.h"

/* One batch of B at the start of the training stream of trial key
 * (11, 0, 3), the variant's initial parameters moved by 0.02 N(0, 1) each
 * (so biases and norm parameters matter too), on a 2-thread CPU backend:
 * the loss and gradient. Free with wlcheck_batch_free. */
struct wlcheck_batch {
	apf_backend *be;
	apf_workload *wl;
	apf_net *net;
	float *params, *grads;
	size_t np;
	apf_batch b;
	double loss;
};
void wlcheck_batch(struct wlcheck_batch *c, const apf_workload_spec *w,
		   const char *variant, int B);
void wlcheck_batch_free(struct wlcheck_batch *c);

/* [{name, shape, offset, numel}, ...] of the net's parameters. */
json_t *wlcheck_params(const apf_net *net);
/* Writes model.json (m, taken over) and params.bin into dir, runs
 * tests/unit/lib/<script> on it and holds c's loss and gradients to the
 * torch.bin it writes (wlcheck_compare). */
void wlcheck_torch(const struct wlcheck_batch *c, const char *script,
		   const char *dir, json_t *m, const char *what);
/* Fails the test unless apf's loss and gradients g match PyTorch's t;
 * prints both losses and the worst relative gradient error. */
void wlcheck_compare(const char *what, const apf_net *net, double loss,
		     const float *g, const double *t);

/* The reference AdamW loop: steps of batch at peak lr (b1 0.9, eps 1e-8,
 * weight decay 1e-4, 5% warmup then cosine), evaluating every eval_every
 * steps (0: at the end, < 0: never). */
struct apf_fit_result wlcheck_fit(const apf_workload_spec *w,
				  const char *variant, long steps,
				  long eval_every, int batch, double lr,
				  double b2);

#endif
