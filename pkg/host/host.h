/*
 * host: one sandboxed trial, from the trusted side - what the supervisor
 * (pkg/runner) and the verifier's replay (verify/) share, and nothing
 * more: a unit's facts as the workload spec gives them (targets, budget,
 * the arena's size, the initialisation the trial must leave untouched),
 * the build of the submission in a sandbox, the shared memory (arena,
 * control page, the sealed training split), and the trial process: spawned
 * in the sandbox with the same arguments and environment for a run and a
 * replay, its set-up served (lock, the init allowance, ready), its reports
 * read through the protocol checker, frozen and resumed. What happens at
 * a report - timing, evaluation, records, decisions - is the caller's.
 *
 * A trial that ends on its own or breaks the protocol is not an error of
 * the host: the calls return "ended" and apf_host_ending() says how, as a
 * fault kind of the log ("protocol", "timeout", "syscall", "path",
 * "memory", "crash") or "error" (the submission's own error line).
 */
#ifndef APF_HOST_H
#define APF_HOST_H

#include <jansson.h>
#include <stdint.h>

#include "base/base.h"
#include "tuning/tuning.h"
#include "wire/wire.h"
#include "workload/workload.h"

/* Where the trial's memory limit defaults to. */
#define APF_HOST_DEFAULT_MEMORY (16ull << 30)

/* The strings must outlive the host, except work and log_dir (copied). */
struct apf_host_opts {
	const char *exe;           /* this apf */
	const char *workloads_dir; /* canonical path */
	const char *include_dir;   /* apf/submission.h's parent (build) */
	const char *src;           /* the extracted submission (build) */
	const char *work;          /* private to this unit (removed at close):
				      submission.so, hparams.json, scratch/ */
	const char *log_dir;       /* build.log and trial.log go here */
	int sealed;
	uint64_t memory_limit;     /* bytes; 0: APF_HOST_DEFAULT_MEMORY */
	/* The unit. */
	const char *workload, *variant, *device;
	uint64_t seed;
	uint32_t study, trial;     /* trial 1-based */
	int threads;
	/* The CPU layers' numerics (nn.h) the trial and the evaluator
	 * compute with: the run's (run.json); 0: this apf's latest. */
	int numerics;
	double budget_multiplier;
	/* The run's budget scale (0 or 1: none; apf_workload_budget_ns) and
	 * clock (rundir.h enum apf_clock): what the deadlines, the due watch
	 * and apf_host_clock_ns measure by. */
	double budget_scale;
	int clock;
	const apf_hparams *hp;
	/* Polled while waiting: nonzero stops the wait (a SIGINT). May be
	 * NULL. */
	int (*interrupted)(void);
	/* Called about twice a second while the trial trains (progress). May
	 * be NULL. */
	void (*tick)(void *user, int64_t step, uint64_t now_ns);
	/* A warning the trial sent for the submitter (protocol "warn"),
	 * already checked: printable, bounded in length and count. May be
	 * NULL (a replay). */
	void (*warn)(void *user, const char *msg);
	void *user;
};

/* What the workload spec says about the unit, and the supervisor's own
 * copy of the workload (its initialisation: param_floats parameters, then
 * state_floats of model state). */
struct apf_host_unit {
	const apf_workload_spec *spec;
	double validation_target, test_target;
	uint64_t budget_ns, eval_period_ns, init_allowance_ns;
	size_t param_floats, state_floats, capacity;
	const float *init_state;
	apf_workload *wl;
};

typedef struct apf_host apf_host;

/* This apf binary (what the sandbox runs as `apf __trial`, `__build` and
 * `__eval`) and the include directory submissions build against: beside
 * the binary's tree (<root>/include, the build's parent or the installed
 * prefix), else the source tree's. */
int apf_host_find_self(char **exe, char **include_dir);

/* Reads the unit's spec, opens the workload (with its data) and computes
 * the initialisation; creates work/ and writes work/hparams.json. */
int apf_host_open(apf_host **out, const struct apf_host_opts *o);
const struct apf_host_unit *apf_host_unit(const apf_host *h);
/* Writes the unit's hyperparameters as hparams.json, as the trial reads
 * them (the runner's copy in the unit directory is the same file). */
int apf_host_write_hparams(const apf_host *h, const char *path);
/* Kills what is left, unmaps, removes work/. NULL is allowed. */
void apf_host_close(apf_host *h);

/* Compiles the submission in a sandbox in its setup phase. A failed build
 * is not an error: detail says why (the compiler's last line), else it is
 * empty and so_sha256 is the shared object's digest. */
int apf_host_build(apf_host *h, char *detail, size_t size,
		   char so_sha256[65]);

/* The same build for `apf pack`: the submission directory src compiled
 * against include_dir in the sandbox apf_host_build uses, in a temporary
 * directory removed after. detail as for apf_host_build; compiler (may be
 * NULL) gets what the compiler printed, warnings and errors with their
 * source lines (the build.log a run keeps, without apf's own last line). */
int apf_host_check_build(const char *exe, const char *include_dir,
			 const char *src, int sealed, char *detail,
			 size_t size, apf_buf *compiler);

/* The shared memory: the arena (capacity bytes, `restore` copied in: a
 * checkpoint, or NULL) and the control page, sealed at their size. */
int apf_host_arena(apf_host *h, const void *restore, size_t len);
/* Rewrites the arena whole: data (a checkpoint), then zeros (the
 * re-evaluation of one checkpoint after another in one arena). */
