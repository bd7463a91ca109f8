/*
 * runner: the sealed runner, `apf run` (DESIGN.md sections 3.6 and 6).
 *
 * Three roles in three processes:
 *
 *   supervisor  (this process; trusted) verifies the entry and the inputs,
 *               holds the runner key, the clock and the log, decides when
 *               evaluations happen, writes checkpoints and records;
 *   trial       (`apf __trial`, untrusted: harness + workload + submission)
 *               runs in a sandbox (pkg/sandbox) over a shared-memory arena;
 *   evaluator   (`apf __eval`, trusted) never loads submission code; it reads
 *               the arena while the trial is frozen and computes metrics.
 *
 * One unit (workload, study, trial) at a time:
 *
 *   build   the submission is compiled inside a sandbox in its setup phase;
 *   setup   the trial opens its data and backend, asks to be locked (no more
 *           processes, threads or exec), loads the submission, initialises
 *           the parameters and runs init_optimizer_state, and says ready;
 *   clock   the supervisor logs clock_start and lets it go. Submission time
 *           is the trial's running time between the supervisor's "go" and
 *           the trial's next report, measured by the supervisor;
 *   eval    when eval_period has passed since the last eval ended (and after
 *           the first step), the supervisor raises a flag the trial checks
 *           after each step; the trial runs prepare_for_eval and reports;
 *           the supervisor freezes it (SIGSTOP on every thread), logs the
 *           step block, has the evaluator compute train/validation/test
 *           metrics from the arena, writes the checkpoint (the arena's used
 *           bytes) and the eval record (fsync'd), the CSV and the signed
 *           head, then resumes the trial or stops it;
 *   stop    out of budget (checked at evals), both targets met, the
 *           submission says complete, or max steps; a sandbox fault, a crash
 *           or a submission error fails the trial, which is logged, and the
 *           run goes on with the next unit.
 *
 * The log's events and fields are specified by manifests/log-events.schema.json,
 * run.json by manifests/run.schema.json; the verifier (verify/) checks them.
 */
#ifndef APF_RUNNER_H
#define APF_RUNNER_H

#include <jansson.h>

#include "base/base.h"

struct apf_run_opts {
	const char *entry;      /* ENTRY.apf */
	const char *run_dir;    /* NULL: <entry without .apf>.run */
	const char *key_path;   /* runner key; NULL: the default key */
	const char *trust_key;  /* the entry signer's public key; NULL: trusted dir */
	const char *workload;   /* one unit: workload ... */
	long study;             /* ... study (0-based; -1: all) */
	long trial;             /* ... trial (1-based; -1: all) */
	const char *device;     /* "cpu" (default) or "cuda" */
	const char *heldout;    /* a held-out draw: run its variants too */
	int threads;            /* 0: all usable cores */
	int resume;
	int unsealed;
	int allow_env_drift;
	uint64_t memory_limit;  /* bytes for the trial; 0: default */
	double budget_scale;    /* scales every budget (tests); 0: 1 */
	int quiet;              /* no progress line */
};

/* Runs the plan (or one unit) and leaves the run directory. Returns 0 when
 * every unit ran (a failed trial is a result, not an error of the run). */
int apf_run(const struct apf_run_opts *o);

/* Evaluates the parameters and model state of an arena (live memory of
 * `bytes`, or a checkpoint's bytes) on the train subset, validation and
 * test splits: {"train/loss", "train/<metric>", "validation/...",
 * "validation/num_examples", "test/...", "test/num_examples"}. The arena's
 * header is checked first and must match the workload's model. The
 * evaluator and `apf verify --reeval` both use this. */
struct apf_workload;
struct apf_workload_spec;
int apf_runner_evaluate_arena(struct apf_workload *wl,
			      const struct apf_workload_spec *spec,
			      const void *arena, size_t bytes, json_t **out);

/* Audits for the verifier (checks 4 and 5 of DESIGN.md section 7). Opening
 * extracts the run's own entry.apf (its signer trusted by entry_key, or the
 * trusted directory), rebuilds the plan and checks the workloads here match
 * the manifest. Both checks run the same code as the runner: re-evaluation
 * in a clean evaluator process, replay of the submission in the sandbox.
 * `eval` records are the log's eval objects. Each returns 0 with why empty
 * when the result matches the log bit for bit, 0 with why naming the first
 * difference, or an error. */
typedef struct apf_audit apf_audit;
int apf_audit_open(apf_audit **out, const char *run_dir, const char *entry_key);
int apf_audit_reeval(apf_audit *a, const char *unit, const json_t *eval,
		     char *why, size_t size);
/* Replays the interval between two consecutive evals of a unit; *replayed_ns
 * is the replay's submission time, measured as the runner measures a
 * trial's (from its go to its eval report, the same threads). */
int apf_audit_replay(apf_audit *a, const char *unit, const json_t *from,
		     const json_t *to, char *why, size_t size,
		     uint64_t *replayed_ns);
/* Whether replayed times can be held against the claimed ones here: 1 when
 * this machine's CPU model equals the one run.json records (the thread
 * count is the run's by construction), else 0 with why saying what
 * differs. */
int apf_audit_timing_comparable(const apf_audit *a, char *why, size_t size);
/* The L2 norm of the parameter change between two checkpoints of a unit
 * (both read and digest-checked as the log names them): what --replay-top
 * ranks intervals by. */
int apf_audit_param_change(apf_audit *a, const char *unit, const json_t *from,
			   const json_t *to, double *out);
/* The plan's units and, for each, the evals the log keeps (work lost to a
 * crash discarded, as a resume does); NULL when the unit has none. */
size_t apf_audit_units(const apf_audit *a);
void apf_audit_unit_name(const apf_audit *a, size_t i, char *out, size_t size);
const json_t *apf_audit_unit_evals(const apf_audit *a, size_t i);
void apf_audit_close(apf_audit *a);

/* The hidden subcommands the supervisor starts. */
int apf_runner_trial_main(int argc, char **argv);
int apf_runner_eval_main(int argc, char **argv);

#endif
