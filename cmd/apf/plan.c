/*
 * plan.c: `apf plan ENTRY.apf [--json]`: the trials `apf run` will execute
 * for a verified entry - every workload x study x trial - with the
 * hyperparameters each one draws.
 */
#include "cmd.h"

#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "entry/entry.h"
#include "tuning/tuning.h"
#include "workload/workload.h"

/* What the plan costs: each workload's budget and eval period for the
 * device, times the ruleset's multiplier and --budget-scale, and the sum
 * over the plan's units. A workload whose spec this machine lacks leaves
 * the sum unknown (why says which); plan still prints the trials. */
struct cost {
	const char *device;
	double scale; /* 1: the official budget */
	double total_s;
	char why[512]; /* empty: every unit's budget is known */
	struct wcost {
		const char *workload;
		double budget_s, period_s;
		size_t units;
	} w[64];
	size_t nw;
};

static struct wcost *cost_of(struct cost *c, const char *workload,
			     double multiplier)
{
	for (size_t i = 0; i < c->nw; i++)
		if (!strcmp(c->w[i].workload, workload))
			return &c->w[i];
	if (c->nw == sizeof c->w / sizeof c->w[0] || c->why[0])
		return NULL;
	apf_workload_spec *spec = NULL;
	if (apf_workload_spec_load(&spec, workload)) {
		snprintf(c->why, sizeof c->why, "%s", apf_error_message());
		apf_error_clear();
		return NULL;
	}
	const struct apf_budget *b = apf_workload_budget(spec, c->device);
	if (!b) {
		snprintf(c->why, sizeof c->why,
			 "workload %s has no budget for --device %s", workload,
			 c->device);
		apf_workload_spec_free(spec);
		return NULL;
	}
	struct wcost *w = &c->w[c->nw++];
	w->workload = workload;
	w->budget_s = (double)apf_workload_budget_ns(b, multiplier, c->scale) / 1e9;
	w->period_s = (double)apf_workload_eval_period_ns(b, c->scale) / 1e9;
	w->units = 0;
	apf_workload_spec_free(spec);
	return w;
}

static void plan_cost(struct cost *c, const apf_entry *e, const apf_plan *p)
{
	for (size_t i = 0; i < p->n; i++) {
		struct wcost *w =
			cost_of(c, p->units[i].workload,
				e->manifest->tuning.budget_multiplier);
		if (!w) {
			if (!c->why[0])
				snprintf(c->why, sizeof c->why,
					 "more than %zu workloads",
					 sizeof c->w / sizeof c->w[0]);
			return;
		}
		w->units++;
		c->total_s += w->budget_s;
	}
}

/* The workload names are the manifest's, the hyperparameters' names and
 * words the search space's: the submitter's text, term_text at each print
 * (the search space's parser allows only letters, digits, _ - and . in
 * them today; the printing does not rely on it). */
static void print_text(const apf_entry *e, const apf_plan *p)
{
	const apf_manifest *m = e->manifest;
	printf("plan for %s: %s tuning (%s), %ld stud%s x %ld trial%s, seed %u, "
	       "budget x%g\n",
	       term_text(e->path), term_text(m->tuning.ruleset),
	       term_text(m->tuning.rules), m->tuning.studies,
	       m->tuning.studies == 1 ? "y" : "ies", m->tuning.trials,
	       m->tuning.trials == 1 ? "" : "s", m->tuning.seed,
	       m->tuning.budget_multiplier);
	printf("%-16s %5s %5s", "workload", "study", "trial");
	size_t ndims = p->n ? p->units[0].hp.n : 0;
	/* Columns of 14, the last one unpadded: no trailing spaces. */
	for (size_t d = 0; d < ndims; d++)
		printf("  %-*s", d + 1 < ndims ? 14 : 0,
		       term_text(p->units[0].hp.names[d]));
	if (!ndims)
		printf("  (self-tuning: the submission's own defaults)");
	printf("\n");
	for (size_t i = 0; i < p->n; i++) {
		const struct apf_plan_unit *u = &p->units[i];
		printf("%-16s %5ld %5ld", term_text(u->workload), u->study,
		       u->trial + 1);
		for (size_t d = 0; d < u->hp.n; d++) {
			int width = d + 1 < u->hp.n ? 14 : 0;
			if (u->hp.words[d])
				printf("  %-*s", width,
				       term_text(u->hp.words[d]));
			else
				printf("  %-*.6g", width, u->hp.values[d]);
		}
		printf("\n");
	}
}

static void print_cost_text(const struct cost *c)
{
	if (c->why[0]) {
		printf("budget: not known here (%s)\n", term_text(c->why));
		return;
	}
	printf("budget (--device %s%s):", c->device,
	       c->scale != 1 ? ", scaled by --budget-scale" : "");
	for (size_t i = 0; i < c->nw; i++)
		printf("%s %s %g s a trial (eval every %g s), %zu trial%s",
		       i ? ";" : "", term_text(c->w[i].workload),
		       c->w[i].budget_s, c->w[i].period_s, c->w[i].units,
		       c->w[i].units == 1 ? "" : "s");
	printf("\n  %g s of submission time in all (%.1f min); each trial "
	       "stops at the first eval meeting its targets or past its "
	       "budget\n",
	       c->total_s, c->total_s / 60);
	if (c->scale != 1)
		printf("  budgets x%g: an unofficial run (verify, score and "
		       "report say so; score --strict refuses it)\n",
		       c->scale);
}

