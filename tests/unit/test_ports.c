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
 * crosses the clipping threshold of 18; Shampoo: its roots are refreshed
 * five times). A port is a row of `ports` and a function of
 * ports_torch.py; a second row of the same port (`variant`) takes the
 * branches the first does not (word hyperparameters, and for Muon a tall
 * matrix, portmodel's emb.weight declared a weight).
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
	const char *words[MAX_HP]; /* a word hyperparameter where not NULL */
	const char *const *kinds;  /* NULL, or the tensors' kinds instead */
	const char *variant;       /* NULL, or what a port's second case tries */
};

/* emb.weight as a plain weight: a tall 10 x 4 matrix for an algorithm
 * that treats embeddings apart. */
static const char *const emb_as_weight[PORTMODEL_NPARAMS] = {
	"weight", "bias", "conv_weight", "weight", "norm_scale"};

static const struct port_case ports[] = {
	{.port = "lion",
	 .names = {"learning_rate", "one_minus_beta1", "beta2", "weight_decay",
		   "warmup_factor"},
	 .values = {0.01, 0.1, 0.99, 0.1, 0.1}},
	{.port = "ademamix",
	 .names = {"learning_rate", "one_minus_beta1", "beta2", "beta3",
		   "alpha", "alpha_warmup", "beta3_warmup_factor",
		   "weight_decay", "warmup_factor", "grad_clip"},
	 .values = {0.02, 0.1, 0.99, 0.999, 5.0, 12, 0.45, 0.05, 0.1, 18.0}},
	{.port = "cautious_nadamw",
	 .names = {"learning_rate", "one_minus_beta1", "beta2", "weight_decay",
		   "warmup_factor"},
	 .values = {0.02, 0.1, 0.99, 0.05, 0.1}},
	/* Blocks of at most 3 (fc.weight's 8 x 12 in 3 x 4 of them with a
	 * last row of 2, conv.weight's 6 x 18 view in 2 x 6, emb.weight's
	 * 10 x 4 in 4 x 2 with edges of 1, the vectors in runs of 3 and a
	 * last of 2): roots at step 5 and every 5 steps after it. The model's
	 * gradient of a vector moves in about three dimensions (a drift and
	 * a sine's two phases), so its factor is well conditioned in runs of
	 * 3 and nearly singular in runs of 4, where float32 rounding of the
	 * factor alone moves its smallest root by 1e-4. */
	{.port = "shampoo",
	 .names = {"learning_rate", "one_minus_beta1", "one_minus_beta2",
		   "epsilon", "weight_decay", "max_preconditioner_dim",
		   "precondition_frequency", "start_preconditioning_step",
		   "warmup_factor", "grafting_epsilon", "step_hint_factor",
		   "grafting_type", "use_nadam"},
	 .values = {0.01, 0.1, 0.01, 1e-8, 0.05, 3, 5, -1, 0.1, 1e-8, 1.0},
	 .words = {[11] = "ADAM", [12] = "true"}},
	/* The other branches of the published points 3 and 4: SGD grafting,
	 * Nesterov momentum, no NAdam, square roots of the factors (inverse
	 * root override 2), the first root at step 10, no cosine. */
	{.port = "shampoo",
	 .variant = "sgd_grafting_momentum",
	 .names = {"learning_rate", "one_minus_beta1", "one_minus_beta2",
		   "epsilon", "weight_decay", "max_preconditioner_dim",
		   "precondition_frequency", "start_preconditioning_step",
		   "warmup_factor", "inv_root_override", "one_minus_momentum",
		   "grafting_type", "use_momentum", "use_nadam",
		   "use_cosine_decay"},
	 .values = {0.003, 0.2, 0.01, 1e-8, 0.01, 3, 5, 10, 0.1, 2, 0.1},
	 .words = {[11] = "SGD", [12] = "true", [13] = "false",
		   [14] = "false"}},
	{.port = "muon",
	 .names = {"learning_rate", "muon_beta", "muon_weight_decay",
		   "adamw_beta1", "adamw_beta2", "adamw_weight_decay",
		   "adamw_eps", "warmup_factor", "step_reduce", "muon_ns_steps",
		   "muon_ns_eps", "muon_nesterov", "muon_adjust_lr"},
	 .values = {0.02, 0.9, 0.1, 0.9, 0.99, 0.05, 1e-8, 0.1, 1.0, 5, 1e-7},
	 .words = {[11] = "true", [12] = "spectral_norm"}},
	/* A tall matrix (emb.weight as a weight: transposed products), plain
	 * momentum, Liu et al.'s scale, a schedule cut to 0.8 of the hint. */
	{.port = "muon",
	 .variant = "tall_plain_momentum",
	 .kinds = emb_as_weight,
	 .names = {"learning_rate", "muon_beta", "muon_weight_decay",
		   "adamw_beta1", "adamw_beta2", "warmup_factor", "step_reduce",
		   "muon_nesterov", "muon_adjust_lr"},
	 .values = {0.005, 0.95, 0.0, 0.9, 0.999, 0.1, 0.8},
	 .words = {[7] = "false", [8] = "match_adam"}},
};

static const struct port_case *find(const char *port, const char *variant)
{
	for (size_t i = 0; i < sizeof ports / sizeof *ports; i++)
		if (!strcmp(ports[i].port, port) &&
		    (variant ? ports[i].variant &&
				       !strcmp(ports[i].variant, variant)
			     : !ports[i].variant))
			return &ports[i];
	fail_msg("no case for %s %s", port, variant ? variant : "");
	return NULL;
}

static void check_case(const char *port, const char *variant)
{
	const struct port_case *c = find(port, variant);
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
				   .hp_words = c->words,
				   .nhp = nhp,
				   .kinds = c->kinds,
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
	printf("    %s%s%s: %d steps, %s; largest difference %.3g (step %d, "
	       "%s)\n",
	       port, variant ? " " : "", variant ? variant : "", STEPS,
	       same ? "bit for bit" : "within 1e-5", worst, worst_step,
	       worst_name);
	free(got);
	free(want);
	testlib_tmpdir_free(dir);
}

static void check_port(const char *port)
{
	check_case(port, NULL);
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

static void shampoo_matches_pytorch(void **state)
{
	(void)state;
	check_port("shampoo");
}

static void shampoo_sgd_grafting_with_momentum_matches_pytorch(void **state)
{
	(void)state;
	check_case("shampoo", "sgd_grafting_momentum");
}

static void muon_matches_pytorch(void **state)
{
	(void)state;
	check_port("muon");
}

static void muon_tall_matrix_plain_momentum_matches_pytorch(void **state)
{
	(void)state;
	check_case("muon", "tall_plain_momentum");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(lion_matches_pytorch),
		cmocka_unit_test(ademamix_matches_pytorch),
		cmocka_unit_test(cautious_nadamw_matches_pytorch),
		cmocka_unit_test(shampoo_matches_pytorch),
		cmocka_unit_test(shampoo_sgd_grafting_with_momentum_matches_pytorch),
		cmocka_unit_test(muon_matches_pytorch),
		cmocka_unit_test(muon_tall_matrix_plain_momentum_matches_pytorch),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
