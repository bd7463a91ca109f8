/*
 * eval: the evaluator (docs/design.md section 1.1), trusted and never loading
 * submission code. `apf __eval` (main.c) maps a trial's arena read-only and,
 * on each "eval" the supervisor sends while the trial is frozen, answers
 * the metrics of the arena's parameters and model state. The supervisor
 * (pkg/runner) and the verifier's re-evaluation (verify/) start it the same
 * way (client.c), so a re-evaluation runs exactly what the run ran. It
 * depends on the wire, the workloads and the backends, not on the runner.
 */
#ifndef APF_EVAL_H
#define APF_EVAL_H

#include <jansson.h>
#include <stddef.h>

#include "wire/wire.h"

struct apf_workload;
struct apf_workload_spec;

/* Evaluates the parameters and model state of an arena (live memory of
 * `bytes`, or a checkpoint's bytes) on the train subset, validation and
 * test splits: {"train/loss", "train/<m>" for each of the workload's
 * metrics, "validation/...", "validation/num_examples", "test/...",
 * "test/num_examples"}. The arena's
 * header is checked first and must match the workload's model. */
int apf_eval_arena(json_t **out, struct apf_workload *wl,
		   const struct apf_workload_spec *spec, const void *arena,
		   size_t bytes);

/* The value of "<split>/<name>" in metrics of that form (NAN when absent
 * or not a number; m may be NULL). */
double apf_eval_metric(const json_t *m, const char *split, const char *name);

/* `apf __eval` (the arguments of apf_unit_args, no trial-only ones). */
int apf_eval_main(int argc, char **argv);

/* An evaluator process over an arena memfd: started by exe (this apf),
 * its output appended to logfd (-1: none). */
typedef struct apf_evaluator apf_evaluator;
int apf_evaluator_start(apf_evaluator **out, const char *exe,
			const struct apf_unit_args *a, int arena_fd, int logfd);
/* One evaluation of the arena as it is now (the trial frozen). 0 with
 * *metrics set, or 0 with *metrics NULL and err saying why the evaluator
 * gave no metrics (it timed out, went away, or answered an error: what
 * the caller records as a fault); an error of the caller's side otherwise. */
int apf_evaluator_eval(apf_evaluator *e, json_t **metrics, char *err,
		       size_t size);
/* Asks it to quit (SIGKILL after a second) and reaps it; NULL is allowed. */
void apf_evaluator_stop(apf_evaluator *e);

#endif
