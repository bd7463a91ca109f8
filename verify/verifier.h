/*
 * verifier.h: what the verifier's files share (verify.h is the interface;
 * this header is not installed).
 *
 *   verify.c   runs the checks in order: the entry, run.json and the plan,
 *              the head signature, the walk over the log, the held-out draw,
 *              and the report.
 *   records.c  the log's records while they are read: the form of each
 *              (on the reader's worker threads), then, in order, run-level
 *              bindings and each unit's sequence and timing.
 *   outputs.c  the files the log describes: hparams.json,
 *              eval_measurements.csv and the checkpoints.
 *   audit.c    re-evaluation (--reeval) and replay (--replay,
 *              --replay-top) through pkg/eval and pkg/host.
 *   plausible.c  the plausibility rule against reference curves.
 *
 * Failures of check 2 stop the walk at once. Failures of check 3 are kept
 * per unit (the first one of each) and reported after the walk, the one on
 * the earliest line first, because a later resume may discard the records
 * they were found in (work lost in a crash is ignored, docs/design.md 3.6).
 */
#ifndef APF_VERIFIER_H
#define APF_VERIFIER_H

#include <jansson.h>
#include <stdint.h>

#include "entry/entry.h"
#include "rundir/events.h"
#include "rundir/rundir.h"
#include "runlog/runlog.h"
#include "tuning/tuning.h"
#include "verify/verify.h"
#include "workload/workload.h"

#define VX_NONE UINT64_MAX


/* What a worker thread extracted from one line for the in-order checks.
 * The reader does not clear slots: prepare clears all but `why`, which is
 * written only with `bad`. */
struct vx_slot {
	uint8_t ev;        /* enum vx_event */
	uint8_t bad;       /* why holds a form failure */
	uint8_t flags;     /* booleans, by the field table's bit */
	uint8_t sval;      /* an enum field's value, as its index */
	uint8_t has_vm, has_tm; /* eval: the unit's validation and test metric */
	uint8_t vm_meets, tm_meets; /* ... and whether they meet the targets */
	int32_t unit;      /* index into vx.units; -1 none or null, -2 unknown */
	uint32_t unit_tok; /* the unit field's token */
	uint32_t vm_tok, tm_tok;
	uint64_t u[12];    /* integer fields, by the field table's slot */
	uint16_t has_u;    /* which of u[] the line has (optional fields) */
	double d[2];       /* trial_start: the targets */
	uint32_t tok[4];   /* tokens of fields read in order (strings,
			    * hparams, metrics) */
	uint8_t sha[32];   /* eval: the checkpoint's digest */
	char why[160];
};

/* Reasons a trial ends (trial_end's enum order). */
enum vx_reason { R_BUDGET, R_TARGETS, R_COMPLETE, R_MAX_STEPS, R_FAULT,
		 R_ERROR };
/* Conditions that end a trial at an eval. */
enum { STOP_BUDGET = 1, STOP_TARGETS = 2, STOP_MAX_STEPS = 4,
       STOP_COMPLETE = 8 };
/* Why an eval was reported (eval.why, apf_rundir_eval_whys' order). */
enum vx_why { WHY_DUE, WHY_COMPLETE, WHY_MAX_STEPS };

/* One kept eval (a later resume may still discard it). */
struct vx_eval {
	uint64_t line;
	uint64_t global_step;
	uint64_t sub, ev, log;
	uint64_t ttt;      /* time to target up to here; VX_NONE if not met */
	uint64_t bytes;
	uint64_t index, preempt;
	uint8_t sha[32];
	uint8_t stop;      /* STOP_* that hold here */
	uint8_t why;       /* enum vx_why */
	uint64_t asked_after; /* asked_after_step, 0: absent */
	uint8_t file_ok;   /* checkpoint.file names RUN/<unit>/ckpt/<i>.bin */
	uint32_t nm;       /* metrics, kept only when outputs are checked */
	uint32_t *mname;   /* indexes into the unit's metric names */
	double *mval;
};

enum vx_state {
	U_NONE,      /* no trial_start yet (or a resume from eval 0 since) */
	U_STARTED,   /* trial_start: build next */
	U_BUILT,     /* build: clock_start next */
	U_READY,     /* clock_start: step_block k+1 next */
	U_BLOCK,     /* step_block k: eval k next */
	U_EVAL,      /* eval k: step_block k+1 or trial_end next */
	U_RESUMED,   /* resume from eval j > 0: build, or trial_end when
		      * eval j ended the trial */
	U_FAULT,     /* sandbox_fault: trial_end next */
	U_ENDED,
	U_PREEMPTED, /* preempt after eval k: nothing more this session; a
		      * resume from eval k in a later one */
};

