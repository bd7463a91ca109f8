/*
 * score: time-to-target, performance profiles and benchmark scores
 * (docs/design.md section 5), from AlgoPerf's own logs or from apf runs.
 *
 * Inputs. A submission is either an AlgoPerf log directory
 *
 *     <submission>/study_<k>/<workload>_<jax|pytorch>/trial_<n>/eval_measurements.csv
 *
 * or an apf run directory (it holds run.json; docs/design.md 2.6)
 *
 *     <run>/study_<k>/<workload>/trial_<n>/eval_measurements.csv
 *
 * whose submission name is run.json's string "submission", else the
 * directory's name. A held-out variant of base workload B is the workload
 * named B_<variant> (AlgoPerf's convention, kept for apf runs). Targets come
 * from AlgoPerf's workload_targets JSON or from workloads/<name>/workload.ini
 * ([workload] metric, direction, validation_target; a [variant.<v>] may set
 * its own validation_target).
 *
 * Pipeline, each step a function below so tests can check it alone:
 *   1. per trial: the first eval whose validation metric meets the target
 *      (NaN and empty values never do) and the submission time there; a
 *      trial whose numbers are malformed, out of range or going back in
 *      time is refused: it never meets the target (or, with
 *      APF_SCORE_STRICT, the scoring fails);
 *   2. per study: the best trial (rules decide which, see apf_score_best);
 *      a study in which no trial met the target is infinite; a study
 *      directory without any logged trial does not count at all;
 *   3. per workload: the median over studies, infinities included (an even
 *      count averages the two middle values, so inf + x gives inf);
 *   4. held-out rules, when there are held-out variants: a variant is
 *      infinite if its base is infinite or missing; then every time over 4x
 *      the per-workload best is infinite; then a base is infinite if any of
 *      its variants is infinite or missing;
 *   5. ratio r = t / (best t over submissions) per base workload; missing or
 *      infinite times never count;
 *   6. rho(tau) = share of base workloads with r <= tau, every base workload
 *      weighted equally (one missing from a submission's logs counts as
 *      missed; one that no submission has logs for is left out, with a
 *      warning); tau = numpy.linspace(1, 4, 100) bit for bit;
 *   7. score = trapezoid integral of rho over tau, divided by 3.
 *
 * Times are seconds; INFINITY means the target was missed, NAN that there
 * are no logs for it (AlgoPerf's scorer uses the same two values).
 */
#ifndef APF_SCORE_H
#define APF_SCORE_H

#include <jansson.h>
#include <stddef.h>

#include "base/base.h"
#include "refcurve/refcurve.h"

#define APF_SCORE_TAU_MIN 1.0
#define APF_SCORE_TAU_MAX 4.0
#define APF_SCORE_POINTS 100

/* Which trial of a study counts. */
enum apf_score_best {
	/* AlgoPerf's scorer: the trial that met the target at the smallest
	 * eval index (not the smallest time). Among trials tied at that
	 * index, the fastest (smallest score there), then the lowest trial
	 * number: the reference takes whichever trial os.listdir returned
	 * first, which no one can reproduce. */
	APF_SCORE_BEST_FIRST_EVAL,
	/* apf: the smallest time-to-target. */
	APF_SCORE_BEST_MIN_TIME,
};

typedef struct apf_score_rules {
	const char *name;           /* apf, algoperf-0.5, algoperf-0.6 */
	const char *summary;        /* one line for reports */
	enum apf_score_best best;
	int studies;                /* studies per workload the rules expect */
	int trials;                 /* trials per study (external tuning) */
	/* Self-tuning runtime budget as a multiple of the external-tuning one
	 * (v0.5: 3, v0.6: 1.5). The runner enforces it; the scorer reports
	 * it, as the logs end at the budget. */
	double self_tuning_budget;
	/* Scoring self-tuning submissions: one trial per study is expected
	 * (a copy of the rules with this set; see apf_score_rules_self). */
	int self_tuning;
	/* With no held-out list, AlgoPerf's scorer treats every non-base
	 * workload found in the logs as a held-out variant of the base whose
	 * name it contains; apf ignores such workloads instead. */
	int variants_from_logs;
	/* Metrics whose direction the rules know (AlgoPerf's targets file names
	 * a metric but not its direction): NULL-terminated name prefixes. */
	const char *const *minimize;
	const char *const *maximize;
} apf_score_rules;

