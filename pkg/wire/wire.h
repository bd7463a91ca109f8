/*
 * wire: what crosses the boundary between the supervisor and the processes
 * it starts - the trial (untrusted) and the evaluator (trusted) - and so
 * what both sides of it must agree on: the arena's layout, the control
 * page, the line channel and its protocol, the hidden subcommands'
 * arguments. The supervisor (pkg/runner), the trial (pkg/trial), the
 * evaluator (pkg/eval), the trial host (pkg/host) and the verifier
 * (verify/) use it; it uses nothing of theirs.
 *
 * The arena. One contiguous block of memory, laid out as
 *
 *     [ header (4 KiB) | parameters | model state | slots ... ]
 *
 * The header holds the section offsets, the slot table (name, offset,
 * length of each state slot and scalar the submission allocated), the
 * global step and the data stream's position. Nothing in it is a pointer,
 * so the arena can live in shared memory mapped at different addresses by
 * the trial, the supervisor and the evaluator, and a checkpoint is the
 * arena's first `used` bytes written as they are. Restoring a checkpoint
 * into a fresh arena restores the whole trial: parameters, batch-norm
 * statistics, optimizer state, step, data position and randomness (which is
 * counter-based, keyed by the trial and the step).
 *
 * Messages are single text lines. The trial is untrusted, so every line it
 * sends is length-limited and checked (struct apf_proto) against what the
 * supervisor asked for; anything else is a protocol fault that fails the
 * trial, naming the line.
 *
 *   trial -> supervisor          supervisor -> trial
 *   lock                         locked
 *   ready <step> <batch>         go <submission_ns> <eval index> <train loss>
 *   eval <step> <why>               <train metric> <val loss> <val metric>
 *   copied                          <test loss> <test metric>
 *   error <message>              stop
 *   warn <text>
 *   (why: due | complete | max_steps; copied follows each eval once the
 *   shared arena is up to date; warn, in any phase, is advice logged for
 *   the submitter and decides nothing)
 *
 * The first go a trial process gets carries the training split's memfd
 * (SCM_RIGHTS): whatever the submission does before the clock starts, its
 * process holds no training example.
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
#ifndef APF_WIRE_H
#define APF_WIRE_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "base/base.h"

/* ---- the arena ------------------------------------------------------------ */

#define APF_ARENA_MAGIC "APFARN01"
#define APF_ARENA_HEADER 4096
#define APF_ARENA_MAX_SLOTS 48
#define APF_SLOT_NAME 48

enum apf_slot_kind { APF_SLOT_VECTOR = 1, APF_SLOT_SCALAR = 2 };

struct apf_arena_slot {
	char name[APF_SLOT_NAME];
	uint64_t offset;  /* bytes from the arena's start */
	uint64_t n;       /* floats (vector) or 1 (scalar, a double) */
	uint32_t kind;
	uint32_t pad;
};

struct apf_arena_header {
	char magic[8];
	uint32_t version;
	uint32_t initialized;      /* init_optimizer_state has run */
	uint64_t capacity;         /* bytes */
	uint64_t used;             /* bytes; what a checkpoint holds */
	uint64_t params_offset, params_floats;
	uint64_t state_offset, state_floats;
	uint64_t slots_offset;
	int64_t global_step;
	uint64_t data_epoch, data_index;
	int64_t evals;             /* evaluations done */
	uint32_t nslots;
	uint32_t pad;
	struct apf_arena_slot slots[APF_ARENA_MAX_SLOTS];
};

/* Bytes an arena needs for a model, with room for optimizer slots of up to
 * slot_factor times the parameters. */
size_t apf_arena_capacity(size_t params_floats, size_t state_floats,
			  unsigned slot_factor);
/* Writes a fresh header into mem (capacity bytes, zeroed beforehand). */
int apf_arena_format(void *mem, size_t capacity, size_t params_floats,
		     size_t state_floats);
/* Checks a header read from a checkpoint or shared memory of `bytes`
 * bytes: magic, version, offsets and slots inside the block, slot names
 * NUL-terminated. Everything that reads an arena checks it first. */
int apf_arena_check(const void *mem, size_t bytes);
float *apf_arena_params(void *mem);
float *apf_arena_state(void *mem);

/* Names the first difference between two arenas of the same layout
 * (header fields, then parameters, model state and each slot); why is
 * empty when the first n bytes are equal. */
void apf_arena_diff(const void *got, const void *want, size_t n, char *why,
		    size_t size);
/* Names how an arena of `bytes` (live memory or checkpoint 0) differs from
 * what init_optimizer_state must leave: `init` (param_floats parameters,
 * then state_floats of model state, the workload's initialisation for the
 * trial's seed) bit for bit, at step 0, with the data stream untouched.
 * why is empty when it does not. */
void apf_arena_initial_differs(const void *arena, size_t bytes,
			       const float *init, size_t param_floats,
			       size_t state_floats, char *why, size_t size);

/* ---- processes and messages --------------------------------------------- */

#define APF_LINE_MAX 4096

/* Descriptor numbers in the trial and evaluator processes. The trial's
 * only data, the sealed training split, is not among them: it comes with
 * the first "go", when the clock starts. */
enum { APF_FD_ARENA = 3, APF_FD_CONTROL = 4, APF_FD_CHANNEL = 5 };
/* In `apf __build`: the memfd the built shared object is copied into (the
 * build writes nothing of the host's). */
