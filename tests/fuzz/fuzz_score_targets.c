/*
 * fuzz_score_targets.c: libFuzzer target for the targets file reader of
 * apf score (pkg/score/targets.c: AlgoPerf's workload_targets JSON and
 * apf's shorter form). Any input must give 0 or a refusal with a message;
 * a file that reads must keep its promises: every workload its base and
 * held-out lists name has a target (found, or refused only because the
 * rules do not know the metric's direction), no name is listed twice or
 * in both lists, and its benchmark_version chooses rules or is refused.
 */
#include "fuzzlib.h"

#include <math.h>

#include "score/score.h"

static void check_listed(apf_score_targets *t, const apf_score_rules *rules,
			 const char *const *names, size_t n,
			 const char *const *other, size_t nother)
{
	for (size_t i = 0; i < n; i++) {
		if (!names[i])
			abort();
		for (size_t j = 0; j < i; j++)
			if (!strcmp(names[i], names[j]))
				abort();
		for (size_t j = 0; j < nother; j++)
			if (!strcmp(names[i], other[j]))
				abort();
		struct apf_score_target tg;
		const char *base = NULL;
		apf_error_clear();
		int rc = apf_score_targets_find(&tg, &base, t, rules, names[i]);
		if (rc && (rc != APF_EINPUT ||
			   !strstr(apf_error_message(), "do not know"))) {
			fprintf(stderr, "a listed workload without a target: "
					"%s\n",
				apf_error_message());
			abort();
		}
		if (!rc && (!tg.metric || (tg.direction != 1 &&
					    tg.direction != -1) ||
			    isnan(tg.validation)))
			abort();
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *dir = fuzz_tmpdir("fuzz_score_targets");
	char *path = apf_path_join(dir, "targets.json");
	if (!path)
		abort();
	fuzz_put(path, data, size);
	apf_score_targets *t = NULL;
	apf_error_clear();
	int rc = apf_score_targets_load_json(&t, path);
	fuzz_expect(rc, "apf_score_targets_load_json");
	free(path);
	if (rc) {
		apf_score_targets_free(t);
		return 0;
	}
	if (!t)
		abort();
	const apf_score_rules *rules = NULL;
	apf_error_clear();
	int rrc = apf_score_targets_rules(&rules, t);
	fuzz_expect(rrc, "apf_score_targets_rules");
	if (!rrc && !rules != !apf_score_targets_version(t))
		abort();
	if (!rules)
		rules = apf_score_rules_get("apf");
	size_t nb, nh;
	const char *const *base = apf_score_targets_base(t, &nb);
	const char *const *held = apf_score_targets_heldout(t, &nh);
	check_listed(t, rules, base, nb, held, nh);
	check_listed(t, rules, held, nh, base, nb);
	apf_score_targets_free(t);
	return 0;
}
