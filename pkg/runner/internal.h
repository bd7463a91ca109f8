/*
 * internal.h: what the supervisor's files (supervisor.c, unit.c) share.
 */
#ifndef APF_RUNNER_INTERNAL_H
#define APF_RUNNER_INTERNAL_H

#include <jansson.h>
#include <stdint.h>

#include "base/base.h"

/* ---- the supervisor's state --------------------------------------------- */

struct apf_run_opts;
struct apf_entry;
struct apf_plan_unit;
struct apf_runlog;
struct apf_key;

/* What the log says about one unit (for resume and merging). */
struct unit_state {
	int started, ended, failed;
	int64_t last_eval;        /* index of the last eval record, 0: none */
	int64_t global_step;
	uint64_t sub_ns, eval_ns, log_ns;
	int64_t preemptions;      /* resumes so far */
	char ckpt_sha256[65];
	json_t *rows;             /* the unit's eval records, for the CSV */
	/* From a fresh trial's clock_start: checkpoint 0, the state
	 * init_optimizer_state left, as an eval-like object {index 0,
	 * global_step 0, accumulated_submission_ns 0, checkpoint}; NULL when
	 * the log has none. */
	json_t *initial;
	int64_t time_to_target_ns; /* -1: not met */
};

struct run {
	const struct apf_run_opts *o;
	struct apf_entry *entry;
	struct apf_plan *plan;
	char *work;               /* private temporary directory */
	int work_lock;            /* > 0: flock'd work/.lock while we live */
	char *src;                /* the extracted submission */
	char *run_dir;
	char *workloads_dir;
	char *include_dir;
	char *exe;                /* this apf binary */
	struct apf_runlog *log;
	struct apf_key *key;
	char run_json_sha256[65];
	json_t *env;              /* the live environment record */
	int sealed;
	int threads;
	const char *device;
	struct unit_state *states; /* one per plan unit */
	int interrupted;          /* SIGINT/SIGTERM arrived */
	char *heldout;            /* the held-out draw file in force, or NULL */
	char **variants;          /* names the plan's variant units borrow */
	size_t nvariants;
	size_t completed, failed;
};

/* A SIGINT or SIGTERM asked the run to stop (the log stays resumable). */
int apf_run_interrupted(void);
/* Runs one unit to its end (or resumes it); logs everything. A failed
 * trial returns 0: it is a result. */
int apf_runner_unit(struct run *r, size_t index);

#endif
