/*
 * score.c: `apf score DIR[=LABEL]... [--rules R] [--targets F] [--heldout F]
 * [--svg F] [--csv F] [--self-tuning] [--verify [--key PUB.pem]
 * [--entry-key PUB.pem]] [--strict] [--json]`: performance profiles and
 * benchmark scores from AlgoPerf's logs or apf runs (DESIGN.md section 8).
 *
 * The rules default to the AlgoPerf version the targets file names (0.5 or
 * 0.6; any other is an error), else to apf when any input is an apf run,
 * else to algoperf-0.6.
 * Warnings (skipped trials, unexpected study counts, trials refused for
 * malformed or impossible numbers, an apf run's missing, failed or
 * interrupted units, machines that differ) go to stderr, into the table
 * and into the JSON; the table or the JSON to stdout; --csv and --svg
 * files are written atomically, and only once everything has been
 * computed. --strict makes them errors (exit 2). A failure prints one line
 * and nothing else.
 *
 * --verify runs the verifier (verify/verify.h, the checks `apf verify RUN`
 * runs by default) over each apf run first; pkg/score never links the
 * verifier, so the outcome goes in as data: a run that fails is taken out
 * of the ranking (apf_score_logs_exclude) with the verifier's message, or
 * under --strict is the error, with the verifier's exit code.
 *
 * DIR=LABEL scores DIR under LABEL, so that two runs of one submission can
 * be told apart. The argument is split at its last '=' only when it is not
 * itself a directory and the part before is one, so a path holding '='
 * still works without a label.
 */
#include "cmd.h"

#include <errno.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <string.h>

#include "score/score.h"
#include "verify/verify.h"

static int write_file(const char *path, const apf_score_result *r,
		      int (*format)(const apf_score_result *, apf_buf *))
{
	apf_buf b = {0};
	int rc = format(r, &b);
	if (!rc)
		rc = apf_file_write(path, b.data, b.len, 0644, 0);
	apf_buf_free(&b);
	return rc;
}

static int is_dir(const char *p)
{
	struct stat st;
	return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

/* DIR or DIR=LABEL (see the file's comment). *path is arg itself or a
 * copy the caller frees. */
static int split_label(const char *arg, char **path, const char **label)
{
	*path = NULL;
	*label = NULL;
	const char *eq = strrchr(arg, '=');
	if (!eq || is_dir(arg))
		return 0;
	char *dir = strndup(arg, (size_t)(eq - arg));
	if (!dir)
		return apf_error(APF_ENOMEM, "score", "out of memory");
	if (!*dir || !is_dir(dir)) {
		free(dir);
		return 0;
	}
	*path = dir;
	*label = eq + 1;
	return 0;
}

/* --verify: the verifier over each apf run, as `apf verify RUN` checks it
 * without --reeval or --replay. A run that fails is excluded, or with
 * strict is the error (the verifier's status, so exit 1 for a failed
 * check). A run that verifies but is unfinished (APF_EABORT) counts as
 * verified; the scorer's own warnings say it is incomplete. */
static int verify_runs(apf_score_logs *logs, const char *key_path,
		       const char *entry_key, int strict)
{
	apf_keyring *runner = NULL, *entry = NULL;
	int rc = apf_keyring_default(&runner, key_path);
	if (!rc)
		rc = apf_keyring_default(&entry, entry_key);
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
		apf_verify_report_free(r);
		if (vrc == 0 || vrc == APF_EABORT) {
			apf_error_clear();
			s->verified = APF_SCORE_VERIFIED;
			i++;
			continue;
		}
		if (vrc == APF_ENOMEM) {
			rc = vrc;
			break;
		}
		char why[1024];
		apf_error_take(why, sizeof why);
		if (strict) {
			char name[256];
			snprintf(name, sizeof name, "%s", s->name);
			rc = apf_error(vrc, "score", "%s: not verified: %s",
				       name, why);
			break;
		}
		rc = apf_score_logs_exclude(logs, i, why);
	}
	apf_keyring_free(runner);
	apf_keyring_free(entry);
	return rc;
}

