/*
 * fuzz_workload.c: libFuzzer target for workload.ini
 * (apf_workload_spec_load_dir on a scratch directory). The directory is
 * named "." so any workload name passes the name-matches-directory rule and
 * the fuzzer reaches everything after it. A spec that loads has its
 * documented invariants: a direction, positive CPU budgets, a 64-digit
 * dataset digest when one is declared, and variants that can be looked up
 * by name with model values that resolve.
 */
#include "fuzzlib.h"

#include "workload/workload.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *dir = fuzz_tmpdir("fuzz_workload");
	char *ini = apf_path_join(dir, "workload.ini");
	char *here = apf_path_join(dir, ".");
	if (!ini || !here)
		abort();
	fuzz_put(ini, data, size);
	apf_workload_spec *w;
	apf_error_clear();
	int rc = apf_workload_spec_load_dir(&w, here);
	fuzz_expect(rc, "apf_workload_spec_load_dir");
	free(ini);
	free(here);
	if (rc)
		return 0;
	if ((w->direction != 1 && w->direction != -1) ||
	    !(w->cpu.max_runtime_s > 0) || !(w->cpu.eval_period_s > 0) ||
	    (w->dataset_digest && !apf_is_hex_digest(w->dataset_digest)) ||
	    !w->dataset_path || !apf_workload_budget(w, "cpu"))
		abort();
	for (size_t i = 0; i < w->nvariants; i++) {
		const struct apf_workload_variant *v =
			apf_workload_variant(w, w->variants[i].name);
		if (v != &w->variants[i])
			abort();
		for (size_t k = 0;; k++) {
			const char *key = apf_config_key(w->ini, "model", k);
			if (!key)
				break;
			if (!apf_workload_model_value(w, v->name, key))
				abort();
		}
	}
	if (!apf_workload_variant(w, "base"))
		abort();
	apf_workload_spec_free(w);
	return 0;
}