enum { APF_FD_BUILD_OUT = 3 };

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
enum apf_proto_phase {
	APF_PROTO_SETUP,   /* expects lock */
	APF_PROTO_WAIT,    /* the supervisor's turn: only error is accepted */
	APF_PROTO_LOCKED,  /* expects ready */
	APF_PROTO_RUNNING, /* expects eval */
	APF_PROTO_COPYING, /* after eval: expects copied */
};
/* "copied" follows every eval report once the trial has brought the shared
 * arena up to date (apf_trial_snapshot: the device's copy downloaded, or
 * nothing to do on the CPU). The supervisor then freezes the trial, and
 * the submission's interval ends when it is frozen: the copy, and whatever
 * the trial does until it stops, is submission time. No word of the
 * trial's stops its clock; copy_ns (report to "copied") is recorded only
 * to show what the copy cost. */
enum apf_proto_kind { APF_PROTO_LOCK, APF_PROTO_READY, APF_PROTO_EVAL, APF_PROTO_ERROR,
		     APF_PROTO_WARN, APF_PROTO_COPIED };
/* "warn <text>" is advice for the submitter (e.g. a hyperparameter read
 * under a name the search space lacks), accepted in any phase, printable
 * ASCII only, at most this many per trial process: the harness sends one
 * per name, and a flood is a protocol fault, not log growth. */
#define APF_PROTO_MAX_WARN 48
enum apf_proto_why { APF_WHY_DUE, APF_WHY_COMPLETE, APF_WHY_MAX_STEPS };

struct apf_proto {
	enum apf_proto_phase phase;
	int64_t step;      /* the last step accepted (a checkpoint's, at start) */
	int64_t max_steps; /* 0: none */
	int64_t eval_at;   /* 0: no eval asked for */
	int warnings;      /* warn lines accepted */
};
struct apf_proto_msg {
	enum apf_proto_kind kind;
	int64_t step, batch;
	enum apf_proto_why why;
	const char *text;  /* error, warn: the message, inside the line */
};
/* Checks one line (NUL-terminated, no newline). 0: accepted, *m filled,
 * and p advanced (lock and ready and eval hand the turn to the supervisor);
 * APF_EVERIFY: a protocol fault, with the message naming the line. */
int apf_proto_accept(struct apf_proto *p, const char *line, struct apf_proto_msg *m);
/* The supervisor's moves: locked sent; go sent, with the step an eval is
 * due at (0: none yet); an eval asked for while running. */
void apf_proto_locked(struct apf_proto *p);
void apf_proto_go(struct apf_proto *p, int64_t eval_at);
void apf_proto_request(struct apf_proto *p, int64_t eval_at);

/* A buffered line reader over a descriptor. */
struct apf_chan {
	int fd;
	char buf[APF_LINE_MAX];
	size_t len;
};

/* Sends one line (fmt without the newline). */
int apf_chan_send(int fd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The same, with descriptor `pass` attached (SCM_RIGHTS; -1: none). */
int apf_chan_send_fd(int fd, int pass, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* Blocks for one line, taking a descriptor that came with it (*fd, -1 if
 * none; the caller closes it): 1 with a line, 0 at end of file, or an
 * error. Only the trial receives descriptors; the supervisor's reads
 * discard any a trial sends. */
int apf_chan_recv_fd(struct apf_chan *c, char *out, size_t size, int *fd);
/* Reads one line into out (NUL-terminated, newline removed): 1 with a line,
 * 0 at end of file, -1 after timeout_ms (-1: wait for ever), or an error
 * (a line longer than APF_LINE_MAX is one). */
int apf_chan_recv(struct apf_chan *c, char *out, size_t size, int timeout_ms);
/* A complete line already buffered? */
int apf_chan_pending(const struct apf_chan *c);
/* Takes a buffered line if there is one, reading what is available without
 * blocking: 1 with a line, 0 when none is complete yet, 2 at end of file. */
int apf_chan_try(struct apf_chan *c, char *out, size_t size);

/* Arguments of `apf __trial` and `apf __eval`. */
/* The fixed compiler flags every submission is built with: pkg/trial's
 * build (`apf __build`) passes them to cc, and the runner records them in
 * the unit's log; here, where both sides read them, so that the runner
 * needs nothing of pkg/trial. NULL-terminated. */
extern const char *const apf_submission_cflags[];

struct apf_unit_args {
	const char *workloads_dir;
	const char *workload;
	const char *variant;
	uint64_t seed;
	uint32_t study, trial;     /* trial 1-based */
	int threads;
	int numerics;              /* the CPU layers' (nn.h); 0: not given */
	const char *device;
	const char *so;            /* trial only */
	const char *hparams;       /* trial only: path of hparams.json */
	int64_t max_steps;
	int64_t step_hint;
	double budget_s;
	uint64_t arena_bytes;
	/* trial only: the layout of the training split it gets at its first
	 * go, which its model is built for before (--train-layout H,W,C,K,N:
	 * input height, width and channels, classes, examples) */
	int train_h, train_w, train_c, train_classes;
	uint64_t train_n;
};
int apf_unit_args_parse(struct apf_unit_args *a, int argc, char **argv);
/* Appends the arguments to an argv under construction. */
int apf_unit_args_to_argv(const struct apf_unit_args *a, int trial, char **argv,
		      size_t *n, apf_buf *storage);

#endif
