/*
 * quad.h: a trial on a known quadratic, for testing submissions through the
 * public ABI without a dataset: f(w) = 1/2 sum a_i (w_i - c_i)^2 over nine
 * parameters (a 2x3 weight and a bias of 3).
 */
#ifndef APF_TEST_QUAD_H
#define APF_TEST_QUAD_H

#include "trial/trial.h"

#define QUAD_NW 6
#define QUAD_NB 3
#define QUAD_N (QUAD_NW + QUAD_NB)
#define QUAD_STEP_HINT 50

extern const double quad_a[QUAD_N], quad_c[QUAD_N], quad_w0[QUAD_N];

struct quad_run {
	char *dir;
	apf_submission *sub;
	void *arena;
	size_t cap;
	apf_trial *trial;
	apf_backend *be;
};

/* Builds submission dir `src` (absolute, or relative to the source tree),
 * returning the build's status (the message is in apf_error_message()). */
int quad_build(struct quad_run *r, const char *src);
/* Loads the built submission and starts a trial over a fresh arena, or
 * over `arena` (a copy of another trial's, for resume tests). */
int quad_start(struct quad_run *r, const apf_hparams *hp, const void *arena);
/* The same on a CPU backend that says its memory is a device's: the
 * harness then keeps a working copy apart from the shared arena and moves
 * it with upload and download (memcpy here), as it does for cuda. */
int quad_start_on(struct quad_run *r, const apf_hparams *hp, const void *arena,
		  int device_memory);
void quad_finish(struct quad_run *r);
/* hparams by hand */
apf_hparams quad_hparams(const char **names, const double *values, size_t n);

#endif
