/*
 * test_archive.c: the entry archive. Round trips; byte-identical output
 * whatever the clock, umask and owners; the classification of changed,
 * truncated and foreign files; and crafted malicious archives (built with
 * libarchive's own writer or from raw ustar blocks, then compressed and given
 * a correct trailer so that the member checks are what refuses them), after
 * which extraction must have written nothing anywhere.
 */
#include "testlib.h"

#include <archive.h>
#include <archive_entry.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <time.h>
#include <unistd.h>
#include <zstd.h>

#include "archive/archive.h"
#include "base/base.h"
#include "hash/hash.h"

/* ---- helpers ------------------------------------------------------------- */

static char *join(const char *a, const char *b)
{
	char *p = apf_path_join(a, b);
	assert_non_null(p);
	return p;
}

static void read_file(const char *path, char **data, size_t *len)
{
	assert_apf_ok(apf_file_read(data, len, path, (size_t)1 << 30));
}

static void write_raw(const char *path, const void *data, size_t len)
{
	FILE *f = fopen(path, "wb");
	assert_non_null(f);
	assert_int_equal(fwrite(data, 1, len, f), len);
	assert_int_equal(fclose(f), 0);
}

/* Names in dir other than "." and "..", sorted, joined by spaces. */
static char *listing(const char *dir)
{
	struct dirent **v;
	int n = scandir(dir, &v, NULL, alphasort);
	assert_true(n >= 0);
	apf_buf b = {0};
	assert_int_equal(apf_buf_puts(&b, ""), 0);
	for (int i = 0; i < n; i++) {
		if (strcmp(v[i]->d_name, ".") && strcmp(v[i]->d_name, ".."))
			assert_int_equal(apf_buf_printf(&b, "%s%s",
							b.len ? " " : "",
							v[i]->d_name),
					 0);
		free(v[i]);
	}
	free(v);
	return b.data;
}

/* Compresses a tar stream with zstd and appends a correct trailer, so the
 * integrity check passes and whatever is wrong is left to the member
 * checks. */
static void write_apf(const char *path, const void *tar, size_t len)
{
	size_t cap = ZSTD_compressBound(len) + 44;
	uint8_t *out = malloc(cap);
	assert_non_null(out);
	size_t n = ZSTD_compress(out, cap, tar, len, 3);
	assert_false(ZSTD_isError(n));
	const uint8_t head[12] = {0x5a, 0x2a, 0x4d, 0x18, 36, 0, 0, 0,
				  'a',  'p',  'f',  '1'};
	memcpy(out + n, head, 12);
	assert_apf_ok(apf_sha256_buf(out + n + 12, out, n));
	write_raw(path, out, n + 44);
	free(out);
}

/* A tar stream built in memory with libarchive's writer, which writes what
 * apf refuses. */
struct tarb {
	struct archive *a;
	apf_buf out;
};

static la_ssize_t tarb_cb(struct archive *a, void *user, const void *buf,
			  size_t len)
{
	(void)a;
	assert_int_equal(apf_buf_append(user, buf, len), 0);
	return (la_ssize_t)len;
}

static void tarb_open(struct tarb *t)
{
	memset(t, 0, sizeof *t);
	t->a = archive_write_new();
	assert_non_null(t->a);
	assert_int_equal(archive_write_set_format_pax_restricted(t->a),
			 ARCHIVE_OK);
	assert_int_equal(archive_write_open(t->a, &t->out, NULL, tarb_cb, NULL),
			 ARCHIVE_OK);
}

/* type is AE_IFREG, AE_IFLNK, AE_IFDIR, ...; link is the symlink target,
 * hard the hard-link target. */
static void tarb_add(struct tarb *t, const char *name, unsigned type, int perm,
		     const char *data, const char *link, const char *hard)
{
	struct archive_entry *e = archive_entry_new();
	archive_entry_copy_pathname(e, name);
	archive_entry_set_filetype(e, type);
	archive_entry_set_perm(e, (mode_t)perm);
	size_t len = data ? strlen(data) : 0;
	archive_entry_set_size(e, (la_int64_t)len);
	if (link)
		archive_entry_copy_symlink(e, link);
	if (hard)
		archive_entry_copy_hardlink(e, hard);
	if (type == AE_IFCHR || type == AE_IFBLK)
		archive_entry_set_rdev(e, makedev(1, 3));
	int rc = archive_write_header(t->a, e);
	assert_true(rc == ARCHIVE_OK || rc == ARCHIVE_WARN);
	if (len)
		assert_int_equal(archive_write_data(t->a, data, len),
				 (la_ssize_t)len);
	archive_entry_free(e);
}

static void tarb_file(struct tarb *t, const char *name, const char *data)
{
	tarb_add(t, name, AE_IFREG, 0644, data, NULL, NULL);
}

static void tarb_link(struct tarb *t, const char *name, const char *target)
{
	tarb_add(t, name, AE_IFLNK, 0777, NULL, target, NULL);
}

static void tarb_close(struct tarb *t)
{
	assert_int_equal(archive_write_close(t->a), ARCHIVE_OK);
	archive_write_free(t->a);
}

/* A raw ustar header block with a valid checksum; size is the 12-byte
 * field as it should appear (octal text or base-256). */
static void ustar(uint8_t b[512], const char *name, char type,
		  const uint8_t size[12])
{
	memset(b, 0, 512);
	memcpy(b, name, strlen(name));
	memcpy(b + 100, "0000644", 8);
	memcpy(b + 108, "0000000", 8);
	memcpy(b + 116, "0000000", 8);
	memcpy(b + 124, size, 12);
	memcpy(b + 136, "00000000000", 12);
	b[156] = (uint8_t)type;
	memcpy(b + 257, "ustar", 6);
	memcpy(b + 263, "00", 2);
	memset(b + 148, ' ', 8);
	unsigned sum = 0;
	for (int i = 0; i < 512; i++)
		sum += b[i];
	snprintf((char *)b + 148, 8, "%06o", sum);
	b[155] = ' ';
}

static const uint8_t size3[12] = "00000000003";

/* The members every round trip uses, in archive order. */
static void add_sample(apf_archive_writer *w, const char *big, size_t bigl)
{
	assert_apf_ok(apf_archive_add_file(w, "manifest.dsse.json", 0644,
					   "{\"payload\":\"\"}", 14));
	assert_apf_ok(apf_archive_add_file(w, "submission/a.c", 0644,
					   "int a;\n", 7));
	assert_apf_ok(apf_archive_add_file(w, "submission/big.bin", 0644, big,
					   bigl));
	/* The same word decomposed (NFD) and precomposed (NFC): two names,
	 * kept byte for byte. */
	assert_apf_ok(apf_archive_add_file(w, "submission/cafe\xcc\x81.h", 0644,
					   "nfd", 3));
	assert_apf_ok(apf_archive_add_file(w, "submission/caf\xc3\xa9.c", 0644,
					   "", 0));
	assert_apf_ok(apf_archive_add_symlink(w, "submission/d/e/up",
					      "../../a.c"));
	assert_apf_ok(apf_archive_add_symlink(w, "submission/link", "a.c"));
	assert_apf_ok(apf_archive_add_file(w, "submission/run.sh", 0755,
					   "#!/bin/sh\n", 10));
}

static uint8_t *pseudo_random(size_t n, uint32_t seed)
{
	uint8_t *p = malloc(n);
	assert_non_null(p);
	for (size_t i = 0; i < n; i++) {
		seed = seed * 1664525u + 1013904223u;
		p[i] = (uint8_t)(seed >> 24);
	}
	return p;
}

