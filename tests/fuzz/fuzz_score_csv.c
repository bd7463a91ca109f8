/*
 * fuzz_score_csv.c: libFuzzer target for the eval_measurements.csv reader
 * (pkg/score/csv.c). Any input must give 0 or APF_EINPUT with a message,
 * never a crash, a hang or a read outside the buffer; a hit must lie inside
 * the rows read.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "score/score.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	/* An exact-size copy, so ASan sees any read past the end. */
	char *text = malloc(size ? size : 1);
	if (!text)
		return 0;
	memcpy(text, data, size);
	static const struct apf_score_target targets[] = {
		{"accuracy", 1, 0.5, 0}, {"loss", -1, 0.5, 0}};
	for (size_t i = 0; i < 2; i++) {
		long evals, hit;
		double time;
		int rc = apf_score_parse_trial(text, size, "fuzz.csv", &targets[i],
					       &evals, &hit, &time);
		if (rc != 0 && rc != APF_EINPUT && rc != APF_ENOMEM)
			abort();
		if (rc == 0 && (hit >= evals || (hit >= 0 && !(time >= 0))))
			abort();
	}
	free(text);
	return 0;
}
