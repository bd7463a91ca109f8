/*
 * test_tuning.c: search spaces (both forms, INI and JSON) and the seeded
 * draws: the scrambled radical inverse by hand; draws fixed by (seed, study,
 * trial, trials), different across studies and seeds, inside their ranges;
 * on the baselines' own spaces, every feasible point in every study and no
 * rank correlation with the trial index or between ranges; lists of points
 * taken in order; every malformed space refused with its reason.
 */
#include "testlib.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tuning/tuning.h"

static const char *space = "[learning_rate]\nmin = 1e-4\nmax = 1e-1\n"
			   "scaling = log\n"
			   "[one_minus_beta1]\nmin = 0.01\nmax = 0.5\n"
			   "scaling = linear\n"
			   "[warmup]\nfeasible_points = 0.02, 0.05, 0.1\n"
			   "[nesterov]\nfeasible_points = true, false\n";

static const char *const baselines[] = {"adamw", "heavy_ball", "nadamw",
					"schedule_free_adamw", "sgd_nesterov"};

static apf_search_space *parse(const char *text, const char *name)
{
	apf_search_space *s;
	assert_apf_ok(apf_search_space_parse(&s, text, name));
	return s;
}

static apf_search_space *load_baseline(const char *b)
{
	char path[256];
	snprintf(path, sizeof path,
		 "submissions/baselines/%s/tuning_search_space.ini", b);
	apf_search_space *s;
	assert_apf_ok(apf_search_space_load(&s, path));
	return s;
}

static void halton_is_a_permuted_digit_reversal(void **state)
{
	(void)state;
	assert_true(apf_halton(1, 2, NULL) == 0.5);
	assert_true(apf_halton(2, 2, NULL) == 0.25);
	assert_true(apf_halton(3, 2, NULL) == 0.75);
	assert_true(fabs(apf_halton(4, 3, NULL) - 4.0 / 9) < 1e-15);
	/* Base 3, digits 0 1 2 written 0 2 1: 5 = 12 (base 3) reads, lowest
	 * digit first, 2 then 1 -> 1/3 + 2/9; 7 = 21 -> 2/3 + 1/9. */
	const unsigned swap[] = {0, 2, 1};
	assert_true(fabs(apf_halton(5, 3, swap) - 5.0 / 9) < 1e-15);
	assert_true(fabs(apf_halton(7, 3, swap) - 7.0 / 9) < 1e-15);
	assert_true(fabs(apf_halton(3, 3, swap) - 2.0 / 9) < 1e-15);
	/* Base 5, 0 1 2 3 4 written 0 3 1 4 2: 101 = 401 (base 5) -> digits
	 * 1, 0, 4 -> 3/5 + 0/25 + 2/125. */
	const unsigned p5[] = {0, 3, 1, 4, 2};
	assert_true(fabs(apf_halton(101, 5, p5) - (0.6 + 2.0 / 125)) < 1e-15);
}

static void same_plan_same_draws_others_differ(void **state)
{
	(void)state;
	apf_search_space *s = parse(space, "space.ini");
	apf_hparams a, b, c, d, e;
	assert_apf_ok(apf_tuning_draw(&a, s, 42, 1, 2, 5));
	assert_apf_ok(apf_tuning_draw(&b, s, 42, 1, 2, 5));
	assert_int_equal(a.n, 4);
	for (size_t i = 0; i < a.n; i++) {
		assert_memory_equal(&a.values[i], &b.values[i], sizeof(double));
		assert_string_equal(a.names[i], b.names[i]);
	}
	assert_apf_ok(apf_tuning_draw(&c, s, 42, 1, 3, 5)); /* other trial */
	assert_apf_ok(apf_tuning_draw(&d, s, 42, 2, 2, 5)); /* other study */
	assert_apf_ok(apf_tuning_draw(&e, s, 43, 1, 2, 5)); /* other seed */
	for (size_t i = 0; i < 2; i++) {
		assert_true(a.values[i] != c.values[i]);
		assert_true(a.values[i] != d.values[i]);
		assert_true(a.values[i] != e.values[i]);
	}
	apf_hparams_free(&a);
	apf_hparams_free(&b);
	apf_hparams_free(&c);
	apf_hparams_free(&d);
	apf_hparams_free(&e);
	/* No two studies of one seed draw the same first range. */
	double first[20];
	for (long st = 0; st < 20; st++) {
		apf_hparams h;
		assert_apf_ok(apf_tuning_draw(&h, s, 9, st, 0, 5));
		first[st] = h.values[0];
		for (long k = 0; k < st; k++)
			assert_true(first[k] != first[st]);
		apf_hparams_free(&h);
	}
	apf_search_space_free(s);
}