/* A small archive of two members, for the byte-by-byte checks. */
static void write_small(const char *path)
{
	apf_archive_writer *w;
	assert_apf_ok(apf_archive_writer_open(&w, path, 0));
	assert_apf_ok(apf_archive_add_file(w, "manifest.dsse.json", 0644,
					   "{}", 2));
	assert_apf_ok(apf_archive_add_file(w, "submission/x.c", 0644,
					   "int x;\n", 7));
	assert_apf_ok(apf_archive_writer_commit(w));
}

/* Opens path and reads every member to the end; returns the status. */
static int read_all(const char *path, const struct apf_archive_limits *lim)
{
	apf_archive_reader *r;
	int rc = apf_archive_reader_open(&r, path, lim);
	if (rc)
		return rc;
	struct apf_archive_member m;
	char buf[4096];
	while ((rc = apf_archive_next(r, &m)) == 1)
		while (apf_archive_read(r, buf, sizeof buf) > 0)
			;
	apf_archive_reader_close(r);
	return rc;
}

static void assert_error(int rc, int code, const char *why)
{
	if (rc != code || !strstr(apf_error_message(), why))
		fail_msg("got %d \"%s\", wanted %d with \"%s\"", rc,
			 apf_error_message(), code, why);
}

/* ---- crafted archives: the scene ------------------------------------------ */

/* A directory holding the archive, the extraction target (absent) and a
 * sentinel file that a successful escape would overwrite. */
struct scene {
	char *dir, *apf, *dest, *sentinel;
	struct stat st;
};

static void scene_new(struct scene *s)
{
	s->dir = testlib_tmpdir();
	s->apf = join(s->dir, "in.apf");
	s->dest = join(s->dir, "out");
	s->sentinel = join(s->dir, "sentinel");
	testlib_write_str(s->dir, "sentinel", "keep");
	struct timespec t[2] = {{1000000000, 0}, {1000000000, 0}};
	assert_int_equal(utimensat(AT_FDCWD, s->sentinel, t, 0), 0);
	assert_int_equal(stat(s->sentinel, &s->st), 0);
}

/* Neither dest nor a temporary exists, and the sentinel is as it was. */
static void scene_untouched(const struct scene *s)
{
	struct stat st;
	assert_int_not_equal(lstat(s->dest, &st), 0);
	char *names = listing(s->dir);
	assert_string_equal(names, "in.apf sentinel");
	free(names);
	char *data;
	size_t len;
	read_file(s->sentinel, &data, &len);
	assert_string_equal(data, "keep");
	free(data);
	assert_int_equal(stat(s->sentinel, &st), 0);
	assert_int_equal(st.st_mtim.tv_sec, s->st.st_mtim.tv_sec);
	assert_int_equal(st.st_mode, s->st.st_mode);
	assert_int_equal(st.st_ino, s->st.st_ino);
}

static void scene_free(struct scene *s)
{
	free(s->apf);
	free(s->dest);
	free(s->sentinel);
	testlib_tmpdir_free(s->dir);
}

typedef void (*build_fn)(struct tarb *t, const struct scene *s);

/* The archive build makes is read (refused with code and why) and
 * extracted (refused the same way, leaving nothing behind). */
static void refused_with(build_fn build, const struct apf_archive_limits *lim,
			 int code, const char *why)
{
	struct scene s;
	scene_new(&s);
	struct tarb t;
	tarb_open(&t);
	build(&t, &s);
	tarb_close(&t);
	write_apf(s.apf, t.out.data, t.out.len);
	apf_buf_free(&t.out);
	apf_archive_reader *r;
	assert_apf_ok(apf_archive_reader_open(&r, s.apf, lim));
	apf_archive_reader_close(r);
	assert_error(read_all(s.apf, lim), code, why);
	assert_error(apf_archive_extract(s.apf, s.dest, lim, NULL, NULL), code,
		     why);
	scene_untouched(&s);
	scene_free(&s);
}

static void refused(build_fn build, const char *why)
{
	refused_with(build, NULL, APF_EINPUT, why);
}

/* Same, for a raw tar stream. */
static void raw_refused(const void *tar, size_t len, int code, const char *why)
{
	struct scene s;
	scene_new(&s);
	write_apf(s.apf, tar, len);
	assert_error(read_all(s.apf, NULL), code, why);
	assert_error(apf_archive_extract(s.apf, s.dest, NULL, NULL, NULL), code,
		     why);
	scene_untouched(&s);
	scene_free(&s);
}

/* ---- round trips ------------------------------------------------------------ */

struct seen {
	int n;
	char names[16][64];
	uint8_t sha[16][32];
};

static int record_check(void *user, const struct apf_archive_member *m,
			const uint8_t sha256[32])
{
	struct seen *s = user;
	assert_true(s->n < 16);
	snprintf(s->names[s->n], 64, "%s", m->name);
	memcpy(s->sha[s->n], sha256, 32);
	s->n++;
	return 0;
}

static void round_trip_files_and_symlinks(void **state)
{
	(void)state;
	char *dir = testlib_tmpdir(), *path = join(dir, "e.apf");
	size_t bigl = 300000; /* several zstd blocks */
	uint8_t *big = pseudo_random(bigl, 7);
	memset(big + 1000, 0, 150000); /* and a run zstd stores as RLE */
	apf_archive_writer *w;
	assert_apf_ok(apf_archive_writer_open(&w, path, 0));
	add_sample(w, (const char *)big, bigl);
	assert_apf_ok(apf_archive_writer_commit(w));

	struct {
		const char *name;
		int type, mode;
		const char *data, *link;
	} want[] = {
		{"manifest.dsse.json", 'f', 0644, "{\"payload\":\"\"}", NULL},
		{"submission/a.c", 'f', 0644, "int a;\n", NULL},
		{"submission/big.bin", 'f', 0644, NULL, NULL},
		{"submission/cafe\xcc\x81.h", 'f', 0644, "nfd", NULL},
		{"submission/caf\xc3\xa9.c", 'f', 0644, "", NULL},
		{"submission/d/e/up", 'l', 0777, NULL, "../../a.c"},
		{"submission/link", 'l', 0777, NULL, "a.c"},
		{"submission/run.sh", 'f', 0755, "#!/bin/sh\n", NULL},
	};
	apf_archive_reader *r;
	assert_apf_ok(apf_archive_reader_open(&r, path, NULL));
	struct apf_archive_member m;
	uint8_t *buf = malloc(bigl + 1);
	for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
		assert_int_equal(apf_archive_next(r, &m), 1);
		assert_string_equal(m.name, want[i].name);
		assert_int_equal(m.type, want[i].type);
		assert_int_equal(m.mode, want[i].mode);
		size_t got = 0;
		long n;
		while ((n = apf_archive_read(r, buf + got, 4096)) > 0)
			got += (size_t)n;
		assert_int_equal(n, 0);
		if (want[i].type == 'l') {
			assert_string_equal(m.link, want[i].link);
			assert_int_equal(m.size, strlen(want[i].link));
			assert_int_equal(got, 0);
		} else if (want[i].data) {
			assert_null(m.link);
			assert_int_equal(m.size, strlen(want[i].data));
			assert_int_equal(got, m.size);
			assert_memory_equal(buf, want[i].data, got);
		} else {
			assert_int_equal(m.size, bigl);
			assert_int_equal(got, bigl);
			assert_memory_equal(buf, big, bigl);
		}
	}
	assert_int_equal(apf_archive_next(r, &m), 0);
	assert_int_equal(apf_archive_next(r, &m), 0);
	apf_archive_reader_close(r);

	/* Extraction under a restrictive umask: modes are still exact, the
	 * check sees every member with the SHA-256 of its content (of its
	 * target, for a symlink). */
	mode_t old = umask(077);
	char *dest = join(dir, "x");
	struct seen seen = {0};
	int rc = apf_archive_extract(path, dest, NULL, record_check, &seen);
	umask(old);
	assert_apf_ok(rc);
	assert_int_equal(seen.n, 8);
	for (int i = 0; i < 8; i++) {
		assert_string_equal(seen.names[i], want[i].name);
		uint8_t sha[32];
		const char *d = want[i].type == 'l' ? want[i].link
						    : want[i].data;
		if (d)
			assert_apf_ok(apf_sha256_buf(sha, d, strlen(d)));
		else
			assert_apf_ok(apf_sha256_buf(sha, big, bigl));
		assert_memory_equal(sha, seen.sha[i], 32);
		char *p = join(dest, want[i].name);
		struct stat st;
		assert_int_equal(lstat(p, &st), 0);
		assert_int_equal(st.st_mode & 07777, want[i].mode);
		if (want[i].type == 'l') {
			char t[64] = {0};
			assert_true(S_ISLNK(st.st_mode));
			assert_int_equal(readlink(p, t, sizeof t - 1),
					 strlen(want[i].link));
			assert_string_equal(t, want[i].link);
		} else {
			char *data;
			size_t len;
			assert_true(S_ISREG(st.st_mode));
			read_file(p, &data, &len);
			if (want[i].data) {
				assert_int_equal(len, strlen(want[i].data));
				assert_memory_equal(data, want[i].data, len);
			} else {
				assert_int_equal(len, bigl);
				assert_memory_equal(data, big, bigl);
			}
			free(data);
		}
		free(p);
	}
	const char *dirs[] = {"", "submission", "submission/d",
			      "submission/d/e"};
	for (int i = 0; i < 4; i++) {
		char *p = join(dest, dirs[i]);
		struct stat st;
		assert_int_equal(stat(p, &st), 0);
		assert_int_equal(st.st_mode & 07777, 0755);
		free(p);
	}
	char *names = listing(dir);
	assert_string_equal(names, "e.apf x");
	free(names);
	free(buf);
	free(big);
	free(dest);
	free(path);
	testlib_tmpdir_free(dir);
}

