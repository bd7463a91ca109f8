/*
 * fuzz_archive.c: libFuzzer target for the entry archive reader and
 * extraction.
 *
 * Each input is used twice. As it is, it exercises the trailer check and the
 * classification of damaged and foreign files. Wrapped as a tar stream in a
 * zstd frame with a correct trailer, it gets past the integrity check, which
 * an unwrapped input almost never would, and exercises libarchive's tar
 * parsing, the member rules, the symlink resolution and the extraction's
 * path walk. Every call must end in 0 or an APF_E* status and leave nothing
 * behind but a complete extraction; anything else aborts, so libFuzzer keeps
 * the input.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zstd.h>

#include "archive/archive.h"
#include "hash/hash.h"

static char *dir, *file, *dest;

static void cleanup(void)
{
	apf_remove_tree(dir);
}

static void setup(void)
{
	const char *t = getenv("TMPDIR");
	dir = apf_path_join(t && *t ? t : "/tmp", "fuzz_archive.XXXXXX");
	if (!dir || !mkdtemp(dir))
		abort();
	file = apf_path_join(dir, "in.apf");
	dest = apf_path_join(dir, "out");
	if (!file || !dest || atexit(cleanup) != 0)
		abort();
}

static void expect_status(int rc)
{
	/* Bad input may only ever be refused (verification, input, I/O, memory),
	 * never reported as a broken invariant. */
	if (rc > 0 || rc < APF_ENOMEM || rc == APF_EUSAGE) {
		fprintf(stderr, "unexpected status %d: %s\n", rc,
			apf_error_message());
		abort();
	}
}

/* Reads every member to the end; checks that the sizes add up. */
static int read_all(const struct apf_archive_limits *lim)
{
	apf_archive_reader *r;
	int rc = apf_archive_reader_open(&r, file, lim);
	if (rc)
		return rc;
	struct apf_archive_member m;
	char buf[8192];
	while ((rc = apf_archive_next(r, &m)) == 1) {
		uint64_t got = 0;
		long n;
		while ((n = apf_archive_read(r, buf, sizeof buf)) > 0)
			got += (uint64_t)n;
		if (n < 0) {
			rc = (int)n;
			break;
		}
		if (m.type == APF_MEMBER_FILE ? got != m.size
					      : strlen(m.link) != m.size)
			abort();
	}
	apf_archive_reader_close(r);
	return rc;
}

/* A scratch file needs no fsync; the reader is what is being tested. */
static void put(const void *data, size_t len)
{
	FILE *f = fopen(file, "wb");
	if (!f || fwrite(data, 1, len, f) != len || fclose(f) != 0)
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (!dir)
		setup();
	put(data, size);
	expect_status(read_all(NULL));

	size_t cap = ZSTD_compressBound(size) + 44;
	uint8_t *z = malloc(cap);
	if (!z)
		abort();
	size_t n = ZSTD_compress(z, cap, data, size, 1);
	if (ZSTD_isError(n))
		abort();
	static const uint8_t head[12] = {0x5a, 0x2a, 0x4d, 0x18, 36, 0, 0, 0,
					 'a',  'p',  'f',  '1'};
	memcpy(z + n, head, sizeof head);
	if (apf_sha256_buf(z + n + 12, z, n) != 0)
		abort();
	put(z, n + 44);
	free(z);
	/* Small caps, so that the limits are reached too. */
	struct apf_archive_limits lim = {.max_member_bytes = 1 << 20,
					 .max_total_bytes = 4 << 20,
					 .max_members = 1000};
	int rc = read_all(&lim);
	expect_status(rc);
	int xrc = apf_archive_extract(file, dest, &lim, NULL, NULL);
	expect_status(xrc);
	/* Extraction succeeds exactly when reading does. */
	if ((rc == 0) != (xrc == 0))
		abort();
	if (xrc == 0 && apf_remove_tree(dest) != 0)
		abort();
	/* Nothing but the input is left in the directory. */
	if (access(dest, F_OK) == 0)
		abort();
	return 0;
}
