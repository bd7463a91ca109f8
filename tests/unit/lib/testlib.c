/*
 * testlib.c: helpers for the unit tests (see testlib.h).
 */
#include "testlib.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/base.h"
#include "hash/hash.h"

char *testlib_tmpdir(void)
{
	const char *t = getenv("TMPDIR");
	char *p = apf_path_join(t && *t ? t : "/tmp", "apf-test-XXXXXX");
	assert_non_null(p);
	assert_non_null(mkdtemp(p));
	return p;
}

void testlib_tmpdir_free(char *dir)
{
	if (!dir)
		return;
	apf_remove_tree(dir);
	free(dir);
}

void testlib_write(const char *dir, const char *rel, const void *data,
		   size_t len, int mode)
{
	char *path = apf_path_join(dir, rel);
	char *slash = strrchr(path, '/');
	*slash = 0;
	assert_int_equal(apf_mkdirs(path, 0755), 0);
	*slash = '/';
	FILE *f = fopen(path, "wb");
	assert_non_null(f);
	assert_int_equal(fwrite(data, 1, len, f), len);
	fclose(f);
	assert_int_equal(chmod(path, (mode_t)mode), 0);
	free(path);
}

void testlib_write_str(const char *dir, const char *rel, const char *s)
{
	testlib_write(dir, rel, s, strlen(s), 0644);
}

const char *testlib_root(void)
{
	return APF_SOURCE_DIR;
}

char *testlib_read(const char *dir, const char *rel, size_t *len)
{
	char path[4096];
	snprintf(path, sizeof path, "%s/%s", dir, rel);
	FILE *f = fopen(path, "rb");
	if (!f)
		fail_msg("%s: cannot open", path);
	fseek(f, 0, SEEK_END);
	*len = (size_t)ftell(f);
	fseek(f, 0, SEEK_SET);
	char *b = malloc(*len ? *len : 1);
	if (!b || fread(b, 1, *len, f) != *len)
		fail_msg("%s: cannot read", path);
	fclose(f);
	return b;
}

int testlib_have_torch(void)
{
	return access(TESTLIB_PYTHON, X_OK) == 0 &&
	       system(TESTLIB_PYTHON " -c 'import torch, numpy' 2>/dev/null") ==
		       0;
}

int testlib_have_numpy(void)
{
	return access(TESTLIB_PYTHON, X_OK) == 0 &&
	       system(TESTLIB_PYTHON " -c 'import numpy' 2>/dev/null") == 0;
}

void testlib_digest_floats(char *hex, int n, const float *const *p,
			   const size_t *count)
{
	apf_sha256 *h;
	uint8_t d[APF_SHA256_LEN];
	assert_int_equal(apf_sha256_new(&h), 0);
	for (int i = 0; i < n; i++)
		assert_int_equal(apf_sha256_update(h, p[i], count[i] * 4), 0);
	assert_int_equal(apf_sha256_final(h, d), 0);
	apf_sha256_free(h);
	apf_hex(hex, d, APF_SHA256_LEN);
}