static void empty_archive_round_trips(void **state)
{
	(void)state;
	char *dir = testlib_tmpdir(), *path = join(dir, "e.apf");
	char *dest = join(dir, "x");
	apf_archive_writer *w;
	assert_apf_ok(apf_archive_writer_open(&w, path, 0));
	assert_apf_ok(apf_archive_writer_commit(w));
	assert_apf_ok(read_all(path, NULL));
	assert_apf_ok(apf_archive_extract(path, dest, NULL, NULL, NULL));
	char *names = listing(dest);
	assert_string_equal(names, "");
	free(names);
	free(dest);
	free(path);
	testlib_tmpdir_free(dir);
}

/* ---- determinism ----------------------------------------------------------- */

/* Writes dir/src/{a,b.sh} with the given umask and file times, optionally
 * owned by someone else, then packs them from their descriptors. */
static char *pack_tree(const char *dir, const char *tag, mode_t mask,
		       time_t when, int chown_to)
{
	mode_t old = umask(mask);
	char *src = join(dir, tag);
	assert_int_equal(mkdir(src, 0777), 0);
	testlib_write(src, "a", "alpha\n", 6, 0666 & ~mask);
	testlib_write(src, "b.sh", "#!/bin/sh\n", 10, 0777 & ~mask);
	const char *names[] = {"a", "b.sh"};
	for (int i = 0; i < 2; i++) {
		char *p = join(src, names[i]);
		struct timespec t[2] = {{when, 123}, {when, 456}};
		assert_int_equal(utimensat(AT_FDCWD, p, t, 0), 0);
		if (chown_to)
			assert_int_equal(chown(p, (uid_t)chown_to,
					       (gid_t)chown_to + 1),
					 0);
		free(p);
	}
	apf_buf out = {0};
	assert_int_equal(apf_buf_printf(&out, "%s/%s.apf", dir, tag), 0);
	apf_archive_writer *w;
	assert_apf_ok(apf_archive_writer_open(&w, out.data, 1700000000));
	assert_apf_ok(apf_archive_add_file(w, "manifest.dsse.json", 0644,
					   "{}", 2));
	for (int i = 0; i < 2; i++) {
		char *p = join(src, names[i]), *n = join("submission", names[i]);
		int fd = open(p, O_RDONLY);
		assert_true(fd >= 0);
		struct stat st;
		assert_int_equal(fstat(fd, &st), 0);
		assert_apf_ok(apf_archive_add_file_fd(
			w, n, st.st_mode & 0100 ? 0755 : 0644, fd,
			(uint64_t)st.st_size));
		close(fd);
		free(p);
		free(n);
	}
	assert_apf_ok(apf_archive_writer_commit(w));
	umask(old);
	struct stat st;
	assert_int_equal(stat(out.data, &st), 0);
	assert_int_equal(st.st_mode & 0777, 0644);
	free(src);
	return out.data;
}

static void assert_same_bytes(const char *a, const char *b)
{
	char *da, *db;
	size_t la, lb;
	read_file(a, &da, &la);
	read_file(b, &db, &lb);
	assert_int_equal(la, lb);
	assert_memory_equal(da, db, la);
	free(da);
	free(db);
}

static void same_bytes_whatever_the_clock_and_umask(void **state)
{
	(void)state;
	char *dir = testlib_tmpdir();
	char *a = pack_tree(dir, "one", 022, 1000000000, 0);
	/* A later second on the clock, other file times, another umask. */
	struct timespec pause = {1, 100000000};
	nanosleep(&pause, NULL);
	char *b = pack_tree(dir, "two", 077, 1600000000, 0);
	assert_same_bytes(a, b);
	free(a);
	free(b);
	testlib_tmpdir_free(dir);
}

static void same_bytes_whatever_the_owner(void **state)
{
	(void)state;
	if (geteuid() != 0)
		SKIP_BECAUSE("changing the owner of the source files needs "
			     "root");
	char *dir = testlib_tmpdir();
	char *a = pack_tree(dir, "one", 022, 1000000000, 0);
	char *b = pack_tree(dir, "two", 022, 1000000000, 4242);
	assert_same_bytes(a, b);
	free(a);
	free(b);
	testlib_tmpdir_free(dir);
}

static void same_bytes_from_memory_and_from_descriptors(void **state)
{
	(void)state;
	char *dir = testlib_tmpdir();
	char *a = pack_tree(dir, "one", 022, 1000000000, 0);
	char *b = join(dir, "mem.apf");
	apf_archive_writer *w;
	assert_apf_ok(apf_archive_writer_open(&w, b, 1700000000));
	assert_apf_ok(apf_archive_add_file(w, "manifest.dsse.json", 0644,
					   "{}", 2));
	assert_apf_ok(apf_archive_add_file(w, "submission/a", 0644,
					   "alpha\n", 6));
	assert_apf_ok(apf_archive_add_file(w, "submission/b.sh", 0755,
					   "#!/bin/sh\n", 10));
	assert_apf_ok(apf_archive_writer_commit(w));
	assert_same_bytes(a, b);
	free(a);
	free(b);
	testlib_tmpdir_free(dir);
}

static uint8_t *decompress_body(const char *path, size_t *len)
{
	char *data;
	size_t n;
	read_file(path, &data, &n);
	assert_true(n > 44);
	ZSTD_DCtx *d = ZSTD_createDCtx();
	apf_buf out = {0};
	ZSTD_inBuffer in = {data, n - 44, 0};
	uint8_t chunk[65536];
	size_t ret = 1;
	while (ret != 0) {
		ZSTD_outBuffer o = {chunk, sizeof chunk, 0};
		ret = ZSTD_decompressStream(d, &o, &in);
		assert_false(ZSTD_isError(ret));
		assert_int_equal(apf_buf_append(&out, chunk, o.pos), 0);
	}
	assert_int_equal(in.pos, in.size);
	ZSTD_freeDCtx(d);
	free(data);
	*len = out.len;
	return (uint8_t *)out.data;
}

