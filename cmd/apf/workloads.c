/*
 * workloads.c: `apf workloads [--json] [NAME]`: the workloads apf finds, with
 * their variants, targets (and whether they are provisional), budgets per
 * hardware class, dataset and model size. Each model is built (without its
 * data) so the parameter count shown is the one a trial trains, and a
 * workload whose model code refuses its keys is reported as an error here,
 * before anyone packs an entry against it. One workload that cannot be
 * described is one error line; the others are still listed (exit 2).
 */
#include "cmd.h"

#include <errno.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "workload/workload.h"

struct info {
	apf_workload_spec *spec;
	size_t params[64]; /* base, then each variant (first 63) */
	int counted;       /* the input shape was the dataset's: params are real */
	char *error;       /* why it cannot be listed; NULL when it can */
};

static size_t count_params(apf_net *net)
{
	size_t n = 0;
	for (size_t i = 0; i < apf_net_nparams(net); i++)
		n += apf_net_param(net, i)->numel;
	return n;
}

static int describe(struct info *in, const char *name, apf_backend *be)
{
	int rc = apf_workload_spec_load(&in->spec, name);
	if (rc)
		return rc;
	size_t nv = in->spec->nvariants < 63 ? in->spec->nvariants : 63;
	for (size_t v = 0; !rc && v <= nv; v++) {
		const char *vn = v ? in->spec->variants[v - 1].name : "base";
		apf_workload *wl;
		rc = apf_workload_open(&wl, in->spec, vn, be, NULL,
				       APF_WORKLOAD_NO_DATA);
		if (rc)
			break;
		in->params[v] = count_params(apf_workload_net(wl));
		in->counted = apf_workload_shape_known(wl);
		apf_workload_close(wl);
	}
	return rc;
}

/* "activation = gelu, width = 24": a variant's [model] overrides. */
static void overrides(const apf_workload_spec *w, const char *variant,
		      apf_buf *b)
{
	char section[256];
	snprintf(section, sizeof section, "variant.%s", variant);
	for (size_t k = 0;; k++) {
		const char *key = apf_config_key(w->ini, section, k);
		if (!key)
			break;
		if (!strcmp(key, "validation_target") ||
		    !strcmp(key, "test_target"))
			continue;
		apf_buf_printf(b, "%s%s = %s", b->len ? ", " : "",
			       term_text(key),
			       term_text(apf_config_get(w->ini, section, key)));
	}
}

/* A workload.ini is whoever wrote the workloads directory's text (and an
 * entry's workloads are read by name from it): term_text at each print. */
static void print_text(const struct info *in)
{
	const apf_workload_spec *w = in->spec;
	printf("%s\n", term_text(w->name));
	if (w->description)
		printf("  %s\n", term_text(w->description));
	if (in->counted)
		printf("  model %s, %zu parameters", term_text(w->model),
		       in->params[0]);
	else
		printf("  model %s, parameters not counted (no training "
		       "images here to take the input shape from)",
		       term_text(w->model));
	printf("; metric %s (%s is better)", term_text(w->metric),
	       w->direction > 0 ? "higher" : "lower");
	for (size_t i = 0; w->nmetrics > 1 && i < w->nmetrics; i++)
		printf("%s%s", i ? ", " : ", reports ",
		       term_text(w->metrics[i]));
	printf("\n");
	printf("  targets%s: validation %g, test %g\n",
	       w->targets_provisional ? " (provisional)" : "",
	       w->validation_target, w->test_target);
	printf("  budget cpu: %g s, eval every %g s", w->cpu.max_runtime_s,
	       w->cpu.eval_period_s);
	if (w->eval_examples > 0)
		printf(" on the first %ld examples of each split",
		       w->eval_examples);
	if (w->gpu.max_runtime_s > 0)
		printf("; gpu: %g s, eval every %g s%s", w->gpu.max_runtime_s,
		       w->gpu.eval_period_s,
		       w->gpu.provisional ? " (provisional)" : "");
	/* The path as the kernel resolves it where it exists (an ini's
	 * "../../datasets/x" reads badly), else as the ini gives it. */
	char *real = realpath(w->dataset_path, NULL);
	printf("\n  dataset %s at %s%s%s\n", term_text(w->dataset_name),
	       term_text(real ? real : w->dataset_path),
	       w->dataset_digest ? ", digest " : "",
	       w->dataset_digest ? term_text(w->dataset_digest) : "");
	free(real);
	printf("  variants:\n");
	for (size_t v = 0; v < w->nvariants; v++) {
		const struct apf_workload_variant *var = &w->variants[v];
		apf_buf b = {0};
		overrides(w, var->name, &b);
		printf("    %-12s %s; ", term_text(var->name),
		       b.data ? b.data : "");
		if (in->counted)
			printf("%zu parameters; ", v < 63 ? in->params[v + 1] : 0);
		printf("targets %g / %g (%s)\n", var->validation_target,
		       var->test_target,
		       var->targets == APF_VARIANT_TARGETS_BASE
			       ? "the base's: none derived for it"
			       : apf_variant_targets_name(var->targets));
		apf_buf_free(&b);
	}
}

