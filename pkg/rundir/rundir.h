/*
 * rundir: the run directory as one format (docs/design.md section 2.6), written
 * by the runner (pkg/runner) and read by the verifier (verify/) and the
 * scorer (pkg/score), so that each of its rules is written down once:
 *
 *   RUN/run.json, entry.apf, index.dsse.json (the signed index of the
 *   units' log heads), heldout.json (a held-out draw, when the run has
 *   one), and per unit RUN/study_<k>/<workload>[_<variant>]/trial_<n>/
 *   with its own log.jsonl and log.dsse.json (the signed head), hparams.json,
 *   eval_measurements.csv, ckpt/<k>.bin, build.log, trial.log and
 *   evaluator.log.
 *
 * Each unit's log is a whole log of its own (runlog.h): every session of
 * apf run that works on the unit appends run_start (bound to run.json's
 * SHA-256, which binds the log to this run), the unit's records and, unless
 * it was stopped, run_end; so units never share a writer and can run
 * concurrently. Runs made before per-unit logs kept one RUN/log.jsonl and
 * RUN/log.dsse.json for all units (the single-log layout): the verifier and
 * the scorer still read it.
 */
#ifndef APF_RUNDIR_H
#define APF_RUNDIR_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "base/base.h"

struct apf_runlog;
struct apf_key;

/* The signed head's DSSE payload type and format (log.dsse.json). */
#define APF_RUNDIR_HEAD_TYPE "application/vnd.apf.runlog-head+json"
#define APF_RUNDIR_HEAD_FORMAT "apf-runlog-head-v1"

/* The signed index (index.c): a DSSE envelope of this payload type over
 * {"format": "apf-run-index-v1", "run_json_sha256": ..., "units":
 * {"<unit>": {"records": N, "head": "<SHA-256 of line N>"}, ...}}, each
 * unit's log head at the end of its last session. */
#define APF_RUNDIR_INDEX_FILE "index.dsse.json"
#define APF_RUNDIR_INDEX_TYPE "application/vnd.apf.run-index+json"
#define APF_RUNDIR_INDEX_FORMAT "apf-run-index-v1"

struct apf_dsse;
/* The units object of an index envelope already verified (or parsed) as
 * d, after checking the payload's form and its run_json_sha256: a new
 * reference in *units. Failures are APF_EVERIFY naming file. */
int apf_rundir_index_decode(json_t **units, const struct apf_dsse *d,
			    const char *run_json_sha256, const char *file);
/* Sets unit's entry (unit NULL: none, writing an empty index when there is
 * none) in RUN/index.dsse.json, signed by key, under an exclusive flock of
 * RUN/index.lock so that concurrent writers, on one machine or on shared
 * storage, never lose each other's entries; written atomically. The index
 * there must be signed by key. */
int apf_rundir_index_update(const char *run_dir, const struct apf_key *key,
			    const char *run_json_sha256, const char *unit,
			    uint64_t records, const char *head);

/* Where each unit of run.json's plan stands (status.c, `apf status`):
 * {"run_dir", "layout": "per-unit"|"single-log", "units_planned", "counts":
 * {state: n}, "units": [{"unit", "state", "evals", "submission_s",
 * "budget_s", "preemptions", "indexed", ["time_to_target_s": under the
 * budget only, as apf score counts it],
 * ["problem"]}]}; state is pending (never started), running (another
 * process holds the unit's lock), done, failed, or preempted (started,
 * not ended, not running: stopped by a signal, a crash or a preemption;
 * apf run --resume continues it). Read, not verified. */
int apf_rundir_status(json_t **out, const char *run_dir);

/* 0 when dir has a run.json (README.md, Formats: that makes it a run
 * directory), else APF_EINPUT "<dir>: not a run directory (no run.json)".
 * A run.json that is there but unreadable is left to its readers. */
int apf_rundir_check(const char *dir);

/* The units object of RUN/index.dsse.json as it stands (missing: empty),
 * which must be signed by key. A new reference in *units. */
