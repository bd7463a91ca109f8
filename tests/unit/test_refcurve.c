/*
 * test_refcurve.c: the plausibility rule (pkg/refcurve) - the reference
 * bound at a level is the fastest reference run's last eval below it (not
 * its first eval past it, which eval spacing decides), over the runs that
 * reached it, else the most any run saw; a unit is flagged only under
 * APF_REFCURVE_FACTOR of that bound, at the first eval meeting its target;
 * max and min metrics alike; a missing file is no curve, a malformed one an
 * error naming the key.
 */
#include "testlib.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "refcurve/refcurve.h"

/* Accuracy, max: run a reaches 0.9 between 1000 and 2000 examples, run b
 * between 1500 and 1800: b is first seen there, but a may have got there
 * soon after 1000, so the bound is a's 1000; only a reaches 0.95; c never
 * leaves 0.5 and saw 5000. */
static const char max_curve[] =
	"{\"format\": \"apf-reference-curve-v1\", \"workload\": \"w\","
	" \"metric\": \"accuracy\", \"direction\": \"max\","
	" \"runs\": ["
	"  {\"label\": \"a\", \"batch_size\": 100,"
	"   \"points\": [[100, 0.1], [1000, 0.85], [2000, 0.92], [2500, 0.91],"
	"                [4000, 0.95]]},"
	"  {\"label\": \"b\", \"points\": [[100, 0.2], [1500, 0.8], [1800, 0.9]]},"
	"  {\"label\": \"c\", \"points\": [[100, 0.5], [5000, 0.5]]}],"
	" \"provenance\": {\"date\": \"today\"}}";

/* Log loss, min: reaches 0.4 after 3000 examples (last above at 2000). */
static const char min_curve[] =
	"{\"format\": \"apf-reference-curve-v1\", \"workload\": \"m\","
	" \"metric\": \"log_loss\", \"direction\": \"min\","
	" \"runs\": [{\"label\": \"r\", \"points\": [[128, 0.69], [1000, 0.5],"
	" [2000, 0.45], [3000, 0.39], [4000, 0.41]]}]}";

static apf_refcurve *parse(const char *text, const char *workload)
{
	apf_refcurve *c = NULL;
	assert_apf_ok(apf_refcurve_parse(&c, text, strlen(text), "ref.json",
					  workload));
	return c;
}

static void bound_is_the_fastest_run_s_last_eval_below(void **state)
{
	(void)state;
	apf_refcurve *c = parse(max_curve, "w");
	assert_string_equal(apf_refcurve_metric(c), "accuracy");
	assert_int_equal(apf_refcurve_direction(c), 1);
	assert_int_equal(apf_refcurve_runs(c), 3);
	struct apf_refcurve_bound b;
	apf_refcurve_bound(&b, c, 0.9);
	assert_true(b.reached);
	assert_int_equal(b.below, 1000); /* a's, not b's 1500 */
	assert_string_equal(b.run, "a");
	assert_int_equal(b.first, 1800); /* b's */
	/* 0.91: a at 2000 (its best stays 0.92 at 2500, never goes back). */
	apf_refcurve_bound(&b, c, 0.91);
	assert_int_equal(b.below, 1000);
	assert_int_equal(b.first, 2000);
	assert_string_equal(b.run, "a");
	/* 0.95: only a. */
	apf_refcurve_bound(&b, c, 0.95);
	assert_int_equal(b.below, 2500);
	/* A level some run met at its first eval bounds nothing. */
	apf_refcurve_bound(&b, c, 0.15);
	assert_true(b.reached);
	assert_int_equal(b.below, 0);
	/* Beyond every run: the most examples any run saw. */
	apf_refcurve_bound(&b, c, 0.99);
	assert_false(b.reached);
	assert_int_equal(b.below, 5000);
	assert_string_equal(b.run, "c");
	apf_refcurve_free(c);
}

