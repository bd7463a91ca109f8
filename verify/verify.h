/*
 * verify: the auditor's side of a run directory (docs/design.md sections 2.6,
 * 3 and 3.8): `apf verify RUN_DIR`.
 *
 * The checks, in docs/design.md 3.8's order; the first failure stops the
 * verification and names its check, file and record:
 *   1 entry        RUN/entry.apf: signed by a trusted key, the archive equal
 *                  to its manifest.
 *   2 log          run.json bound to the entry (digests, signer, plan:
 *                  its units exactly the entry's plan's, none left out);
 *                  log.jsonl: contiguous seq, intact prev chain, every
 *                  record of its event's form (manifests/log-events.schema
 *                  .json), run_start bound to run.json and the entry, every
 *                  trial's parameters those of the entry's plan (the
 *                  recomputed hyperparameter draw) and workload spec
 *                  (targets, budget, eval period, max steps); the runner's
 *                  signature (log.dsse.json) over exactly the last line
 *                  (of a finished log; see below); hparams.json equal to
 *                  the trial's. In the per-unit layout (rundir.h) that is
 *                  every unit's own log and signed head, each holding only
 *                  its unit's records and bound to run.json by its
 *                  run_start, and index.dsse.json, the runner's signature
 *                  over the units' heads: every unit it names is in the
 *                  plan and has a log, every log whose last session ended
 *                  is named with its last line, an open one (a crash, a
 *                  unit still running) at most with a line of it. Runs of
 *                  the single-log layout (one RUN/log.jsonl) are read as
 *                  before.
 *   3 timing       from the supervisor's timestamps: accumulated submission,
 *                  eval and logging time and total duration; step counts;
 *                  eval cadence; budget; target flags against the metrics;
 *                  the stop at the first eval meeting both targets;
 *                  time-to-target; resumes; eval_measurements.csv equal to
 *                  the log.
 *   4 checkpoints  every kept eval's checkpoint file has the logged size
 *                  and SHA-256; `apf verify --reeval` then re-evaluates
 *                  each in a clean evaluator process (apf_verify_audit,
 *                  audit.c, through pkg/eval) and compares the metrics bit
 *                  for bit, and checks the initial state against the
 *                  workload's initialisation for the seed.
 *   5 replay       `apf verify --replay N|all`, `--replay-top Q`: eval
 *                  intervals of the verified walk's kept checkpoints,
 *                  chosen by a printed seed (or by parameter change),
 *                  re-executed from their checkpoint in the sandbox
 *                  (apf_verify_audit, through pkg/host) and compared with
 *                  the next checkpoint byte for byte (within a tolerance
 *                  only when the auditor asks: never because of what
 *                  run.json claims); reported as skipped when not asked
 *                  for.
 *   6 held-out     held-out variant units are the ones RUN/heldout.json
 *                  draws, each draw recomputed from its seed, and every
 *                  unit of a drawn workload has its variant copy.
 *
 * The verifier never links pkg/runner or pkg/trial (tests/layout's link
 * check; verify/README says what it does link, with the line count). Records
 * are checked while the log is read (the reader hashes and parses on all
 * cores; the per-unit checks run in order); a timing failure found while
 * the chain is still being read is held back until the chain, signature and
 * binding have passed, so failures are always reported in check order.
 *
 * Sessions: every `apf run` into a directory appends run_start, its units'
 * records and (unless it was killed) run_end; a unit interrupted by a
 * crash goes on in a later session after a resume record.
 *
 * Every file of the run directory is read as pkg/base reads files others
 * wrote: without blocking, regular files only, no symlink followed in any
 * component below RUN_DIR, each kind capped (base.h's APF_MAX_*). A refused
 * file counts as that file malformed: entry.apf, run.json, log.jsonl and
 * log.dsse.json are input errors (exit 2); hparams.json, the CSVs, the
 * checkpoints and heldout.json, which the log vouches for, fail their
 * check (exit 1), and a refused checkpoint's target is never measured.
 *
 * Returns 0 (verified, the run complete), APF_EVERIFY (a check failed),
 * APF_EABORT (everything there verified, but the run stopped abnormally or
 * is still running: the log ends without run_end, or a unit was left
 * interrupted; such a log may end in a torn line, records written after the
 * last signed head, or have no signature yet - the signed prefix must
 * check out), or an input error (a file of the run directory missing or
 * malformed, unusable keys or workloads).
 */