/* NULL when the name is unknown. */
const apf_score_rules *apf_score_rules_get(const char *name);
/* The self-tuning ruleset's variant of r, written to out. */
void apf_score_rules_self(apf_score_rules *out, const apf_score_rules *r);
/* The rules for an AlgoPerf benchmark_version (exactly "0.5" or "0.6"),
 * else NULL. */
const apf_score_rules *apf_score_rules_for_version(const char *version);
/* +1 when higher is better, -1 when lower is, 0 when the rules don't say. */
int apf_score_metric_direction(const apf_score_rules *r, const char *metric);
/* The values a metric can take, by name (prefix, as for directions):
 * accuracy and mean average precision [0, 1], ssim [-1, 1], bleu [0, 100],
 * losses, error rates and wer [0, inf), perplexity [1, inf); any other
 * metric (-inf, inf). A logged value must also be finite. */
void apf_score_metric_range(const char *metric, double *lo, double *hi);

/* ---- targets -------------------------------------------------------------- */

struct apf_score_target {
	const char *metric;  /* the column is validation/<metric> */
	int direction;       /* +1 max, -1 min */
	double validation;   /* validation target */
	long step_hint;      /* AlgoPerf's step_hint (workload.ini's, else
			      * the JSON's); 0 where the targets do not say */
};

typedef struct apf_score_targets apf_score_targets;

/* AlgoPerf's workload_targets JSON: benchmark_version, base_workloads,
 * held_out_workloads, workloads.<name>.{target_metric_name,
 * validation_target_value, step_hint} (and a top-level _comment), all
 * required when benchmark_version is there; without it, apf's shorter form
 * of workloads and optionally the two lists. Any other key, a duplicate
 * key, a value of the wrong kind and a workload listed twice are errors
 * naming the key ("<path>: workloads.<name>.<key>: <why>"). It names no
 * directions: the rules know them. */
int apf_score_targets_load_json(apf_score_targets **out, const char *path);
/* Targets from workloads/<name>/workload.ini under dir (NULL: the workloads
 * directory of apf_workloads_dir()), read on first use. */
int apf_score_targets_from_workloads(apf_score_targets **out,
				     const char *dir);
void apf_score_targets_free(apf_score_targets *t);
/* The target of a workload (without framework suffix); *base is set to
 * the base workload's name when workload.ini targets know the workload as a
 * variant, else NULL. */
int apf_score_targets_find(struct apf_score_target *out, const char **base,
			   apf_score_targets *t, const apf_score_rules *rules,
			   const char *workload);
/* The file or directory the targets came from. */
const char *apf_score_targets_source(const apf_score_targets *t);
/* benchmark_version of a JSON file; NULL for workload.ini targets. */
const char *apf_score_targets_version(const apf_score_targets *t);
/* The rules the targets' benchmark_version selects ("0.5": algoperf-0.5,
 * "0.6": algoperf-0.6); *out is NULL when the targets name no version, and
 * any other version is an error naming it. */
int apf_score_targets_rules(const apf_score_rules **out,
			    const apf_score_targets *t);
/* The workloads directory workload.ini targets are read from (once one
 * was); NULL for a JSON file. */
const char *apf_score_targets_dir(const apf_score_targets *t);
/* The base and held-out workloads a JSON file names (n = 0 when it names
 * none, and always for workload.ini targets). */
const char *const *apf_score_targets_base(const apf_score_targets *t,
					  size_t *n);
const char *const *apf_score_targets_heldout(const apf_score_targets *t,
					     size_t *n);

/* ---- held-out variants ---------------------------------------------------- */

struct apf_score_variant {
	char *base;    /* NULL until resolved, for AlgoPerf's list form */
	char *variant; /* full workload name, B_<variant> */
};

