/*
 * verify.c: `apf verify ENTRY.apf [--key PUB.pem] [--json]`: the entry's
 * integrity, its signature by a trusted key, the manifest's schema, and every
 * file against the manifest. Exit 0 verified, 1 a check failed (the message
 * names it), 2 not an entry / truncated / unreadable.
 *
 * `apf verify RUN_DIR [--key PUB.pem] [--entry-key PUB.pem] [--json]`: a
 * run directory (one with run.json), by checks 1 to 6 of verify/verify.h.
 * --key is the runner's key, --entry-key the submitter's. Exit 3 when
 * everything verifies but the log has no run_end (the run stopped
 * abnormally). A directory without run.json is refused before any check,
 * so its message is not check 1's about a missing entry.apf.
 *
 * The audits' options are the auditor's alone: nothing read from the run
 * directory widens a comparison. --replay-compare tolerant and
 * --accept-other-hardware are how an auditor accepts a weaker one, and
 * the report says which was made and why, beside the hardware the run
 * claims (run.json's, signed by the runner, proven by nothing).
 */
#include "cmd.h"
#include "audit.h"
#include "scoring.h"

#include <inttypes.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "entry/entry.h"
#include "hash/hash.h"
#include "rundir/rundir.h"
#include "verify/verify.h"

/* The manifest's strings, the paths and the checks' details carry text
 * from the entry, the run and its log: term_text at each print. */
static void print_entry(const apf_entry *e)
{
	const apf_manifest *m = e->manifest;
	char sz[32];
	printf("verified %s\n", term_text(e->path));
	printf("  entry       sha256:%s (%s)\n", e->file_digest,
	       human_bytes(e->file_bytes, sz));
	printf("  manifest    sha256:%s\n", e->manifest_digest);
	printf("  signed by   %s\n              (trusted key %s)\n",
	       term_text(e->signer),
	       e->signer_source ? term_text(e->signer_source) : "?");
	printf("  submission  %s, %s tuning, %zu files, tree sha256:%s\n",
	       term_text(m->submission.name), term_text(m->submission.ruleset),
	       m->submission.nfiles, m->submission.tree_digest);
	for (size_t i = 0; i < m->nworkloads; i++)
		printf("  workload    %s (%s), spec sha256:%s\n",
		       term_text(m->workloads[i].name),
		       term_text(m->workloads[i].variant),
		       m->workloads[i].spec_digest);
	for (size_t i = 0; i < m->ndatasets; i++)
		printf("  dataset     %s, %llu files, tree sha256:%s\n",
		       term_text(m->datasets[i].name),
		       (unsigned long long)m->datasets[i].files,
		       m->datasets[i].tree_digest);
}

static int print_json(const char *path, const apf_entry *e, int rc)
{
	json_t *o;
	if (e) {
		o = json_pack("{s:b, s:s, s:s, s:s, s:s, s:s, s:s, s:s, s:I}",
			      "verified", 1, "entry", utf8_text(path),
			      "entry_sha256", e->file_digest, "manifest_sha256",
			      e->manifest_digest, "signer",
			      utf8_text(e->signer), "trusted_key",
			      e->signer_source ? utf8_text(e->signer_source)
					       : "",
			      "submission",
			      utf8_text(e->manifest->submission.name),
			      "submission_tree_sha256",
			      e->manifest->submission.tree_digest, "files",
			      (json_int_t)e->manifest->submission.nfiles);
	} else {
		o = json_pack("{s:b, s:s, s:s, s:i}", "verified", 0, "entry",
			      utf8_text(path), "error", apf_error_message(),
			      "exit_code", apf_exit_code(rc));
	}
	return cmd_print_json(o, 0);
}

static void run_progress(void *user, uint64_t records, uint64_t bytes,
			 uint64_t total)
{
	(void)user;
	char a[32], b[32];
	progress_show("verifying log.jsonl: %" PRIu64 " records, %s / %s",
		      records, human_bytes(bytes, a), human_bytes(total, b));
}

