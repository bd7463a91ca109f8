/*
 * report.c: `apf report DIR[=LABEL]... [--rules R] [--targets F]
 * [--heldout F] [--self-tuning] [--verify [--key PUB.pem] [--entry-key
 * PUB.pem]] [--strict] [--title T] -o FILE`: one self-contained HTML page
 * (pkg/report) of what `apf score` computes for the same inputs, with the
 * verifier's outcome per apf run when --verify is given.
 *
 * The inputs mean what they mean to `apf score` (cmd/apf/score.c): the
 * same DIR=LABEL split, the same choice of rules (the targets file's
 * benchmark_version, else apf for apf runs, else algoperf-0.6), an apf
 * run's own heldout.json when --heldout is not given, and --verify runs
 * the checks `apf verify RUN` runs by default, excluding a run that fails
 * from the ranking (with --strict: the error). The verifier's report of
 * each run goes onto the page in `apf verify --json`'s form. The page is
 * written atomically and only once everything has been computed; warnings
 * go to stderr as `apf score` prints them.
 */
#include "cmd.h"

#include <errno.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "report/report.h"
#include "score/score.h"
#include "verify/verify.h"

static int is_dir(const char *p)
{
	struct stat st;
	return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

/* DIR or DIR=LABEL, split as apf score splits it. */
static int split_label(const char *arg, char **path, const char **label)
{
	*path = NULL;
	*label = NULL;
	const char *eq = strrchr(arg, '=');
	if (!eq || is_dir(arg))
		return 0;
	char *dir = strndup(arg, (size_t)(eq - arg));
	if (!dir)
		return apf_error(APF_ENOMEM, "report", "out of memory");
	if (!*dir || !is_dir(dir)) {
		free(dir);
		return 0;
	}
	*path = dir;
	*label = eq + 1;
	return 0;
}

/* `apf verify RUN --json`'s object for one verification. */
static json_t *verdict_json(const apf_verify_report *r, int rc,
			    const char *error)
{
	json_t *checks = json_array();
	for (int c = 1; checks && c <= APF_VERIFY_NCHECKS; c++)
		json_array_append_new(
			checks,
			json_pack("{s:i, s:s, s:s, s:s}", "check", c, "name",
				  apf_verify_check_name(c), "outcome",
				  apf_verify_outcome_name(r->check[c].outcome),
				  "detail",
				  r->check[c].detail ? r->check[c].detail : ""));
	return json_pack(
		"{s:s, s:b, s:b, s:i, s:s?, s:s?, s:s, s:s, s:s, s:s, s:s, s:I, "
		"s:I, s:b, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:f, s:o}",
		"run", r->run_dir ? r->run_dir : "", "verified",
		rc == 0 || rc == APF_EABORT, "complete", r->complete,
		"exit_code", apf_exit_code(rc), "error", error, "submission",
		r->submission, "entry_sha256", r->entry_sha256,
		"manifest_sha256", r->manifest_sha256, "entry_signer",
		r->entry_signer, "runner_signer", r->runner_signer, "head",
		r->head, "records", (json_int_t)r->records, "log_bytes",
		(json_int_t)r->log_bytes, "sealed", r->sealed, "units",
		(json_int_t)r->units_started, "units_ended",
		(json_int_t)r->units_ended, "units_failed",
		(json_int_t)r->units_failed, "evals", (json_int_t)r->evals,
		"resumes", (json_int_t)r->resumes, "env_drifts",
		(json_int_t)r->env_drifts, "checkpoints",
		(json_int_t)r->checkpoints, "checkpoint_bytes",
		(json_int_t)r->checkpoint_bytes, "claimed_training_s",
		(double)r->claimed_ns / 1e9, "checks", checks);
}

/* --verify, as apf score --verify does it, keeping each run's report in
 * verdicts under the submission's name. */
static int verify_runs(apf_score_logs *logs, json_t *verdicts,
		       const apf_keyring *runner, const apf_keyring *entry,
		       int strict)
{
	int rc = 0;
	for (size_t i = 0; !rc && i < logs->n;) {
		struct apf_score_submission *s = &logs->s[i];
		if (!s->apf_run) {
			s->verified = APF_SCORE_NOT_VERIFIABLE;
			i++;
			continue;
		}
		struct apf_verify_opts o = {.runner_keys = runner,
					    .entry_keys = entry};
		apf_verify_report *r = NULL;
		int vrc = apf_verify_run(&r, s->path, &o);
		if (vrc == APF_ENOMEM || !r) {
			apf_verify_report_free(r);
			rc = vrc ? vrc : APF_ENOMEM;
			break;
		}
		char why[1024] = "";
		if (vrc == 0 || vrc == APF_EABORT)
			apf_error_clear();
		else
			apf_error_take(why, sizeof why);
		json_t *v = verdict_json(r, vrc, vrc ? why : NULL);
		apf_verify_report_free(r);
		if (!v || json_object_set_new(verdicts, s->name, v)) {
			rc = apf_error(APF_ENOMEM, "report", "out of memory");
			break;
		}
		if (vrc == 0 || vrc == APF_EABORT) {
			s->verified = APF_SCORE_VERIFIED;
			i++;
			continue;
		}
		if (strict) {
			char name[256];
			snprintf(name, sizeof name, "%s", s->name);
			rc = apf_error(vrc, "report", "%s: not verified: %s",
				       name, why);
			break;
		}
		rc = apf_score_logs_exclude(logs, i, why);
	}
	return rc;
}

int cmd_report(int argc, char **argv)
{
	const char *rules_name = NULL, *targets_path = NULL,
		   *heldout_path = NULL, *output = NULL, *key_path = NULL,
		   *entry_key = NULL, *title = NULL;
	int self_tuning = 0, strict = 0, verify = 0;
	const struct apf_opt opts[] = {
		{"output", 'o', OPT_STRING, &output, "FILE",
		 "write the page here (required)"},
		{"rules", 'r', OPT_STRING, &rules_name, "R",
		 "apf, algoperf-0.5 or algoperf-0.6"},
		{"targets", 't', OPT_STRING, &targets_path, "FILE",
		 "AlgoPerf's workload_targets JSON"},
		{"heldout", 0, OPT_STRING, &heldout_path, "FILE",
		 "held-out variants: AlgoPerf's list or an apf draw"},
		{"self-tuning", 0, OPT_FLAG, &self_tuning, NULL,
		 "the submissions follow the self-tuning ruleset"},
		{"verify", 0, OPT_FLAG, &verify, NULL,
		 "verify each apf run first (apf verify's checks); one that "
		 "fails is not ranked"},
		{"key", 0, OPT_STRING, &key_path, "PUB.pem",
		 "--verify: trust only this runner key (default: "
		 "$APF_HOME/trusted/)"},
		{"entry-key", 0, OPT_STRING, &entry_key, "PUB.pem",
		 "trust only this submitter key (default: $APF_HOME/trusted/)"},
		{"strict", 0, OPT_FLAG, &strict, NULL,
		 "every warning is an error (exit 2; a run failing --verify: "
		 "exit 1)"},
		{"title", 0, OPT_STRING, &title, "TEXT",
		 "the page's title (default: apf report)"},
		{0},
	};
	const struct apf_usage usage = {
		"report RUN_DIR[=LABEL]|LOG_DIR ... -o FILE [--rules R] "
		"[--targets FILE] [--heldout FILE] [--self-tuning] [--verify "
		"[--key PUB.pem] [--entry-key PUB.pem]] [--strict] [--title "
		"TEXT]",
		"Write one self-contained HTML page of a scoring: scores, ranks "
		"and the\nperformance profile, what was verified, per workload "
		"the curves of every trial\n(validation, train or test metric "
		"against submission time or global step), and\nper submission "
		"its provenance, environment, keys and hyperparameters.",
		"The inputs, rules, targets and held-out variants mean what they "
		"mean to `apf\nscore` (see apf score --help), and every number "
		"on the page is the one `apf\nscore --json` prints for them: "
		"that JSON is in the page as the script element\nid=\"apf-data\"; "
		"with --verify, `apf verify --json`'s object of each run is in\n"
		"id=\"apf-verify\". Without --verify every apf run is marked "
		"UNVERIFIED on every\nplot and row it appears in. The page "
		"needs no network: CSS, SVG and a little\nJavaScript are "
		"inline. It is written atomically.",
		1, -1,
		"apf report nadamw.run --verify -o nadamw.html"};
	int nargs, rc = cmd_start("report", &usage, opts, argc, argv, &nargs);
	if (rc >= 0)
		return rc;
	if (!output) {
		apf_error(APF_EUSAGE, "report", "-o FILE is required");
		return cmd_fail(APF_EUSAGE);
	}
	const apf_score_rules *rules = NULL;
	if (rules_name && !(rules = apf_score_rules_get(rules_name))) {
		apf_error(APF_EUSAGE, "report",
			  "--rules: unknown rules '%s' (apf, algoperf-0.5, "
			  "algoperf-0.6)",
			  rules_name);
		return cmd_fail(APF_EUSAGE);
	}
	apf_score_logs *logs = NULL;
	apf_score_targets *targets = NULL;
	apf_score_heldout *heldout = NULL;
	apf_score_result *res = NULL;
	apf_keyring *runner_keys = NULL, *entry_keys = NULL;
	json_t *verdicts = verify ? json_object() : NULL;
	rc = 0;
	if (verify && !verdicts)
		rc = apf_error(APF_ENOMEM, "report", "out of memory");
	if (!rc)
		rc = apf_score_logs_new(&logs);
	for (int i = 1; !rc && i <= nargs; i++) {
		char *path;
		const char *label;
		rc = split_label(argv[i], &path, &label);
		if (!rc)
			rc = apf_score_logs_add_as(logs, path ? path : argv[i],
						   label);
		free(path);
	}
	if (!rc)
		rc = apf_keyring_default(&entry_keys, entry_key);
	if (!rc && verify)
		rc = apf_keyring_default(&runner_keys, key_path);
	if (!rc && verify)
		rc = verify_runs(logs, verdicts, runner_keys, entry_keys,
				 strict);
	if (!rc)
		rc = targets_path
			     ? apf_score_targets_load_json(&targets, targets_path)
			     : apf_score_targets_from_workloads(&targets, NULL);
	char *own = NULL;
	for (size_t i = 0; !rc && !heldout_path && i < logs->n && !own; i++) {
		char *h = apf_path_join(logs->s[i].path, "heldout.json");
		struct stat st;
		if (h && stat(h, &st) == 0)
			own = h;
		else
			free(h);
	}
	if (!rc && (heldout_path || own))
		rc = apf_score_heldout_load(&heldout,
					    heldout_path ? heldout_path : own);
	free(own);
	const char *version = targets ? apf_score_targets_version(targets)
				      : NULL;
	if (!rc && !rules)
		rc = apf_score_targets_rules(&rules, targets);
	if (!rc && !rules)
		rules = apf_score_rules_get(apf_score_logs_have_apf_run(logs)
						    ? "apf"
						    : "algoperf-0.6");
	apf_score_rules self;
	if (!rc && self_tuning) {
		apf_score_rules_self(rules, &self);
		rules = &self;
	}
	if (!rc)
		rc = apf_score_compute(&res, logs, targets, heldout, rules,
				       (strict ? APF_SCORE_STRICT : 0) |
					       (verify ? APF_SCORE_VERIFY : 0));
	apf_buf page = {0};
	if (!rc) {
		struct apf_report_opts ro = {.title = title,
					     .verdicts = verdicts,
					     .entry_keys = entry_keys,
					     /* small enough to mail */
					     .max_bytes = (size_t)9 << 19,
					     .inputs = argv + 1,
					     .ninputs = (size_t)nargs};
		rc = apf_report_html(&page, res, targets, &ro);
	}
	if (!rc)
		rc = apf_file_write(output, page.data, page.len, 0644, 0);
	apf_buf_free(&page);
	if (!rc) {
		const apf_score_rules *vr = apf_score_rules_for_version(version);
		if (vr && strncmp(rules->name, "algoperf-", 9) == 0 &&
		    strcmp(vr->name, rules->name))
			fprintf(stderr,
				"apf: report: warning: scoring with %s but the "
				"targets are AlgoPerf %s's\n",
				rules->name, version);
		for (size_t i = 0; i < res->nwarnings; i++)
			fprintf(stderr, "apf: report: warning: %s\n",
				res->warnings[i]);
		printf("%s\n", output);
	}
	apf_score_result_free(res);
	apf_score_heldout_free(heldout);
	apf_score_targets_free(targets);
	apf_score_logs_free(logs);
	apf_keyring_free(runner_keys);
	apf_keyring_free(entry_keys);
	json_decref(verdicts);
	return rc ? cmd_fail(rc) : 0;
}