typedef struct apf_score_heldout {
	char *source;
	char *seed;    /* an apf draw's seed, else NULL */
	struct apf_score_variant *v;
	size_t n;
} apf_score_heldout;

/* A held-out file, read by pkg/heldout's reader of held-out files
 * (apf_heldout_list_load, whose forms and messages these are): a draw file
 * of `apf heldout draw`, read by its one strict reader apf_heldout_parse;
 * AlgoPerf's list of variant workload names (no seed; bases resolved by
 * name later); or a draw by hand ({"seed": "...", "draws": [{"base": B,
 * "variant": V}, ...]}, V being the variant's name or the full workload
 * name B_<V>). */
int apf_score_heldout_load(apf_score_heldout **out, const char *path);
/* A list made in memory; base may be NULL (resolved by name later). */
int apf_score_heldout_new(apf_score_heldout **out, const char *source);
int apf_score_heldout_add(apf_score_heldout *h, const char *base,
			  const char *variant);
void apf_score_heldout_free(apf_score_heldout *h);
/* The base of a variant name: the longest base B with name = B_..., else
 * the first base contained in the name (AlgoPerf's rule); NULL if none. */
const char *apf_score_base_of(const char *variant, const char *const *bases,
			      size_t nbases);

/* ---- logs ----------------------------------------------------------------- */

struct apf_score_trial {
	int number;     /* n of trial_<n> */
	char *csv;      /* its eval_measurements.csv */
	long evals;     /* rows read; -1 before reading */
	long hit;       /* first eval index meeting the target; -1 if none */
	double time;    /* submission time at hit; INFINITY if none */
	/* Why its values were refused, "<csv>:<line>: <why>", else NULL; a
	 * refused trial never meets its target. */
	char *refused;
	/* A unit of an apf run's plan without eval_measurements.csv (csv is
	 * NULL): it never meets its target. */
	int missing;
	/* Its budget in seconds of submission time, from its log's
	 * trial_start (an apf run's; 0: unknown, as in AlgoPerf's logs, whose
	 * runner evaluates only while budget remains). Rows at or past it
	 * are no evals; late: one of them met the target, none before. */
	double budget;
	int late;
};

struct apf_score_study {
	int number;     /* k of study_<k> */
	struct apf_score_trial *trials; /* sorted by number */
	size_t ntrials;
	int best;       /* index into trials of the chosen trial, -1 if none */
	double time;    /* the study's time-to-target, INFINITY if missed */
};

struct apf_score_workload {
	char *name;      /* without framework suffix */
	char *dir_name;  /* as found, e.g. wmt_jax */
	struct apf_score_study *studies; /* sorted by number */
	size_t nstudies;
	size_t skipped;  /* trial directories without eval_measurements.csv */
	int read;        /* trials have been read */
	double time;     /* median over studies; NAN if no study has logs */
};

/* ---- what an apf run directory says of itself ----------------------------
 * A CSV alone does not say whether the run behind it is whole: run.json
 * lists the plan's units and the machine, log.jsonl which units started,
 * ended or failed and whether the last session ended (run_end). The scorer
 * reads them (without verifying them: that is `apf score --verify`, done by
 * the caller) so that a run holding 1 of its 15 units, an interrupted run
 * or failed units are said, not silently scored. */

enum apf_score_unit_state {
	APF_SCORE_UNIT_NOT_RUN = 0,   /* planned; the log never started it */
	APF_SCORE_UNIT_ENDED,         /* trial_end, not failed */
	APF_SCORE_UNIT_FAILED,        /* trial_end with failed: true */
	APF_SCORE_UNIT_INTERRUPTED,   /* started, and no trial_end */
};