/* Every header libarchive wrote, pax headers included, holds only fixed
 * values: owner 0, no owner names, the given mtime, no pid in a pax header
 * name, no access/change/birth time, no directory members. */
static void tar_headers_hold_nothing_variable(void **state)
{
	(void)state;
	char *dir = testlib_tmpdir(), *path = join(dir, "e.apf");
	char longname[200];
	memset(longname, 'n', sizeof longname);
	memcpy(longname, "submission/", 11);
	longname[sizeof longname - 1] = 0;
	char longtarget[150];
	memset(longtarget, 't', sizeof longtarget);
	longtarget[sizeof longtarget - 1] = 0;
	apf_archive_writer *w;
	assert_apf_ok(apf_archive_writer_open(&w, path, 1700000000));
	assert_apf_ok(apf_archive_add_file(w, "manifest.dsse.json", 0644,
					   "{}", 2));
	assert_apf_ok(apf_archive_add_file(w, "submission/caf\xc3\xa9/x", 0755,
					   "x", 1));
	assert_apf_ok(apf_archive_add_symlink(w, longname, longtarget));
	assert_apf_ok(apf_archive_writer_commit(w));
	size_t len;
	uint8_t *tar = decompress_body(path, &len);
	assert_int_equal(len % 10240, 0);
	int headers = 0, pax = 0;
	size_t off = 0;
	for (; off + 512 <= len && tar[off]; headers++) {
		const uint8_t *h = tar + off;
		char type = (char)h[156];
		assert_true(type == '0' || type == '2' || type == 'x');
		assert_int_equal(strtoul((const char *)h + 108, NULL, 8), 0);
		assert_int_equal(strtoul((const char *)h + 116, NULL, 8), 0);
		assert_int_equal(strtoul((const char *)h + 136, NULL, 8),
				 1700000000);
		for (int i = 265; i < 329; i++) /* uname, gname */
			assert_int_equal(h[i], 0);
		size_t size = strtoul((const char *)h + 124, NULL, 8);
		off += 512;
		if (type == 'x') {
			pax++;
			/* libarchive's pax header name: no pid in it. */
			char *hn = strndup((const char *)h, 100);
			assert_non_null(strstr(hn, "PaxHeader/"));
			assert_null(strstr(hn, "PaxHeader."));
			free(hn);
			char *rec = strndup((const char *)tar + off, size);
			assert_null(strstr(rec, "atime="));
			assert_null(strstr(rec, "ctime="));
			assert_null(strstr(rec, "mtime="));
			assert_null(strstr(rec, "creationtime"));
			assert_null(strstr(rec, "hdrcharset"));
			assert_null(strstr(rec, "uname"));
			assert_null(strstr(rec, "SCHILY"));
			assert_non_null(strstr(rec, "path="));
			free(rec);
		}
		off += (size + 511) / 512 * 512;
	}
	assert_int_equal(headers, 5); /* 3 members, 2 with a pax header */
	assert_int_equal(pax, 2);
	for (; off < len; off++)
		assert_int_equal(tar[off], 0);
	free(tar);
	free(path);
	testlib_tmpdir_free(dir);
}

static void zstd_and_tar_list_the_members(void **state)
{
	(void)state;
	if (system("command -v zstd >/dev/null && command -v tar >/dev/null"))
		SKIP_BECAUSE("zstd and tar are not installed");
	char *dir = testlib_tmpdir(), *path = join(dir, "e.apf");
	uint8_t *big = pseudo_random(1000, 3);
	apf_archive_writer *w;
	assert_apf_ok(apf_archive_writer_open(&w, path, 0));
	add_sample(w, (const char *)big, 1000);
	assert_apf_ok(apf_archive_writer_commit(w));
	apf_buf cmd = {0};
	assert_int_equal(apf_buf_printf(&cmd, "zstd -qdc '%s' | tar -tf - 2>&1",
					path),
			 0);
	FILE *p = popen(cmd.data, "r");
	assert_non_null(p);
	char out[4096] = {0};
	size_t n = fread(out, 1, sizeof out - 1, p);
	assert_int_equal(pclose(p), 0);
	out[n] = 0;
	assert_string_equal(out, "manifest.dsse.json\n"
				 "submission/a.c\n"
				 "submission/big.bin\n"
				 "submission/cafe\xcc\x81.h\n"
				 "submission/caf\xc3\xa9.c\n"
				 "submission/d/e/up\n"
				 "submission/link\n"
				 "submission/run.sh\n");
	apf_buf_free(&cmd);
	free(big);
	free(path);
	testlib_tmpdir_free(dir);
}

/* ---- the writer keeps the rules --------------------------------------------- */

static void writer_refuses_what_readers_refuse(void **state)
{
	(void)state;
	char *dir = testlib_tmpdir(), *path = join(dir, "e.apf");
	struct {
		const char *name;
		int mode;
		const char *link, *why;
	} bad[] = {
		{"/etc/passwd", 0644, NULL, "absolute path"},
		{"../x", 0644, NULL, "\"..\" path component"},
		{"a/../../x", 0644, NULL, "\"..\" path component"},
		{"a/./x", 0644, NULL, "\".\" path component"},
		{"a//x", 0644, NULL, "empty path component"},
		{"a/", 0644, NULL, "empty path component"},
		{"", 0644, NULL, "empty name"},
		{"bad\xff", 0644, NULL, "not UTF-8"},
		{"a\nb", 0644, NULL, "control characters"},
		{"x", 0600, NULL, "mode must be 0644 or 0755"},
		{"x", 04755, NULL, "mode must be 0644 or 0755"},
		{"l", 0, "/etc/passwd", "absolute symlink target"},
		{"l", 0, "", "empty symlink target"},
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		apf_archive_writer *w;
		assert_apf_ok(apf_archive_writer_open(&w, path, 0));
		int rc = bad[i].link
				 ? apf_archive_add_symlink(w, bad[i].name,
							   bad[i].link)
				 : apf_archive_add_file(w, bad[i].name,
							bad[i].mode, "x", 1);
		assert_error(rc, APF_EINPUT, bad[i].why);
		/* The failure sticks: the archive cannot be committed. */
		assert_int_equal(apf_archive_add_file(w, "ok", 0644, "x", 1),
				 APF_EINPUT);
		assert_int_equal(apf_archive_writer_commit(w), APF_EINPUT);
		char *names = listing(dir);
		assert_string_equal(names, "");
		free(names);
	}
	testlib_tmpdir_free(dir);
	free(path);
}

/* Sequences of members the writer must refuse; the last one added fails
 * (or, for symlink escapes, the commit). */