struct vx_unit {
	char *name;         /* study_<k>/<dir>/trial_<n> */
	size_t name_len;
	char *workload, *variant, *dir_name;
	long study, trial0; /* trial0 is the plan's 0-based index */
	const apf_workload_spec *spec;
	const apf_hparams *hp; /* the plan's draw */
	/* What trial_start must say. */
	uint64_t budget_ns, period_ns, max_steps;
	uint64_t init_allowance; /* trial_start's init_allowance_ns */
	int from_scratch;   /* trial_start seen, its clock_start not yet */
	uint64_t batch_size; /* the largest clock_start's (0: none yet) */
	struct vx_eval init; /* clock_start's checkpoint 0 (index 0) ... */
	int has_init;        /* ... when the trial's clock_start named one */
	int pruned;          /* --pruned, and none of its checkpoints is here */
	double vtarget, ttarget;
	int direction;
	char *vkey, *tkey;  /* validation/<metric>, test/<metric> */
	/* The walk. */
	int state;
	uint64_t start_line;
	json_t *hparams;    /* trial_start's */
	uint64_t k;         /* the last step_block's number */
	uint64_t steps, sub, ev, log, pre;
	uint64_t ref_ns;    /* the last eval's end_ns, or clock_start's t_ns
			     * before the first block of a supervisor */
	int ref_kind;       /* REF_CLOCK, REF_EVAL */
	int ever_started;
	uint64_t session;   /* the session of the unit's last record */
	uint64_t seg_t;     /* the last t_ns on this supervisor's clock */
	uint64_t block_start, block_end, block_last, block_line, block_first;
	int block_early;    /* step_block k ended before the eval period */
	uint64_t ttt;
	uint64_t early_eval, early_line; /* a kept eval that came early and
					  * must be the trial's last */
	struct vx_eval *evals;
	size_t nevals, cap;
	char **mnames;
	size_t nmnames;
	int reason, failed;
	char *log_path;     /* its own log (per-unit layout), or NULL */
	/* The first check-3 failure. */
	uint64_t fail_line;
	char *fail;
};

enum { REF_CLOCK, REF_EVAL };

struct vx {
	const char *dir;
	const struct apf_verify_opts *o;
	apf_verify_report *rep;
	char *log_path;     /* the log being read */
	/* The per-unit layout (rundir.h): the log being read is the unit
	 * cur_unit's (-1: the single-log layout's RUN/log.jsonl), and the
	 * signed index names, for it, index_records (0: no entry) whose line
	 * must have the hash index_head; index_hash is that line's. */
	int per_unit;
	long cur_unit;
	uint64_t index_records;
	char index_head[65], index_hash[65];
	size_t open_logs;   /* unit logs that end without run_end */
	uint64_t rep_unsigned; /* the log's records after its signed head */
	size_t nlogs;       /* unit logs read */
	const char *first_open;
	apf_entry *entry;
	json_t *run_json;
	char run_json_sha[65];
	char device[8];
	int sealed;
	uint64_t threads;
	int clock;          /* run.json's plan.clock (enum apf_clock) */
	double budget_scale; /* run.json's plan.budget_scale, 1 when absent */
	apf_plan *plan;
	apf_workload_spec **specs; /* one per manifest workload */
	size_t nspecs;
	struct vx_unit *units;
	size_t nunits;
	size_t *by_name;    /* unit indexes sorted by name */
	/* The signed head. */
	int no_head;        /* no log.dsse.json yet */
	uint64_t head_records;
	char head[65];
	/* The walk. */
	uint64_t records, bytes_seen;
	char last_hash[65];  /* of the last record read */
	char signed_hash[65]; /* of line head_records */
	int last_ev;
	/* Sessions: every `apf run` into the directory appends run_start,
	 * its units' records and, unless it was stopped, run_end. */
	uint64_t session;
	int session_open;
	int session_sealed, session_unsealed_seen;
	uint64_t session_line, session_completed, session_failed;
	char incomplete[300]; /* why the run is not finished, or "" */
	int labelled;        /* the current failure's message names its
				check (apf_vx_label) */
	uint64_t progress_at;
};

/* records.c */
APF_INTERNAL size_t apf_vx_slot_size(void);
APF_INTERNAL
void apf_vx_prepare(void *user, const struct apf_runlog_record *r, void *slot);
APF_INTERNAL int apf_vx_record(void *user, const struct apf_runlog_record *r);
/* A session still open when its log ends: an unsealed one says why. */
APF_INTERNAL int apf_vx_session_check(struct vx *v);
/* After the walk: units left unfinished, run_end's counts. */
APF_INTERNAL int apf_vx_walk_end(struct vx *v);
/* The check-3 failure on the earliest line, as the current error. */
APF_INTERNAL int apf_vx_timing_result(struct vx *v);
/* Records the first check-3 failure of a unit. */
APF_INTERNAL
void apf_vx_unit_fail(struct vx *v, struct vx_unit *u, uint64_t line,
		      const char *what, const char *fmt, ...)
	__attribute__((format(printf, 5, 6)));
APF_INTERNAL void apf_vx_unit_clear(struct vx_unit *u);
APF_INTERNAL void apf_vx_unit_free(struct vx_unit *u);
APF_INTERNAL const char *apf_vx_event_name(int ev);

/* outputs.c */
APF_INTERNAL int apf_vx_hparams_files(struct vx *v);
APF_INTERNAL int apf_vx_csvs(struct vx *v);
APF_INTERNAL int apf_vx_checkpoints(struct vx *v);

/* plausible.c: the plausibility backstop over the walk's kept evals, into
 * rep->plausibility; an error only when out of memory (a reference file
 * that cannot be read is a note). */
APF_INTERNAL int apf_vx_plausibility(struct vx *v);
APF_INTERNAL void apf_vx_plausibility_free(struct apf_verify_plausibility *p);

/* The log a unit's records are in. */
static inline const char *apf_vx_log_of(const struct vx *v,
					const struct vx_unit *u)
{
	return u->log_path ? u->log_path : v->log_path;
}

/* verify.c: "check N (name)", the start of a failure's message; the
 * failure is then that check's, whichever check is running. */
APF_INTERNAL const char *apf_vx_label(struct vx *v, int check);

#endif
