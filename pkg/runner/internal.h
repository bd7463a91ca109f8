/*
 * internal.h: what the runner's files share: the control page, the line
 * channel between processes, and the arguments of the hidden subcommands.
 *
 * Messages are single text lines. The trial is untrusted, so every line it
 * sends is length-limited and checked (struct proto) against what the
 * supervisor asked for; anything else is a protocol fault that fails the
 * trial, naming the line.
 *
 *   trial -> supervisor          supervisor -> trial
 *   lock                         locked
 *   ready <step> <batch>         go <submission_ns> <eval index> <train loss>
 *   eval <step> <why>               <train metric> <val loss> <val metric>
 *   error <message>                 <test loss> <test metric>
 *                                stop
 *   (why: due | complete | max_steps)
 *
 * An eval is asked for through the control page: the trial reports "due"
 * at the end of the first step >= eval_at. A run and a replay use the same
 * field and the same arguments, so the trial cannot tell them apart by
 * either; the supervisor decides where a replay stops.
 *
 *   supervisor -> evaluator      evaluator -> supervisor
 *   eval                         ok <json metrics>  |  error <message>
 *   quit
 */
#ifndef APF_RUNNER_INTERNAL_H
#define APF_RUNNER_INTERNAL_H

#include <jansson.h>
#include <stdint.h>

#include "base/base.h"

#define LINE_MAX_BYTES 4096

/* Descriptor numbers in the trial and evaluator processes; FD_TRAIN, the
 * sealed training split, is the trial's only data. */
enum { FD_ARENA = 3, FD_CONTROL = 4, FD_CHANNEL = 5, FD_TRAIN = 6 };

/* One shared page; neither side trusts what the other writes in it. */
struct apf_control {
	int64_t eval_at; /* supervisor -> trial: report an eval at the end of
			    the first step >= eval_at; 0: none asked for */
	int64_t step;    /* trial -> supervisor, for the progress line */
};

/* What the supervisor accepts from the trial: a small state machine fed
 * every line the trial sends, so that run and replay check the same way
 * and a hostile stream can be tested without a trial (tests/unit/test_proto,
 * tests/fuzz/fuzz_proto). The supervisor's own copy of eval_at decides
 * whether a "due" report was asked for; the control page's is the trial's
 * to scribble on. */
enum proto_phase {
	PROTO_SETUP,   /* expects lock */
	PROTO_WAIT,    /* the supervisor's turn: only error is accepted */
	PROTO_LOCKED,  /* expects ready */
	PROTO_RUNNING, /* expects eval */
};
enum proto_kind { PROTO_LOCK, PROTO_READY, PROTO_EVAL, PROTO_ERROR };
enum proto_why { WHY_DUE, WHY_COMPLETE, WHY_MAX_STEPS };

struct proto {
	enum proto_phase phase;
	int64_t step;      /* the last step accepted (a checkpoint's, at start) */
	int64_t max_steps; /* 0: none */
	int64_t eval_at;   /* 0: no eval asked for */
};
struct proto_msg {
	enum proto_kind kind;
	int64_t step, batch;
	enum proto_why why;
	const char *text;  /* error: the message, inside the line */
};
/* Checks one line (NUL-terminated, no newline). 0: accepted, *m filled,
 * and p advanced (lock and ready and eval hand the turn to the supervisor);
 * APF_EVERIFY: a protocol fault, with the message naming the line. */
int proto_accept(struct proto *p, const char *line, struct proto_msg *m);
/* The supervisor's moves: locked sent; go sent, with the step an eval is
 * due at (0: none yet); an eval asked for while running. */
void proto_locked(struct proto *p);
void proto_go(struct proto *p, int64_t eval_at);
void proto_request(struct proto *p, int64_t eval_at);

/* A buffered line reader over a descriptor. */
struct line_chan {
	int fd;
	char buf[LINE_MAX_BYTES];
	size_t len;
};

