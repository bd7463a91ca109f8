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

#include "report/report.h"
#include "scoring.h"

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
				  r->check[c].detail
					  ? utf8_text(r->check[c].detail)
					  : ""));
	/* The run's path and its details may hold bytes that are not
	 * UTF-8, which jansson refuses: utf8_text, as apf verify --json. */
	return json_pack(
		"{s:s, s:b, s:b, s:i, s:s?, s:s?, s:s, s:s, s:s, s:s, s:s, s:I, "
		"s:I, s:b, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:f, s:o}",
		"run", r->run_dir ? utf8_text(r->run_dir) : "", "verified",
		rc == 0 || rc == APF_EABORT, "complete", r->complete,
		"exit_code", apf_exit_code(rc), "error", utf8_text(error),
		"submission", utf8_text(r->submission), "entry_sha256",
		utf8_text(r->entry_sha256), "manifest_sha256",
		utf8_text(r->manifest_sha256), "entry_signer",
		utf8_text(r->entry_signer), "runner_signer",
		utf8_text(r->runner_signer), "head", utf8_text(r->head),
		"records", (json_int_t)r->records, "log_bytes",
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

/* Each run's verification, in `apf verify --json`'s form, under its
 * submission's name. */
static int keep_verdict(void *user, const char *name,
			const apf_verify_report *r, int rc, const char *why)
{
	json_t *v = verdict_json(r, rc, why);
	/* The plausibility backstop's object, as apf verify --json has it. */
	if (v)
		json_object_set_new(v, "plausibility",
				    apf_verify_plausibility_json(r));
	if (!v || json_object_set_new(user, utf8_text(name), v))
		return apf_error(APF_ENOMEM, "report", "out of memory");
	return 0;
}

int cmd_report(int argc, char **argv)
{
	const char *output = NULL, *title = NULL;
	struct cmd_scoring_in in = {.cmd = "report", .want_entry_keys = 1};
	const struct apf_opt opts[] = {
		CMD_SCORING_OPTIONS(in),
		{"output", 'o', OPT_STRING, &output, "FILE",
		 "write the page here (required)"},
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
	json_t *verdicts = in.verify ? json_object() : NULL;
	if (in.verify && !verdicts) {
		apf_error(APF_ENOMEM, "report", "out of memory");
		return cmd_fail(APF_ENOMEM);
	}
	in.args = argv + 1;
	in.nargs = nargs;
	in.verdict = keep_verdict;
	in.user = verdicts;
	struct cmd_scoring sc;
	rc = cmd_scoring_compute(&sc, &in);
	apf_buf page = {0};
	if (!rc) {
		struct apf_report_opts ro = {.title = title,
					     .verdicts = verdicts,
					     .entry_keys = sc.entry_keys,
					     /* small enough to mail */
					     .max_bytes = (size_t)9 << 19,
					     .inputs = argv + 1,
					     .ninputs = (size_t)nargs};
		rc = apf_report_html(&page, sc.res, sc.targets, &ro);
	}
	if (!rc)
		rc = apf_file_write(output, page.data, page.len, 0644, 0);
	apf_buf_free(&page);
	if (!rc) {
		cmd_scoring_warnings(&sc, "report");
		printf("%s\n", term_text(output));
	}
	cmd_scoring_free(&sc);
	json_decref(verdicts);
	return rc ? cmd_fail(rc) : 0;
}