static void writer_refuses_bad_sequences(void **state)
{
	(void)state;
	char *dir = testlib_tmpdir(), *path = join(dir, "e.apf");
	struct {
		const char *names[4], *links[4], *why;
	} bad[] = {
		{{"m", "b", "a"}, {0}, "out of order"},
		{{"m", "b", "b"}, {0}, "duplicate member"},
		{{"m", "a", "m"}, {0}, "duplicate member"},
		{{"m", "m"}, {0}, "duplicate member"},
		{{"a", "a/b"}, {0}, "path passes through file \"a\""},
		{{"m", "a", "a/b"}, {0, "x"}, "path passes through symlink"},
		{{"a/b", "a"}, {0}, "also a directory"},
		{{"m", "up"}, {0, "../x"}, "leaves the tree"},
		{{"m", "d/up"}, {0, "../../x"}, "leaves the tree"},
		{{"m", "a", "b"}, {0, "b/../x", "."}, "leaves the tree"},
		{{"m", "a", "b"}, {0, "b", "a"}, "symlink loop"},
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		apf_archive_writer *w;
		assert_apf_ok(apf_archive_writer_open(&w, path, 0));
		int rc = 0;
		for (int j = 0; j < 4 && bad[i].names[j] && rc == 0; j++)
			rc = bad[i].links[j]
				     ? apf_archive_add_symlink(w, bad[i].names[j],
							       bad[i].links[j])
				     : apf_archive_add_file(w, bad[i].names[j],
							    0644, "x", 1);
		if (rc == 0)
			rc = apf_archive_writer_commit(w);
		else
			apf_archive_writer_abort(w);
		assert_error(rc, APF_EINPUT, bad[i].why);
		char *names = listing(dir);
		assert_string_equal(names, "");
		free(names);
	}
	/* Links that stay inside are fine, chained or not. */
	apf_archive_writer *w;
	assert_apf_ok(apf_archive_writer_open(&w, path, 0));
	assert_apf_ok(apf_archive_add_file(w, "m", 0644, "x", 1));
	assert_apf_ok(apf_archive_add_symlink(w, "a", "b/m"));
	assert_apf_ok(apf_archive_add_symlink(w, "b", "d/.."));
	assert_apf_ok(apf_archive_add_symlink(w, "d/e/f", "../../b/m"));
	assert_apf_ok(apf_archive_writer_commit(w));
	assert_apf_ok(read_all(path, NULL));
	free(path);
	testlib_tmpdir_free(dir);
}

static void writer_refuses_files_that_change_size(void **state)
{
	(void)state;
	char *dir = testlib_tmpdir(), *path = join(dir, "e.apf");
	testlib_write_str(dir, "src", "12345");
	char *src = join(dir, "src");
	uint64_t sizes[] = {10, 3};
	const char *why[] = {"shrank", "grew"};
	for (int i = 0; i < 2; i++) {
		apf_archive_writer *w;
		assert_apf_ok(apf_archive_writer_open(&w, path, 0));
		int fd = open(src, O_RDONLY);
		assert_true(fd >= 0);
		assert_error(apf_archive_add_file_fd(w, "f", 0644, fd,
						     sizes[i]),
			     APF_EINPUT, why[i]);
		close(fd);
		apf_archive_writer_abort(w);
	}
	char *names = listing(dir);
	assert_string_equal(names, "src");
	free(names);
	free(src);
	free(path);
	testlib_tmpdir_free(dir);
}

static void writer_faults_leave_no_file(void **state)
{
	(void)state;
	char *dir = testlib_tmpdir(), *path = join(dir, "e.apf");
	const char *ops[] = {"write", "fsync", "rename"};
	for (int i = 0; i < 3; i++) {
		apf_fault_set(ops[i], 1);
		apf_archive_writer *w;
		int rc = apf_archive_writer_open(&w, path, 0);
		if (rc == 0) {
			rc = apf_archive_add_file(w, "m", 0644, "x", 1);
			if (rc == 0)
				rc = apf_archive_writer_commit(w);
			else
				apf_archive_writer_abort(w);
		}
		apf_fault_set(NULL, 0);
		assert_error(rc, APF_EIO, ops[i]);
		char *names = listing(dir);
		assert_string_equal(names, "");
		free(names);
	}
	free(path);
	testlib_tmpdir_free(dir);
}

/* ---- classification of damaged and foreign files ----------------------------- */

static void every_flipped_byte_is_a_verification_failure(void **state)
{
	(void)state;
	char *dir = testlib_tmpdir(), *path = join(dir, "e.apf");
	char *bad = join(dir, "bad.apf");
	write_small(path);
	char *data;
	size_t len;
	read_file(path, &data, &len);
	assert_true(len > 100 && len < 2000);
	for (size_t i = 0; i < len; i++) {
		for (int bit = 0; bit < 8; bit += 7) {
			data[i] ^= (char)(1 << bit);
			write_raw(bad, data, len);
			data[i] ^= (char)(1 << bit);
			apf_archive_reader *r;
			int rc = apf_archive_reader_open(&r, bad, NULL);
			if (rc != APF_EVERIFY)
				fail_msg("offset %zu bit %d: %d %s", i, bit, rc,
					 apf_error_message());
			const char *msg = apf_error_message();
			assert_true(strstr(msg, "changed after packing") ||
				    strstr(msg, "integrity trailer damaged"));
		}
	}
	free(data);
	free(bad);
	free(path);
	testlib_tmpdir_free(dir);
}

/* Truncations are input errors naming the truncation, and the frame's end
 * found from block headers agrees with ZSTD_findFrameCompressedSize. */
static void check_truncations(const char *path, const char *bad, size_t step)
{
	char *data;
	size_t len;
	read_file(path, &data, &len);
	size_t frame = ZSTD_findFrameCompressedSize(data, len);
	assert_false(ZSTD_isError(frame));
	assert_int_equal(frame, len - 44);
	for (size_t n = 1; n < len; n += n < 64 || n + 64 > frame ? 1 : step) {
		write_raw(bad, data, n);
		apf_archive_reader *r;
		int rc = apf_archive_reader_open(&r, bad, NULL);
		if (rc != APF_EINPUT || !strstr(apf_error_message(), "truncated"))
			fail_msg("length %zu: %d %s", n, rc,
				 apf_error_message());
		size_t f = ZSTD_findFrameCompressedSize(data, n);
		const char *why = ZSTD_isError(f) ? "zstd frame is cut short"
				  : f == n	  ? "trailer is missing"
						  : "trailer is cut short";
		if (!strstr(apf_error_message(), why))
			fail_msg("length %zu: \"%s\", wanted \"%s\"", n,
				 apf_error_message(), why);
	}
	write_raw(bad, data, 0);
	apf_archive_reader *r;
	assert_error(apf_archive_reader_open(&r, bad, NULL), APF_EINPUT,
		     "not an apf entry");
	free(data);
}

static void every_truncation_is_an_input_error(void **state)
{
	(void)state;
	char *dir = testlib_tmpdir(), *path = join(dir, "e.apf");
	char *bad = join(dir, "bad.apf");
	write_small(path);
	check_truncations(path, bad, 1);
	/* A frame of many blocks, raw, compressed and RLE, cut at a sample of
	 * lengths. */
	size_t bigl = 600000;
	uint8_t *big = pseudo_random(bigl, 11);
	memset(big + 200000, 'z', 200000);
	for (size_t i = 400000; i < bigl; i += 2)
		big[i] = 'a' + (uint8_t)(i % 7);
	apf_archive_writer *w;
	assert_apf_ok(apf_archive_writer_open(&w, path, 0));
	assert_apf_ok(apf_archive_add_file(w, "big", 0644, big, bigl));
	assert_apf_ok(apf_archive_writer_commit(w));
	check_truncations(path, bad, 4099);
	free(big);
	free(bad);
	free(path);
	testlib_tmpdir_free(dir);
}

