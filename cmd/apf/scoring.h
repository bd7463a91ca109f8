/*
 * scoring.h: what `apf score` and `apf report` share - their inputs
 * (DIR[=LABEL]..., --rules, --targets, --heldout, --self-tuning,
 * --verify with --key and --entry-key, --strict) read the same way, and
 * the scoring computed from them, so that the page and the table cannot
 * disagree on what the same command line means.
 *
 * DIR=LABEL scores DIR under LABEL; the argument is split at its last '='
 * only when it is not itself a directory and the part before is one, so a
 * path holding '=' still works without a label. The rules default to the
 * AlgoPerf version the targets file names, else apf when any input is an
 * apf run, else algoperf-0.6. Without --heldout an apf run's own
 * heldout.json is used. --verify runs the verifier (the checks `apf verify
 * RUN` runs by default) over each apf run: one that fails is left out of
 * the ranking with the verifier's message, or under --strict is the error
 * with the verifier's exit status; one that verifies but is unfinished
 * counts as verified (the scorer's warnings say it is incomplete). With
 * --reeval, --replay or --replay-top (and their qualifiers, audit.h) the
 * verifier also re-evaluates and replays each run as `apf verify RUN
 * --reeval ...` would, and a run failing those is not verified either.
 */
#ifndef APF_CMD_SCORING_H
#define APF_CMD_SCORING_H

#include "audit.h"
#include "score/score.h"
#include "sign/sign.h"
#include "verify/verify.h"

struct cmd_scoring_in {
	const char *cmd; /* "score", "report": messages name it */
	char *const *args;
	int nargs;
	const char *rules_name, *targets_path, *heldout_path;
	const char *key_path, *entry_key;
	int self_tuning, strict, verify;
	/* The draw's entries may include some no run given runs (the runs
	 * are part of the board it was drawn for). */
	int heldout_subset;
	/* --verify's re-evaluation and replay, as `apf verify RUN_DIR` reads
	 * them (audit.h); .seed must start at -1. */
	struct cmd_audit_in audit;
	int want_entry_keys; /* load the trusted submitter keys without
				--verify too (the report shows trust) */
	/* --verify: each apf run's verification as it is made (rc 0 or
	 * APF_EABORT: verified; why: the failure, else NULL). Nonzero stops
	 * the scoring with that error. May be NULL. */
	int (*verdict)(void *user, const char *name,
		       const apf_verify_report *r, int rc, const char *why);
	void *user;
};

/* The options both commands take, as entries of their struct apf_opt
 * tables, setting the fields of `in` (a struct cmd_scoring_in). */
#define CMD_SCORING_OPTIONS(in)                                                \
	{"rules", 'r', OPT_STRING, &(in).rules_name, "R",                      \
	 "apf, algoperf-0.5 or algoperf-0.6"},                                 \
	{"targets", 't', OPT_STRING, &(in).targets_path, "FILE",               \
	 "AlgoPerf's workload_targets JSON"},                                  \
	{"heldout", 0, OPT_STRING, &(in).heldout_path, "FILE",                 \
	 "held-out variants: AlgoPerf's list or an apf draw (default: "        \
	 "the runs' own heldout.json, one draw for all)"},                     \
	{"heldout-subset", 0, OPT_FLAG, &(in).heldout_subset, NULL,            \
	 "the draw was made from more entries than the runs here (part of "    \
	 "its board): accept the others as the draw's word"},                  \
	{"self-tuning", 0, OPT_FLAG, &(in).self_tuning, NULL,                  \
	 "the submissions follow the self-tuning ruleset"},                    \
	{"verify", 0, OPT_FLAG, &(in).verify, NULL,                            \
	 "verify each apf run first (apf verify's checks); one that fails "    \
	 "is not ranked"},                                                     \
	{"key", 0, OPT_STRING, &(in).key_path, "PUB.pem",                      \
	 "--verify: trust only this runner key (default: $APF_HOME/trusted/)"},\
	{"entry-key", 0, OPT_STRING, &(in).entry_key, "PUB.pem",               \
	 "trust only this submitter key (default: $APF_HOME/trusted/)"},       \
	CMD_AUDIT_OPTIONS((in).audit, "--verify: "),                            \
	{"strict", 0, OPT_FLAG, &(in).strict, NULL,                            \
	 "problems with the logs are errors (exit 2; a run failing "       \
	 "--verify: exit 1); notes on what is ignored stay warnings"}

struct cmd_scoring {
	apf_score_logs *logs;
	apf_score_targets *targets;
	apf_score_heldout *heldout;
	apf_score_result *res;
	const apf_score_rules *rules;
	apf_score_rules self;       /* rules points here with --self-tuning */
	apf_keyring *entry_keys;    /* NULL unless verify or want_entry_keys */
	const char *version;        /* the targets file's benchmark_version */
	char binding[160];          /* what binds the draw's seed, else "" */
};

/* Reads the inputs and computes the scoring into *s (zeroed first; the
 * struct must not move while used). */
int cmd_scoring_compute(struct cmd_scoring *s, const struct cmd_scoring_in *in);
/* The warnings, to stderr as `apf: <cmd>: warning: ...` lines: only once
 * nothing can fail, so that a failure is one line. Without `results` only
 * those about the inputs, not the result's (for output that lists those
 * itself where the user reads it). */
void cmd_scoring_warnings(const struct cmd_scoring *s, const char *cmd,
			  int results);
void cmd_scoring_free(struct cmd_scoring *s);

/* `apf verify RUN --json`'s object for a verification (verify.c), the
 * checks' seconds with it or not: apf verify prints it, apf report embeds
 * it. error: the failure's message when rc is not 0. */
json_t *cmd_verify_run_json(const apf_verify_report *r, int rc,
			    const char *error, int seconds);

/* The page `apf report -o FILE` writes, which `apf score --report FILE`
 * writes too, so that one scoring and one verification give the table,
 * the JSON, the export and the page. cmd_scoring_keep_verdict is the
 * .verdict that collects each run's `apf verify --json` object into the
 * json object .user under its submission's name; cmd_report_write writes
 * the page of sc's result with those verdicts (NULL: without --verify,
 * every apf run marked unverified) atomically to output. (report.c) */
int cmd_scoring_keep_verdict(void *user, const char *name,
			     const apf_verify_report *r, int rc,
			     const char *why);
int cmd_report_write(const char *output, const char *title,
		     json_t *verdicts, const struct cmd_scoring *sc,
		     char *const *inputs, size_t ninputs);

#endif