static void unit_far_ahead_is_flagged_at_its_first_eval_meeting_the_target(
	void **state)
{
	(void)state;
	apf_refcurve *c = parse(max_curve, "w");
	/* A forged log: the target at step 2 of batch 100. */
	uint64_t steps[] = {1, 2, 3};
	double vals[] = {0.1, 0.93, 0.97};
	struct apf_refcurve_verdict v;
	apf_refcurve_judge(&v, c, 0.9, 100, steps, vals, 3);
	assert_true(v.met);
	assert_true(v.implausible);
	assert_int_equal(v.global_step, 2);
	assert_int_equal(v.examples, 200);
	assert_int_equal(v.ref.below, 1000);
	assert_true(fabs(v.ratio - 0.2) < 1e-12);
	apf_buf line = {0};
	assert_apf_ok(apf_refcurve_describe(&line, c, "study_0/w/trial_1", &v));
	assert_non_null(strstr(line.data,
			       "study_0/w/trial_1 reached validation/accuracy "
			       "0.9 (its target) after 200 examples (step 2 x "
			       "batch 100): 0.2 of the 1000 examples by which "
			       "no reference run had reached it (the last eval "
			       "below it: a; first reached at 1800; ref.json), "
			       "under 1/4"));
	apf_buf_free(&line);
	apf_refcurve_free(c);
}

static void unit_within_the_factor_is_not_flagged(void **state)
{
	(void)state;
	apf_refcurve *c = parse(max_curve, "w");
	/* 250 examples: exactly 1/4 of 1000 is not under it. */
	uint64_t steps[] = {1, 10};
	double vals[] = {0.1, 0.9};
	struct apf_refcurve_verdict v;
	apf_refcurve_judge(&v, c, 0.9, 25, steps, vals, 2);
	assert_true(v.met);
	assert_int_equal(v.examples, 250);
	assert_false(v.implausible);
	/* A step fewer is. */
	steps[1] = 9;
	apf_refcurve_judge(&v, c, 0.9, 25, steps, vals, 2);
	assert_int_equal(v.examples, 225);
	assert_true(v.implausible);
	/* A unit that never met the target is not judged; nor is one whose
	 * batch size is unknown. */
	vals[1] = 0.89;
	apf_refcurve_judge(&v, c, 0.9, 25, steps, vals, 2);
	assert_false(v.met);
	assert_false(v.implausible);
	vals[1] = 0.9;
	apf_refcurve_judge(&v, c, 0.9, 0, steps, vals, 2);
	assert_true(v.met);
	assert_false(v.implausible);
	/* A target the reference met at its first eval flags nothing. */
	apf_refcurve_judge(&v, c, 0.15, 1, steps, vals, 2);
	assert_false(v.implausible);
	assert_true(isinf(v.ratio));
	apf_refcurve_free(c);
}

static void beyond_every_reference_run_is_held_against_the_longest(
	void **state)
{
	(void)state;
	apf_refcurve *c = parse(max_curve, "w");
	uint64_t steps[] = {3};
	double vals[] = {0.995};
	struct apf_refcurve_verdict v;
	apf_refcurve_judge(&v, c, 0.99, 100, steps, vals, 1);
	assert_true(v.implausible); /* 300 < 5000 / 4 */
	assert_false(v.ref.reached);
	apf_buf line = {0};
	assert_apf_ok(apf_refcurve_describe(&line, c, "u", &v));
	assert_non_null(strstr(line.data, "0.06 of the 5000 examples in which "
					  "no reference run reached it (the "
					  "longest: c; ref.json), under 1/4"));
	apf_buf_free(&line);
	apf_refcurve_free(c);
}

static void minimised_metrics_run_the_other_way(void **state)
{
	(void)state;
	apf_refcurve *c = parse(min_curve, "m");
	assert_int_equal(apf_refcurve_direction(c), -1);
	assert_true(apf_refcurve_meets(0.3, 0.4, -1));
	assert_false(apf_refcurve_meets(0.5, 0.4, -1));
	assert_false(apf_refcurve_meets(NAN, 0.4, -1));
	assert_false(apf_refcurve_meets(NAN, 0.4, 1));
	struct apf_refcurve_bound b;
	apf_refcurve_bound(&b, c, 0.4);
	assert_int_equal(b.below, 2000);
	assert_int_equal(b.first, 3000);
	/* 0.45 is met at 2000: the last eval above it is 1000. */
	apf_refcurve_bound(&b, c, 0.45);
	assert_int_equal(b.below, 1000);
	uint64_t steps[] = {1, 2};
	double vals[] = {0.69, 0.35};
	struct apf_refcurve_verdict v;
	apf_refcurve_judge(&v, c, 0.4, 128, steps, vals, 2);
	assert_true(v.implausible); /* 256 < 2000 / 4 */
	steps[1] = 4;
	apf_refcurve_judge(&v, c, 0.4, 128, steps, vals, 2);
	assert_false(v.implausible); /* 512 >= 500 */
	apf_refcurve_free(c);
}