/* Sends one line (fmt without the newline). */
int chan_send(int fd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Reads one line into out (NUL-terminated, newline removed): 1 with a line,
 * 0 at end of file, -1 after timeout_ms (-1: wait for ever), or an error
 * (a line longer than LINE_MAX_BYTES is one). */
int chan_recv(struct line_chan *c, char *out, size_t size, int timeout_ms);
/* A complete line already buffered? */
int chan_pending(const struct line_chan *c);
/* Takes a buffered line if there is one, reading what is available without
 * blocking: 1 with a line, 0 when none is complete yet, 2 at end of file. */
int chan_try(struct line_chan *c, char *out, size_t size);

/* Arguments of `apf __trial` and `apf __eval`. */
struct unit_args {
	const char *workloads_dir;
	const char *workload;
	const char *variant;
	uint64_t seed;
	uint32_t study, trial;     /* trial 1-based */
	int threads;
	const char *device;
	const char *so;            /* trial only */
	const char *hparams;       /* trial only: path of hparams.json */
	int64_t max_steps;
	int64_t step_hint;
	double budget_s;
	uint64_t arena_bytes;
};
int unit_args_parse(struct unit_args *a, int argc, char **argv);
/* Appends the arguments to an argv under construction. */
int unit_args_to_argv(const struct unit_args *a, int trial, char **argv,
		      size_t *n, apf_buf *storage);

/* Applies a trial's dropout_rate / label_smoothing hyperparameters to the
 * workload's [model] values (where the model has them), as AlgoPerf hands
 * them to the workload. */
struct apf_workload_spec;
struct apf_hparams;
int apply_regularisation(struct apf_workload_spec *spec, const char *variant,
			 const struct apf_hparams *hp);

/* ---- the supervisor's state (supervisor.c, unit.c, files.c) -------------- */

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
	int audit;                /* verifying: write nothing into run_dir */
	char *heldout;            /* the held-out draw file in force, or NULL */
	char **variants;          /* names the plan's variant units borrow */
	size_t nvariants;
	size_t completed, failed;
};

/* A SIGINT or SIGTERM asked the run to stop (the log stays resumable). */
int apf_run_interrupted(void);
/* unit directory "study_<k>/<workload>/trial_<n>" (trial 1-based) */
void unit_name(const struct apf_plan_unit *u, char *out, size_t size);
/* Runs one unit to its end (or resumes it); logs everything. A failed
 * trial returns 0: it is a result. */
int unit_run(struct run *r, size_t index);

/* Replays one eval interval of a unit (apf verify --replay): from the
 * arena bytes `from` (checkpoint k, at from_step, with the submission time
 * and metrics of eval k handed to the trial as the run did), runs the
 * submission in the sandbox up to to_step, and compares the arena with
 * `expect` (checkpoint k+1). Returns 0 with why empty when identical, 0
 * with why naming the first difference, or an error. */
struct replay_spec {
	const void *from, *expect;
	size_t from_len, expect_len;
	int64_t from_step, to_step, eval_index;
	uint64_t sub_ns;
	const json_t *metrics;
	uint64_t replayed_ns; /* out: the replay's submission time, measured
				 as the runner measures a trial's */
};
int unit_replay(struct run *r, size_t index, struct replay_spec *rs,
		char *why, size_t size);

/* Checks checkpoint 0 (the state after init_optimizer_state) against the
 * workload's initialisation for the unit's seed, recomputed here: the
 * parameters and model state bit for bit, at step 0, the data stream
 * untouched. why names the first difference (empty: equal). */
int unit_check_initial(struct run *r, size_t index, const void *ckpt,
		       size_t len, char *why, size_t size);

/* Re-evaluates a checkpoint in a clean evaluator process and compares
 * with the logged metrics; why names the first difference (empty: equal). */
int unit_reeval(struct run *r, size_t index, const void *ckpt, size_t len,
		const json_t *logged, char *why, size_t size);

/* files.c: the run directory's files. */
int files_sign_head(struct run *r);
/* eval_measurements.csv of a unit from its eval records (the AlgoPerf
 * columns, sorted as AlgoPerf writes them). */
int files_write_csv(const char *path, const json_t *rows);
int files_now_iso(char out[32]);

#endif
