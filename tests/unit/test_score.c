/*
 * test_score.c: the scoring steps on hand-computed cases (medians with
 * infinite studies, metric direction, the best trial under each rule set,
 * each held-out penalty step, ties, missing logs, the trapezoid score), the
 * eval_measurements.csv reader, its errors and the numbers it refuses, and
 * the whole pipeline over small AlgoPerf-style logs and apf runs written
 * here, with and without APF_SCORE_STRICT.
 */
#include "testlib.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runlog/runlog.h"
#include "score/score.h"

/* h is the tau grid's step: numpy.linspace(1, 4, 100). */
#define H (3.0 / 99.0)

static void median_takes_infinite_studies_in(void **state)
{
	(void)state;
	const double odd[] = {3, INFINITY, 1};
	assert_true(apf_score_median(odd, 3) == 3);
	const double odd_inf[] = {INFINITY, 2, INFINITY};
	assert_true(isinf(apf_score_median(odd_inf, 3)));
	const double even[] = {5, 1, INFINITY, 3};
	assert_true(apf_score_median(even, 4) == 4);
	/* The two middle values average, so one infinity among two wins. */
	const double even_inf[] = {1, INFINITY};
	assert_true(isinf(apf_score_median(even_inf, 2)));
	const double two[] = {2, 1};
	assert_true(apf_score_median(two, 2) == 1.5);
	const double nan_in[] = {1, NAN, 2};
	assert_true(isnan(apf_score_median(nan_in, 3)));
	assert_true(isnan(apf_score_median(NULL, 0)));
}

static void first_hit_follows_metric_direction(void **state)
{
	(void)state;
	const double acc[] = {0.5, NAN, 0.79, 0.8, 0.95};
	assert_int_equal(apf_score_first_hit(acc, 5, 1, 0.8), 3);
	assert_int_equal(apf_score_first_hit(acc, 5, 1, 0.99), -1);
	const double loss[] = {2.0, NAN, 0.6, 0.4};
	assert_int_equal(apf_score_first_hit(loss, 4, -1, 0.6), 2);
	/* The same values read as "higher is better" meet at once. */
	assert_int_equal(apf_score_first_hit(loss, 4, 1, 0.6), 0);
	const double nans[] = {NAN, NAN};
	assert_int_equal(apf_score_first_hit(nans, 2, -1, 1e9), -1);
	assert_int_equal(apf_score_first_hit(nans, 2, 1, -1e9), -1);
}

static void rules_know_metric_directions(void **state)
{
	(void)state;
	const apf_score_rules *v05 = apf_score_rules_get("algoperf-0.5");
	const apf_score_rules *v06 = apf_score_rules_get("algoperf-0.6");
	const apf_score_rules *apf = apf_score_rules_get("apf");
	assert_non_null(v05);
	assert_non_null(v06);
	assert_non_null(apf);
	assert_null(apf_score_rules_get("algoperf-0.4"));
	assert_ptr_equal(apf_score_rules_for_version("0.5"), v05);
	assert_ptr_equal(apf_score_rules_for_version("0.6"), v06);
	/* Only the versions whose scorer the rules record. */
	assert_null(apf_score_rules_for_version("0.6.1"));
	assert_null(apf_score_rules_for_version("1.0"));
	assert_int_equal(apf_score_metric_direction(v05, "wer"), -1);
	assert_int_equal(apf_score_metric_direction(v05, "ctc_loss"), -1);
	assert_int_equal(apf_score_metric_direction(v05, "loss"), -1);
	assert_int_equal(apf_score_metric_direction(v05, "accuracy"), 1);
	assert_int_equal(apf_score_metric_direction(v05, "ssim"), 1);
	assert_int_equal(apf_score_metric_direction(v05, "bleu"), 1);
	assert_int_equal(apf_score_metric_direction(v05, "mean_average_precision"),
			 1);
	/* v0.6 added perplexity (finewebedu_lm); v0.5 does not know it. */
	assert_int_equal(apf_score_metric_direction(v05, "ppl"), 0);
	assert_int_equal(apf_score_metric_direction(v06, "ppl"), -1);
	assert_int_equal(apf_score_metric_direction(v06, "f1"), 0);
	/* apf's rules know its own workloads' metrics too; AlgoPerf's
	 * scorers do not, and say so rather than guess. */
	assert_int_equal(apf_score_metric_direction(apf, "log_loss"), -1);
	assert_int_equal(apf_score_metric_direction(apf, "cross_entropy"), -1);
	assert_int_equal(apf_score_metric_direction(apf, "perplexity"), -1);
	assert_int_equal(apf_score_metric_direction(apf, "auc"), 1);
	assert_int_equal(apf_score_metric_direction(apf, "ssim"), 1);
	assert_int_equal(apf_score_metric_direction(apf, "accuracy"), 1);
	assert_int_equal(apf_score_metric_direction(v06, "auc"), 0);
	assert_int_equal(apf_score_metric_direction(v06, "log_loss"), 0);
	assert_int_equal(v05->studies, 5);
	assert_int_equal(v06->studies, 3);
	assert_true(v05->self_tuning_budget == 3.0);
	assert_true(v06->self_tuning_budget == 1.5);
	assert_int_equal(v05->best, APF_SCORE_BEST_FIRST_EVAL);
	assert_int_equal(apf->best, APF_SCORE_BEST_MIN_TIME);
}

static void best_trial_depends_on_the_rules(void **state)
{
	(void)state;
	/* Sorted by trial number, as the log walker leaves them. */
	const struct apf_score_trial t[] = {
		{.number = 1, .hit = 3, .time = 30},
		{.number = 2, .hit = 2, .time = 40},
		{.number = 3, .hit = 2, .time = 35},
		{.number = 4, .hit = -1, .time = INFINITY},
	};
	double time;
	/* AlgoPerf: the earliest eval index (2); of the two trials tied
	 * there, the faster (35 s), whatever their order. */
	assert_int_equal(apf_score_study_best(t, 4, APF_SCORE_BEST_FIRST_EVAL,
					      &time),
			 2);
	assert_true(time == 35);
	const struct apf_score_trial rev[] = {t[0], t[2], t[1]};
	assert_int_equal(apf_score_study_best(rev, 3, APF_SCORE_BEST_FIRST_EVAL,
					      &time),
			 1);
	assert_true(time == 35);
	/* Tied at index and time: the lower trial number (the first). */
	const struct apf_score_trial same[] = {
		{.number = 1, .hit = 2, .time = 35},
		{.number = 2, .hit = 2, .time = 35},
	};
	assert_int_equal(apf_score_study_best(same, 2,
					      APF_SCORE_BEST_FIRST_EVAL, &time),
			 0);
	/* apf: the smallest time. */
	assert_int_equal(apf_score_study_best(t, 4, APF_SCORE_BEST_MIN_TIME,
					      &time),
			 0);
	assert_true(time == 30);
	/* No trial met the target: the study is infinite. */
	assert_int_equal(apf_score_study_best(&t[3], 1,
					      APF_SCORE_BEST_MIN_TIME, &time),
			 -1);
	assert_true(isinf(time));
	assert_int_equal(apf_score_study_best(t, 0, APF_SCORE_BEST_FIRST_EVAL,
					      &time),
			 -1);
	assert_true(isinf(time));
}

/* Columns: base b (0), variant v of b (1). Rows are submissions. */
static void heldout_variant_inf_when_base_inf_or_missing(void **state)
{
	(void)state;
	const size_t vc[] = {1}, bc[] = {0};
	double t[] = {
		10,       20, /* both met: untouched */
		INFINITY, 20, /* base missed: variant inf, then base stays inf */
		NAN,      20, /* base missing: variant inf */
	};
	apf_score_heldout_rules(t, 3, 2, vc, bc, 1);
	assert_true(t[0] == 10 && t[1] == 20);
	assert_true(isinf(t[2]) && isinf(t[3]));
	/* Step 3 then turns the missing base into inf: the same no credit. */
	assert_true(isinf(t[4]) && isinf(t[5]));
}

static void heldout_over_four_times_the_best_is_inf(void **state)
{
	(void)state;
	/* No variants: only step 2 acts. 41 > 4 x 10, 40 is not. */
	double t[] = {10, 41, 40, NAN};
	apf_score_heldout_rules(t, 4, 1, NULL, NULL, 0);
	assert_true(t[0] == 10);
	assert_true(isinf(t[1]));
	assert_true(t[2] == 40);
	assert_true(isnan(t[3]));
	/* A variant over 4x its best costs its base the credit (step 3). */
	const size_t vc[] = {1}, bc[] = {0};
	double u[] = {10, 10, 11, 50};
	apf_score_heldout_rules(u, 2, 2, vc, bc, 1);
	assert_true(u[0] == 10 && u[1] == 10);
	assert_true(isinf(u[2]) && isinf(u[3]));
}

static void heldout_base_inf_when_variant_inf_or_missing(void **state)
{
	(void)state;
	const size_t vc[] = {1}, bc[] = {0};
	double t[] = {
		10, 20,       /* fine */
		12, INFINITY, /* variant missed */
		11, NAN,      /* variant not run */
	};
	apf_score_heldout_rules(t, 3, 2, vc, bc, 1);
	assert_true(t[0] == 10 && t[1] == 20);
	assert_true(isinf(t[2]));
	assert_true(isinf(t[4]) && isnan(t[5]));
}

static void taus_are_numpy_linspace(void **state)
{
	(void)state;
	double tau[APF_SCORE_POINTS];
	apf_score_taus(tau);
	assert_true(tau[0] == 1.0);
	assert_true(tau[APF_SCORE_POINTS - 1] == 4.0);
	volatile double p = 33.0 * (3.0 / 99.0);
	assert_true(tau[33] == p + 1.0);
	for (int i = 1; i < APF_SCORE_POINTS; i++)
		assert_true(tau[i] > tau[i - 1]);
}