struct apf_score_unit {
	char *name;       /* study_<k>/<workload>[_<variant>]/trial_<n> */
	char *dir_name;   /* <workload>[_<variant>], as the scorer's workload */
	long study, trial;
	int planned;      /* one of run.json's plan units */
	int state;        /* enum apf_score_unit_state */
	int has_csv;      /* its eval_measurements.csv is there */
	char reason[16];  /* trial_end's reason, "" before one */
	char fault[16];   /* the kind of its last sandbox_fault, "" if none */
	/* Its log's warning records (the trial's: a hyperparameter the
	 * search space lacks, ...): how many, and the first one's detail
	 * (the trial's text, cut; escape it where it is printed). */
	long warnings;
	char warning[200];
	/* For the plausibility backstop: the kept eval records (as a resume
	 * keeps them; NULL: none) and the largest batch size its clock_start
	 * records (0: none). */
	json_t *evals;
	int64_t batch_size;
	uint64_t budget_ns; /* its trial_start's budget; 0: none */
};

/* The machine of a run, from run.json: device, threads, environment's
 * cpu.model, cpu.cores and gpus[].name. NULL or -1 where it does not say. */
struct apf_score_hardware {
	char *device;
	char *cpu_model;
	long cpu_cores;
	long threads;
	char *gpu_model;  /* the GPUs' names joined by ", "; "" for none */
	long gpus;
};

typedef struct apf_score_run {
	struct apf_score_unit *units; /* the plan's first, then others */
	size_t nunits;
	size_t nplanned;  /* units[0 .. nplanned) are run.json's plan */
	int plan_known;   /* run.json lists plan.units */
	int log_found;    /* log.jsonl is there (the single-log layout), or
			   * the index of per-unit logs */
	char *log_error;  /* why the log could not be read, else NULL */
	int log_torn;     /* it ends in a torn line (a crash while writing) */
	int ended;        /* its last session ends with run_end (every unit
			   * log's, in the per-unit layout; one at least) */
	struct apf_score_hardware hw;
	/* run.json's entry.manifest_sha256 (64 lowercase hex), else "": the
	 * entry the run claims to run, checked by the verifier, not here. */
	char entry_manifest[65];
	char *submission; /* run.json's "submission" when a non-empty string,
			   * else NULL */
	/* run.json's clock (rundir.h enum apf_clock; -1: one apf does not
	 * write) and budget scale (1: a result; 0: not one apf writes), and
	 * the logs' step blocks, those short of cores among them
	 * (apf_clock_short, over the blocks that record their wait). */
	int clock;
	double budget_scale;
	uint64_t blocks, short_blocks;
	/* run.json's numerics (rundir.h apf_numerics_of_run: 1 when absent,
	 * -1 when not a version number). */
	int numerics;
} apf_score_run;

/* Reads run.json and log.jsonl of the run directory dir (the log with
 * pkg/runlog's reader, each unit's story with pkg/rundir's, as a resume
 * reads it). A log that is missing or cannot be read is not an error:
 * log_found and log_error say so. A run.json that is no JSON object is. */
int apf_score_read_run(apf_score_run **out, const char *dir);
void apf_score_run_free(apf_score_run *r);
/* "cpu AMD EPYC (2 cores), 2 threads, no GPU" and the like. */
int apf_score_hardware_describe(apf_buf *out,
				const struct apf_score_hardware *hw);
/* The fields in which runs' machines differ (device, cpu.model, cpu.cores,
 * threads, gpu.model, gpu.count), one message each, "runs differ in
 * <field> (<name>: <value>; ...): time-to-target is comparable only on the
 * same hardware", into *out (n of them; free each and the array). */
int apf_score_hardware_compare(char ***out, size_t *n,
			       const char *const *names,
			       const struct apf_score_hardware *const *hw,
			       size_t nruns);

/* Whether a submission's run was verified (apf score --verify). */
enum apf_score_verified {
	APF_SCORE_UNVERIFIED = 0,     /* not asked, or not yet */
	APF_SCORE_VERIFIED,           /* apf verify's checks passed */
	APF_SCORE_NOT_VERIFIABLE,     /* AlgoPerf's logs: nothing signed */
};

struct apf_score_submission {
	char *name;      /* its label, else run.json's submission, else the
			  * directory's name */
	char *path;
	char *label;     /* DIR=LABEL's label, else NULL */
	int apf_run;
	apf_score_run *run; /* an apf run's own account, else NULL */
	int verified;    /* enum apf_score_verified */
	struct apf_score_workload *w; /* sorted by name */
	size_t nw;
	size_t stray;    /* trial_* directories directly under a study */
};