int apf_rundir_index_get(json_t **units, const char *run_dir,
			 const struct apf_key *key, const char *run_json_sha256);

/* Eval index's checkpoint, the name its eval record's checkpoint.file
 * carries and the file's place: "ckpt/<index>.bin" in the unit's
 * directory, or with unit (not NULL) "<unit>/ckpt/<index>.bin" in the run
 * directory. Returns the length snprintf would have written (>= size:
 * truncated). */
int apf_rundir_ckpt_name(char *out, size_t size, const char *unit,
			 uint64_t index);
/* Whether text[0..len) (a log's checkpoint.file, not NUL-terminated) names
 * eval index's checkpoint of the unit whose directory is unit[0..unit_len),
 * in either form of apf_rundir_ckpt_name. */
int apf_rundir_ckpt_named(const char *text, size_t len, const char *unit,
			  size_t unit_len, uint64_t index);

/* A unit's directory, "study_<k>/<workload>/trial_<n>" (trial 1-based); a
 * held-out variant's workload directory is <workload>_<variant>, as
 * AlgoPerf names variant workloads. Returns the length snprintf would
 * have written (>= size: truncated). */
int apf_rundir_unit_name(char *out, size_t size, long study,
			 const char *workload, const char *variant,
			 long trial);

/* Writes log.dsse.json in dir (a unit's directory; the run's in the
 * single-log layout): the runner's signature over the log's head (its
 * record count and last line's hash) and run.json's digest. */
int apf_rundir_sign_head(const char *run_dir, const struct apf_key *key,
			 const char *run_json_sha256,
			 const struct apf_runlog *log);

/* Writes a unit's eval_measurements.csv from its eval records (the log's
 * eval objects): the AlgoPerf columns and every metric, sorted bytewise as
 * AlgoPerf writes them; times in seconds with 9 decimals. Atomic. */
int apf_rundir_write_csv(const char *path, const json_t *rows);

/* A held-out draw (heldout.json, written by `apf heldout draw`) adds, for
 * each base workload of the entry it names, a unit of the drawn variant
 * beside every base unit of the plan (same study, trial and
 * hyperparameters). The variant names the plan's new units borrow are
 * returned in *variants (n of them; the caller frees each and the array). */
struct apf_plan;
struct apf_manifest;
int apf_rundir_plan_heldout(struct apf_plan *plan,
			    const struct apf_manifest *m, const char *path,
			    char ***variants, size_t *n);

/* ---- reading eval_measurements.csv (csv.c) ------------------------------- */

/* The one reader of a unit's CSV, shared by the verifier (which checks it
 * against the log) and the scorer (which reads AlgoPerf's logs with it
 * too): RFC 4180 quoting ("" escapes, newlines inside quotes), CRLF, a
 * UTF-8 byte-order mark, and blank lines skipped, as pandas does. It reads
 * text, not numbers, and leaves a row's width to the caller (the scorer
 * pads a short row, as pandas does; the verifier refuses it). It refuses a
 * NUL byte, broken quoting and a header naming a column twice. */
struct apf_rundir_csv_row {
	long line;   /* the physical line it starts on, 1-based */
	size_t n;    /* its cells; may differ from the header's */
	char **cell; /* unquoted, unescaped */
};

typedef struct apf_rundir_csv {
	long header_line; /* 0 when the text holds no header (only blanks) */
	size_t ncols;
	char **header;    /* ncols names, all different */
	struct apf_rundir_csv_row *rows;
	size_t nrows;
	long lines;       /* physical lines of the text (an unended last one
			   * counts) */
} apf_rundir_csv;

/* Why a text is no CSV, for a caller that words its own message. */
enum apf_rundir_csv_fault_kind {
	APF_RUNDIR_CSV_NUL = 1, /* a NUL byte */
	APF_RUNDIR_CSV_QUOTING, /* a quoted field never closed, text after a
				 * closing quote, a quote inside an unquoted
				 * field */
	APF_RUNDIR_CSV_TWICE,   /* a column named twice */
};

