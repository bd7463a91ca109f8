/*
 * fuzz_table.c: libFuzzer target for the table parser (pkg/data/table.c),
 * which checks a click log's train split as a trial receives it. Any input
 * must give 0 or APF_EINPUT, never a crash or a read outside the buffer;
 * a table it accepts must hold only what a model may index with.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "data/data.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	/* An exact-size copy, so ASan sees any read past the end. */
	uint8_t *buf = malloc(size ? size : 1);
	if (!buf)
		return 0;
	memcpy(buf, data, size);
	apf_table t;
	int rc = apf_table_parse(&t, buf, size, "fuzz.tab");
	if (rc != 0 && rc != APF_EINPUT)
		abort();
	for (size_t i = 0; rc == 0 && i < t.n; i++) {
		for (int f = 0; f < t.n_cat; f++)
			if (t.cat[i * t.n_cat + f] < 0 ||
			    (uint32_t)t.cat[i * t.n_cat + f] >= t.rows[f])
				abort();
		if (t.label[i] > 1)
			abort();
	}
	free(buf);
	return 0;
}