static void trapezoid_score_of_known_profiles(void **state)
{
	(void)state;
	/* y = x over [0, 2]: integral 2, divided by the range 2. */
	const double x[] = {0, 1, 2}, y[] = {0, 1, 2};
	assert_true(fabs(apf_score_integrate(y, x, 3) - 1.0) < 1e-15);
	/* Ratios 1 and 2.5 over two workloads: rho is 0.5 below 2.5 and 1
	 * from there. The jump falls midway between grid points 49 and 50,
	 * so the trapezoid is exact: (0.5 * 1.5 + 1 * 1.5) / 3 = 0.75. */
	const double t[] = {10, 25, 10, 10};
	double ratio[4], rho[2 * APF_SCORE_POINTS], tau[APF_SCORE_POINTS];
	apf_score_taus(tau);
	/* Row 1 sets the best times (10, 10). */
	apf_score_profile(t, 2, 2, ratio, rho);
	assert_true(ratio[0] == 1 && ratio[1] == 2.5);
	assert_true(rho[0] == 0.5 && rho[49] == 0.5 && rho[50] == 1.0);
	assert_true(fabs(apf_score_integrate(rho, tau, APF_SCORE_POINTS) -
			 0.75) < 1e-12);
	assert_true(fabs(apf_score_integrate(&rho[APF_SCORE_POINTS], tau,
					     APF_SCORE_POINTS) -
			 1.0) < 1e-12);
}

static void ties_between_submissions_share_the_credit(void **state)
{
	(void)state;
	/* Two submissions equal on both workloads, a third 2x slower on one
	 * (ratio 2 sits between grid points 32 and 34: 1 + 33h rounds to
	 * just below or above 2, so count points instead of trusting it). */
	const double t[] = {10, 20, 10, 20, 10, 40};
	double ratio[6], rho[3 * APF_SCORE_POINTS], tau[APF_SCORE_POINTS];
	apf_score_taus(tau);
	apf_score_profile(t, 3, 2, ratio, rho);
	for (int i = 0; i < APF_SCORE_POINTS; i++)
		assert_true(rho[i] == 1.0 && rho[APF_SCORE_POINTS + i] == 1.0);
	double s0 = apf_score_integrate(rho, tau, APF_SCORE_POINTS);
	double s1 = apf_score_integrate(&rho[APF_SCORE_POINTS], tau,
					APF_SCORE_POINTS);
	assert_true(s0 == 1.0 && s1 == 1.0);
	assert_true(ratio[5] == 2.0);
	int below = 0;
	for (int i = 0; i < APF_SCORE_POINTS; i++)
		below += tau[i] < 2.0;
	double s2 = apf_score_integrate(&rho[2 * APF_SCORE_POINTS], tau,
					APF_SCORE_POINTS);
	/* below-1 intervals at 0.5, one mixed (0.75), the rest at 1. */
	double want = ((below - 1) * 0.5 + 0.75 + (99 - below) * 1.0) * H / 3;
	assert_true(fabs(s2 - want) < 1e-12);
}

static void missing_logs_get_no_credit(void **state)
{
	(void)state;
	/* Submission 1 has no logs for workload 2; nobody has workload 3. */
	const double t[] = {10, 20, NAN, 10, NAN, NAN};
	double ratio[6], rho[2 * APF_SCORE_POINTS], tau[APF_SCORE_POINTS];
	apf_score_taus(tau);
	apf_score_profile(t, 2, 3, ratio, rho);
	assert_true(isnan(ratio[4]) && isnan(ratio[5]) && isnan(ratio[2]));
	/* Every base workload weighs 1/3, counted or not. */
	assert_true(fabs(apf_score_integrate(rho, tau, APF_SCORE_POINTS) -
			 2.0 / 3) < 1e-12);
	assert_true(fabs(apf_score_integrate(&rho[APF_SCORE_POINTS], tau,
					     APF_SCORE_POINTS) -
			 1.0 / 3) < 1e-12);
}

/* ---- the CSV reader --------------------------------------------------- */

static const struct apf_score_target acc80 = {"accuracy", 1, 0.8, 0};

static void csv_reads_quotes_crlf_bom_and_nan(void **state)
{
	(void)state;
	const char *text =
		"\xef\xbb\xbf\"accumulated_submission_time\",score,"
		"\"note\",\"validation/accuracy\"\r\n"
		"1,10,\"a,\"\"b\"\"\",0.5\r\n"
		"\r\n"
		"2,20,\"two\nlines\",\r\n"
		"3,25,x,nan\r\n"
		"4,30,,\r\n"
		"5,35\r\n"
		"6,40,y,\" 0.85 \"\r\n"
		"7,45,z,0.9\r\n";
	long evals, hit;
	double time;
	assert_apf_ok(apf_score_parse_trial(text, strlen(text), "t.csv",
					    &acc80, &evals, &hit, &time));
	assert_int_equal(evals, 7);
	assert_int_equal(hit, 5);
	/* score, not accumulated_submission_time. */
	assert_true(time == 40);
	/* Lower is better: 0.5 meets 0.6 at once. */
	const struct apf_score_target min = {"accuracy", -1, 0.6, 0};
	assert_apf_ok(apf_score_parse_trial(text, strlen(text), "t.csv", &min,
					    &evals, &hit, &time));
	assert_int_equal(hit, 0);
	assert_true(time == 10);
	/* Only accumulated_submission_time: it is the time. */
	const char *acc_only = "accumulated_submission_time,validation/accuracy\n"
			       "7,0.1\n8,0.81\n";
	assert_apf_ok(apf_score_parse_trial(acc_only, strlen(acc_only), "a.csv",
					    &acc80, &evals, &hit, &time));
	assert_int_equal(hit, 1);
	assert_true(time == 8);
	/* A header alone: no eval, no hit. */
	const char *header = "score,validation/accuracy\n";
	assert_apf_ok(apf_score_parse_trial(header, strlen(header), "h.csv",
					    &acc80, &evals, &hit, &time));
	assert_int_equal(evals, 0);
	assert_int_equal(hit, -1);
	assert_true(isinf(time));
}

/* Rows at or past the budget are no evals: a target met there is late,
 * and the cut ends the text before the first of them. */
static void csv_rows_past_the_budget_are_no_evals(void **state)
{
	(void)state;
	const char *text = "accumulated_submission_time,validation/accuracy\n"
			   "10,0.5\n20,0.7\n40.000000001,0.85\n";
	const size_t before = strlen("accumulated_submission_time,"
				     "validation/accuracy\n10,0.5\n20,0.7\n");
	long evals, hit;
	double time;
	int late;
	size_t cut;
	assert_apf_ok(apf_score_parse_trial_within(text, strlen(text), "b.csv",
						   &acc80, 40, &evals, &hit,
						   &time, &late, &cut));
	assert_int_equal(evals, 2);
	assert_int_equal(hit, -1);
	assert_true(isinf(time));
	assert_int_equal(late, 1);
	assert_int_equal(cut, before);
	/* Exactly at the budget is past it: AlgoPerf evaluates only while
	 * submission time < budget. */
	const char *at = "accumulated_submission_time,validation/accuracy\n"
			 "10,0.5\n40,0.85\n";
	assert_apf_ok(apf_score_parse_trial_within(at, strlen(at), "a.csv",
						   &acc80, 40, &evals, &hit,
						   &time, &late, &cut));
	assert_int_equal(hit, -1);
	assert_int_equal(late, 1);
	/* Met before the budget: counted, and the late row is not late. */
	const char *early = "accumulated_submission_time,validation/accuracy\n"
			    "10,0.81\n41,0.9\n";
	assert_apf_ok(apf_score_parse_trial_within(early, strlen(early), "e.csv",
						   &acc80, 40, &evals, &hit,
						   &time, &late, &cut));
	assert_int_equal(hit, 0);
	assert_true(time == 10);
	assert_int_equal(late, 0);
	assert_int_equal(evals, 1);
	/* No budget (AlgoPerf's logs): every row counts, nothing is cut. */
	assert_apf_ok(apf_score_parse_trial_within(text, strlen(text), "b.csv",
						   &acc80, 0, &evals, &hit,
						   &time, &late, &cut));
	assert_int_equal(hit, 2);
	assert_int_equal(late, 0);
	assert_int_equal(cut, strlen(text));
	/* A quoted cell spanning lines: the cut is at the row's first line. */
	const char *q = "accumulated_submission_time,note,validation/accuracy\n"
			"10,\"a\nb\",0.5\n50,\"c\nd\",0.9\n";
	assert_apf_ok(apf_score_parse_trial_within(q, strlen(q), "q.csv",
						   &acc80, 40, &evals, &hit,
						   &time, &late, &cut));
	assert_int_equal(cut, strlen("accumulated_submission_time,note,"
				     "validation/accuracy\n10,\"a\nb\",0.5\n"));
	assert_int_equal(late, 1);
}

static void expect_csv_error(const char *text, const char *message)
{
	long evals, hit;
	double time;
	assert_int_equal(apf_score_parse_trial(text, strlen(text), "bad.csv",
					       &acc80, &evals, &hit, &time),
			 APF_EINPUT);
	if (strcmp(apf_error_message(), message))
		fail_msg("got '%s', want '%s'", apf_error_message(), message);
}

static void csv_errors_name_file_and_line(void **state)
{
	(void)state;
	expect_csv_error("", "score: bad.csv: empty file (no header line)");
	expect_csv_error("\n\n", "score: bad.csv: empty file (no header line)");
	expect_csv_error("score,validation/loss\n1,2\n",
			 "score: bad.csv:1: no column 'validation/accuracy' "
			 "(the target metric)");
	expect_csv_error("global_step,validation/accuracy\n1,0.9\n",
			 "score: bad.csv:1: no time column ('score' or "
			 "'accumulated_submission_time')");
	expect_csv_error("score,score,validation/accuracy\n",
			 "score: bad.csv:1: column 'score' appears twice");
	expect_csv_error("score,validation/accuracy\n1,0.5\n2,abc\n",
			 "score: bad.csv:3: column 'validation/accuracy': "
			 "'abc' is not a plain decimal number");
	expect_csv_error("score,validation/accuracy\n1x,0.5\n",
			 "score: bad.csv:2: column 'score': '1x' is not a "
			 "plain decimal number");
	expect_csv_error("score,validation/accuracy\n1,0.5,7\n",
			 "score: bad.csv:2: more fields than the 2 columns of "
			 "the header");
	expect_csv_error("score,validation/accuracy\n1,\"0.5\n",
			 "score: bad.csv:2: quoted field never closed");
	expect_csv_error("score,validation/accuracy\n1,0\"5\n",
			 "score: bad.csv:2: quote inside an unquoted field");
	expect_csv_error("score,validation/accuracy\n1,\"0.5\"x\n",
			 "score: bad.csv:2: text after a closing quote");
	/* A quoted newline moves the lines after it. */
	expect_csv_error("score,n,validation/accuracy\n1,\"a\nb\",0.5\n2,,zz\n",
			 "score: bad.csv:4: column 'validation/accuracy': 'zz' "
			 "is not a plain decimal number");
	expect_csv_error("score,validation/accuracy\n,0.9\n",
			 "score: bad.csv:2: column 'score': empty; a number is "
			 "required");
	expect_csv_error("score,validation/accuracy\n-1,0.1\n",
			 "score: bad.csv:2: column 'score': '-1' is negative");
}

