/*
 * trial: one training trial - a workload, a submission (a shared object
 * implementing include/apf/submission.h) and the arena that holds all of
 * the trial's state - and the harness that drives them step by step.
 *
 * The arena's layout is the wire's (wire/wire.h): the supervisor, the
 * evaluator and the verifier read it too.
 *
 * The harness implements the operations of include/apf/ops.h for the
 * submission on the trial's backend. It is the only code between the
 * submission and the workload, and it checks every call's arguments.
 */
#ifndef APF_TRIAL_H
#define APF_TRIAL_H

#include <stdint.h>

#include "apf/submission.h"
#include "base/base.h"
#include "tuning/tuning.h"
#include "wire/wire.h"
#include "workload/workload.h"

/* ---- submissions ---------------------------------------------------------- */

typedef struct apf_submission apf_submission;

/* Compiles the submission's C sources (submission.ini [build] sources, by
 * default every *.c at the top of src_dir) into out_so with `cc` and the
 * fixed flags (wire.h's apf_submission_cflags), against include_dir (the
 * directory holding apf/). The compiler's output goes to `log` (may be
 * NULL). A compile error is APF_EINPUT with the first error line. */
int apf_submission_build(const char *src_dir, const char *include_dir,
			 const char *out_so, apf_buf *log);
/* Checks what a built shared object exports without running any of it
 * (its ELF dynamic symbol table, read with libelf): apf_abi_version, a
 * defined int equal to APF_ABI_VERSION; get_batch_size,
 * init_optimizer_state and update_params defined as functions; and
 * prepare_for_eval and data_selection functions if present. What
 * `apf __build` runs after compiling, so that `apf pack` refuses an entry
 * the trial could not load, and a run's build fails with the reason. */
int apf_submission_check_exports(const char *so_path);
/* Loads a built submission: checks apf_abi_version and the required
 * symbols. */
int apf_submission_load(apf_submission **out, const char *so_path);
void apf_submission_free(apf_submission *s);
int apf_submission_batch_size(int *out, const apf_submission *s,
			      const char *workload);

/* ---- the harness ---------------------------------------------------------- */

/* What the harness trains on: a workload, or (for tests of optimizers) any
 * objective with a parameter table. */
struct apf_objective {
	void *user;
	size_t nparams;
	const apf_param *params;   /* table as the net describes it */
	size_t param_floats, state_floats;
	/* loss and gradient of params at this batch (NULL batch allowed) */
	int (*loss_grad)(void *user, const float *params, const apf_batch *batch,
			 uint64_t step, double *loss, float *grads);
	/* next training batch after *pos */
	int (*next_batch)(void *user, apf_data_pos *pos, int B,
			  apf_batch *out);
	/* initial parameters and state */
	int (*init)(void *user, float *params, float *state);
	/* points the model at the arena's parameters and state (may be NULL) */
	int (*bind)(void *user, float *params, float *state);
};

/* The objective of a workload (params bound into the arena by the
 * harness). */
void apf_objective_of_workload(struct apf_objective *o, apf_workload *wl);

struct apf_trial_info {
	const char *workload;      /* name handed to the submission */
	const char *variant;
	const char *metric;
	const char *device;
	int64_t train_examples;
	double max_runtime_s;
	int64_t max_steps;
	int64_t step_hint;
	apf_trial_key key;
};

typedef struct apf_trial apf_trial;

/* A trial over arena memory of `capacity` bytes: a fresh arena (zeroed) is
 * formatted, an existing one (a restored checkpoint) is checked. */
int apf_trial_new(apf_trial **out, const struct apf_objective *obj,
		  apf_backend *be, const apf_submission *sub,
		  const apf_hparams *hp, const struct apf_trial_info *info,
		  void *arena, size_t capacity);
void apf_trial_free(apf_trial *t);
/* Initialises parameters and runs init_optimizer_state, unless the arena
 * is already initialised (a resumed trial). */
int apf_trial_init(apf_trial *t);
/* One step: data_selection (or the next batch), update_params, step + 1.
 * *complete is set when the submission ended training. */
int apf_trial_step(apf_trial *t, int *complete);
/* prepare_for_eval, when the submission has it. */
int apf_trial_prepare_eval(apf_trial *t);
/* Brings the shared arena up to date with the working copy on the device
 * (parameters, model state, vector slots) and waits for it; nothing to do
 * on the CPU, whose working copy the shared arena is. The trial calls it
 * after its eval report, on the submission's clock. */
int apf_trial_snapshot(apf_trial *t);
/* What the submission sees of the last evaluation and the clock. */
void apf_trial_set_eval(apf_trial *t, const apf_eval_results *ev);
void apf_trial_set_submission_time(apf_trial *t, double seconds);
int64_t apf_trial_global_step(const apf_trial *t);
struct apf_arena_header *apf_trial_arena(apf_trial *t);
/* Batch size the submission asked for. */
int apf_trial_batch_size(const apf_trial *t);
/* Warnings about the hyperparameters, for the submitter (the trial sends
 * them to the supervisor, which logs and prints them): a read of a name
 * the search space does not have, and a name of the space that neither
 * init_optimizer_state nor the first update_params read. fn is called
 * between the submission's calls, never inside them. */
void apf_trial_on_warning(apf_trial *t,
			  void (*fn)(void *user, const char *msg), void *user);
/* A hyperparameter the runner applied itself (dropout_rate and
 * label_smoothing, to models that have them): read, for the warnings. */
void apf_trial_hp_consumed(apf_trial *t, const char *name);

/* `apf __trial`: the trial process, in the sandbox (main.c). */
int apf_trial_main(int argc, char **argv);

#endif