int cmd_score(int argc, char **argv)
{
	const char *rules_name = NULL, *targets_path = NULL,
		   *heldout_path = NULL, *svg = NULL, *csv = NULL,
		   *key_path = NULL, *entry_key = NULL;
	int json = 0, self_tuning = 0, strict = 0, verify = 0;
	const struct apf_opt opts[] = {
		{"rules", 'r', OPT_STRING, &rules_name, "R",
		 "apf, algoperf-0.5 or algoperf-0.6"},
		{"targets", 't', OPT_STRING, &targets_path, "FILE",
		 "AlgoPerf's workload_targets JSON"},
		{"heldout", 0, OPT_STRING, &heldout_path, "FILE",
		 "held-out variants: AlgoPerf's list or an apf draw"},
		{"svg", 0, OPT_STRING, &svg, "FILE",
		 "write the performance-profile plot"},
		{"csv", 0, OPT_STRING, &csv, "FILE",
		 "write submission,score,<times...> rows"},
		{"self-tuning", 0, OPT_FLAG, &self_tuning, NULL,
		 "the submissions follow the self-tuning ruleset"},
		{"verify", 0, OPT_FLAG, &verify, NULL,
		 "verify each apf run first (apf verify's checks); one that "
		 "fails is not ranked"},
		{"key", 0, OPT_STRING, &key_path, "PUB.pem",
		 "--verify: trust only this runner key (default: "
		 "$APF_HOME/trusted/)"},
		{"entry-key", 0, OPT_STRING, &entry_key, "PUB.pem",
		 "--verify: trust only this submitter key (default: "
		 "$APF_HOME/trusted/)"},
		{"strict", 0, OPT_FLAG, &strict, NULL,
		 "every warning is an error (exit 2; a run failing --verify: "
		 "exit 1)"},
		{"json", 0, OPT_FLAG, &json, NULL,
		 "print JSON instead of the table"},
		{0},
	};
	const struct apf_usage usage = {
		"score RUN_DIR[=LABEL]|LOG_DIR ... [--rules R] [--targets FILE] "
		"[--heldout FILE] [--svg FILE] [--csv FILE] [--self-tuning] "
		"[--verify [--key PUB.pem] [--entry-key PUB.pem]] [--strict] "
		"[--json]",
		"Score submissions: time-to-target per trial, the best trial per "
		"study, the median\nover studies, performance profiles over the "
		"base workloads, and the benchmark\nscore (the profile's "
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
		"ended or failed and whether the run\nended. A warning names "
		"the plan's units without eval_measurements.csv, a run\n"
		"whose log ends without run_end (interrupted), and failed "
		"units with their\nreason; a time marked '!' involves a unit "
		"that stopped early without meeting\nits target. Runs whose "
		"machines differ in device, CPU model, core count,\nthreads, "
		"GPU model or count are warned about, naming the field and "
		"each run's\nvalue: a time-to-target is comparable only on "
		"the same hardware. --strict\nmakes each of these an error "
		"(exit 2).\n\n"
		"Nothing on disk is trusted unless --verify is given (the table "
		"says so): it\nruns apf verify's checks over each apf run "
		"(entry, log chain and signature,\ntiming and CSVs against the "
		"log, checkpoint digests, held-out draw; no\n--reeval or "
		"--replay) with the keys of --key and --entry-key, else the\n"
		"trusted ones. A run that fails is left out of the ranking and "
		"listed with the\nverifier's reason; with --strict it is an "
		"error with the verifier's exit code\n(1 for a failed check). "
		"AlgoPerf log directories hold nothing signed: they\nare said "
		"to be unverifiable, once, and scored as logged.",
		1, -1,
		"apf score nadamw.run --verify\n"
		"apf score nadamw.run=tuned adamw.run=baseline --json\n"
		"apf score nadamw.run --svg profile.svg --csv scores.csv"};
	int nargs, rc = cmd_start("score", &usage, opts, argc, argv, &nargs);
	if (rc >= 0)
		return rc;
	const apf_score_rules *rules = NULL;
	if (rules_name && !(rules = apf_score_rules_get(rules_name))) {
		apf_error(APF_EUSAGE, "score",
			  "--rules: unknown rules '%s' (apf, algoperf-0.5, "
			  "algoperf-0.6)",
			  rules_name);
		return cmd_fail(APF_EUSAGE);
	}
	apf_score_logs *logs = NULL;
	apf_score_targets *targets = NULL;
	apf_score_heldout *heldout = NULL;
	apf_score_result *res = NULL;
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
	if (!rc && verify)
		rc = verify_runs(logs, key_path, entry_key, strict);
	if (!rc)
		rc = targets_path
			     ? apf_score_targets_load_json(&targets, targets_path)
			     : apf_score_targets_from_workloads(&targets, NULL);
	/* An apf run holds the draw its variants were run for. */
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
	/* A targets file's benchmark_version chooses the rules unless
	 * --rules does; a version apf does not know is an error then. */
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
	if (!rc && csv)
		rc = write_file(csv, res, apf_score_format_csv);
	if (!rc && svg)
		rc = write_file(svg, res, apf_score_format_svg);
	/* Warnings only once nothing can fail, so a failure is one line. */
	if (!rc) {
		const apf_score_rules *vr = apf_score_rules_for_version(version);
		if (vr && strncmp(rules->name, "algoperf-", 9) == 0 &&
		    strcmp(vr->name, rules->name))
			fprintf(stderr,
				"apf: score: warning: scoring with %s but the "
				"targets are AlgoPerf %s's\n",
				rules->name, version);
		for (size_t i = 0; i < res->nwarnings; i++)
			fprintf(stderr, "apf: score: warning: %s\n",
				res->warnings[i]);
	}
	if (!rc) {
		apf_buf b = {0};
		rc = json ? apf_score_format_json(res, &b)
			  : apf_score_format_table(res, &b);
		if (!rc && fwrite(b.data, 1, b.len, stdout) != b.len)
			rc = apf_error_errno(APF_EIO, errno, "stdout", "write");
		if (!rc && fflush(stdout) != 0)
			rc = apf_error_errno(APF_EIO, errno, "stdout", "write");
		apf_buf_free(&b);
	}
	apf_score_result_free(res);
	apf_score_heldout_free(heldout);
	apf_score_targets_free(targets);
	apf_score_logs_free(logs);
	return rc ? cmd_fail(rc) : 0;
}