/* Each number the scorer must not trust, with the message it gets. */
static void csv_refuses_untrustworthy_numbers(void **state)
{
	(void)state;
	static const struct {
		const char *text, *message;
	} cases[] = {
		/* Syntax: plain decimals only. */
		{"score,validation/accuracy\n0x1p3,0.9\n",
		 "score: bad.csv:2: column 'score': '0x1p3' is not a plain "
		 "decimal number"},
		{"score,validation/accuracy\n1,0x1p-1\n",
		 "score: bad.csv:2: column 'validation/accuracy': '0x1p-1' is "
		 "not a plain decimal number"},
		{"score,validation/accuracy\n+1,0.9\n",
		 "score: bad.csv:2: column 'score': '+1' is not a plain "
		 "decimal number"},
		{"score,validation/accuracy\n1,0.9\n2,0.95x\n",
		 "score: bad.csv:3: column 'validation/accuracy': '0.95x' is "
		 "not a plain decimal number"},
		{"score,validation/accuracy\n1 2,0.9\n",
		 "score: bad.csv:2: column 'score': '1 2' is not a plain "
		 "decimal number"},
		{"score,validation/accuracy\n1.,0.9\n",
		 "score: bad.csv:2: column 'score': '1.' is not a plain "
		 "decimal number"},
		{"score,validation/accuracy\n.5,0.9\n",
		 "score: bad.csv:2: column 'score': '.5' is not a plain "
		 "decimal number"},
		{"score,validation/accuracy\n1e,0.9\n",
		 "score: bad.csv:2: column 'score': '1e' is not a plain "
		 "decimal number"},
		/* Not finite. */
		{"score,validation/accuracy\n1,inf\n",
		 "score: bad.csv:2: column 'validation/accuracy': 'inf' is not "
		 "a finite number"},
		{"score,validation/accuracy\n1,-Infinity\n",
		 "score: bad.csv:2: column 'validation/accuracy': '-Infinity' "
		 "is not a finite number"},
		{"score,validation/accuracy\n1,0.9\nnan,0.95\n",
		 "score: bad.csv:3: column 'score': 'nan' is not a finite "
		 "number"},
		/* Only "nan" and empty mean a missing metric. */
		{"score,validation/accuracy\n1,NaN\n",
		 "score: bad.csv:2: column 'validation/accuracy': 'NaN' is not "
		 "a finite number"},
		{"score,validation/accuracy\n1e999,0.9\n",
		 "score: bad.csv:2: column 'score': '1e999' is not a finite "
		 "number (too large)"},
		/* Clocks and counters: >= 0, present, whole for counters. */
		{"score,validation/accuracy\n-0,0.9\n",
		 "score: bad.csv:2: column 'score': '-0' is negative zero"},
		{"score,total_duration,validation/accuracy\n1,-0.0e0,0.9\n",
		 "score: bad.csv:2: column 'total_duration': '-0.0e0' is "
		 "negative zero"},
		{"score,accumulated_eval_time,validation/accuracy\n1,-2.5,0.9\n",
		 "score: bad.csv:2: column 'accumulated_eval_time': '-2.5' is "
		 "negative"},
		{"accumulated_logging_time,score,validation/accuracy\n"
		 "-1e-3,1,0.9\n",
		 "score: bad.csv:2: column 'accumulated_logging_time': '-1e-3' "
		 "is negative"},
		{"accumulated_submission_time,score,validation/accuracy\n"
		 "-1,1,0.9\n",
		 "score: bad.csv:2: column 'accumulated_submission_time': '-1' "
		 "is negative"},
		{"global_step,score,validation/accuracy\n1.5,1,0.9\n",
		 "score: bad.csv:2: column 'global_step': '1.5' is not a whole "
		 "number"},
		{"global_step,score,validation/accuracy\n,1,0.9\n",
		 "score: bad.csv:2: column 'global_step': empty; a number is "
		 "required"},
		/* A short row leaves its last columns empty. */
		{"score,validation/accuracy,total_duration\n1,0.9\n",
		 "score: bad.csv:2: column 'total_duration': empty; a number "
		 "is required"},
		/* Out of the metric's range. */
		{"score,validation/accuracy\n1,2.5\n",
		 "score: bad.csv:2: column 'validation/accuracy': 2.5 is "
		 "outside [0, 1], the range of accuracy"},
		{"score,validation/accuracy\n1,-0.1\n",
		 "score: bad.csv:2: column 'validation/accuracy': '-0.1' is "
		 "negative"},
		/* Going back in time, or in steps. */
		{"score,validation/accuracy\n10,0.1\n5,0.9\n",
		 "score: bad.csv:3: column 'score' goes back from 10 (line 2) "
		 "to 5"},
		{"global_step,score,validation/accuracy\n10,1,0.1\n\n5,2,0.9\n",
		 "score: bad.csv:4: column 'global_step' goes back from 10 "
		 "(line 2) to 5"},
		{"score,total_duration,validation/accuracy\n1,9,0.1\n2,8,0.2\n",
		 "score: bad.csv:3: column 'total_duration' goes back from 9 "
		 "(line 2) to 8"},
	};
	for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
		expect_csv_error(cases[i].text, cases[i].message);

	/* Losses and error rates are >= 0; ssim may be below 0, not -1. */
	const struct apf_score_target loss = {"loss", -1, 0.5, 0};
	const struct apf_score_target ssim = {"ssim", 1, 0.7, 0};
	const struct apf_score_target ppl = {"ppl", -1, 3, 0};
	const struct {
		const struct apf_score_target *t;
		const char *text, *message;
	} ranged[] = {
		{&loss, "score,validation/loss\n1,-0.25\n",
		 "score: r.csv:2: column 'validation/loss': '-0.25' is "
		 "negative"},
		{&loss, "score,validation/loss\n1,-0\n",
		 "score: r.csv:2: column 'validation/loss': '-0' is negative "
		 "zero"},
		{&ssim, "score,validation/ssim\n1,-1.5\n",
		 "score: r.csv:2: column 'validation/ssim': -1.5 is outside "
		 "[-1, 1], the range of ssim"},
		{&ppl, "score,validation/ppl\n1,0.5\n",
		 "score: r.csv:2: column 'validation/ppl': 0.5 is outside [1, "
		 "inf), the range of ppl"},
	};
	for (size_t i = 0; i < sizeof ranged / sizeof *ranged; i++) {
		long evals, hit;
		double time;
		const char *text = ranged[i].text;
		assert_int_equal(apf_score_parse_trial(text, strlen(text),
						       "r.csv", ranged[i].t,
						       &evals, &hit, &time),
				 APF_EINPUT);
		if (strcmp(apf_error_message(), ranged[i].message))
			fail_msg("got '%s', want '%s'", apf_error_message(),
				 ranged[i].message);
		assert_int_equal(hit, -1);
		assert_true(isinf(time));
	}
}

/* What AlgoPerf and apf write reads as before. */
static void csv_accepts_plain_decimals_and_missing_metrics(void **state)
{
	(void)state;
	const char *text =
		"accumulated_eval_time,accumulated_logging_time,"
		"accumulated_submission_time,global_step,preemption_count,"
		"score,total_duration,validation/accuracy\n"
		"0,0.0,1e-3,0,0,1e-3,12,\n"
		"1.5E+2,0.0,12,10,0,12,200,nan\n"
		/* Equal is not going back. */
		"1.5E+2,0.0,12,10,0,12,200,0.5\n"
		/* The wall clock restarts at a preemption. */
		"151,1e-400,13.000000000,20,1,13.000000000,5,0.79\n"
		"152,1e-400,007.5e1,30,1,75,6,0.8\n"
		"153,1,80,40,1,80,7,0.95\n";
	long evals, hit;
	double time;
	assert_apf_ok(apf_score_parse_trial(text, strlen(text), "g.csv",
					    &acc80, &evals, &hit, &time));
	assert_int_equal(evals, 6);
	assert_int_equal(hit, 4);
	assert_true(time == 75);
	/* SSIM below 0 happens (the v0.5 fastMRI logs have it). */
	const struct apf_score_target ssim = {"ssim", 1, 0.7, 0};
	const char *s = "score,validation/ssim\n1,-0.075\n2,0.72\n";
	assert_apf_ok(apf_score_parse_trial(s, strlen(s), "s.csv", &ssim,
					    &evals, &hit, &time));
	assert_int_equal(hit, 1);
	assert_true(time == 2);
	/* A metric whose range nobody knows: finite is enough. */
	const struct apf_score_target odd = {"f1x", 1, -5, 0};
	const char *o = "score,validation/f1x\n1,-7\n2,-4e3\n3,-5\n";
	assert_apf_ok(apf_score_parse_trial(o, strlen(o), "o.csv", &odd,
					    &evals, &hit, &time));
	assert_int_equal(hit, 2);
	double lo, hi;
	apf_score_metric_range("mean_average_precision", &lo, &hi);
	assert_true(lo == 0 && hi == 1);
	apf_score_metric_range("bleu", &lo, &hi);
	assert_true(lo == 0 && hi == 100);
	apf_score_metric_range("wer", &lo, &hi);
	assert_true(lo == 0 && isinf(hi));
	apf_score_metric_range("f1", &lo, &hi);
	assert_true(isinf(lo) && lo < 0 && isinf(hi));
	/* apf's own workloads' metrics */
	apf_score_metric_range("log_loss", &lo, &hi);
	assert_true(lo == 0 && isinf(hi));
	apf_score_metric_range("auc", &lo, &hi);
	assert_true(lo == 0 && hi == 1);
	apf_score_metric_range("perplexity", &lo, &hi);
	assert_true(lo == 1 && isinf(hi));
	apf_score_metric_range("cross_entropy", &lo, &hi);
	assert_true(lo == 0 && isinf(hi));
	/* an AUC of 1.5 or a negative log loss is refused, not ranked */
	const struct apf_score_target auc = {"auc", 1, 0.8, 0};
	const char *a = "score,validation/auc\n1,0.7\n2,1.5\n3,0.9\n";
	assert_int_equal(apf_score_parse_trial(a, strlen(a), "a.csv", &auc,
					       &evals, &hit, &time),
			 APF_EINPUT);
	const struct apf_score_target ll = {"log_loss", -1, 0.4, 0};
	const char *l = "score,validation/log_loss\n1,0.5\n2,-0.1\n";
	assert_int_equal(apf_score_parse_trial(l, strlen(l), "l.csv", &ll,
					       &evals, &hit, &time),
			 APF_EINPUT);
}

