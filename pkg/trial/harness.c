/*
 * harness.c: the operations of include/apf/ops.h on the trial's backend, and
 * the step that drives a submission.
 *
 * Every operation checks its arguments before the backend sees them: vectors
 * must lie inside the arena or the gradient buffer with matching lengths,
 * slots are allocated only during init_optimizer_state, batches must be the
 * harness's, and loss, gradients and batches exist only inside the timed
 * calls that train (update_params, data_selection): init_optimizer_state
 * runs before the clock and prepare_for_eval gets no data in AlgoPerf.
 * These checks keep an honest submission honest; they are not the seal, since
 * submission code shares this process and could bypass them. The seal is the
 * supervisor's: it checks the state init_optimizer_state leaves, and times
 * and bounds everything the submission runs before the clock. The first misuse is kept (sticky) and turns the submission's
 * call into a failed trial with that message; later operations do nothing.
 * A misbehaving submission therefore fails cleanly instead of corrupting
 * the harness's memory through it.
 *
 * On a backend with device memory (cuda) the arena has a working copy on
 * the device, laid out as the shared one: parameters, model state and
 * vector slots live there and every vector the submission holds points
 * into it; the header and the scalar slots (which the submission reads and
 * writes as host memory) stay in the shared arena. apf_trial_snapshot
 * copies the device's parts into the shared arena, where the supervisor
 * checkpoints and the evaluator reads; a trial resumed from a checkpoint
 * uploads them first. On the CPU the shared arena is the working copy.
 */
#include "trial/internal.h"

#include "nn/linalg.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

_Static_assert((int)APF_KIND_WEIGHT == (int)APF_PARAM_WEIGHT &&
		       (int)APF_KIND_ATTN_OUT == (int)APF_PARAM_ATTN_OUT,
	       "ops.h kinds must equal nn.h kinds");

#define MAX_LOG_LINES 200

#define HP_UNKNOWN_MAX 8

#define SCRATCH_CHUNKS 24
#define SCRATCH_MAX ((size_t)1 << 28)    /* floats, all chunks together */
#define SCRATCH_MIN ((size_t)1 << 18)    /* the smallest chunk allocated */

struct apf_trial {
	struct apf_ctx ctx; /* first: what the submission holds */
	struct apf_objective obj;
	apf_backend *be;
	const apf_submission *sub;
	const apf_hparams *hp;
	struct apf_trial_info info;
	char *arena;
	char *work; /* where the vectors live: the arena, or its device copy */
	size_t capacity;
	struct apf_arena_header *h;
	float *params, *state, *grads;
	int batch;
	enum phase { PH_NONE, PH_INIT, PH_SELECT, PH_UPDATE, PH_PREPARE } phase;
	int err;
	char msg[320];
	int log_lines;
	apf_eval_results last_eval;
	double submission_time_s;
	apf_batch cur;
	int have_batch;
	apf_param_info *pinfo;
	uint64_t prng_key;
	/* Which hyperparameters were read, for the warnings (hp_report). */
	unsigned char *hp_read;
	char hp_unknown[HP_UNKNOWN_MAX][64];
	int nunknown, unknown_sent, unread_sent, ran_init;
	void (*warn)(void *user, const char *msg);
	void *warn_user;
	/* Scratch (apf_scratch): backend chunks, kept for the trial's life,
	 * handed out from the start at every submission call. */
	struct scratch_chunk {
		float *p;
		size_t n;
	} scratch[SCRATCH_CHUNKS];
	int nscratch, scratch_cur;
	size_t scratch_off, scratch_total;
};

/* The trial whose hyperparameters the ops see: apf_hp() hands the harness
 * only the apf_hparams pointer, which is this trial's when the submission
 * passes on what it was given. One trial per process. */
static apf_trial *hp_trial;

static apf_trial *T(apf_ctx *c)
{
	return (apf_trial *)c;
}

