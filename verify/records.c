/*
 * records.c: the log's records, as the reader hands them over.
 *
 * Two halves. apf_vx_prepare runs on the reader's worker threads: it checks
 * one line against its event's form (manifests/log-events.schema.json:
 * required fields, types, no unknown fields) and extracts the numbers the
 * timing checks need into a slot, so that the in-order half does no JSON
 * work. apf_vx_record runs in log order: run-level bindings (check 2) and,
 * per unit, the sequence of records and the timing rules (check 3):
 *
 *   trial_start, build, clock_start, (step_block k, eval k)..., [sandbox
 *   fault], trial_end; a resume from eval j discards the unit's records
 *   after eval j (and its failures there), and the unit goes on from
 *   eval j's accumulated times with step_block j+1, whose start is measured
 *   from the resume on the new supervisor's clock.
 *
 *   step_block k: first_step = the last step + 1; block 1 ends at step 1 and
 *     starts at clock_start's t_ns; block k > 1 starts at or after eval
 *     k-1's end (or the resume); accumulated_submission_ns is the sum of
 *     the blocks; an eval is due when eval_period_ns has passed since the
 *     last eval ended (or the resume) - only the final eval of a trial that
 *     ended (budget, targets, complete, max_steps) may come earlier.
 *   eval k: starts at step_block k's end (the trial frozen); its copy
 *     (copy_ns, 0 when absent: the trial's report to its "copied") lies
 *     inside that block, so it is submission time; accumulated eval time
 *     is the sum
 *     of the evals, logging time the sum of the gaps from each eval's end
 *     to the next block's start; total = the three sums; global_step is
 *     the block's last step, never past max_steps; the target flags are
 *     what the metrics say; a trial ends at the first eval meeting both
 *     targets, at the first eval past the budget, at max_steps.
 *   trial_end: its counts, step, submission time and time-to-target (the
 *     submission time at the first eval meeting the validation target)
 *     are the log's; its reason is what the last eval says.
 *
 * Times of different units, and of one unit across a resume, come from
 * different supervisor clocks and are never compared.
 */
#include "verify/verifier.h"

#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "wire/wire.h"

/* ---- the form of each record (worker threads) ----------------------------- */

#define FLAG_NULL 0x80
#define FLAG_CKPT_NAMED 0x40 /* eval: checkpoint.file names its file */
#define FLAG_CKPT0 0x20      /* clock_start: has a checkpoint */

const char *apf_vx_event_name(int ev)
{
	return ev > 0 && ev < APF_EV_COUNT ? apf_rundir_events[ev].name : "record";
}

size_t apf_vx_slot_size(void)
{
	return sizeof(struct vx_slot);
}