/* ---- the pipeline --------------------------------------------------- */

static void write_trial(const char *root, const char *rel, const char *rows)
{
	char *text;
	assert_true(asprintf(&text, "global_step,score,validation/%s\n%s",
			     strstr(rel, "wb") ? "loss" : "accuracy",
			     rows) > 0);
	char *path;
	assert_true(asprintf(&path, "%s/eval_measurements.csv", rel) > 0);
	testlib_write_str(root, path, text);
	free(path);
	free(text);
}

static const struct apf_score_submission *by_name(const apf_score_result *r,
						  const char *name, size_t *i)
{
	for (*i = 0; *i < r->nsub; (*i)++)
		if (!strcmp(r->sub[*i]->name, name))
			return r->sub[*i];
	fail_msg("no submission %s", name);
	return NULL;
}

/* AlgoPerf layout, two submissions. s1/wa: study 0's trial 2 is faster
 * (12 s) but trial 1 met the target at an earlier eval (50 s); study 1
 * missed; study 2 met at 30 s with equality. s1/wb (a loss) only in study
 * 0, at 20 s. s2/wa: 25 s and 40 s; s2 has no wb logs. */
static char *algoperf_logs(void)
{
	char *root = testlib_tmpdir();
	write_trial(root, "logs/s1/study_0/wa_jax/trial_1", "1,50,0.9\n");
	write_trial(root, "logs/s1/study_0/wa_jax/trial_2",
		    "1,5,0.1\n2,12,0.9\n");
	write_trial(root, "logs/s1/study_1/wa_jax/trial_1", "1,10,0.79\n");
	write_trial(root, "logs/s1/study_2/wa_jax/trial_1", "1,30,0.8\n");
	write_trial(root, "logs/s1/study_0/wb_jax/trial_1",
		    "1,10,0.6\n2,20,0.4\n");
	write_trial(root, "logs/s2/study_0/wa_pytorch/trial_1", "1,25,0.85\n");
	write_trial(root, "logs/s2/study_1/wa_pytorch/trial_1", "1,40,0.85\n");
	/* A trial directory without its CSV, and one outside a workload. */
	testlib_write_str(root, "logs/s2/study_1/wa_pytorch/trial_2/x", "");
	testlib_write_str(root, "logs/s2/study_1/trial_3/eval_measurements.csv",
			  "score\n");
	testlib_write_str(root, "targets.json",
			  "{\"benchmark_version\": \"0.5\",\n"
			  " \"base_workloads\": [\"wa\", \"wb\"],\n"
			  " \"held_out_workloads\": [],\n"
			  " \"workloads\": {\n"
			  "  \"wa\": {\"target_metric_name\": \"accuracy\",\n"
			  "          \"validation_target_value\": 0.8,\n"
			  "          \"step_hint\": 100},\n"
			  "  \"wb\": {\"target_metric_name\": \"loss\",\n"
			  "          \"validation_target_value\": 0.5,\n"
			  "          \"step_hint\": 100}}}\n");
	return root;
}

struct scored {
	apf_score_logs *logs; /* the result points into it */
	apf_score_result *r;
};

static void scored_free(struct scored *s)
{
	apf_score_result_free(s->r);
	apf_score_logs_free(s->logs);
}

/* Scores root/logs_rel; targets from root/targets_rel or root/workloads. */
static int score_dir_flags(struct scored *out, const char *root,
			   const char *logs_rel, const char *targets_rel,
			   const char *heldout_rel, const char *rules,
			   unsigned flags)
{
	apf_score_targets *targets;
	apf_score_heldout *heldout = NULL;
	char *p = apf_path_join(root, logs_rel);
	assert_apf_ok(apf_score_logs_new(&out->logs));
	assert_apf_ok(apf_score_logs_add(out->logs, p));
	free(p);
	p = apf_path_join(root, targets_rel ? targets_rel : "workloads");
	if (targets_rel)
		assert_apf_ok(apf_score_targets_load_json(&targets, p));
	else
		assert_apf_ok(apf_score_targets_from_workloads(&targets, p));
	free(p);
	if (heldout_rel) {
		p = apf_path_join(root, heldout_rel);
		assert_apf_ok(apf_score_heldout_load(&heldout, p));
		free(p);
	}
	out->r = NULL;
	int rc = apf_score_compute(&out->r, out->logs, targets, heldout,
				   apf_score_rules_get(rules), flags);
	apf_score_targets_free(targets);
	apf_score_heldout_free(heldout);
	return rc;
}

static int score_dir(struct scored *out, const char *root,
		     const char *logs_rel, const char *targets_rel,
		     const char *heldout_rel, const char *rules)
{
	return score_dir_flags(out, root, logs_rel, targets_rel, heldout_rel,
			       rules, 0);
}

static int has_warning(const apf_score_result *r, const char *part)
{
	for (size_t i = 0; i < r->nwarnings; i++)
		if (strstr(r->warnings[i], part))
			return 1;
	return 0;
}

static void pipeline_algoperf_rules_take_earliest_eval(void **state)
{
	(void)state;
	char *root = algoperf_logs();
	struct scored s;
	assert_apf_ok(score_dir(&s, root, "logs", "targets.json", NULL,
				"algoperf-0.5"));
	apf_score_result *r = s.r;
	assert_int_equal(r->nsub, 2);
	assert_int_equal(r->nbase, 2);
	assert_int_equal(r->nvar, 0);
	assert_string_equal(r->workloads[0], "wa");
	size_t i1, i2;
	by_name(r, "s1", &i1);
	by_name(r, "s2", &i2);
	/* s1/wa: median of {50, inf, 30}; s2/wa: (25 + 40) / 2. */
	assert_true(r->raw[i1 * 2 + 0] == 50);
	assert_true(r->raw[i1 * 2 + 1] == 20);
	assert_true(r->raw[i2 * 2 + 0] == 32.5);
	assert_true(isnan(r->raw[i2 * 2 + 1]));
	/* s2: wa at ratio 1, wb missing: 0.5 flat. s1: wb at 1, wa at
	 * 50 / 32.5 = 1.538 (between grid points 17 and 18): 17 intervals
	 * at 0.5, one at 0.75, 81 at 1. */
	assert_true(fabs(r->score[i2] - 0.5) < 1e-12);
	assert_true(fabs(r->score[i1] - 90.25 / 99) < 1e-12);
	assert_int_equal(i1, 0); /* ranked first */
	assert_true(has_warning(r, "s2: wa_pytorch: 1 trial directory without "
				   "eval_measurements.csv"));
	assert_true(has_warning(r, "s2: 1 trial directory directly in a study"));
	assert_true(has_warning(r, "s1: wb_jax: 1 study with logs; "
				   "algoperf-0.5 expects 5"));
	scored_free(&s);
	testlib_tmpdir_free(root);
}

static void pipeline_apf_rules_take_fastest_trial(void **state)
{
	(void)state;
	char *root = algoperf_logs();
	struct scored s;
	assert_apf_ok(score_dir(&s, root, "logs", "targets.json", NULL, "apf"));
	apf_score_result *r = s.r;
	size_t i1, i2;
	by_name(r, "s1", &i1);
	by_name(r, "s2", &i2);
	/* s1/wa: median of {12, inf, 30}. */
	assert_true(r->raw[i1 * 2 + 0] == 30);
	assert_true(fabs(r->score[i1] - 1.0) < 1e-12);
	/* s2/wa at 32.5 / 30 = 1.083 (between points 2 and 3). */
	assert_true(fabs(r->score[i2] - 48.25 / 99) < 1e-12);
	/* apf's rules expect no study count. */
	assert_false(has_warning(r, "expects"));
	scored_free(&s);
	testlib_tmpdir_free(root);
}

static void pipeline_reports_parse(void **state)
{
	(void)state;
	char *root = algoperf_logs();
	struct scored s;
	assert_apf_ok(score_dir(&s, root, "logs", "targets.json", NULL,
				"algoperf-0.5"));
	apf_buf b = {0};
	assert_apf_ok(apf_score_format_csv(&b, s.r));
	assert_string_equal(b.data, "submission,score,wa,wb\n"
				    "s1,0.911616,50.000000,20.000000\n"
				    "s2,0.500000,32.500000,\n");
	apf_buf_free(&b);
	assert_apf_ok(apf_score_format_table(&b, s.r));
	assert_non_null(strstr(b.data, "   1  s1          0.9116  50.00  20.00\n"));
	assert_non_null(strstr(b.data, "   2  s2          0.5000  32.50      -\n"));
	/* AlgoPerf logs: nothing to verify, said in one line. */
	assert_non_null(strstr(b.data, "verified: no - AlgoPerf logs hold "
				       "nothing to verify\n"));
	apf_buf_free(&b);
	assert_apf_ok(apf_score_format_json(&b, s.r));
	assert_non_null(strstr(b.data, "\"rules\": \"algoperf-0.5\""));
	assert_non_null(strstr(b.data, "\"wb\": null"));
	apf_buf_free(&b);
	assert_apf_ok(apf_score_format_svg(&b, s.r));
	assert_non_null(strstr(b.data, "data-submission=\"s1\""));
	apf_buf_free(&b);
	scored_free(&s);
	testlib_tmpdir_free(root);
}