static void misuse(apf_trial *t, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
static void misuse(apf_trial *t, const char *fmt, ...)
{
	if (t->err)
		return;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(t->msg, sizeof t->msg, fmt, ap);
	va_end(ap);
	t->err = 1;
}

/* A vector is usable when it lies wholly in the arena's used part or in the
 * gradient buffer. */
static int vec_ok(apf_trial *t, apf_vec v, const char *op)
{
	if (t->err)
		return 0;
	uintptr_t p = (uintptr_t)v.p, a = (uintptr_t)t->work,
		  g = (uintptr_t)t->grads;
	size_t bytes = v.n * sizeof(float);
	int in_arena = p >= a + APF_ARENA_HEADER && p <= a + t->h->used &&
		       bytes <= a + t->h->used - p;
	int in_grads = p >= g && p <= g + t->obj.param_floats * sizeof(float) &&
		       bytes <= g + t->obj.param_floats * sizeof(float) - p;
	int in_scratch = 0;
	for (int i = 0; i < t->nscratch && !in_arena && !in_grads; i++) {
		uintptr_t s = (uintptr_t)t->scratch[i].p;
		size_t sb = t->scratch[i].n * sizeof(float);
		in_scratch |= p >= s && p <= s + sb && bytes <= s + sb - p;
	}
	if (!v.p || (p % sizeof(float)) ||
	    !(in_arena || in_grads || in_scratch)) {
		misuse(t, "%s: a vector outside the parameters, gradients, "
			  "slots and scratch",
		       op);
		return 0;
	}
	return 1;
}

static int same(apf_trial *t, apf_vec a, apf_vec b, const char *op)
{
	if (!vec_ok(t, a, op) || !vec_ok(t, b, op))
		return 0;
	if (a.n != b.n) {
		misuse(t, "%s: vectors of %zu and %zu floats", op, a.n, b.n);
		return 0;
	}
	return 1;
}

/* ---- parameters ------------------------------------------------------------ */

static int op_nparams(apf_ctx *c)
{
	return (int)T(c)->obj.nparams;
}

static int op_param_info(apf_ctx *c, int i, apf_param_info *out)
{
	apf_trial *t = T(c);
	if (i < 0 || (size_t)i >= t->obj.nparams) {
		misuse(t, "param_info: no parameter %d", i);
		return -1;
	}
	*out = t->pinfo[i];
	return 0;
}

static apf_vec op_param(apf_ctx *c, int i)
{
	apf_trial *t = T(c);
	if (i < 0 || (size_t)i >= t->obj.nparams) {
		misuse(t, "param: no parameter %d", i);
		return (apf_vec){0};
	}
	return (apf_vec){t->params + t->pinfo[i].offset, t->pinfo[i].numel};
}

static apf_vec op_grad(apf_ctx *c, int i)
{
	apf_trial *t = T(c);
	if (i < 0 || (size_t)i >= t->obj.nparams) {
		misuse(t, "grad: no parameter %d", i);
		return (apf_vec){0};
	}
	return (apf_vec){t->grads + t->pinfo[i].offset, t->pinfo[i].numel};
}

static apf_vec op_params_flat(apf_ctx *c)
{
	return (apf_vec){T(c)->params, T(c)->obj.param_floats};
}

static apf_vec op_grads_flat(apf_ctx *c)
{
	return (apf_vec){T(c)->grads, T(c)->obj.param_floats};
}

static const char *phase_name(enum phase p)
{
	return p == PH_INIT	 ? "init_optimizer_state"
	       : p == PH_PREPARE ? "prepare_for_eval"
	       : p == PH_SELECT	 ? "data_selection"
	       : p == PH_UPDATE	 ? "update_params"
				 : "no submission call";
}

/* Loss, gradients and batches are training, and training is timed. */
static int trains(apf_trial *t, const char *op)
{
	if (t->phase == PH_SELECT || t->phase == PH_UPDATE)
		return 1;
	misuse(t, "%s: called in %s; loss, gradients and batches are for "
		  "update_params and data_selection only",
	       op, phase_name(t->phase));
	return 0;
}

static int op_loss_grad(apf_ctx *c, const apf_batch *b, double *loss)
{
	apf_trial *t = T(c);
	if (t->err || !trains(t, "loss_grad"))
		return -1;
	if (t->obj.next_batch && (b != &t->cur || !t->have_batch)) {
		misuse(t, "loss_grad: not a batch the harness handed out");
		return -1;
	}
	int rc = t->obj.loss_grad(t->obj.user, t->params, b,
				  (uint64_t)t->h->global_step, loss, t->grads);
	if (rc) {
		misuse(t, "loss_grad: %s", apf_error_message());
		return -1;
	}
	if (!isfinite(*loss)) {
		misuse(t, "the training loss is not finite (%g) at step %lld",
		       *loss, (long long)t->h->global_step);
		return -1;
	}
	return 0;
}

static int op_next_batch(apf_ctx *c, const apf_batch **out)
{
	apf_trial *t = T(c);
	*out = NULL;
	if (t->err || !trains(t, "next_batch"))
		return -1;
	if (!t->obj.next_batch) {
		misuse(t, "next_batch: this objective has no data");
		return -1;
	}
	apf_data_pos pos = {t->h->data_epoch, t->h->data_index};
	int rc = t->obj.next_batch(t->obj.user, &pos, t->batch, &t->cur);
	if (rc) {
		misuse(t, "next_batch: %s", apf_error_message());
		return -1;
	}
	t->h->data_epoch = pos.epoch;
	t->h->data_index = pos.index;
	t->have_batch = 1;
	*out = &t->cur;
	return 0;
}

/* ---- slots ------------------------------------------------------------------ */

static struct apf_arena_slot *find_slot(apf_trial *t, const char *name)
{
	for (uint32_t i = 0; i < t->h->nslots; i++)
		if (!strcmp(t->h->slots[i].name, name))
			return &t->h->slots[i];
	return NULL;
}

static struct apf_arena_slot *alloc_slot(apf_trial *t, const char *op,
					 const char *name, uint64_t n,
					 uint32_t kind, size_t item)
{
	size_t len = name ? strlen(name) : 0;
	if (t->phase != PH_INIT) {
		misuse(t, "%s '%s': state is allocated in init_optimizer_state "
			  "only",
		       op, name ? name : "");
		return NULL;
	}
	if (len == 0 || len >= APF_SLOT_NAME) {
		misuse(t, "%s: a name of 1 to %d characters", op,
		       APF_SLOT_NAME - 1);
		return NULL;
	}
	if (find_slot(t, name)) {
		misuse(t, "%s '%s': allocated twice", op, name);
		return NULL;
	}
	if (t->h->nslots == APF_ARENA_MAX_SLOTS) {
		misuse(t, "%s '%s': more than %d slots", op, name,
		       APF_ARENA_MAX_SLOTS);
		return NULL;
	}
	uint64_t off = (t->h->used + 63) / 64 * 64;
	if (n > (t->h->capacity - off) / item) {
		misuse(t, "%s '%s': %llu values do not fit the arena", op, name,
		       (unsigned long long)n);
		return NULL;
	}
	struct apf_arena_slot *s = &t->h->slots[t->h->nslots++];
	memset(s, 0, sizeof *s);
	memcpy(s->name, name, len);
	s->offset = off;
	s->n = n;
	s->kind = kind;
	/* A device copy is allocated zeroed and nothing writes past `used`
	 * there (vectors end at it), so only the shared arena needs zeroing. */
	memset(t->arena + off, 0, n * item);
	t->h->used = off + n * item;
	return s;
}

static int op_slot(apf_ctx *c, const char *name, size_t n, apf_vec *out)
{
	apf_trial *t = T(c);
	*out = (apf_vec){0};
	if (t->err)
		return -1;
	struct apf_arena_slot *s;
	if (n > 0) {
		s = alloc_slot(t, "slot", name, n, APF_SLOT_VECTOR, sizeof(float));
	} else {
		s = name ? find_slot(t, name) : NULL;
		if (!s || s->kind != APF_SLOT_VECTOR)
			misuse(t, "slot '%s': no such vector slot",
			       name ? name : "");
	}
	if (t->err || !s)
		return -1;
	*out = (apf_vec){(float *)(t->work + s->offset), s->n};
	return 0;
}

static int op_scalar(apf_ctx *c, const char *name, double **out)
{
	apf_trial *t = T(c);
	*out = NULL;
	if (t->err)
		return -1;
	struct apf_arena_slot *s = name ? find_slot(t, name) : NULL;
	if (!s && t->phase == PH_INIT)
		s = alloc_slot(t, "scalar", name, 1, APF_SLOT_SCALAR,
			       sizeof(double));
	else if (!s || s->kind != APF_SLOT_SCALAR)
		misuse(t, "scalar '%s': no such scalar", name ? name : "");
	if (t->err || !s)
		return -1;
	*out = (double *)(t->arena + s->offset);
	return 0;
}

/* ---- hyperparameters ----------------------------------------------------------- */

static long hp_find(const apf_hparams *hp, const char *name)
{
	long found = -1;
	for (size_t i = 0; hp && name && i < hp->n; i++)
		if (!strcmp(hp->names[i], name)) {
			found = (long)i;
			break;
		}
	/* Reads of the trial's own hyperparameters are tracked: one the
	 * space does not have (a misspelling trains on the default) and,
	 * after the first step, the space's ones nothing read. Self-tuning
	 * gives no hyperparameters, and every read is a default by design. */
	apf_trial *t = hp_trial;
	if (t && hp == t->hp && hp->n && name) {
		if (found >= 0) {
			t->hp_read[found] = 1;
		} else {
			int seen = 0;
			for (int k = 0; k < t->nunknown && !seen; k++)
				seen = !strncmp(t->hp_unknown[k], name,
						sizeof t->hp_unknown[k] - 1);
			if (!seen && t->nunknown < HP_UNKNOWN_MAX) {
				char *u = t->hp_unknown[t->nunknown++];
				snprintf(u, sizeof t->hp_unknown[0], "%s", name);
				/* Any bytes may come in; the warning is
				 * printable ASCII (the protocol's rule). */
				for (; *u; u++)
					if ((unsigned char)*u < 0x20 ||
					    (unsigned char)*u >= 0x7f)
						*u = '?';
			}
		}
	}
	return found;
}

void apf_trial_hp_consumed(apf_trial *t, const char *name)
{
	for (size_t i = 0; t->hp && t->hp_read && i < t->hp->n; i++)
		if (!strcmp(t->hp->names[i], name))
			t->hp_read[i] = 1;
}

void apf_trial_on_warning(apf_trial *t,
			  void (*fn)(void *user, const char *msg), void *user)
{
	t->warn = fn;
	t->warn_user = user;
}

/* Hands the new warnings to the caller: reads of names the space lacks as
 * they are first seen, and once, after the first step of a trial that ran
 * init_optimizer_state here, the space's names nothing has read. */
static void hp_report(apf_trial *t, int first_step_done)
{
	if (!t->warn || !t->hp || !t->hp->n)
		return;
	char msg[256];
	for (; t->unknown_sent < t->nunknown; t->unknown_sent++) {
		const char *name = t->hp_unknown[t->unknown_sent];
		const char *near = apf_nearest_name(
			name, (const char *const *)t->hp->names, t->hp->n);
		snprintf(msg, sizeof msg,
			 "the submission reads hyperparameter '%s', which the "
			 "search space does not have (it gets its default)%s%s%s",
			 name, near ? "; did you mean '" : "", near ? near : "",
			 near ? "'?" : "");
		t->warn(t->warn_user, msg);
	}
	if (!first_step_done || !t->ran_init || t->unread_sent)
		return;
	t->unread_sent = 1;
	for (size_t i = 0; i < t->hp->n; i++)
		if (!t->hp_read[i]) {
			snprintf(msg, sizeof msg,
				 "search-space hyperparameter '%s' was not read "
				 "by init_optimizer_state or the first "
				 "update_params (nor used by the runner)",
				 t->hp->names[i]);
			t->warn(t->warn_user, msg);
		}
}

static double op_hparam(const apf_hparams *hp, const char *name, double dflt)
{
	long i = hp_find(hp, name);
	return i < 0 || hp->words[i] ? dflt : hp->values[i];
}

static const char *op_hparam_word(const apf_hparams *hp, const char *name,
				  const char *dflt)
{
	long i = hp_find(hp, name);
	return i < 0 || !hp->words[i] ? dflt : hp->words[i];
}

static int op_hparam_has(const apf_hparams *hp, const char *name)
{
	return hp_find(hp, name) >= 0;
}

/* ---- vector operations ------------------------------------------------------- */

#define BE(t) ((t)->be)

static void op_fill(apf_ctx *c, apf_vec x, float v)
{
	if (vec_ok(T(c), x, "fill"))
		BE(T(c))->fill(BE(T(c)), x.p, v, x.n);
}

static void op_copy(apf_ctx *c, apf_vec d, apf_vec s)
{
	if (same(T(c), d, s, "copy"))
		BE(T(c))->copy(BE(T(c)), d.p, s.p, d.n);
}

static void op_scale(apf_ctx *c, apf_vec x, float a)
{
	if (vec_ok(T(c), x, "scale"))
		BE(T(c))->scale(BE(T(c)), x.p, a, x.n);
}

static void op_axpy(apf_ctx *c, apf_vec y, float a, apf_vec x)
{
	if (same(T(c), y, x, "axpy"))
		BE(T(c))->axpy(BE(T(c)), y.p, a, x.p, y.n);
}

static void op_axpby(apf_ctx *c, apf_vec y, float a, apf_vec x, float b)
{
	if (same(T(c), y, x, "axpby"))
		BE(T(c))->axpby(BE(T(c)), y.p, a, x.p, b, y.n);
}

static void op_add_scalar(apf_ctx *c, apf_vec x, float a)
{
	if (vec_ok(T(c), x, "add_scalar"))
		BE(T(c))->add_scalar(BE(T(c)), x.p, a, x.n);
}

static void op_mul(apf_ctx *c, apf_vec z, apf_vec x, apf_vec y)
{
	if (same(T(c), z, x, "mul") && same(T(c), z, y, "mul"))
		BE(T(c))->mul(BE(T(c)), z.p, x.p, y.p, z.n);
}

static void op_div(apf_ctx *c, apf_vec z, apf_vec x, apf_vec y)
{
	if (same(T(c), z, x, "div") && same(T(c), z, y, "div"))
		BE(T(c))->div(BE(T(c)), z.p, x.p, y.p, z.n);
}

static void op_sqrt(apf_ctx *c, apf_vec y, apf_vec x)
{
	if (same(T(c), y, x, "sqrt"))
		BE(T(c))->sqrt(BE(T(c)), y.p, x.p, y.n);
}

static void op_max(apf_ctx *c, apf_vec z, apf_vec x, apf_vec y)
{
	if (same(T(c), z, x, "max") && same(T(c), z, y, "max"))
		BE(T(c))->max(BE(T(c)), z.p, x.p, y.p, z.n);
}

static void op_clamp(apf_ctx *c, apf_vec x, float lo, float hi)
{
	if (!(lo <= hi))
		misuse(T(c), "clamp: lo %g above hi %g", lo, hi);
	if (vec_ok(T(c), x, "clamp"))
		BE(T(c))->clamp(BE(T(c)), x.p, lo, hi, x.n);
}

static void op_moments(apf_ctx *c, apf_vec m, apf_vec v, apf_vec g, float b1,
		       float b2)
{
	if (same(T(c), m, v, "moments") && same(T(c), m, g, "moments"))
		BE(T(c))->moments(BE(T(c)), m.p, v.p, g.p, b1, b2, m.n);
}

static void op_adam_direction(apf_ctx *c, apf_vec d, apf_vec m, apf_vec v,
			      float c1, float c2, float eps)
{
	if (same(T(c), d, m, "adam_direction") &&
	    same(T(c), d, v, "adam_direction"))
		BE(T(c))->adam_direction(BE(T(c)), d.p, m.p, v.p, c1, c2, eps,
					 d.n);
}

static double op_dot(apf_ctx *c, apf_vec x, apf_vec y)
{
	return same(T(c), x, y, "dot") ? BE(T(c))->dot(BE(T(c)), x.p, y.p, x.n)
				       : NAN;
}

static double op_sum(apf_ctx *c, apf_vec x)
{
	return vec_ok(T(c), x, "sum") ? BE(T(c))->sum(BE(T(c)), x.p, x.n) : NAN;
}

static double op_norm2(apf_ctx *c, apf_vec x)
{
	return vec_ok(T(c), x, "norm2") ? BE(T(c))->norm2(BE(T(c)), x.p, x.n)
					: NAN;
}

static double op_max_abs(apf_ctx *c, apf_vec x)
{
	return vec_ok(T(c), x, "max_abs") ? BE(T(c))->max_abs(BE(T(c)), x.p, x.n)
					  : NAN;
}

/* ---- the rest ------------------------------------------------------------------ */

static int op_workload(apf_ctx *c, apf_workload_info *out)
{
	apf_trial *t = T(c);
	*out = (apf_workload_info){t->info.workload, t->info.variant,
				   t->info.metric, t->info.device,
				   t->info.train_examples};
	return 0;
}

static apf_vec op_slice(apf_ctx *c, apf_vec x, size_t off, size_t n)
{
	apf_trial *t = T(c);
	if (!vec_ok(t, x, "slice"))
		return (apf_vec){0};
	if (off > x.n || n > x.n - off) {
		misuse(t, "slice: [%zu, %zu) outside a vector of %zu", off,
		       off + n, x.n);
		return (apf_vec){0};
	}
	return (apf_vec){x.p + off, n};
}

static void op_log(apf_ctx *c, const char *message)
{
	apf_trial *t = T(c);
	if (!message || t->log_lines >= MAX_LOG_LINES)
		return;
	if (++t->log_lines == MAX_LOG_LINES)
		fprintf(stderr, "[%s] (further submission messages dropped)\n",
			t->info.workload);
	else
		fprintf(stderr, "[%s] %.*s\n", t->info.workload, 300, message);
}

static double op_uniform(apf_prng r, uint64_t index)
{
	uint32_t key[2] = {(uint32_t)r.key, (uint32_t)(r.key >> 32)};
	uint64_t hi = apf_rng_word(key, r.step, 2 * index);
	uint64_t lo = apf_rng_word(key, r.step, 2 * index + 1);
	return (double)((hi << 21) ^ (lo >> 11)) * 0x1.0p-53;
}

/* ---- ABI 2: elementwise ---------------------------------------------------- */

static void op_sub(apf_ctx *c, apf_vec z, apf_vec x, apf_vec y)
{
	if (same(T(c), z, x, "sub") && same(T(c), z, y, "sub"))
		BE(T(c))->sub(BE(T(c)), z.p, x.p, y.p, z.n);
}

static void op_min(apf_ctx *c, apf_vec z, apf_vec x, apf_vec y)
{
	if (same(T(c), z, x, "min") && same(T(c), z, y, "min"))
		BE(T(c))->min(BE(T(c)), z.p, x.p, y.p, z.n);
}

static void op_sign(apf_ctx *c, apf_vec y, apf_vec x)
{
	if (same(T(c), y, x, "sign"))
		BE(T(c))->sign(BE(T(c)), y.p, x.p, y.n);
}

static void op_abs(apf_ctx *c, apf_vec y, apf_vec x)
{
	if (same(T(c), y, x, "abs"))
		BE(T(c))->abs(BE(T(c)), y.p, x.p, y.n);
}

static void op_exp(apf_ctx *c, apf_vec y, apf_vec x)
{
	if (same(T(c), y, x, "exp"))
		BE(T(c))->exp(BE(T(c)), y.p, x.p, y.n);
}

static void op_ln(apf_ctx *c, apf_vec y, apf_vec x)
{
	if (same(T(c), y, x, "ln"))
		BE(T(c))->log(BE(T(c)), y.p, x.p, y.n);
}

static void op_reciprocal(apf_ctx *c, apf_vec y, apf_vec x)
{
	if (same(T(c), y, x, "reciprocal"))
		BE(T(c))->reciprocal(BE(T(c)), y.p, x.p, y.n);
}

static void op_rsqrt(apf_ctx *c, apf_vec y, apf_vec x, float eps)
{
	if (same(T(c), y, x, "rsqrt"))
		BE(T(c))->rsqrt(BE(T(c)), y.p, x.p, eps, y.n);
}

static void op_pow(apf_ctx *c, apf_vec y, apf_vec x, float p)
{
	if (same(T(c), y, x, "pow"))
		BE(T(c))->pow(BE(T(c)), y.p, x.p, p, y.n);
}

static void op_agree(apf_ctx *c, apf_vec z, apf_vec x, apf_vec y)
{
	if (same(T(c), z, x, "agree") && same(T(c), z, y, "agree"))
		BE(T(c))->agree(BE(T(c)), z.p, x.p, y.p, z.n);
}

static void op_select(apf_ctx *c, apf_vec z, apf_vec m, apf_vec x, apf_vec y)
{
	if (same(T(c), z, m, "select") && same(T(c), z, x, "select") &&
	    same(T(c), z, y, "select"))
		BE(T(c))->select(BE(T(c)), z.p, m.p, x.p, y.p, z.n);
}

/* ---- ABI 2: matrices --------------------------------------------------------- */

/* A view is usable when its storage is a usable vector that holds all its
 * rows: rows, cols >= 1, ld >= cols, (rows - 1) ld + cols <= v.n. */
static int mat_ok(apf_trial *t, apf_mat m, const char *op)
{
	if (!vec_ok(t, m.v, op))
		return 0;
	if (m.rows < 1 || m.cols < 1 || m.ld < m.cols ||
	    (size_t)(m.rows - 1) * (size_t)m.ld + (size_t)m.cols > m.v.n) {
		misuse(t, "%s: not a matrix view (%d x %d, ld %d, over %zu "
			  "floats)",
		       op, m.rows, m.cols, m.ld, m.v.n);
		return 0;
	}
	return 1;
}

/* Whether the storage of a and b share a float. */
static int overlap(apf_vec a, apf_vec b)
{
	uintptr_t a0 = (uintptr_t)a.p, a1 = a0 + a.n * sizeof(float),
		  b0 = (uintptr_t)b.p, b1 = b0 + b.n * sizeof(float);
	return a0 < b1 && b0 < a1;
}

static apf_mat view_of(const apf_param_info *pi, float *base)
{
	int rows = pi->ndim >= 2 ? pi->shape[0] : 1;
	int cols = (int)(pi->numel / (size_t)(rows > 0 ? rows : 1));
	return (apf_mat){{base + pi->offset, pi->numel}, rows, cols, cols};
}

static apf_mat op_param_mat(apf_ctx *c, int i)
{
	apf_trial *t = T(c);
	if (i < 0 || (size_t)i >= t->obj.nparams) {
		misuse(t, "param_mat: no parameter %d", i);
		return (apf_mat){0};
	}
	return view_of(&t->pinfo[i], t->params);
}

static apf_mat op_grad_mat(apf_ctx *c, int i)
{
	apf_trial *t = T(c);
	if (i < 0 || (size_t)i >= t->obj.nparams) {
		misuse(t, "grad_mat: no parameter %d", i);
		return (apf_mat){0};
	}
	return view_of(&t->pinfo[i], t->grads);
}

static apf_mat op_mat_of(apf_ctx *c, apf_vec x, int rows, int cols)
{
	apf_trial *t = T(c);
	if (!vec_ok(t, x, "mat_of"))
		return (apf_mat){0};
	if (rows < 1 || cols < 1 || (size_t)rows * (size_t)cols != x.n) {
		misuse(t, "mat_of: %d x %d is not a vector of %zu", rows, cols,
		       x.n);
		return (apf_mat){0};
	}
	return (apf_mat){x, rows, cols, cols};
}

static apf_mat op_block(apf_ctx *c, apf_mat m, int r0, int c0, int rows,
			int cols)
{
	apf_trial *t = T(c);
	if (!mat_ok(t, m, "block"))
		return (apf_mat){0};
	if (r0 < 0 || c0 < 0 || rows < 1 || cols < 1 || r0 > m.rows - rows ||
	    c0 > m.cols - cols) {
		misuse(t, "block: %d x %d at (%d, %d) outside a %d x %d view",
		       rows, cols, r0, c0, m.rows, m.cols);
		return (apf_mat){0};
	}
	size_t off = (size_t)r0 * m.ld + c0;
	size_t n = (size_t)(rows - 1) * m.ld + cols;
	return (apf_mat){{m.v.p + off, n}, rows, cols, m.ld};
}

static void op_matmul(apf_ctx *c, apf_mat C, float alpha, apf_mat A, int ta,
		      apf_mat B, int tb, float beta)
{
	apf_trial *t = T(c);
	if (!mat_ok(t, C, "matmul") || !mat_ok(t, A, "matmul") ||
	    !mat_ok(t, B, "matmul"))
		return;
	if ((ta != 0 && ta != 1) || (tb != 0 && tb != 1)) {
		misuse(t, "matmul: transpose flags %d, %d (0 or 1)", ta, tb);
		return;
	}
	int M = ta ? A.cols : A.rows, K = ta ? A.rows : A.cols;
	int KB = tb ? B.cols : B.rows, N = tb ? B.rows : B.cols;
	if (K != KB || C.rows != M || C.cols != N) {
		misuse(t, "matmul: %d x %d times %d x %d into %d x %d", M, K,
		       KB, N, C.rows, C.cols);
		return;
	}
	if (overlap(C.v, A.v) || overlap(C.v, B.v)) {
		misuse(t, "matmul: the output overlaps an input");
		return;
	}
	BE(t)->gemm(BE(t), ta, tb, M, N, K, alpha, A.v.p, A.ld, B.v.p, B.ld,
		    beta, C.v.p, C.ld);
}

static void op_copy_mat(apf_ctx *c, apf_mat d, apf_mat s)
{
	apf_trial *t = T(c);
	if (!mat_ok(t, d, "copy_mat") || !mat_ok(t, s, "copy_mat"))
		return;
	if (d.rows != s.rows || d.cols != s.cols) {
		misuse(t, "copy_mat: %d x %d into %d x %d", s.rows, s.cols,
		       d.rows, d.cols);
		return;
	}
	if (overlap(d.v, s.v)) {
		misuse(t, "copy_mat: the views overlap");
		return;
	}
	BE(t)->copy_mat(BE(t), d.v.p, d.ld, s.v.p, s.ld, d.rows, d.cols);
}

static void sumsq_op(apf_ctx *c, apf_vec out, apf_mat a, int by_col,
		     const char *op)
{
	apf_trial *t = T(c);
	if (!vec_ok(t, out, op) || !mat_ok(t, a, op))
		return;
	size_t want = (size_t)(by_col ? a.cols : a.rows);
	if (out.n != want) {
		misuse(t, "%s: %zu floats for a %d x %d matrix's %zu %s", op,
		       out.n, a.rows, a.cols, want, by_col ? "columns" : "rows");
		return;
	}
	if (overlap(out, a.v)) {
		misuse(t, "%s: the output overlaps the matrix", op);
		return;
	}
	(by_col ? BE(t)->col_sumsq : BE(t)->row_sumsq)(BE(t), out.p, a.v.p,
						       a.rows, a.cols, a.ld);
}

static void op_row_sumsq(apf_ctx *c, apf_vec out, apf_mat a)
{
	sumsq_op(c, out, a, 0, "row_sumsq");
}

static void op_col_sumsq(apf_ctx *c, apf_vec out, apf_mat a)
{
	sumsq_op(c, out, a, 1, "col_sumsq");
}

#define INV_ROOT_MAX APF_LINALG_MAX_N

/* The floats of view m, row by row, into host memory h (rows x cols). A
 * device's view comes down whole (its span, gaps between rows included). */
static int mat_down(apf_trial *t, apf_mat m, float *h, float *span)
{
	const float *src = m.v.p;
	if (BE(t)->device_memory) {
		BE(t)->download(BE(t), span, m.v.p, m.v.n * sizeof(float));
		if (BE(t)->sync(BE(t)))
			return -1;
		src = span;
	}
	for (int r = 0; r < m.rows; r++)
		memcpy(h + (size_t)r * m.cols, src + (size_t)r * m.ld,
		       (size_t)m.cols * sizeof(float));
	return 0;
}

/* And back: a device's span comes down first, so the floats between its
 * rows keep their values. */
static int mat_up(apf_trial *t, apf_mat m, const float *h, float *span)
{
	float *dst = m.v.p;
	if (BE(t)->device_memory) {
		BE(t)->download(BE(t), span, m.v.p, m.v.n * sizeof(float));
		if (BE(t)->sync(BE(t)))
			return -1;
		dst = span;
	}
	for (int r = 0; r < m.rows; r++)
		memcpy(dst + (size_t)r * m.ld, h + (size_t)r * m.cols,
		       (size_t)m.cols * sizeof(float));
	if (BE(t)->device_memory) {
		BE(t)->upload(BE(t), m.v.p, span, m.v.n * sizeof(float));
		return BE(t)->sync(BE(t));
	}
	return 0;
}

static void op_inv_root(apf_ctx *c, apf_mat out, apf_mat a, double p,
			double ridge)
{
	apf_trial *t = T(c);
	if (!mat_ok(t, out, "inv_root") || !mat_ok(t, a, "inv_root"))
		return;
	if (a.rows != a.cols || out.rows != a.rows || out.cols != a.cols) {
		misuse(t, "inv_root: a %d x %d matrix into %d x %d (square, the "
			  "same n)",
		       a.rows, a.cols, out.rows, out.cols);
		return;
	}
	if (a.rows > INV_ROOT_MAX) {
		misuse(t, "inv_root: n %d (at most %d)", a.rows, INV_ROOT_MAX);
		return;
	}
	if (!(p > 0) || !isfinite(p) || !(ridge >= 0) || !isfinite(ridge)) {
		misuse(t, "inv_root: p %g, ridge %g (p > 0, ridge >= 0, finite)",
		       p, ridge);
		return;
	}
	size_t n = (size_t)a.rows, nn = n * n;
	size_t span = a.v.n > out.v.n ? a.v.n : out.v.n;
	float *hf = malloc(nn * sizeof *hf);
	float *sp = BE(t)->device_memory ? malloc(span * sizeof *sp) : NULL;
	double *ad = malloc(nn * sizeof *ad), *od = malloc(nn * sizeof *od);
	const char *why = NULL;
	if (!hf || !ad || !od || (BE(t)->device_memory && !sp))
		why = "out of memory";
	else if (mat_down(t, a, hf, sp))
		why = "the device failed the copy";
	if (!why) {
		for (size_t i = 0; i < nn; i++)
			ad[i] = hf[i];
		if (apf_sym_inv_root(od, &why, (int)n, ad, p, ridge) == 0) {
			for (size_t i = 0; i < nn; i++)
				hf[i] = (float)od[i];
			if (mat_up(t, out, hf, sp))
				why = "the device failed the copy";
		} else if (!why) {
			why = "no inverse root";
		}
	}
	if (why)
		misuse(t, "inv_root: %s", why);
	free(hf);
	free(sp);
	free(ad);
	free(od);
}

/* ---- ABI 2: scratch ---------------------------------------------------------- */

/* Every submission call starts with all scratch released. */
static void enter(apf_trial *t, enum phase ph)
{
	t->phase = ph;
	t->scratch_cur = 0;
	t->scratch_off = 0;
}

static int op_scratch(apf_ctx *c, size_t n, apf_vec *out)
{
	apf_trial *t = T(c);
	*out = (apf_vec){0};
	if (t->err)
		return -1;
	if (t->phase == PH_NONE) {
		misuse(t, "scratch: outside a call of the submission");
		return -1;
	}
	if (n == 0 || n > SCRATCH_MAX) {
		misuse(t, "scratch: %zu floats (1 to %zu)", n, SCRATCH_MAX);
		return -1;
	}
	for (;;) {
		for (; t->scratch_cur < t->nscratch;
		     t->scratch_cur++, t->scratch_off = 0) {
			struct scratch_chunk *k = &t->scratch[t->scratch_cur];
			if (k->n - t->scratch_off < n)
				continue;
			*out = (apf_vec){k->p + t->scratch_off, n};
			/* keep every hand-out 64-byte aligned */
			t->scratch_off += (n + 15) & ~(size_t)15;
			if (t->scratch_off > k->n)
				t->scratch_off = k->n;
			return 0;
		}
		/* none holds n: a new chunk, where scratch_cur now points */
		size_t want = t->scratch_total > n ? t->scratch_total : n;
		if (want < SCRATCH_MIN)
			want = SCRATCH_MIN;
		if (want > SCRATCH_MAX - t->scratch_total)
			want = SCRATCH_MAX - t->scratch_total;
		if (t->nscratch == SCRATCH_CHUNKS || want < n) {
			misuse(t, "scratch: %zu floats more than the %zu held (at "
				  "most %zu at once)",
			       n, t->scratch_total, SCRATCH_MAX);
			return -1;
		}
		float *p;
		if (BE(t)->alloc(BE(t), want * sizeof(float), (void **)&p)) {
			misuse(t, "scratch: %zu floats: %s", want,
			       apf_error_message());
			return -1;
		}
		t->scratch[t->nscratch++] = (struct scratch_chunk){p, want};
		t->scratch_total += want;
	}
}

static const struct apf_ops ops = {
	.size = sizeof(struct apf_ops),
	.nparams = op_nparams,
	.param_info = op_param_info,
	.param = op_param,
	.grad = op_grad,
	.params_flat = op_params_flat,
	.grads_flat = op_grads_flat,
	.loss_grad = op_loss_grad,
	.next_batch = op_next_batch,
	.slot = op_slot,
	.scalar = op_scalar,
	.hparam = op_hparam,
	.hparam_word = op_hparam_word,
	.hparam_has = op_hparam_has,
	.fill = op_fill,
	.copy = op_copy,
	.scale = op_scale,
	.axpy = op_axpy,
	.axpby = op_axpby,
	.add_scalar = op_add_scalar,
	.mul = op_mul,
	.div = op_div,
	.sqrt = op_sqrt,
	.max = op_max,
	.clamp = op_clamp,
	.moments = op_moments,
	.adam_direction = op_adam_direction,
	.dot = op_dot,
	.sum = op_sum,
	.norm2 = op_norm2,
	.max_abs = op_max_abs,
	.workload = op_workload,
	.slice = op_slice,
	.log = op_log,
	.uniform = op_uniform,
	.sub = op_sub,
	.min = op_min,
	.sign = op_sign,
	.abs = op_abs,
	.exp = op_exp,
	.ln = op_ln,
	.reciprocal = op_reciprocal,
	.rsqrt = op_rsqrt,
	.pow = op_pow,
	.agree = op_agree,
	.select = op_select,
	.param_mat = op_param_mat,
	.grad_mat = op_grad_mat,
	.mat_of = op_mat_of,
	.block = op_block,
	.matmul = op_matmul,
	.copy_mat = op_copy_mat,
	.row_sumsq = op_row_sumsq,
	.col_sumsq = op_col_sumsq,
	.inv_root = op_inv_root,
	.scratch = op_scratch,
};

/* ---- the workload as an objective ---------------------------------------------- */

static int wl_loss_grad(void *user, const float *params, const apf_batch *b,
			uint64_t step, double *loss, float *grads)
{
	(void)params; /* the net is bound to the arena's parameters */
	return apf_workload_loss_grad(user, b, step, loss, grads);
}

static int wl_next_batch(void *user, apf_data_pos *pos, int B, apf_batch *out)
{
	return apf_workload_next_batch(out, user, pos, B);
}

static int wl_bind(void *user, float *params, float *state)
{
	return apf_workload_bind(user, params, state);
}

static int wl_init(void *user, float *params, float *state)
{
	int rc = apf_workload_bind(user, params, state);
	return rc ? rc : apf_workload_init(user);
}

void apf_objective_of_workload(struct apf_objective *o, apf_workload *wl)
{
	apf_net *net = apf_workload_net(wl);
	memset(o, 0, sizeof *o);
	o->user = wl;
	o->nparams = apf_net_nparams(net);
	o->params = o->nparams ? apf_net_param(net, 0) : NULL;
	o->param_floats = apf_net_param_floats(net);
	o->state_floats = apf_net_state_floats(net);
	o->loss_grad = wl_loss_grad;
	o->next_batch = wl_next_batch;
	o->init = wl_init;
	o->bind = wl_bind;
}

/* ---- the trial --------------------------------------------------------------- */

/* Copies the device's parts of the arena (parameters and model state, then
 * each vector slot) up to it (up) or down into the shared arena, and waits
 * for the copy. The header says where they are: apf_arena_check has
 * vouched for it, and only the harness wrote it since. */
static int copy_arena(apf_trial *t, int up)
{
	if (t->work == t->arena)
		return 0;
	const struct apf_arena_header *h = t->h;
	for (uint32_t i = 0; i < h->nslots + 2; i++) {
		uint64_t off, bytes;
		if (i < 2) {
			off = i ? h->state_offset : h->params_offset;
			bytes = (i ? h->state_floats : h->params_floats) *
				sizeof(float);
		} else if (h->slots[i - 2].kind == APF_SLOT_VECTOR) {
			off = h->slots[i - 2].offset;
			bytes = h->slots[i - 2].n * sizeof(float);
		} else {
			continue; /* a scalar: the shared arena's */
		}
		if (!bytes)
			continue;
		if (up)
			t->be->upload(t->be, t->work + off, t->arena + off, bytes);
		else
			t->be->download(t->be, t->arena + off, t->work + off, bytes);
	}
	return t->be->sync(t->be);
}

int apf_trial_snapshot(apf_trial *t)
{
	return copy_arena(t, 0);
}

static int fail_from_ctx(apf_trial *t, const char *call)
{
	return apf_error(APF_EINPUT, "submission", "%s: %s", call, t->msg);
}

int apf_trial_new(apf_trial **out, const struct apf_objective *obj,
		  apf_backend *be, const apf_submission *sub,
		  const apf_hparams *hp, const struct apf_trial_info *info,
		  void *arena, size_t capacity)
{
	*out = NULL;
	apf_trial *t = apf_calloc(1, sizeof *t);
	if (!t)
		return apf_error(APF_ENOMEM, "trial", "out of memory");
	t->ctx.ops = &ops;
	t->obj = *obj;
	t->be = be;
	t->sub = sub;
	t->hp = hp;
	t->info = *info;
	t->arena = arena;
	t->capacity = capacity;
	t->h = arena;
	int rc = 0;
	if (memcmp(t->h->magic, APF_ARENA_MAGIC, 8) == 0) {
		rc = apf_arena_check(arena, capacity);
		if (!rc && (t->h->params_floats != obj->param_floats ||
			    t->h->state_floats != obj->state_floats))
			rc = apf_error(APF_EVERIFY, "arena",
				       "laid out for another model");
		if (!rc)
			t->h->capacity = capacity;
	} else {
		rc = apf_arena_format(arena, capacity, obj->param_floats,
				      obj->state_floats);
	}
	t->work = t->arena;
	if (!rc && be->device_memory) {
		rc = be->alloc(be, capacity, (void **)&t->work);
		if (rc)
			t->work = NULL;
		else if (t->h->initialized)
			rc = copy_arena(t, 1); /* resumed: the checkpoint's state */
	}
	if (!rc) {
		t->params = (float *)(t->work + t->h->params_offset);
		t->state = (float *)(t->work + t->h->state_offset);
		rc = be->alloc(be, (obj->param_floats ? obj->param_floats : 1) *
					   sizeof(float),
			       (void **)&t->grads);
	}
	if (!rc) {
		t->pinfo = apf_calloc(obj->nparams, sizeof *t->pinfo);
		t->hp_read = apf_calloc(hp && hp->n ? hp->n : 1, 1);
		if (!t->pinfo || !t->hp_read)
			rc = apf_error(APF_ENOMEM, "trial", "out of memory");
	}
	for (size_t i = 0; !rc && i < obj->nparams; i++) {
		const apf_param *p = &obj->params[i];
		apf_param_info *pi = &t->pinfo[i];
		pi->name = p->name;
		pi->kind = p->kind;
		pi->ndim = p->ndim;
		for (int d = 0; d < p->ndim && d < 4; d++)
			pi->shape[d] = p->shape[d];
		pi->numel = p->numel;
		pi->offset = p->offset;
	}
	if (!rc && sub && info->workload)
		rc = apf_submission_batch_size(&t->batch, sub, info->workload);
	if (!rc && obj->bind)
		rc = obj->bind(obj->user, t->params, t->state);
	apf_rng_key k = {info->key.seed, info->key.study, info->key.trial,
			 APF_RNG_SUBMISSION};
	t->prng_key = apf_rng_philox_key(&k);
	t->last_eval = (apf_eval_results){0, 0, NAN, NAN, NAN, NAN, NAN, NAN,
					  NAN, 1};
	if (rc) {
		apf_trial_free(t);
		return rc;
	}
	hp_trial = t;
	*out = t;
	return 0;
}

void apf_trial_free(apf_trial *t)
{
	if (!t)
		return;
	if (hp_trial == t)
		hp_trial = NULL;
	if (t->grads)
		t->be->free(t->be, t->grads);
	if (t->work && t->work != t->arena)
		t->be->free(t->be, t->work);
	free(t->hp_read);
	for (int i = 0; i < t->nscratch; i++)
		t->be->free(t->be, t->scratch[i].p);
	free(t->pinfo);
	free(t);
}

static apf_prng prng_at(const apf_trial *t)
{
	return (apf_prng){t->prng_key, (uint64_t)t->h->global_step};
}

int apf_trial_init(apf_trial *t)
{
	if (t->h->initialized)
		return 0;
	int rc = t->obj.init ? t->obj.init(t->obj.user, t->params, t->state) : 0;
	if (rc)
		return rc;
	enter(t, PH_INIT);
	int r = t->sub->init(&t->ctx, t->hp, prng_at(t));
	t->phase = PH_NONE;
	t->ran_init = 1;
	hp_report(t, 0);
	if (t->err)
		return fail_from_ctx(t, "init_optimizer_state");
	if (r < 0)
		return apf_error(APF_EINPUT, "submission",
				 "init_optimizer_state returned %d", r);
	rc = t->be->sync(t->be);
	if (!rc)
		rc = copy_arena(t, 0); /* the initial state is checkpointed */
	if (!rc)
		t->h->initialized = 1;
	return rc;
}

int apf_trial_step(apf_trial *t, int *complete)
{
	*complete = 0;
	if (!t->h->initialized)
		return apf_error(APF_EINTERNAL, "trial", "step before init");
	int64_t step = t->h->global_step;
	const apf_batch *b = NULL;
	t->have_batch = 0;
	if (t->sub->select) {
		enter(t, PH_SELECT);
		int r = t->sub->select(&t->ctx, t->hp, step, prng_at(t), &b);
		t->phase = PH_NONE;
		if (t->err)
			return fail_from_ctx(t, "data_selection");
		if (r < 0)
			return apf_error(APF_EINPUT, "submission",
					 "data_selection returned %d", r);
		if (t->obj.next_batch && (b != &t->cur || !t->have_batch))
			return apf_error(APF_EINPUT, "submission",
					 "data_selection: not a batch from "
					 "apf_next_batch");
	} else if (t->obj.next_batch) {
		enter(t, PH_SELECT); /* the harness's default selection */
		op_next_batch(&t->ctx, &b);
		t->phase = PH_NONE;
		if (t->err)
			return fail_from_ctx(t, "next batch");
	}
	apf_train_state ts = {step,
			      t->submission_time_s,
			      t->info.max_runtime_s,
			      t->info.max_steps,
			      t->info.step_hint,
			      (int)t->h->evals};
	enter(t, PH_UPDATE);
	int r = t->sub->update(&t->ctx, t->hp, b, &t->last_eval, step,
			       prng_at(t), &ts);
	t->phase = PH_NONE;
	if (t->err)
		return fail_from_ctx(t, "update_params");
	if (r < 0)
		return apf_error(APF_EINPUT, "submission",
				 "update_params returned %d at step %lld", r,
				 (long long)step);
	int rc = t->be->sync(t->be);
	if (rc)
		return rc;
	t->h->global_step = step + 1;
	*complete = r == APF_TRAINING_COMPLETE;
	hp_report(t, 1);
	return 0;
}

int apf_trial_prepare_eval(apf_trial *t)
{
	if (!t->sub->prepare)
		return 0;
	enter(t, PH_PREPARE);
	int r = t->sub->prepare(&t->ctx, t->hp, t->h->global_step, prng_at(t));
	t->phase = PH_NONE;
	if (t->err)
		return fail_from_ctx(t, "prepare_for_eval");
	if (r < 0)
		return apf_error(APF_EINPUT, "submission",
				 "prepare_for_eval returned %d", r);
	return t->be->sync(t->be);
}

void apf_trial_set_eval(apf_trial *t, const apf_eval_results *ev)
{
	t->last_eval = *ev;
}

void apf_trial_set_submission_time(apf_trial *t, double seconds)
{
	t->submission_time_s = seconds;
}

int64_t apf_trial_global_step(const apf_trial *t)
{
	return t->h->global_step;
}

struct apf_arena_header *apf_trial_arena(apf_trial *t)
{
	return t->h;
}

int apf_trial_batch_size(const apf_trial *t)
{
	return t->batch;
}
