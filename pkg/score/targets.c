/*
 * targets.c: the rule sets, the targets (AlgoPerf's workload_targets JSON or
 * the workloads' own workload.ini), and held-out variant lists.
 *
 * The AlgoPerf rule sets record what the published scorer
 * (scoring/performance_profile.py of mlcommons/algorithmic-efficiency, v0.5
 * and v0.6) does, as facts: which trial of a study counts, how many studies
 * and trials it expects, which metric names it minimises or maximises (it
 * matches "validation/<name>" as a substring, i.e. by prefix of the metric
 * name), and that v0.6 added "ppl" for finewebedu_lm. v0.6 also dropped the
 * held-out workloads and went from 5 to 3 studies; the self-tuning budget
 * went from 3x to 1.5x the external one.
 */
#include "score/score.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "heldout/heldout.h"
#include "workload/workload.h"

static const char *const min_v05[] = {"ce_loss", "error_rate", "ctc_loss",
				      "wer",     "l1_loss",    "loss",
				      NULL};
static const char *const min_v06[] = {"ce_loss", "error_rate", "ctc_loss",
				      "wer",     "l1_loss",    "loss",
				      "ppl",     NULL};
static const char *const max_all[] = {"mean_average_precision", "ssim",
				      "accuracy", "bleu", NULL};
/* apf's own workloads' metrics besides AlgoPerf's: clicks_dlrm's log loss
 * and AUC, text_lm's cross-entropy and perplexity, fmnist_unet's PSNR (its
 * SSIM and L1 loss are AlgoPerf's fastMRI metrics). The AlgoPerf rule sets
 * keep their scorers' lists. */
static const char *const min_apf[] = {"ce_loss", "error_rate", "ctc_loss",
				      "wer",     "l1_loss",    "loss",
				      "ppl",     "log_loss",   "cross_entropy",
				      "perplexity", NULL};
static const char *const max_apf[] = {"mean_average_precision", "ssim",
				      "accuracy", "bleu", "auc", "psnr", NULL};

static const apf_score_rules rule_sets[] = {
	{"apf",
	 "apf: the fastest trial of each study; held-out rules when variants "
	 "are drawn",
	 APF_SCORE_BEST_MIN_TIME, 0, 0, 1.5, 0, 0, min_apf, max_apf},
	{"algoperf-0.5",
	 "AlgoPerf v0.5 scorer: per study the trial that met the target at the "
	 "earliest eval; 5 studies x 5 trials; held-out variants",
	 APF_SCORE_BEST_FIRST_EVAL, 5, 5, 3.0, 0, 1, min_v05, max_all},
	{"algoperf-0.6",
	 "AlgoPerf v0.6 scorer: per study the trial that met the target at the "
	 "earliest eval; 3 studies x 5 trials; no held-out workloads",
	 APF_SCORE_BEST_FIRST_EVAL, 3, 5, 1.5, 0, 1, min_v06, max_all},
};

const apf_score_rules *apf_score_rules_get(const char *name)
{
	for (size_t i = 0; i < sizeof rule_sets / sizeof rule_sets[0]; i++)
		if (!strcmp(rule_sets[i].name, name))
			return &rule_sets[i];
	return NULL;
}

void apf_score_rules_self(apf_score_rules *out, const apf_score_rules *r)
{
	*out = *r;
	out->self_tuning = 1;
	out->trials = r->trials ? 1 : 0;
}

const apf_score_rules *apf_score_rules_for_version(const char *version)
{
	if (!version)
		return NULL;
	/* Exactly the versions whose scorer the rule sets record: a later
	 * "0.6.1" may score differently, and saying so beats guessing. */
	if (!strcmp(version, "0.5"))
		return &rule_sets[1];
	if (!strcmp(version, "0.6"))
		return &rule_sets[2];
	return NULL;
}

