/*
 * scoring.c: the inputs and the scoring `apf score` and `apf report` share
 * (scoring.h).
 */
#include "scoring.h"

#include "cmd.h"
#include "heldout/heldout.h"

#include <jansson.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static int is_dir(const char *p)
{
	struct stat st;
	return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

/* DIR or DIR=LABEL (scoring.h). *path is NULL (use arg itself) or a copy
 * the caller frees. */
static int split_label(const char *arg, char **path, const char **label)
{
	*path = NULL;
	*label = NULL;
	const char *eq = strrchr(arg, '=');
	if (!eq || is_dir(arg))
		return 0;
	char *dir = strndup(arg, (size_t)(eq - arg));
	if (!dir)
		return apf_error(APF_ENOMEM, "scoring", "out of memory");
	if (!*dir || !is_dir(dir)) {
		free(dir);
		return 0;
	}
	*path = dir;
	*label = eq + 1;
	return 0;
}

static void audit_progress(void *user, const char *what)
{
	progress_show("%s: %s", (const char *)user, what);
}

static int verify_runs(struct cmd_scoring *s, const struct cmd_scoring_in *in,
		       struct apf_audit_opts *ao)
{
	apf_keyring *runner = NULL;
	int rc = apf_keyring_default(&runner, in->key_path, "--key");
	apf_score_logs *logs = s->logs;
	for (size_t i = 0; !rc && i < logs->n;) {
		struct apf_score_submission *sub = &logs->s[i];
		if (!sub->apf_run) {
			sub->verified = APF_SCORE_NOT_VERIFIABLE;
			i++;
			continue;
		}
		struct apf_verify_opts o = {.runner_keys = runner,
					    .entry_keys = s->entry_keys,
					    .pruned = in->audit.pruned};
		apf_verify_report *r = NULL;
		int vrc = apf_verify_run(&r, sub->path, &o);
		if (vrc == APF_ENOMEM || !r) {
			apf_verify_report_free(r);
			rc = vrc ? vrc : APF_ENOMEM;
			break;
		}
		int ok = vrc == 0 || vrc == APF_EABORT;
		/* Re-evaluation and replay only on a run whose log checked
		 * out; an unfinished run (APF_EABORT) stays verified when
		 * they pass. */
		if (ok && cmd_audit_wanted(ao)) {
			ao->entry_keys = s->entry_keys;
			ao->progress = audit_progress;
			ao->user = (void *)sub->name;
			int arc = apf_verify_audit(r, ao);
			progress_done();
			if (arc == APF_ENOMEM) {
				apf_verify_report_free(r);
				rc = arc;
				break;
			}
			if (arc) {
				vrc = arc;
				ok = 0;
			}
		}
		char why[1024] = "";
		if (ok)
			apf_error_clear();
		else
			apf_error_take(why, sizeof why);
		if (in->verdict)
			rc = in->verdict(in->user, sub->name, r, vrc,
					 ok ? NULL : why);
		apf_verify_report_free(r);
		if (rc)
			break;
		if (ok) {
			sub->verified = APF_SCORE_VERIFIED;
			i++;
			continue;
		}
		if (in->strict) {
			char name[256];
			snprintf(name, sizeof name, "%s", sub->name);
			rc = apf_error(vrc, in->cmd, "%s: not verified: %s", name,
				       why);
			break;
		}
		rc = apf_score_logs_exclude(logs, i, why);
	}
	apf_keyring_free(runner);
	return rc;
}

/* The entry each apf run scored runs (run.json's digest), taken after
 * --verify has left out the runs that fail it: a run left out is not on
 * the board, and counting its claim would let a made-up entry in a draw be
 * "run" by a directory that only names it (the seed chosen, the fake run
 * dropped with a note, the real one scored on the variants chosen). */
struct run_entry {
	char digest[65];
	char *name;
};

static void run_entries_free(struct run_entry *re, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(re[i].name);
	free(re);
}

static int run_entries(const apf_score_logs *l, struct run_entry **out,
		       size_t *n)
{
	*out = NULL;
	*n = 0;
	struct run_entry *re = apf_calloc(l->n + 1, sizeof *re);
	if (!re)
		return apf_error(APF_ENOMEM, "score", "out of memory");
	for (size_t i = 0; i < l->n; i++) {
		const apf_score_run *r = l->s[i].run;
		if (!r || !r->entry_manifest[0])
			continue;
		memcpy(re[*n].digest, r->entry_manifest, 65);
		const char *name = l->s[i].name ? l->s[i].name : l->s[i].path;
		if (!(re[(*n)++].name = apf_strdup(name ? name : "?"))) {
			run_entries_free(re, *n);
			*n = 0;
			return apf_error(APF_ENOMEM, "score", "out of memory");
		}
	}
	*out = re;
	return 0;
}

/* What binds the draw's seed, into s->binding, refusing a draw made from
 * entries that are not the runs scored with it. A seed from entries is
 * unknown before they are sealed only if they are the competitors': a
 * draw may list any digests, so one that lists an entry no run here ran
 * could have had its seed chosen by adding made-up entries until the
 * variants suited (with --heldout-subset the scorer says the board is part
 * of a larger one, and the line says how many entries it could not hold to
 * a run), and a run whose entry the draw does not list could have been
 * packed knowing the variants. A seed by hand, or AlgoPerf's list, is
 * scored as before: the line says whoever chose it chose the variants; so
 * is a draw scored with logs that name no entry (AlgoPerf's layout). */
static int heldout_binding(struct cmd_scoring *s, const char *path,
			   const struct run_entry *re, size_t nre, int subset,
			   const char *cmd)
{
	char *text = NULL;
	size_t len = 0;
	int rc = apf_file_read(&text, &len, path, APF_HELDOUT_MAX_BYTES);
	json_error_t je;
	json_t *j = rc ? NULL : json_loadb(text, len, 0, &je);
	int is_draw = json_is_object(j) && json_object_get(j, "format");
	json_decref(j);
	apf_heldout *d = NULL;
	if (!rc && is_draw)
		rc = apf_heldout_parse(&d, text, len, path);
	free(text);
	if (rc)
		return rc;
	if (!d) {
		snprintf(s->binding, sizeof s->binding, "%s",
			 s->heldout->seed
				 ? "a seed given by hand: whoever chose it "
				   "chose the variants"
				 : "a list of variants, no seed: whoever made "
				   "it chose them");
		return 0;
	}
	/* Logs that name no entry (AlgoPerf's layout, the records of a
	 * published board) prove nothing to hold the draw to: said, not
	 * refused. An apf run names its entry in run.json, signed. */
	if (nre == 0 && d->method == APF_HELDOUT_FROM_ENTRIES) {
		snprintf(s->binding, sizeof s->binding,
			 "the seed of %zu entr%s, which no log here names (no "
			 "apf run): the draw's word",
			 d->nentries, d->nentries == 1 ? "y" : "ies");
		apf_heldout_free(d);
		return 0;
	}
	size_t held = 0;
	for (size_t i = 0; !rc && i < d->nentries; i++) {
		const struct apf_heldout_entry *e = &d->entries[i];
		size_t k = 0;
		while (k < nre && strcmp(re[k].digest, e->manifest_sha256))
			k++;
		held += k < nre;
		if (k == nre && !subset && d->method == APF_HELDOUT_FROM_ENTRIES)
			rc = apf_error(APF_EINPUT, cmd,
				       "%s: drawn from entry %.16s... (%s), "
				       "which no run here runs: a draw's "
				       "entries are the runs scored with it, "
				       "or its seed could be chosen by adding "
				       "entries (--heldout-subset scores part "
				       "of the board it was drawn for)",
				       path, e->manifest_sha256,
				       e->submission ? e->submission : "?");
	}
	for (size_t k = 0; !rc && d->method == APF_HELDOUT_FROM_ENTRIES &&
			   k < nre;
	     k++) {
		size_t i = 0;
		while (i < d->nentries &&
		       strcmp(re[k].digest, d->entries[i].manifest_sha256))
			i++;
		if (i == d->nentries)
			rc = apf_error(APF_EINPUT, cmd,
				       "%s: not drawn from %s's entry "
				       "(%.16s...): a run scored against a "
				       "draw made without its entry could have "
				       "been packed knowing the variants",
				       path, re[k].name, re[k].digest);
	}
	if (!rc && d->method == APF_HELDOUT_FROM_SEED)
		snprintf(s->binding, sizeof s->binding,
			 "a seed given with --seed: whoever chose it chose the "
			 "variants");
	else if (!rc && held == d->nentries)
		snprintf(s->binding, sizeof s->binding,
			 "the seed of the %zu entr%s the runs here run",
			 d->nentries, d->nentries == 1 ? "y" : "ies");
	else if (!rc)
		snprintf(s->binding, sizeof s->binding,
			 "the seed of %zu entries, %zu of them run here "
			 "(--heldout-subset: the others are the draw's word)",
			 d->nentries, held);
	apf_heldout_free(d);
	return rc;
}

/* An apf run holds the draw its variants were run for. Runs scored
 * together hold one draw: the held-out rules compare their variants, and a
 * run that brought a draw of its own (a seed chosen for it) would be
 * scored on variants the others never ran. */
static int own_heldout(struct cmd_scoring *s, const char *given,
		       const struct run_entry *re, size_t nre, int subset,
		       const char *cmd)
{
	char *own = NULL, *text = NULL;
	size_t len = 0;
	int rc = 0;
	for (size_t i = 0; !rc && !given && i < s->logs->n; i++) {
		char *h = apf_path_join(s->logs->s[i].path, "heldout.json");
		struct stat st;
		if (!h) {
			rc = apf_error(APF_ENOMEM, "score", "out of memory");
			break;
		}
		if (stat(h, &st) != 0) {
			free(h);
			continue;
		}
		char *t = NULL;
		size_t n = 0;
		rc = apf_file_read(&t, &n, h, (size_t)16 << 20);
		if (!rc && !own) {
			own = h;
			text = t;
			len = n;
			continue;
		}
		if (!rc && (n != len || memcmp(t, text, n)))
			rc = apf_error(APF_EINPUT, h,
				       "differs from %s: runs scored together "
				       "hold one held-out draw (--heldout "
				       "FILE chooses one)",
				       own);
		free(t);
		free(h);
	}
	free(text);
	if (!rc && (given || own))
		rc = apf_score_heldout_load(&s->heldout, given ? given : own);
	if (!rc && (given || own))
		rc = heldout_binding(s, given ? given : own, re, nre, subset,
				     cmd);
	free(own);
	return rc;
}

int cmd_scoring_compute(struct cmd_scoring *s, const struct cmd_scoring_in *in)
{
	memset(s, 0, sizeof *s);
	if (in->rules_name && !(s->rules = apf_score_rules_get(in->rules_name)))
		return apf_error(APF_EUSAGE, in->cmd,
				 "--rules: unknown rules '%s' (apf, "
				 "algoperf-0.5, algoperf-0.6)",
				 in->rules_name);
	int rc = apf_score_logs_new(&s->logs);
	for (int i = 0; !rc && i < in->nargs; i++) {
		char *path;
		const char *label;
		rc = split_label(in->args[i], &path, &label);
		if (!rc)
			rc = apf_score_logs_add_as(s->logs,
						   path ? path : in->args[i],
						   label);
		free(path);
	}
	if (!rc && (in->verify || in->want_entry_keys))
		rc = apf_keyring_default(&s->entry_keys, in->entry_key,
					 "--entry-key");
	struct apf_audit_opts ao = {0};
	if (!rc)
		rc = cmd_audit_parse(&in->audit, in->cmd, &ao);
	if (!rc && !in->verify && (cmd_audit_wanted(&ao) || in->audit.pruned))
		rc = apf_error(APF_EUSAGE, in->cmd,
			       "--reeval, --replay and --pruned are checks of "
			       "--verify: give --verify too");
	if (!rc && in->verify)
		rc = verify_runs(s, in, &ao);
	struct run_entry *re = NULL;
	size_t nre = 0;
	if (!rc)
		rc = run_entries(s->logs, &re, &nre);
	if (!rc)
		rc = in->targets_path
			     ? apf_score_targets_load_json(&s->targets,
							   in->targets_path)
			     : apf_score_targets_from_workloads(&s->targets,
								NULL);
	if (!rc)
		rc = own_heldout(s, in->heldout_path, re, nre,
				 in->heldout_subset, in->cmd);
	run_entries_free(re, nre);
	if (!rc && in->heldout_subset && !s->binding[0])
		rc = apf_error(APF_EUSAGE, in->cmd,
			       "--heldout-subset: no held-out draw here (it "
			       "qualifies --heldout or the runs' own "
			       "heldout.json)");
	s->version = s->targets ? apf_score_targets_version(s->targets) : NULL;
	/* A targets file's benchmark_version chooses the rules unless
	 * --rules does; a version apf does not know is an error then. */
	if (!rc && !s->rules)
		rc = apf_score_targets_rules(&s->rules, s->targets);
	if (!rc && !s->rules)
		s->rules = apf_score_rules_get(
			apf_score_logs_have_apf_run(s->logs) ? "apf"
							     : "algoperf-0.6");
	if (!rc && in->self_tuning) {
		apf_score_rules_self(&s->self, s->rules);
		s->rules = &s->self;
	}
	if (!rc)
		rc = apf_score_compute(&s->res, s->logs, s->targets, s->heldout,
				       s->rules,
				       (in->strict ? APF_SCORE_STRICT : 0) |
					       (in->verify ? APF_SCORE_VERIFY
							   : 0));
	if (!rc && s->res->heldout_source)
		snprintf(s->res->heldout_binding,
			 sizeof s->res->heldout_binding, "%s", s->binding);
	if (!rc && in->verify) {
		cmd_audit_describe(&ao, s->res->audit, sizeof s->res->audit);
		/* Where the verdicts' checks stop short, the line that names
		 * the checks says so. */
		size_t n = strlen(s->res->audit);
		if (in->audit.pruned)
			snprintf(s->res->audit + n, sizeof s->res->audit - n,
				 "%spruned units accepted without their "
				 "checkpoints (--pruned)",
				 n ? "; " : "");
	}
	return rc;
}

void cmd_scoring_warnings(const struct cmd_scoring *s, const char *cmd,
			  int results)
{
	const apf_score_rules *vr = apf_score_rules_for_version(s->version);
	if (vr && strncmp(s->rules->name, "algoperf-", 9) == 0 &&
	    strcmp(vr->name, s->rules->name))
		fprintf(stderr,
			"apf: %s: warning: scoring with %s but the targets "
			"are AlgoPerf %s's\n",
			cmd, s->rules->name, term_text(s->version));
	/* A warning is one line that names submissions, workloads, units
	 * and files from the logs (a failed unit's reason, a directory's
	 * name): escaped whole. */
	for (size_t i = 0; results && i < s->res->nwarnings; i++)
		fprintf(stderr, "apf: %s: warning: %s\n", cmd,
			term_text(s->res->warnings[i]));
}

void cmd_scoring_free(struct cmd_scoring *s)
{
	apf_score_result_free(s->res);
	apf_score_heldout_free(s->heldout);
	apf_score_targets_free(s->targets);
	apf_score_logs_free(s->logs);
	apf_keyring_free(s->entry_keys);
	memset(s, 0, sizeof *s);
}
