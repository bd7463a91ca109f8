/*
 * score.c: `apf score DIR[=LABEL]... [--rules R] [--targets F] [--heldout F]
 * [--svg F] [--csv F] [--self-tuning] [--verify [--key PUB.pem]
 * [--entry-key PUB.pem]] [--strict] [--json] [--export-algoperf DIR]
 * [--report FILE [--title TEXT]]`: performance profiles and benchmark
 * scores from AlgoPerf's logs or apf runs.
 *
 * The inputs (DIR=LABEL, the rules' default, a run's own heldout.json,
 * --verify) are read as scoring.h says, the same as for `apf report`.
 * Warnings (skipped trials, unexpected study counts, trials refused for
 * malformed or impossible numbers, an apf run's missing, failed or
 * interrupted units, machines that differ) go to stderr, into the table
 * and into the JSON; the table or the JSON to stdout; --csv, --svg and
 * --report files are written atomically, and only once everything has
 * been computed. --report writes `apf report`'s page of this very scoring
 * (report.c, cmd_report_write): one verification serves the table, the
 * JSON, the export and the page, which therefore cannot disagree. --strict makes them errors (exit 2). A failure prints one line
 * and nothing else.
 */
#include "cmd.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "scoring.h"

static int write_file(const char *path, const apf_score_result *r,
		      int (*format)(apf_buf *, const apf_score_result *))
{
	apf_buf b = {0};
	int rc = format(&b, r);
	if (!rc)
		rc = apf_file_write(path, b.data, b.len, 0644, 0);
	apf_buf_free(&b);
	return rc;
}

