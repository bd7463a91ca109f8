/*
 * apf/submission.h: the C ABI a submission implements (version 2; an entry
 * built for version 1 still loads: version 2 only appended operations to
 * apf/ops.h's table, and a version 1 entry never reaches past them).
 *
 * A submission is C source compiled by the runner into a shared object with
 * fixed, recorded flags, and loaded into the trial process. It mirrors the
 * AlgoPerf submission API and exports:
 *
 *   const int apf_abi_version = APF_ABI_VERSION;               required
 *
 *   int get_batch_size(const char *workload);                  required
 *       The batch size for a workload ("fmnist_mlp"); > 0.
 *
 *   int init_optimizer_state(apf_ctx *ctx, const apf_hparams *hp,
 *                            apf_prng rng);                       required
 *       Allocates the optimizer's state slots (apf_slot, apf_scalar) and
 *       initialises them. Runs before the clock starts, so it trains
 *       nothing: apf_loss_grad and apf_next_batch fail here, and the
 *       parameters, model state and data position it leaves must be the
 *       workload's initialisation (the runner checks them bit for bit, and
 *       checkpoints them as ckpt/0.bin for the verifier). The time from
 *       loading the shared object (its constructors included) to its
 *       return is measured and bounded: past 1% of the budget (at least
 *       5 s) the trial faults.
 *
 *   int update_params(apf_ctx *ctx, const apf_hparams *hp,
 *                     const apf_batch *batch,
 *                     const apf_eval_results *last_eval,
 *                     int64_t global_step, apf_prng rng,
 *                     const apf_train_state *ts);            required
 *       One training step: typically apf_loss_grad on the batch, then the
 *       update of every parameter. Timed. Returns APF_TRAINING_COMPLETE to
 *       end training early.
 *
 *   int prepare_for_eval(apf_ctx *ctx, const apf_hparams *hp,
 *                        int64_t global_step, apf_prng rng);   optional
 *       Called before each evaluation, timed, e.g. to put averaged weights
 *       in the parameters (Schedule-Free); the next update_params undoes it.
 *       It gets no data: apf_loss_grad and apf_next_batch fail here.
 *
 *   int data_selection(apf_ctx *ctx, const apf_hparams *hp,
 *                      int64_t global_step, apf_prng rng,
 *                      const apf_batch **batch);             optional
 *       Chooses the batch for the next step, usually from apf_next_batch.
 *       Default: the next batch of the shuffled training stream. Timed.
 *
 * Return 0, APF_TRAINING_COMPLETE (update_params only), or a negative
 * value for an error; the trial then fails and the log records the error.
 * With external tuning, `hp` holds the trial's draw from the submission's
 * tuning_search_space.ini; with self-tuning it is empty, and apf_hp()'s
 * defaults are the submission's own choices.
 */
#ifndef APF_SUBMISSION_H
#define APF_SUBMISSION_H

#include "ops.h"

/* What a submission built now declares, and the oldest this apf loads. An
 * apf older than a submission's version refuses it at pack and run, rather
 * than calling operations its table lacks. */
#define APF_ABI_VERSION 2
#define APF_ABI_MIN_VERSION 1

/* update_params' return value to end training early (0 means go on). */
#define APF_TRAINING_COMPLETE 1

#ifdef __cplusplus
extern "C" {
#endif

int get_batch_size(const char *workload);
int init_optimizer_state(apf_ctx *ctx, const apf_hparams *hp, apf_prng rng);
int update_params(apf_ctx *ctx, const apf_hparams *hp, const apf_batch *batch,
		  const apf_eval_results *last_eval, int64_t global_step,
		  apf_prng rng, const apf_train_state *ts);
int prepare_for_eval(apf_ctx *ctx, const apf_hparams *hp, int64_t global_step,
		     apf_prng rng);
int data_selection(apf_ctx *ctx, const apf_hparams *hp, int64_t global_step,
		   apf_prng rng, const apf_batch **batch);

#ifdef __cplusplus
}
#endif

#endif