static json_t *cost_json(const struct cost *c)
{
	if (c->why[0])
		return json_pack("{s:s, s:f, s:n, s:s}", "device", c->device,
				 "budget_scale", c->scale, "total_budget_s",
				 "unknown", utf8_text(c->why));
	json_t *ws = json_array();
	for (size_t i = 0; i < c->nw; i++)
		json_array_append_new(
			ws, json_pack("{s:s, s:f, s:f, s:I}", "workload",
				      utf8_text(c->w[i].workload), "budget_s",
				      c->w[i].budget_s, "eval_period_s",
				      c->w[i].period_s, "units",
				      (json_int_t)c->w[i].units));
	return json_pack("{s:s, s:f, s:f, s:o}", "device", c->device,
			 "budget_scale", c->scale, "total_budget_s", c->total_s,
			 "workloads", ws);
}

static int print_json(const apf_entry *e, const apf_plan *p,
		      const struct cost *c)
{
	const apf_manifest *m = e->manifest;
	json_t *units = json_array();
	for (size_t i = 0; i < p->n; i++) {
		const struct apf_plan_unit *u = &p->units[i];
		json_array_append_new(
			units, json_pack("{s:s, s:I, s:I, s:o}", "workload",
					 utf8_text(u->workload), "study",
					 (json_int_t)u->study, "trial",
					 (json_int_t)u->trial + 1, "hparams",
					 apf_hparams_to_json(&u->hp)));
	}
	json_t *o = json_pack("{s:s, s:s, s:s, s:s, s:I, s:I, s:I, s:f, s:o, s:o}",
			      "entry", utf8_text(e->path), "manifest_sha256",
			      e->manifest_digest, "ruleset",
			      utf8_text(m->tuning.ruleset), "rules",
			      utf8_text(m->tuning.rules), "studies",
			      (json_int_t)m->tuning.studies, "trials",
			      (json_int_t)m->tuning.trials, "seed",
			      (json_int_t)m->tuning.seed, "budget_multiplier",
			      m->tuning.budget_multiplier, "budget", cost_json(c),
			      "units", units);
	return cmd_print_json(o, 0);
}

int cmd_plan(int argc, char **argv)
{
	int as_json = 0;
	const char *key_path = NULL, *device = "cpu", *scale = NULL;
	const struct apf_opt opts[] = {
		{"json", 0, OPT_FLAG, &as_json, NULL, "print the plan as JSON"},
		{"device", 0, OPT_STRING, &device, "cpu|cuda",
		 "whose budgets to add up (default cpu)"},
		{"budget-scale", 0, OPT_STRING, &scale, "F",
		 "the budgets as `apf run --budget-scale F` would scale them"},
		{"key", 0, OPT_STRING, &key_path, "PUB.pem",
		 "trust only this public key (default: $APF_HOME/trusted/)"},
		{0},
	};
	const struct apf_usage usage = {
		"plan ENTRY.apf [--device cpu|cuda] [--budget-scale F] [--json]",
		"Print the trials `apf run` executes for a verified entry: every "
		"workload x study\nx trial, with the hyperparameters each draws "
		"from the search space: seeded,\nshuffled, scrambled Halton points "
		"for ranges, every feasible point in each\nstudy, or a list's "
		"points in order (trial N takes point N) - the same on every\n"
		"machine - and the budget they add up to: each workload's budget "
		"a trial on the\ndevice (and its eval period), and the sum over "
		"the plan.",
		NULL, 1, 1,
		"apf plan nadamw.apf\n"
		"apf plan nadamw.apf --budget-scale 0.25\n"
		"apf plan nadamw.apf --json"};
	int nargs, rc = cmd_start("plan", &usage, opts, argc, argv, &nargs);
	if (rc >= 0)
		return rc;
	struct cost c = {.device = device, .scale = 1};
	const char *bad = strcmp(device, "cpu") && strcmp(device, "cuda")
				  ? "--device takes cpu or cuda"
				  : NULL;
	if (!bad && scale && !(c.scale = cmd_budget_scale(scale)))
		bad = CMD_BUDGET_SCALE_BAD;
	if (bad) {
		apf_error(APF_EUSAGE, "plan", "%s", bad);
		return cmd_fail(APF_EUSAGE);
	}
	apf_keyring *kr = NULL;
	apf_entry *e = NULL;
	apf_plan *p = NULL;
	rc = apf_keyring_default(&kr, key_path, "--key");
	if (!rc)
		rc = apf_entry_verify(&e, argv[1], kr);
	if (!rc)
		rc = apf_entry_plan(&p, e);
	if (!rc)
		plan_cost(&c, e, p);
	if (!rc && as_json)
		rc = print_json(e, p, &c);
	else if (!rc) {
		print_text(e, p);
		print_cost_text(&c);
	}
	apf_plan_free(p);
	apf_entry_free(e);
	apf_keyring_free(kr);
	return rc ? cmd_fail(rc) : 0;
}
