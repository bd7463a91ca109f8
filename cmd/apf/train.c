/*
 * train.c: `apf train WORKLOAD`: trains a workload with the built-in
 * reference AdamW loop (pkg/workload/fit.c) and prints its evaluations.
 *
 * This is a development tool, not a benchmark run: no entry, no sandbox, no
 * signed log. It exists so workloads can be smoke-tested and provisional
 * targets chosen (workloads/provisional_targets.py) before the sealed runner
 * and the baseline submissions exist; the same seed and thread count give
 * the same numbers bit for bit.
 */
#include "cmd.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "workload/workload.h"

struct ctx {
	const apf_workload_spec *spec;
	const char *variant;
	json_t *evals; /* NULL unless --json */
	double target;
};

static int on_eval(void *user, long step, double seconds,
		   const apf_workload_eval *ev)
{
	struct ctx *c = user;
	const struct apf_split_metrics *tr = &ev->split[APF_SPLIT_TRAIN];
	const struct apf_split_metrics *va = &ev->split[APF_SPLIT_VALIDATION];
	const struct apf_split_metrics *te = &ev->split[APF_SPLIT_TEST];
	const char *mn = c->spec->metric;
	if (c->evals) {
		/* <split>_loss and <split>_<m> for each of the workload's
		 * metrics (train_accuracy, ... for a classifier) */
		json_t *o = json_pack("{s:I, s:f, s:f, s:f, s:f}", "step",
				      (json_int_t)step, "seconds", seconds,
				      "train_loss", tr->loss, "validation_loss",
				      va->loss, "test_loss", te->loss);
		static const char *const split[3] = {"train", "validation",
						     "test"};
		for (int s = 0; o && s < 3; s++)
			for (size_t k = 0; k < c->spec->nmetrics; k++) {
				char key[96];
				snprintf(key, sizeof key, "%s_%s", split[s],
					 c->spec->metrics[k]);
				double v = apf_split_metric(&ev->split[s],
							    c->spec->metrics[k]);
				json_object_set_new(o, key,
						    isfinite(v) ? json_real(v)
								: json_null());
			}
		json_array_append_new(c->evals, o);
		progress_show("%s/%s step %ld, %.0f s, validation %.4f "
			      "(target %g)",
			      c->spec->name, c->variant, step, seconds,
			      apf_split_metric(va, mn), c->target);
	} else {
		printf("step %6ld  %7.1f s  train %.4f / %.4f  validation "
		       "%.4f / %.4f  test %.4f / %.4f\n",
		       step, seconds, tr->loss, apf_split_metric(tr, mn),
		       va->loss, apf_split_metric(va, mn), te->loss,
		       apf_split_metric(te, mn));
		fflush(stdout);
	}
	return 0;
}