int apf_score_metric_direction(const apf_score_rules *r, const char *metric)
{
	for (const char *const *m = r->minimize; *m; m++)
		if (!strncmp(metric, *m, strlen(*m)))
			return -1;
	for (const char *const *m = r->maximize; *m; m++)
		if (!strncmp(metric, *m, strlen(*m)))
			return 1;
	return 0;
}

/* What each metric AlgoPerf logs can be, by the same prefixes. SSIM is a
 * correlation and goes below 0 early in training (the v0.5 fastMRI logs
 * hold values near -0.08); BLEU is sacreBLEU's 0 to 100; WER counts
 * insertions, so it passes 1 (4.4 in the v0.5 logs). */
static const struct {
	const char *prefix;
	double lo, hi;
} metric_ranges[] = {
	{"accuracy", 0, 1},    {"mean_average_precision", 0, 1},
	{"ssim", -1, 1},       {"bleu", 0, 100},
	{"error_rate", 0, INFINITY}, {"wer", 0, INFINITY},
	{"ce_loss", 0, INFINITY},    {"ctc_loss", 0, INFINITY},
	{"l1_loss", 0, INFINITY},    {"loss", 0, INFINITY},
	{"ppl", 1, INFINITY},
	{"log_loss", 0, INFINITY},   {"cross_entropy", 0, INFINITY},
	{"perplexity", 1, INFINITY}, {"auc", 0, 1},
};

void apf_score_metric_range(const char *metric, double *lo, double *hi)
{
	*lo = -INFINITY;
	*hi = INFINITY;
	for (size_t i = 0; i < sizeof metric_ranges / sizeof *metric_ranges;
	     i++) {
		const char *p = metric_ranges[i].prefix;
		if (!strncmp(metric, p, strlen(p))) {
			*lo = metric_ranges[i].lo;
			*hi = metric_ranges[i].hi;
			return;
		}
	}
}

/* ---- targets -------------------------------------------------------------- */

struct entry {
	char *workload;
	char *metric;
	int direction;      /* 0: from the rules */
	double validation;
	long step_hint;     /* 0: the targets do not say */
	char *base;         /* workload.ini variants: their base */
};

struct apf_score_targets {
	char *source;
	char *version;
	int from_workloads;
	char *dir;          /* workloads directory, once known */
	char **base, **heldout;
	size_t nbase, nheldout;
	struct entry *e;
	size_t n;
};

static void free_strings(char **v, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(v[i]);
	free(v);
}

void apf_score_targets_free(apf_score_targets *t)
{
	if (!t)
		return;
	for (size_t i = 0; i < t->n; i++) {
		free(t->e[i].workload);
		free(t->e[i].metric);
		free(t->e[i].base);
	}
	free(t->e);
	free_strings(t->base, t->nbase);
	free_strings(t->heldout, t->nheldout);
	free(t->source);
	free(t->version);
	free(t->dir);
	free(t);
}

const char *apf_score_targets_source(const apf_score_targets *t)
{
	return t->source;
}

const char *apf_score_targets_dir(const apf_score_targets *t)
{
	return t->from_workloads ? t->dir : NULL;
}

const char *apf_score_targets_version(const apf_score_targets *t)
{
	return t->version;
}

int apf_score_targets_rules(const apf_score_rules **out,
			    const apf_score_targets *t)
{
	*out = NULL;
	if (!t->version)
		return 0;
	if (!(*out = apf_score_rules_for_version(t->version)))
		return apf_error(APF_EINPUT, t->source,
				 "benchmark_version: '%s' is not a version apf "
				 "can score (0.5 or 0.6); pass --rules to "
				 "choose the rules",
				 t->version);
	return 0;
}

const char *const *apf_score_targets_base(const apf_score_targets *t,
					  size_t *n)
{
	*n = t->nbase;
	return (const char *const *)t->base;
}

const char *const *apf_score_targets_heldout(const apf_score_targets *t,
					     size_t *n)
{
	*n = t->nheldout;
	return (const char *const *)t->heldout;
}