/* apf runs, targets from workload.ini, a held-out draw. */
static char *apf_runs(void)
{
	char *root = testlib_tmpdir();
	testlib_write_str(root, "workloads/wa/workload.ini",
			  "[workload]\nname = wa\nmodel = mlp\n"
			  "loss = cross_entropy\nmetric = accuracy\n"
			  "direction = max\nvalidation_target = 0.8\n"
			  "test_target = 0.8\n"
			  "[dataset]\nname = d\npath = data\n"
			  "[model]\nwidth = 4\n"
			  "[budget.cpu]\nmax_runtime_s = 60\n"
			  "eval_period_s = 1\n"
			  "[variant.big]\nwidth = 8\nvalidation_target = 0.7\n");
	testlib_write_str(root, "runs/r1/run.json",
			  "{\"submission\": \"alpha\", \"plan\": {}}");
	write_trial(root, "runs/r1/study_0/wa/trial_1", "1,10,0.85\n");
	/* 0.75 meets the variant's own target (0.7), not the base's. */
	write_trial(root, "runs/r1/study_0/wa_big/trial_1", "1,20,0.75\n");
	testlib_write_str(root, "runs/r2/run.json", "{}");
	write_trial(root, "runs/r2/study_0/wa/trial_1", "1,8,0.85\n");
	testlib_write_str(root, "draw.json",
			  "{\"seed\": \"abc\", \"draws\": "
			  "[{\"base\": \"wa\", \"variant\": \"big\"}]}");
	return root;
}

static void pipeline_apf_runs_with_heldout_draw(void **state)
{
	(void)state;
	char *root = apf_runs();
	struct scored s;
	assert_apf_ok(score_dir(&s, root, "runs", NULL, "draw.json", "apf"));
	apf_score_result *r = s.r;
	assert_int_equal(r->nbase, 1);
	assert_int_equal(r->nvar, 1);
	assert_string_equal(r->workloads[1], "wa_big");
	assert_string_equal(r->variant_base[0], "wa");
	size_t ia, i2;
	by_name(r, "alpha", &ia);
	by_name(r, "r2", &i2);
	assert_true(r->sub[ia]->apf_run);
	assert_true(r->raw[ia * 2 + 1] == 20);
	/* r2 was faster on wa but never ran the variant: no credit. */
	assert_true(r->raw[i2 * 2 + 0] == 8);
	assert_true(isinf(r->final[i2 * 2 + 0]));
	assert_true(fabs(r->score[ia] - 1.0) < 1e-12);
	assert_true(r->score[i2] == 0);
	scored_free(&s);

	/* Without the draw, apf leaves the variant out, and says so. */
	assert_apf_ok(score_dir(&s, root, "runs", NULL, NULL, "apf"));
	r = s.r;
	assert_int_equal(r->nvar, 0);
	by_name(r, "r2", &i2);
	assert_true(fabs(r->score[i2] - 1.0) < 1e-12);
	assert_true(has_warning(r, "wa_big: neither a base workload nor a "
				   "held-out variant (pass --heldout"));
	scored_free(&s);
	testlib_tmpdir_free(root);
}

static void pipeline_algoperf_takes_variants_from_logs(void **state)
{
	(void)state;
	/* AlgoPerf's scorer, given no held-out list, treats every non-base
	 * workload as a variant of the base its name contains. */
	char *root = algoperf_logs();
	write_trial(root, "logs/s1/study_0/wa_big_jax/trial_1", "1,5,0.9\n");
	testlib_write_str(root, "targets2.json",
			  "{\"base_workloads\": [\"wa\", \"wb\"],\n"
			  " \"workloads\": {\n"
			  "  \"wa\": {\"target_metric_name\": \"accuracy\",\n"
			  "          \"validation_target_value\": 0.8},\n"
			  "  \"wa_big\": {\"target_metric_name\": \"accuracy\",\n"
			  "          \"validation_target_value\": 0.8},\n"
			  "  \"wb\": {\"target_metric_name\": \"loss\",\n"
			  "          \"validation_target_value\": 0.5}}}\n");
	struct scored s;
	assert_apf_ok(score_dir(&s, root, "logs", "targets2.json", NULL,
				"algoperf-0.6"));
	assert_int_equal(s.r->nvar, 1);
	size_t i2;
	by_name(s.r, "s2", &i2);
	/* s2 has no wa_big logs: its wa loses the credit. */
	assert_true(isinf(s.r->final[i2 * 3 + 0]));
	assert_true(s.r->score[i2] == 0);
	assert_true(has_warning(s.r, "wa_big: scored as a held-out variant"));
	scored_free(&s);
	testlib_tmpdir_free(root);
}

static void pipeline_input_errors(void **state)
{
	(void)state;
	char *root = algoperf_logs();
	apf_score_logs *logs;
	assert_apf_ok(apf_score_logs_new(&logs));
	char *p = apf_path_join(root, "nope");
	assert_int_equal(apf_score_logs_add(logs, p), APF_EINPUT);
	assert_non_null(strstr(apf_error_message(), "cannot read: No such file"));
	free(p);
	p = apf_path_join(root, "targets.json");
	assert_int_equal(apf_score_logs_add(logs, p), APF_EINPUT);
	assert_non_null(strstr(apf_error_message(), "not a directory"));
	free(p);
	assert_int_equal(apf_score_logs_add(logs, root), APF_EINPUT);
	assert_non_null(strstr(apf_error_message(), "no submission logs here"));
	/* The same submission twice. */
	p = apf_path_join(root, "logs/s1");
	assert_apf_ok(apf_score_logs_add(logs, p));
	assert_int_equal(apf_score_logs_add(logs, p), APF_EINPUT);
	assert_non_null(strstr(apf_error_message(), "names must be unique"));
	free(p);
	apf_score_logs_free(logs);

	/* A CSV that is not one fails the scoring, naming file and line. */
	testlib_write_str(root, "logs/s2/study_0/wa_pytorch/trial_1/"
				"eval_measurements.csv",
			  "score,validation/accuracy\n1,0.5\n2,\"oops\n");
	struct scored s;
	assert_int_equal(score_dir(&s, root, "logs", "targets.json", NULL,
				   "algoperf-0.5"),
			 APF_EINPUT);
	assert_non_null(strstr(apf_error_message(),
			       "wa_pytorch/trial_1/eval_measurements.csv:3: "
			       "quoted field never closed"));
	assert_null(s.r);
	apf_score_logs_free(s.logs);

	/* A metric the rules cannot orient. */
	testlib_write_str(root, "t3.json",
			  "{\"base_workloads\": [\"wa\"], \"workloads\": "
			  "{\"wa\": {\"target_metric_name\": \"ppl\", "
			  "\"validation_target_value\": 3}}}");
	assert_int_equal(score_dir(&s, root, "logs/s1", "t3.json", NULL,
				   "algoperf-0.5"),
			 APF_EINPUT);
	assert_non_null(strstr(apf_error_message(),
			       "do not know whether metric 'ppl'"));
	apf_score_logs_free(s.logs);

	/* Malformed targets and held-out files. */
	apf_score_targets *t;
	testlib_write_str(root, "bad.json", "{\"workloads\": {\"wa\": 3}}");
	p = apf_path_join(root, "bad.json");
	assert_int_equal(apf_score_targets_load_json(&t, p), APF_EINPUT);
	assert_non_null(strstr(apf_error_message(),
			       "bad.json: workloads.wa: not an object"));
	apf_score_heldout *h;
	assert_int_equal(apf_score_heldout_load(&h, p), APF_EINPUT);
	assert_non_null(strstr(apf_error_message(), "an apf draw"));
	free(p);
	testlib_write_str(root, "trunc.json", "{\"workloads\": ");
	p = apf_path_join(root, "trunc.json");
	assert_int_equal(apf_score_targets_load_json(&t, p), APF_EINPUT);
	assert_non_null(strstr(apf_error_message(), "trunc.json: line 1:"));
	free(p);
	testlib_tmpdir_free(root);
}

/* Two submissions, one trial each: b meets the target at 50 s, a's CSV is
 * the text under test. */
static char *two_submissions(const char *a_csv)
{
	char *root = testlib_tmpdir();
	testlib_write_str(root, "logs/a/study_0/w_jax/trial_1/"
				"eval_measurements.csv",
			  a_csv);
	testlib_write_str(root, "logs/b/study_0/w_jax/trial_1/"
				"eval_measurements.csv",
			  "score,validation/accuracy\n50,0.9\n");
	testlib_write_str(root, "targets.json",
			  "{\"base_workloads\": [\"w\"], \"workloads\": "
			  "{\"w\": {\"target_metric_name\": \"accuracy\", "
			  "\"validation_target_value\": 0.8}}}");
	return root;
}

/* Each refusal names file and line; --strict fails on it; without it the
 * trial never meets its target. Read leniently (as before), each CSV
 * would meet the target before b's 50 s and win. */