struct apf_rundir_csv_fault {
	int kind;         /* enum apf_rundir_csv_fault_kind; 0: none */
	long line;        /* where; 0: the whole file */
	char column[128]; /* APF_RUNDIR_CSV_TWICE: the name, cut */
};

/* Reads text (len bytes; name is what messages call it). A text that is
 * no CSV is APF_EINPUT, the message "<name>:<line>: <why>" (or "<name>:
 * <why>" for the whole file) and *fault, when given, saying where and why.
 * Free *out with apf_rundir_csv_free. */
int apf_rundir_csv_parse(apf_rundir_csv **out,
			 struct apf_rundir_csv_fault *fault, const char *text,
			 size_t len, const char *name);
/* The column named name, or -1. */
long apf_rundir_csv_column(const apf_rundir_csv *t, const char *name);
void apf_rundir_csv_free(apf_rundir_csv *t);

/* ---- the clock (clock.c) -------------------------------------------------- */

/* What a run's submission time is measured by (run.json plan.clock,
 * `apf run --clock`; absent: wall):
 *
 *   wall  each step block's wall time, freeze to freeze (AlgoPerf's rule,
 *         which assumes the machine is the trial's alone);
 *   cpu   each step block's CPU time of the trial process (every thread,
 *         user and system; sandbox.h apf_sandbox_usage) divided by
 *         APF_CLOCK_CPU_CORES, the cores of the benchmark's reference
 *         machine: the wall time the block would take there with its cores
 *         its own, whatever else ran beside it. Only for device cpu (a GPU's
 *         work is no CPU time).
 *
 * Every step block records cpu_ns and wait_ns (the time the trial's threads
 * waited on a run queue for a core) under either clock; a block whose wait
 * exceeds APF_CLOCK_SHORT_SHARE of its thread-time (wall time x the run's
 * threads) and APF_CLOCK_SHORT_MIN_NS a thread did not get its cores:
 * under the wall clock its time is the machine's as much as the
 * submission's. (Measured on a quiet 2-core VM: under 1% in every block of
 * fmnist_mlp but the first - one step and the data's attach, 0.1 s, 32% -
 * and about 50% beside two busy loops; bench/load.) */
enum apf_clock { APF_CLOCK_WALL = 0, APF_CLOCK_CPU = 1 };
#define APF_CLOCK_CPU_CORES 2
#define APF_CLOCK_SHORT_SHARE 0.05
#define APF_CLOCK_SHORT_MIN_NS 50000000ull

/* "wall" or "cpu". */
const char *apf_clock_name(int clock);
/* The clock a name gives, or -1. */
int apf_clock_parse(const char *name);
/* run.json's clock: plan.clock, wall when absent; -1 when it names none. */
int apf_clock_of_run(const json_t *run_json);
/* A step block's submission time: its wall time, or cpu_ns / cores
 * (rounded down), by the clock. */
uint64_t apf_clock_block_ns(int clock, uint64_t wall_ns, uint64_t cpu_ns);
/* Whether a block of wall_ns with wait_ns of run-queue wait over `threads`
 * threads was short of cores (both rules above). */
int apf_clock_short(uint64_t wall_ns, uint64_t wait_ns, long threads);
/* run.json's budget scale: plan.budget_scale, 1 when absent; 0 when it is
 * not a number in (0, 1]. A run at any other scale than 1 is a quick
 * look, not a result (`apf run --budget-scale`). */
double apf_budget_scale_of_run(const json_t *run_json);
/* run.json's numerics (nn.h's APF_NUMERICS: the CPU layers' formulas the
 * run computed with): "numerics", 1 when absent (every run made before apf
 * recorded it); -1 when it is not a positive integer. Whether this apf
 * has that version is the caller's to check. */
int apf_numerics_of_run(const json_t *run_json);

#endif
