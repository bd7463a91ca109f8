/*
 * torchcheck.h: what the whole-model PyTorch cross-checks share
 * (test_dlrm.c, test_text_lm.c, test_unet.c). A test writes the model's
 * shapes, its parameter table (torchcheck_params) and the batch into a
 * directory, a script under tests/unit/lib rebuilds the model in float64
 * and writes torch.bin (the loss, then every parameter's gradient in apf's
 * flat layout), and torchcheck_compare holds apf's loss and gradients to
 * it: the loss to 1e-4 relative, each parameter's gradient to 1e-4 of its
 * largest entry, every parameter taking a gradient.
 */
#ifndef APF_TORCHCHECK_H
#define APF_TORCHCHECK_H

#include <stddef.h>

#include <jansson.h>

#include "nn/nn.h"

/* [{name, shape, offset, numel}, ...] of the net's parameters. */
json_t *torchcheck_params(const apf_net *net);
/* Runs tests/unit/lib/<script> on dir and returns torch.bin's 1 + np
 * doubles (the test fails otherwise). Caller frees. */
double *torchcheck_run(const char *script, const char *dir, size_t np);
/* Fails the test unless apf's loss and gradients g match PyTorch's t;
 * prints both losses and the worst relative gradient error. */
void torchcheck_compare(const char *what, const apf_net *net, double loss,
			const float *g, const double *t);

#endif