static void pipeline_refused_trial_never_meets_its_target(void **state)
{
	(void)state;
	static const struct {
		const char *csv;
		long line;
		const char *why;
	} cases[] = {
		{"score,validation/accuracy\n0x1p3,0.9\n", 2,
		 "column 'score': '0x1p3' is not a plain decimal number"},
		{"score,validation/accuracy\n-0,0.9\n", 2,
		 "column 'score': '-0' is negative zero"},
		{"score,total_duration,validation/accuracy\n1,-5,0.9\n", 2,
		 "column 'total_duration': '-5' is negative"},
		{"score,validation/accuracy\n1,inf\n", 2,
		 "column 'validation/accuracy': 'inf' is not a finite number"},
		{"score,validation/accuracy\n1,0.9\nnan,0.95\n", 3,
		 "column 'score': 'nan' is not a finite number"},
		{"score,validation/accuracy\n1,2.5\n", 2,
		 "column 'validation/accuracy': 2.5 is outside [0, 1], the "
		 "range of accuracy"},
		{"score,validation/accuracy\n10,0.1\n5,0.9\n", 3,
		 "column 'score' goes back from 10 (line 2) to 5"},
		{"global_step,score,validation/accuracy\n10,1,0.1\n5,2,0.9\n", 3,
		 "column 'global_step' goes back from 10 (line 2) to 5"},
		{"score,validation/accuracy\n1,0.9\n2,0.9x\n", 3,
		 "column 'validation/accuracy': '0.9x' is not a plain decimal "
		 "number"},
	};
	for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
		char *root = two_submissions(cases[i].csv);
		char *csv = apf_path_join(root, "logs/a/study_0/w_jax/trial_1/"
						"eval_measurements.csv");
		char *where;
		assert_true(asprintf(&where, "%s:%ld: %s", csv, cases[i].line,
				     cases[i].why) > 0);
		struct scored s;
		assert_apf_ok(score_dir(&s, root, "logs", "targets.json", NULL,
					"apf"));
		size_t ia, ib;
		by_name(s.r, "a", &ia);
		by_name(s.r, "b", &ib);
		assert_true(isinf(s.r->raw[ia]));
		assert_true(s.r->score[ia] == 0);
		assert_true(fabs(s.r->score[ib] - 1.0) < 1e-12);
		assert_int_equal(s.r->nwarnings, 1);
		char *want;
		assert_true(asprintf(&want, "%s; the trial counts as never "
					    "meeting its target",
				     where) > 0);
		if (strcmp(s.r->warnings[0], want))
			fail_msg("got '%s', want '%s'", s.r->warnings[0], want);
		free(want);
		scored_free(&s);

		assert_int_equal(score_dir_flags(&s, root, "logs",
						 "targets.json", NULL, "apf",
						 APF_SCORE_STRICT),
				 APF_EINPUT);
		assert_null(s.r);
		assert_true(asprintf(&want, "score: %s", where) > 0);
		if (strcmp(apf_error_message(), want))
			fail_msg("got '%s', want '%s'", apf_error_message(),
				 want);
		free(want);
		apf_score_logs_free(s.logs);
		free(where);
		free(csv);
		testlib_tmpdir_free(root);
	}

	/* The same layout with a good CSV: a wins, strict or not. */
	char *root = two_submissions("score,validation/accuracy\n1,0.5\n"
				     "2,0.9\n");
	for (int strict = 0; strict < 2; strict++) {
		struct scored s;
		assert_apf_ok(score_dir_flags(&s, root, "logs", "targets.json",
					      NULL, "apf",
					      strict ? APF_SCORE_STRICT : 0));
		size_t ia, ib;
		by_name(s.r, "a", &ia);
		by_name(s.r, "b", &ib);
		assert_true(s.r->raw[ia] == 2);
		assert_true(fabs(s.r->score[ia] - 1.0) < 1e-12);
		/* 50 / 2 = 25 > 4: no credit. */
		assert_true(s.r->score[ib] == 0);
		assert_int_equal(s.r->nwarnings, 0);
		scored_free(&s);
	}
	testlib_tmpdir_free(root);
}

static void expect_strict_error(const char *root, const char *targets,
				const char *rules, const char *message)
{
	struct scored s;
	assert_int_equal(score_dir_flags(&s, root, "logs", targets, NULL, rules,
					 APF_SCORE_STRICT),
			 APF_EINPUT);
	if (strcmp(apf_error_message(), message))
		fail_msg("got '%s', want '%s'", apf_error_message(), message);
	assert_null(s.r);
	apf_score_logs_free(s.logs);
}

/* The counts the scorer warns about are errors under --strict. */
static void pipeline_strict_counts_are_errors(void **state)
{
	(void)state;
	char *root = algoperf_logs();
	expect_strict_error(root, "targets.json", "algoperf-0.5",
			    "score: s1: wa_jax: 3 studies with logs; "
			    "algoperf-0.5 expects 5");
	testlib_tmpdir_free(root);

	root = two_submissions("score,validation/accuracy\n1,0.9\n");
	testlib_write_str(root, "logs/b/study_0/w_jax/trial_2/x", "");
	expect_strict_error(root, "targets.json", "apf",
			    "score: b: w_jax: 1 trial directory without "
			    "eval_measurements.csv");
	testlib_tmpdir_free(root);

	root = two_submissions("score,validation/accuracy\n1,0.9\n");
	testlib_write_str(root, "t2.json",
			  "{\"base_workloads\": [\"v\", \"w\"], \"workloads\": "
			  "{\"w\": {\"target_metric_name\": \"accuracy\", "
			  "\"validation_target_value\": 0.8}, "
			  "\"v\": {\"target_metric_name\": \"accuracy\", "
			  "\"validation_target_value\": 0.8}}}");
	expect_strict_error(root, "t2.json", "apf",
			    "score: v: no submission has logs for this base "
			    "workload");
	/* Without --strict the same is a warning, and v is left out of the
	 * profile: a scores 1, not 1/2. */
	struct scored s;
	assert_apf_ok(score_dir(&s, root, "logs", "t2.json", NULL, "apf"));
	assert_true(has_warning(s.r, "v: no submission has logs for this base "
				     "workload; left out of the profile"));
	assert_int_equal(s.r->nbase, 1);
	assert_string_equal(s.r->workloads[0], "w");
	size_t ia;
	by_name(s.r, "a", &ia);
	assert_true(fabs(s.r->score[ia] - 1.0) < 1e-12);
	scored_free(&s);
	testlib_tmpdir_free(root);

	/* Five studies as v0.5 expects, but one trial each. */
	root = testlib_tmpdir();
	for (int k = 0; k < 5; k++) {
		char rel[64];
		snprintf(rel, sizeof rel, "logs/s/study_%d/w_jax/trial_1", k);
		write_trial(root, rel, "1,10,0.9\n");
	}
	testlib_write_str(root, "targets.json",
			  "{\"base_workloads\": [\"w\"], \"workloads\": "
			  "{\"w\": {\"target_metric_name\": \"accuracy\", "
			  "\"validation_target_value\": 0.8}}}");
	expect_strict_error(root, "targets.json", "algoperf-0.5",
			    "score: s: w_jax: 5 studies with other than 5 "
			    "logged trials");
	testlib_tmpdir_free(root);
}

/* AlgoPerf's current targets format: the lists and the version come from
 * the file, and the version chooses the rules. */
static void targets_current_format_chooses_the_rules(void **state)
{
	(void)state;
	char *root = testlib_tmpdir();
	static const char *const versions[] = {"0.5", "0.6", "0.7"};
	for (size_t i = 0; i < 3; i++) {
		char *text;
		assert_true(asprintf(&text,
				     "{\"_comment\": \"x\", "
				     "\"benchmark_version\": \"%s\", "
				     "\"base_workloads\": [\"wa\", \"wb\"], "
				     "\"held_out_workloads\": [\"wa_v\"], "
				     "\"workloads\": {"
				     "\"wa\": {\"target_metric_name\": "
				     "\"accuracy\", \"validation_target_value\": "
				     "0.8, \"step_hint\": 10}, "
				     "\"wa_v\": {\"target_metric_name\": "
				     "\"accuracy\", \"validation_target_value\": "
				     "0.7, \"step_hint\": 10}, "
				     "\"wb\": {\"target_metric_name\": \"loss\", "
				     "\"validation_target_value\": 1, "
				     "\"step_hint\": 20}}}",
				     versions[i]) > 0);
		testlib_write_str(root, "t.json", text);
		free(text);
		char *p = apf_path_join(root, "t.json");
		apf_score_targets *t;
		assert_apf_ok(apf_score_targets_load_json(&t, p));
		assert_string_equal(apf_score_targets_version(t), versions[i]);
		size_t nb, nh;
		const char *const *b = apf_score_targets_base(t, &nb);
		const char *const *h = apf_score_targets_heldout(t, &nh);
		assert_int_equal(nb, 2);
		assert_string_equal(b[1], "wb");
		assert_int_equal(nh, 1);
		assert_string_equal(h[0], "wa_v");
		struct apf_score_target tg;
		assert_apf_ok(apf_score_targets_find(
			&tg, NULL, t, apf_score_rules_get("algoperf-0.6"), "wb"));
		assert_true(tg.validation == 1 && tg.direction == -1);
		const apf_score_rules *r = NULL;
		int rc = apf_score_targets_rules(&r, t);
		if (i < 2) {
			assert_apf_ok(rc);
			assert_ptr_equal(r, apf_score_rules_get(
						    i ? "algoperf-0.6"
						      : "algoperf-0.5"));
		} else {
			assert_int_equal(rc, APF_EINPUT);
			assert_null(r);
			char *want;
			assert_true(asprintf(&want, "%s: benchmark_version: "
						    "'0.7' is not a version "
						    "apf can score",
					     p) > 0);
			assert_non_null(strstr(apf_error_message(), want));
			free(want);
		}
		apf_score_targets_free(t);
		free(p);
	}
	/* No version: no rules from the file. */
	testlib_write_str(root, "t.json",
			  "{\"workloads\": {\"w\": {\"target_metric_name\": "
			  "\"accuracy\", \"validation_target_value\": 0.8}}}");
	char *p = apf_path_join(root, "t.json");
	apf_score_targets *t;
	assert_apf_ok(apf_score_targets_load_json(&t, p));
	const apf_score_rules *r = apf_score_rules_get("apf");
	assert_apf_ok(apf_score_targets_rules(&r, t));
	assert_null(r);
	apf_score_targets_free(t);
	/* A key repeated is refused by the reader. */
	testlib_write_str(root, "t.json",
			  "{\"workloads\": {\"w\": {\"target_metric_name\": "
			  "\"accuracy\", \"validation_target_value\": 0.8, "
			  "\"validation_target_value\": 0.9}}}");
	assert_int_equal(apf_score_targets_load_json(&t, p), APF_EINPUT);
	assert_non_null(strstr(apf_error_message(), "duplicate object key"));
	free(p);
	testlib_tmpdir_free(root);
}

static void base_of_variants(void **state)
{
	(void)state;
	const char *const bases[] = {"imagenet_resnet", "imagenet", "wmt",
				     "mlp"};
	assert_string_equal(apf_score_base_of("imagenet_resnet_gelu", bases, 4),
			    "imagenet_resnet");
	assert_string_equal(apf_score_base_of("wmt_glu_tanh", bases, 4), "wmt");
	/* AlgoPerf's fallback: the first base the name contains. */
	assert_string_equal(apf_score_base_of("fmnist_mlp2", bases, 4), "mlp");
	assert_null(apf_score_base_of("ogbg_silu", bases, 4));
	apf_score_heldout *h;
	assert_apf_ok(apf_score_heldout_new(&h, "draw"));
	assert_apf_ok(apf_score_heldout_add(h, "mlp", "gelu"));
	assert_apf_ok(apf_score_heldout_add(h, "wmt", "wmt_post_ln"));
	assert_string_equal(h->v[0].variant, "mlp_gelu");
	assert_string_equal(h->v[1].variant, "wmt_post_ln");
	assert_int_equal(apf_score_heldout_add(h, "mlp", "mlp_gelu"),
			 APF_EINPUT);
	apf_score_heldout_free(h);
}