/* The plausibility backstop's lines (verify.h): a flag, not a check. */
static void print_plausibility(const apf_verify_report *r)
{
	apf_buf b = {0}, e = {0};
	/* Lines that name units and workloads from the log: escaped. */
	if (!apf_verify_plausibility_text(&b, r) && b.data)
		apf_text_escape_lines(&e, b.data, b.len, 1);
	if (e.data)
		fputs(e.data, stdout);
	apf_buf_free(&b);
	apf_buf_free(&e);
}

static void print_run(const apf_verify_report *r)
{
	printf("%s %s\n",
	       r->status == APF_EABORT ? "verified (incomplete)" : "verified",
	       term_text(r->run_dir));
	char unrun[160] = "";
	if (r->units > r->units_started)
		snprintf(unrun, sizeof unrun,
			 "; %zu of the plan's %zu units not run (a score counts "
			 "each as a miss)",
			 r->units - r->units_started, r->units);
	printf("  submission  %s: %zu unit%s run (%zu ended, %zu failed), "
	       "%zu evals, %zu resume%s%s%s\n",
	       r->submission ? term_text(r->submission) : "?",
	       r->units_started, r->units_started == 1 ? "" : "s",
	       r->units_ended, r->units_failed, r->evals, r->resumes,
	       r->resumes == 1 ? "" : "s", r->sealed ? "" : ", UNSEALED",
	       unrun);
	printf("  training    %.3f s claimed (the units' total durations)\n",
	       (double)r->claimed_ns / 1e9);
	if (r->claims_known) {
		printf("  clock       %s (%s)", apf_clock_name(r->clock),
		       r->clock == APF_CLOCK_CPU
			       ? "the trial's CPU time over 2 cores"
			       : "wall time, AlgoPerf's rule");
		if (r->short_blocks)
			printf("; %" PRIu64 " of %" PRIu64 " step blocks short "
			       "of cores (the trial's threads waited over "
			       "%.0f%% of their time for one)%s",
			       r->short_blocks, r->blocks,
			       100 * APF_CLOCK_SHORT_SHARE,
			       r->clock == APF_CLOCK_CPU
				       ? ", not counted by this clock"
				       : ": their times are the machine's as "
					 "much as the submission's");
		else if (r->blocks)
			printf("; every step block had its cores");
		printf("\n");
		if (r->budget_scale != 1.0)
			printf("  budget      scaled x%g: UNOFFICIAL, a quick look "
			       "(apf run --budget-scale), not a result\n",
			       r->budget_scale);
	}
	if (r->claims_known) {
		char gpu[300] = "";
		if (!strcmp(r->device, "cuda"))
			snprintf(gpu, sizeof gpu, " (%s)",
				 r->gpu_model ? r->gpu_model
					      : "GPU model not recorded");
		printf("  hardware    claimed by the runner, %s, not proven: "
		       "device %s%s, CPU %s, threads %" PRIu64 "\n",
		       r->claims_signed ? "signed" : "not signed yet",
		       r->device, term_text(gpu),
		       r->cpu_model ? term_text(r->cpu_model) : "not recorded",
		       r->threads);
	}
	/* A detail is one line that may quote the log (a unit, a metric, a
	 * warning): escaped whole. */
	for (int c = 1; c <= APF_VERIFY_NCHECKS; c++)
		printf("  %d %-11s  %-7s  %s\n", c, apf_verify_check_name(c),
		       apf_verify_outcome_name(r->check[c].outcome),
		       r->check[c].detail ? term_text(r->check[c].detail) : "");
	print_plausibility(r);
}

/* `apf verify RUN --json`'s object (and `apf report`'s copy of it, which
 * leaves out the checks' seconds): one builder, so the two cannot drift.
 * error: the failure's message when rc is not 0. */
