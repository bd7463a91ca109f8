/*
 * workloads.c: `apf workloads [--json] [NAME]`: the workloads apf finds, with
 * their variants, targets (and whether they are provisional), budgets per
 * hardware class, dataset and model size. Each model is built (without its
 * data) so the parameter count shown is the one a trial trains, and a
 * workload whose model code refuses its keys is reported as an error here,
 * before anyone packs an entry against it.
 */
#include "cmd.h"

#include <errno.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "workload/workload.h"

struct info {
	apf_workload_spec *spec;
	size_t params[64]; /* base, then each variant (first 63) */
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
		apf_buf_printf(b, "%s%s = %s", b->len ? ", " : "", key,
			       apf_config_get(w->ini, section, key));
	}
}

static void print_text(const struct info *in)
{
	const apf_workload_spec *w = in->spec;
	printf("%s\n", w->name);
	if (w->description)
		printf("  %s\n", w->description);
	printf("  model %s, %zu parameters; metric %s (%s is better)\n",
	       w->model, in->params[0], w->metric,
	       w->direction > 0 ? "higher" : "lower");
	printf("  targets%s: validation %g, test %g\n",
	       w->targets_provisional ? " (provisional)" : "",
	       w->validation_target, w->test_target);
	printf("  budget cpu: %g s, eval every %g s", w->cpu.max_runtime_s,
	       w->cpu.eval_period_s);
	if (w->gpu.max_runtime_s > 0)
		printf("; gpu: %g s, eval every %g s", w->gpu.max_runtime_s,
		       w->gpu.eval_period_s);
	printf("\n  dataset %s at %s%s%s\n", w->dataset_name, w->dataset_path,
	       w->dataset_digest ? ", digest " : "",
	       w->dataset_digest ? w->dataset_digest : "");
	printf("  variants:\n");
	for (size_t v = 0; v < w->nvariants; v++) {
		const struct apf_workload_variant *var = &w->variants[v];
		apf_buf b = {0};
		overrides(w, var->name, &b);
		printf("    %-12s %s; %zu parameters; targets %g / %g\n",
		       var->name, b.data ? b.data : "", v < 63 ? in->params[v + 1] : 0,
		       var->validation_target, var->test_target);
		apf_buf_free(&b);
	}
}

static json_t *budget_json(const struct apf_budget *b)
{
	if (b->max_runtime_s <= 0)
		return json_null();
	return json_pack("{s:f, s:f}", "max_runtime_s", b->max_runtime_s,
			 "eval_period_s", b->eval_period_s);
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
			    strcmp(key, "test_target"))
				json_object_set_new(
					ov, key,
					json_string(apf_config_get(w->ini,
								   section,
								   key)));
		}
		json_array_append_new(
			vars, json_pack("{s:s, s:o, s:I, s:f, s:f}", "name",
					var->name, "overrides", ov, "parameters",
					(json_int_t)(v < 63 ? in->params[v + 1] : 0),
					"validation_target",
					var->validation_target, "test_target",
					var->test_target));
	}
	return json_pack(
		"{s:s, s:s?, s:s, s:s, s:s, s:s, s:f, s:f, s:s, s:I, s:I,"
		" s:{s:s, s:s, s:s?}, s:{s:o, s:o}, s:o}",
		"name", w->name, "description", w->description, "model",
		w->model, "loss", w->loss, "metric", w->metric, "direction",
		w->direction > 0 ? "max" : "min", "validation_target",
		w->validation_target, "test_target", w->test_target, "targets",
		w->targets_provisional ? "provisional" : "derived", "max_steps",
		(json_int_t)w->max_steps, "parameters",
		(json_int_t)in->params[0], "dataset", "name", w->dataset_name,
		"path", w->dataset_path, "digest", w->dataset_digest, "budget",
		"cpu", budget_json(&w->cpu), "gpu", budget_json(&w->gpu),
		"variants", vars);
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
		"Workloads are read from $APF_WORKLOADS_DIR, else the installed "
		"share/apf/workloads,\nelse the source tree. Targets marked "
		"provisional are not yet derived from the\nbaselines "
		"(DESIGN.md section 5).",
		0, 1};
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
	for (size_t i = 0; !rc && i < n; i++)
		rc = describe(&infos[i], names[i], be);
	if (!rc) {
		if (as_json) {
			json_t *arr = json_array();
			for (size_t i = 0; i < n; i++)
				json_array_append_new(arr, to_json(&infos[i]));
			json_t *doc = json_pack("{s:o}", "workloads", arr);
			char *s = json_dumps(doc, JSON_INDENT(2) | JSON_REAL_PRECISION(12));
			if (s)
				printf("%s\n", s);
			else
				rc = apf_error(APF_ENOMEM, "workloads",
					       "out of memory");
			free(s);
			json_decref(doc);
		} else {
			for (size_t i = 0; i < n; i++) {
				if (i)
					printf("\n");
				print_text(&infos[i]);
			}
			if (n == 0)
				fprintf(stderr, "apf: workloads: none found\n");
		}
	}
	for (size_t i = 0; infos && i < n; i++)
		apf_workload_spec_free(infos[i].spec);
	free(infos);
	apf_workloads_list_free(names, n);
	apf_backend_free(be);
	if (rc)
		return cmd_fail(rc);
	if (fflush(stdout) != 0) {
		apf_error_errno(APF_EIO, errno, "stdout", "write");
		return cmd_fail(APF_EIO);
	}
	return 0;
}
