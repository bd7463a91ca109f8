/*
 * internal.h: what the supervisor's files (supervisor.c, unit.c) share.
 */
#ifndef APF_RUNNER_INTERNAL_H
#define APF_RUNNER_INTERNAL_H

#include <jansson.h>
#include <stdint.h>

#include "base/base.h"
#include "rundir/resume.h"

/* ---- the supervisor's state --------------------------------------------- */

struct apf_run_opts;
struct apf_entry;
struct apf_plan_unit;
struct apf_runlog;
struct apf_key;

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
	struct apf_runlog *log;   /* the log of the unit under way */
	char *unit_dir;           /* ... and its directory */
	int *unit_locks;          /* per plan unit: its flock'd .lock, or -1 */
	const json_t *drift;      /* env_drift's fields (each session logs it) */
	struct apf_key *key;
	char run_json_sha256[65];
	json_t *env;              /* the live environment record */
	int sealed;
	int threads;
	const char *device;
	int clock;                /* enum apf_clock */
	double budget_scale;      /* 1: none */
	int numerics;             /* nn.h's APF_NUMERICS, run.json's */
	struct apf_rundir_unit *states; /* one per plan unit (rundir/resume.h) */
	int interrupted;          /* SIGINT/SIGTERM arrived */
	char *heldout;            /* the held-out draw file in force, or NULL */
	char **variants;          /* names the plan's variant units borrow */
	size_t nvariants;
	size_t completed, failed;
	size_t ordinal, to_run;   /* this unit is ordinal of to_run (1-based) */
	size_t already;           /* selected units that had ended before */
	int slot, slots;          /* -j: this process's slot, of how many */
};

/* A SIGINT asked the run to stop (the log stays resumable). */
APF_INTERNAL int apf_run_interrupted(void);
/* Either: the units under way stop. */
APF_INTERNAL int apf_run_stopping(void);
/* A SIGTERM or SIGUSR1 asked it to checkpoint and stop; which one. */
APF_INTERNAL int apf_run_preempted(void);
APF_INTERNAL const char *apf_run_preempt_signal(void);
/* Runs one unit to its end (or resumes it); logs everything. A failed
 * trial returns 0: it is a result. */
APF_INTERNAL int apf_runner_unit(struct run *r, size_t index);
/* apf run --slurm (slurm.c): submits the units of the plan listed in
 * units (n of them) as one job array. */
APF_INTERNAL
int apf_runner_slurm_submit(struct run *r, const size_t *units, size_t n);
/* In a Slurm array task, records the job and task in the unit's directory
 * (slurm.json) for apf status; nothing outside Slurm. */
APF_INTERNAL int apf_runner_slurm_note(const char *unit_dir);

/* Tells the run's user one line (apf_run_opts.notice), if it listens. */
APF_INTERNAL
void apf_runner_notice(const struct run *r, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

#endif
