/*
 * test_trial.c: the harness against submissions that break the rules -
 * a missing symbol, a wrong ABI version, an error return, a NaN loss, code
 * that does not compile, state allocated after init, vectors outside the
 * arena - each a clear error, never a crash; the arena's checks; and resume:
 * a trial continued from a copy of its arena is bit-identical to one that
 * never stopped.
 */
#include "testlib.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "quad.h"
#include "trial/trial.h"

static void expect_error(int rc, int code, const char *want)
{
	if (rc != code || !strstr(apf_error_message(), want))
		fail_msg("expected %d '%s', got %d: %s", code, want, rc,
			 rc ? apf_error_message() : "success");
}

static void missing_symbol_is_refused_at_load(void **state)
{
	(void)state;
	struct quad_run r;
	assert_apf_ok(quad_build(&r, "tests/data/submissions/no_update"));
	expect_error(quad_start(&r, NULL, NULL), APF_EINPUT,
		     "missing required function update_params");
	quad_finish(&r);
}

static void wrong_abi_is_refused_at_load(void **state)
{
	(void)state;
	struct quad_run r;
	assert_apf_ok(quad_build(&r, "tests/data/submissions/bad_abi"));
	expect_error(quad_start(&r, NULL, NULL), APF_EINPUT,
		     "ABI version 42, this apf implements 1 to 2");
	quad_finish(&r);
}

static void compile_error_names_the_line(void **state)
{
	(void)state;
	struct quad_run r;
	expect_error(quad_build(&r, "tests/data/submissions/no_compile"),
		     APF_EINPUT, "does not compile: submission.c:4");
	assert_non_null(strstr(apf_error_message(), "undeclared_variable"));
	quad_finish(&r);
}

static void run_until_error(const char *sub, int steps, const char *want)
{
	struct quad_run r;
	assert_apf_ok(quad_build(&r, sub));
	assert_apf_ok(quad_start(&r, NULL, NULL));
	int rc = 0, complete;
	for (int i = 0; i < steps && !rc; i++)
		rc = apf_trial_step(r.trial, &complete);
	expect_error(rc, APF_EINPUT, want);
	quad_finish(&r);
}

static void error_return_fails_the_step(void **state)
{
	(void)state;
	run_until_error("tests/data/submissions/returns_error", 10,
			"update_params returned -7 at step 3");
}

static void nan_loss_fails_the_trial(void **state)
{
	(void)state;
	run_until_error("tests/data/submissions/nan_loss", 10,
			"training loss is not finite");
}

static void slots_after_init_are_refused(void **state)
{
	(void)state;
	run_until_error("tests/data/submissions/slot_in_update", 2,
			"slot 'late': state is allocated in "
			"init_optimizer_state only");
}

static void vectors_outside_the_arena_are_refused(void **state)
{
	(void)state;
	run_until_error("tests/data/submissions/wild_vector", 1,
			"fill: a vector outside the parameters");
	/* the second step of a fresh run passes the first check and trips
	 * the length check */
	struct quad_run r;
	assert_apf_ok(quad_build(&r, "tests/data/submissions/wild_vector"));
	assert_apf_ok(quad_start(&r, NULL, NULL));
	apf_trial_arena(r.trial)->global_step = 1;
	int complete;
	expect_error(apf_trial_step(r.trial, &complete), APF_EINPUT,
		     "axpy: vectors of 9 and 8 floats");
	quad_finish(&r);
}

static void resume_from_arena_copy_is_bit_identical(void **state)
{
	(void)state;
	const char *names[] = {"learning_rate", "weight_decay"};
	const double vals[] = {0.03, 0.01};
	apf_hparams hp = quad_hparams(names, vals, 2);
	struct quad_run a, b;
	assert_apf_ok(quad_build(&a, "submissions/baselines/nadamw"));
	assert_apf_ok(quad_start(&a, &hp, NULL));
	int complete;
	for (int i = 0; i < 15; i++)
		assert_apf_ok(apf_trial_step(a.trial, &complete));
	struct apf_arena_header *h = a.arena;
	void *copy = malloc(h->used);
	memcpy(copy, a.arena, h->used);
	assert_apf_ok(apf_arena_check(copy, h->used));
	for (int i = 0; i < 15; i++)
		assert_apf_ok(apf_trial_step(a.trial, &complete));
	/* A second trial resumes from the copy: no re-initialisation. */
	assert_apf_ok(quad_build(&b, "submissions/baselines/nadamw"));
	assert_apf_ok(quad_start(&b, &hp, copy));
	assert_int_equal(apf_trial_global_step(b.trial), 15);
	for (int i = 0; i < 15; i++)
		assert_apf_ok(apf_trial_step(b.trial, &complete));
	assert_int_equal(((struct apf_arena_header *)b.arena)->used, h->used);
	assert_memory_equal(b.arena, a.arena, h->used);
	free(copy);
	quad_finish(&a);
	quad_finish(&b);
	apf_hparams_free(&hp);
}

