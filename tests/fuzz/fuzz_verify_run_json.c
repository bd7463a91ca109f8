/*
 * fuzz_verify_run_json.c: libFuzzer target for the verifier's reading of
 * run.json (its form, manifests/run.schema.json, and its binding to the
 * entry and to the log), the input written as the run directory's run.json
 * beside the template's entry and its signed log: whatever run.json says,
 * the verifier refuses it with a message, or verifies the run when it is
 * the run's own.
 * Seed: the template's run.json (tests/fuzz/seeds/fuzz_verify_run_json).
 */
#include "verify_run.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct verify_fixture *f = verify_fixture("fuzz_verify_run_json");
	char *path = apf_path_join(f->run, "run.json");
	if (!path)
		abort();
	fuzz_put(path, data, size);
	verify_fixture_check(f, 1);
	free(path);
	return 0;
}