static void foreign_files_are_not_entries(void **state)
{
	(void)state;
	char *dir = testlib_tmpdir(), *path = join(dir, "f");
	size_t sizes[] = {1, 3, 4, 43, 44, 45, 100, 4096, 100000};
	for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
		for (uint32_t seed = 1; seed <= 20; seed++) {
			uint8_t *d = pseudo_random(sizes[i], seed);
			d[0] = d[0] == 0x28 ? 0x29 : d[0]; /* no zstd magic */
			write_raw(path, d, sizes[i]);
			free(d);
			apf_archive_reader *r;
			assert_error(apf_archive_reader_open(&r, path, NULL),
				     APF_EINPUT, "not an apf entry");
		}
	}
	const char *texts[] = {"", "hello\n", "#!/bin/sh\necho not an entry\n"};
	for (int i = 0; i < 3; i++) {
		write_raw(path, texts[i], strlen(texts[i]));
		apf_archive_reader *r;
		assert_error(apf_archive_reader_open(&r, path, NULL), APF_EINPUT,
			     "not an apf entry");
	}
	/* A plain tar is not an entry; a plain .tar.zst lacks the trailer. */
	struct tarb t;
	tarb_open(&t);
	tarb_file(&t, "a", "x");
	tarb_close(&t);
	write_raw(path, t.out.data, t.out.len);
	apf_archive_reader *r;
	assert_error(apf_archive_reader_open(&r, path, NULL), APF_EINPUT,
		     "not an apf entry");
	size_t cap = ZSTD_compressBound(t.out.len);
	char *z = malloc(cap);
	size_t zn = ZSTD_compress(z, cap, t.out.data, t.out.len, 3);
	write_raw(path, z, zn);
	assert_error(apf_archive_reader_open(&r, path, NULL), APF_EINPUT,
		     "truncated (the integrity trailer is missing)");
	free(z);
	apf_buf_free(&t.out);
	assert_error(apf_archive_reader_open(&r, dir, NULL), APF_EINPUT,
		     "not a regular file");
	char *missing = join(dir, "missing");
	assert_error(apf_archive_reader_open(&r, missing, NULL), APF_EINPUT,
		     "No such file");
	free(missing);
	free(path);
	testlib_tmpdir_free(dir);
}

static void appended_or_damaged_trailers_are_verification_failures(void **state)
{
	(void)state;
	char *dir = testlib_tmpdir(), *path = join(dir, "e.apf");
	char *bad = join(dir, "bad.apf");
	write_small(path);
	char *data;
	size_t len;
	read_file(path, &data, &len);
	char *more = malloc(len + 100);
	memcpy(more, data, len);
	memset(more + len, 'A', 100);
	apf_archive_reader *r;
	/* Data appended after the trailer. */
	write_raw(bad, more, len + 10);
	assert_error(apf_archive_reader_open(&r, bad, NULL), APF_EVERIFY,
		     "data appended after the integrity trailer");
	/* A trailer-sized tail that is not a trailer. */
	memset(more + len - 44, 'A', 44);
	write_raw(bad, more, len);
	assert_error(apf_archive_reader_open(&r, bad, NULL), APF_EVERIFY,
		     "integrity trailer damaged");
	free(more);
	free(data);
	free(bad);
	free(path);
	testlib_tmpdir_free(dir);
}

/* A correct trailer over bytes that are not exactly one zstd frame holding
 * one tar stream is a corrupted archive, not a foreign file. */
static void a_trailer_over_anything_else_is_corruption(void **state)
{
	(void)state;
	struct scene s;
	scene_new(&s);
	/* Not zstd at all. */
	const char *text = "not zstd, but with a valid trailer";
	uint8_t buf[256];
	memcpy(buf, text, strlen(text));
	const uint8_t head[12] = {0x5a, 0x2a, 0x4d, 0x18, 36, 0, 0, 0,
				  'a',  'p',  'f',  '1'};
	memcpy(buf + strlen(text), head, 12);
	assert_apf_ok(apf_sha256_buf(buf + strlen(text) + 12, buf, strlen(text)));
	write_raw(s.apf, buf, strlen(text) + 44);
	apf_archive_reader *r;
	assert_error(apf_archive_reader_open(&r, s.apf, NULL), APF_EVERIFY,
		     "not one zstd frame");
	/* Two frames. */
	struct tarb t;
	tarb_open(&t);
	tarb_file(&t, "a", "x");
	tarb_close(&t);
	size_t cap = 2 * ZSTD_compressBound(t.out.len) + 44;
	uint8_t *z = malloc(cap);
	size_t n1 = ZSTD_compress(z, cap, t.out.data, 1000, 3);
	size_t n2 = ZSTD_compress(z + n1, cap - n1, t.out.data + 1000,
				  t.out.len - 1000, 3);
	memcpy(z + n1 + n2, head, 12);
	assert_apf_ok(apf_sha256_buf(z + n1 + n2 + 12, z, n1 + n2));
	write_raw(s.apf, z, n1 + n2 + 44);
	assert_error(apf_archive_reader_open(&r, s.apf, NULL), APF_EVERIFY,
		     "not one zstd frame");
	free(z);
	apf_buf_free(&t.out);
	/* One frame, but not a tar stream. */
	char junk[2048];
	memset(junk, 'j', sizeof junk);
	write_apf(s.apf, junk, sizeof junk);
	assert_error(read_all(s.apf, NULL), APF_EVERIFY, "corrupted archive");
	assert_error(apf_archive_extract(s.apf, s.dest, NULL, NULL, NULL),
		     APF_EVERIFY, "corrupted archive");
	scene_untouched(&s);
	/* A tar whose member data ends early. */
	tarb_open(&t);
	tarb_add(&t, "a", AE_IFREG, 0644,
		 "0123456789012345678901234567890123456789", NULL, NULL);
	tarb_close(&t);
	write_apf(s.apf, t.out.data, 512 + 20);
	assert_error(read_all(s.apf, NULL), APF_EVERIFY, "corrupted archive");
	apf_buf_free(&t.out);
	scene_untouched(&s);
	scene_free(&s);
}

/* Damage inside the frame under a recomputed trailer gets past the
 * integrity check and must then be caught by the frame structure check, by
 * zstd (a corrupt block, the content checksum) or by the tar parser. A few
 * bits zstd never reads can change without changing a byte of the tar, so
 * a small share of clean reads is allowed, each of which must give the
 * original members. */
static void corrupt_frames_under_a_recomputed_trailer_are_caught(void **state)
{
	(void)state;
	char *dir = testlib_tmpdir(), *path = join(dir, "e.apf");
	char *bad = join(dir, "bad.apf");
	write_small(path);
	char *data;
	size_t len;
	read_file(path, &data, &len);
	size_t body = len - 44, caught = 0, clean = 0;
	for (size_t i = 0; i < body; i++) {
		for (int bit = 0; bit < 8; bit += 3) {
			data[i] ^= (char)(1 << bit);
			assert_apf_ok(apf_sha256_buf((uint8_t *)data + body + 12,
						     data, body));
			write_raw(bad, data, len);
			data[i] ^= (char)(1 << bit);
			int rc = read_all(bad, NULL);
			if (rc == 0) {
				size_t tl;
				uint8_t *t1 = decompress_body(bad, &tl);
				size_t ol;
				uint8_t *t0 = decompress_body(path, &ol);
				assert_int_equal(tl, ol);
				assert_memory_equal(t0, t1, ol);
				free(t0);
				free(t1);
				clean++;
				continue;
			}
			if (rc != APF_EVERIFY ||
			    !strstr(apf_error_message(), "corrupted archive"))
				fail_msg("offset %zu bit %d: %d %s", i, bit, rc,
					 apf_error_message());
			caught++;
		}
	}
	assert_true(caught > 20 * clean);
	free(data);
	free(bad);
	free(path);
	testlib_tmpdir_free(dir);
}

/* ---- crafted malicious archives ------------------------------------------------ */

static void b_absolute(struct tarb *t, const struct scene *s)
{
	tarb_file(t, s->sentinel, "pwned");
}

static void refuses_absolute_paths(void **state)
{
	(void)state;
	refused(b_absolute, "absolute path");
}

static void b_dotdot(struct tarb *t, const struct scene *s)
{
	(void)s;
	tarb_file(t, "../sentinel", "pwned");
}

static void b_dotdot_inner(struct tarb *t, const struct scene *s)
{
	(void)s;
	tarb_file(t, "a", "x");
	tarb_file(t, "b/../../sentinel", "pwned");
}

static void refuses_dotdot_components(void **state)
{
	(void)state;
	refused(b_dotdot, "\"..\" path component");
	refused(b_dotdot_inner, "\"..\" path component");
}