static json_t *budget_json(const struct apf_budget *b)
{
	if (b->max_runtime_s <= 0)
		return json_null();
	return json_pack("{s:f, s:f, s:b}", "max_runtime_s", b->max_runtime_s,
			 "eval_period_s", b->eval_period_s, "provisional",
			 b->provisional);
}

/* The count of model v (0 base, then the variants), null when not known
 * (no training images to take the shape from, or past the 63rd variant). */
static json_t *params_json(const struct info *in, size_t v)
{
	if (!in->counted || v >= 64)
		return json_null();
	return json_integer((json_int_t)in->params[v]);
}

/* What each split reports besides its loss (the CSV's train/<m>, ...). */
static json_t *metrics_json(const apf_workload_spec *w)
{
	json_t *a = json_array();
	for (size_t i = 0; a && i < w->nmetrics; i++)
		json_array_append_new(a, json_string(utf8_text(w->metrics[i])));
	return a;
}

/* The record of the runs behind a workload's (or variant's) targets:
 * <workloads dir>/targets/<W>[_<V>].json where it exists (written by
 * workloads/derive_targets.py), as that path; else null. */
static json_t *record_json(const apf_workload_spec *w, const char *variant)
{
	char *top = w->dir ? apf_strdup(w->dir) : NULL;
	char *slash = top ? strrchr(top, '/') : NULL;
	json_t *out = json_null();
	if (slash) {
		*slash = 0;
		char name[600];
		snprintf(name, sizeof name, "targets/%s%s%s.json", w->name,
			 variant ? "_" : "", variant ? variant : "");
		char *path = apf_path_join(top, name);
		struct stat st;
		if (path && stat(path, &st) == 0 && S_ISREG(st.st_mode)) {
			json_decref(out);
			out = json_string(utf8_text(path));
		}
		free(path);
	}
	free(top);
	return out;
}

static json_t *to_json(const struct info *in)
{
	const apf_workload_spec *w = in->spec;
	json_t *vars = json_array();
	for (size_t v = 0; v < w->nvariants; v++) {
		const struct apf_workload_variant *var = &w->variants[v];
		char section[256];
		snprintf(section, sizeof section, "variant.%s", var->name);
		json_t *ov = json_object();
		for (size_t k = 0;; k++) {
			const char *key = apf_config_key(w->ini, section, k);
			if (!key)
				break;
			if (strcmp(key, "validation_target") &&
			    strcmp(key, "test_target") && strcmp(key, "targets"))
				json_object_set_new(
					ov, utf8_text(key),
					json_string(utf8_text(apf_config_get(
						w->ini, section, key))));
		}
		json_array_append_new(
			vars, json_pack("{s:s, s:o, s:o, s:f, s:f, s:s, s:o}",
					"name", utf8_text(var->name),
					"overrides", ov, "parameters",
					params_json(in, v < 63 ? v + 1 : 64),
					"validation_target",
					var->validation_target, "test_target",
					var->test_target, "targets",
					apf_variant_targets_name(var->targets),
					"target_record",
					record_json(w, var->name)));
	}
	json_t *o = json_pack(
		"{s:s, s:s?, s:s, s:s, s:s, s:s, s:f, s:f, s:s, s:I, s:o,"
		" s:{s:s, s:s, s:s?}, s:{s:o, s:o}, s:o, s:o}",
		"name", utf8_text(w->name), "description",
		utf8_text(w->description), "model", utf8_text(w->model),
		"loss", utf8_text(w->loss), "metric", utf8_text(w->metric),
		"direction",
		w->direction > 0 ? "max" : "min", "validation_target",
		w->validation_target, "test_target", w->test_target, "targets",
		w->targets_provisional ? "provisional" : "derived", "max_steps",
		(json_int_t)w->max_steps, "parameters", params_json(in, 0),
		"dataset", "name", utf8_text(w->dataset_name), "path",
		utf8_text(w->dataset_path), "digest",
		utf8_text(w->dataset_digest), "budget",
		"cpu", budget_json(&w->cpu), "gpu", budget_json(&w->gpu),
		"variants", vars, "metrics", metrics_json(w));
	if (o) {
		json_object_set_new(o, "target_record", record_json(w, NULL));
		json_object_set_new(o, "step_hint",
				    json_integer((json_int_t)w->step_hint));
		json_object_set_new(o, "eval_examples",
				    w->eval_examples > 0
					    ? json_integer(
						      (json_int_t)w->eval_examples)
					    : json_null());
	}
	return o;
}

