/*
 * verify.c: `apf verify ENTRY.apf [--key PUB.pem] [--json]`: the entry's
 * integrity, its signature by a trusted key, the manifest's schema, and every
 * file against the manifest. Exit 0 verified, 1 a check failed (the message
 * names it), 2 not an entry / truncated / unreadable.
 *
 * `apf verify RUN_DIR [--key PUB.pem] [--entry-key PUB.pem] [--json]`: a
 * run directory, by the checks of DESIGN.md 7 (verify/verify.h). --key is
 * the runner's key, --entry-key the submitter's. Exit 3 when everything
 * verifies but the log has no run_end (the run stopped abnormally).
 */
#include "cmd.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>

#include "entry/entry.h"
#include "hash/hash.h"
#include "runner/runner.h"
#include "verify/verify.h"

static void print_entry(const apf_entry *e)
{
	const apf_manifest *m = e->manifest;
	char sz[32];
	printf("verified %s\n", e->path);
	printf("  entry       sha256:%s (%s)\n", e->file_digest,
	       human_bytes(e->file_bytes, sz));
	printf("  manifest    sha256:%s\n", e->manifest_digest);
	printf("  signed by   %s\n              (trusted key %s)\n", e->signer,
	       e->signer_source ? e->signer_source : "?");
	printf("  submission  %s, %s tuning, %zu files, tree sha256:%s\n",
	       m->submission.name, m->submission.ruleset, m->submission.nfiles,
	       m->submission.tree_digest);
	for (size_t i = 0; i < m->nworkloads; i++)
		printf("  workload    %s (%s), spec sha256:%s\n",
		       m->workloads[i].name, m->workloads[i].variant,
		       m->workloads[i].spec_digest);
	for (size_t i = 0; i < m->ndatasets; i++)
		printf("  dataset     %s, %llu files, tree sha256:%s\n",
		       m->datasets[i].name,
		       (unsigned long long)m->datasets[i].files,
		       m->datasets[i].tree_digest);
}

static void print_json(const char *path, const apf_entry *e, int rc)
{
	json_t *o;
	if (e) {
		o = json_pack("{s:b, s:s, s:s, s:s, s:s, s:s, s:s, s:s, s:I}",
			      "verified", 1, "entry", path, "entry_sha256",
			      e->file_digest, "manifest_sha256",
			      e->manifest_digest, "signer", e->signer,
			      "trusted_key",
			      e->signer_source ? e->signer_source : "",
			      "submission", e->manifest->submission.name,
			      "submission_tree_sha256",
			      e->manifest->submission.tree_digest, "files",
			      (json_int_t)e->manifest->submission.nfiles);
	} else {
		o = json_pack("{s:b, s:s, s:s, s:i}", "verified", 0, "entry", path,
			      "error", apf_error_message(), "exit_code",
			      apf_exit_code(rc));
	}
	char *s = o ? json_dumps(o, JSON_INDENT(2)) : NULL;
	if (s)
		printf("%s\n", s);
	free(s);
	json_decref(o);
}

static void run_progress(void *user, uint64_t records, uint64_t bytes,
			 uint64_t total)
{
	(void)user;
	char a[32], b[32];
	progress_show("verifying log.jsonl: %" PRIu64 " records, %s / %s",
		      records, human_bytes(bytes, a), human_bytes(total, b));
}

static void print_run(const apf_verify_report *r)
{
	printf("%s %s\n",
	       r->status == APF_EABORT ? "verified (incomplete)" : "verified",
	       r->run_dir);
	printf("  submission  %s: %zu unit%s run (%zu ended, %zu failed), "
	       "%zu evals, %zu resume%s%s\n",
	       r->submission ? r->submission : "?", r->units_started,
	       r->units_started == 1 ? "" : "s", r->units_ended,
	       r->units_failed, r->evals, r->resumes,
	       r->resumes == 1 ? "" : "s", r->sealed ? "" : ", UNSEALED");
	printf("  training    %.3f s claimed (the units' total durations)\n",
	       (double)r->claimed_ns / 1e9);
	for (int c = 1; c <= APF_VERIFY_NCHECKS; c++)
		printf("  %d %-11s  %-7s  %s\n", c, apf_verify_check_name(c),
		       apf_verify_outcome_name(r->check[c].outcome),
		       r->check[c].detail ? r->check[c].detail : "");
}