json_t *cmd_verify_run_json(const apf_verify_report *r, int rc,
			    const char *error, int seconds)
{
	json_t *checks = json_array();
	for (int c = 1; checks && c <= APF_VERIFY_NCHECKS; c++) {
		json_t *x = json_pack(
			"{s:i, s:s, s:s, s:s}", "check", c, "name",
			apf_verify_check_name(c), "outcome",
			apf_verify_outcome_name(r->check[c].outcome), "detail",
			r->check[c].detail ? utf8_text(r->check[c].detail) : "");
		if (x && seconds)
			json_object_set_new(x, "seconds",
					    json_real(r->check[c].seconds));
		json_array_append_new(checks, x);
	}
	/* What run.json claims of the hardware: the runner's word, signed
	 * where a head is, never proven. */
	json_t *claims = !r->claims_known
		? json_null()
		: json_pack("{s:s, s:s?, s:s?, s:I, s:s, s:b, s:b}", "device",
			    r->device, "gpu_model",
			    r->gpu_model ? utf8_text(r->gpu_model) : NULL,
			    "cpu_model",
			    r->cpu_model ? utf8_text(r->cpu_model) : NULL,
			    "threads", (json_int_t)r->threads,
			    "source", "run.json", "signed", r->claims_signed,
			    "proven", 0);
	const struct apf_verify_replay_how *h = &r->replay_how;
	json_t *how = !h->compare[0]
		? json_null()
		: json_pack("{s:s, s:s?, s:s?, s:s, s:s?}", "compare",
			    h->compare, "on", h->on[0] ? h->on : NULL,
			    "compare_why",
			    h->compare_why ? utf8_text(h->compare_why) : NULL,
			    "timing", h->timing, "timing_why",
			    h->timing_why ? utf8_text(h->timing_why) : NULL);
	json_t *o = json_pack(
		"{s:s, s:b, s:b, s:i, s:s?, s:s?, s:s, s:s, s:s, s:s, s:s, s:I, "
		"s:I, s:b, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:f, s:o, "
		"s:o, s:o}",
		"run", r->run_dir ? utf8_text(r->run_dir) : "", "verified",
		rc == 0 || rc == APF_EABORT, "complete", r->complete,
		"exit_code", apf_exit_code(rc), "error",
		rc && error ? utf8_text(error) : NULL, "submission",
		utf8_text(r->submission), "entry_sha256",
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
		(double)r->claimed_ns / 1e9, "claims", claims, "replay", how,
		"checks", checks);
	if (o && r->units)
		json_object_set_new(o, "units_planned",
				    json_integer((json_int_t)r->units));
	/* --pruned: the units whose checkpoints were not here (none
	 * without it). */
	json_t *pruned = json_array();
	for (size_t i = 0; o && pruned && i < r->npruned; i++)
		json_array_append_new(pruned,
				      json_string(utf8_text(r->pruned[i])));
	if (o)
		json_object_set_new(o, "pruned_units",
				    pruned ? pruned : json_null());
	else
		json_decref(pruned);
	if (o)
		json_object_set_new(o, "plausibility",
				    apf_verify_plausibility_json(r));
	if (o && r->claims_known) {
		json_object_set_new(
			o, "clock",
			json_pack("{s:s, s:I, s:I, s:f}", "name",
				  apf_clock_name(r->clock), "blocks",
				  (json_int_t)r->blocks, "short_of_cores",
				  (json_int_t)r->short_blocks, "short_share",
				  APF_CLOCK_SHORT_SHARE));
		json_object_set_new(o, "budget_scale",
				    json_real(r->budget_scale));
		json_object_set_new(o, "official",
				    json_boolean(r->budget_scale == 1.0));
		json_object_set_new(o, "numerics",
				    json_integer(r->numerics));
	}
	return o;
}

static int print_run_json(const apf_verify_report *r, int rc)
{
	return cmd_print_json(
		cmd_verify_run_json(r, rc, rc ? apf_error_message() : NULL, 1),
		0);
}

static void audit_progress(void *user, const char *what)
{
	(void)user;
	progress_show("%s", what);
}