/* Prints the workloads that could be described, as text or JSON. */
static int print_all(const struct info *infos, size_t n, int as_json)
{
	/* One pass: one trial of every workload listed, at its budget. */
	double cpu = 0, gpu = 0;
	for (size_t i = 0; i < n; i++)
		if (!infos[i].error) {
			cpu += infos[i].spec->cpu.max_runtime_s;
			gpu += infos[i].spec->gpu.max_runtime_s > 0
				       ? infos[i].spec->gpu.max_runtime_s
				       : 0;
		}
	if (as_json) {
		json_t *arr = json_array();
		for (size_t i = 0; i < n; i++)
			if (!infos[i].error)
				json_array_append_new(arr, to_json(&infos[i]));
		return cmd_print_json(json_pack("{s:o, s:{s:f, s:f}}",
						"workloads", arr, "one_pass_s",
						"cpu", cpu, "gpu", gpu),
				      JSON_REAL_PRECISION(12));
	}
	int shown = 0;
	for (size_t i = 0; i < n; i++) {
		if (infos[i].error)
			continue;
		if (shown++)
			printf("\n");
		print_text(&infos[i]);
	}
	if (shown > 1)
		/* Indented: a line at column 0 is a workload's name (the
		 * shell completion reads them so). */
		printf("\n  one pass of these %d (one trial each): cpu %g s of "
		       "submission time; external tuning (3 studies x 5 "
		       "trials) %g min\n",
		       shown, cpu, cpu * 15 / 60);
	return 0;
}

int cmd_workloads(int argc, char **argv)
{
	int as_json = 0;
	const struct apf_opt opts[] = {
		{"json", 0, OPT_FLAG, &as_json, NULL,
		 "machine-readable output on stdout"},
		{0},
	};
	const struct apf_usage usage = {
		"workloads [--json] [NAME]",
		"List the workloads (or one): variants, validation and test "
		"targets, runtime\nbudgets and eval periods per hardware class, "
		"dataset and model size.",
		"Workloads are read from $APF_WORKLOADS_DIR, else the installed\n"
		"share/apf/workloads, else the source tree. The parameter counts "
		"are those of\nthe models a trial trains, built for the input "
		"shape in the header of the\ndataset's training images. Targets "
		"marked provisional are not yet derived from\nthe baselines' "
		"tuned runs (README.md, Baselines and workloads).\n\n"
		"A workload that cannot be read or built is one error line on "
		"stderr; the others\nare still listed, and the exit status is "
		"2.",
		0, 1,
		"apf workloads\n"
		"apf workloads fmnist_mlp\n"
		"apf workloads --json\n"
		"APF_WORKLOADS_DIR=tests/data/workloads apf workloads blobs_mlp"};
	int nargs, rc = cmd_start("workloads", &usage, opts, argc, argv, &nargs);
	if (rc >= 0)
		return rc;
	char **names = NULL;
	size_t n = 0;
	if (nargs == 1) {
		names = malloc(sizeof *names);
		if (!names || !(names[0] = apf_strdup(argv[1]))) {
			free(names);
			apf_error(APF_ENOMEM, "workloads", "out of memory");
			return cmd_fail(APF_ENOMEM);
		}
		n = 1;
	} else if ((rc = apf_workloads_list(&names, &n))) {
		return cmd_fail(rc);
	}
	apf_backend *be = NULL;
	rc = apf_backend_cpu_new(&be, 1);
	struct info *infos = apf_calloc(n, sizeof *infos);
	if (!rc && !infos)
		rc = apf_error(APF_ENOMEM, "workloads", "out of memory");
	/* One bad workload.ini must not hide the good ones: each failure is
	 * kept as its own line and reported after the listing. */
	size_t bad = 0;
	for (size_t i = 0; !rc && i < n; i++) {
		int wrc = describe(&infos[i], names[i], be);
		if (wrc == APF_ENOMEM) {
			rc = wrc;
		} else if (wrc) {
			char why[1024];
			apf_error_take(why, sizeof why);
			infos[i].error = apf_strdup(why);
			if (!infos[i].error)
				rc = apf_error(APF_ENOMEM, "workloads",
					       "out of memory");
			bad++;
		}
	}
	if (!rc && bad < n)
		rc = print_all(infos, n, as_json);
	if (!rc && n == 0)
		fprintf(stderr, "apf: workloads: none found\n");
	if (!rc && fflush(stdout) != 0)
		rc = apf_error_errno(APF_EIO, errno, "stdout", "write");
	for (size_t i = 0; !rc && i < n; i++)
		if (infos[i].error)
			fprintf(stderr, "apf: %s\n", infos[i].error);
	for (size_t i = 0; infos && i < n; i++) {
		apf_workload_spec_free(infos[i].spec);
		free(infos[i].error);
	}
	free(infos);
	apf_workloads_list_free(names, n);
	apf_backend_free(be);
	if (rc)
		return cmd_fail(rc);
	return bad ? apf_exit_code(APF_EINPUT) : 0;
}
