/*
 * report.c: `apf report DIR[=LABEL]... [--rules R] [--targets F]
 * [--heldout F] [--self-tuning] [--verify [--key PUB.pem] [--entry-key
 * PUB.pem] [--reeval] [--replay N|all [--seed S]]] [--strict] [--title T]
 * -o FILE`: one self-contained HTML page
 * (pkg/report) of what `apf score` computes for the same inputs, with the
 * verifier's outcome per apf run when --verify is given.
 *
 * The inputs mean what they mean to `apf score` (cmd/apf/score.c): the
 * same DIR=LABEL split, the same choice of rules (the targets file's
 * benchmark_version, else apf for apf runs, else algoperf-0.6), an apf
 * run's own heldout.json when --heldout is not given, and --verify runs
 * the checks `apf verify RUN` runs by default (with --reeval, --replay and
 * the other audit options, audit.h, also those), excluding a run that fails
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

int cmd_scoring_keep_verdict(void *user, const char *name,
			     const apf_verify_report *r, int rc, const char *why)
{
	json_t *v = cmd_verify_run_json(r, rc, why, 0);
	if (!v || json_object_set_new(user, utf8_text(name), v))
		return apf_error(APF_ENOMEM, "report", "out of memory");
	return 0;
}

int cmd_report_write(const char *output, const char *title,
		     json_t *verdicts, const struct cmd_scoring *sc,
		     char *const *inputs, size_t ninputs)
{
	struct apf_report_opts ro = {.title = title,
				     .verdicts = verdicts,
				     .entry_keys = sc->entry_keys,
				     /* small enough to mail */
				     .max_bytes = (size_t)9 << 19,
				     .inputs = inputs,
				     .ninputs = ninputs};
	apf_buf page = {0};
	int rc = apf_report_html(&page, sc->res, sc->targets, &ro);
	if (!rc)
		rc = apf_file_write(output, page.data, page.len, 0644, 0);
	apf_buf_free(&page);
	return rc;
}

int cmd_report(int argc, char **argv)
{
	const char *output = NULL, *title = NULL;
	struct cmd_scoring_in in = {
		.cmd = "report", .want_entry_keys = 1, .audit = {.seed = -1}};
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
		"[--targets FILE] [--heldout FILE] [--heldout-subset] "
		"[--self-tuning] [--verify [--key PUB.pem] [--entry-key "
		"PUB.pem] [--reeval] [--replay N|all [--seed S]]] [--strict] "
		"[--title TEXT]",
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
		"id=\"apf-verify\"; --reeval and --replay (and apf verify's "
		"other audit options)\nadd re-evaluation and replay, checks 4 "
		"and 5, as `apf verify RUN --reeval ...`\nmakes them, and the "
		"page names what was made. Without --verify every apf run\n"
		"is marked UNVERIFIED on every plot and row it appears in. The "
		"page needs no\nnetwork: CSS, SVG and a little JavaScript are "
		"inline. It is written\natomically.",
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
	in.verdict = cmd_scoring_keep_verdict;
	in.user = verdicts;
	struct cmd_scoring sc;
	rc = cmd_scoring_compute(&sc, &in);
	if (!rc)
		rc = cmd_report_write(output, title, verdicts, &sc, argv + 1,
				      (size_t)nargs);
	if (!rc) {
		cmd_scoring_warnings(&sc, "report", 1);
		printf("%s\n", term_text(output));
	}
	cmd_scoring_free(&sc);
	json_decref(verdicts);
	return rc ? cmd_fail(rc) : 0;
}