#ifndef APF_VERIFY_H
#define APF_VERIFY_H

#include <limits.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "refcurve/refcurve.h"
#include "sign/sign.h"

enum apf_verify_check {
	APF_VERIFY_ENTRY = 1,
	APF_VERIFY_LOG,
	APF_VERIFY_TIMING,
	APF_VERIFY_CHECKPOINTS,
	APF_VERIFY_REPLAY,
	APF_VERIFY_HELDOUT,
};
#define APF_VERIFY_NCHECKS 6

enum apf_verify_outcome {
	APF_VERIFY_NOT_RUN = 0, /* an earlier check failed */
	APF_VERIFY_PASSED,
	APF_VERIFY_FAILED,
	APF_VERIFY_SKIPPED,     /* not asked for */
};

struct apf_verify_opts {
	const apf_keyring *runner_keys; /* log.dsse.json's signer */
	const apf_keyring *entry_keys;  /* entry.apf's signer */
	/* Checks 2 and 3 over log.jsonl only: no hparams.json, CSVs or
	 * checkpoint files (benchmarks of the log checks). */
	int log_only;
	/* The auditor's --pruned: a unit none of whose checkpoint files is
	 * there had them deleted after an earlier verification read them (a
	 * campaign keeps what it verified, not the bytes). Check 4 fails on
	 * none of its files, and the audits neither re-evaluate nor replay
	 * it; the report names every such unit (pruned). A unit with some of
	 * its checkpoint files is checked as without the option. Never the
	 * run directory's choice: without it a missing file fails check 4. */
	int pruned;
	/* Called now and then while the log is read. May be NULL. */
	void (*progress)(void *user, uint64_t records, uint64_t bytes,
			 uint64_t total_bytes);
	void *user;
};

struct apf_verify_result {
	int outcome;          /* enum apf_verify_outcome */
	char *detail;         /* one line: what passed, or why it failed */
	double seconds;
};

/* The plausibility backstop (pkg/refcurve/refcurve.h): each unit that met
 * its validation target, held against its workload's reference curve from
 * the auditor's workloads directory (never the run's). A flag, not a
 * failed check: an honest run may be the first to beat the references by
 * that much, and a person decides. */
struct apf_verify_plausibility {
	size_t checked;       /* units that met the target, with a curve */
	size_t met_uncurved;  /* units that met it with no curve to hold
			       * them against */
	struct apf_verify_flag {
		char *unit;
		char *workload;       /* its workload directory */
		char *reference;      /* the reference file */
		char *reference_run;  /* the run that sets the bound */
		char *metric;
		char *text;           /* apf_refcurve_describe's line */
		struct apf_refcurve_verdict v; /* v.ref.run is NULL here */
	} *flagged;
	size_t nflagged;
	/* One line each, once per workload directory: "no reference curve for
	 * X (<file>)", or why its curve does not apply; and the files used. */
	char **notes;
	size_t nnotes;
	char **references;
	size_t nreferences;
};