/* A submission left out of the scoring (its run failed verification). */
struct apf_score_excluded {
	char *name, *path, *reason;
};

typedef struct apf_score_logs {
	struct apf_score_submission *s;
	size_t n;
	struct apf_score_excluded *excluded;
	size_t nexcluded;
} apf_score_logs;

int apf_score_logs_new(apf_score_logs **out);
/* Adds the submission at path, or each submission directory inside path.
 * Only walks directories (and an apf run's run.json and log); CSVs are
 * read by apf_score_compute. */
int apf_score_logs_add(apf_score_logs *l, const char *path);
/* The same for one submission named label (NULL: as apf_score_logs_add);
 * path must then be one submission, not a directory of them. Names and
 * labels must be unique: a duplicate is an error naming it. */
int apf_score_logs_add_as(apf_score_logs *l, const char *path,
			  const char *label);
/* Takes submission i out of the scoring, keeping its name, path and why
 * for the report. */
int apf_score_logs_exclude(apf_score_logs *l, size_t i, const char *reason);
void apf_score_logs_free(apf_score_logs *l);
/* True when any submission is an apf run. */
int apf_score_logs_have_apf_run(const apf_score_logs *l);

/* ---- one eval_measurements.csv ------------------------------------------- */

/* Reads an eval_measurements.csv and finds the first eval meeting the
 * target: the time is score (else accumulated_submission_time). Every
 * number read (validation/<metric>, score, accumulated_submission_time,
 * accumulated_eval_time, accumulated_logging_time, total_duration,
 * global_step, preemption_count) must be a plain decimal in its range, and
 * the accumulated ones must not go back from one row to the next; csv.c has
 * the rules. A value refused so does not fail the call: trial->refused says
 * why and the trial counts as never meeting its target. A file that is not
 * a readable CSV, or lacks the metric or time column, is an error. Both
 * kinds of message read "score: <csv>:<line>: <why>". */
int apf_score_read_trial(struct apf_score_trial *trial,
			 const struct apf_score_target *target);
/* The same over a CSV text, name standing for the file; here a refused
 * value is an error (APF_EINPUT) too. */
int apf_score_parse_trial(const char *text, size_t len, const char *name,
			  const struct apf_score_target *target, long *evals,
			  long *hit, double *time);
/* The same with the trial's budget (seconds of submission time; 0: none):
 * rows timed at or past it are checked but are no evals and meet no
 * target (AlgoPerf evaluates only while budget remains; apf's unit makes
 * one last eval there, for the record). *late: one of them met the target
 * and no eval before did; *cut: the byte offset where the first of them
 * begins (len when none), so text[0, *cut) is the CSV AlgoPerf's runner
 * would have written. */
int apf_score_parse_trial_within(const char *text, size_t len,
				 const char *name,
				 const struct apf_score_target *target,
				 double budget, long *evals, long *hit,
				 double *time, int *late, size_t *cut);

/* ---- the steps ------------------------------------------------------------ */

/* First index whose value meets target in direction; -1 when none does. */
long apf_score_first_hit(const double *v, size_t n, int direction,
			 double target);
/* Chooses a study's trial (trials sorted by number, hit/time filled);
 * returns its index or -1, and the study's time (INFINITY if none met). */
int apf_score_study_best(const struct apf_score_trial *trials, size_t n,
			 enum apf_score_best best, double *time);
/* Median with numpy's semantics: NaN in, NaN out; NAN when n is 0. */
double apf_score_median(const double *v, size_t n);
/* The held-out rules in place. t is nsub rows by ncols columns; variant i
 * is column var_col[i] and its base column base_col[i]. */
void apf_score_heldout_rules(double *t, size_t nsub, size_t ncols,
			     const size_t *var_col, const size_t *base_col,
			     size_t nvar);
/* numpy.linspace(1, 4, 100). */
void apf_score_taus(double tau[APF_SCORE_POINTS]);
/* Ratios (nsub x nbase, NAN where not counted) of the times t (nsub x nbase)
 * to the per-column best, and the profiles rho (nsub x APF_SCORE_POINTS). */
