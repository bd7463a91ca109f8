/*
 * spec.c: loading and validating workload.ini, and locating workloads and
 * datasets. Validation is strict (unknown sections and keys are errors, with
 * line numbers) because a typo in a budget or a target silently changes what
 * a benchmark measures.
 */
#include "workload/workload.h"

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#ifndef APF_SOURCE_DIR
#define APF_SOURCE_DIR "."
#endif

static int is_dir(const char *p)
{
	struct stat st;
	return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

int apf_workloads_dir(char **out)
{
	*out = NULL;
	const char *env = getenv("APF_WORKLOADS_DIR");
	if (env && *env) {
		if (!is_dir(env))
			return apf_error(APF_EINPUT, env,
					 "APF_WORKLOADS_DIR is not a directory");
		*out = apf_strdup(env);
		return *out ? 0 : apf_error(APF_ENOMEM, env, "out of memory");
	}
	char exe[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
	if (n > 0) {
		exe[n] = 0;
		char *slash = strrchr(exe, '/');
		if (slash) {
			*slash = 0;
			char *p = apf_path_join(exe, "../share/apf/workloads");
			if (p && is_dir(p)) {
				*out = p;
				return 0;
			}
			free(p);
		}
	}
	char *p = apf_path_join(APF_SOURCE_DIR, "workloads");
	if (p && is_dir(p)) {
		*out = p;
		return 0;
	}
	free(p);
	return apf_error(APF_EINPUT, "workloads",
			 "no workloads directory found (set APF_WORKLOADS_DIR)");
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

void apf_workloads_list_free(char **names, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(names[i]);
	free(names);
}

int apf_workloads_list(char ***names, size_t *n)
{
	*names = NULL;
	*n = 0;
	char *dir;
	int rc = apf_workloads_dir(&dir);
	if (rc)
		return rc;
	DIR *d = opendir(dir);
	if (!d) {
		rc = apf_error_errno(APF_EINPUT, errno, dir, "open");
		free(dir);
		return rc;
	}
	char **v = NULL;
	size_t k = 0, cap = 0;
	struct dirent *de;
	while (!rc && (de = readdir(d))) {
		if (de->d_name[0] == '.')
			continue;
		char *sub = apf_path_join(dir, de->d_name);
		char *ini = sub ? apf_path_join(sub, "workload.ini") : NULL;
		struct stat st;
		int ok = ini && stat(ini, &st) == 0 && S_ISREG(st.st_mode);
		free(sub);
		free(ini);
		if (!ok)
			continue;
		if (k == cap) {
			char **nv = realloc(v, (cap ? 2 * cap : 8) * sizeof *nv);
			if (!nv) {
				rc = apf_error(APF_ENOMEM, dir, "out of memory");
				break;
			}
			v = nv;
			cap = cap ? 2 * cap : 8;
		}
		if (!(v[k] = apf_strdup(de->d_name)))
			rc = apf_error(APF_ENOMEM, dir, "out of memory");
		else
			k++;
	}
	closedir(d);
	free(dir);
	if (rc) {
		apf_workloads_list_free(v, k);
		return rc;
	}
	qsort(v, k, sizeof *v, cmp_str);
	*names = v;
	*n = k;
	return 0;
}

int apf_workload_name_ok(const char *s)
{
	if (!*s)
		return 0;
	for (; *s; s++)
		if (!((*s >= 'a' && *s <= 'z') || (*s >= '0' && *s <= '9') ||
		      *s == '_' || *s == '-'))
			return 0;
	return 1;
}

static int dup_opt(const apf_config *c, const char *s, const char *k,
		   char **out)
{
	const char *v = NULL;
	int rc = apf_config_opt_string(&v, c, s, k);
	if (rc || !v)
		return rc;
	*out = apf_strdup(v);
	return *out ? 0 : apf_error(APF_ENOMEM, apf_config_name(c), "out of memory");
}

static int dup_req(const apf_config *c, const char *s, const char *k,
		   char **out)
{
	const char *v;
	int rc = apf_config_string(&v, c, s, k);
	if (rc)
		return rc;
	*out = apf_strdup(v);
	return *out ? 0 : apf_error(APF_ENOMEM, apf_config_name(c), "out of memory");
}

static int load_budget(const apf_config *c, const char *section,
		       struct apf_budget *b, int required)
{
	static const char *const keys[] = {"max_runtime_s", "eval_period_s",
					   "provisional", NULL};
	if (!apf_config_has_section(c, section)) {
		if (required)
			return apf_error(APF_EINPUT, apf_config_name(c),
					 "[%s]: missing section", section);
		return 0;
	}
	int rc = apf_config_check_keys(c, section, keys);
	if (!rc)
		rc = apf_config_double(&b->max_runtime_s, c, section,
				       "max_runtime_s");
	if (!rc)
		rc = apf_config_double(&b->eval_period_s, c, section,
				       "eval_period_s");
	if (!rc)
		rc = apf_config_opt_bool(&b->provisional, c, section,
					 "provisional");
	if (!rc && b->max_runtime_s <= 0)
		rc = apf_config_error(c, section, "max_runtime_s",
				      "must be positive");
	if (!rc && b->eval_period_s <= 0)
		rc = apf_config_error(c, section, "eval_period_s",
				      "must be positive");
	return rc;
}

/* [workload] metrics: the names each split reports besides its loss, in
 * order, "accuracy" or "log_loss, auc"; absent, the metric alone. The
 * metric must be one of them. Which names a loss can report is the
 * runtime's to check. */
static int load_metrics(apf_workload_spec *w)
{
	const apf_config *c = w->ini;
	const char *v = NULL;
	int rc = apf_config_opt_string(&v, c, "workload", "metrics");
	if (rc)
		return rc;
	if (!v)
		v = w->metric;
	int has_primary = 0;
	for (const char *p = v; *p;) {
		while (*p == ' ' || *p == '\t' || *p == ',')
			p++;
		size_t len = 0;
		while (p[len] && p[len] != ',' && p[len] != ' ' && p[len] != '\t')
			len++;
		if (!len)
			break;
		if (len > 40 || w->nmetrics == APF_WORKLOAD_MAX_METRICS)
			return apf_config_error(c, "workload", "metrics",
						"at most %d names of up to 40 "
						"characters",
						APF_WORKLOAD_MAX_METRICS);
		char *name = apf_strdup(p);
		if (!name)
			return apf_error(APF_ENOMEM, apf_config_name(c),
					 "out of memory");
		name[len] = 0;
		for (size_t i = 0; i < w->nmetrics; i++)
			if (!strcmp(w->metrics[i], name)) {
				free(name);
				return apf_config_error(c, "workload",
							"metrics",
							"'%.40s' twice", p);
			}
		if (!apf_workload_name_ok(name) || !strcmp(name, "loss") ||
		    !strcmp(name, "num_examples")) {
			rc = apf_config_error(c, "workload", "metrics",
					      "'%s' is not a metric name",
					      name);
			free(name);
			return rc;
		}
		has_primary |= !strcmp(name, w->metric);
		w->metrics[w->nmetrics++] = name;
		p += len;
	}
	if (!has_primary)
		return apf_config_error(c, "workload", "metrics",
					"must include the metric '%s'",
					w->metric);
	return 0;
}

static int load_variants(apf_workload_spec *w)
{
	const apf_config *c = w->ini;
	size_t ns = apf_config_nsections(c);
	w->variants = apf_calloc(ns, sizeof *w->variants);
	if (!w->variants)
		return apf_error(APF_ENOMEM, apf_config_name(c), "out of memory");
	for (size_t i = 0; i < ns; i++) {
		const char *s = apf_config_section(c, i);
		if (strncmp(s, "variant.", 8) != 0)
			continue;
		const char *vname = s + 8;
		if (!apf_workload_name_ok(vname) || !strcmp(vname, "base"))
			return apf_error(APF_EINPUT, apf_config_name(c),
					 "line %d: [%s]: a variant name is "
					 "lowercase letters, digits, _ and - "
					 "(and not 'base')",
					 apf_config_line(c, s, NULL), s);
		struct apf_workload_variant *v = &w->variants[w->nvariants++];
		v->name = apf_strdup(vname);
		if (!v->name)
			return apf_error(APF_ENOMEM, apf_config_name(c),
					 "out of memory");
		v->validation_target = w->validation_target;
		v->test_target = w->test_target;
		int rc = apf_config_opt_double(&v->validation_target, c, s,
					       "validation_target");
		if (!rc)
			rc = apf_config_opt_double(&v->test_target, c, s,
						   "test_target");
		if (rc)
			return rc;
		int own = apf_config_get(c, s, "validation_target") ||
			  apf_config_get(c, s, "test_target");
		const char *how = apf_config_get(c, s, "targets");
		v->targets = own ? APF_VARIANT_TARGETS_SET : APF_VARIANT_TARGETS_BASE;
		if (how && !own)
			return apf_config_error(c, s, "targets",
						"says how the variant's own "
						"targets were set, and it sets "
						"none");
		if (how && !strcmp(how, "derived"))
			v->targets = APF_VARIANT_TARGETS_DERIVED;
		else if (how && !strcmp(how, "retuned"))
			v->targets = APF_VARIANT_TARGETS_RETUNED;
		else if (how && strcmp(how, "provisional"))
			return apf_config_error(c, s, "targets",
						"expected provisional, derived "
						"or retuned");
		for (size_t k = 0;; k++) {
			const char *key = apf_config_key(c, s, k);
			if (!key)
				break;
			if (!strcmp(key, "validation_target") ||
			    !strcmp(key, "test_target") ||
			    !strcmp(key, "targets"))
				continue;
			if (!apf_config_get(c, "model", key))
				return apf_config_error(
					c, s, key,
					"a variant overrides [model] keys, and "
					"[model] has no '%s'",
					key);
		}
	}
	return 0;
}

int apf_workload_spec_load_dir(apf_workload_spec **out, const char *dir)
{
	*out = NULL;
	apf_workload_spec *w = apf_calloc(1, sizeof *w);
	char *ini_path = apf_path_join(dir, "workload.ini");
	if (!w || !ini_path || !(w->dir = apf_strdup(dir))) {
		free(ini_path);
		apf_workload_spec_free(w);
		return apf_error(APF_ENOMEM, dir, "out of memory");
	}
	int rc = apf_config_load(&w->ini, ini_path);
	free(ini_path);
	const apf_config *c = w->ini;
	static const char *const wkeys[] = {
		"name", "description", "model", "loss", "metric", "direction",
		"validation_target", "test_target", "targets", "max_steps",
		"step_hint", "eval_examples",
		"metrics", NULL};
	for (size_t i = 0; !rc && i < apf_config_nsections(c); i++) {
		const char *s = apf_config_section(c, i);
		if (strcmp(s, "workload") && strcmp(s, "dataset") &&
		    strcmp(s, "model") && strcmp(s, "budget.cpu") &&
		    strcmp(s, "budget.gpu") && strncmp(s, "variant.", 8))
			rc = apf_error(APF_EINPUT, apf_config_name(c),
				       "line %d: [%s]: unknown section",
				       apf_config_line(c, s, NULL), s);
	}
	if (!rc)
		rc = apf_config_check_keys(c, "workload", wkeys);
	if (!rc)
		rc = dup_req(c, "workload", "name", &w->name);
	if (!rc) {
		const char *base = strrchr(dir, '/');
		base = base && base[1] ? base + 1 : dir;
		if (!apf_workload_name_ok(w->name))
			rc = apf_config_error(c, "workload", "name",
					      "lowercase letters, digits, _ "
					      "and - only");
		else if (strcmp(base, w->name) && strcmp(base, "."))
			rc = apf_config_error(c, "workload", "name",
					      "'%s' differs from its directory "
					      "'%s'",
					      w->name, base);
	}
	if (!rc)
		rc = dup_opt(c, "workload", "description", &w->description);
	if (!rc)
		rc = dup_req(c, "workload", "model", &w->model);
	if (!rc)
		rc = dup_req(c, "workload", "loss", &w->loss);
	if (!rc)
		rc = dup_req(c, "workload", "metric", &w->metric);
	if (!rc)
		rc = load_metrics(w);
	const char *dirn = NULL;
	if (!rc)
		rc = apf_config_string(&dirn, c, "workload", "direction");
	if (!rc) {
		if (!strcmp(dirn, "max"))
			w->direction = 1;
		else if (!strcmp(dirn, "min"))
			w->direction = -1;
		else
			rc = apf_config_error(c, "workload", "direction",
					      "expected max or min, got '%s'",
					      dirn);
	}
	if (!rc)
		rc = apf_config_double(&w->validation_target, c, "workload",
				       "validation_target");
	if (!rc)
		rc = apf_config_double(&w->test_target, c, "workload",
				       "test_target");
	const char *targets = "provisional";
	if (!rc)
		rc = apf_config_opt_string(&targets, c, "workload", "targets");
	if (!rc) {
		if (!strcmp(targets, "provisional"))
			w->targets_provisional = 1;
		else if (strcmp(targets, "derived"))
			rc = apf_config_error(c, "workload", "targets",
					      "expected provisional or derived");
	}
	w->max_steps = 0;
	if (!rc)
		rc = apf_config_opt_long(&w->max_steps, c, "workload",
					 "max_steps");
	if (!rc && w->max_steps < 0)
		rc = apf_config_error(c, "workload", "max_steps",
				      "must not be negative");
	w->step_hint = w->max_steps;
	if (!rc)
		rc = apf_config_opt_long(&w->step_hint, c, "workload",
					 "step_hint");
	if (!rc && (w->step_hint < 0 ||
		    (w->max_steps > 0 && w->step_hint > w->max_steps)))
		rc = apf_config_error(c, "workload", "step_hint",
				      "must be from 0 to max_steps");
	w->eval_examples = 0;
	if (!rc)
		rc = apf_config_opt_long(&w->eval_examples, c, "workload",
					 "eval_examples");
	if (!rc && w->eval_examples < 0)
		rc = apf_config_error(c, "workload", "eval_examples",
				      "must not be negative");
	/* dataset */
	const char *dpath = NULL;
	if (!rc)
		rc = dup_req(c, "dataset", "name", &w->dataset_name);
	if (!rc)
		rc = apf_config_string(&dpath, c, "dataset", "path");
	if (!rc) {
		const char *redirect = getenv("APF_DATASETS_DIR");
		if (redirect && *redirect)
			w->dataset_path = apf_path_join(redirect, w->dataset_name);
		else if (dpath[0] == '/')
			w->dataset_path = apf_strdup(dpath);
		else
			w->dataset_path = apf_path_join(dir, dpath);
		if (!w->dataset_path)
			rc = apf_error(APF_ENOMEM, dir, "out of memory");
	}
	if (!rc)
		rc = dup_opt(c, "dataset", "digest", &w->dataset_digest);
	if (!rc && w->dataset_digest && !apf_is_hex_digest(w->dataset_digest))
		rc = apf_config_error(c, "dataset", "digest",
				      "expected 64 lowercase hex digits (the "
				      "output of apf hash)");
	if (!rc)
		rc = load_budget(c, "budget.cpu", &w->cpu, 1);
	if (!rc)
		rc = load_budget(c, "budget.gpu", &w->gpu, 0);
	if (!rc)
		rc = load_variants(w);
	if (rc) {
		apf_workload_spec_free(w);
		return rc;
	}
	*out = w;
	return 0;
}

/* Which workloads there are, and where they were looked for: a typo or a
 * missing APF_WORKLOADS_DIR is then plain from the one line. */
static int no_such_workload(const char *name, const char *root)
{
	char **names = NULL;
	size_t n = 0;
	apf_buf known = {0};
	if (apf_workloads_list(&names, &n) == 0)
		for (size_t i = 0; i < n; i++)
			apf_buf_printf(&known, "%s%s", i ? ", " : "", names[i]);
	apf_workloads_list_free(names, n);
	apf_error_clear();
	const char *env = getenv("APF_WORKLOADS_DIR");
	int rc = apf_error(APF_EINPUT, name,
			   "no such workload in %s (%s); %s%s", root,
			   env && *env ? "APF_WORKLOADS_DIR"
				       : "apf's own workloads; APF_WORKLOADS_DIR "
					 "names another directory",
			   known.len ? "workloads there: " : "none there",
			   known.len ? known.data : "");
	apf_buf_free(&known);
	return rc;
}

int apf_workload_spec_load(apf_workload_spec **out, const char *name)
{
	*out = NULL;
	if (!apf_workload_name_ok(name))
		return apf_error(APF_EINPUT, name,
				 "not a workload name (lowercase letters, "
				 "digits, _ and -)");
	char *root;
	int rc = apf_workloads_dir(&root);
	if (rc)
		return rc;
	char *dir = apf_path_join(root, name);
	char *ini = dir ? apf_path_join(dir, "workload.ini") : NULL;
	struct stat st;
	if (!ini)
		rc = apf_error(APF_ENOMEM, name, "out of memory");
	else if (stat(ini, &st) != 0)
		rc = no_such_workload(name, root);
	else
		rc = apf_workload_spec_load_dir(out, dir);
	free(ini);
	free(dir);
	free(root);
	return rc;
}

void apf_workload_spec_free(apf_workload_spec *w)
{
	if (!w)
		return;
	for (size_t i = 0; i < w->nvariants; i++)
		free(w->variants[i].name);
	free(w->variants);
	free(w->name);
	free(w->dir);
	free(w->description);
	free(w->model);
	free(w->loss);
	free(w->metric);
	for (size_t i = 0; i < w->nmetrics; i++)
		free(w->metrics[i]);
	free(w->dataset_name);
	free(w->dataset_path);
	free(w->dataset_digest);
	apf_config_free(w->ini);
	free(w);
}

const struct apf_workload_variant *
apf_workload_variant(const apf_workload_spec *w, const char *name)
{
	static _Thread_local struct apf_workload_variant base;
	if (!name || !strcmp(name, "base")) {
		base.name = "base";
		base.validation_target = w->validation_target;
		base.test_target = w->test_target;
		return &base;
	}
	for (size_t i = 0; i < w->nvariants; i++)
		if (!strcmp(w->variants[i].name, name))
			return &w->variants[i];
	return NULL;
}

const char *apf_workload_model_value(const apf_workload_spec *w,
				     const char *variant, const char *key)
{
	if (variant && strcmp(variant, "base")) {
		char section[256];
		snprintf(section, sizeof section, "variant.%s", variant);
		const char *v = apf_config_get(w->ini, section, key);
		if (v)
			return v;
	}
	return apf_config_get(w->ini, "model", key);
}

const struct apf_budget *apf_workload_budget(const apf_workload_spec *w,
					     const char *device)
{
	if (device && !strcmp(device, "cuda"))
		return w->gpu.max_runtime_s > 0 ? &w->gpu : NULL;
	return &w->cpu;
}

int apf_workload_meets(int direction, double value, double target)
{
	return direction > 0 ? value >= target : value <= target;
}

const char *apf_variant_targets_name(int targets)
{
	switch (targets) {
	case APF_VARIANT_TARGETS_SET:
		return "provisional";
	case APF_VARIANT_TARGETS_DERIVED:
		return "derived";
	case APF_VARIANT_TARGETS_RETUNED:
		return "retuned";
	default:
		return "base";
	}
}

uint64_t apf_workload_budget_ns(const struct apf_budget *b, double multiplier,
				double scale)
{
	return (uint64_t)llround(b->max_runtime_s * multiplier * scale * 1e9);
}

uint64_t apf_workload_eval_period_ns(const struct apf_budget *b, double scale)
{
	return (uint64_t)llround(b->eval_period_s * scale * 1e9);
}

uint64_t apf_workload_init_allowance_ns(uint64_t budget_ns)
{
	uint64_t share = budget_ns / 100, floor = 5000000000ull;
	return share > floor ? share : floor;
}
