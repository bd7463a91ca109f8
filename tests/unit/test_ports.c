/*
 * test_ports.c: each ported submission (submissions/<port>: the leading
 * AlgoPerf algorithms written for apf), compiled with the runner's flags
 * and driven through the public ABI on portmodel's moving quadratic (five
 * tensors of different kinds and shapes), matches a PyTorch implementation
 * of the same algorithm (tests/unit/lib/ports_torch.py, Debian's
 * python3-torch, float32) from the same initial weights and batches: at
 * every one of 30 steps, every tensor within 1e-5 relative (the largest
 * difference over the largest magnitude). Skipped when torch is absent.
 *
 * Each case sets every hyperparameter its algorithm reads, chosen so that
 * 30 steps cross the warmup and the cosine (step hint 40) and whatever
 * else the algorithm schedules or clips (AdEMAMix: alpha's warmup ends at
 * step 12, beta3's at 18, and the gradient's norm, from 23 down to 15,
 * crosses the clipping threshold of 18). A port is a row of `ports` and a
 * function of ports_torch.py.
 */
#include "testlib.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "portmodel.h"

#define STEPS 30
#define STEP_HINT 40
#define TOLERANCE 1e-5
#define MAX_HP 16

struct port_case {
	const char *port;         /* ports_torch.py's name, submissions/<port> */
	const char *names[MAX_HP];
	double values[MAX_HP];
};

static const struct port_case ports[] = {
	{"lion",
	 {"learning_rate", "one_minus_beta1", "beta2", "weight_decay",
	  "warmup_factor"},
	 {0.01, 0.1, 0.99, 0.1, 0.1}},
	{"ademamix",
	 {"learning_rate", "one_minus_beta1", "beta2", "beta3", "alpha",
	  "alpha_warmup", "beta3_warmup_factor", "weight_decay",
	  "warmup_factor", "grad_clip"},
	 {0.02, 0.1, 0.99, 0.999, 5.0, 12, 0.45, 0.05, 0.1, 18.0}},
	{"cautious_nadamw",
	 {"learning_rate", "one_minus_beta1", "beta2", "weight_decay",
	  "warmup_factor"},
	 {0.02, 0.1, 0.99, 0.05, 0.1}},
};

static const struct port_case *find(const char *port)
{
	for (size_t i = 0; i < sizeof ports / sizeof *ports; i++)
		if (!strcmp(ports[i].port, port))
			return &ports[i];
	fail_msg("no case for %s", port);
	return NULL;
}

static void check_port(const char *port)
{
	const struct port_case *c = find(port);
	size_t nhp = 0;
	while (nhp < MAX_HP && c->names[nhp])
		nhp++;
	char sub[128];
	snprintf(sub, sizeof sub, "submissions/%s", port);
	char *dir = testlib_tmpdir();
	struct portmodel_opts o = {.submission = sub,
				   .port = port,
				   .hp_names = c->names,
				   .hp_values = c->values,
				   .nhp = nhp,
				   .steps = STEPS,
				   .step_hint = STEP_HINT};
	int rc = portmodel_run(&o, dir);
	if (rc) {
		testlib_tmpdir_free(dir);
		fail_msg("%s: %s", port, apf_error_message());
	}
	if (!testlib_have_torch()) {
		testlib_tmpdir_free(dir);
		SKIP_BECAUSE("no PyTorch at " TESTLIB_PYTHON
			     " (Debian's python3-torch; make deps installs it)");
	}
	char cmd[4096];
	snprintf(cmd, sizeof cmd, TESTLIB_PYTHON " %s/tests/unit/lib/ports_torch.py %s",
		 testlib_root(), dir);
	assert_int_equal(system(cmd), 0);
	size_t na, nt;
	float *got = (float *)testlib_read(dir, "apf.bin", &na);
	float *want = (float *)testlib_read(dir, "torch.bin", &nt);
	assert_int_equal(na, (size_t)STEPS * PORTMODEL_N * sizeof(float));
	assert_int_equal(nt, na);
	double worst = 0;
	int worst_step = 1;
	const char *worst_name = portmodel_params[0].name;
	for (int s = 0; s < STEPS; s++)
		for (int k = 0; k < PORTMODEL_NPARAMS; k++) {
			const struct portmodel_param *p = &portmodel_params[k];
			const float *g = got + (size_t)s * PORTMODEL_N + p->offset;
			const float *w = want + (size_t)s * PORTMODEL_N + p->offset;
			double diff = 0, mag = 0;
			for (size_t i = 0; i < p->numel; i++) {
				diff = fmax(diff, fabs((double)g[i] - w[i]));
				mag = fmax(mag, fabs((double)w[i]));
			}
			double rel = mag > 0 ? diff / mag : diff;
			if (!(rel <= TOLERANCE))
				fail_msg("%s: step %d, %s: apf and PyTorch differ "
					 "by %.3g of the largest magnitude (%.3g)",
					 port, s + 1, p->name, rel, mag);
			if (rel > worst)
				worst = rel, worst_step = s + 1,
				worst_name = p->name;
		}
	/* Both sides standing still would agree too: every tensor moves. */
	size_t nw;
	float *w0 = (float *)testlib_read(dir, "w0.bin", &nw);
	const float *last = got + (size_t)(STEPS - 1) * PORTMODEL_N;
	for (int k = 0; k < PORTMODEL_NPARAMS; k++) {
		const struct portmodel_param *p = &portmodel_params[k];
		if (!memcmp(w0 + p->offset, last + p->offset,
			    p->numel * sizeof(float)))
			fail_msg("%s: %s did not move in %d steps", port,
				 p->name, STEPS);
	}
	free(w0);
	int same = !memcmp(got, want, na);
	printf("    %s: %d steps, %s; largest difference %.3g (step %d, %s)\n",
	       port, STEPS, same ? "bit for bit" : "within 1e-5", worst,
	       worst_step, worst_name);
	free(got);
	free(want);
	testlib_tmpdir_free(dir);
}

static void lion_matches_pytorch(void **state)
{
	(void)state;
	check_port("lion");
}

static void ademamix_matches_pytorch(void **state)
{
	(void)state;
	check_port("ademamix");
}

static void cautious_nadamw_matches_pytorch(void **state)
{
	(void)state;
	check_port("cautious_nadamw");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(lion_matches_pytorch),
		cmocka_unit_test(ademamix_matches_pytorch),
		cmocka_unit_test(cautious_nadamw_matches_pytorch),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