int cmd_train(int argc, char **argv)
{
	const char *variant = "base", *lr_s = "1e-3", *wd_s = "1e-4",
		   *warm_s = "0.05";
	long steps = 1000, batch = 128, seed = 0, threads = 2, every = 0,
	     numerics = APF_NUMERICS_LATEST;
	int as_json = 0, no_eval = 0;
	const struct apf_opt opts[] = {
		{"variant", 'v', OPT_STRING, &variant, "NAME",
		 "the workload variant (default base)"},
		{"steps", 'n', OPT_INT, &steps, "N", "training steps (1000)"},
		{"batch", 'b', OPT_INT, &batch, "B", "batch size (128)"},
		{"lr", 0, OPT_STRING, &lr_s, "LR", "peak learning rate (1e-3)"},
		{"weight-decay", 0, OPT_STRING, &wd_s, "WD",
		 "decoupled weight decay on weights (1e-4)"},
		{"warmup", 0, OPT_STRING, &warm_s, "FRAC",
		 "share of steps in linear warmup before cosine decay (0.05)"},
		{"seed", 's', OPT_INT, &seed, "S", "seed of the trial key (0)"},
		{"threads", 't', OPT_INT, &threads, "T", "compute threads (2)"},
		{"numerics", 0, OPT_INT, &numerics, "N",
		 "the CPU layers' formulas, as apf run --numerics (default: "
		 "the latest)"},
		{"eval-every", 'e', OPT_INT, &every, "N",
		 "evaluate every N steps (default: at the end only)"},
		{"no-eval", 0, OPT_FLAG, &no_eval, NULL,
		 "train only, never evaluate: the digest alone (to compare "
		 "instruction-set paths without the evaluations' cost)"},
		{"json", 0, OPT_FLAG, &as_json, NULL,
		 "print the evaluations as JSON on stdout"},
		{0},
	};
	const struct apf_usage usage = {
		"train WORKLOAD [--variant V] [--steps N] [--batch B] [--lr LR] "
		"[--weight-decay WD] [--warmup FRAC] [--seed S] "
		"[--threads T] [--numerics N] [--eval-every N | --no-eval] "
		"[--json]",
		"Train a workload with the built-in reference AdamW (linear "
		"warmup, cosine decay)\nand print train, validation and test "
		"loss / accuracy at each evaluation.",
		"A development tool for smoke tests and provisional targets: "
		"no entry, sandbox\nor signed log (that is `apf run`). Runs are "
		"bit-for-bit reproducible for a seed\nand thread count.",
		1, 1,
		"apf train fmnist_mlp --steps 200 --eval-every 100\n"
		"apf train fmnist_mlp --variant narrow --steps 100 --json"};
	int nargs, rc = cmd_start("train", &usage, opts, argc, argv, &nargs);
	if (rc >= 0)
		return rc;
	char *end;
	double lr = strtod(lr_s, &end);
	int bad = *end || !(lr > 0);
	double wd = strtod(wd_s, &end);
	bad |= *end || wd < 0;
	double warm = strtod(warm_s, &end);
	bad |= *end || warm < 0 || warm >= 1;
	if (bad || steps <= 0 || batch <= 0 || batch > 65536 || threads <= 0 ||
	    every < 0 || seed < 0) {
		apf_error(APF_EUSAGE, "train",
			  "--lr and --steps, --batch, --threads must be "
			  "positive, --weight-decay, --seed and --eval-every "
			  "not negative, --warmup in [0, 1)");
		return cmd_fail(APF_EUSAGE);
	}
	apf_workload_spec *spec = NULL;
	apf_backend *be = NULL;
	apf_workload *wl = NULL;
	if (numerics < APF_NUMERICS_OLDEST || numerics > APF_NUMERICS_LATEST) {
		apf_error(APF_EUSAGE, "train",
			  "--numerics takes %d to %d, the versions this apf "
			  "computes",
			  APF_NUMERICS_OLDEST, APF_NUMERICS_LATEST);
		return cmd_fail(APF_EUSAGE);
	}
	apf_numerics_set((int)numerics);
	rc = apf_workload_spec_load(&spec, argv[1]);
	if (!rc)
		rc = apf_backend_cpu_new(&be, (int)threads);
	apf_trial_key key = {(uint64_t)seed, 0, 0};
	if (!rc)
		rc = apf_workload_open(&wl, spec, variant, be, &key, 0);
	if (rc) {
		apf_workload_close(wl);
		apf_backend_free(be);
		apf_workload_spec_free(spec);
		return cmd_fail(rc);
	}
	const struct apf_workload_variant *v = apf_workload_variant(spec, variant);
	struct ctx c = {spec, variant, as_json ? json_array() : NULL,
			v->validation_target};
	struct apf_fit_opts o = {
		.steps = steps, .batch = (int)batch,
		.adamw = {lr, 0.9, 0.999, 1e-8, wd, warm},
		.eval_every = no_eval ? -1 : every,
		.eval_splits = 1u << APF_SPLIT_TRAIN |
			       1u << APF_SPLIT_VALIDATION | 1u << APF_SPLIT_TEST,
		.on_eval = on_eval, .user = &c};
	struct apf_fit_result r;
	rc = apf_workload_fit(&r, wl, &o);
	progress_done();
	if (!rc && as_json) {
		char hex[65];
		apf_hex(hex, r.digest, sizeof r.digest);
		json_t *doc = json_pack(
			"{s:s, s:s, s:I, s:I, s:f, s:f, s:f, s:I, s:I, s:I,"
			" s:f, s:f, s:f, s:s, s:o}",
			"workload", utf8_text(spec->name), "variant",
			utf8_text(variant), "steps",
			(json_int_t)steps, "batch", (json_int_t)batch, "lr", lr,
			"weight_decay", wd, "warmup", warm, "seed",
			(json_int_t)seed, "threads", (json_int_t)threads,
			"numerics", (json_int_t)numerics, "train_seconds", r.train_seconds, "validation_target",
			v->validation_target, "test_target", v->test_target,
			"digest", hex, "evals", c.evals);
		c.evals = NULL;
		rc = cmd_print_json(doc, JSON_REAL_PRECISION(10));
	} else if (!rc) {
		char hex[65];
		apf_hex(hex, r.digest, sizeof r.digest);
		printf("%ld steps in %.1f s of training; parameters and state "
		       "%s\n",
		       r.steps_done, r.train_seconds, hex);
	}
	json_decref(c.evals);
	apf_workload_close(wl);
	apf_backend_free(be);
	apf_workload_spec_free(spec);
	if (rc)
		return cmd_fail(rc);
	if (fflush(stdout) != 0) {
		apf_error_errno(APF_EIO, errno, "stdout", "write");
		return cmd_fail(APF_EIO);
	}
	return 0;
}
