/*
 * portmodel.h: a trial on a moving quadratic with parameters of every
 * shape an optimizer treats differently, for checking the ported
 * submissions (submissions/<port>) against PyTorch implementations of the
 * same algorithms (ports_torch.py).
 *
 * Five tensors: "fc.weight" (8,12), "fc.bias" (8), "conv.weight" (6,3,3,2)
 * (a 6 x 18 matrix view), "emb.weight" (10,4) and "norm.scale" (5), 257
 * floats in all. The batch of step s is a set of targets c_s:
 *
 *   loss = 1/2 sum_i a_i (w_i - c_{s,i})^2
 *   g_i  = (float)(a_i ((double)w_i - c_{s,i}))
 *
 * computed in double and rounded once, so that PyTorch, doing the same in
 * float64 and casting, gets the same gradient bits at the same parameters.
 * a_i spans two decades (log-uniform in [0.05, 5]) and the targets swing
 * around a per-parameter centre from step to step, so gradients change sign
 * and magnitude the way a noisy training loss's do.
 *
 * portmodel_run builds a submission, runs it through apf_trial_step and
 * writes into a directory what the other side needs:
 *
 *   model.json    port, steps, step_hint, hparams {name: value or word},
 *                 params [{name, kind, shape, offset, numel}]
 *   w0.bin        float32[n]           the initial parameters
 *   a.bin         float64[n]           the curvatures a_i
 *   targets.bin   float64[steps][n]    c_{s,i}
 *   apf.bin       float32[steps][n]    apf's parameters after each step
 *
 * ports_torch.py DIR writes torch.bin, float32[steps][n], the same way.
 */
#ifndef APF_TEST_PORTMODEL_H
#define APF_TEST_PORTMODEL_H

#include <stddef.h>
#include <stdint.h>

#define PORTMODEL_NPARAMS 5
#define PORTMODEL_N 257

struct portmodel_param {
	const char *name;
	const char *kind;   /* as model.json names it: "weight", "bias", ... */
	int ndim;
	int shape[4];
	size_t offset, numel;
};

extern const struct portmodel_param portmodel_params[PORTMODEL_NPARAMS];

/* One port's run: the submission directory (relative to the source tree),
 * the algorithm's name in ports_torch.py, the trial's hyperparameters,
 * the steps to take and the step hint the submission sees. */
struct portmodel_opts {
	const char *submission;
	const char *port;
	const char *const *hp_names;
	const double *hp_values;
	/* NULL, or one per hyperparameter: where not NULL, the hyperparameter
	 * is that word (true, ADAM, ...) and its value is unused. */
	const char *const *hp_words;
	size_t nhp;
	/* NULL, or the tensors' kinds as model.json names them, in place of
	 * portmodel_params' (emb.weight declared a "weight" makes a tall
	 * matrix for an algorithm that treats embeddings apart); the initial
	 * values stay the same. */
	const char *const *kinds;
	int steps;
	int64_t step_hint;
};

/* Builds and runs the submission, writing the files above into dir.
 * Returns 0 or an apf error code (the message in apf_error_message()). */
int portmodel_run(const struct portmodel_opts *o, const char *dir);

#endif
