/*
 * runner: the sealed runner, `apf run` (docs/design.md sections 2.6 and 3).
 *
 * Three roles in three processes:
 *
 *   supervisor  (this process; trusted) verifies the entry and the inputs,
 *               holds the runner key, the clock and the log, decides when
 *               evaluations happen, writes checkpoints and records;
 *   trial       (`apf __trial`, pkg/trial; untrusted: harness + workload +
 *               submission) runs in a sandbox (pkg/sandbox) over a
 *               shared-memory arena, hosted through pkg/host;
 *   evaluator   (`apf __eval`, pkg/eval; trusted) never loads submission
 *               code; it reads the arena while the trial is frozen and
 *               computes metrics.
 *
 * What crosses between them is pkg/wire's; the run directory's format is
 * pkg/rundir's. The verifier (verify/) uses host, eval, wire and rundir,
 * never this package: nothing here is needed to check a run.
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

/* Where the unit under way stands (apf_run_opts.progress). */
struct apf_run_progress {
	const char *unit;
	size_t ordinal, count;  /* unit ordinal of count this session runs */
	int64_t step, evals;
	double submission_s, budget_s;
	const char *metric;     /* the workload's, e.g. "accuracy" */
	double validation;      /* at the last eval; NAN before the first */
	double target;          /* the validation target */
	int slot, slots;        /* apf run -j: which of the slots units run
				 * in at once (0-based), of how many; 0, 1
				 * when one at a time */
};

/* How a unit ended (apf_run_opts.unit_end): one call per selected unit,
 * those that had ended in an earlier session included (already = 1, with
 * only failed and time_to_target_s known). */
struct apf_run_unit_end {
	const char *unit;
	int already;
	int failed;
	const char *reason;     /* trial_end's reason; NULL when already */
	const char *detail;     /* a failure's text, or NULL */
	double time_to_target_s; /* -1: not met */
	double submission_s;
	int64_t evals, global_step;
	const char *metric;
	double best_validation; /* NAN: no eval */
	double target;
};

/* apf run --slurm: the plan's unfinished selected units submitted as one
 * Slurm job array (slurm.c), one unit per array task, each task running
 * `apf run RUN/entry.apf -o RUN --workload W --study K --trial N --resume`
 * into the same run directory on shared storage. */
struct apf_slurm_opts {
	const char *partition;  /* --partition; NULL: the cluster's default */
	const char *gres;       /* --gres, e.g. gpu:1 */
	const char *time;       /* --time */
	long array_parallelism; /* %K of --array; 0: no limit */
	char *const *sbatch_args; /* more sbatch options (after --) */
	size_t nsbatch_args;
	const char *sbatch;     /* the sbatch program; NULL: "sbatch" on PATH */
	char job_id[64];        /* out: the array's job id ("" when nothing
				 * was left to submit) */
	size_t submitted;       /* out: units submitted */
};

struct apf_run_opts {
	const char *entry;      /* ENTRY.apf */
	const char *run_dir;    /* NULL: <entry without .apf>.run */
	const char *key_path;   /* runner key; NULL: the default key */
	const char *trust_key;  /* the entry signer's public key; NULL: trusted dir */
	const char *workload;   /* one unit: workload ... */
	const char *variant;    /* ... variant ("base" or a held-out
				 * variant's name; NULL: all) ... */
	long study;             /* ... study (0-based; -1: all) */
	long trial;             /* ... trial (1-based; -1: all) */
	const char *device;     /* "cpu" (default) or "cuda" */
	const char *heldout;    /* a held-out draw: run its variants too */
	int threads;            /* 0: all usable cores */
	int jobs;               /* units at once (-j; child processes of this
				 * one, each pinned to its threads' share of
				 * the usable cores); 0 or 1: one at a time */
	int resume;
	int unsealed;
	int allow_env_drift;
	uint64_t memory_limit;  /* bytes for the trial; 0: default */
	/* What submission time is measured by (rundir.h enum apf_clock;
	 * cpu only with device cpu; -1: not given, a run directory's own or
	 * wall), and the budget scale (0: not given, a run directory's own
	 * or 1; (0, 1) is a quick look that verify, score and report call
	 * unofficial). Both go into run.json's plan; units added to a run
	 * directory must use its own. */
	int clock;
	double budget_scale;
	/* The CPU layers' numerics (nn.h's APF_NUMERICS) the trials and the
	 * evaluator compute with, into run.json; 0: not given, a run
	 * directory's own or this apf's latest. Units added to a run
	 * directory must use its own. */
	int numerics;
	struct apf_slurm_opts *slurm; /* non-NULL: submit, do not run */
	/* What the run tells its user (the library prints nothing); each
	 * may be NULL. notice: one line - the runner key created, a unit's
	 * end, the summary; progress: about twice a second while a trial
	 * trains. */
	void (*notice)(void *user, const char *line);
	void (*progress)(void *user, const struct apf_run_progress *p);
	void (*unit_end)(void *user, const struct apf_run_unit_end *e);
	void *user;
};

/* Runs the plan (or one unit) and leaves the run directory. Returns 0 when
 * every unit it ran completed; APF_EABORT, naming how many failed, when a
 * trial failed (a fault, a crash, the submission's error: logged, and the
 * run goes on with the next unit), or an error of the run itself. */
int apf_run(const struct apf_run_opts *o);
/* The run directory when none is given: <entry's name without .apf>.run in
 * the current directory. Freed by the caller. */
char *apf_run_default_dir(const char *entry);

#endif