static int add_entry(apf_score_targets *t, const char *workload,
		     const char *metric, int direction, double validation,
		     long step_hint, const char *base)
{
	struct entry *ne = realloc(t->e, (t->n + 1) * sizeof *ne);
	if (!ne)
		return apf_error(APF_ENOMEM, t->source, "out of memory");
	t->e = ne;
	struct entry *e = &t->e[t->n];
	e->workload = apf_strdup(workload);
	e->metric = apf_strdup(metric);
	e->base = base ? apf_strdup(base) : NULL;
	e->direction = direction;
	e->validation = validation;
	e->step_hint = step_hint;
	if (!e->workload || !e->metric || (base && !e->base)) {
		free(e->workload);
		free(e->metric);
		free(e->base);
		return apf_error(APF_ENOMEM, t->source, "out of memory");
	}
	t->n++;
	return 0;
}

/* The keys of AlgoPerf's workload_targets JSON, as its scorer reads them
 * (scoring/config.py of mlcommons/submissions_algorithms): the file names
 * its benchmark_version and lists both kinds of workload, and every entry
 * has its step_hint. A file without benchmark_version is apf's shorter
 * form: "workloads", the two lists optional, step_hint optional. Any other
 * key is refused, in both forms: a misspelt key would otherwise be read as
 * absent and score something else without a word. */
static const char *const top_keys[] = {"_comment", "benchmark_version",
				       "base_workloads", "held_out_workloads",
				       "workloads", NULL};
static const char *const workload_keys[] = {"target_metric_name",
					    "validation_target_value",
					    "step_hint", NULL};

/* prefix names the object ("" at the top level, "workloads.<name>."). */
static int check_keys(const apf_score_targets *t, json_t *o,
		      const char *prefix, const char *const *keys)
{
	const char *k;
	json_t *v;
	json_object_foreach(o, k, v) {
		const char *const *p = keys;
		while (*p && strcmp(*p, k))
			p++;
		if (*p)
			continue;
		apf_buf want = {0};
		for (p = keys; *p; p++)
			if (apf_buf_printf(&want, "%s%s", p == keys ? "" : ", ",
					   *p)) {
				apf_buf_free(&want);
				return apf_error(APF_ENOMEM, t->source,
						 "out of memory");
			}
		int rc = apf_error(APF_EINPUT, t->source,
				   "%s%s: unknown key (expected %s)", prefix, k,
				   want.data);
		apf_buf_free(&want);
		return rc;
	}
	return 0;
}

static int string_list(apf_score_targets *t, json_t *root, const char *key,
		       int required, char ***out, size_t *n)
{
	*out = NULL;
	*n = 0;
	json_t *a = json_object_get(root, key);
	if (!a)
		return required ? apf_error(APF_EINPUT, t->source,
					    "%s: missing", key)
				: 0;
	if (!json_is_array(a))
		return apf_error(APF_EINPUT, t->source,
				 "%s: not an array of workload names", key);
	size_t k = json_array_size(a);
	char **v = apf_calloc(k ? k : 1, sizeof *v);
	if (!v)
		return apf_error(APF_ENOMEM, t->source, "out of memory");
	int rc = 0;
	for (size_t i = 0; !rc && i < k; i++) {
		json_t *s = json_array_get(a, i);
		if (!json_is_string(s) || !json_string_length(s)) {
			rc = apf_error(APF_EINPUT, t->source,
				       "%s[%zu]: not a workload name", key, i);
			break;
		}
		if (!(v[i] = apf_strdup(json_string_value(s))))
			rc = apf_error(APF_ENOMEM, t->source, "out of memory");
	}
	if (rc) {
		free_strings(v, k);
		return rc;
	}
	*out = v;
	*n = k;
	return 0;
}

