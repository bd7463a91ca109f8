/*
 * test_baselines.c: each baseline in submissions/baselines, compiled with the
 * runner's fixed flags and driven through the public ABI on a known
 * quadratic, matches a double-precision reference implementation of its
 * update rule at every step (tolerance: 2e-5 relative + 2e-6 absolute, what
 * float32 arithmetic allows over 60 steps).
 */
#include "testlib.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "quad.h"
#include "trial/trial.h"

#define N QUAD_N
#define STEPS 60
#define STEP_HINT QUAD_STEP_HINT
#define A quad_a
#define C quad_c
#define W0 quad_w0

static void start(struct quad_run *r, const char *baseline,
		  const apf_hparams *hp)
{
	char src[128];
	snprintf(src, sizeof src, "submissions/baselines/%s", baseline);
	if (quad_build(r, src))
		fail_msg("%s: %s", baseline, apf_error_message());
	assert_apf_ok(quad_start(r, hp, NULL));
}

static void compare(const struct quad_run *r, const double *w, int step,
		    const char *what)
{
	const float *p = apf_arena_params(r->arena);
	for (int i = 0; i < N; i++)
		if (!(fabs(p[i] - w[i]) <= 2e-5 * fabs(w[i]) + 2e-6))
			fail_msg("%s, step %d, w[%d]: harness %.9g, reference "
				 "%.9g",
				 what, step, i, p[i], w[i]);
}

static double cosine(double lr, int t, double warm_frac)
{
	double total = 0.75 * STEP_HINT, warm = floor(warm_frac * total);
	if (t < warm)
		return lr * t / warm;
	double x = (t - warm) / fmax(total - warm, 1.0);
	return lr * 0.5 * (1 + cos(M_PI * fmin(x, 1.0)));
}

static void adam_family(int nesterov)
{
	const char *names[] = {"learning_rate", "one_minus_beta1", "beta2",
			       "weight_decay", "warmup_factor"};
	const double vals[] = {0.05, 0.1, 0.99, 0.01, 0.1};
	apf_hparams hp = quad_hparams(names, vals, 5);
	struct quad_run r;
	start(&r, nesterov ? "nadamw" : "adamw", &hp);
	double w[N], m[N] = {0}, v[N] = {0};
	memcpy(w, W0, sizeof w);
	double b1 = 0.9, b2 = 0.99;
	for (int t = 1; t <= STEPS; t++) {
		int complete;
		assert_apf_ok(apf_trial_step(r.trial, &complete));
		double lr = cosine(0.05, t - 1, 0.1);
		for (int i = 0; i < N; i++) {
			double g = A[i] * (w[i] - C[i]);
			m[i] = b1 * m[i] + (1 - b1) * g;
			v[i] = b2 * v[i] + (1 - b2) * g * g;
			double mh = nesterov ? b1 * m[i] + (1 - b1) * g : m[i];
			double d = mh / (1 - pow(b1, t)) /
				   (sqrt(v[i] / (1 - pow(b2, t))) + 1e-8);
			w[i] -= lr * (d + 0.01 * w[i]);
		}
		compare(&r, w, t, nesterov ? "nadamw" : "adamw");
	}
	quad_finish(&r);
	apf_hparams_free(&hp);
}

static void nadamw_matches_reference(void **state)
{
	(void)state;
	adam_family(1);
}

static void adamw_matches_reference(void **state)
{
	(void)state;
	adam_family(0);
}

static void momentum_family(int nesterov)
{
	const char *names[] = {"learning_rate", "one_minus_beta1",
			       "weight_decay", "warmup_factor"};
	const double vals[] = {0.2, 0.1, 1e-3, 0.1};
	apf_hparams hp = quad_hparams(names, vals, 4);
	struct quad_run r;
	start(&r, nesterov ? "sgd_nesterov" : "heavy_ball", &hp);
	double w[N], u[N] = {0};
	memcpy(w, W0, sizeof w);
	for (int t = 1; t <= STEPS; t++) {
		int complete;
		assert_apf_ok(apf_trial_step(r.trial, &complete));
		double lr = cosine(0.2, t - 1, 0.1);
		for (int i = 0; i < N; i++) {
			double g = A[i] * (w[i] - C[i]);
			u[i] = 0.9 * u[i] + g;
			double d = nesterov ? g + 0.9 * u[i] : u[i];
			w[i] -= lr * (d + 1e-3 * w[i]);
		}
		compare(&r, w, t, nesterov ? "sgd_nesterov" : "heavy_ball");
	}
	quad_finish(&r);
	apf_hparams_free(&hp);
}

static void sgd_nesterov_matches_reference(void **state)
{
	(void)state;
	momentum_family(1);
}

static void heavy_ball_matches_reference(void **state)
{
	(void)state;
	momentum_family(0);
}

/* Self-tuning: no hyperparameters, the submission's defaults. */
static void schedule_free_adamw_matches_reference(void **state)
{
	(void)state;
	apf_hparams none = {0};
	struct quad_run r;
	start(&r, "schedule_free_adamw", &none);
	double lr = 2.5e-3, b1 = 0.9, b2 = 0.9955, wd = 0.08, eps = 1e-8;
	double warm = 0.02 * STEP_HINT;
	double y[N], z[N], v[N] = {0}, lr_max = 0, wsum = 0;
	memcpy(y, W0, sizeof y);
	memcpy(z, W0, sizeof z);
	for (int t = 1; t <= STEPS; t++) {
		int complete;
		assert_apf_ok(apf_trial_step(r.trial, &complete));
		double lr_t = (t < warm ? lr * t / warm : lr) *
			      sqrt(1 - pow(b2, t));
		lr_max = fmax(lr_max, lr_t);
		double weight = lr_max * lr_max;
		wsum += weight;
		double c = weight / wsum;
		for (int i = 0; i < N; i++) {
			double g = A[i] * (y[i] - C[i]);
			v[i] = b2 * v[i] + (1 - b2) * g * g;
			double n = g / (sqrt(v[i]) + eps) + wd * y[i];
			y[i] = (1 - c) * y[i] + c * z[i] +
			       lr_t * (b1 * (1 - c) - 1) * n;
			z[i] -= lr_t * n;
		}
		compare(&r, y, t, "schedule_free_adamw (y)");
		if (t % 20 == 0) {
			/* Evaluation sees x; training resumes from y. */
			assert_apf_ok(apf_trial_prepare_eval(r.trial));
			double x[N];
			for (int i = 0; i < N; i++)
				x[i] = y[i] + (1 - 1 / b1) * (z[i] - y[i]);
			compare(&r, x, t, "schedule_free_adamw (x)");
		}
	}
	quad_finish(&r);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(nadamw_matches_reference),
		cmocka_unit_test(adamw_matches_reference),
		cmocka_unit_test(sgd_nesterov_matches_reference),
		cmocka_unit_test(heavy_ball_matches_reference),
		cmocka_unit_test(schedule_free_adamw_matches_reference),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
