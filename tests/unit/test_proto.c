/*
 * test_proto.c: what the supervisor accepts from a trial (struct apf_proto in
 * pkg/wire): the honest sequence, each forged or malformed line refused
 * with a message naming it, and seeded random hostile streams that never
 * get an unrequested eval, a step backwards or past max_steps accepted
 * (the invariants live in lib/proto_model.h, shared with fuzz_proto).
 */
#include "testlib.h"

#include <stdio.h>
#include <string.h>

#include "proto_model.h"

static void refused(struct apf_proto *p, const char *line, const char *why)
{
	struct apf_proto_msg m;
	struct apf_proto before = *p;
	if (apf_proto_accept(p, line, &m) != APF_EVERIFY)
		fail_msg("accepted '%s'", line);
	if (!strstr(apf_error_message(), why))
		fail_msg("'%s': %s (wanted '%s')", line, apf_error_message(), why);
	assert_memory_equal(&before, p, sizeof before);
}

static void accepted(struct apf_proto *p, const char *line, struct apf_proto_msg *m)
{
	if (apf_proto_accept(p, line, m))
		fail_msg("refused '%s': %s", line, apf_error_message());
}

static void honest_sequence_is_accepted(void **state)
{
	(void)state;
	struct apf_proto p = {APF_PROTO_SETUP, 0, 100, 0, 0};
	struct apf_proto_msg m;
	accepted(&p, "lock", &m);
	assert_int_equal(m.kind, APF_PROTO_LOCK);
	apf_proto_locked(&p);
	accepted(&p, "ready 0 64", &m);
	assert_int_equal(m.kind, APF_PROTO_READY);
	assert_int_equal(m.batch, 64);
	apf_proto_go(&p, 1);
	accepted(&p, "eval 1 due", &m);
	assert_int_equal(m.kind, APF_PROTO_EVAL);
	assert_int_equal(m.step, 1);
	assert_int_equal(p.phase, APF_PROTO_COPYING);
	accepted(&p, "copied", &m);
	assert_int_equal(m.kind, APF_PROTO_COPIED);
	assert_int_equal(m.step, 1);
	assert_int_equal(p.phase, APF_PROTO_WAIT);
	apf_proto_go(&p, 0);
	apf_proto_request(&p, 2);
	accepted(&p, "eval 57 due", &m);
	accepted(&p, "copied", &m);
	apf_proto_go(&p, 0);
	accepted(&p, "eval 60 complete", &m);
	assert_int_equal(m.why, APF_WHY_COMPLETE);
	accepted(&p, "copied", &m);
	apf_proto_go(&p, 0);
	accepted(&p, "eval 100 max_steps", &m);
	assert_int_equal(m.why, APF_WHY_MAX_STEPS);
	accepted(&p, "copied", &m);
	accepted(&p, "error update_params returned -7 at step 100", &m);
	assert_int_equal(m.kind, APF_PROTO_ERROR);
	assert_string_equal(m.text, "update_params returned -7 at step 100");
}

static void unrequested_eval_is_refused_naming_the_line(void **state)
{
	(void)state;
	struct apf_proto p = {APF_PROTO_RUNNING, 10, 0, 0, 0};
	refused(&p, "eval 11 due", "'eval 11 due' from the trial: an eval the "
				   "supervisor did not ask for");
	apf_proto_request(&p, 15);
	refused(&p, "eval 14 due", "did not ask for");
	struct apf_proto_msg m;
	accepted(&p, "eval 15 due", &m);
	/* Answered once: a second report before the copy, or after it
	 * before the next go, is refused. */
	refused(&p, "eval 16 due", "expected copied");
	accepted(&p, "copied", &m);
	refused(&p, "eval 16 due", "the supervisor has not answered yet");
}

/* "copied" only right after an eval report, once, and only the bare word;
 * a warning or an error may come between. */
static void copied_follows_each_eval_report_only(void **state)
{
	(void)state;
	struct apf_proto run = {APF_PROTO_RUNNING, 5, 50, 6, 0};
	refused(&run, "copied", "expected an eval");
	struct apf_proto setup = {APF_PROTO_SETUP, 0, 50, 0, 0};
	refused(&setup, "copied", "expected lock");
	struct apf_proto locked = {APF_PROTO_LOCKED, 0, 50, 0, 0};
	refused(&locked, "copied", "expected ready");
	struct apf_proto_msg m;
	accepted(&run, "eval 6 due", &m);
	refused(&run, "copied 6", "not a message");
	refused(&run, "copied ", "not a message");
	refused(&run, "lock", "expected copied");
	refused(&run, "ready 6 64", "expected copied");
	accepted(&run, "warn the submission reads hyperparameter 'x'", &m);
	assert_int_equal(run.phase, APF_PROTO_COPYING);
	accepted(&run, "copied", &m);
	refused(&run, "copied", "the supervisor has not answered yet");
}