/* A held-out file of 100,000 draws reads in a moment and keeps its order;
 * a name listed twice is found however far apart. The duplicate check was
 * pairwise, so this took minutes (its failure mode is the runner's
 * timeout). */
static void heldout_large_file_reads_in_linear_time(void **state)
{
	(void)state;
	char *dir = testlib_tmpdir();
	enum { N = 100000 };
	apf_buf b = {0};
	for (int dup = 0; dup < 2; dup++) {
		b.len = 0;
		assert_int_equal(apf_buf_puts(&b, "{\"seed\": \"1\", \"draws\": ["), 0);
		for (int i = 0; i < N; i++)
			assert_int_equal(apf_buf_printf(&b, "%s{\"base\": \"w%06d\", "
							"\"variant\": \"v\"}",
							i ? ", " : "",
							dup && i == N - 1 ? 7 : N - i),
					 0);
		assert_int_equal(apf_buf_puts(&b, "]}\n"), 0);
		testlib_write(dir, "draw.json", b.data, b.len, 0644);
		char *p = apf_path_join(dir, "draw.json");
		apf_score_heldout *h = NULL;
		int rc = apf_score_heldout_load(&h, p);
		if (dup) {
			assert_int_equal(rc, APF_EINPUT);
			assert_non_null(strstr(apf_error_message(),
					       "variant w000007_v is listed twice"));
		} else {
			assert_apf_ok(rc);
			assert_int_equal(h->n, N);
			assert_string_equal(h->v[0].variant, "w100000_v");
			assert_string_equal(h->v[N - 1].base, "w000001");
		}
		apf_score_heldout_free(h);
		free(p);
	}
	apf_buf_free(&b);
	testlib_tmpdir_free(dir);
}

/* ---- seconds, the SVG, apf runs' own account ----------------------------- */

static void seconds_keep_four_significant_digits(void **state)
{
	(void)state;
	char b[48];
	const struct {
		double t;
		int sig, dec;
		const char *want;
	} cases[] = {
		/* The table: 0.978 s and 0.999 s told apart. */
		{0.978, 4, 0, "0.9780"},
		{0.999, 4, 0, "0.9990"},
		{158.4, 4, 0, "158.4"},
		{69.5, 4, 0, "69.50"},
		{1234.6, 4, 0, "1235"},
		{12345.6, 4, 0, "12346"},
		{0.0001234, 4, 0, "0.0001234"},
		{1.0, 4, 0, "1.000"},
		{10.0, 4, 0, "10.00"},
		{0.1, 4, 0, "0.1000"},
		{0, 4, 0, "0"},
		/* The CSV: 6 decimals at least, and 6 significant digits. */
		{158.4, 6, 6, "158.400000"},
		{0.000978, 6, 6, "0.000978000"},
		{50, 6, 6, "50.000000"},
	};
	for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
		apf_score_format_seconds(b, sizeof b, cases[i].t, cases[i].sig,
					 cases[i].dec);
		assert_string_equal(b, cases[i].want);
	}
	apf_score_format_seconds(b, sizeof b, INFINITY, 4, 0);
	assert_string_equal(b, "inf");
}

/* The value of attribute name in the first element of tag at or after
 * from; the element's end in *end. */
static double svg_attr(const char *from, const char *tag, const char *name,
		       const char **end, char *text, size_t size)
{
	const char *e = strstr(from, tag);
	assert_non_null(e);
	char key[64];
	snprintf(key, sizeof key, " %s=\"", name);
	const char *a = strstr(e, key);
	const char *close = strchr(e, '>');
	assert_non_null(a);
	assert_true(a < close);
	a += strlen(key);
	const char *q = strchr(a, '"');
	if (text)
		snprintf(text, size, "%.*s", (int)(q - a), a);
	if (end)
		*end = close;
	return strtod(a, NULL);
}

static void svg_has_headroom_and_a_dash_pattern_per_curve(void **state)
{
	(void)state;
	/* Two submissions with the same times: both profiles are 1 from
	 * tau = 1 on, one on top of the other. */
	char *root = testlib_tmpdir();
	write_trial(root, "logs/s1/study_0/wa_jax/trial_1", "1,10,0.9\n");
	write_trial(root, "logs/s2/study_0/wa_jax/trial_1", "1,10,0.9\n");
	testlib_write_str(root, "targets.json",
			  "{\"base_workloads\": [\"wa\"], \"workloads\": "
			  "{\"wa\": {\"target_metric_name\": \"accuracy\", "
			  "\"validation_target_value\": 0.8}}}");
	struct scored s;
	assert_apf_ok(score_dir(&s, root, "logs", "targets.json", NULL,
				"algoperf-0.6"));
	apf_buf b = {0};
	assert_apf_ok(apf_score_format_svg(&b, s.r));
	/* The plot's frame. */
	const char *frame = strstr(b.data, "<rect x=");
	assert_non_null(frame);
	double top = svg_attr(frame, "<rect", "y", NULL, NULL, 0);
	double height = svg_attr(frame, "<rect", "height", NULL, NULL, 0);
	char dash[2][64], d[256];
	const char *at = b.data;
	for (int k = 0; k < 2; k++) {
		const char *path = strstr(at, "<path class=\"profile\"");
		assert_non_null(path);
		svg_attr(path, "<path", "stroke-dasharray", NULL, dash[k],
			 sizeof dash[k]);
		svg_attr(path, "<path", "d", &at, d, sizeof d);
		/* "M<x> <y> ...": rho = 1 from the start. */
		double y = strtod(strchr(d, ' ') + 1, NULL);
		assert_true(y > top + 0.03 * height);
		assert_true(y < top + height);
	}
	/* Curves on top of each other still show each. */
	assert_string_not_equal(dash[0], dash[1]);
	/* The legend draws each curve's pattern. */
	char legend[64];
	const char *l = strstr(b.data, "<line class=\"legend\"");
	assert_non_null(l);
	svg_attr(l, "<line", "stroke-dasharray", &l, legend, sizeof legend);
	assert_string_equal(legend, dash[0]);
	svg_attr(l, "<line", "stroke-dasharray", NULL, legend, sizeof legend);
	assert_string_equal(legend, dash[1]);
	apf_buf_free(&b);
	scored_free(&s);
	testlib_tmpdir_free(root);
}

static void hardware_differences_name_field_and_values(void **state)
{
	(void)state;
	struct apf_score_hardware a = {"cpu", "AMD EPYC", 2, 2, "", 0},
				  b = {"cpu", "AMD EPYC", 2, 1, "", 0},
				  c = {"cpu", "Intel Xeon", 2, 2, "", 0},
				  u = {NULL, NULL, -1, -1, NULL, -1};
	const struct apf_score_hardware *same[] = {&a, &a};
	const char *names[] = {"x", "y", "z"};
	char **d;
	size_t n;
	assert_apf_ok(apf_score_hardware_compare(&d, &n, names, same, 2));
	assert_int_equal(n, 0);
	free(d);
	const struct apf_score_hardware *three[] = {&a, &b, &c};
	assert_apf_ok(apf_score_hardware_compare(&d, &n, names, three, 3));
	assert_int_equal(n, 2);
	assert_string_equal(d[0], "runs differ in cpu.model (x: AMD EPYC; y: "
				  "AMD EPYC; z: Intel Xeon): time-to-target is "
				  "comparable only on the same hardware");
	assert_string_equal(d[1], "runs differ in threads (x: 2; y: 1; z: 2): "
				  "time-to-target is comparable only on the "
				  "same hardware");
	for (size_t i = 0; i < n; i++)
		free(d[i]);
	free(d);
	/* A run that does not say is not taken to match. */
	const struct apf_score_hardware *unknown[] = {&a, &u};
	assert_apf_ok(apf_score_hardware_compare(&d, &n, names, unknown, 2));
	assert_int_equal(n, 6);
	assert_non_null(strstr(d[4], "gpu.model (x: none; y: unknown)"));
	for (size_t i = 0; i < n; i++)
		free(d[i]);
	free(d);
	apf_buf t = {0};
	assert_apf_ok(apf_score_hardware_describe(&t, &a));
	assert_string_equal(t.data, "cpu AMD EPYC (2 cores), 2 threads, no GPU");
	apf_buf_free(&t);
}

#define RUN_JSON                                                               \
	"{\"submission\": \"opt\", \"device\": \"cpu\", \"threads\": 2, "      \
	"\"plan\": {\"units\": ["                                              \
	"{\"workload\": \"wa\", \"variant\": \"base\", \"study\": 0, "         \
	"\"trial\": 1},"                                                       \
	"{\"workload\": \"wa\", \"variant\": \"base\", \"study\": 0, "         \
	"\"trial\": 2},"                                                       \
	"{\"workload\": \"wa\", \"variant\": \"base\", \"study\": 1, "         \
	"\"trial\": 1},"                                                       \
	"{\"workload\": \"wa\", \"variant\": \"big\", \"study\": 0, "          \
	"\"trial\": 1}]},"                                                     \
	"\"environment\": {\"cpu\": {\"model\": \"AMD EPYC\", \"cores\": 2}, " \
	"\"gpus\": []}}"

static void append(apf_runlog *l, const char *event, const char *fields)
{
	json_error_t err;
	json_t *f = json_loads(fields, 0, &err);
	assert_non_null(f);
	assert_apf_ok(apf_runlog_append(l, 1, event, f, 0));
	json_decref(f);
}

/* A unit's trial_start, with the fields the scorer reads. */
static void trial_start(apf_runlog *l, long study, const char *variant)
{
	char f[256];
	snprintf(f, sizeof f,
		 "{\"unit\": \"study_%ld/wa%s%s/trial_1\", \"workload\": "
		 "\"wa\", \"variant\": \"%s\", \"study\": %ld, \"trial\": 1}",
		 study, strcmp(variant, "base") ? "_" : "",
		 strcmp(variant, "base") ? variant : "", variant, study);
	append(l, "trial_start", f);
}