static void a_trial_outside_the_study_is_refused(void **state)
{
	(void)state;
	apf_search_space *s = parse(space, "space.ini");
	apf_hparams h;
	assert_int_equal(apf_tuning_draw(&h, s, 1, 0, 5, 5), APF_EINTERNAL);
	assert_int_equal(apf_tuning_draw(&h, s, 1, 0, -1, 5), APF_EINTERNAL);
	assert_int_equal(apf_tuning_draw(&h, s, 1, -1, 0, 5), APF_EINTERNAL);
	apf_search_space_free(s);
}

static int is_choice(const struct apf_hp_dim *d, const apf_hparams *h,
		     size_t i)
{
	for (size_t k = 0; k < d->nchoices; k++)
		if (h->words[i] ? !strcmp(h->words[i], d->choices[k])
				: h->values[i] == d->values[k])
			return 1;
	return 0;
}

static void draws_stay_in_range(void **state)
{
	(void)state;
	apf_search_space *s = parse(space, "space.ini");
	const long Ts[] = {1, 2, 5, 7, 40};
	for (uint32_t seed = 0; seed < 20; seed++)
		for (size_t ti = 0; ti < sizeof Ts / sizeof Ts[0]; ti++)
			for (long t = 0; t < Ts[ti]; t++) {
				apf_hparams h;
				assert_apf_ok(apf_tuning_draw(&h, s, seed, seed % 3,
							      t, Ts[ti]));
				assert_true(h.values[0] >= 1e-4 &&
					    h.values[0] <= 1e-1);
				assert_true(h.values[1] >= 0.01 &&
					    h.values[1] <= 0.5);
				assert_null(h.words[0]);
				assert_true(is_choice(&s->dims[2], &h, 2));
				assert_non_null(h.words[3]);
				assert_true(isnan(h.values[3]));
				assert_true(is_choice(&s->dims[3], &h, 3));
				apf_hparams_free(&h);
			}
	apf_search_space_free(s);
}

/* All T trials of one study; out[t * ndims + d] is trial t's value of d
 * (a choice's index for feasible points). */
static void draw_all(const apf_search_space *s, uint32_t seed, long study,
		     long T, double *out)
{
	for (long t = 0; t < T; t++) {
		apf_hparams h;
		assert_apf_ok(apf_tuning_draw(&h, s, seed, study, t, T));
		for (size_t d = 0; d < s->ndims; d++) {
			const struct apf_hp_dim *dim = &s->dims[d];
			double v = h.values[d];
			if (dim->kind == APF_HP_CHOICE) {
				size_t k = 0;
				while (k < dim->nchoices &&
				       !(h.words[d] ? !strcmp(h.words[d],
							      dim->choices[k])
						    : v == dim->values[k]))
					k++;
				assert_true(k < dim->nchoices);
				v = (double)k;
			}
			out[t * (long)s->ndims + (long)d] = v;
		}
		apf_hparams_free(&h);
	}
}

static void every_feasible_point_in_every_study(void **state)
{
	(void)state;
	for (size_t b = 0; b < sizeof baselines / sizeof baselines[0]; b++) {
		apf_search_space *s = load_baseline(baselines[b]);
		double v[5 * 16];
		assert_true(s->ndims <= 16);
		int multi = 0;
		for (uint32_t seed = 0; seed < 50; seed++)
			for (long st = 0; st < 3; st++) {
				draw_all(s, seed * 7919u + 1, st, 5, v);
				for (size_t d = 0; d < s->ndims; d++) {
					const struct apf_hp_dim *dim = &s->dims[d];
					if (dim->kind != APF_HP_CHOICE ||
					    dim->nchoices > 5)
						continue;
					multi += dim->nchoices > 1;
					for (size_t k = 0; k < dim->nchoices; k++) {
						int seen = 0;
						for (int t = 0; t < 5; t++)
							seen += v[t * (int)s->ndims +
								  (int)d] == (double)k;
						if (!seen)
							fail_msg("%s seed %u study %ld: "
								 "%s never takes %s",
								 baselines[b], seed, st,
								 dim->name,
								 dim->choices[k]);
					}
				}
			}
		assert_true(multi > 0); /* the test looked at real choices */
		apf_search_space_free(s);
	}
}

