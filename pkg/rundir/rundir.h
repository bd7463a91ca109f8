/*
 * rundir: the run directory as one format (DESIGN.md section 3.6), written
 * by the runner (pkg/runner) and read by the verifier (verify/) and the
 * scorer (pkg/score), so that each of its rules is written down once:
 *
 *   RUN/run.json, log.jsonl, log.dsse.json (the signed head), entry.apf,
 *   heldout.json (a held-out draw, when the run has one), and per unit
 *   RUN/study_<k>/<workload>[_<variant>]/trial_<n>/ with hparams.json,
 *   eval_measurements.csv, ckpt/<k>.bin, build.log, trial.log and
 *   evaluator.log.
 */
#ifndef APF_RUNDIR_H
#define APF_RUNDIR_H

#include <jansson.h>
#include <stddef.h>

#include "base/base.h"

struct apf_runlog;
struct apf_key;

/* The signed head's DSSE payload type and format (log.dsse.json). */
#define APF_RUNDIR_HEAD_TYPE "application/vnd.apf.runlog-head+json"
#define APF_RUNDIR_HEAD_FORMAT "apf-runlog-head-v1"

/* A unit's directory, "study_<k>/<workload>/trial_<n>" (trial 1-based); a
 * held-out variant's workload directory is <workload>_<variant>, as
 * AlgoPerf names variant workloads. Returns the length snprintf would
 * have written (>= size: truncated). */
int apf_rundir_unit_name(char *out, size_t size, long study,
			 const char *workload, const char *variant,
			 long trial);

/* Writes log.dsse.json in run_dir: the runner's signature over the log's
 * head (its record count and last line's hash) and run.json's digest. */
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

#endif
