/*
 * fuzz_heldout.c: libFuzzer target for the held-out draw file, read two
 * ways: strictly by pkg/heldout (apf heldout verify), and by pkg/score's
 * --heldout loader, which also takes AlgoPerf's list form. A draw file that
 * parses must write back to text that parses again, compares equal, and is
 * a fixed point; score's loader must take every file heldout accepts.
 */
#include "fuzzlib.h"

#include "heldout/heldout.h"
#include "score/score.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *json = fuzz_copy(data, size);
	apf_heldout *h;
	apf_error_clear();
	int rc = apf_heldout_parse(&h, json, size, "fuzz.json");
	fuzz_expect(rc, "apf_heldout_parse");
	free(json);

	const char *dir = fuzz_tmpdir("fuzz_heldout");
	char *path = apf_path_join(dir, "draw.json");
	if (!path)
		abort();
	fuzz_put(path, data, size);
	apf_score_heldout *sh = NULL;
	apf_error_clear();
	int src = apf_score_heldout_load(&sh, path);
	fuzz_expect(src, "apf_score_heldout_load");
	free(path);
	if (!src && !sh)
		abort();
	apf_score_heldout_free(sh);
	/* Score reads every draw heldout accepts, except one where two draws
	 * name the same workload (a_b + c and a + b_c), which it refuses. */
	if (!rc && src && !strstr(apf_error_message(), "listed twice")) {
		fprintf(stderr, "score refused a draw file: %s\n",
			apf_error_message());
		abort();
	}
	if (rc)
		return 0;
	char *once, *twice_text;
	apf_heldout *back;
	if (apf_heldout_to_json(&once, h) != 0 ||
	    apf_heldout_parse(&back, once, strlen(once), "again") != 0) {
		fprintf(stderr, "written back, refused: %s\n",
			apf_error_message());
		abort();
	}
	if (apf_heldout_compare(back, h, "again") != 0 ||
	    apf_heldout_to_json(&twice_text, back) != 0 ||
	    strcmp(once, twice_text))
		abort();
	free(once);
	free(twice_text);
	apf_heldout_free(back);
	apf_heldout_free(h);
	return 0;
}