static void malformed_and_out_of_turn_lines_are_refused(void **state)
{
	(void)state;
	struct apf_proto setup = {APF_PROTO_SETUP, 0, 50, 0, 0};
	refused(&setup, "ready 0 64", "expected lock");
	refused(&setup, "eval 1 due", "expected lock");
	refused(&setup, "lock ", "not a message");
	refused(&setup, "LOCK", "not a message");
	refused(&setup, "\033[2Jlock", "\\x1b[2Jlock");
	struct apf_proto locked = {APF_PROTO_LOCKED, 5, 50, 0, 0};
	refused(&locked, "ready 4 64", "another step");
	refused(&locked, "ready 5 0", "batch size");
	refused(&locked, "ready 5 64 1", "malformed ready");
	refused(&locked, "ready 05 64", "malformed ready");
	refused(&locked, "ready -5 64", "malformed ready");
	refused(&locked, "ready 5 0x40", "malformed ready");
	refused(&locked, "ready 5 99999999999999999999", "malformed ready");
	struct apf_proto run = {APF_PROTO_RUNNING, 5, 50, 6, 0};
	refused(&run, "eval 5 due", "not after the last");
	refused(&run, "eval 51 complete", "past max_steps");
	refused(&run, "eval 20 max_steps", "max_steps reported");
	refused(&run, "eval 7 due ", "malformed eval");
	refused(&run, "eval 7 later", "malformed eval");
	refused(&run, "eval +7 due", "malformed eval");
	refused(&run, "eval 7", "malformed eval");
	refused(&run, "lock", "expected an eval");
	char longline[300];
	memset(longline, 'e', sizeof longline - 1);
	longline[sizeof longline - 1] = 0;
	refused(&run, longline, "...");
}

/* A warning is advice: accepted in every phase without moving it, bounded
 * in count, printable ASCII only, and a refused one changes nothing. */
static void warnings_are_accepted_in_any_phase_and_bounded(void **state)
{
	(void)state;
	const enum apf_proto_phase phases[] = {APF_PROTO_SETUP, APF_PROTO_WAIT,
					       APF_PROTO_LOCKED,
					       APF_PROTO_RUNNING,
					       APF_PROTO_COPYING};
	for (size_t i = 0; i < 5; i++) {
		struct apf_proto p = {phases[i], 5, 50, 7, 0};
		struct apf_proto_msg m;
		accepted(&p, "warn the submission reads hyperparameter 'lr'", &m);
		assert_int_equal(m.kind, APF_PROTO_WARN);
		assert_string_equal(m.text,
				    "the submission reads hyperparameter 'lr'");
		assert_int_equal(p.phase, phases[i]);
		assert_int_equal(p.step, 5);
		assert_int_equal(p.eval_at, 7);
		assert_int_equal(p.warnings, 1);
	}
	struct apf_proto p = {APF_PROTO_RUNNING, 5, 50, 0, 0};
	refused(&p, "warn ", "an empty warning");
	refused(&p, "warn \033[2J", "not printable ASCII");
	refused(&p, "warn caf\xc3\xa9", "not printable ASCII");
	struct apf_proto_msg m;
	for (int i = 0; i < APF_PROTO_MAX_WARN; i++)
		accepted(&p, "warn again", &m);
	refused(&p, "warn again", "more warnings than the protocol allows");
	assert_int_equal(p.warnings, APF_PROTO_MAX_WARN);
	/* The stream goes on after the bound is met (the fault ends it in
	 * the host, not here). */
	accepted(&p, "eval 6 complete", &m);
	accepted(&p, "copied", &m);
}

/* Random lines near the grammar: right words, wrong numbers and turns. */
static void random_line(struct proto_model *m, char *out, size_t size)
{
	static const char *const words[] = {"lock", "ready", "eval", "error",
					    "go", "", "locked", "warn", "copied"};
	static const char *const whys[] = {"due", "complete", "max_steps",
					   "dUe", ""};
	uint64_t r = proto_model_next(m);
	const char *w = words[r % 9];
	long long a = (long long)(proto_model_next(m) % 40) - 2;
	long long b = (long long)(proto_model_next(m) % 70) - 2;
	switch (r % 5) {
	case 0:
		snprintf(out, size, "%s", w);
		break;
	case 1:
		snprintf(out, size, "%s %lld %lld", w, a, b);
		break;
	case 2:
		snprintf(out, size, "%s %lld %s", w, a,
			 whys[proto_model_next(m) % 5]);
		break;
	case 3:
		snprintf(out, size, "eval %lld %s", a,
			 whys[proto_model_next(m) % 3]);
		break;
	default:
		snprintf(out, size, "ready %lld %lld", a % 3, b);
		break;
	}
}

static void random_hostile_streams_keep_the_invariants(void **state)
{
	(void)state;
	size_t evals = 0, refusals = 0;
	for (uint64_t seed = 1; seed <= 300; seed++) {
		struct proto_model m;
		proto_model_init(&m, seed * 0x9e3779b97f4a7c15ull, 0,
				 seed % 2 ? 30 : 0);
		char line[128];
		for (int i = 0; i < 400; i++) {
			random_line(&m, line, sizeof line);
			proto_model_feed(&m, line);
		}
		evals += m.evals;
		refusals += m.refused;
	}
	/* The streams reach every phase: evals were accepted and most lines
	 * refused, so the invariants were exercised on both sides. */
	assert_true(evals > 300);
	assert_true(refusals > evals);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(honest_sequence_is_accepted),
		cmocka_unit_test(unrequested_eval_is_refused_naming_the_line),
		cmocka_unit_test(malformed_and_out_of_turn_lines_are_refused),
		cmocka_unit_test(copied_follows_each_eval_report_only),
		cmocka_unit_test(random_hostile_streams_keep_the_invariants),
		cmocka_unit_test(warnings_are_accepted_in_any_phase_and_bounded),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