int apf_host_arena_load(apf_host *h, const void *data, size_t len);
int apf_host_arena_fd(const apf_host *h);
/* Starts the evaluator over the arena (after apf_host_arena), told what
 * the trial is told, its output appended to log_dir/evaluator.log: the
 * runner's and the verifier's re-evaluation's alike. */
typedef struct apf_evaluator apf_evaluator;
int apf_host_evaluator(apf_evaluator **out, apf_host *h);
/* The supervisor's read-only view of the arena (capacity bytes). */
const void *apf_host_arena_view(const apf_host *h);
/* What `apf __trial` and `apf __eval` are told: the same for a run, a
 * replay and a re-evaluation. */
struct apf_unit_args apf_host_args(const apf_host *h);

/* Spawns the trial, whose arena is at global step `step` (its
 * checkpoint's), and serves its set-up: its own (data, backend, threads),
 * "lock", then the submission's load and init_optimizer_state, which must
 * end in "ready" within the unit's init allowance. 1: ready, waiting for
 * go; 0: it ended (apf_host_ending) or was interrupted; or an error. */
int apf_host_start(apf_host *h, int64_t step);
/* Set-up times of the last start: spawn to ready, lock to ready; and the
 * batch size the trial reported. */
void apf_host_setup_times(const apf_host *h, uint64_t *init_ns,
			  uint64_t *submission_init_ns, int64_t *batch);
/* The memory-limit mechanism of the trial's sandbox (for the log). */
const char *apf_host_memory_mechanism(const apf_host *h);
uint64_t apf_host_memory_limit(const apf_host *h);

/* Lets the trial go on, told what it may see: its submission time so far,
 * the eval count and the last eval's metrics (NULL: none); an eval is due
 * at the end of step eval_at (0: when asked for, see apf_host_due). The
 * first go of a trial process brings its training split. */
int apf_host_go(apf_host *h, uint64_t sub_ns, int64_t evals,
		const json_t *metrics, int64_t eval_at);
/* When the next eval is asked for, a run's way and a replay's: once at_ns
 * has passed (0: never), for the step that ends about 50 ms later at the
 * trial's pace; or for step `step`, asked once the trial has finished step
 * `after` (where the run asked: its eval record's asked_after_step; 0 for
 * a log without it: where the run's rule would). So the trial sees the
 * same thing in a run and a replay: eval_at written, some 50 ms of its
 * own steps ahead, after the same step, to the same step.
 * apf_host_asked_after: after which step the last interval's eval was
 * asked for (0: it was not, since the go). apf_host_due_missed: the
 * replay's step ended before it could be asked for (the supervisor held
 * up past the lead; the replay then ends elsewhere). */
void apf_host_due(apf_host *h, uint64_t at_ns);
void apf_host_due_step(apf_host *h, int64_t step, int64_t after);
int64_t apf_host_asked_after(const apf_host *h);
int apf_host_due_missed(const apf_host *h);

enum {
	APF_HOST_TIMEOUT = 0, /* the deadline passed, or interrupted */
	APF_HOST_REPORT = 1,  /* an eval report, accepted by the protocol */
	APF_HOST_ENDED = 2,   /* the trial ended (apf_host_ending) */
};
/* Waits for the trial's next report until deadline_ns on the unit's clock
 * (0: none; under the cpu clock also until a wall-time backstop: the time
 * left at four times the pace of a trial that has its cores, plus 30 s, so
 * that a trial that idles cannot hold the machine for ever): *step
 * and *why are the report's. A report is the eval line and the "copied"
 * that follows it (the trial bringing the shared arena up to date); the
 * deadline holds for both. Or an error of the host. */
int apf_host_next(apf_host *h, uint64_t deadline_ns, int64_t *step,
		  enum apf_proto_why *why);
/* When the last report's eval line arrived and how long its copy took
 * after that, on apf_now_ns's clock: the eval's copy_ns, shown and never
 * deducted (the submission's interval ends at the freeze after the copy,
 * so no word of the trial's stops its clock). */
void apf_host_report_times(const apf_host *h, uint64_t *report_ns,
			   uint64_t *copy_ns);

/* The unit's clock now (apf_host_opts.clock): apf_now_ns(), or the trial
 * process's CPU time so far divided by APF_CLOCK_CPU_CORES (the last value
 * read once the trial is gone, 0 before it starts). Deadlines given to
 * apf_host_next and apf_host_due's moment are on this clock. */
uint64_t apf_host_clock_ns(apf_host *h);
/* The trial process's CPU time and run-queue wait so far
 * (apf_sandbox_usage); zeros, and APF_EIO, once it is gone. */
struct apf_sandbox_usage;
int apf_host_usage(apf_host *h, struct apf_sandbox_usage *u);

/* Freezes the trial (every thread) and checks the shared memory's size
 * and seals, so that reading the arena is safe. 1: frozen; 0: it ended. */
int apf_host_freeze(apf_host *h);
/* Resumes a frozen trial. 1: running; 0: it ended. */
int apf_host_resume(apf_host *h);
/* Tells the trial to stop and lets it exit (killed after 3 s). */
void apf_host_stop(apf_host *h);
/* Kills the trial now, recording no ending (a preemption). */
void apf_host_kill(apf_host *h);
/* Ends the trial for a reason the caller found; the first reason stays. */
void apf_host_end(apf_host *h, const char *kind, const char *detail);
/* How the trial ended (NULL kind: it has not). */
const char *apf_host_ending(const apf_host *h, const char **detail);

#endif
