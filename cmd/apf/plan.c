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

/* The workload names are the manifest's, the hyperparameters' names and
 * words the search space's: the submitter's text, term_text at each print
 * (the search space's parser allows only letters, digits, _ - and . in
 * them today; the printing does not rely on it). */
static void print_text(const apf_entry *e, const apf_plan *p)
{
	const apf_manifest *m = e->manifest;
	printf("plan for %s: %s tuning (%s), %ld studies x %ld trials, seed %u, "
	       "budget x%g\n",
	       term_text(e->path), term_text(m->tuning.ruleset),
	       term_text(m->tuning.rules), m->tuning.studies, m->tuning.trials,
	       m->tuning.seed, m->tuning.budget_multiplier);
	printf("%-16s %5s %5s", "workload", "study", "trial");
	size_t ndims = p->n ? p->units[0].hp.n : 0;
	for (size_t d = 0; d < ndims; d++)
		printf("  %-14s", term_text(p->units[0].hp.names[d]));
	if (!ndims)
		printf("  (self-tuning: the submission's own defaults)");
	printf("\n");
	for (size_t i = 0; i < p->n; i++) {
		const struct apf_plan_unit *u = &p->units[i];
		printf("%-16s %5ld %5ld", term_text(u->workload), u->study,
		       u->trial + 1);
		for (size_t d = 0; d < u->hp.n; d++) {
			if (u->hp.words[d])
				printf("  %-14s", term_text(u->hp.words[d]));
			else
				printf("  %-14.6g", u->hp.values[d]);
		}
		printf("\n");
	}
}

static int print_json(const apf_entry *e, const apf_plan *p)
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
	json_t *o = json_pack("{s:s, s:s, s:s, s:s, s:I, s:I, s:I, s:f, s:o}",
			      "entry", utf8_text(e->path), "manifest_sha256",
			      e->manifest_digest, "ruleset",
			      utf8_text(m->tuning.ruleset), "rules",
			      utf8_text(m->tuning.rules), "studies",
			      (json_int_t)m->tuning.studies, "trials",
			      (json_int_t)m->tuning.trials, "seed",
			      (json_int_t)m->tuning.seed, "budget_multiplier",
			      m->tuning.budget_multiplier, "units", units);
	return cmd_print_json(o, 0);
}

int cmd_plan(int argc, char **argv)
{
	int as_json = 0;
	const char *key_path = NULL;
	const struct apf_opt opts[] = {
		{"json", 0, OPT_FLAG, &as_json, NULL, "print the plan as JSON"},
		{"key", 0, OPT_STRING, &key_path, "PUB.pem",
		 "trust only this public key (default: $APF_HOME/trusted/)"},
		{0},
	};
	const struct apf_usage usage = {
		"plan ENTRY.apf [--json]",
		"Print the trials `apf run` executes for a verified entry: every "
		"workload x study\nx trial, with the hyperparameters each draws "
		"from the search space: seeded,\nshuffled, scrambled Halton points "
		"for ranges, every feasible point in each\nstudy, or a list's "
		"points in order (trial N takes point N) - the same on every\n"
		"machine.",
		NULL, 1, 1,
		"apf plan nadamw.apf\n"
		"apf plan nadamw.apf --json"};
	int nargs, rc = cmd_start("plan", &usage, opts, argc, argv, &nargs);
	if (rc >= 0)
		return rc;
	apf_keyring *kr = NULL;
	apf_entry *e = NULL;
	apf_plan *p = NULL;
	rc = apf_keyring_default(&kr, key_path, "--key");
	if (!rc)
		rc = apf_entry_verify(&e, argv[1], kr);
	if (!rc)
		rc = apf_entry_plan(e, &p);
	if (!rc && as_json)
		rc = print_json(e, p);
	else if (!rc)
		print_text(e, p);
	apf_plan_free(p);
	apf_entry_free(e);
	apf_keyring_free(kr);
	return rc ? cmd_fail(rc) : 0;
}