typedef struct apf_verify_report {
	char *run_dir;
	int status;           /* what apf_verify_run returned */
	struct apf_verify_result check[APF_VERIFY_NCHECKS + 1]; /* 1-based */
	/* What was verified (valid as far as the checks got). */
	char *submission;
	char entry_sha256[65], manifest_sha256[65], entry_signer[65];
	char runner_signer[65], head[65];
	uint64_t records, log_bytes;
	int complete;         /* the log ends with run_end, no unit left
			       * interrupted */
	uint64_t unsigned_records; /* after the signed head (incomplete) */
	size_t torn_bytes;    /* a torn last line (incomplete) */
	int sealed;
	/* units: run.json's plan (a per-unit run; 0 otherwise), the rest
	 * what the log holds: a run may verify complete with units of its
	 * plan not run yet (apf run --study K), and says how many. */
	size_t units, units_started, units_ended, units_failed;
	size_t evals, resumes, env_drifts;
	size_t checkpoints;
	uint64_t checkpoint_bytes;
	/* --pruned: the units whose checkpoints were not read, by name
	 * (study_<k>/<dir>/trial_<n>), in the log's order. */
	char **pruned;
	size_t npruned;
	/* The training time the log claims: every unit's last total
	 * duration, added up. */
	uint64_t claimed_ns;
	/* What the audits (apf_verify_audit) use: per unit, the checkpoints
	 * the verified walk of the log keeps - the initial state (index 0)
	 * where its clock_start names one, then every kept eval - in order,
	 * and what the run says of itself (run.json, checked by check 2).
	 * Filled once check 3 has passed. */
	struct apf_verify_kept {
		char *unit;            /* study_<k>/<dir>/trial_<n> */
		char *workload, *variant;
		long study, trial;     /* trial 1-based */
		size_t n;
		struct apf_verify_ckpt {
			uint64_t index, global_step, submission_ns;
			uint8_t sha256[32];
			/* the eval's metrics as logged (NULL: the initial
			 * state, or a log-only verification) */
			json_t *metrics;
			/* why it was reported (apf_rundir_eval_whys) */
			int why;
			/* the step after which it was asked for, 0: unknown */
			uint64_t asked_after;
		} *ckpt;
	} *kept;
	size_t nkept;
	/* The hardware the run says it ran on: run.json's, whose digest the
	 * log's run_start and every signed head carry, so the runner's key
	 * vouches for it - but nothing proves it (the runner writes it, and
	 * the runner is what is being audited). Checks 4 and 5 must never let
	 * these choose a weaker comparison. Filled once check 2 has passed
	 * (claims_known). */
	int claims_known;
	int claims_signed;     /* a verified signed head covers run.json (a
				* run stopped before its first eval has none) */
	uint64_t threads;      /* run.json's */
	/* run.json's clock (rundir.h enum apf_clock) and budget scale (1: a
	 * result; below: a quick look, unofficial); and the step blocks in
	 * which the trial's threads waited for a core more than
	 * APF_CLOCK_SHORT_SHARE of their time, of all the log's blocks
	 * (check 3). */
	int clock;
	double budget_scale;
	/* run.json's numerics (nn.h; 1 when it has none): what checks 4 and 5
	 * recompute with, so the metrics and steps of a run made with an
	 * older version come out as they did. Not a claim that can weaken a
	 * check: every version is exact, and a wrong one fails them. */
	int numerics;
	uint64_t blocks, short_blocks;
	char *cpu_model;       /* run.json's environment.cpu.model, or NULL */
	char device[8];        /* run.json's: "cpu" or "cuda" */
	char *gpu_model;       /* run.json's environment.gpus[0].name, or NULL */
	/* How check 5 compares, once it has chosen (apf_verify_audit; all
	 * empty before): compare "exact" or "tolerant", on "cpu" or "cuda"
	 * ("" when it cannot replay here), timing "compared" (held against
	 * --timing-tolerance), "reported" (none given) or "not compared",
	 * each with why. */
	struct apf_verify_replay_how {
		char compare[12], on[8], timing[16];
		char *compare_why, *timing_why;
	} replay_how;
	/* Filled once check 3 has passed (not for a log-only verification);
	 * NULL before. */
	struct apf_verify_plausibility *plausibility;
} apf_verify_report;

/* Verifies dir; *out receives the report whatever the outcome (NULL only
 * when out of memory). */
int apf_verify_run(apf_verify_report **out, const char *dir,
		   const struct apf_verify_opts *o);