static const struct entry *find_entry(const apf_score_targets *t,
				      const char *workload)
{
	for (size_t i = 0; i < t->n; i++)
		if (!strcmp(t->e[i].workload, workload))
			return &t->e[i];
	return NULL;
}

/* One entry of "workloads"; versioned: step_hint is required. */
static int parse_workload(apf_score_targets *t, const char *name, json_t *w,
			  int versioned)
{
	if (!*name)
		return apf_error(APF_EINPUT, t->source,
				 "workloads: \"\" is not a workload name");
	if (!json_is_object(w))
		return apf_error(APF_EINPUT, t->source,
				 "workloads.%s: not an object", name);
	apf_buf prefix = {0};
	if (apf_buf_printf(&prefix, "workloads.%s.", name))
		return apf_error(APF_ENOMEM, t->source, "out of memory");
	int rc = check_keys(t, w, prefix.data, workload_keys);
	apf_buf_free(&prefix);
	if (rc)
		return rc;
	json_t *m = json_object_get(w, "target_metric_name");
	json_t *val = json_object_get(w, "validation_target_value");
	json_t *hint = json_object_get(w, "step_hint");
	const char *why = NULL, *key = NULL;
	if (!m)
		key = "target_metric_name", why = "missing";
	else if (!json_is_string(m) || !json_string_length(m))
		key = "target_metric_name", why = "not a metric name";
	else if (!val)
		key = "validation_target_value", why = "missing";
	else if (!json_is_number(val))
		key = "validation_target_value", why = "not a number";
	else if (!isfinite(json_number_value(val)))
		key = "validation_target_value", why = "not a finite number";
	else if (!hint && versioned)
		key = "step_hint", why = "missing";
	else if (hint && (!json_is_integer(hint) ||
			  json_integer_value(hint) <= 0))
		key = "step_hint", why = "not a positive integer";
	if (why)
		return apf_error(APF_EINPUT, t->source, "workloads.%s.%s: %s",
				 name, key, why);
	return add_entry(t, name, json_string_value(m), 0,
			 json_number_value(val),
			 hint ? (long)json_integer_value(hint) : 0, NULL);
}

/* No workload listed twice, in one list or across both, checked on a
 * sorted copy (a list is a few names in AlgoPerf's files, but nothing
 * bounds it). */
struct listed {
	const char *name;
	int held;
};

static int cmp_listed(const void *a, const void *b)
{
	const struct listed *x = a, *y = b;
	int c = strcmp(x->name, y->name);
	return c ? c : x->held - y->held;
}

static int check_lists_unique(const apf_score_targets *t)
{
	size_t n = t->nbase + t->nheldout;
	if (n < 2)
		return 0;
	struct listed *l = apf_calloc(n, sizeof *l);
	if (!l)
		return apf_error(APF_ENOMEM, t->source, "out of memory");
	for (size_t i = 0; i < n; i++) {
		l[i].held = i >= t->nbase;
		l[i].name = l[i].held ? t->heldout[i - t->nbase] : t->base[i];
	}
	qsort(l, n, sizeof *l, cmp_listed);
	int rc = 0;
	for (size_t i = 1; !rc && i < n; i++) {
		if (strcmp(l[i - 1].name, l[i].name))
			continue;
		if (l[i - 1].held != l[i].held)
			rc = apf_error(APF_EINPUT, t->source,
				       "held_out_workloads: %s is also a base "
				       "workload",
				       l[i].name);
		else
			rc = apf_error(APF_EINPUT, t->source,
				       "%s: %s is listed twice",
				       l[i].held ? "held_out_workloads"
						 : "base_workloads",
				       l[i].name);
	}
	free(l);
	return rc;
}

