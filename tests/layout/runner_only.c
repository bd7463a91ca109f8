/*
 * runner_only.c: the runner's link check (tests/layout/test_layout.py).
 *
 * This program uses the runner's API (pkg/runner/runner.h) and is linked
 * against $(BUILD)/libapf-runner.a alone: the objects of every pkg/ folder
 * but pkg/trial, and of verify/ and workloads/. The trial is the untrusted
 * process: the runner starts it as `apf __trial` in the sandbox and speaks
 * to it through pkg/wire, and must call none of its code, so that what
 * the supervisor decides never depends on code the submission shares a
 * process with. If a runner object reaches pkg/trial, the symbol is
 * missing and the link fails. The link map ($(BUILD)/tests/layout/
 * runner_only.map) lists what it pulled in.
 *
 * Run, it checks the one call it makes that touches nothing on disk: the
 * default run directory of an entry.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runner/runner.h"

/* Linked, never called here: a run needs an entry, keys and a sandbox. */
int (*const apf_runner_only_run)(const struct apf_run_opts *) = apf_run;

int main(void)
{
	char *dir = apf_run_default_dir("entries/nadamw.apf");
	int ok = dir && !strcmp(dir, "nadamw.run");
	printf("runner_only: apf_run_default_dir(entries/nadamw.apf) = %s\n",
	       dir ? dir : "(null)");
	free(dir);
	printf("runner_only: %s\n", ok ? "ok" : "unexpected result");
	return ok ? 0 : 1;
}