static void choices_are_balanced_when_they_do_not_divide(void **state)
{
	(void)state;
	apf_search_space *s =
		parse("[c]\nfeasible_points = a, b, c\n[d]\nfeasible_points = 1, 2, 3, 4, 5, 6, 7, 8, 9\n",
		      "s.ini");
	double v[7 * 2];
	int extra[3] = {0};
	for (uint32_t seed = 0; seed < 60; seed++) {
		draw_all(s, seed, 0, 7, v);
		int n[3] = {0}, m[9] = {0};
		for (int t = 0; t < 7; t++) {
			n[(int)v[t * 2]]++;
			m[(int)v[t * 2 + 1]]++;
		}
		for (int k = 0; k < 3; k++) {
			assert_in_range(n[k], 2, 3);
			extra[k] += n[k] == 3;
		}
		for (int k = 0; k < 9; k++)
			assert_in_range(m[k], 0, 1); /* T < k: no repeats */
	}
	/* Which choice gets the extra trial is drawn, not always the first. */
	for (int k = 0; k < 3; k++)
		assert_in_range(extra[k], 5, 55);
	apf_search_space_free(s);
}

/* Spearman's rho of x[0..n) against y[0..n) (no ties). */
static double spearman(const double *x, const double *y, int n)
{
	double rx[16], ry[16], d2 = 0;
	for (int i = 0; i < n; i++) {
		rx[i] = ry[i] = 0;
		for (int j = 0; j < n; j++) {
			rx[i] += x[j] < x[i];
			ry[i] += y[j] < y[i];
		}
	}
	for (int i = 0; i < n; i++)
		d2 += (rx[i] - ry[i]) * (rx[i] - ry[i]);
	return 1 - 6 * d2 / (n * ((double)n * n - 1));
}

static void ranges_have_no_trend_and_no_correlation(void **state)
{
	(void)state;
	/* 1000 seeds x 3 studies: the mean's noise is about 0.01, so a
	 * bias of 0.05 cannot hide (200 seeds alone leave 0.035). */
	const int T = 5, seeds = 1000, studies = 3;
	for (size_t b = 0; b < sizeof baselines / sizeof baselines[0]; b++) {
		apf_search_space *s = load_baseline(baselines[b]);
		size_t nd = s->ndims, r[16], nr = 0;
		for (size_t d = 0; d < nd; d++)
			if (s->dims[d].kind == APF_HP_RANGE)
				r[nr++] = d;
		assert_true(nr >= 2);
		double trend[16] = {0}, pair[16][16] = {{0}};
		double v[5 * 16], col[16][5], idx[5] = {0, 1, 2, 3, 4};
		for (uint32_t seed = 0; seed < (uint32_t)seeds; seed++)
			for (long st = 0; st < studies; st++) {
				draw_all(s, seed, st, T, v);
				for (size_t i = 0; i < nr; i++)
					for (int t = 0; t < T; t++)
						col[i][t] = v[t * (int)nd + (int)r[i]];
				for (size_t i = 0; i < nr; i++) {
					trend[i] += spearman(col[i], idx, T);
					for (size_t j = 0; j < i; j++)
						pair[i][j] +=
							spearman(col[i], col[j], T);
				}
			}
		const double n = seeds * studies;
		for (size_t i = 0; i < nr; i++) {
			if (fabs(trend[i] / n) >= 0.05)
				fail_msg("%s: %s against the trial: mean rho %.3f",
					 baselines[b], s->dims[r[i]].name,
					 trend[i] / n);
			for (size_t j = 0; j < i; j++)
				if (fabs(pair[i][j] / n) >= 0.05)
					fail_msg("%s: %s against %s: mean rho %.3f",
						 baselines[b], s->dims[r[i]].name,
						 s->dims[r[j]].name,
						 pair[i][j] / n);
		}
		apf_search_space_free(s);
	}
}

