/*
 * testlib.h: what the cmocka unit tests share: temporary directories that
 * clean themselves up, small file readers and writers, whether PyTorch and
 * numpy are there for the cross-checks, and SKIP_BECAUSE, which prints the
 * reason in the form tests/run.py reports ("skip: <reason>").
 */
#ifndef APF_TESTLIB_H
#define APF_TESTLIB_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <cmocka.h>

#define SKIP_BECAUSE(...)                                                     \
	do {                                                                  \
		printf("skip: " __VA_ARGS__);                                 \
		printf("\n");                                                 \
		fflush(stdout);                                               \
		skip();                                                       \
	} while (0)

/* Asserts that an apf call returned 0, printing its error message if not. */
#define assert_apf_ok(expr)                                                   \
	do {                                                                  \
		int rc_ = (expr);                                             \
		if (rc_ != 0)                                                 \
			fail_msg("%s returned %d: %s", #expr, rc_,            \
				 apf_error_message());                        \
	} while (0)

/* A fresh directory under $TMPDIR; removed by testlib_tmpdir_free. */
char *testlib_tmpdir(void);
void testlib_tmpdir_free(char *dir);
/* Writes data to dir/rel (creating parent directories) with mode. */
void testlib_write(const char *dir, const char *rel, const void *data,
		   size_t len, int mode);
void testlib_write_str(const char *dir, const char *rel, const char *s);
/* Path of the source tree (for tests/data). */
const char *testlib_root(void);
/* The whole of dir/rel (the test fails if it cannot be read); *len bytes.
 * Caller frees. */
char *testlib_read(const char *dir, const char *rel, size_t *len);

/* The Python with Debian's python3-torch, for the PyTorch cross-checks. */
#define TESTLIB_PYTHON "/usr/bin/python3"
/* Whether TESTLIB_PYTHON imports torch and numpy. */
int testlib_have_torch(void);
/* Whether TESTLIB_PYTHON imports numpy (Debian's python3-numpy), for the
 * numpy cross-checks. */
int testlib_have_numpy(void);

/* hex (65 bytes: 64 hex digits and a NUL) = the SHA-256 of the n arrays
 * p[i], count[i] floats each, one after another: the recorded-bits tests'
 * digest of a layer's outputs. */
void testlib_digest_floats(char *hex, int n, const float *const *p,
			   const size_t *count);

#endif
