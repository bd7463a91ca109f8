/*
 * inspect.c: `apf inspect ENTRY.apf [--json]`: what an entry holds, read
 * from its manifest, and whether a trusted key signed it. Inspecting does
 * not verify the files (that is `apf verify`) and does not need trust.
 */
#include "cmd.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "entry/entry.h"

/* Every string from the manifest is the submitter's (a signed archive
 * need not come from apf pack): term_text at each print. */
static void print_text(const apf_entry *e)
{
	const apf_manifest *m = e->manifest;
	char sz[32];
	printf("entry        %s (%s, sha256:%s)\n", term_text(e->path),
	       human_bytes(e->file_bytes, sz), e->file_digest);
	printf("signature    key %s, %s\n", term_text(e->signer),
	       e->signature_trusted ? "trusted" : "NOT TRUSTED on this machine");
	printf("created      %s by apf %s\n", term_text(m->created),
	       term_text(m->apf_version));
	printf("submission   %s (%s tuning)\n", term_text(m->submission.name),
	       term_text(m->submission.ruleset));
	for (size_t i = 0; i < m->submission.nauthors; i++)
		printf("  author     %s\n", term_text(m->submission.authors[i]));
	json_t *g = m->submission.git;
	if (json_is_true(json_object_get(g, "repository"))) {
		json_t *c = json_object_get(g, "commit");
		json_t *b = json_object_get(g, "branch");
		json_t *r = json_object_get(g, "remote");
		printf("  git        %s%s%s%s%s%s\n",
		       json_is_string(c) ? term_text(json_string_value(c))
					 : "(no commit)",
		       json_is_string(b) ? " on " : "",
		       json_is_string(b) ? term_text(json_string_value(b)) : "",
		       json_is_string(r) ? " from " : "",
		       json_is_string(r) ? term_text(json_string_value(r)) : "",
		       json_is_true(json_object_get(g, "dirty"))
			       ? " (DIRTY: differs from the commit)"
			       : "");
	} else {
		printf("  git        not in a git repository\n");
	}
	printf("  tree       sha256:%s\n", m->submission.tree_digest);
	for (size_t i = 0; i < m->submission.nfiles; i++) {
		const struct apf_manifest_file *f = &m->submission.files[i];
		printf("  %c %d %10llu  %s\n", f->type, f->mode,
		       (unsigned long long)f->size, term_text(f->path));
	}
	printf("tuning       %s, %s, %ld stud%s x %ld trial%s, budget x%g, "
	       "seed %u\n",
	       term_text(m->tuning.ruleset), term_text(m->tuning.rules),
	       m->tuning.studies, m->tuning.studies == 1 ? "y" : "ies",
	       m->tuning.trials, m->tuning.trials == 1 ? "" : "s",
	       m->tuning.budget_multiplier, m->tuning.seed);
	if (m->tuning.search_space_digest[0])
		printf("  search space sha256:%s\n", m->tuning.search_space_digest);
	for (size_t i = 0; i < m->nworkloads; i++)
		printf("workload     %s (%s) on %s, spec sha256:%s\n",
		       term_text(m->workloads[i].name),
		       term_text(m->workloads[i].variant),
		       term_text(m->workloads[i].dataset),
		       m->workloads[i].spec_digest);
	for (size_t i = 0; i < m->ndatasets; i++)
		printf("dataset      %s, %llu files, %s, sha256:%s\n",
		       term_text(m->datasets[i].name),
		       (unsigned long long)m->datasets[i].files,
		       human_bytes(m->datasets[i].bytes, sz),
		       m->datasets[i].tree_digest);
	json_t *env = m->environment;
	json_t *cpu = json_object_get(env, "cpu");
	printf("environment  %s, %s, %s x%lld\n",
	       term_text(json_string_value(json_object_get(env, "os"))),
	       term_text(json_string_value(json_object_get(env, "kernel"))),
	       term_text(json_string_value(json_object_get(cpu, "model"))),
	       (long long)json_integer_value(json_object_get(cpu, "cores")));
}

int cmd_inspect(int argc, char **argv)
{
	int as_json = 0;
	const char *key_path = NULL;
	const struct apf_opt opts[] = {
		{"json", 0, OPT_FLAG, &as_json, NULL,
		 "print the signed statement and the signature's status as JSON"},
		{"key", 0, OPT_STRING, &key_path, "PUB.pem",
		 "judge the signature against this key (default: "
		 "$APF_HOME/trusted/)"},
		{0},
	};
	const struct apf_usage usage = {
		"inspect ENTRY.apf [--json]",
		"Show what an entry holds: the submission, its files, git "
		"provenance, tuning\nplan, workloads, datasets and environment, "
		"and whether a trusted key signed it.",
		"inspect reads the manifest only; `apf verify` checks the files "
		"against it.",
		1, 1,
		"apf inspect nadamw.apf\n"
		"apf inspect nadamw.apf --json"};
	int nargs, rc = cmd_start("inspect", &usage, opts, argc, argv, &nargs);
	if (rc >= 0)
		return rc;
	apf_keyring *kr = NULL;
	apf_entry *e = NULL;
	rc = apf_keyring_default(&kr, key_path, "--key");
	if (!rc)
		rc = apf_entry_inspect(&e, argv[1], kr);
	if (!rc && as_json) {
		json_t *st = json_loadb(e->statement, e->statement_len, 0, NULL);
		json_t *o = json_pack("{s:s, s:s, s:s, s:{s:s, s:b}, s:o}",
				      "entry", utf8_text(e->path),
				      "entry_sha256", e->file_digest,
				      "manifest_sha256", e->manifest_digest,
				      "signature", "keyid", utf8_text(e->signer),
				      "trusted", e->signature_trusted,
				      "statement", st);
		rc = cmd_print_json(o, 0);
	} else if (!rc) {
		print_text(e);
	}
	apf_entry_free(e);
	apf_keyring_free(kr);
	return rc ? cmd_fail(rc) : 0;
}