void apf_score_profile(const double *t, size_t nsub, size_t nbase,
		       double *ratio, double *rho);
/* Trapezoid integral of y over x divided by the range of x. */
double apf_score_integrate(const double *y, const double *x, size_t n);

/* ---- the result ----------------------------------------------------------- */

typedef struct apf_score_result {
	const apf_score_rules *rules;
	char *targets_source;
	char *heldout_source;   /* NULL when no held-out rules applied */
	/* With heldout_source, what binds the draw's seed ("the seed of the
	 * 3 entries the runs here run"), as its caller found it; "" if it
	 * did not say. */
	char heldout_binding[160];
	size_t nsub;
	const struct apf_score_submission **sub; /* ranked: score, then name */
	size_t nbase, nvar;
	char **workloads;       /* nbase base workloads, then nvar variants */
	char **variant_base;    /* for each variant, its base */
	double *raw;            /* nsub x (nbase + nvar) medians */
	double *final;          /* the same after the held-out rules */
	double *ratio;          /* nsub x nbase */
	double tau[APF_SCORE_POINTS];
	double *rho;            /* nsub x APF_SCORE_POINTS */
	double *score;          /* nsub */
	/* nsub x (nbase + nvar): the cell's time involves a unit that
	 * stopped early (failed or interrupted) without meeting its target,
	 * so a miss there is not a miss over the whole budget. */
	unsigned char *early;
	int verify;             /* APF_SCORE_VERIFY was given */
	/* With verify: the re-evaluation and replay the caller's verifier
	 * made beyond apf verify's default checks ("re-evaluation; replay
	 * of 2 intervals by seed 7"), "" for none; the caller writes it
	 * after apf_score_compute. */
	char audit[256];
	/* The plausibility backstop (pkg/refcurve, apf_score_plausibility):
	 * nsub x (nbase + nvar), some unit of the cell reached its target in
	 * implausibly few training examples against the workload's reference
	 * curve. The time is scored as logged: a flag, for a person to look
	 * at. */
	unsigned char *implausible;
	struct apf_score_flag {
		size_t sub;            /* index into sub (ranked) */
		long col;              /* its column, -1 if none */
		char *unit, *workload; /* workload: the unit's directory */
		char *reference, *reference_run, *metric;
		char *text;            /* apf_refcurve_describe's line */
		struct apf_refcurve_verdict v; /* v.ref.run is NULL here */
	} *flags;
	size_t nflags;
	size_t plausibility_checked;   /* units that met a target, curve
					* there */
	size_t plausibility_uncurved;  /* ... with no curve */
	char **plausibility_notes;     /* "no reference curve for X", once */
	size_t nplausibility_notes;
	char *references_dir;          /* where curves were looked for */
	const apf_score_logs *logs; /* for the excluded submissions */
	char **warnings;
	size_t nwarnings;
} apf_score_result;

/* apf_score_compute's flags. STRICT: a refused trial (see
 * apf_score_read_trial), a trial directory without its CSV, a study or
 * trial count other than the rules expect, and a base workload that no
 * submission has logs for are errors (APF_EINPUT), as under AlgoPerf's
 * scorer's --strict; without it each is a warning, a refused trial counts
 * as never meeting its target and the base workload is left out. */
#define APF_SCORE_STRICT 1u
/* The caller verified the apf runs (apf score --verify) and marked each
 * submission's verified; the report says what was and was not. */
#define APF_SCORE_VERIFY 2u

/* Reads the trials the scoring needs and computes everything. heldout may
 * be NULL (then a targets file's held-out list applies, if any). The result
 * points into logs: free it first. */
int apf_score_compute(apf_score_result **out, apf_score_logs *logs,
		      apf_score_targets *targets,
		      const apf_score_heldout *heldout,
		      const apf_score_rules *rules, unsigned flags);