static int parse_targets_json(apf_score_targets *t, json_t *root)
{
	if (!json_is_object(root))
		return apf_error(APF_EINPUT, t->source,
				 "not a JSON object (expected AlgoPerf's "
				 "workload_targets JSON)");
	int rc = check_keys(t, root, "", top_keys);
	if (rc)
		return rc;
	json_t *c = json_object_get(root, "_comment");
	if (c && !json_is_string(c))
		return apf_error(APF_EINPUT, t->source,
				 "_comment: not a string");
	json_t *v = json_object_get(root, "benchmark_version");
	if (v && (!json_is_string(v) || !json_string_length(v)))
		return apf_error(APF_EINPUT, t->source,
				 "benchmark_version: not a version string");
	if (v && !(t->version = apf_strdup(json_string_value(v))))
		return apf_error(APF_ENOMEM, t->source, "out of memory");
	json_t *ws = json_object_get(root, "workloads");
	if (!ws)
		return apf_error(APF_EINPUT, t->source,
				 "workloads: missing (expected AlgoPerf's "
				 "workload_targets JSON)");
	if (!json_is_object(ws))
		return apf_error(APF_EINPUT, t->source,
				 "workloads: not an object");
	const char *name;
	json_t *w;
	json_object_foreach(ws, name, w) {
		if ((rc = parse_workload(t, name, w, v != NULL)))
			return rc;
	}
	rc = string_list(t, root, "base_workloads", v != NULL, &t->base,
			 &t->nbase);
	if (!rc)
		rc = string_list(t, root, "held_out_workloads", v != NULL,
				 &t->heldout, &t->nheldout);
	for (size_t i = 0; !rc && i < t->nbase + t->nheldout; i++) {
		int held = i >= t->nbase;
		size_t k = held ? i - t->nbase : i;
		const char *n = held ? t->heldout[k] : t->base[k];
		if (!find_entry(t, n))
			rc = apf_error(APF_EINPUT, t->source,
				       "%s[%zu]: %s has no entry in workloads",
				       held ? "held_out_workloads"
					    : "base_workloads",
				       k, n);
	}
	if (!rc)
		rc = check_lists_unique(t);
	return rc;
}

int apf_score_targets_load_json(apf_score_targets **out, const char *path)
{
	*out = NULL;
	apf_score_targets *t = apf_calloc(1, sizeof *t);
	if (!t || !(t->source = apf_strdup(path))) {
		free(t);
		return apf_error(APF_ENOMEM, path, "out of memory");
	}
	json_error_t err;
	json_t *root = json_load_file(path, JSON_REJECT_DUPLICATES, &err);
	int rc;
	if (!root) {
		struct stat st;
		if (stat(path, &st) != 0)
			rc = apf_error_errno(APF_EINPUT, errno, path,
					     "cannot read");
		else
			rc = apf_error(APF_EINPUT, path, "line %d: %s",
				       err.line, err.text);
	} else {
		rc = parse_targets_json(t, root);
	}
	json_decref(root);
	if (rc) {
		apf_score_targets_free(t);
		return rc;
	}
	*out = t;
	return 0;
}

int apf_score_targets_from_workloads(apf_score_targets **out,
				     const char *dir)
{
	*out = NULL;
	apf_score_targets *t = apf_calloc(1, sizeof *t);
	if (!t)
		return apf_error(APF_ENOMEM, "targets", "out of memory");
	t->from_workloads = 1;
	if (dir && !(t->dir = apf_strdup(dir))) {
		free(t);
		return apf_error(APF_ENOMEM, "targets", "out of memory");
	}
	t->source = apf_strdup(dir ? dir : "workloads");
	if (!t->source) {
		apf_score_targets_free(t);
		return apf_error(APF_ENOMEM, "targets", "out of memory");
	}
	*out = t;
	return 0;
}

static int has_ini(const char *dir, const char *name, size_t len)
{
	apf_buf p = {0};
	struct stat st;
	int yes = apf_buf_printf(&p, "%s/%.*s/workload.ini", dir, (int)len,
				 name) == 0 &&
		  stat(p.data, &st) == 0 && S_ISREG(st.st_mode);
	apf_buf_free(&p);
	return yes;
}

