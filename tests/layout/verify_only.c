/*
 * verify_only.c: the verifier's link check (tests/layout/test_layout.py).
 *
 * This program uses the auditor's API (verify/verify.h) and is linked
 * against $(BUILD)/libapf-verify.a alone: the objects of verify/, of every
 * pkg/ folder but pkg/runner and pkg/trial, and of workloads/. The link
 * pulls in every object the verifier reaches; if one of them calls into the
 * runner (the operator's supervisor) or the trial (the untrusted process),
 * the symbol is missing and the link fails - so `apf verify` can be trusted
 * without reading either. The link map ($(BUILD)/tests/layout/
 * verify_only.map) lists what it did pull in: scripts/layout-report.py
 * counts those sources for verify/README.
 *
 * It also takes the address of apf_eval_main, the evaluator's main: `apf
 * verify --reeval` and `--replay` start `apf __eval` (this same apf, by
 * /proc/self/exe), which trusts what it computes, so it must keep out of
 * the runner and the trial as well. (The replay's `apf __build` and `apf
 * __trial` are pkg/trial's: untrusted by design, sandboxed by pkg/host,
 * their output compared, never believed.)
 *
 * Run, it checks that the calls do what verify.h says on the simplest
 * input: an empty directory is an input error with a report, and an audit
 * asked for nothing does nothing.
 */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "base/base.h"
#include "eval/eval.h"
#include "verify/verify.h"

/* Linked, never called here (see above). */
int (*const apf_verify_only_evaluator)(int, char **) = apf_eval_main;

int main(void)
{
	char dir[] = "/tmp/apf-verify-only-XXXXXX";
	if (!mkdtemp(dir)) {
		perror("verify_only: mkdtemp");
		return 2;
	}
	apf_verify_report *r = NULL;
	struct apf_verify_opts vo = {0};
	int rc = apf_verify_run(&r, dir, &vo);
	int ok = rc == APF_EINPUT && r != NULL;
	printf("verify_only: apf_verify_run(empty dir) = %d: %s\n", rc,
	       apf_error_message());
	if (r) {
		struct apf_audit_opts ao = {0};
		int arc = apf_verify_audit(r, &ao);
		printf("verify_only: apf_verify_audit(nothing asked) = %d\n", arc);
		ok = ok && arc == 0;
	}
	apf_verify_report_free(r);
	rmdir(dir);
	printf("verify_only: %s\n", ok ? "ok" : "unexpected result");
	return ok ? 0 : 1;
}