static int verify_run(const char *dir, const char *key_path,
		      const char *entry_key, int as_json, int pruned,
		      struct apf_audit_opts *ao)
{
	apf_keyring *runner = NULL, *entry = NULL;
	apf_verify_report *r = NULL;
	int rc = apf_keyring_default(&runner, key_path, "--key");
	if (!rc)
		rc = apf_keyring_default(&entry, entry_key, "--entry-key");
	if (!rc) {
		struct apf_verify_opts o = {.runner_keys = runner,
					    .entry_keys = entry,
					    .pruned = pruned,
					    .progress = run_progress};
		rc = apf_verify_run(&r, dir, &o);
		progress_done();
	}
	/* Re-evaluation and replay only on a run whose log checked out. */
	if (r && (rc == 0 || rc == APF_EABORT) && cmd_audit_wanted(ao)) {
		/* An unfinished run's verdict (exit 3, why it is unfinished)
		 * must outlive the audit, which clears and sets the message
		 * as it goes. */
		char verdict[1024];
		apf_error_take(verdict, sizeof verdict);
		ao->entry_keys = entry;
		ao->progress = audit_progress;
		int arc = apf_verify_audit(r, ao);
		progress_done();
		if (arc)
			rc = arc;
		else
			apf_error_restore(rc, verdict);
	}
	/* A JSON verdict that cannot be written is the error, never an
	 * empty output that reads as nothing to say. */
	if (as_json && r) {
		int jrc = print_run_json(r, rc);
		rc = jrc ? jrc : rc;
	} else if (r && (rc == 0 || rc == APF_EABORT))
		print_run(r);
	apf_verify_report_free(r);
	apf_keyring_free(runner);
	apf_keyring_free(entry);
	return rc ? cmd_fail(rc) : 0;
}

