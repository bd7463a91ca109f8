/*
 * bench/verify/verify.c: times the verifier's log checks - checks 1 to 3
 * over run.json and log.jsonl, without the files beside the log
 * (apf_verify_run with log_only) - on a run directory, with the keys of
 * $APF_HOME/trusted/. Prints one line: records, bytes, seconds.
 * Usage: verify RUN_DIR
 */
#include <inttypes.h>
#include <stdio.h>

#include "verify/verify.h"

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: %s RUN_DIR\n", argv[0]);
		return 2;
	}
	apf_keyring *kr = NULL;
	int rc = apf_keyring_default(&kr, NULL, "--key");
	apf_verify_report *r = NULL;
	uint64_t t0 = apf_now_ns(), t1 = t0;
	if (!rc) {
		struct apf_verify_opts o = {.runner_keys = kr, .entry_keys = kr,
					    .log_only = 1};
		rc = apf_verify_run(&r, argv[1], &o);
		t1 = apf_now_ns();
	}
	if (rc)
		fprintf(stderr, "apf: %s\n", apf_error_message());
	else
		printf("records %" PRIu64 " bytes %" PRIu64 " seconds %.6f\n",
		       r->records, r->log_bytes, (double)(t1 - t0) / 1e9);
	apf_verify_report_free(r);
	apf_keyring_free(kr);
	return apf_exit_code(rc);
}