int cmd_score(int argc, char **argv)
{
	const char *svg = NULL, *csv = NULL, *export_dir = NULL;
	const char *report = NULL, *title = NULL;
	int json = 0;
	struct cmd_scoring_in in = {.cmd = "score", .audit = {.seed = -1}};
	const struct apf_opt opts[] = {
		CMD_SCORING_OPTIONS(in),
		{"svg", 0, OPT_STRING, &svg, "FILE",
		 "write the performance-profile plot"},
		{"csv", 0, OPT_STRING, &csv, "FILE",
		 "write submission,score,<times...> rows"},
		{"json", 0, OPT_FLAG, &json, NULL,
		 "print JSON instead of the table"},
		{"export-algoperf", 0, OPT_STRING, &export_dir, "DIR",
		 "write what was scored as AlgoPerf's scorer reads it"},
		{"report", 0, OPT_STRING, &report, "FILE",
		 "also write apf report's page of this scoring"},
		{"title", 0, OPT_STRING, &title, "TEXT",
		 "--report: the page's title (default: apf report)"},
		{0},
	};
	const struct apf_usage usage = {
		"score RUN_DIR[=LABEL]|LOG_DIR ... [--rules R] [--targets FILE] "
		"[--heldout FILE] [--heldout-subset] [--svg FILE] [--csv FILE] "
		"[--self-tuning] [--verify [--key PUB.pem] [--entry-key "
		"PUB.pem] [--reeval] [--replay N|all [--seed S]]] [--strict] [--json] "
		"[--export-algoperf DIR] [--report FILE [--title TEXT]]",
		"Score submissions: time-to-target per trial, the best trial per "
		"study, the\nmedian over studies, performance profiles over the "
		"base workloads, and the\nbenchmark score (the profile's "
		"integral over tau in [1, 4], divided by 3).",
		"Each DIR is a submission (AlgoPerf's "
		"study_<k>/<workload>_<framework>/trial_<n>/\nlogs, or an apf "
		"run holding run.json) or a directory of submissions.\n"
		"DIR=LABEL scores one submission under LABEL (so two runs of "
		"one submission\ncan be scored together); labels must be "
		"unique. The argument is split at its\nlast '=' only when it "
		"is not a directory itself and the part before is one, so\n"
		"a path holding '=' still works without a label. Targets\n"
		"come from --targets, else from each workload's workload.ini "
		"under\n$APF_WORKLOADS_DIR (or the installed workloads). "
		"--targets takes AlgoPerf's\nworkload_targets JSON "
		"(benchmark_version, base_workloads, held_out_workloads,\n"
		"workloads.<name>.{target_metric_name, validation_target_value, "
		"step_hint}), or\nthe same without benchmark_version, the lists "
		"and step_hint; any other key is\nan error.\n\n"
		"Rules: apf takes each study's fastest trial; algoperf-0.5 and "
		"algoperf-0.6\nreproduce AlgoPerf's published scorer (the trial "
		"that met the target at the\nearliest eval; v0.5: 5 studies and "
		"held-out variants, v0.6: 3 studies and\nnone). Among trials "
		"that first met the target at the same eval, the fastest\n"
		"(smallest score there) counts, then the lowest trial number; "
		"the reference takes\nwhichever its directory listing returns "
		"first. Default: the targets file's\nbenchmark_version (0.5 or "
		"0.6; any other is an error), else apf for apf runs,\nelse "
		"algoperf-0.6. A base workload no submission has logs for is "
		"left out of the\nprofile with a warning.\n\n"
		"Every number read from eval_measurements.csv must be a plain "
		"decimal (no hex,\n'+', inf or trailing text), clocks and "
		"counters >= 0 (not -0) and never going\nback from one row to "
		"the next, the target metric empty, nan (missing) or in\nits "
		"range (accuracy in [0, 1]). A trial that breaks this is refused: "
		"a warning\nnaming file and line, and the trial never meets its "
		"target. --strict makes it\nan error (exit 2), as it does "
		"trial directories without eval_measurements.csv,\nstudy, "
		"trial or workload counts other than the rules expect, and "
		"base workloads\nwithout logs.\n\n"
		"An apf run says more of itself than its CSVs: run.json lists "
		"the plan's units\nand the machine, log.jsonl which units "
		"ended or failed and whether the run\nended. Every unit of the "
		"plan counts: one without eval_measurements.csv is a\ntrial "
		"that never met its target, and a warning names it. So are a "
		"run whose\nlog ends without run_end (interrupted) and failed "
		"units, with their reason; a\ntime marked '!' involves a unit "
		"that stopped early or never ran without\nmeeting its target. "
		"Runs whose "
		"machines differ in device, CPU model, core count,\nthreads, "
		"GPU model or count are warned about, naming the field and "
		"each run's\nvalue: a time-to-target is comparable only on "
		"the same hardware. --strict\nmakes each of these an error "
		"(exit 2).\n\n"
		"Nothing on disk is trusted unless --verify is given (the table "
		"says so): it\nruns apf verify's checks over each apf run "
		"(entry, log chain and signature,\ntiming and CSVs against the "
		"log, checkpoint digests, held-out draw) with the\nkeys of "
		"--key and --entry-key, else the trusted ones; --reeval, "
		"--replay and\napf verify's other audit options add its "
		"re-evaluation and replay (checks 4 and\n5), as `apf verify "
		"RUN --reeval ...` makes them, and the table says which were\n"
		"made. A run that fails is left out of the ranking and "
		"listed with the\nverifier's reason; with --strict it is an "
		"error with the verifier's exit code\n(1 for a failed check). "
		"AlgoPerf log directories hold nothing signed: they\nare said "
		"to be unverifiable, once, and scored as logged.\n\n"
		"--export-algoperf DIR writes the logs scored into the layout "
		"AlgoPerf's own\nscorer reads (mlcommons/submissions_algorithms"
		"): DIR/submissions/<name>/\nstudy_<k>/<workload>/trial_<n>/ "
		"with eval_measurements.csv as scored,\nhparams.json, "
		"meta_data_0.json and flags_0.json; DIR/workload_targets.json "
		"with\nthe targets, base and held-out workloads scored; and "
		"DIR/apf_export.json with\nthis result and the command that "
		"scores the export, which gives the scores\nprinted here. Only "
		"under --rules algoperf-0.5 or algoperf-0.6 (apf's rules take\n"
		"each study's fastest trial, AlgoPerf's scorer its earliest to "
		"meet the target);\nonly the ranked submissions (a run that "
		"failed --verify is not exported); a\nrefused trial or a "
		"submission name that is no plain directory name is an error.\n"
		"A target metric AlgoPerf's scorer knows no direction for is "
		"exported as \"loss\"\nwhen validation/loss holds it "
		"(text_lm, clicks_dlrm). DIR is written whole or\nnot at all, "
		"and must not exist or be empty.\n\n"
		"--report FILE also writes the page `apf report` writes for "
		"the same inputs\n(see apf report --help), from this scoring "
		"and, with --verify, this\nverification: one verification "
		"serves the table, the JSON, the export and the\npage.",
		1, -1,
		"apf score nadamw.run --verify --report nadamw.html\n"
		"apf score nadamw.run=tuned adamw.run=baseline --json\n"
		"apf score nadamw.run --svg profile.svg --csv scores.csv\n"
		"apf score nadamw.run adamw.run --rules algoperf-0.6 "
		"--export-algoperf algoperf/"};
	int nargs, rc = cmd_start("score", &usage, opts, argc, argv, &nargs);
	if (rc >= 0)
		return rc;
	if (title && !report) {
		apf_error(APF_EUSAGE, "score", "--title is for --report's page");
		return cmd_fail(APF_EUSAGE);
	}
	json_t *verdicts = NULL;
	if (report && in.verify && !(verdicts = json_object())) {
		apf_error(APF_ENOMEM, "score", "out of memory");
		return cmd_fail(APF_ENOMEM);
	}
	in.args = argv + 1;
	in.nargs = nargs;
	/* The page shows whom the entries' signatures are trusted from, and
	 * each run's verification. */
	in.want_entry_keys = report != NULL;
	if (verdicts) {
		in.verdict = cmd_scoring_keep_verdict;
		in.user = verdicts;
	}
	struct cmd_scoring sc;
	rc = cmd_scoring_compute(&sc, &in);
	const apf_score_result *res = sc.res;
	if (!rc && csv)
		rc = write_file(csv, res, apf_score_format_csv);
	if (!rc && svg)
		rc = write_file(svg, res, apf_score_format_svg);
	if (!rc && report)
		rc = cmd_report_write(report, title, verdicts, &sc, argv + 1,
				      (size_t)nargs);
	char **xw = NULL, *scorer = NULL;
	size_t nxw = 0;
	if (!rc && export_dir)
		rc = apf_score_export_algoperf(&xw, &nxw, &scorer, res,
					       sc.targets, export_dir);
	/* Warnings only once nothing can fail, so a failure is one line. The
	 * table ends with the result's warnings: where it goes to the
	 * terminal stderr shares, they are said there once, not twice. */
	if (!rc)
		cmd_scoring_warnings(&sc, "score",
				     json || !isatty(STDOUT_FILENO) ||
					     !isatty(STDERR_FILENO));
	for (size_t i = 0; i < nxw; i++) {
		if (!rc)
			fprintf(stderr, "apf: score: warning: %s\n",
				term_text(xw[i]));
		free(xw[i]);
	}
	free(xw);
	if (!rc && export_dir)
		fprintf(stderr,
			"apf: score: wrote %s; AlgoPerf's scorer, from its "
			"repository's root: %s\n",
			term_text(export_dir), term_text(scorer));
	free(scorer);
	if (!rc) {
		apf_buf b = {0};
		rc = json ? apf_score_format_json(&b, res)
			  : apf_score_format_table(&b, res);
		if (!rc && fwrite(b.data, 1, b.len, stdout) != b.len)
			rc = apf_error_errno(APF_EIO, errno, "stdout", "write");
		if (!rc && fflush(stdout) != 0)
			rc = apf_error_errno(APF_EIO, errno, "stdout", "write");
		apf_buf_free(&b);
	}
	cmd_scoring_free(&sc);
	json_decref(verdicts);
	return rc ? cmd_fail(rc) : 0;
}