static void bad(struct vx_slot *s, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static void bad(struct vx_slot *s, const char *fmt, ...)
{
	if (s->bad)
		return;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(s->why, sizeof s->why, fmt, ap);
	va_end(ap);
	s->bad = 1;
}

/* Lowercase hex digits, as their value + 1; 0 for anything else. */
static const uint8_t hexdigit[256] = {
	['0'] = 1,  ['1'] = 2,	['2'] = 3,  ['3'] = 4,	['4'] = 5,  ['5'] = 6,
	['6'] = 7,  ['7'] = 8,	['8'] = 9,  ['9'] = 10, ['a'] = 11, ['b'] = 12,
	['c'] = 13, ['d'] = 14, ['e'] = 15, ['f'] = 16};

/* A SHA-256 in lowercase hex; its bytes go to out (may be NULL). */
static int is_sha(const char *line, const struct apf_jtok *t, uint8_t *out)
{
	if (t->type != APF_JSTRING || t->escaped || t->len != 64)
		return 0;
	const unsigned char *p = (const unsigned char *)line + t->start;
	int ok = 1;
	for (int i = 0; i < 32; i++) {
		uint8_t hi = hexdigit[p[2 * i]], lo = hexdigit[p[2 * i + 1]];
		ok &= hi != 0 && lo != 0;
		if (out)
			out[i] = (uint8_t)((hi - 1) << 4 | ((lo - 1) & 0xf));
	}
	return ok;
}

/* Equal bytes; short keys and names compare faster inline than through
 * a memcmp call. */
static inline int same_bytes(const char *a, const char *b, size_t n)
{
	for (; n >= 8; n -= 8, a += 8, b += 8) {
		uint64_t x, y;
		memcpy(&x, a, 8);
		memcpy(&y, b, 8);
		if (x != y)
			return 0;
	}
	for (; n; n--)
		if (*a++ != *b++)
			return 0;
	return 1;
}

/* The unit a token names: index, or -2 when run.json has no such unit. */
static int32_t find_unit(const struct vx *v, const char *line,
			 const struct apf_jtok *t)
{
	char buf[256];
	const char *name = line + t->start;
	size_t len = t->len;
	if (t->escaped) {
		if (apf_jtok_string(line, t, buf, sizeof buf))
			return -2;
		name = buf;
		len = strlen(buf);
	}
	/* Runs of records of one unit: try this thread's last one first. */
	static _Thread_local size_t last;
	if (last < v->nunits && v->units[last].name_len == len &&
	    same_bytes(v->units[last].name, name, len))
		return (int32_t)last;
	size_t lo = 0, hi = v->nunits;
	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		const char *m = v->units[v->by_name[mid]].name;
		size_t mlen = v->units[v->by_name[mid]].name_len;
		int c = memcmp(m, name, mlen < len ? mlen : len);
		if (!c)
			c = mlen < len ? -1 : mlen > len;
		if (!c) {
			last = v->by_name[mid];
			return (int32_t)last;
		}
		if (c < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return -2;
}

static const char *type_name(int type)
{
	switch (type) {
	case APF_F_U64:
		return "an integer >= 0";
	case APF_F_U64_1:
		return "an integer >= 1";
	case APF_F_U64_NULL:
		return "an integer >= 0 or null";
	case APF_F_SHA:
		return "a SHA-256 in lowercase hex";
	case APF_F_STR:
		return "a string";
	case APF_F_BOOL:
		return "true or false";
	case APF_F_TRUE:
		return "true";
	case APF_F_NUM:
		return "a number";
	case APF_F_OBJ:
		return "an object";
	case APF_F_STRS:
		return "an array of strings";
	case APF_F_UNIT:
		return "a unit name study_<k>/<workload>/trial_<n>";
	case APF_F_UNIT_NULL:
		return "a unit name or null";
	case APF_F_ENUM:
		return "one of the schema's words";
	case APF_F_DRIFTS:
		return "a non-empty array of {field, expected, actual}";
	case APF_F_METRICS:
		return "an object of numbers";
	case APF_F_CKPT:
		return "{file, sha256, bytes}";
	}
	return "?";
}

/* An object whose members are exactly the given string fields. */
static int strings_object(const char *line, const struct apf_jtok *t,
			  uint32_t obj, const char *const *names, size_t n)
{
	if (t[obj].type != APF_JOBJECT || t[obj].size != n)
		return 0;
	for (size_t i = 0; i < n; i++) {
		long k = apf_jtok_get(line, t, obj, names[i]);
		if (k < 0 || t[k].type != APF_JSTRING)
			return 0;
	}
	return 1;
}

/* Checks one field's value and keeps it in the slot: false when it is not
 * of its type (the caller says which field and what it must be). */
static bool take_field(const struct vx *v, const char *line,
		      const struct apf_jtok *t, uint32_t val,
		      const struct apf_event_field *f, struct vx_slot *s)
{
	const struct apf_jtok *x = &t[val];
	uint64_t n;
	switch (f->type) {
	case APF_F_U64:
	case APF_F_U64_1:
		if (apf_jtok_u64(&n, line, x) || (f->type == APF_F_U64_1 && n < 1))
			return false;
		s->u[f->at] = n;
		s->has_u |= (uint16_t)(1u << f->at);
		return true;
	case APF_F_U64_NULL:
		if (x->type == APF_JNULL) {
			s->flags |= FLAG_NULL;
			return true;
		}
		if (apf_jtok_u64(&n, line, x))
			return false;
		s->u[f->at] = n;
		return true;
	case APF_F_SHA:
		if (!is_sha(line, x, NULL))
			return false;
		break;
	case APF_F_STR:
		if (x->type != APF_JSTRING)
			return false;
		break;
	case APF_F_BOOL:
		if (x->type != APF_JTRUE && x->type != APF_JFALSE)
			return false;
		if (x->type == APF_JTRUE)
			s->flags |= 1u << f->at;
		return true;
	case APF_F_TRUE:
		return x->type == APF_JTRUE;
	case APF_F_NUM:
		return apf_jtok_double(&s->d[f->at], line, x) == 0;
	case APF_F_OBJ:
		if (x->type != APF_JOBJECT)
			return false;
		break;
	case APF_F_STRS:
		if (x->type != APF_JARRAY)
			return false;
		for (uint32_t i = val + 1; i < x->next; i = t[i].next)
			if (t[i].type != APF_JSTRING)
				return false;
		return true;
	case APF_F_UNIT:
	case APF_F_UNIT_NULL:
		if (f->type == APF_F_UNIT_NULL && x->type == APF_JNULL) {
			s->unit = -1;
			return true;
		}
		if (x->type != APF_JSTRING)
			return false;
		s->unit = find_unit(v, line, x);
		s->unit_tok = val;
		return true;
	case APF_F_ENUM:
		for (int i = 0; x->type == APF_JSTRING && f->values[i]; i++)
			if (apf_jtok_eq(line, x, f->values[i])) {
				s->sval = (uint8_t)i;
				return true;
			}
		return false;
	case APF_F_DRIFTS: {
		static const char *const names[] = {"field", "expected",
						    "actual"};
		if (x->type != APF_JARRAY || x->size == 0)
			return false;
		for (uint32_t i = val + 1; i < x->next; i = t[i].next)
			if (!strings_object(line, t, i, names, 3))
				return false;
		return true;
	}
	case APF_F_METRICS:
		if (x->type != APF_JOBJECT)
			return false;
		/* Values sit at odd offsets after the object: key, value. */
		for (uint32_t k = val + 1; k < x->next; k = t[k + 1].next)
			if (t[k + 1].type != APF_JNUMBER)
				return false;
		break;
	case APF_F_CKPT: {
		if (x->type != APF_JOBJECT || x->size != 3)
			return false;
		long file = apf_jtok_get(line, t, val, "file");
		long sha = apf_jtok_get(line, t, val, "sha256");
		long bytes = apf_jtok_get(line, t, val, "bytes");
		if (file < 0 || sha < 0 || bytes < 0 ||
		    t[file].type != APF_JSTRING ||
		    !is_sha(line, &t[sha], s->sha) ||
		    apf_jtok_u64(&s->u[9], line, &t[bytes]))
			return false;
		s->tok[2] = (uint32_t)file;
		if (s->ev == APF_EV_CLOCK_START) {
			char ck0[16];
			apf_rundir_ckpt_name(ck0, sizeof ck0, NULL, 0);
			if (apf_jtok_eq(line, &t[file], ck0))
				s->flags |= FLAG_CKPT0;
		}
		break;
	}
	}
	if (f->at != APF_KEEP_NONE)
		s->tok[f->at] = val;
	return true;
}

static inline int key_is(const char *line, const struct apf_jtok *key,
			 const struct apf_event_field *f)
{
	if (key->escaped)
		return apf_jtok_eq(line, key, f->name);
	return key->len == f->len && same_bytes(line + key->start, f->name, f->len);
}

static int event_id(const char *name)
{
	/* Nearly every record is one of these two. */
	if (!strcmp(name, "step_block"))
		return APF_EV_STEP_BLOCK;
	if (!strcmp(name, "eval"))
		return APF_EV_EVAL;
	for (int i = 1; i < APF_EV_COUNT; i++)
		if (!strcmp(apf_rundir_events[i].name, name))
			return i;
	return APF_EV_UNKNOWN;
}

/* checkpoint.file names RUN/<unit>/ckpt/<index>.bin, relative to the run
 * or to the trial's directory (pkg/rundir owns the name). */
static int names_checkpoint(const char *line, const struct apf_jtok *t,
			    const struct vx_unit *u, uint64_t index)
{
	if (t->type != APF_JSTRING || t->escaped)
		return 0;
	return apf_rundir_ckpt_named(line + t->start, t->len, u->name,
				     u->name_len, index);
}

/* Whether a metric meets its target, in *out; false when the value is not a
 * number (then the slot has no such metric). Most metrics are written with 17
 * significant digits, which strtod converts slowly; a value good to a few
 * ulp settles the comparison unless it is that close to the target, and
 * only then is the exact conversion needed. */
static bool meets(const char *line, const struct apf_jtok *t, int direction,
		 double target, uint8_t *out)
{
	static const double pow10[] = {1e0,  1e1,  1e2,	 1e3,  1e4,  1e5,
				       1e6,  1e7,  1e8,	 1e9,  1e10, 1e11,
				       1e12, 1e13, 1e14, 1e15, 1e16, 1e17,
				       1e18, 1e19, 1e20, 1e21, 1e22};
	if (t->type != APF_JNUMBER)
		return false;
	const char *p = line + t->start, *end = p + t->len;
	int neg = *p == '-', sig = 0, exp10 = 0, quick = 1;
	uint64_t m = 0;
	p += neg;
	for (; p < end && *p >= '0' && *p <= '9'; p++) {
		if (sig < 19) {
			m = m * 10 + (uint64_t)(*p - '0');
			sig += m != 0;
		} else {
			exp10++;
		}
	}
	if (p < end && *p == '.')
		for (p++; p < end && *p >= '0' && *p <= '9'; p++)
			if (sig < 19) {
				m = m * 10 + (uint64_t)(*p - '0');
				sig += m != 0;
				exp10--;
			}
	if (p < end || exp10 < -22 || exp10 > 22)
		quick = 0; /* an exponent, or out of the exact powers */
	if (quick) {
		double v = exp10 < 0 ? (double)m / pow10[-exp10]
				     : (double)m * pow10[exp10];
		v = neg ? -v : v;
		double scale = fmax(fabs(v), fabs(target));
		if (fabs(v - target) > 8 * DBL_EPSILON * scale) {
			*out = (uint8_t)apf_workload_meets(direction, v, target);
			return true;
		}
	}
	double v;
	if (apf_jtok_double(&v, line, t))
		return false;
	*out = (uint8_t)apf_workload_meets(direction, v, target);
	return true;
}

void apf_vx_prepare(void *user, const struct apf_runlog_record *r, void *slot)
{
	const struct vx *v = user;
	struct vx_slot *s = slot;
	const struct apf_jtok *t = r->tok;
	const char *line = r->line;
	memset(s, 0, offsetof(struct vx_slot, why));
	s->unit = -1;
	s->ev = (uint8_t)event_id(r->event);
	if (s->ev == APF_EV_UNKNOWN) {
		bad(s, "unknown event '%.40s'", r->event);
		return;
	}
	const struct apf_event_field *fs = apf_rundir_events[s->ev].fields;
	uint32_t seen = 0;
	size_t hint = 0;
	/* The reader checked the first four members (seq, prev, t_ns,
	 * event); the event's own fields follow. */
	uint32_t k = 1;
	for (uint32_t m = 0; m < t[0].size; m++, k = t[k + 1].next) {
		if (m < 4)
			continue;
		const struct apf_jtok *key = &t[k];
		size_t fi = hint;
		/* Writers keep the schema's order: try the next field first. */
		if (!fs[fi].name || !key_is(line, key, &fs[fi]))
			for (fi = 0; fs[fi].name; fi++)
				if (key_is(line, key, &fs[fi]))
					break;
		if (!fs[fi].name) {
			char name[64];
			if (apf_jtok_string(line, key, name, sizeof name))
				snprintf(name, sizeof name, "...");
			bad(s, "%s: unknown field '%s'", apf_rundir_events[s->ev].name,
			    name);
			return;
		}
		hint = fi + 1;
		seen |= 1u << fi;
		if (!take_field(v, line, t, k + 1, &fs[fi], s)) {
			bad(s, "%s: %s must be %s", apf_rundir_events[s->ev].name,
			    fs[fi].name, type_name(fs[fi].type));
			return;
		}
	}
	for (size_t i = 0; fs[i].name; i++)
		if (fs[i].required && !(seen & (1u << i))) {
			bad(s, "%s: field %s is missing", apf_rundir_events[s->ev].name,
			    fs[i].name);
			return;
		}
	if (s->ev == APF_EV_EVAL && s->unit >= 0) {
		/* What the in-order checks need from the line is read here,
		 * where the line is still in this core's cache: the two
		 * metrics the target flags stand for, the checkpoint's name. */
		const struct vx_unit *u = &v->units[s->unit];
		if (names_checkpoint(line, &t[s->tok[2]], u, s->u[0]))
			s->flags |= FLAG_CKPT_NAMED;
		long vm = apf_jtok_get(line, t, s->tok[0], u->vkey);
		long tm = apf_jtok_get(line, t, s->tok[0], u->tkey);
		if (vm >= 0)
			s->has_vm = meets(line, &t[vm], u->direction, u->vtarget,
					  &s->vm_meets);
		if (tm >= 0)
			s->has_tm = meets(line, &t[tm], u->direction, u->ttarget,
					  &s->tm_meets);
		s->vm_tok = (uint32_t)vm;
		s->tm_tok = (uint32_t)tm;
	}
}

/* ---- failures ------------------------------------------------------------- */

static void describe(const struct vx *v, const struct apf_runlog_record *r,
		     const struct vx_slot *s, char *buf, size_t size)
{
	const struct vx_unit *u = s->unit >= 0 ? &v->units[s->unit] : NULL;
	const char *ev = apf_vx_event_name(s->ev);
	if (!u)
		snprintf(buf, size, "%s", s->ev ? ev : r->event);
	else if (s->ev == APF_EV_STEP_BLOCK)
		snprintf(buf, size, "step_block %" PRIu64 " of %s", u->k + 1,
			 u->name);
	else if (s->ev == APF_EV_EVAL)
		snprintf(buf, size, "eval %" PRIu64 " of %s", s->u[0], u->name);
	else
		snprintf(buf, size, "%s of %s", ev, u->name);
}

/* A check-2 failure: stops the walk. */
static int log_fail(struct vx *v, const struct apf_runlog_record *r,
		    const struct vx_slot *s, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

static int log_fail(struct vx *v, const struct apf_runlog_record *r,
		    const struct vx_slot *s, const char *fmt, ...)
{
	char desc[200], why[600];
	describe(v, r, s, desc, sizeof desc);
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(why, sizeof why, fmt, ap);
	va_end(ap);
	return apf_error(APF_EVERIFY, apf_vx_label(v, APF_VERIFY_LOG),
			 "%s: line %" PRIu64 " (%s): %s", v->log_path,
			 r->line_no, desc, why);
}

void apf_vx_unit_fail(struct vx *v, struct vx_unit *u, uint64_t line,
		      const char *what, const char *fmt, ...)
{
	if (u->fail)
		return;
	char why[600];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(why, sizeof why, fmt, ap);
	va_end(ap);
	apf_buf b = {0};
	if (apf_buf_printf(&b, "%s: line %" PRIu64 " (%s): %s", v->log_path,
			   line, what, why)) {
		apf_buf_free(&b);
		b.data = apf_strdup("out of memory describing a failure");
	}
	u->fail = b.data;
	u->fail_line = line;
}

void apf_vx_unit_clear(struct vx_unit *u)
{
	free(u->fail);
	u->fail = NULL;
	u->fail_line = 0;
}

/* A check-3 failure on this record: the unit's checks stop until a resume
 * discards the record. */
static int fail_here(struct vx *v, struct vx_unit *u,
		     const struct apf_runlog_record *r, const struct vx_slot *s,
		     const char *fmt, ...) __attribute__((format(printf, 5, 6)));

static int fail_here(struct vx *v, struct vx_unit *u,
		     const struct apf_runlog_record *r, const struct vx_slot *s,
		     const char *fmt, ...)
{
	char desc[200], why[600];
	describe(v, r, s, desc, sizeof desc);
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(why, sizeof why, fmt, ap);
	va_end(ap);
	apf_vx_unit_fail(v, u, r->line_no, desc, "%s", why);
	return 0;
}

static const char *state_name(int state)
{
	static const char *const names[] = {
		"before trial_start", "after trial_start", "after build",
		"after clock_start",  "after a step_block", "after an eval",
		"after a resume",     "after sandbox_fault", "after trial_end",
		"after its preemption"};
	return names[state];
}

static double secs(uint64_t ns)
{
	return (double)ns / 1e9;
}

/* The stop conditions of an eval, in words. */
static const char *stop_words(int stop)
{
	if (stop & STOP_TARGETS)
		return "both targets";
	if (stop & STOP_BUDGET)
		return "the budget";
	if (stop & STOP_COMPLETE)
		return "the submission's word that it is complete";
	return "max_steps";
}

/* ---- run-level records (check 2) ------------------------------------------ */

static int tok_is(const struct apf_runlog_record *r, uint32_t i,
		  const char *want)
{
	return apf_jtok_eq(r->line, &r->tok[i], want);
}

/* ---- units ---------------------------------------------------------------- */

static int hparams_equal(const apf_hparams *a, const apf_hparams *b,
			 char *diff, size_t size)
{
	for (size_t i = 0; i < a->n; i++) {
		size_t j;
		for (j = 0; j < b->n && strcmp(a->names[i], b->names[j]); j++)
			;
		if (j == b->n) {
			snprintf(diff, size, "%s is missing", a->names[i]);
			return 0;
		}
		if ((a->words[i] || b->words[j])
			    ? !a->words[i] || !b->words[j] ||
				      strcmp(a->words[i], b->words[j])
			    : a->values[i] != b->values[j]) {
			char x[64], y[64];
			if (a->words[i])
				snprintf(x, sizeof x, "%s", a->words[i]);
			else
				snprintf(x, sizeof x, "%.17g", a->values[i]);
			if (b->words[j])
				snprintf(y, sizeof y, "%s", b->words[j]);
			else
				snprintf(y, sizeof y, "%.17g", b->values[j]);
			snprintf(diff, size, "%s is %s, the plan draws %s",
				 a->names[i], y, x);
			return 0;
		}
	}
	for (size_t j = 0; j < b->n; j++) {
		size_t i;
		for (i = 0; i < a->n && strcmp(a->names[i], b->names[j]); i++)
			;
		if (i == a->n) {
			snprintf(diff, size, "%s is not in the plan's draw",
				 b->names[j]);
			return 0;
		}
	}
	return 1;
}

/* trial_start: the trial's parameters are the plan's and the workload
 * spec's (check 2). */
static int trial_start(struct vx *v, struct vx_unit *u,
		       const struct apf_runlog_record *r,
		       const struct vx_slot *s)
{
	if (u->state != U_NONE)
		return fail_here(v, u, r, s,
				 "trial_start repeated (the trial started at "
				 "line %" PRIu64 ")",
				 u->start_line);
	if (!tok_is(r, s->tok[0], u->workload) ||
	    !tok_is(r, s->tok[1], u->variant) || s->u[0] != (uint64_t)u->study ||
	    s->u[1] != (uint64_t)u->trial0 + 1)
		return log_fail(v, r, s,
				"workload, variant, study and trial must be "
				"%s, %s, %ld and %ld, as the unit's name and "
				"run.json say",
				u->workload, u->variant, u->study, u->trial0 + 1);
	const struct apf_jtok *ht = &r->tok[s->tok[2]];
	json_error_t je;
	json_t *hj = json_loadb(r->line + ht->start, ht->len, 0, &je);
	apf_hparams hp = {0};
	int rc = hj ? apf_hparams_from_json(&hp, hj) : APF_EINPUT;
	if (rc) {
		json_decref(hj);
		apf_error_clear();
		return log_fail(v, r, s, "hparams: not numbers and words");
	}
	static const apf_hparams none = {0};
	char diff[200];
	int same = hparams_equal(u->hp ? u->hp : &none, &hp, diff, sizeof diff);
	apf_hparams_free(&hp);
	if (!same) {
		json_decref(hj);
		return log_fail(v, r, s,
				"hparams differ from the entry's plan (study "
				"%ld, trial %ld of the seeded draw): %s",
				u->study, u->trial0 + 1, diff);
	}
	json_decref(u->hparams);
	u->hparams = hj;
	const char *what = NULL;
	char want[64] = "", got[64] = "";
	if (s->u[3] != u->budget_ns) {
		what = "budget_ns";
		snprintf(want, sizeof want, "%" PRIu64, u->budget_ns);
		snprintf(got, sizeof got, "%" PRIu64, s->u[3]);
	} else if (s->u[4] != u->period_ns) {
		what = "eval_period_ns";
		snprintf(want, sizeof want, "%" PRIu64, u->period_ns);
		snprintf(got, sizeof got, "%" PRIu64, s->u[4]);
	} else if (s->u[5] != u->max_steps) {
		what = "max_steps";
		snprintf(want, sizeof want, "%" PRIu64, u->max_steps);
		snprintf(got, sizeof got, "%" PRIu64, s->u[5]);
	} else if (s->u[6] != apf_workload_init_allowance_ns(u->budget_ns)) {
		what = "init_allowance_ns";
		snprintf(want, sizeof want, "%" PRIu64,
			 apf_workload_init_allowance_ns(u->budget_ns));
		snprintf(got, sizeof got, "%" PRIu64, s->u[6]);
	} else if (s->d[0] != u->vtarget) {
		what = "validation_target";
		snprintf(want, sizeof want, "%.17g", u->vtarget);
		snprintf(got, sizeof got, "%.17g", s->d[0]);
	} else if (s->d[1] != u->ttarget) {
		what = "test_target";
		snprintf(want, sizeof want, "%.17g", u->ttarget);
		snprintf(got, sizeof got, "%.17g", s->d[1]);
	} else if (!tok_is(r, s->tok[3], u->spec->metric)) {
		what = "metric";
		snprintf(want, sizeof want, "%s", u->spec->metric);
		snprintf(got, sizeof got, "another");
	} else if ((s->sval == 0 ? 1 : -1) != u->direction) {
		what = "direction";
		snprintf(want, sizeof want, "%s", u->direction > 0 ? "max" : "min");
		snprintf(got, sizeof got, "%s", apf_rundir_directions[s->sval]);
	}
	if (what)
		return log_fail(v, r, s,
				"%s is %s, the workload spec %s (%s, %s "
				"budget x%g, scale %g) gives %s",
				what, got, u->spec->name, u->variant,
				!strcmp(v->device, "cuda") ? "gpu" : "cpu",
				json_real_value(json_object_get(
					json_object_get(v->run_json, "plan"),
					"budget_multiplier")),
				v->budget_scale, want);
	u->state = U_STARTED;
	u->from_scratch = 1;
	u->init_allowance = s->u[6];
	u->start_line = r->line_no;
	u->seg_t = r->t_ns;
	if (!u->ever_started)
		v->rep->units_started++;
	u->ever_started = 1;
	return 0;
}

/* A kept eval that came before its period, or that met a stop condition,
 * must be the trial's last: anything else after it is a failure. */
static int went_on(struct vx *v, struct vx_unit *u)
{
	if (u->nevals && u->evals[u->nevals - 1].stop &&
	    u->evals[u->nevals - 1].index == u->k) {
		const struct vx_eval *e = &u->evals[u->nevals - 1];
		char what[200];
		snprintf(what, sizeof what, "eval %" PRIu64 " of %s", e->index,
			 u->name);
		apf_vx_unit_fail(v, u, e->line, what,
				 "met %s, so the trial had to end there, but "
				 "it went on",
				 stop_words(e->stop));
		return 1;
	}
	if (u->early_eval) {
		char what[200];
		snprintf(what, sizeof what, "eval %" PRIu64 " of %s",
			 u->early_eval, u->name);
		apf_vx_unit_fail(v, u, u->early_line, what,
				 "came before the eval period had passed since "
				 "the last eval, yet it was not the trial's "
				 "final eval");
		return 1;
	}
	return 0;
}

static int step_block(struct vx *v, struct vx_unit *u,
		      const struct apf_runlog_record *r,
		      const struct vx_slot *s)
{
	if (u->state != U_READY && u->state != U_EVAL)
		return fail_here(v, u, r, s, "a step_block %s",
				 state_name(u->state));
	if (went_on(v, u))
		return 0;
	uint64_t first = s->u[0], last = s->u[1], start = s->u[2],
		 end = s->u[3], acc = s->u[4];
	uint64_t k = u->k + 1;
	if (first != u->steps + 1)
		return fail_here(v, u, r, s,
				 "first_step %" PRIu64 " does not follow the "
				 "last step %" PRIu64,
				 first, u->steps);
	if (last + 1 < first)
		return fail_here(v, u, r, s,
				 "last_step %" PRIu64 " is before first_step %" PRIu64,
				 last, first);
	if (k == 1 && last != 1)
		return fail_here(v, u, r, s,
				 "the first block ends at step %" PRIu64
				 ", but the first eval is due after step 1",
				 last);
	if (u->max_steps && last > u->max_steps)
		return fail_here(v, u, r, s,
				 "last_step %" PRIu64 " is past max_steps %" PRIu64,
				 last, u->max_steps);
	if (start < u->ref_ns)
		return fail_here(v, u, r, s,
				 "start_ns %" PRIu64 " is before %s %" PRIu64,
				 start,
				 u->ref_kind == REF_EVAL ? "the last eval's end"
							 : "clock_start's t_ns",
				 u->ref_ns);
	if (end < start)
		return fail_here(v, u, r, s,
				 "end_ns %" PRIu64 " is before start_ns %" PRIu64,
				 end, start);
	if (r->t_ns < end)
		return fail_here(v, u, r, s,
				 "written at t_ns %" PRIu64 ", before the block "
				 "ended (%" PRIu64 ")",
				 r->t_ns, end);
	/* The block's submission time by the run's clock: under the cpu
	 * clock its CPU time over the reference cores, which it must state. */
	int has_cpu = !!(s->has_u & (1u << 5)), has_wait = !!(s->has_u & (1u << 6));
	uint64_t cpu = s->u[5], wait = s->u[6];
	if (v->clock == APF_CLOCK_CPU && !has_cpu)
		return fail_here(v, u, r, s,
				 "has no cpu_ns, and the run's clock is cpu");
	uint64_t block = apf_clock_block_ns(v->clock, end - start, cpu);
	uint64_t sub;
	if (__builtin_add_overflow(u->sub, block, &sub) || acc != sub)
		return fail_here(v, u, r, s,
				 "accumulated_submission_ns %" PRIu64 " differs "
				 "from the sum of the step blocks %" PRIu64
				 " (%s clock)",
				 acc, sub, apf_clock_name(v->clock));
	v->rep->blocks++;
	if (has_wait && apf_clock_short(end - start, wait, (long)v->threads))
		v->rep->short_blocks++;
	/* Logging time is the gap from an eval's end to the next block; the
	 * set-up of a supervisor (before its first block) is no one's. */
	if (u->ref_kind == REF_EVAL &&
	    __builtin_add_overflow(u->log, start - u->ref_ns, &u->log))
		return fail_here(v, u, r, s, "logging time overflows");
	/* The eval that follows is due only when the period has passed
	 * since the last eval (or since a resumed supervisor's clock_start);
	 * whether an early one was the trial's last is known later. */
	u->block_early = k > 1 && (v->clock == APF_CLOCK_CPU
					   ? block < u->period_ns
					   : end - u->ref_ns < u->period_ns);
	u->sub = sub;
	u->steps = last;
	u->k = k;
	u->block_start = start;
	u->block_first = first;
	u->block_end = end;
	u->block_last = last;
	u->block_line = r->line_no;
	u->state = U_BLOCK;
	return 0;
}

static int keep_metrics(struct vx *v, struct vx_unit *u, struct vx_eval *e,
			const struct apf_runlog_record *r,
			const struct vx_slot *s)
{
	const struct apf_jtok *t = r->tok;
	uint32_t obj = s->tok[0];
	e->nm = 0;
	e->mname = calloc(t[obj].size ? t[obj].size : 1, sizeof *e->mname);
	e->mval = calloc(t[obj].size ? t[obj].size : 1, sizeof *e->mval);
	if (!e->mname || !e->mval)
		return apf_error(APF_ENOMEM, v->log_path, "out of memory");
	for (uint32_t k = obj + 1; k < t[obj].next; k = t[k + 1].next) {
		char name[256];
		if (apf_jtok_string(r->line, &t[k], name, sizeof name) ||
		    apf_jtok_double(&e->mval[e->nm], r->line, &t[k + 1]))
			return log_fail(v, r, s, "metrics: a name too long");
		size_t i;
		for (i = 0; i < u->nmnames && strcmp(u->mnames[i], name); i++)
			;
		if (i == u->nmnames) {
			char **nn = realloc(u->mnames,
					    (u->nmnames + 1) * sizeof *nn);
			if (!nn)
				return apf_error(APF_ENOMEM, v->log_path,
						 "out of memory");
			u->mnames = nn;
			if (!(u->mnames[u->nmnames] = apf_strdup(name)))
				return apf_error(APF_ENOMEM, v->log_path,
						 "out of memory");
			u->nmnames++;
		}
		e->mname[e->nm++] = (uint32_t)i;
	}
	return 0;
}

static void eval_free(struct vx_eval *e)
{
	free(e->mname);
	free(e->mval);
	e->mname = NULL;
	e->mval = NULL;
}

static int eval(struct vx *v, struct vx_unit *u,
		const struct apf_runlog_record *r, const struct vx_slot *s)
{
	if (u->state != U_BLOCK)
		return fail_here(v, u, r, s, "an eval %s", state_name(u->state));
	uint64_t index = s->u[0], step = s->u[1], start = s->u[2],
		 end = s->u[3], acc_sub = s->u[4], acc_ev = s->u[5],
		 acc_log = s->u[6], total = s->u[7], pre = s->u[8],
		 copy = s->u[10];
	int vmet = !!(s->flags & 1), tmet = !!(s->flags & 2);
	if (index != u->k)
		return fail_here(v, u, r, s,
				 "index %" PRIu64 " follows step_block %" PRIu64,
				 index, u->k);
	if (step != u->block_last)
		return fail_here(v, u, r, s,
				 "global_step %" PRIu64 " is not its step "
				 "block's last step %" PRIu64,
				 step, u->block_last);
	if (start != u->block_end)
		return fail_here(v, u, r, s,
				 "start_ns %" PRIu64 " is not its step block's "
				 "end_ns %" PRIu64 " (the trial is frozen for "
				 "the eval)",
				 start, u->block_end);
	if (end < start)
		return fail_here(v, u, r, s,
				 "end_ns %" PRIu64 " is before start_ns %" PRIu64,
				 end, start);
	if (r->t_ns < end)
		return fail_here(v, u, r, s,
				 "written at t_ns %" PRIu64 ", before the eval "
				 "ended (%" PRIu64 ")",
				 r->t_ns, end);
	/* The copy is the submission's: it happened inside the step block,
	 * which ends when the trial is frozen. */
	if (copy > u->block_end - u->block_start)
		return fail_here(v, u, r, s,
				 "copy_ns %" PRIu64 " is longer than its step "
				 "block (%" PRIu64 " ns): the copy is submission "
				 "time, inside the block",
				 copy, u->block_end - u->block_start);
	uint64_t ev, sum;
	if (__builtin_add_overflow(u->ev, end - start, &ev) || acc_ev != ev)
		return fail_here(v, u, r, s,
				 "accumulated_eval_ns %" PRIu64 " differs from "
				 "the sum of the evals %" PRIu64,
				 acc_ev, ev);
	if (acc_sub != u->sub)
		return fail_here(v, u, r, s,
				 "accumulated_submission_ns %" PRIu64 " differs "
				 "from the sum of its step blocks %" PRIu64,
				 acc_sub, u->sub);
	if (acc_log != u->log)
		return fail_here(v, u, r, s,
				 "accumulated_logging_ns %" PRIu64 " differs "
				 "from the sum of the gaps between evals and "
				 "step blocks %" PRIu64,
				 acc_log, u->log);
	if (__builtin_add_overflow(u->sub, ev, &sum) ||
	    __builtin_add_overflow(sum, u->log, &sum) || total != sum)
		return fail_here(v, u, r, s,
				 "total_duration_ns %" PRIu64 " differs from "
				 "submission + eval + logging time %" PRIu64,
				 total, sum);
	if (pre != u->pre)
		return fail_here(v, u, r, s,
				 "preemption_count %" PRIu64 ", but the unit "
				 "was resumed %" PRIu64 " times",
				 pre, u->pre);
	/* Where evals fall is the cadence's: only the submission's own word
	 * (complete) or max_steps makes one before its period, and either
	 * ends the trial there. A preemption never does. */
	if (u->block_early && s->sval == WHY_DUE)
		return fail_here(v, u, r, s,
				 "came before the eval period had passed since "
				 "the last eval, yet was asked for as due (only "
				 "the submission's complete and max_steps come "
				 "early)");
	/* Asked for after a step of its own block, before the one reported. */
	if (s->u[11] && (s->u[11] + 1 < u->block_first || s->u[11] >= step))
		return fail_here(v, u, r, s,
				 "asked_after_step %" PRIu64 " is not a step of "
				 "its block before the reported step %" PRIu64,
				 s->u[11], step);
	if (s->sval == WHY_MAX_STEPS && (!u->max_steps || step != u->max_steps))
		return fail_here(v, u, r, s,
				 "why max_steps at step %" PRIu64 " of max_steps "
				 "%" PRIu64,
				 step, u->max_steps);
	if (!s->has_vm || !s->has_tm)
		return fail_here(v, u, r, s, "metrics lack %s",
				 s->has_vm ? u->tkey : u->vkey);
	int vm = s->vm_meets, tm = s->tm_meets;
	if (vm != vmet || tm != tmet) {
		int val = vm != vmet;
		double x = 0;
		apf_jtok_double(&x, r->line, &r->tok[val ? s->vm_tok : s->tm_tok]);
		return fail_here(v, u, r, s,
				 "%s_target_met is %s, but %s %.9g %s the "
				 "target %.9g",
				 val ? "validation" : "test",
				 (val ? vmet : tmet) ? "true" : "false",
				 val ? u->vkey : u->tkey, x,
				 (val ? vm : tm) ? "meets" : "does not meet",
				 val ? u->vtarget : u->ttarget);
	}
	if (vm && u->ttt == VX_NONE)
		u->ttt = u->sub;
	if (u->nevals == u->cap) {
		size_t cap = u->cap ? 2 * u->cap : 16;
		struct vx_eval *ne = realloc(u->evals, cap * sizeof *ne);
		if (!ne)
			return apf_error(APF_ENOMEM, v->log_path, "out of memory");
		u->evals = ne;
		u->cap = cap;
	}
	struct vx_eval *e = &u->evals[u->nevals];
	memset(e, 0, sizeof *e);
	e->line = r->line_no;
	e->index = index;
	e->global_step = step;
	e->sub = u->sub;
	e->ev = ev;
	e->log = u->log;
	e->preempt = pre;
	e->ttt = u->ttt;
	memcpy(e->sha, s->sha, 32);
	e->bytes = s->u[9];
	e->why = s->sval;
	e->asked_after = s->u[11];
	e->stop = (uint8_t)((u->sub >= u->budget_ns ? STOP_BUDGET : 0) |
			    (vm && tm ? STOP_TARGETS : 0) |
			    (u->max_steps && step == u->max_steps ? STOP_MAX_STEPS
								 : 0) |
			    (e->why == WHY_COMPLETE ? STOP_COMPLETE : 0));
	e->file_ok = !!(s->flags & FLAG_CKPT_NAMED);
	if (!v->o->log_only) {
		int rc = keep_metrics(v, u, e, r, s);
		if (rc) {
			eval_free(e);
			return rc;
		}
	}
	u->nevals++;
	u->ev = ev;
	u->ref_ns = end;
	u->ref_kind = REF_EVAL;
	if (u->block_early) {
		u->early_eval = index;
		u->early_line = r->line_no;
	}
	u->state = U_EVAL;
	return 0;
}

static int sandbox_fault(struct vx *v, struct vx_unit *u,
			 const struct apf_runlog_record *r,
			 const struct vx_slot *s)
{
	if (u->state == U_NONE || u->state == U_FAULT || u->state == U_ENDED)
		return fail_here(v, u, r, s, "a sandbox_fault %s",
				 state_name(u->state));
	if (went_on(v, u))
		return 0;
	u->state = U_FAULT;
	return 0;
}

static int trial_end(struct vx *v, struct vx_unit *u,
		     const struct apf_runlog_record *r,
		     const struct vx_slot *s)
{
	int reason = s->sval, failed = !!(s->flags & 1);
	uint64_t step = s->u[0], evals = s->u[1], acc = s->u[2], ttt = s->u[3];
	int ttt_null = !!(s->flags & FLAG_NULL);
	if (u->state == U_NONE || u->state == U_ENDED)
		return fail_here(v, u, r, s, "a trial_end %s",
				 state_name(u->state));
	const struct vx_eval *last = u->nevals ? &u->evals[u->nevals - 1] : NULL;
	int after_eval = last && last->index == u->k &&
			 (u->state == U_EVAL || u->state == U_RESUMED);
	if (reason == R_FAULT || reason == R_ERROR) {
		if (!failed)
			return fail_here(v, u, r, s,
					 "reason %s, but failed is false",
					 apf_rundir_reasons[reason]);
		if (reason == R_FAULT && u->state != U_FAULT)
			return fail_here(v, u, r, s,
					 "reason fault without a sandbox_fault");
		if (reason == R_ERROR && went_on(v, u))
			return 0;
	} else {
		if (failed)
			return fail_here(v, u, r, s,
					 "reason %s, but failed is true",
					 apf_rundir_reasons[reason]);
		if (!after_eval)
			return fail_here(v, u, r, s,
					 "reason %s must follow the trial's "
					 "final eval, not come %s",
					 apf_rundir_reasons[reason], state_name(u->state));
		static const int need[] = {STOP_BUDGET, STOP_TARGETS,
					   STOP_COMPLETE, STOP_MAX_STEPS};
		if (last->stop && !(last->stop & need[reason]))
			return fail_here(v, u, r, s,
					 "reason %s, but eval %" PRIu64
					 " met %s",
					 apf_rundir_reasons[reason], last->index,
					 stop_words(last->stop));
		if (!last->stop && reason == R_BUDGET)
			return fail_here(v, u, r, s,
					 "reason budget, but eval %" PRIu64
					 " had used %.9f s of the %.9f s "
					 "budget",
					 last->index, secs(last->sub),
					 secs(u->budget_ns));
		if (!last->stop && reason == R_TARGETS)
			return fail_here(v, u, r, s,
					 "reason targets, but eval %" PRIu64
					 " did not meet both",
					 last->index);
		if (!last->stop && reason == R_MAX_STEPS)
			return fail_here(v, u, r, s,
					 "reason max_steps, but eval %" PRIu64
					 " is at step %" PRIu64 " of %" PRIu64,
					 last->index, last->global_step,
					 u->max_steps);
		/* The final eval may come before its period. */
		u->early_eval = 0;
	}
	if (evals != u->nevals)
		return fail_here(v, u, r, s,
				 "evals %" PRIu64 ", but the trial has %zu",
				 evals, u->nevals);
	if (step != u->steps)
		return fail_here(v, u, r, s,
				 "global_step %" PRIu64 ", but the last step "
				 "block ended at step %" PRIu64,
				 step, u->steps);
	if (acc != u->sub)
		return fail_here(v, u, r, s,
				 "accumulated_submission_ns %" PRIu64 " differs "
				 "from the sum of the step blocks %" PRIu64,
				 acc, u->sub);
	if (ttt_null != (u->ttt == VX_NONE) || (!ttt_null && ttt != u->ttt)) {
		char want[32] = "null", got[32] = "null";
		if (u->ttt != VX_NONE)
			snprintf(want, sizeof want, "%" PRIu64, u->ttt);
		if (!ttt_null)
			snprintf(got, sizeof got, "%" PRIu64, ttt);
		return fail_here(v, u, r, s,
				 "time_to_target_ns %s, but the first eval "
				 "meeting the validation target says %s",
				 got, want);
	}
	u->state = U_ENDED;
	u->reason = reason;
	u->failed = failed;
	return 0;
}

/* preempt: a SIGTERM or SIGUSR1 (a scheduler's warning) asked the unit to
 * stop; the supervisor stopped the trial where it was, making no eval, and
 * logged which eval the unit goes on from (its last one; 0 before the
 * first), in a resume of a later session. What the trial did since that
 * eval was never logged and counts for nothing. */
static int preempt(struct vx *v, struct vx_unit *u,
		   const struct apf_runlog_record *r, const struct vx_slot *s)
{
	const struct vx_eval *last = u->nevals ? &u->evals[u->nevals - 1] : NULL;
	if (u->state != U_EVAL && u->state != U_READY)
		return fail_here(v, u, r, s, "a preempt %s",
				 state_name(u->state));
	if (s->u[0] != u->k)
		return fail_here(v, u, r, s,
				 "after_eval %" PRIu64 ", but the unit's last "
				 "eval is %" PRIu64,
				 s->u[0], u->k);
	if (u->state == U_EVAL && last && last->stop)
		return fail_here(v, u, r, s,
				 "eval %" PRIu64 " met %s, so the trial had "
				 "to end there, not be preempted",
				 last->index, stop_words(last->stop));
	u->state = U_PREEMPTED;
	return 0;
}

static int resume(struct vx *v, const struct apf_runlog_record *r,
		  const struct vx_slot *s)
{
	uint64_t j = s->u[1], pre = s->u[2];
	v->rep->resumes++;
	if (s->unit == -2) {
		char name[200];
		if (apf_jtok_string(r->line, &r->tok[s->unit_tok], name,
				    sizeof name))
			snprintf(name, sizeof name, "...");
		return log_fail(v, r, s, "unit %s is not one of run.json's "
					 "units",
				name);
	}
	if (s->unit < 0) {
		if (j != 0)
			return log_fail(v, r, s,
					"from_eval %" PRIu64 " without a unit",
					j);
		return 0;
	}
	struct vx_unit *u = &v->units[s->unit];
	if (v->per_unit && s->unit != v->cur_unit)
		return log_fail(v, r, s,
				"a resume of %s in the log of %s: a unit's log "
				"holds its own records only",
				u->name, v->units[v->cur_unit].name);
	if (!u->ever_started || u->state == U_ENDED) {
		if (u->fail)
			return 0;
		return fail_here(v, u, r, s, "a resume of a unit %s",
				 u->ever_started ? "that had ended"
						 : "that never started");
	}
	if (u->session == v->session && !u->fail)
		return fail_here(v, u, r, s,
				 "a resume in the session the unit ran in "
				 "(a resume follows a new run_start)");
	/* A preempted unit goes on from the eval its preemption named: a
	 * resume from an earlier one would unlog evals the unit made. */
	if (u->state == U_PREEMPTED && j != u->k && !u->fail)
		return fail_here(v, u, r, s,
				 "from_eval %" PRIu64 ", but the unit was "
				 "preempted after eval %" PRIu64,
				 j, u->k);
	u->session = v->session;
	if (j > u->nevals) {
		if (u->fail)
			return 0;
		return fail_here(v, u, r, s,
				 "from_eval %" PRIu64 ", but the unit has "
				 "%zu evals",
				 j, u->nevals);
	}
	/* Records after eval j were lost with the crashed supervisor:
	 * failures there no longer count. */
	uint64_t keep_line = j ? u->evals[j - 1].line : u->start_line;
	if (u->fail && u->fail_line > keep_line)
		apf_vx_unit_clear(u);
	if (u->fail)
		return 0;
	if (pre != u->pre + 1)
		return fail_here(v, u, r, s,
				 "preemption_count %" PRIu64 " after %" PRIu64
				 " earlier resumes",
				 pre, u->pre);
	/* An early eval that is kept must still turn out to be the last:
	 * the next record decides. */
	if (u->early_eval > j)
		u->early_eval = 0;
	for (size_t i = j; i < u->nevals; i++)
		eval_free(&u->evals[i]);
	u->nevals = j;
	u->pre = pre;
	u->seg_t = r->t_ns;
	u->block_early = 0;
	if (j == 0) {
		/* From scratch: a new trial_start, build and clock_start. */
		u->k = u->steps = u->sub = u->ev = u->log = 0;
		u->ttt = VX_NONE;
		u->state = U_NONE;
		return 0;
	}
	/* From eval j's checkpoint: a new build and clock_start, unless
	 * eval j had already ended the trial. */
	const struct vx_eval *e = &u->evals[j - 1];
	u->k = e->index;
	u->steps = e->global_step;
	u->sub = e->sub;
	u->ev = e->ev;
	u->log = e->log;
	u->ttt = e->ttt;
	u->state = U_RESUMED;
	return 0;
}

/* run_start: every session binds to run.json, the entry and its manifest;
 * the first one is the session run.json was written for. */
static int run_start(struct vx *v, const struct apf_runlog_record *r,
		     const struct vx_slot *s)
{
	const char *entry_sha = json_string_value(json_object_get(
		json_object_get(v->run_json, "entry"), "sha256"));
	if (!tok_is(r, s->tok[0], v->run_json_sha))
		return log_fail(v, r, s,
				"run_json_sha256 is not the SHA-256 of "
				"run.json (%.16s...): run.json was changed",
				v->run_json_sha);
	if (!tok_is(r, s->tok[1], entry_sha))
		return log_fail(v, r, s,
				"entry_sha256 differs from run.json's entry");
	if (!tok_is(r, s->tok[2], v->entry->manifest_digest))
		return log_fail(v, r, s,
				"manifest_sha256 is not the entry's manifest "
				"digest %.16s...",
				v->entry->manifest_digest);
	if (strcmp(apf_rundir_devices[s->sval], v->device))
		return log_fail(v, r, s, "device %s, run.json says %s",
				apf_rundir_devices[s->sval], v->device);
	int sealed = s->flags & 1;
	if (r->line_no == 1 && sealed != v->sealed)
		return log_fail(v, r, s, "sealed is %s, run.json says %s",
				sealed ? "true" : "false",
				v->sealed ? "true" : "false");
	if (r->line_no == 1 && s->u[0] != v->threads)
		return log_fail(v, r, s,
				"threads %" PRIu64 ", run.json says %" PRIu64,
				s->u[0], v->threads);
	v->session++;
	v->session_open = 1;
	v->session_sealed = sealed;
	v->session_unsealed_seen = 0;
	v->session_line = r->line_no;
	v->session_completed = v->session_failed = 0;
	if (!sealed)
		v->rep->sealed = 0;
	return 0;
}

/* An unsealed session says why before it ends. */
static int session_unsealed_check(struct vx *v)
{
	if (v->session && !v->session_sealed && !v->session_unsealed_seen)
		return apf_error(APF_EVERIFY, apf_vx_label(v, APF_VERIFY_LOG),
				 "%s: line %" PRIu64 " (run_start): an unsealed "
				 "session, but no unsealed record says why",
				 v->log_path, v->session_line);
	return 0;
}

int apf_vx_session_check(struct vx *v)
{
	return session_unsealed_check(v);
}

static int run_end(struct vx *v, const struct apf_runlog_record *r,
		   const struct vx_slot *s)
{
	int rc = session_unsealed_check(v);
	if (rc)
		return rc;
	v->session_open = 0;
	if (s->u[1] != v->session_completed || s->u[2] != v->session_failed ||
	    s->u[0] < s->u[1] + s->u[2])
		return log_fail(v, r, s,
				"units %" PRIu64 ", completed %" PRIu64
				", failed %" PRIu64 ", but the session that "
				"began at line %" PRIu64 " ended %" PRIu64
				" trials and failed %" PRIu64,
				s->u[0], s->u[1], s->u[2], v->session_line,
				v->session_completed, v->session_failed);
	return 0;
}

int apf_vx_record(void *user, const struct apf_runlog_record *r)
{
	struct vx *v = user;
	const struct vx_slot *s = r->slot;
	v->records++;
	v->bytes_seen += r->len + 1;
	memcpy(v->last_hash, r->hash, 65);
	if (r->line_no == v->head_records)
		memcpy(v->signed_hash, r->hash, 65);
	if (r->line_no == v->index_records)
		memcpy(v->index_hash, r->hash, 65);
	v->last_ev = s->ev;
	if (v->o->progress && v->records - v->progress_at >= 65536) {
		v->progress_at = v->records;
		v->o->progress(v->o->user, v->records, v->bytes_seen,
			       v->rep->log_bytes);
	}
	if (s->bad)
		return log_fail(v, r, s, "%s", s->why);
	if (r->line_no == 1 && s->ev != APF_EV_RUN_START)
		return log_fail(v, r, s, "the log must begin with run_start");
	if (s->ev == APF_EV_RUN_START) {
		/* A session that was stopped without run_end may be followed
		 * by the next. */
		int rc = session_unsealed_check(v);
		return rc ? rc : run_start(v, r, s);
	}
	if (!v->session_open)
		return log_fail(v, r, s,
				"after run_end, only a new run_start may "
				"follow");
	switch (s->ev) {
	case APF_EV_ENV_DRIFT:
		v->rep->env_drifts++;
		return 0;
	case APF_EV_UNSEALED:
		if (v->session_sealed)
			return log_fail(v, r, s,
					"an unsealed record in a session whose "
					"run_start (line %" PRIu64 ") says it "
					"is sealed",
					v->session_line);
		v->session_unsealed_seen = 1;
		return 0;
	case APF_EV_RESUME:
		return resume(v, r, s);
	case APF_EV_RUN_END:
		return run_end(v, r, s);
	default:
		break;
	}
	if (s->unit < 0) {
		char name[200];
		if (apf_jtok_string(r->line, &r->tok[s->unit_tok], name,
				    sizeof name))
			snprintf(name, sizeof name, "...");
		return log_fail(v, r, s, "unit %s is not one of run.json's "
					 "units",
				name);
	}
	struct vx_unit *u = &v->units[s->unit];
	if (v->per_unit && s->unit != v->cur_unit)
		return log_fail(v, r, s,
				"a record of %s in the log of %s: a unit's log "
				"holds its own records only",
				u->name, v->units[v->cur_unit].name);
	if (s->ev == APF_EV_TRIAL_END) {
		/* run_end counts the session's trial_end records. */
		if (s->flags & 1)
			v->session_failed++;
		else
			v->session_completed++;
	}
	if (s->ev == APF_EV_TRIAL_START && u->state == U_NONE && !u->fail &&
	    (!u->ever_started || u->session == v->session)) {
		u->session = v->session;
		return trial_start(v, u, r, s);
	}
	if (u->fail)
		return 0; /* its checks stopped at its first failure */
	if (u->ever_started && u->state != U_ENDED && u->session != v->session)
		return fail_here(v, u, r, s,
				 "the unit was interrupted in an earlier "
				 "session and goes on without a resume");
	if (u->state == U_PREEMPTED)
		return fail_here(v, u, r, s,
				 "a %s after the unit's preemption, in the "
				 "same session",
				 apf_vx_event_name(s->ev));
	if (r->t_ns < u->seg_t)
		return fail_here(v, u, r, s,
				 "t_ns %" PRIu64 " is before the unit's "
				 "previous record (%" PRIu64 ") on the same "
				 "supervisor clock",
				 r->t_ns, u->seg_t);
	u->seg_t = r->t_ns;
	switch (s->ev) {
	case APF_EV_TRIAL_START:
		return trial_start(v, u, r, s);
	case APF_EV_BUILD:
		if (u->state != U_STARTED && u->state != U_RESUMED)
			return fail_here(v, u, r, s, "a build %s",
					 state_name(u->state));
		/* A resumed supervisor builds only to go on training. */
		if (u->state == U_RESUMED && went_on(v, u))
			return 0;
		u->state = U_BUILT;
		return 0;
	case APF_EV_CLOCK_START:
		if (u->state != U_BUILT)
			return fail_here(v, u, r, s, "a clock_start %s",
					 state_name(u->state));
		/* The submission's untimed code ran within its allowance, and a
		 * trial from scratch names the state its init left (checkpoint
		 * 0, checked against the workload's initialisation by
		 * --reeval and replayed from by --replay). */
		if (s->u[2] > u->init_allowance)
			return fail_here(v, u, r, s,
					 "submission_init_ns %" PRIu64 " is over "
					 "the allowance of %" PRIu64,
					 s->u[2], u->init_allowance);
		if (u->from_scratch != !!(s->flags & FLAG_CKPT0))
			return fail_here(v, u, r, s,
					 u->from_scratch
						 ? "a trial from scratch without "
						   "its initial checkpoint"
						 : "an initial checkpoint on a "
						   "resumed trial");
		if (s->flags & FLAG_CKPT0) {
			/* Check 4 hashes checkpoint 0 with the evals' ones. */
			u->init = (struct vx_eval){.line = r->line_no,
						   .bytes = s->u[9],
						   .file_ok = 1};
			memcpy(u->init.sha, s->sha, sizeof u->init.sha);
			u->has_init = 1;
		}
		u->from_scratch = 0;
		/* The most examples a step can claim (pkg/refcurve). */
		if (s->u[1] > u->batch_size)
			u->batch_size = s->u[1];
		u->state = U_READY;
		u->ref_ns = r->t_ns;
		u->ref_kind = REF_CLOCK;
		return 0;
	case APF_EV_STEP_BLOCK:
		return step_block(v, u, r, s);
	case APF_EV_EVAL:
		return eval(v, u, r, s);
	case APF_EV_SANDBOX_FAULT:
		return sandbox_fault(v, u, r, s);
	case APF_EV_WARNING:
		/* Advice from the trial, logged while it lived: between the
		 * build and its end. */
		if (u->state == U_NONE || u->state == U_STARTED ||
		    u->state == U_FAULT || u->state == U_ENDED)
			return fail_here(v, u, r, s, "a warning %s",
					 state_name(u->state));
		return 0;
	case APF_EV_TRIAL_END:
		return trial_end(v, u, r, s);
	case APF_EV_PREEMPT:
		return preempt(v, u, r, s);
	}
	return apf_error(APF_EINTERNAL, v->log_path, "unhandled event");
}

/* ---- after the walk ------------------------------------------------------- */

int apf_vx_walk_end(struct vx *v)
{
	apf_verify_report *rep = v->rep;
	size_t unended = 0;
	const char *first_unended = NULL;
	for (size_t i = 0; i < v->nunits; i++) {
		struct vx_unit *u = &v->units[i];
		rep->evals += u->nevals;
		if (u->state == U_ENDED) {
			rep->units_ended++;
			rep->units_failed += u->failed;
		} else if (u->ever_started) {
			if (!unended++)
				first_unended = u->name;
		}
		if (u->nevals)
			rep->claimed_ns += u->evals[u->nevals - 1].sub +
					   u->evals[u->nevals - 1].ev +
					   u->evals[u->nevals - 1].log;
	}
	int rc = v->session_open ? session_unsealed_check(v) : 0;
	if (rc)
		return rc;
	/* Finished: the last session ended with run_end (of every unit's log,
	 * in the per-unit layout, and at least one unit ran), and no unit was
	 * left interrupted by an earlier one. */
	if (v->per_unit)
		rep->complete = !v->open_logs && rep->records && !unended;
	else
		rep->complete = v->last_ev == APF_EV_RUN_END && !unended;
	if (v->per_unit && !rep->records)
		snprintf(v->incomplete, sizeof v->incomplete,
			 "no unit has run yet");
	else if (v->per_unit && v->open_logs)
		snprintf(v->incomplete, sizeof v->incomplete,
			 "the log of %s ends without run_end%s", v->first_open,
			 v->open_logs > 1 ? " (and more units')" : "");
	else if (v->last_ev != APF_EV_RUN_END)
		snprintf(v->incomplete, sizeof v->incomplete,
			 "the log ends at line %" PRIu64 " without run_end",
			 v->records);
	else if (unended)
		snprintf(v->incomplete, sizeof v->incomplete,
			 "%s was interrupted and not resumed%s",
			 first_unended,
			 unended > 1 ? " (and more units)" : "");
	return 0;
}

int apf_vx_timing_result(struct vx *v)
{
	const struct vx_unit *first = NULL;
	for (size_t i = 0; i < v->nunits; i++)
		if (v->units[i].fail &&
		    (!first || v->units[i].fail_line < first->fail_line))
			first = &v->units[i];
	if (!first)
		return 0;
	return apf_error(APF_EVERIFY, apf_vx_label(v, APF_VERIFY_TIMING), "%s",
			 first->fail);
}

void apf_vx_unit_free(struct vx_unit *u)
{
	for (size_t i = 0; i < u->nevals; i++)
		eval_free(&u->evals[i]);
	free(u->evals);
	for (size_t i = 0; i < u->nmnames; i++)
		free(u->mnames[i]);
	free(u->mnames);
	json_decref(u->hparams);
	free(u->fail);
	free(u->log_path);
	free(u->name);
	free(u->workload);
	free(u->variant);
	free(u->dir_name);
	free(u->vkey);
	free(u->tkey);
	memset(u, 0, sizeof *u);
}