static void print_run_json(const apf_verify_report *r, int rc)
{
	json_t *checks = json_array();
	for (int c = 1; c <= APF_VERIFY_NCHECKS; c++)
		json_array_append_new(
			checks,
			json_pack("{s:i, s:s, s:s, s:s, s:f}", "check", c, "name",
				  apf_verify_check_name(c), "outcome",
				  apf_verify_outcome_name(r->check[c].outcome),
				  "detail",
				  r->check[c].detail ? r->check[c].detail : "",
				  "seconds", r->check[c].seconds));
	json_t *o = json_pack(
		"{s:s, s:b, s:b, s:i, s:s?, s:s?, s:s, s:s, s:s, s:s, s:s, s:I, "
		"s:I, s:b, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:f, s:o}",
		"run", r->run_dir, "verified", rc == 0 || rc == APF_EABORT,
		"complete", r->complete, "exit_code", apf_exit_code(rc), "error",
		rc ? apf_error_message() : NULL, "submission", r->submission,
		"entry_sha256", r->entry_sha256, "manifest_sha256",
		r->manifest_sha256, "entry_signer", r->entry_signer,
		"runner_signer", r->runner_signer, "head", r->head, "records",
		(json_int_t)r->records, "log_bytes", (json_int_t)r->log_bytes,
		"sealed", r->sealed, "units", (json_int_t)r->units_started,
		"units_ended", (json_int_t)r->units_ended, "units_failed",
		(json_int_t)r->units_failed, "evals", (json_int_t)r->evals,
		"resumes", (json_int_t)r->resumes, "env_drifts",
		(json_int_t)r->env_drifts, "checkpoints",
		(json_int_t)r->checkpoints, "checkpoint_bytes",
		(json_int_t)r->checkpoint_bytes, "claimed_training_s",
		(double)r->claimed_ns / 1e9, "checks", checks);
	char *s = o ? json_dumps(o, JSON_INDENT(2)) : NULL;
	if (s)
		printf("%s\n", s);
	free(s);
	json_decref(o);
}

static void set_check(apf_verify_report *r, int c, int outcome,
		      const char *detail)
{
	free(r->check[c].detail);
	r->check[c].outcome = outcome;
	r->check[c].detail = apf_strdup(detail);
}

/* The intervals to replay: every (unit, k -> k+1) of the kept evals (k = 0
 * the state init_optimizer_state left), ordered by SHA-256 of (seed, unit,
 * k); --replay-top ranks them by their parameter change first. */
struct interval {
	size_t unit, k;
	uint8_t key[32];
	double change;  /* L2 norm of the parameters' change; --replay-top */
	int top;        /* one of the --replay-top choices */
};

static int cmp_interval(const void *a, const void *b)
{
	return memcmp(((const struct interval *)a)->key,
		      ((const struct interval *)b)->key, 32);
}

/* Largest change first, then the seeded order. */
static int cmp_change(const void *a, const void *b)
{
	const struct interval *x = a, *y = b;
	if (x->change != y->change)
		return x->change < y->change ? 1 : -1;
	return cmp_interval(a, b);
}

/* Chosen (top, then seeded) first, in that order; the rest after. */
static int cmp_chosen(const void *a, const void *b)
{
	const struct interval *x = a, *y = b;
	if (x->top != y->top)
		return y->top - x->top;
	if (x->top)
		return cmp_change(a, b);
	return cmp_interval(a, b);
}

#define REPLAY_ALL LONG_MAX
/* Replayed intervals shorter than this are timed and reported, but not held
 * against --timing-tolerance. */
#define MIN_TIMED_S 0.1