void apf_score_result_free(apf_score_result *r);
/* The plausibility backstop over the apf runs of a computed result (called
 * by apf_score_compute; pkg/refcurve has the rule): every unit that met
 * the target the scorer holds it to is judged at its first eval meeting
 * it, examples = global_step x the batch size its log records, against
 * <workloads dir>/references/<workload>.json (the targets' workloads
 * directory, else apf_workloads_dir()), never a file of the run. Fills
 * implausible, flags and the notes (a reference file that cannot be read
 * is one); an error only when out of memory. */
int apf_score_plausibility(apf_score_result *r, apf_score_targets *targets,
			   const apf_score_rules *rules);

/* ---- the AlgoPerf export (export.c) ---------------------------------------
 * Writes what r scored into dir in the layout AlgoPerf's own scorer reads
 * (mlcommons/submissions_algorithms, scoring/score_submissions.py):
 *
 *   dir/submissions/<submission>/study_<k>/<workload dir>/trial_<n>/
 *       eval_measurements.csv   byte for byte as scored
 *       hparams.json            the run's, when it has one
 *       meta_data_0.json, flags_0.json   an apf run's machine and unit;
 *                               an AlgoPerf log's own files
 *   dir/workload_targets.json   benchmark_version (the rules'), the base
 *                               and held-out workloads scored, each one's
 *                               target metric, target and step hint
 *   dir/apf_export.json         the scorer's command line, the export's
 *                               warnings, and apf score --json's result
 *
 * so that AlgoPerf's scorer over dir gives r's scores. Only under the
 * AlgoPerf rules (APF_EUSAGE otherwise); dir must not exist or be an
 * empty directory, and is written whole or not at all. A refused trial, a
 * CSV that no longer gives the eval and time scored, a name that is no
 * plain directory name and a target metric AlgoPerf's scorer cannot read
 * are APF_EINPUT. Studies in which trials tie at the earliest eval (apf
 * and AlgoPerf may count different ones) make a warning (free each and
 * the array); *command is the command line that runs AlgoPerf's scorer
 * over dir from its repository's root (dir made absolute; free it).
 * export.c's comment has the rules. */
int apf_score_export_algoperf(char ***warnings, size_t *nwarnings,
			      char **command, const apf_score_result *r,
			      apf_score_targets *targets, const char *dir);

/* ---- reports -------------------------------------------------------------- */

/* t seconds in fixed point with at least sig significant digits and at
 * least min_decimals decimals (sig 4: 0.9780, 69.50, 158.4, 1235). */
void apf_score_format_seconds(char *out, size_t size, double t, int sig,
			      int min_decimals);
/* A text table: rank, submission, score, per-workload times (4 significant
 * digits; "?" on a cell the plausibility backstop flagged), what was
 * verified, the machine, the plausibility section and the warnings. */
int apf_score_format_table(apf_buf *out, const apf_score_result *r);
/* submission,score,<base workloads...>,<variants...>; inf where missed,
 * empty where there are no logs; times with at least 6 decimals and 6
 * significant digits. Where the plausibility backstop flagged a cell, a
 * last column "implausible" lists each row's flagged workloads (space
 * separated). */
int apf_score_format_csv(apf_buf *out, const apf_score_result *r);
/* Times as numbers, "inf" when missed, null when there are no logs; per
 * submission its "implausible" units (apf verify --json's flagged form,
 * with the column), and a top-level "plausibility" object ({"factor",
 * "references_dir", "checked", "met_without_curve", "units_flagged",
 * "notes"}). */
int apf_score_format_json(apf_buf *out, const apf_score_result *r);
/* The same as a JSON object (the caller's reference); NULL when out of
 * memory. */
json_t *apf_score_result_json(const apf_score_result *r);
/* The performance-profile plot: rho over [0, 1] with headroom on both
 * sides (a profile at 1 or 0 never lies on the frame), each submission with
 * its own colour and dash pattern, and a legend showing both. */
int apf_score_format_svg(apf_buf *out, const apf_score_result *r);
/* Submission i's colour as "#rrggbb" in out (NUL-terminated): Tableau 10,
 * then hues spaced by the golden angle. The profile plot and the report's
 * own plots both draw submission i in it, so one submission has one colour
 * on the whole page. */
void apf_score_colour(char out[8], size_t i);

#endif
