/*
 * audit.h: the auditor's options for checks 4 and 5 (re-evaluation and
 * replay, verify/verify.h's struct apf_audit_opts), read one way by every
 * command that audits a run: `apf verify RUN_DIR`, and `apf score` and
 * `apf report` with --verify, so that a page shows the checks `apf verify`
 * would have made for the same words, and a refusal reads the same.
 *
 * Every option is the auditor's: nothing read from a run directory widens
 * a comparison (verify.c's header says why). A qualifier that would do
 * nothing (--timing-tolerance without a replay, --accept-other-hardware
 * without --timing-tolerance, --replay-rtol without --replay-compare
 * tolerant) is refused, not ignored: an auditor who gave it believes a
 * check was made.
 */
#ifndef APF_CMD_AUDIT_H
#define APF_CMD_AUDIT_H

#include "verify/verify.h"

struct cmd_audit_in {
	int reeval, accept;
	int pruned; /* struct apf_verify_opts' (check 4), not an audit's */
	long top, seed; /* seed -1: drawn at random (the check says which) */
	const char *replay, *tolerance, *compare, *rtol;
};

/* The options, as entries of a struct apf_opt table, setting the fields
 * of `a` (a struct cmd_audit_in); `when` begins each help ("a run: ",
 * "--verify: "). */
#define CMD_AUDIT_OPTIONS(a, when)                                             \
	{"reeval", 0, OPT_FLAG, &(a).reeval, NULL,                             \
	 when "re-evaluate every checkpoint in a clean process"},              \
	{"pruned", 0, OPT_FLAG, &(a).pruned, NULL,                             \
	 when "a unit none of whose checkpoint files is here was pruned "      \
	      "after an earlier verification: check it without them (the "     \
	      "verdict names it)"},                                            \
	{"replay", 0, OPT_STRING, &(a).replay, "N|all",                        \
	 when "re-execute N eval intervals (chosen by the seed), or all, "     \
	      "from their checkpoints"},                                       \
	{"replay-top", 0, OPT_INT, &(a).top, "Q",                              \
	 when "also re-execute the Q intervals whose parameters changed "      \
	      "most"},                                                         \
	{"timing-tolerance", 0, OPT_STRING, &(a).tolerance, "R",               \
	 "fail a replayed interval whose claimed submission time is under "    \
	 "1/R of its replayed time; fails check 5 off the run's CPU (and "     \
	 "GPU) model"},                                                        \
	{"accept-other-hardware", 0, OPT_FLAG, &(a).accept, NULL,              \
	 "with --timing-tolerance: where the times cannot be compared "        \
	 "(another CPU or GPU model, or none recorded), replay without "       \
	 "comparing them instead of failing"},                                 \
	{"replay-compare", 0, OPT_STRING, &(a).compare, "exact|tolerant",      \
	 "how a replay's end meets its checkpoint (default exact: bit for "    \
	 "bit; tolerant: on the CPU, within --replay-rtol)"},                  \
	{"replay-rtol", 0, OPT_STRING, &(a).rtol, "X",                         \
	 "with --replay-compare tolerant: parameters within X of the "         \
	 "interval's change, metrics within X relative (default 0.01)"},       \
	{"seed", 0, OPT_INT, &(a).seed, "S",                                   \
	 "the seed that picks the replayed intervals (default: random, "       \
	 "printed)"}

/* Reads a into *o (its entry keys, progress and user left as they are),
 * drawing the seed when none was given. Returns 0, or APF_EUSAGE with a
 * message that names cmd and the option. */
int cmd_audit_parse(const struct cmd_audit_in *a, const char *cmd,
		    struct apf_audit_opts *o);

/* Whether o asks for check 4 or 5 at all. */
int cmd_audit_wanted(const struct apf_audit_opts *o);

/* What o asks for, in words ("re-evaluation of every checkpoint; replay
 * of 2 intervals by seed 7"), "" when nothing (cut to fit size). */
void cmd_audit_describe(const struct apf_audit_opts *o, char *out,
			size_t size);

#endif
