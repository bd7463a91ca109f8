/*
 * test_tuning.c: search-space parsing and the seeded Halton draws: fixed by
 * the seed, different across trials and studies, inside their ranges, spread
 * evenly (log-uniform on a log scale), every feasible point reachable.
 */
#include "testlib.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tuning/tuning.h"

static const char *space = "[learning_rate]\nmin = 1e-4\nmax = 1e-1\n"
			   "scaling = log\n"
			   "[one_minus_beta1]\nmin = 0.01\nmax = 0.5\n"
			   "scaling = linear\n"
			   "[warmup]\nfeasible_points = 0.02, 0.05, 0.1\n"
			   "[nesterov]\nfeasible_points = true, false\n";

static apf_search_space *load(void)
{
	apf_search_space *s;
	assert_apf_ok(apf_search_space_parse(&s, space, "space.ini"));
	return s;
}

static void halton_known_values(void **state)
{
	(void)state;
	assert_true(apf_halton(1, 2) == 0.5);
	assert_true(apf_halton(2, 2) == 0.25);
	assert_true(apf_halton(3, 2) == 0.75);
	assert_true(fabs(apf_halton(1, 3) - 1.0 / 3) < 1e-15);
	assert_true(fabs(apf_halton(4, 3) - 4.0 / 9) < 1e-15);
}

static void same_plan_same_draws_others_differ(void **state)
{
	(void)state;
	apf_search_space *s = load();
	apf_hparams a, b, c, d;
	assert_apf_ok(apf_tuning_draw(s, 42, 1, 2, &a));
	assert_apf_ok(apf_tuning_draw(s, 42, 1, 2, &b));
	for (size_t i = 0; i < a.n; i++)
		assert_memory_equal(&a.values[i], &b.values[i], sizeof(double));
	assert_apf_ok(apf_tuning_draw(s, 42, 1, 3, &c)); /* other trial */
	assert_apf_ok(apf_tuning_draw(s, 42, 2, 2, &d)); /* other study */
	assert_true(a.values[0] != c.values[0]);
	assert_true(a.values[0] != d.values[0]);
	apf_hparams e;
	assert_apf_ok(apf_tuning_draw(s, 43, 1, 2, &e)); /* other seed */
	assert_true(a.values[0] != e.values[0]);
	apf_hparams_free(&a);
	apf_hparams_free(&b);
	apf_hparams_free(&c);
	apf_hparams_free(&d);
	apf_hparams_free(&e);
	apf_search_space_free(s);
}

static void draws_stay_in_range_and_spread_evenly(void **state)
{
	(void)state;
	apf_search_space *s = load();
	int below = 0, counts[3] = {0}, trues = 0;
	const int T = 200;
	for (int t = 0; t < T; t++) {
		apf_hparams h;
		assert_apf_ok(apf_tuning_draw(s, 7, 0, t, &h));
		assert_true(h.values[0] >= 1e-4 && h.values[0] <= 1e-1);
		assert_true(h.values[1] >= 0.01 && h.values[1] <= 0.5);
		below += h.values[0] < sqrt(1e-4 * 1e-1); /* log midpoint */
		for (int k = 0; k < 3; k++)
			counts[k] += h.values[2] == (double[]){0.02, 0.05, 0.1}[k];
		assert_null(h.words[0]);
		assert_non_null(h.words[3]);
		trues += !strcmp(h.words[3], "true");
		assert_true(isnan(h.values[3]));
		apf_hparams_free(&h);
	}
	/* A low-discrepancy sequence: much closer to even than chance. */
	assert_in_range(below, T / 2 - 6, T / 2 + 6);
	for (int k = 0; k < 3; k++)
		assert_in_range(counts[k], T / 3 - 6, T / 3 + 6);
	assert_in_range(trues, T / 2 - 6, T / 2 + 6);
	apf_search_space_free(s);
}

static void hparams_json_round_trip(void **state)
{
	(void)state;
	apf_search_space *s = load();
	apf_hparams h, back;
	assert_apf_ok(apf_tuning_draw(s, 1, 0, 0, &h));
	json_t *j = apf_hparams_to_json(&h);
	char *text = json_dumps(j, 0);
	json_t *parsed = json_loads(text, 0, NULL);
	assert_apf_ok(apf_hparams_from_json(&back, parsed));
	assert_int_equal(back.n, h.n);
	for (size_t i = 0; i < h.n; i++) {
		assert_string_equal(back.names[i], h.names[i]);
		if (h.words[i])
			assert_string_equal(back.words[i], h.words[i]);
		else
			assert_memory_equal(&back.values[i], &h.values[i],
					    sizeof(double));
	}
	free(text);
	json_decref(j);
	json_decref(parsed);
	apf_hparams_free(&h);
	apf_hparams_free(&back);
	apf_search_space_free(s);
}

static void malformed_spaces_are_refused(void **state)
{
	(void)state;
	apf_search_space *s;
	struct {
		const char *text, *want;
	} cases[] = {
		{"[lr]\nmin = 1\nmax = 0.1\nscaling = log\n", "line 3: [lr] max: must be above min"},
		{"[lr]\nmin = 0\nmax = 1\nscaling = log\n", "needs min > 0"},
		{"[lr]\nmin = 1\nmax = 2\nscaling = cubic\n", "expected log or linear"},
		{"[lr]\nmin = 1\nmax = 2\nscaling = log\nfeasible_points = 1\n", "either"},
		{"[lr]\nfeasible_points = 1, a b\n", "neither a number nor a word"},
		{"[lr]\nminimum = 1\n", "unknown key"},
		{"[lr]\nmin = 1\nscaling = log\n", "max: missing"},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		int rc = apf_search_space_parse(&s, cases[i].text, "s.ini");
		if (rc != APF_EINPUT || !strstr(apf_error_message(), cases[i].want))
			fail_msg("case %zu: expected '%s', got %d: %s", i,
				 cases[i].want, rc, apf_error_message());
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(halton_known_values),
		cmocka_unit_test(same_plan_same_draws_others_differ),
		cmocka_unit_test(draws_stay_in_range_and_spread_evenly),
		cmocka_unit_test(hparams_json_round_trip),
		cmocka_unit_test(malformed_spaces_are_refused),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
