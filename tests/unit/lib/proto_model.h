/*
 * proto_model.h: the supervisor's side of the trial protocol, as a model
 * that feeds a stream of lines to struct apf_proto (pkg/wire/wire.c) and
 * makes the supervisor's moves after each accepted message, checking the
 * invariants a hostile trial must not break:
 *
 *   - an accepted eval report's step is after the last accepted one and
 *     never past max_steps;
 *   - "due" is accepted only when the supervisor asked, at or after the
 *     step it asked for; "max_steps" only at max_steps;
 *   - every accepted eval report is followed by "copied" before anything
 *     but an error or a warning, and "copied" comes only then;
 *   - nothing but an error line is accepted while it is the supervisor's
 *     turn, and a refused line always leaves a message naming it.
 *
 * The unit test drives it with seeded random streams, the fuzz target with
 * libFuzzer's; a broken invariant aborts.
 */
#ifndef APF_PROTO_MODEL_H
#define APF_PROTO_MODEL_H

#include <stdlib.h>
#include <string.h>

#include "wire/wire.h"

struct proto_model {
	struct apf_proto p;
	uint64_t rng;      /* the supervisor's choices */
	size_t accepted, refused, evals;
};

static uint64_t proto_model_next(struct proto_model *m)
{
	m->rng ^= m->rng << 13;
	m->rng ^= m->rng >> 7;
	m->rng ^= m->rng << 17;
	return m->rng;
}

static void proto_model_init(struct proto_model *m, uint64_t seed,
			     int64_t start_step, int64_t max_steps)
{
	memset(m, 0, sizeof *m);
	m->p = (struct apf_proto){APF_PROTO_SETUP, start_step, max_steps, 0, 0};
	m->rng = seed | 1;
}

/* Feeds one line; returns 0 when accepted, 1 when refused. */
static int proto_model_feed(struct proto_model *m, const char *line)
{
	struct apf_proto before = m->p;
	struct apf_proto_msg msg;
	if (apf_proto_accept(&m->p, line, &msg)) {
		const char *why = apf_error_message();
		if (!why || !strstr(why, "from the trial"))
			abort();
		if (memcmp(&before, &m->p, sizeof before))
			abort(); /* a refused line changes nothing */
		m->refused++;
		return 1;
	}
	m->accepted++;
	switch (msg.kind) {
	case APF_PROTO_ERROR:
		if (memcmp(&before, &m->p, sizeof before) || !msg.text)
			abort();
		break;
	case APF_PROTO_WARN:
		/* Only the count moves, and only up to the bound. */
		if (before.phase != m->p.phase || before.step != m->p.step ||
		    before.eval_at != m->p.eval_at ||
		    m->p.warnings != before.warnings + 1 ||
		    m->p.warnings > APF_PROTO_MAX_WARN || !msg.text || !*msg.text)
			abort();
		for (const char *c = msg.text; *c; c++)
			if ((unsigned char)*c < 0x20 || (unsigned char)*c >= 0x7f)
				abort();
		break;
	case APF_PROTO_LOCK:
		if (before.phase != APF_PROTO_SETUP)
			abort();
		apf_proto_locked(&m->p);
		break;
	case APF_PROTO_READY:
		if (before.phase != APF_PROTO_LOCKED || msg.step != before.step ||
		    msg.batch < 1)
			abort();
		apf_proto_go(&m->p, proto_model_next(m) % 2 ? before.step + 1 : 0);
		break;
	case APF_PROTO_EVAL:
		if (before.phase != APF_PROTO_RUNNING || msg.step <= before.step ||
		    (before.max_steps && msg.step > before.max_steps) ||
		    (msg.why == APF_WHY_DUE &&
		     (!before.eval_at || msg.step < before.eval_at)) ||
		    (msg.why == APF_WHY_MAX_STEPS && msg.step != before.max_steps))
			abort();
		if (m->p.phase != APF_PROTO_COPYING || m->p.step != msg.step)
			abort();
		m->evals++;
		break;
	case APF_PROTO_COPIED:
		if (before.phase != APF_PROTO_COPYING || msg.step != before.step ||
		    m->p.phase != APF_PROTO_WAIT)
			abort();
		/* The supervisor evaluates and lets it go on, asking for the
		 * next eval now or later. */
		apf_proto_go(&m->p, 0);
		if (proto_model_next(m) % 2)
			apf_proto_request(&m->p, m->p.step + 1 +
						     (int64_t)(proto_model_next(m) % 3));
		break;
	}
	return 0;
}

#endif