static void log_ranges_spread_evenly(void **state)
{
	(void)state;
	apf_search_space *s = parse(space, "space.ini");
	int below = 0;
	const int N = 40 * 5;
	for (uint32_t seed = 0; seed < 40; seed++)
		for (long t = 0; t < 5; t++) {
			apf_hparams h;
			assert_apf_ok(apf_tuning_draw(&h, s, seed, 0, t, 5));
			below += h.values[0] < sqrt(1e-4 * 1e-1); /* log midpoint */
			apf_hparams_free(&h);
		}
	/* Each study's five points are stratified: near half below. */
	assert_in_range(below, N / 2 - 15, N / 2 + 15);
	apf_search_space_free(s);
}

static void hparams_json_round_trip(void **state)
{
	(void)state;
	apf_search_space *s = parse(space, "space.ini");
	apf_hparams h, back;
	assert_apf_ok(apf_tuning_draw(&h, s, 1, 0, 0, 5));
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

/* Trial t of every study takes point t + 1, whatever the seed. */
static void check_points(const apf_search_space *s)
{
	static const double lr[] = {0.001, 0.002, 0.003};
	static const char *const nest[] = {"true", "false", "true"};
	assert_int_equal(s->npoints, 3);
	assert_int_equal(s->ndims, 2);
	assert_string_equal(s->dims[0].name, "learning_rate");
	assert_string_equal(s->dims[1].name, "nesterov");
	for (uint32_t seed = 0; seed < 5; seed++)
		for (long st = 0; st < 3; st++)
			for (long t = 0; t < 3; t++) {
				apf_hparams h;
				assert_apf_ok(apf_tuning_draw(&h, s, seed, st, t, 3));
				assert_int_equal(h.n, 2);
				assert_true(h.values[0] == lr[t]);
				assert_null(h.words[0]);
				assert_string_equal(h.words[1], nest[t]);
				apf_hparams_free(&h);
			}
	apf_hparams h;
	assert_apf_ok(apf_tuning_draw(&h, s, 0, 0, 1, 2)); /* fewer trials */
	assert_true(h.values[0] == 0.002);
	apf_hparams_free(&h);
	assert_int_equal(apf_tuning_draw(&h, s, 0, 0, 0, 4), APF_EINPUT);
	assert_non_null(strstr(apf_error_message(),
			       "4 trials per study but 3 points"));
	assert_int_equal(apf_search_space_check_trials(s, 3), 0);
}

static void lists_of_points_give_trial_t_point_t(void **state)
{
	(void)state;
	/* Sections out of order: the number says which point it is. */
	apf_search_space *s =
		parse("[point 2]\nlearning_rate = 0.002\nnesterov = false\n"
		      "[point 1]\nlearning_rate = 1e-3\nnesterov = true\n"
		      "[point 3]\nnesterov = true\nlearning_rate = 0.003\n",
		      "tuning_search_space.ini");
	/* Names in the order point 1 gives them. */
	check_points(s);
	apf_search_space_free(s);
	s = parse("[{\"learning_rate\": 0.001, \"nesterov\": true},\n"
		  " {\"learning_rate\": 2e-3, \"nesterov\": \"false\"},\n"
		  " {\"nesterov\": true, \"learning_rate\": 0.003}]\n",
		  "tuning_search_space.json");
	check_points(s);
	apf_search_space_free(s);
}

static void json_dimensions_read_as_the_ini_form(void **state)
{
	(void)state;
	apf_search_space *s = parse(
		"{\"learning_rate\": {\"min\": 1e-4, \"max\": 1e-1, "
		"\"scaling\": \"log\"},\n"
		" \"one_minus_beta1\": {\"min\": 0.01, \"max\": 0.5, "
		"\"scaling\": \"linear\"},\n"
		" \"warmup\": {\"feasible_points\": [0.02, 0.05, 0.1]},\n"
		" \"nesterov\": {\"feasible_points\": [true, false]}}",
		"tuning_search_space.json");
	apf_search_space *ini = parse(space, "space.ini");
	assert_int_equal(s->npoints, 0);
	assert_int_equal(s->ndims, ini->ndims);
	for (long t = 0; t < 5; t++) {
		apf_hparams a, b;
		assert_apf_ok(apf_tuning_draw(&a, s, 3, 1, t, 5));
		assert_apf_ok(apf_tuning_draw(&b, ini, 3, 1, t, 5));
		for (size_t i = 0; i < a.n; i++) {
			assert_string_equal(a.names[i], b.names[i]);
			if (b.words[i])
				assert_string_equal(a.words[i], b.words[i]);
			else
				assert_true(a.values[i] == b.values[i]);
		}
		apf_hparams_free(&a);
		apf_hparams_free(&b);
	}
	assert_string_equal(s->dims[2].choices[1], "0.05");
	apf_search_space_free(s);
	apf_search_space_free(ini);
}

static void malformed_spaces_are_refused(void **state)
{
	(void)state;
	apf_search_space *s;
	const char *J = "tuning_search_space.json";
	struct {
		const char *name, *text, *want;
	} cases[] = {
		{"s.ini", "[lr]\nmin = 1\nmax = 0.1\nscaling = log\n", "line 3: [lr] max: must be above min"},
		{"s.ini", "[lr]\nmin = -1\nmax = 1\nscaling = log\n", "line 2: [lr] min: a log scale needs min > 0"},
		{"s.ini", "[lr]\nmin = 1\nmax = 2\nscaling = logg\n", "line 4: [lr] scaling: expected log or linear, got 'logg'"},
		{"s.ini", "[lr]\nmin = 1\nmax = abc\nscaling = log\n", "line 3: [lr] max:"},
		{"s.ini", "[lr]\nmin = 1\nmax = 2\nscaling = log\nfeasible_points = 1\n", "either"},
		{"s.ini", "[lr]\nfeasible_points = 1, a b\n", "neither a number nor a word"},
		{"s.ini", "[lr]\nminimum = 1\n", "unknown key"},
		{"s.ini", "[lr]\nmin = 1\nscaling = log\n", "max: missing"},
		/* lists of points */
		{"s.ini", "[point 1]\nlr = 1\n[beta1]\nfeasible_points = 0.9\n",
		 "line 3: [beta1]: a search space is either all [point N] sections or all hyperparameter sections"},
		{"s.ini", "[beta1]\nfeasible_points = 0.9\n[point 1]\nlr = 1\n", "line 3: [point 1]: a search space is either"},
		{"s.ini", "[point 1]\nlr = 1\n[point 3]\nlr = 2\n", "line 3: [point 3]: points are numbered 1 to 2 with no gaps (point 2 is missing)"},
		{"s.ini", "[point 0]\nlr = 1\n", "line 1: [point 0]: a point is numbered 1, 2, ..."},
		{"s.ini", "[point 01]\nlr = 1\n", "[point 01]: a point is numbered"},
		{"s.ini", "[point one]\nlr = 1\n", "[point one]: a point is numbered"},
		{"s.ini", "[point 1]\nlr = 1\nwd = 2\n[point 2]\nlr = 2\n", "line 4: [point 2] wd: missing (every point sets the same hyperparameters as [point 1])"},
		{"s.ini", "[point 1]\nlr = 1\n[point 2]\nlr = 2\nwd = 3\n", "line 5: [point 2] wd: not in [point 1]"},
		{"s.ini", "[point 1]\n[point 2]\nlr = 2\n", "line 1: [point 1]: no hyperparameters"},
		{"s.ini", "[point 1]\nlr = 1 2\n", "line 2: [point 1] lr: '1 2' is neither a number nor a word"},
		/* JSON */
		{J, "{\"lr\": {\"min\": 1, \"max\": 0.1, \"scaling\": \"log\"}}", "'lr': max: must be above min"},
		{J, "{\"lr\": {\"min\": -1, \"max\": 1, \"scaling\": \"log\"}}", "'lr': min: a log scale needs min > 0"},
		{J, "{\"lr\": {\"min\": 1, \"max\": 2, \"scaling\": \"logg\"}}", "'lr': scaling: expected \"log\" or \"linear\""},
		{J, "{\"lr\": {\"min\": 1, \"max\": \"abc\", \"scaling\": \"log\"}}", "'lr': max: expected a number"},
		{J, "{\"lr\": {\"min\": 1, \"max\": 2}}", "'lr': scaling: missing"},
		{J, "{\"lr\": {\"minimum\": 1}}", "'lr': unknown key 'minimum'"},
		{J, "{\"lr\": {\"min\": 1, \"max\": 2, \"scaling\": \"log\", \"feasible_points\": [1]}}", "'lr': give either"},
		{J, "{\"lr\": {}}", "'lr': give either"},
		{J, "{\"lr\": 0.1}", "'lr': expected an object"},
		{J, "{\"lr\": {\"feasible_points\": []}}", "'lr': feasible_points: expected a non-empty list"},
		{J, "{\"lr\": {\"feasible_points\": [1, null]}}", "'lr': feasible_points[1]: expected a number, a word or true/false"},
		{J, "{\"lr\": {\"feasible_points\": [\"a b\"]}}", "feasible_points[0]: expected a number"},
		{J, "{\"l r\": {\"feasible_points\": [1]}}", "'l r': a hyperparameter name is"},
		{J, "{\"lr\": {\"min\": 1, \"max\": 2, \"scaling\": \"log\"},", "tuning_search_space.json: line 1:"},
		{J, "{\"lr\": {\"feasible_points\": [1]}, \"lr\": {\"feasible_points\": [2]}}", "duplicate object key"},
		{J, "3", "expected an object of hyperparameters or a list of points"},
		{J, "[]", "an empty list of points"},
		{J, "[{\"lr\": 1}, 2]", "point 2: expected an object"},
		{J, "[{}]", "point 1: no hyperparameters"},
		{J, "[{\"lr\": 1, \"wd\": 2}, {\"lr\": 2}]", "point 2: 'wd': missing"},
		{J, "[{\"lr\": 1}, {\"lr\": 2, \"wd\": 3}]", "point 2: 'wd': not in point 1"},
		{J, "[{\"lr\": 1}, {\"lr\": [2]}]", "point 2: 'lr': expected a number, a word or true/false"},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		int rc = apf_search_space_parse(&s, cases[i].text, cases[i].name);
		if (rc != APF_EINPUT || !strstr(apf_error_message(), cases[i].want))
			fail_msg("case %zu: expected '%s', got %d: %s", i,
				 cases[i].want, rc, apf_error_message());
		if (strncmp(apf_error_message(), cases[i].name,
			    strlen(cases[i].name)))
			fail_msg("case %zu: the message does not name %s: %s", i,
				 cases[i].name, apf_error_message());
	}
}

static void plans_draw_each_study_once_for_every_workload(void **state)
{
	(void)state;
	apf_search_space *s = load_baseline("nadamw");
	char *w[] = {"a", "b"};
	apf_plan *p;
	assert_apf_ok(apf_plan_build(&p, w, 2, 3, 5, 77, s));
	assert_int_equal(p->n, 2 * 3 * 5);
	for (size_t i = 0; i < p->n; i++) {
		const struct apf_plan_unit *u = &p->units[i];
		assert_string_equal(u->workload, w[i / 15]);
		assert_int_equal(u->study, (long)(i % 15) / 5);
		assert_int_equal(u->trial, (long)(i % 15) % 5);
		apf_hparams h;
		assert_apf_ok(apf_tuning_draw(&h, s, 77, u->study, u->trial, 5));
		assert_int_equal(h.n, u->hp.n);
		for (size_t d = 0; d < h.n; d++)
			assert_true(h.values[d] == u->hp.values[d]);
		apf_hparams_free(&h);
	}
	apf_plan_free(p);
	apf_search_space_free(s);
	/* A list of points shorter than a study is refused. */
	s = parse("[point 1]\nlr = 1\n[point 2]\nlr = 2\n", "tuning_search_space.ini");
	assert_int_equal(apf_plan_build(&p, w, 1, 1, 3, 1, s), APF_EINPUT);
	assert_non_null(strstr(apf_error_message(),
			       "tuning_search_space.ini: 3 trials per study but 2 points"));
	apf_search_space_free(s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(halton_is_a_permuted_digit_reversal),
		cmocka_unit_test(same_plan_same_draws_others_differ),
		cmocka_unit_test(a_trial_outside_the_study_is_refused),
		cmocka_unit_test(draws_stay_in_range),
		cmocka_unit_test(every_feasible_point_in_every_study),
		cmocka_unit_test(choices_are_balanced_when_they_do_not_divide),
		cmocka_unit_test(ranges_have_no_trend_and_no_correlation),
		cmocka_unit_test(log_ranges_spread_evenly),
		cmocka_unit_test(hparams_json_round_trip),
		cmocka_unit_test(lists_of_points_give_trial_t_point_t),
		cmocka_unit_test(json_dimensions_read_as_the_ini_form),
		cmocka_unit_test(malformed_spaces_are_refused),
		cmocka_unit_test(plans_draw_each_study_once_for_every_workload),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