static void b_link_direct(struct tarb *t, const struct scene *s)
{
	(void)s;
	tarb_file(t, "a", "x");
	tarb_link(t, "evil", "../sentinel");
	tarb_file(t, "z", "x");
}

static void b_link_deep(struct tarb *t, const struct scene *s)
{
	(void)s;
	tarb_link(t, "d/e/evil", "../../../sentinel");
}

static void refuses_symlink_escapes(void **state)
{
	(void)state;
	refused(b_link_direct, "symlink leaves the tree");
	refused(b_link_deep, "symlink leaves the tree");
}

/* b -> "." makes a -> "b/../sentinel" leave the tree, though the target
 * read on its own looks harmless: resolution follows b. */
static void b_link_chain(struct tarb *t, const struct scene *s)
{
	(void)s;
	tarb_link(t, "a", "b/../sentinel");
	tarb_link(t, "b", ".");
}

static void b_link_chain2(struct tarb *t, const struct scene *s)
{
	(void)s;
	tarb_file(t, "m", "x");
	tarb_link(t, "p", "q/q/q/../../../..");
	tarb_link(t, "q", "r");
	tarb_link(t, "r", ".");
}

static void b_link_to_link(struct tarb *t, const struct scene *s)
{
	(void)s;
	tarb_link(t, "a", "b");
	tarb_link(t, "b", "../sentinel");
}

static void refuses_chained_symlink_escapes(void **state)
{
	(void)state;
	refused(b_link_chain, "symlink leaves the tree");
	refused(b_link_chain2, "symlink leaves the tree");
	refused(b_link_to_link, "symlink leaves the tree");
}

static void b_link_loop(struct tarb *t, const struct scene *s)
{
	(void)s;
	tarb_link(t, "a", "b/x");
	tarb_link(t, "b", "a");
}

static void b_link_absolute(struct tarb *t, const struct scene *s)
{
	tarb_link(t, "a", s->sentinel);
}

static void b_through_link(struct tarb *t, const struct scene *s)
{
	(void)s;
	tarb_link(t, "a", "..");
	tarb_file(t, "a/sentinel", "pwned");
}

static void refuses_loops_absolute_targets_and_paths_through_links(void **state)
{
	(void)state;
	refused(b_link_loop, "symlink loop");
	refused(b_link_absolute, "absolute symlink target");
	refused(b_through_link, "path passes through symlink \"a\"");
}

static void b_hard(struct tarb *t, const struct scene *s)
{
	(void)s;
	tarb_file(t, "a", "x");
	tarb_add(t, "b", AE_IFREG, 0644, NULL, NULL, "a");
}

static void b_hard_out(struct tarb *t, const struct scene *s)
{
	tarb_add(t, "b", AE_IFREG, 0644, NULL, NULL, s->sentinel);
}

static void refuses_hard_links(void **state)
{
	(void)state;
	refused(b_hard, "hard link refused");
	refused(b_hard_out, "hard link refused");
}

static void b_chr(struct tarb *t, const struct scene *s)
{
	(void)s;
	tarb_add(t, "null", AE_IFCHR, 0666, NULL, NULL, NULL);
}

static void b_blk(struct tarb *t, const struct scene *s)
{
	(void)s;
	tarb_add(t, "disk", AE_IFBLK, 0660, NULL, NULL, NULL);
}

static void b_fifo(struct tarb *t, const struct scene *s)
{
	(void)s;
	tarb_add(t, "pipe", AE_IFIFO, 0644, NULL, NULL, NULL);
}

static void b_dir(struct tarb *t, const struct scene *s)
{
	(void)s;
	tarb_add(t, "d", AE_IFDIR, 0755, NULL, NULL, NULL);
	tarb_file(t, "d/a", "x");
}

static void refuses_devices_fifos_and_directories(void **state)
{
	(void)state;
	refused(b_chr, "character device refused");
	refused(b_blk, "block device refused");
	refused(b_fifo, "fifo refused");
	refused(b_dir, "directory refused");
}

static void b_dup(struct tarb *t, const struct scene *s)
{
	(void)s;
	tarb_file(t, "m", "x");
	tarb_file(t, "a", "x");
	tarb_file(t, "a", "y");
}

static void b_dup_first(struct tarb *t, const struct scene *s)
{
	(void)s;
	tarb_file(t, "m", "x");
	tarb_file(t, "a", "x");
	tarb_file(t, "m", "y");
}

static void b_unsorted(struct tarb *t, const struct scene *s)
{
	(void)s;
	tarb_file(t, "m", "x");
	tarb_file(t, "b", "x");
	tarb_file(t, "a", "y");
}

static void b_file_as_dir(struct tarb *t, const struct scene *s)
{
	(void)s;
	tarb_file(t, "a", "x");
	tarb_file(t, "a/b", "y");
}

static void refuses_duplicates_disorder_and_conflicts(void **state)
{
	(void)state;
	refused(b_dup, "duplicate member");
	refused(b_dup_first, "duplicate member");
	refused(b_unsorted, "out of order");
	refused(b_file_as_dir, "path passes through file \"a\"");
}

static void b_binary_name(struct tarb *t, const struct scene *s)
{
	(void)s;
	tarb_file(t, "bad\xff", "x");
}

static void b_overlong(struct tarb *t, const struct scene *s)
{
	(void)s;
	tarb_file(t, "a\xc0\xaf..\xc0\xafsentinel", "x");
}

static void b_control(struct tarb *t, const struct scene *s)
{
	(void)s;
	tarb_file(t, "a\x1b[2Jb", "x");
}

static void b_bad_link_target(struct tarb *t, const struct scene *s)
{
	(void)s;
	tarb_link(t, "l", "x\xfe");
}

static void refuses_names_that_are_not_utf8(void **state)
{
	(void)state;
	refused(b_binary_name, "not UTF-8");
	refused(b_overlong, "not UTF-8");
	refused(b_control, "control characters");
	refused(b_bad_link_target, "symlink target is not UTF-8");
	/* Raw ustar, no pax header: the bytes come straight from the name
	 * field. */
	uint8_t tar[512 * 4] = {0};
	ustar(tar, "raw\xc3(", '0', size3);
	memcpy(tar + 512, "abc", 3);
	raw_refused(tar, sizeof tar, APF_EINPUT, "not UTF-8");
}

static void b_setuid(struct tarb *t, const struct scene *s)
{
	(void)s;
	tarb_add(t, "su", AE_IFREG, 04755, "x", NULL, NULL);
}

static void b_private(struct tarb *t, const struct scene *s)
{
	(void)s;
	tarb_add(t, "p", AE_IFREG, 0600, "x", NULL, NULL);
}

static void refuses_other_modes(void **state)
{
	(void)state;
	refused(b_setuid, "file mode 4755 refused");
	refused(b_private, "file mode 0600 refused");
}

/* A header declaring a huge member and no data at all behind it: the
 * refusal comes from the header alone. */
static void refuses_huge_declared_sizes_from_the_header(void **state)
{
	(void)state;
	uint8_t tar[512 * 3] = {0};
	uint8_t base256[12] = {0x80, 0, 0, 0, 0, 0, 0x01, 0, 0, 0, 0, 0};
	ustar(tar, "huge", '0', base256); /* 2^40 bytes */
	raw_refused(tar, sizeof tar, APF_EINPUT,
		    "declared size 1099511627776 exceeds the 1073741824-byte "
		    "member cap");
	ustar(tar, "huge", '0', (const uint8_t *)"77777777777");
	raw_refused(tar, sizeof tar, APF_EINPUT,
		    "declared size 8589934591 exceeds");
}

static void b_three(struct tarb *t, const struct scene *s)
{
	(void)s;
	tarb_file(t, "a", "123456");
	tarb_file(t, "b", "123456");
	tarb_file(t, "c", "1");
}