/* Loads a workload, or a variant B_<v> of base B, from workload.ini. */
static int load_from_workloads(apf_score_targets *t, const char *workload)
{
	if (!t->dir) {
		int rc = apf_workloads_dir(&t->dir);
		if (rc)
			return apf_error_prefix(rc, workload);
		free(t->source);
		if (!(t->source = apf_strdup(t->dir)))
			return apf_error(APF_ENOMEM, workload, "out of memory");
	}
	if (!apf_workload_name_ok(workload))
		return apf_error(APF_EINPUT, workload,
				 "not a workload name (lowercase letters, "
				 "digits, _ and -)");
	size_t len = strlen(workload);
	const char *variant = NULL;
	if (!has_ini(t->dir, workload, len)) {
		/* The longest base first: a_b_c is a_b's variant c before
		 * a's variant b_c. */
		for (len = strlen(workload); len > 0; len--)
			if (workload[len - 1] == '_' && len > 1 &&
			    has_ini(t->dir, workload, len - 1)) {
				len--;
				variant = workload + len + 1;
				break;
			}
		if (!variant)
			return apf_error(APF_EINPUT, workload,
					 "no target: %s/%s/workload.ini does "
					 "not exist (set APF_WORKLOADS_DIR, or "
					 "pass --targets FILE)",
					 t->dir, workload);
	}
	char *dir = strndup(workload, len);
	char *path = dir ? apf_path_join(t->dir, dir) : NULL;
	apf_workload_spec *w = NULL;
	int rc = path ? apf_workload_spec_load_dir(&w, path)
		      : apf_error(APF_ENOMEM, workload, "out of memory");
	if (!rc) {
		double target = w->validation_target;
		if (variant) {
			const struct apf_workload_variant *v =
				apf_workload_variant(w, variant);
			if (!v)
				rc = apf_error(APF_EINPUT, workload,
					       "no target: %s/workload.ini has "
					       "no [variant.%s]",
					       path, variant);
			else
				target = v->validation_target;
		}
		if (!rc)
			rc = add_entry(t, workload, w->metric, w->direction,
				       target, w->step_hint,
				       variant ? dir : NULL);
	}
	apf_workload_spec_free(w);
	free(path);
	free(dir);
	return rc;
}

int apf_score_targets_find(struct apf_score_target *out, const char **base,
			   apf_score_targets *t, const apf_score_rules *rules,
			   const char *workload)
{
	const struct entry *e = find_entry(t, workload);
	if (!e && t->from_workloads) {
		int rc = load_from_workloads(t, workload);
		if (rc)
			return rc;
		e = find_entry(t, workload);
	}
	if (!e)
		return apf_error(APF_EINPUT, workload,
				 "no target for this workload in %s",
				 t->source);
	out->metric = e->metric;
	out->validation = e->validation;
	out->direction = e->direction;
	out->step_hint = e->step_hint;
	if (base)
		*base = e->base;
	if (!out->direction) {
		out->direction = apf_score_metric_direction(rules, e->metric);
		if (!out->direction)
			return apf_error(APF_EINPUT, workload,
					 "%s: the rules %s do not know whether "
					 "metric '%s' is to be minimised or "
					 "maximised",
					 t->source, rules->name, e->metric);
	}
	return 0;
}

/* ---- held-out lists ------------------------------------------------------- */

int apf_score_heldout_new(apf_score_heldout **out, const char *source)
{
	*out = apf_calloc(1, sizeof **out);
	if (!*out || !((*out)->source = apf_strdup(source))) {
		free(*out);
		*out = NULL;
		return apf_error(APF_ENOMEM, source, "out of memory");
	}
	return 0;
}

void apf_score_heldout_free(apf_score_heldout *h)
{
	if (!h)
		return;
	for (size_t i = 0; i < h->n; i++) {
		free(h->v[i].base);
		free(h->v[i].variant);
	}
	free(h->v);
	free(h->seed);
	free(h->source);
	free(h);
}

