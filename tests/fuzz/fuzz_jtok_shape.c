/*
 * fuzz_jtok_shape.c: libFuzzer target for reading a log line by a form seen
 * before (apf_jtok_parse_like, pkg/runlog/jtok.c), differential against
 * the full parse. The input is two texts split at its first newline: the
 * first, parsed first, is kept as the form (when it parses); the second is
 * then read by its form and by apf_jtok_parse alone. Both must accept or
 * refuse it alike, say the same reason, and leave the same tokens; a text
 * read by its form must be one the full parse accepts.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "runlog/runlog.h"

static int same(const struct apf_jtok *a, const struct apf_jtok *b, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		if (a[i].start != b[i].start || a[i].len != b[i].len ||
		    a[i].next != b[i].next || a[i].type != b[i].type ||
		    a[i].escaped != b[i].escaped || a[i].plain != b[i].plain)
			return 0;
		if (a[i].plain && a[i].value != b[i].value)
			return 0;
		if ((a[i].type == APF_JOBJECT || a[i].type == APF_JARRAY) &&
		    a[i].size != b[i].size)
			return 0;
	}
	return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const uint8_t *nl = memchr(data, '\n', size);
	size_t first = nl ? (size_t)(nl - data) : size;
	size_t second = nl ? size - first - 1 : size;
	/* Exact-size copies, so ASan sees any read past either end. */
	char *shape = malloc(first ? first : 1);
	char *text = malloc(second ? second : 1);
	size_t cap = (first > second ? first : second) / 2 + 2;
	struct apf_jtok *t1 = malloc(cap * sizeof *t1);
	struct apf_jtok *t2 = malloc(cap * sizeof *t2);
	apf_jtok_shapes *shs = apf_jtok_shapes_new();
	if (!shape || !text || !t1 || !t2 || !shs)
		abort();
	memcpy(shape, data, first);
	memcpy(text, nl ? nl + 1 : data, second);
	size_t n1 = 0, n2 = 0;
	const char *why1 = NULL, *why2 = NULL;
	apf_jtok_parse_like(shs, "k", 1, shape, first, t1, cap, &n1, &why1);
	uint64_t hits = apf_jtok_shapes_hits(shs);
	int rc1 = apf_jtok_parse_like(shs, "k", 1, text, second, t1, cap, &n1,
				      &why1);
	int rc2 = apf_jtok_parse(text, second, t2, cap, &n2, &why2);
	if (rc1 != rc2 || (rc1 && strcmp(why1, why2)) ||
	    (!rc1 && (n1 != n2 || !same(t1, t2, n1))))
		abort();
	if (apf_jtok_shapes_hits(shs) != hits && rc1)
		abort(); /* read by its form, yet refused */
	apf_jtok_shapes_free(shs);
	free(t1);
	free(t2);
	free(text);
	free(shape);
	return 0;
}