/* Checks 4 (--reeval) and 5 (--replay N) with the runner's own code:
 * re-evaluation in a clean evaluator, replay in the sandbox. */
/* The audits work on the records the verified walk of the log keeps: the
 * runner's reading of each unit (apf_audit_unit_evals, which its API
 * takes) must be exactly that list - the same checkpoints, indices, steps
 * and submission times - or nothing is audited. */
static int audit_list_is_the_walks(const apf_verify_report *r, apf_audit *a,
				   char *why, size_t size)
{
	char name[512];
	size_t n = apf_audit_units(a), seen = 0;
	for (size_t u = 0; u < n; u++) {
		const json_t *evals = apf_audit_unit_evals(a, u);
		apf_audit_unit_name(a, u, name, sizeof name);
		const struct apf_verify_kept *k = NULL;
		for (size_t i = 0; i < r->nkept && !k; i++)
			if (!strcmp(r->kept[i].unit, name))
				k = &r->kept[i];
		size_t m = json_array_size(evals), want = k ? k->n : 0;
		seen += k != NULL;
		if (m != want) {
			snprintf(why, size, "%s: the runner reads %zu checkpoints, "
					    "the verified walk keeps %zu",
				 name, m, want);
			return 0;
		}
		for (size_t e = 0; e < m; e++) {
			const json_t *x = json_array_get(evals, e);
			const struct apf_verify_ckpt *c = &k->ckpt[e];
			uint8_t sha[32];
			const char *hex = json_string_value(json_object_get(
				json_object_get(x, "checkpoint"), "sha256"));
			if (!hex || apf_unhex(sha, hex, 32) ||
			    memcmp(sha, c->sha256, 32) ||
			    (uint64_t)json_integer_value(json_object_get(x, "index")) !=
				    c->index ||
			    (uint64_t)json_integer_value(
				    json_object_get(x, "global_step")) !=
				    c->global_step ||
			    (uint64_t)json_integer_value(json_object_get(
				    x, "accumulated_submission_ns")) !=
				    c->submission_ns) {
				snprintf(why, size,
					 "%s: checkpoint %zu as the runner reads "
					 "it is not the one the verified walk "
					 "keeps",
					 name, e);
				return 0;
			}
		}
	}
	if (seen != r->nkept)
		snprintf(why, size, "the verified walk keeps checkpoints of a "
				    "unit the runner does not read");
	return seen == r->nkept;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static int audit(apf_verify_report *r, const char *dir, const char *entry_key,
		 int reeval, long replay, long top, double tolerance,
		 uint32_t seed)
{
	apf_audit *a;
	int rc = apf_audit_open(&a, dir, entry_key);
	if (rc)
		return rc;
	char name[512], why[700], line[2400];
	if (!audit_list_is_the_walks(r, a, why, sizeof why)) {
		apf_audit_close(a);
		return apf_error(APF_EVERIFY, reeval ? "check 4 (checkpoints)"
						     : "check 5 (replay)",
				 "%s", why);
	}
	size_t n = apf_audit_units(a), done = 0, initial = 0;
	for (size_t u = 0; reeval && !rc && u < n; u++) {
		const json_t *evals = apf_audit_unit_evals(a, u);
		apf_audit_unit_name(a, u, name, sizeof name);
		for (size_t k = 0; !rc && k < json_array_size(evals); k++) {
			const json_t *e = json_array_get(evals, k);
			/* Index 0 is the state init_optimizer_state left, which is
			 * checked against the initialisation, not evaluated. */
			int init = json_integer_value(json_object_get(e, "index")) == 0;
			progress_show("%s %s checkpoint %lld",
				      init ? "checking" : "re-evaluating", name,
				      (long long)json_integer_value(
					      json_object_get(e, "index")));
			rc = apf_audit_reeval(a, name, e, why, sizeof why);
			initial += init && !rc && !why[0];
			if (!rc && why[0]) {
				snprintf(line, sizeof line,
					 "%s/%s/%s: %s", dir, name,
					 json_string_value(json_object_get(
						 json_object_get(e, "checkpoint"),
						 "file")),
					 why);
				set_check(r, APF_VERIFY_CHECKPOINTS,
					  APF_VERIFY_FAILED, line);
				rc = apf_error(APF_EVERIFY, "check 4 (checkpoints)",
					       "%s", line);
			}
			done++;
		}
	}
	progress_done();
	if (reeval && !rc) {
		snprintf(line, sizeof line,
			 "%zu checkpoints' digests match; %zu initial state%s "
			 "equal%s the workload's initialisation for the seed, and "
			 "re-evaluated in a clean process the %zu others' metrics "
			 "equal the log's bit for bit",
			 done, initial, initial == 1 ? "" : "s",
			 initial == 1 ? "s" : "", done - initial);
		set_check(r, APF_VERIFY_CHECKPOINTS, APF_VERIFY_PASSED, line);
	}
	struct interval *iv = NULL;
	size_t niv = 0;
	int replaying = replay > 0 || top > 0;
	for (size_t u = 0; replaying && !rc && u < n; u++)
		niv += json_array_size(apf_audit_unit_evals(a, u)) > 1
			       ? json_array_size(apf_audit_unit_evals(a, u)) - 1
			       : 0;
	if (replaying && !rc) {
		iv = apf_calloc(niv, sizeof *iv);
		size_t m = 0;
		for (size_t u = 0; iv && u < n; u++) {
			size_t e = json_array_size(apf_audit_unit_evals(a, u));
			apf_audit_unit_name(a, u, name, sizeof name);
			for (size_t k = 0; k + 1 < e; k++) {
				char msg[700];
				int len = snprintf(msg, sizeof msg,
						   "apf-replay-v1 %u %s %zu", seed,
						   name, k);
				iv[m] = (struct interval){.unit = u, .k = k};
				apf_sha256_buf(msg, (size_t)len, iv[m].key);
				m++;
			}
		}
		if (!iv && niv)
			rc = apf_error(APF_ENOMEM, "verify", "out of memory");
	}
	/* --replay-top Q: the Q intervals whose parameters changed most. */
	for (size_t i = 0; iv && !rc && top > 0 && i < niv; i++) {
		const json_t *evals = apf_audit_unit_evals(a, iv[i].unit);
		apf_audit_unit_name(a, iv[i].unit, name, sizeof name);
		progress_show("ranking %s interval %zu", name, iv[i].k + 1);
		rc = apf_audit_param_change(a, name, json_array_get(evals, iv[i].k),
					    json_array_get(evals, iv[i].k + 1),
					    &iv[i].change);
	}
	size_t ntop = 0, nseeded = 0;
	if (iv && !rc && niv) {
		if (top > 0) {
			qsort(iv, niv, sizeof *iv, cmp_change);
			for (size_t i = 0; i < niv && (long)i < top; i++, ntop++)
				iv[i].top = 1;
		}
		qsort(iv, niv, sizeof *iv, cmp_chosen);
		size_t rest = niv - ntop;
		nseeded = replay == REPLAY_ALL	     ? rest
			  : (size_t)replay < rest ? (size_t)replay
						  : rest;
	}
	size_t replayed = 0;
	/* Each replay is timed like a trial: claimed / replayed submission
	 * time per interval, held against --timing-tolerance where this CPU
	 * is the run's. */
	double *ratios = iv ? apf_calloc(ntop + nseeded + 1, sizeof *ratios) : NULL;
	char incomparable[300] = "";
	int comparable = apf_audit_timing_comparable(a, incomparable,
						     sizeof incomparable);
	for (size_t i = 0; iv && ratios && !rc && i < ntop + nseeded; i++) {
		const json_t *evals = apf_audit_unit_evals(a, iv[i].unit);
		const json_t *from = json_array_get(evals, iv[i].k);
		const json_t *to = json_array_get(evals, iv[i].k + 1);
		apf_audit_unit_name(a, iv[i].unit, name, sizeof name);
		long long s0 = json_integer_value(json_object_get(from, "global_step"));
		long long s1 = json_integer_value(json_object_get(to, "global_step"));
		progress_show("replaying %s steps %lld to %lld", name, s0 + 1, s1);
		uint64_t replayed_ns = 0;
		rc = apf_audit_replay(a, name, from, to, why, sizeof why,
				      &replayed_ns);
		double claimed =
			(double)(json_integer_value(json_object_get(
					 to, "accumulated_submission_ns")) -
				 json_integer_value(json_object_get(
					 from, "accumulated_submission_ns"))) /
			1e9;
		double again = (double)replayed_ns / 1e9;
		ratios[replayed] = again > 0 ? claimed / again : 0;
		/* An interval of a few steps is dominated by the replay's
		 * first touches of its memory: too short to judge. */
		if (!rc && !why[0] && comparable && tolerance > 0 &&
		    again >= MIN_TIMED_S && claimed * tolerance < again)
			snprintf(why, sizeof why,
				 "claimed %.3f s of submission time, replayed "
				 "here in %.3f s (claimed/replayed %.2f, under "
				 "1/%g)",
				 claimed, again, ratios[replayed], tolerance);
		if (!rc && why[0]) {
			char chosen[64];
			if (iv[i].top)
				snprintf(chosen, sizeof chosen,
					 "a largest parameter change");
			else
				snprintf(chosen, sizeof chosen, "seed %u", seed);
			long long from_index = json_integer_value(
				json_object_get(from, "index"));
			char origin[64];
			if (from_index)
				snprintf(origin, sizeof origin, "eval %lld",
					 from_index);
			else
				snprintf(origin, sizeof origin,
					 "the initial state");
			snprintf(line, sizeof line,
				 "%s/%s: steps %lld to %lld replayed from %s (%s): "
				 "%s",
				 dir, name, s0 + 1, s1, origin, chosen, why);
			set_check(r, APF_VERIFY_REPLAY, APF_VERIFY_FAILED, line);
			rc = apf_error(APF_EVERIFY, "check 5 (replay)", "%s", line);
		}
		replayed++;
	}
	progress_done();
	if (replaying && !rc && !niv) {
		/* Nothing replayed is not a pass. */
		set_check(r, APF_VERIFY_REPLAY, APF_VERIFY_SKIPPED,
			  "skipped: no unit keeps two checkpoints, so no eval "
			  "interval can be replayed");
	} else if (replaying && !rc) {
		char how[200] = "";
		if (ntop && nseeded)
			snprintf(how, sizeof how,
				 "%zu with the largest parameter change, %zu "
				 "chosen by seed %u",
				 ntop, nseeded, seed);
		else if (ntop)
			snprintf(how, sizeof how,
				 "those with the largest parameter change");
		else if (replay == REPLAY_ALL)
			snprintf(how, sizeof how, "all");
		else
			snprintf(how, sizeof how, "seed %u", seed);
		char timing[500];
		qsort(ratios, replayed, sizeof *ratios, cmp_double);
		if (comparable)
			snprintf(timing, sizeof timing,
				 "; claimed/replayed submission time %.2f to "
				 "%.2f (median %.2f)%s",
				 ratios[0], ratios[replayed - 1],
				 ratios[replayed / 2],
				 tolerance > 0 ? ", within the tolerance where "
						 "replayed for 0.1 s or more"
					       : "");
		else
			snprintf(timing, sizeof timing,
				 "; timing not compared: %s", incomparable);
		snprintf(line, sizeof line,
			 "%zu of %zu eval intervals replayed (%s), each "
			 "ending in its checkpoint bit for bit%s",
			 replayed, niv, how, timing);
		set_check(r, APF_VERIFY_REPLAY, APF_VERIFY_PASSED, line);
	}
	free(ratios);
	free(iv);
	apf_audit_close(a);
	return rc;
}

static int verify_run(const char *dir, const char *key_path,
		      const char *entry_key, int as_json, int reeval,
		      long replay, long top, double tolerance, long seed)
{
	apf_keyring *runner = NULL, *entry = NULL;
	apf_verify_report *r = NULL;
	int rc = apf_keyring_default(&runner, key_path);
	if (!rc)
		rc = apf_keyring_default(&entry, entry_key);
	if (!rc) {
		struct apf_verify_opts o = {.runner_keys = runner,
					    .entry_keys = entry,
					    .progress = run_progress};
		rc = apf_verify_run(&r, dir, &o);
		progress_done();
	}
	/* Re-evaluation and replay only on a run whose log checked out. */
	if (r && (rc == 0 || rc == APF_EABORT) &&
	    (reeval || replay > 0 || top > 0)) {
		uint32_t s = (uint32_t)seed;
		if (seed < 0 && getrandom(&s, sizeof s, 0) != sizeof s)
			s = (uint32_t)apf_now_ns();
		/* An unfinished run's verdict (exit 3, why it is unfinished)
		 * must outlive the audit, which clears and sets the message
		 * as it goes. */
		char verdict[1024];
		apf_error_take(verdict, sizeof verdict);
		int arc = audit(r, dir, entry_key, reeval, replay, top,
				tolerance, s);
		if (arc)
			rc = arc;
		else
			apf_error_restore(rc, verdict);
	}
	if (as_json && r)
		print_run_json(r, rc);
	else if (r && (rc == 0 || rc == APF_EABORT))
		print_run(r);
	apf_verify_report_free(r);
	apf_keyring_free(runner);
	apf_keyring_free(entry);
	return rc ? cmd_fail(rc) : 0;
}

int cmd_verify(int argc, char **argv)
{
	const char *key_path = NULL, *entry_key = NULL;
	int as_json = 0, reeval = 0;
	long replay = 0, seed = -1, top = 0;
	const char *replay_text = NULL, *tolerance_text = NULL;
	double tolerance = 0;
	const struct apf_opt opts[] = {
		{"key", 0, OPT_STRING, &key_path, "PUB.pem",
		 "trust only this public key: the entry's signer, or a run's "
		 "runner (default: $APF_HOME/trusted/)"},
		{"entry-key", 0, OPT_STRING, &entry_key, "PUB.pem",
		 "a run's entry: trust only this submitter key (default: "
		 "$APF_HOME/trusted/)"},
		{"json", 0, OPT_FLAG, &as_json, NULL,
		 "print the verdict as JSON on stdout"},
		{"reeval", 0, OPT_FLAG, &reeval, NULL,
		 "a run: re-evaluate every checkpoint in a clean process"},
		{"replay", 0, OPT_STRING, &replay_text, "N|all",
		 "a run: re-execute N eval intervals (chosen by the seed), or "
		 "all, from their checkpoints"},
		{"replay-top", 0, OPT_INT, &top, "Q",
		 "a run: also re-execute the Q intervals whose parameters "
		 "changed most"},
		{"timing-tolerance", 0, OPT_STRING, &tolerance_text, "R",
		 "fail a replayed interval whose claimed submission time is "
		 "under 1/R of its replayed time (same CPU model only)"},
		{"seed", 0, OPT_INT, &seed, "S",
		 "the seed that picks the replayed intervals (default: random, "
		 "printed)"},
		{0},
	};
	const struct apf_usage usage = {
		"verify ENTRY.apf|RUN_DIR [--key PUB.pem] [--entry-key PUB.pem] "
		"[--json]\n           [--reeval] [--replay N|all [--seed S]] "
		"[--replay-top Q]\n           [--timing-tolerance R]",
		"Verify an entry: the archive's integrity, the manifest's "
		"signature by a trusted\nkey, the manifest's schema, and every "
		"file against the manifest (type, mode,\nsize, SHA-256; nothing "
		"extra, nothing missing).\n\n"
		"Verify a run directory (DESIGN.md 7): 1 its entry; 2 the log's "
		"chain, the runner's\nsignature over its last line, run.json "
		"bound to the entry, the trials' parameters\nthose of the "
		"entry's plan and workload specs; 3 the accumulated times, eval\n"
		"cadence, budget, target flags, stops and time-to-target, "
		"recomputed from the\nsupervisor's timestamps, and the CSVs; 4 "
		"the checkpoint digests (with --reeval,\nevery checkpoint "
		"re-evaluated in a clean process, its metrics equal to the\n"
		"log's bit for bit, and the initial state, checkpoint 0, equal to the\n"
		"workload's initialisation for the seed); 5 eval intervals "
		"re-executed from\ntheir checkpoint in the sandbox, the first "
		"from checkpoint 0, each ending in the\nnext checkpoint bit for "
		"bit; 6 the held-out draw recomputed from its seed.\n\n"
		"Which intervals check 5 replays: --replay N picks N by a "
		"printed seed, so an\noperator cannot know which will be "
		"checked (a forged trajectory survives only\nwhere it is not "
		"looked at); --replay-top Q takes the Q intervals whose\n"
		"parameters changed most between checkpoints (large updates are "
		"where a forged\ntrajectory is cheapest to hide, as "
		"Proof-of-Learning verifiers argue); --replay all\nreplays every "
		"interval (state kept outside the slots, or any other\n"
		"divergence, anywhere). Both options may be given; a run with "
		"nothing to replay\nreports check 5 as skipped, never passed. Each replay is timed as the runner\ntimes a trial; with --timing-tolerance R an interval whose claimed submission\ntime is under 1/R of its replayed time fails (an operator who under-reported),\ncompared only where this CPU model is the run's.",
		"Exit 0: verified. 1: a check failed; the message names the "
		"check, file and\nrecord. 2: not an entry or run directory, "
		"truncated, or unreadable. 3: a run\nthat verifies but stopped "
		"abnormally (its log has no run_end).",
		1, 1};
	int nargs, rc = cmd_start("verify", &usage, opts, argc, argv, &nargs);
	if (rc >= 0)
		return rc;
	const char *path = argv[1];
	struct stat st;
	if (replay_text && !strcmp(replay_text, "all")) {
		replay = REPLAY_ALL;
	} else if (replay_text) {
		char *end = NULL;
		errno = 0;
		replay = strtol(replay_text, &end, 10);
		if (!*replay_text || *end || errno || replay < 1 ||
		    !isdigit((unsigned char)replay_text[0]))
			replay = -1;
	}
	if (tolerance_text) {
		char *end = NULL;
		tolerance = strtod(tolerance_text, &end);
		if (!isdigit((unsigned char)tolerance_text[0]) || *end ||
		    !(tolerance >= 1.0) || tolerance > 1e6) {
			apf_error(APF_EUSAGE, "verify",
				  "--timing-tolerance takes a number R >= 1");
			return cmd_fail(APF_EUSAGE);
		}
	}
	if (replay < 0 || top < 0 || seed < -1 || seed > 0xffffffffL) {
		apf_error(APF_EUSAGE, "verify",
			  "--replay takes N >= 1 or all, --replay-top Q >= 0, "
			  "--seed 0 to 2^32-1");
		return cmd_fail(APF_EUSAGE);
	}
	if (stat(path, &st) == 0 && S_ISDIR(st.st_mode))
		return verify_run(path, key_path, entry_key, as_json, reeval,
				  replay, top, tolerance, seed);
	if (entry_key) {
		apf_error(APF_EUSAGE, "verify",
			  "--entry-key is for run directories (an entry's "
			  "signer is --key)");
		return cmd_fail(APF_EUSAGE);
	}
	apf_keyring *kr = NULL;
	apf_entry *e = NULL;
	rc = apf_keyring_default(&kr, key_path);
	if (!rc)
		rc = apf_entry_verify(&e, path, kr);
	if (as_json)
		print_json(path, rc ? NULL : e, rc);
	else if (!rc)
		print_entry(e);
	apf_entry_free(e);
	apf_keyring_free(kr);
	return rc ? cmd_fail(rc) : 0;
}