int cmd_verify(int argc, char **argv)
{
	const char *key_path = NULL, *entry_key = NULL;
	int as_json = 0;
	struct cmd_audit_in audit = {.seed = -1};
	const struct apf_opt opts[] = {
		{"key", 0, OPT_STRING, &key_path, "PUB.pem",
		 "trust only this public key: the entry's signer, or a run's "
		 "runner (default: $APF_HOME/trusted/)"},
		{"entry-key", 0, OPT_STRING, &entry_key, "PUB.pem",
		 "a run's entry: trust only this submitter key (default: "
		 "$APF_HOME/trusted/)"},
		{"json", 0, OPT_FLAG, &as_json, NULL,
		 "print the verdict as JSON on stdout"},
		CMD_AUDIT_OPTIONS(audit, "a run: "),
		{0},
	};
	const struct apf_usage usage = {
		"verify ENTRY.apf|RUN_DIR [--key PUB.pem] [--entry-key PUB.pem] "
		"[--json] [--reeval] [--replay N|all [--seed S]] "
		"[--replay-top Q] [--timing-tolerance R "
		"[--accept-other-hardware]] "
		"[--replay-compare exact|tolerant [--replay-rtol X]]",
		"Verify an entry: the archive's integrity, the manifest's "
		"signature by a trusted\nkey, the manifest's schema, and every "
		"file against the manifest (type, mode,\nsize, SHA-256; nothing "
		"extra, nothing missing).\n\n"
		"Verify a run directory (what `apf run` writes: run.json, "
		"entry.apf, log.jsonl,\nlog.dsse.json and the units' "
		"directories) in six checks: 1 its entry; 2 the\nlog's chain, "
		"the runner's signature over its last line, run.json bound to "
		"the\nentry, the trials' parameters those of the entry's plan "
		"and workload specs;\n3 the accumulated times, eval cadence, "
		"budget, target flags, stops and\ntime-to-target, recomputed "
		"from the supervisor's timestamps, and the CSVs; 4 the\n"
		"checkpoint digests (with --reeval, every checkpoint "
		"re-evaluated in a clean\nprocess, its metrics equal to the "
		"log's bit for bit, and the initial state,\ncheckpoint 0, equal "
		"to the workload's initialisation for the seed); 5 eval\n"
		"intervals re-executed from their checkpoint in the sandbox, the "
		"first from\ncheckpoint 0, each ending in the next checkpoint "
		"bit for bit; 6 the held-out\ndraw recomputed from its seed.\n\n"
		"Which intervals check 5 replays: --replay N picks N by a "
		"printed seed, so an\noperator cannot know which will be "
		"checked (a forged trajectory survives only\nwhere it is not "
		"looked at); --replay-top Q takes the Q intervals whose\n"
		"parameters changed most between checkpoints (large updates are "
		"where a forged\ntrajectory is cheapest to hide, as "
		"Proof-of-Learning verifiers argue);\n--replay all replays every "
		"interval (state kept outside the slots, or any\nother "
		"divergence, anywhere). Both options may be given; a run with "
		"nothing to\nreplay reports check 5 as skipped, never passed. "
		"Each replay is timed as the\nrunner times a trial; with "
		"--timing-tolerance R an interval whose claimed\nsubmission "
		"time is under 1/R of its replayed time fails (an operator who\n"
		"under-reported). Times compare only on the hardware the run "
		"claims: its CPU\nmodel, and for a cuda run its GPU model, "
		"replayed on it; anywhere else, or\nwhere the run records "
		"none, check 5 fails unless --accept-other-hardware\naccepts "
		"replays whose times are not compared.\n\n"
		"A cpu run replays bit for bit on any x86-64 CPU (the CPU "
		"backend's steps do\nnot depend on the instruction set); a cuda "
		"run bit for bit on its GPU model,\nand anywhere else check 5 "
		"fails unless --replay-compare tolerant asks for a\nreplay on "
		"the CPU within a tolerance: the replayed parameters no further "
		"from\nthe checkpoint's than --replay-rtol X times the "
		"interval's own change (L2),\nand the replayed state's metrics "
		"within X relative.\n\n"
		"The run's device, CPU and GPU models and thread count are "
		"run.json's: signed\nby the runner's key, proven by nothing. "
		"So they never choose a weaker check:\na comparison other than "
		"the exact one, or a timing check not made, is the\nauditor's "
		"option, never the run's. The report states the claims and "
		"says\nwhich comparison was made and why.",
		"Exit 0: verified. 1: a check failed; the message names the "
		"check, file and\nrecord. 2: not an entry or run directory, "
		"truncated, or unreadable. 3: a run\nthat verifies but stopped "
		"abnormally (its log has no run_end).\n\nREADME.md (Verifying "
		"a run) and `man apf-verify` say more.",
		1, 1,
		"apf verify nadamw.apf\n"
		"apf verify nadamw.apf --json\n"
		"apf verify nadamw.run\n"
		"apf verify nadamw.run --reeval --replay 1"};
	int nargs, rc = cmd_start("verify", &usage, opts, argc, argv, &nargs);
	if (rc >= 0)
		return rc;
	const char *path = argv[1];
	struct stat st;
	struct apf_audit_opts ao = {0};
	if ((rc = cmd_audit_parse(&audit, "verify", &ao)))
		return cmd_fail(rc);
	if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
		/* Refused by name here, not reported as check 1's missing
		 * entry.apf. */
		if ((rc = apf_rundir_check(path)))
			return cmd_fail(apf_error_prefix(rc, "verify"));
		return verify_run(path, key_path, entry_key, as_json,
				  audit.pruned, &ao);
	}
	/* Only an entry that is there is called one: a path that is not
	 * gets the entry reader's own line below. */
	if ((cmd_audit_wanted(&ao) || audit.tolerance || audit.compare ||
	     audit.pruned) &&
	    lstat(path, &st) == 0) {
		apf_error(APF_EUSAGE, "verify",
			  "--reeval, --replay and --pruned are for a run "
			  "directory; %s is an entry (its checks need no "
			  "options)",
			  term_text(path));
		return cmd_fail(APF_EUSAGE);
	}
	if (entry_key) {
		apf_error(APF_EUSAGE, "verify",
			  "--entry-key is for run directories (an entry's "
			  "signer is --key)");
		return cmd_fail(APF_EUSAGE);
	}
	apf_keyring *kr = NULL;
	apf_entry *e = NULL;
	rc = apf_keyring_default(&kr, key_path, "--key");
	if (!rc)
		rc = apf_entry_verify(&e, path, kr);
	if (as_json) {
		int jrc = print_json(path, rc ? NULL : e, rc);
		rc = jrc ? jrc : rc;
	} else if (!rc)
		print_entry(e);
	apf_entry_free(e);
	apf_keyring_free(kr);
	return rc ? cmd_fail(rc) : 0;
}