static void limits_cap_members_bytes_and_sizes(void **state)
{
	(void)state;
	struct apf_archive_limits lim = {.max_members = 2};
	refused_with(b_three, &lim, APF_EINPUT, "more than 2 members");
	lim = (struct apf_archive_limits){.max_total_bytes = 12};
	refused_with(b_three, &lim, APF_EINPUT,
		     "member \"c\": the members exceed the 12-byte total cap");
	lim = (struct apf_archive_limits){.max_member_bytes = 5};
	refused_with(b_three, &lim, APF_EINPUT,
		     "member \"a\": declared size 6 exceeds the 5-byte");
	lim = (struct apf_archive_limits){
		.max_member_bytes = 6, .max_total_bytes = 13, .max_members = 3};
	struct scene s;
	scene_new(&s);
	struct tarb t;
	tarb_open(&t);
	b_three(&t, &s);
	tarb_close(&t);
	write_apf(s.apf, t.out.data, t.out.len);
	apf_buf_free(&t.out);
	assert_apf_ok(read_all(s.apf, &lim));
	scene_free(&s);
}

/* Extended attributes inflate a pax header far beyond what any member of
 * an entry needs: the stream may not grow past what the members declare. */
static void b_bloated(struct tarb *t, const struct scene *s)
{
	(void)s;
	struct archive_entry *e = archive_entry_new();
	archive_entry_copy_pathname(e, "a");
	archive_entry_set_filetype(e, AE_IFREG);
	archive_entry_set_perm(e, 0644);
	archive_entry_set_size(e, 1);
	char *big = calloc(1, 200000);
	archive_entry_xattr_add_entry(e, "user.big", big, 200000);
	free(big);
	assert_int_equal(archive_write_header(t->a, e), ARCHIVE_OK);
	assert_int_equal(archive_write_data(t->a, "x", 1), 1);
	archive_entry_free(e);
}

static void refuses_streams_larger_than_their_members(void **state)
{
	(void)state;
	refused_with(b_bloated, NULL, APF_EVERIFY,
		     "larger than its members account for");
}

static void refuses_data_after_the_end_marker_or_no_marker(void **state)
{
	(void)state;
	uint8_t tar[512 * 8] = {0};
	ustar(tar, "a", '0', size3);
	memcpy(tar + 512, "abc", 3);
	/* Header, data, end marker (2 blocks), then a stray block. */
	tar[512 * 5] = 'X';
	raw_refused(tar, sizeof tar, APF_EVERIFY,
		    "data after the tar end-of-archive marker");
	/* No end marker at all, or only half of one. */
	raw_refused(tar, 1024, APF_EVERIFY, "no tar end-of-archive marker");
	raw_refused(tar, 1536, APF_EVERIFY, "no tar end-of-archive marker");
	/* The same archive, properly ended, is fine. */
	struct scene s;
	scene_new(&s);
	write_apf(s.apf, tar, 512 * 4);
	assert_apf_ok(read_all(s.apf, NULL));
	assert_apf_ok(apf_archive_extract(s.apf, s.dest, NULL, NULL, NULL));
	scene_free(&s);
}

/* ---- extraction --------------------------------------------------------------- */

static void extraction_refuses_an_existing_target(void **state)
{
	(void)state;
	struct scene s;
	scene_new(&s);
	write_small(s.apf);
	assert_int_equal(mkdir(s.dest, 0755), 0);
	assert_error(apf_archive_extract(s.apf, s.dest, NULL, NULL, NULL),
		     APF_EINPUT, "already exists");
	char *names = listing(s.dest);
	assert_string_equal(names, "");
	free(names);
	assert_int_equal(rmdir(s.dest), 0);
	/* A symlink at dest is not followed either. */
	assert_int_equal(symlink(s.dir, s.dest), 0);
	assert_error(apf_archive_extract(s.apf, s.dest, NULL, NULL, NULL),
		     APF_EINPUT, "already exists");
	assert_int_equal(unlink(s.dest), 0);
	scene_untouched(&s);
	scene_free(&s);
}

static int refuse_second(void *user, const struct apf_archive_member *m,
			 const uint8_t sha256[32])
{
	(void)sha256;
	int *n = user;
	if (++*n == 2)
		return apf_error(APF_EVERIFY, m->name, "not in the manifest");
	return 0;
}

static void a_refusing_check_leaves_nothing(void **state)
{
	(void)state;
	struct scene s;
	scene_new(&s);
	write_small(s.apf);
	int n = 0;
	assert_error(apf_archive_extract(s.apf, s.dest, NULL, refuse_second,
					 &n),
		     APF_EVERIFY, "submission/x.c: not in the manifest");
	assert_int_equal(n, 2);
	scene_untouched(&s);
	scene_free(&s);
}

static void extraction_faults_leave_nothing(void **state)
{
	(void)state;
	struct scene s;
	scene_new(&s);
	write_small(s.apf);
	const char *ops[] = {"write", "fsync", "rename"};
	for (int i = 0; i < 3; i++) {
		apf_fault_set(ops[i], i == 0 ? 2 : 1);
		int rc = apf_archive_extract(s.apf, s.dest, NULL, NULL, NULL);
		apf_fault_set(NULL, 0);
		assert_error(rc, APF_EIO, i == 1 ? "syncfs" : ops[i]);
		scene_untouched(&s);
	}
	assert_apf_ok(apf_archive_extract(s.apf, s.dest, NULL, NULL, NULL));
	scene_free(&s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(round_trip_files_and_symlinks),
		cmocka_unit_test(empty_archive_round_trips),
		cmocka_unit_test(same_bytes_whatever_the_clock_and_umask),
		cmocka_unit_test(same_bytes_whatever_the_owner),
		cmocka_unit_test(same_bytes_from_memory_and_from_descriptors),
		cmocka_unit_test(tar_headers_hold_nothing_variable),
		cmocka_unit_test(zstd_and_tar_list_the_members),
		cmocka_unit_test(writer_refuses_what_readers_refuse),
		cmocka_unit_test(writer_refuses_bad_sequences),
		cmocka_unit_test(writer_refuses_files_that_change_size),
		cmocka_unit_test(writer_faults_leave_no_file),
		cmocka_unit_test(every_flipped_byte_is_a_verification_failure),
		cmocka_unit_test(every_truncation_is_an_input_error),
		cmocka_unit_test(foreign_files_are_not_entries),
		cmocka_unit_test(
			appended_or_damaged_trailers_are_verification_failures),
		cmocka_unit_test(a_trailer_over_anything_else_is_corruption),
		cmocka_unit_test(
			corrupt_frames_under_a_recomputed_trailer_are_caught),
		cmocka_unit_test(refuses_absolute_paths),
		cmocka_unit_test(refuses_dotdot_components),
		cmocka_unit_test(refuses_symlink_escapes),
		cmocka_unit_test(refuses_chained_symlink_escapes),
		cmocka_unit_test(
			refuses_loops_absolute_targets_and_paths_through_links),
		cmocka_unit_test(refuses_hard_links),
		cmocka_unit_test(refuses_devices_fifos_and_directories),
		cmocka_unit_test(refuses_duplicates_disorder_and_conflicts),
		cmocka_unit_test(refuses_names_that_are_not_utf8),
		cmocka_unit_test(refuses_other_modes),
		cmocka_unit_test(refuses_huge_declared_sizes_from_the_header),
		cmocka_unit_test(limits_cap_members_bytes_and_sizes),
		cmocka_unit_test(refuses_streams_larger_than_their_members),
		cmocka_unit_test(refuses_data_after_the_end_marker_or_no_marker),
		cmocka_unit_test(extraction_refuses_an_existing_target),
		cmocka_unit_test(a_refusing_check_leaves_nothing),
		cmocka_unit_test(extraction_faults_leave_nothing),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