static void run_account_from_run_json_and_log(void **state)
{
	(void)state;
	char *root = testlib_tmpdir();
	testlib_write_str(root, "run/run.json", RUN_JSON);
	/* Study 0's trial 1 ended, study 1's failed with a fault, the
	 * variant's was interrupted; study 0's trial 2 never started. */
	char *run = apf_path_join(root, "run"),
	     *log = apf_path_join(run, "log.jsonl");
	apf_runlog *l;
	assert_apf_ok(apf_runlog_create(&l, log));
	append(l, "run_start", "{}");
	trial_start(l, 0, "base");
	append(l, "trial_end", "{\"unit\": \"study_0/wa/trial_1\", "
			       "\"reason\": \"targets\", \"failed\": false}");
	trial_start(l, 1, "base");
	append(l, "sandbox_fault", "{\"unit\": \"study_1/wa/trial_1\", "
				   "\"kind\": \"syscall\"}");
	append(l, "trial_end", "{\"unit\": \"study_1/wa/trial_1\", "
			       "\"reason\": \"fault\", \"failed\": true}");
	trial_start(l, 0, "big");
	assert_apf_ok(apf_runlog_close(l));
	write_trial(root, "run/study_0/wa/trial_1", "1,10,0.9\n");
	write_trial(root, "run/study_1/wa/trial_1", "1,10,0.1\n");
	write_trial(root, "run/study_0/wa_big/trial_1", "1,10,0.1\n");

	apf_score_run *r;
	assert_apf_ok(apf_score_read_run(&r, run));
	assert_true(r->plan_known);
	assert_true(r->log_found);
	assert_null(r->log_error);
	assert_false(r->ended);
	assert_int_equal(r->nplanned, 4);
	assert_int_equal(r->nunits, 4);
	assert_string_equal(r->units[0].name, "study_0/wa/trial_1");
	assert_int_equal(r->units[0].state, APF_SCORE_UNIT_ENDED);
	assert_int_equal(r->units[1].state, APF_SCORE_UNIT_NOT_RUN);
	assert_false(r->units[1].has_csv);
	assert_int_equal(r->units[2].state, APF_SCORE_UNIT_FAILED);
	assert_string_equal(r->units[2].reason, "fault");
	assert_string_equal(r->units[2].fault, "syscall");
	assert_string_equal(r->units[3].dir_name, "wa_big");
	assert_int_equal(r->units[3].state, APF_SCORE_UNIT_INTERRUPTED);
	assert_string_equal(r->hw.cpu_model, "AMD EPYC");
	assert_int_equal(r->hw.threads, 2);
	assert_int_equal(r->hw.gpus, 0);
	apf_score_run_free(r);

	/* The scorer says all of it, and --strict refuses it. */
	testlib_write_str(root, "workloads/wa/workload.ini",
			  "[workload]\nname = wa\nmodel = mlp\n"
			  "loss = cross_entropy\nmetric = accuracy\n"
			  "direction = max\nvalidation_target = 0.8\n"
			  "test_target = 0.8\n[dataset]\nname = d\npath = data\n"
			  "[model]\nwidth = 4\n[budget.cpu]\nmax_runtime_s = 60\n"
			  "eval_period_s = 1\n[variant.big]\nwidth = 8\n");
	struct scored s;
	assert_apf_ok(score_dir(&s, root, "run", NULL, NULL, "apf"));
	assert_true(has_warning(s.r, "opt: 1 of the plan's 4 units has no "
				     "eval_measurements.csv "
				     "(study_0/wa/trial_2)"));
	assert_true(has_warning(s.r, "opt: incomplete: the log ends without "
				     "run_end (the run was interrupted or is "
				     "still running); 1 unit did not end: "
				     "study_0/wa_big/trial_1"));
	assert_true(has_warning(s.r, "opt: 1 unit failed: study_1/wa/trial_1 "
				     "(fault: syscall)"));
	/* Its one trial that met the target met it at its first eval: the
	 * time is the eval's, which is said. */
	assert_true(has_warning(s.r, "opt: wa: every trial that met the "
				     "target (1) met it at its first eval: "
				     "the times are when that eval came, not "
				     "how fast they trained (a shorter eval "
				     "period would tell them apart)"));
	/* wa: study 0 met at 10 s, study 1 failed: the median is inf, and
	 * the failed unit is why. */
	assert_true(isinf(s.r->final[0]));
	assert_true(s.r->early[0]);
	apf_buf b = {0};
	assert_apf_ok(apf_score_format_table(&b, s.r));
	assert_non_null(strstr(b.data, " inf!\n"));
	assert_non_null(strstr(b.data, "\n!: a unit behind it stopped early"));
	assert_non_null(strstr(b.data, "verified: no - 1 apf run scored "
				       "unverified"));
	assert_non_null(strstr(b.data, "hardware: cpu AMD EPYC (2 cores), 2 "
				       "threads, no GPU\n"));
	assert_non_null(strstr(b.data, "\nwarnings (5):\n  wa_big: neither a "
				       "base workload nor a held-out variant "
				       "(pass --heldout to score variants); "
				       "ignored\n  opt: 1 of the plan"));
	apf_buf_free(&b);
	scored_free(&s);
	assert_int_equal(score_dir_flags(&s, root, "run", NULL, NULL, "apf",
					 APF_SCORE_STRICT),
			 APF_EINPUT);
	assert_string_equal(apf_error_message(),
			    "score: opt: 1 of the plan's 4 units has no "
			    "eval_measurements.csv (study_0/wa/trial_2)");
	apf_error_clear();
	scored_free(&s);
	free(log);
	free(run);
	testlib_tmpdir_free(root);
}

static void excluded_runs_are_listed_not_ranked(void **state)
{
	(void)state;
	char *root = apf_runs();
	char *p = apf_path_join(root, "runs");
	apf_score_logs *logs;
	assert_apf_ok(apf_score_logs_new(&logs));
	assert_apf_ok(apf_score_logs_add(logs, p));
	assert_int_equal(logs->n, 2);
	size_t i = strcmp(logs->s[0].name, "alpha") ? 1 : 0;
	assert_apf_ok(apf_score_logs_exclude(logs, i, "check 3 (timing): x"));
	assert_int_equal(logs->n, 1);
	assert_string_equal(logs->s[0].name, "r2");
	logs->s[0].verified = APF_SCORE_VERIFIED;
	apf_score_targets *t;
	char *w = apf_path_join(root, "workloads");
	assert_apf_ok(apf_score_targets_from_workloads(&t, w));
	apf_score_result *r;
	assert_apf_ok(apf_score_compute(&r, logs, t, NULL,
					apf_score_rules_get("apf"),
					APF_SCORE_VERIFY));
	assert_int_equal(r->nsub, 1);
	assert_true(has_warning(r, "alpha: not verified: check 3 (timing): x"));
	apf_buf b = {0};
	assert_apf_ok(apf_score_format_table(&b, r));
	assert_non_null(strstr(b.data, "verified: 1 apf run (apf verify's "
				       "checks, no re-evaluation or replay); 1 "
				       "failed, not ranked\n"));
	assert_non_null(strstr(b.data, "\nnot ranked (1):\n  alpha: not "
				       "verified: check 3 (timing): x\n"));
	apf_buf_free(&b);
	assert_apf_ok(apf_score_format_json(&b, r));
	assert_non_null(strstr(b.data, "\"excluded\": [\n    {\n      \"name\": "
				       "\"alpha\""));
	apf_buf_free(&b);
	apf_score_result_free(r);
	/* Labels are names; a duplicate is refused naming it. */
	char *r1 = apf_path_join(p, "r1"), *r2 = apf_path_join(p, "r2");
	assert_int_equal(apf_score_logs_add_as(logs, r1, "r2"), APF_EINPUT);
	assert_non_null(strstr(apf_error_message(), "submission 'r2' is also"));
	assert_apf_ok(apf_score_logs_add_as(logs, r1, "first"));
	assert_int_equal(apf_score_logs_add_as(logs, r2, "first"), APF_EINPUT);
	assert_non_null(strstr(apf_error_message(),
			       "label 'first' is also "));
	assert_int_equal(apf_score_logs_add_as(logs, p, "all"), APF_EINPUT);
	assert_non_null(strstr(apf_error_message(), "a label names one "
						    "submission"));
	apf_error_clear();
	free(r1);
	free(r2);
	free(w);
	free(p);
	apf_score_targets_free(t);
	apf_score_logs_free(logs);
	testlib_tmpdir_free(root);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(median_takes_infinite_studies_in),
		cmocka_unit_test(csv_rows_past_the_budget_are_no_evals),
		cmocka_unit_test(first_hit_follows_metric_direction),
		cmocka_unit_test(rules_know_metric_directions),
		cmocka_unit_test(best_trial_depends_on_the_rules),
		cmocka_unit_test(heldout_variant_inf_when_base_inf_or_missing),
		cmocka_unit_test(heldout_over_four_times_the_best_is_inf),
		cmocka_unit_test(heldout_base_inf_when_variant_inf_or_missing),
		cmocka_unit_test(taus_are_numpy_linspace),
		cmocka_unit_test(trapezoid_score_of_known_profiles),
		cmocka_unit_test(ties_between_submissions_share_the_credit),
		cmocka_unit_test(missing_logs_get_no_credit),
		cmocka_unit_test(csv_reads_quotes_crlf_bom_and_nan),
		cmocka_unit_test(csv_errors_name_file_and_line),
		cmocka_unit_test(csv_refuses_untrustworthy_numbers),
		cmocka_unit_test(csv_accepts_plain_decimals_and_missing_metrics),
		cmocka_unit_test(pipeline_algoperf_rules_take_earliest_eval),
		cmocka_unit_test(pipeline_apf_rules_take_fastest_trial),
		cmocka_unit_test(pipeline_reports_parse),
		cmocka_unit_test(pipeline_apf_runs_with_heldout_draw),
		cmocka_unit_test(pipeline_algoperf_takes_variants_from_logs),
		cmocka_unit_test(pipeline_input_errors),
		cmocka_unit_test(pipeline_refused_trial_never_meets_its_target),
		cmocka_unit_test(pipeline_strict_counts_are_errors),
		cmocka_unit_test(targets_current_format_chooses_the_rules),
		cmocka_unit_test(base_of_variants),
		cmocka_unit_test(heldout_large_file_reads_in_linear_time),
		cmocka_unit_test(seconds_keep_four_significant_digits),
		cmocka_unit_test(svg_has_headroom_and_a_dash_pattern_per_curve),
		cmocka_unit_test(hardware_differences_name_field_and_values),
		cmocka_unit_test(run_account_from_run_json_and_log),
		cmocka_unit_test(excluded_runs_are_listed_not_ranked),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
