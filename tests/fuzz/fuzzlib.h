/*
 * fuzzlib.h: what the libFuzzer targets share: a private scratch directory
 * under $TMPDIR removed at exit, exact-size copies of the input (so ASan
 * sees any read past its end), and the status check every parser must pass:
 * bad input is refused with an APF_E* status and a message, never reported
 * as a broken invariant or a usage error. Anything else aborts, so libFuzzer
 * keeps the input.
 */
#ifndef APF_FUZZLIB_H
#define APF_FUZZLIB_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"

static char *fuzz_dir;

static void fuzz_cleanup(void)
{
	apf_remove_tree(fuzz_dir);
}

/* The scratch directory, made on first use. */
static const char *fuzz_tmpdir(const char *name)
{
	if (fuzz_dir)
		return fuzz_dir;
	const char *t = getenv("TMPDIR");
	apf_buf b = {0};
	if (apf_buf_printf(&b, "%s/%s.XXXXXX", t && *t ? t : "/tmp", name) ||
	    !mkdtemp(b.data) || atexit(fuzz_cleanup) != 0)
		abort();
	fuzz_dir = b.data;
	return fuzz_dir;
}

/* A malloc'd copy of exactly size bytes (no terminator). */
static char *fuzz_copy(const uint8_t *data, size_t size)
{
	char *p = malloc(size ? size : 1);
	if (!p)
		abort();
	memcpy(p, data, size);
	return p;
}

/* A NUL-terminated copy, cut at the first NUL the input holds. */
static char *fuzz_text(const uint8_t *data, size_t size)
{
	char *p = malloc(size + 1);
	if (!p)
		abort();
	memcpy(p, data, size);
	p[size] = 0;
	return p;
}

/* Writes a scratch file; no fsync, the reader is what is being tested. */
static void fuzz_put(const char *path, const void *data, size_t len)
{
	FILE *f = fopen(path, "wb");
	if (!f || fwrite(data, 1, len, f) != len || fclose(f) != 0)
		abort();
}

static void fuzz_expect(int rc, const char *what)
{
	if (rc == 0 || rc == APF_EINPUT || rc == APF_EVERIFY ||
	    rc == APF_ENOMEM || rc == APF_EIO) {
		/* A refusal always says why. */
		if (rc && !strcmp(apf_error_message(), "unknown error")) {
			fprintf(stderr, "%s: status %d without a message\n",
				what, rc);
			abort();
		}
		return;
	}
	fprintf(stderr, "%s: unexpected status %d: %s\n", what, rc,
		apf_error_message());
	abort();
}

#endif