void apf_verify_report_free(apf_verify_report *r);
/* Checks 4 and 5 beyond the digests, on a report whose checks 1 to 3 have
 * passed (apf_verify_run returned 0 or APF_EABORT): the checkpoints and
 * intervals to audit are the ones the report's verified walk keeps
 * (r->kept), and the runner is not involved - re-evaluation runs the
 * evaluator (pkg/eval), replay hosts the submission in the sandbox
 * (pkg/host), both as the runner started them, from the run's own
 * entry.apf, with everything written under one private temporary
 * directory that is removed at the end. Sets r->check[4] and [5] (and
 * r->replay_how); returns 0, APF_EVERIFY with the message naming the
 * check, file and interval (or the comparison that cannot be made here,
 * and the option that would accept another), or an error. */
#define APF_AUDIT_ALL LONG_MAX
/* How a replay's end is held against its checkpoint. Exact is 0, so that
 * options left zero ask for the strict comparison. There is no "whatever
 * the run allows": the run's device is its own claim, and a comparison
 * chosen by a claim is one a forger chooses (issue 29). */
enum { APF_REPLAY_EXACT = 0, APF_REPLAY_TOLERANT };
/* 1%: a replay on other hardware drifts by rounding, each step's
 * differences carried into the next; a forged interval that lands 1% of
 * its own step from where the run says gains at most that. */
#define APF_REPLAY_RTOL 0.01
struct apf_audit_opts {
	const apf_keyring *entry_keys; /* entry.apf's signer */
	int reeval;       /* check 4: every kept checkpoint */
	long replay;      /* check 5: N intervals chosen by the seed, or
			     APF_AUDIT_ALL; 0: none */
	long top;         /* and the Q with the largest parameter change */
	double tolerance; /* R: fail a replay whose claimed time is under 1/R
			     of its replayed time; 0: none. Times compare only
			     on the hardware the run claims (its CPU model,
			     and for a cuda run its GPU model, the replay on
			     it): elsewhere, or where the run claims none,
			     check 5 fails unless accept_other_hardware. */
	/* The auditor accepts replays whose times cannot be compared (the
	 * line says so and why) instead of a failed check 5. */
	int accept_other_hardware;
	uint32_t seed;    /* picks the seeded intervals */
	/* APF_REPLAY_EXACT: bit for bit - a cpu run on the CPU (its steps
	 * are ISA-independent), a cuda run on CUDA where this machine's
	 * first GPU is the model the run claims, and check 5 fails for a
	 * cuda run anywhere else. APF_REPLAY_TOLERANT (the auditor's
	 * choice only): on the CPU, within rtol. */
	int compare;
	/* Tolerant: fail when the replayed parameters are further than rtol
	 * times the interval's own parameter change from the checkpoint's
	 * (L2), or a re-evaluated metric of the replayed state differs from
	 * the logged one by more than rtol relative (APF_REPLAY_RTOL when
	 * 0). */
	double rtol;
	/* Says what is being audited; may be NULL. */
	void (*progress)(void *user, const char *what);
	void *user;
};
int apf_verify_audit(apf_verify_report *r, const struct apf_audit_opts *o);

/* The report's plausibility section as text (indented lines, each ending
 * in a newline) and as JSON ({"factor", "checked", "met_without_curve",
 * "flagged": [{"unit", "workload", "metric", "level", "value",
 * "global_step", "batch_size", "examples", "reference_examples",
 * "reference_first", "ratio", "reference", "reference_run", "text"}],
 * "notes", "references"}); nothing / null before check 3 has passed. */
int apf_verify_plausibility_text(apf_buf *out, const apf_verify_report *r);
json_t *apf_verify_plausibility_json(const apf_verify_report *r);

/* "entry", "log", "timing", "checkpoints", "replay", "held-out". */
const char *apf_verify_check_name(int check);
const char *apf_verify_outcome_name(int outcome);

#endif