/* With device memory, the vectors live in a working copy: the shared arena
 * (what the supervisor checkpoints and the evaluator reads) holds the
 * initial state after init, goes stale while training (its header and
 * scalars excepted), and equals the host-memory trial's bit for bit after
 * apf_trial_snapshot; a trial resumed from it uploads it and goes on as
 * the host-memory one does. */
static void device_arena_is_copied_at_snapshots_only(void **state)
{
	(void)state;
	const char *names[] = {"learning_rate", "weight_decay"};
	const double vals[] = {0.03, 0.01};
	apf_hparams hp = quad_hparams(names, vals, 2);
	struct quad_run a, b, c;
	assert_apf_ok(quad_build(&a, "submissions/baselines/nadamw"));
	assert_apf_ok(quad_start(&a, &hp, NULL));
	assert_apf_ok(quad_build(&b, "submissions/baselines/nadamw"));
	assert_apf_ok(quad_start_on(&b, &hp, NULL, 1));
	struct apf_arena_header *ha = a.arena, *hb = b.arena;
	assert_true(hb->nslots > 0);
	assert_int_equal(hb->used, ha->used);
	assert_memory_equal(b.arena, a.arena, ha->used);
	/* The steps train the working copy: b's arena keeps the initial
	 * parameters until the snapshot. */
	const float *p0 = apf_arena_params(b.arena);
	int complete;
	for (int i = 0; i < 15; i++) {
		assert_apf_ok(apf_trial_step(a.trial, &complete));
		assert_apf_ok(apf_trial_step(b.trial, &complete));
	}
	assert_int_equal(hb->global_step, 15);
	assert_memory_not_equal(p0, apf_arena_params(a.arena),
				QUAD_N * sizeof(float));
	assert_apf_ok(apf_trial_snapshot(b.trial));
	assert_memory_equal(b.arena, a.arena, ha->used);
	assert_apf_ok(apf_trial_snapshot(a.trial)); /* nothing to do */
	/* Resumed on "the device" from the shared arena. */
	void *copy = malloc(hb->used);
	memcpy(copy, b.arena, hb->used);
	assert_apf_ok(quad_build(&c, "submissions/baselines/nadamw"));
	assert_apf_ok(quad_start_on(&c, &hp, copy, 1));
	assert_int_equal(apf_trial_global_step(c.trial), 15);
	for (int i = 0; i < 15; i++) {
		assert_apf_ok(apf_trial_step(a.trial, &complete));
		assert_apf_ok(apf_trial_step(c.trial, &complete));
	}
	assert_apf_ok(apf_trial_snapshot(c.trial));
	assert_memory_equal(c.arena, a.arena, ha->used);
	free(copy);
	quad_finish(&a);
	quad_finish(&b);
	quad_finish(&c);
	apf_hparams_free(&hp);
}

static void damaged_arena_headers_are_refused(void **state)
{
	(void)state;
	size_t cap = apf_arena_capacity(10, 2, 2);
	char *m = calloc(1, cap);
	assert_apf_ok(apf_arena_format(m, cap, 10, 2));
	assert_apf_ok(apf_arena_check(m, cap));
	struct apf_arena_header *h = (void *)m;
	h->used = cap + 1;
	assert_int_equal(apf_arena_check(m, cap), APF_EVERIFY);
	h->used = h->slots_offset;
	h->nslots = 1;
	strcpy(h->slots[0].name, "m");
	h->slots[0].kind = APF_SLOT_VECTOR;
	h->slots[0].offset = h->slots_offset;
	h->slots[0].n = 1000000;
	assert_int_equal(apf_arena_check(m, cap), APF_EVERIFY);
	assert_non_null(strstr(apf_error_message(), "slot outside"));
	memcpy(h->magic, "NOTARENA", 8);
	assert_int_equal(apf_arena_check(m, cap), APF_EVERIFY);
	assert_int_equal(apf_arena_check(m, 100), APF_EVERIFY);
	free(m);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(missing_symbol_is_refused_at_load),
		cmocka_unit_test(wrong_abi_is_refused_at_load),
		cmocka_unit_test(compile_error_names_the_line),
		cmocka_unit_test(error_return_fails_the_step),
		cmocka_unit_test(nan_loss_fails_the_trial),
		cmocka_unit_test(slots_after_init_are_refused),
		cmocka_unit_test(vectors_outside_the_arena_are_refused),
		cmocka_unit_test(resume_from_arena_copy_is_bit_identical),
		cmocka_unit_test(device_arena_is_copied_at_snapshots_only),
		cmocka_unit_test(damaged_arena_headers_are_refused),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
