/*
 * fuzz_jtok.c: libFuzzer target for the log reader's JSON tokens
 * (pkg/runlog/jtok.c), differential against jansson with
 * JSON_REJECT_DUPLICATES: both must accept or refuse the same texts, except
 * where jansson's own limits refuse a valid text (integers past 64 bits,
 * real overflow, depth) or ours does (depth over APF_JTOK_MAX_DEPTH), and
 * texts holding a NUL byte, which jansson takes for the end of input. An
 * accepted text's tokens must lie inside it and link up, and every accessor
 * must work on every token without reading outside the buffer.
 */
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "runlog/runlog.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	/* An exact-size copy, so ASan sees any read past the end. */
	char *text = malloc(size ? size : 1);
	if (!text)
		return 0;
	memcpy(text, data, size);
	size_t cap = size / 2 + 2, n = 0;
	struct apf_jtok *t = malloc(cap * sizeof *t);
	const char *why = NULL;
	int ours = t ? apf_jtok_parse(text, size, t, cap, &n, &why) == 0 : 0;
	json_error_t je;
	json_t *j = json_loadb(text, size,
			       JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &je);
	int limits = (!j && (strstr(je.text, "too big") ||
			     strstr(je.text, "overflow") ||
			     strstr(je.text, "depth"))) ||
		     (!ours && why && strstr(why, "deeply")) ||
		     memchr(text, 0, size);
	if (!limits && ours != (j != NULL))
		abort();
	for (size_t i = 0; ours && i < n; i++) {
		if ((uint64_t)t[i].start + t[i].len > size || t[i].next <= i ||
		    t[i].next > n)
			abort();
		char buf[64];
		double d;
		uint64_t u;
		apf_jtok_string(text, &t[i], buf, sizeof buf);
		apf_jtok_double(&d, text, &t[i]);
		apf_jtok_u64(&u, text, &t[i]);
		apf_jtok_eq(text, &t[i], "seq");
		if (t[i].type == APF_JOBJECT)
			apf_jtok_get(text, t, (uint32_t)i, "event");
	}
	json_decref(j);
	free(t);
	free(text);
	return 0;
}