/* Appends one variant, refusing a name already listed. */
static int heldout_append(apf_score_heldout *h, const char *base,
			  const char *variant)
{
	apf_buf full = {0};
	int rc = 0;
	/* An apf draw may name the variant alone ("gelu" of "mlp") or the
	 * whole workload ("mlp_gelu"). */
	if (base && !(strncmp(variant, base, strlen(base)) == 0 &&
		      variant[strlen(base)] == '_'))
		rc = apf_buf_printf(&full, "%s_%s", base, variant);
	else
		rc = apf_buf_puts(&full, variant);
	if (rc)
		return apf_error(APF_ENOMEM, h->source, "out of memory");
	for (size_t i = 0; i < h->n; i++)
		if (!strcmp(h->v[i].variant, full.data)) {
			rc = apf_error(APF_EINPUT, h->source,
				       "variant %s is listed twice", full.data);
			apf_buf_free(&full);
			return rc;
		}
	/* Doubling at each power of two (the struct keeps no capacity): one
	 * element more each time copies the whole list under allocators that
	 * never grow in place, such as AddressSanitizer's. */
	if ((h->n & (h->n - 1)) == 0) {
		struct apf_score_variant *nv =
			realloc(h->v, (h->n ? 2 * h->n : 1) * sizeof *nv);
		if (!nv) {
			apf_buf_free(&full);
			return apf_error(APF_ENOMEM, h->source,
					 "out of memory");
		}
		h->v = nv;
	}
	h->v[h->n].variant = full.data;
	h->v[h->n].base = base ? apf_strdup(base) : NULL;
	if (base && !h->v[h->n].base) {
		apf_buf_free(&full);
		return apf_error(APF_ENOMEM, h->source, "out of memory");
	}
	h->n++;
	return 0;
}

int apf_score_heldout_add(apf_score_heldout *h, const char *base,
			  const char *variant)
{
	return heldout_append(h, base, variant);
}

/* The file is read by pkg/heldout's reader of held-out files, whose
 * names move here. */
int apf_score_heldout_load(apf_score_heldout **out, const char *path)
{
	*out = NULL;
	apf_heldout_list *l = NULL;
	apf_score_heldout *h = NULL;
	int rc = apf_heldout_list_load(&l, path);
	if (!rc)
		rc = apf_score_heldout_new(&h, path);
	/* A power of two at least n, as heldout_append grows it. */
	size_t cap = 1;
	while (!rc && cap < l->n)
		cap *= 2;
	if (!rc && !(h->v = apf_calloc(cap, sizeof *h->v)))
		rc = apf_error(APF_ENOMEM, path, "out of memory");
	for (size_t i = 0; !rc && i < l->n; i++) {
		h->v[i].base = l->v[i].base;
		h->v[i].variant = l->v[i].workload;
		l->v[i].base = l->v[i].workload = NULL;
		h->n++;
	}
	if (!rc) {
		h->seed = l->seed;
		l->seed = NULL;
	}
	apf_heldout_list_free(l);
	if (rc) {
		apf_score_heldout_free(h);
		return rc;
	}
	*out = h;
	return 0;
}

const char *apf_score_base_of(const char *variant, const char *const *bases,
			      size_t nbases)
{
	const char *best = NULL;
	size_t best_len = 0;
	for (size_t i = 0; i < nbases; i++) {
		size_t n = strlen(bases[i]);
		if (n > best_len && !strncmp(variant, bases[i], n) &&
		    variant[n] == '_') {
			best = bases[i];
			best_len = n;
		}
	}
	if (best)
		return best;
	for (size_t i = 0; i < nbases; i++)
		if (strcmp(variant, bases[i]) && strstr(variant, bases[i]))
			return bases[i];
	return NULL;
}