static void missing_file_is_no_curve_and_a_bad_one_an_error(void **state)
{
	(void)state;
	char *dir = testlib_tmpdir();
	apf_refcurve *c = (apf_refcurve *)1;
	assert_apf_ok(apf_refcurve_load(&c, dir, "w"));
	assert_null(c);
	testlib_write_str(dir, "references/w.json", max_curve);
	assert_apf_ok(apf_refcurve_load(&c, dir, "w"));
	assert_non_null(c);
	assert_non_null(strstr(apf_refcurve_path(c), "/references/w.json"));
	apf_refcurve_free(c);
	/* The file must be the workload's it is named for. */
	testlib_write_str(dir, "references/v.json", max_curve);
	assert_int_equal(apf_refcurve_load(&c, dir, "v"), APF_EINPUT);
	assert_non_null(strstr(apf_error_message(),
			       "workload: w, but the file is v's"));
	static const struct {
		const char *text, *why;
	} bad[] = {
		{"[]", "not a JSON object"},
		{"{\"format\": \"apf-reference-curve-v1\", \"workload\": \"w\","
		 " \"metric\": \"a\", \"direction\": \"max\", \"runs\": [],"
		 " \"extra\": 1}",
		 "extra: unknown key"},
		{"{\"format\": \"v0\"}", "format: not \"apf-reference-curve-v1\""},
		{"{\"format\": \"apf-reference-curve-v1\", \"workload\": \"w\","
		 " \"metric\": \"a\", \"direction\": \"up\", \"runs\": []}",
		 "direction: not \"max\" or \"min\""},
		{"{\"format\": \"apf-reference-curve-v1\", \"workload\": \"w\","
		 " \"metric\": \"a\", \"direction\": \"max\", \"runs\": []}",
		 "runs: missing, or not a non-empty array"},
		{"{\"format\": \"apf-reference-curve-v1\", \"workload\": \"w\","
		 " \"metric\": \"a\", \"direction\": \"max\", \"runs\":"
		 " [{\"label\": \"x\", \"points\": [[10, 0.1], [5, 0.2]]}]}",
		 "runs[0].points[1]: examples go back (5 after 10)"},
		{"{\"format\": \"apf-reference-curve-v1\", \"workload\": \"w\","
		 " \"metric\": \"a\", \"direction\": \"max\", \"runs\":"
		 " [{\"label\": \"x\", \"points\": [[-1, 0.1]]}]}",
		 "runs[0].points[0]: not [examples"},
		{"{\"format\": \"apf-reference-curve-v1\", \"workload\": \"w\","
		 " \"metric\": \"a\", \"direction\": \"max\", \"runs\":"
		 " [{\"points\": [[1, 0.1]]}]}",
		 "runs[0].label: missing"},
		{"{\"format\": \"apf-reference-curve-v1\", \"format\": \"x\"}",
		 "line 1: "},
	};
	for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
		c = NULL;
		int rc = apf_refcurve_parse(&c, bad[i].text, strlen(bad[i].text),
					    "ref.json", "w");
		assert_int_equal(rc, APF_EINPUT);
		assert_null(c);
		if (!strstr(apf_error_message(), bad[i].why))
			fail_msg("case %zu: %s", i, apf_error_message());
		assert_non_null(strstr(apf_error_message(), "ref.json: "));
	}
	testlib_tmpdir_free(dir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(bound_is_the_fastest_run_s_last_eval_below),
		cmocka_unit_test(
			unit_far_ahead_is_flagged_at_its_first_eval_meeting_the_target),
		cmocka_unit_test(unit_within_the_factor_is_not_flagged),
		cmocka_unit_test(beyond_every_reference_run_is_held_against_the_longest),
		cmocka_unit_test(minimised_metrics_run_the_other_way),
		cmocka_unit_test(missing_file_is_no_curve_and_a_bad_one_an_error),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
