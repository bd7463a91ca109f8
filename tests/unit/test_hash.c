/*
 * test_hash.c: SHA-256 against known vectors, and the tree digest of
 * docs/design.md 2.4: the exact listing, modes, symlinks never followed, .git left
 * out, refusals, and the same digest whatever the thread count; a file
 * of many read buffers hashed as its bytes, and a file cut and regrown
 * while it is hashed an error or a digest, never a crash or a hang.
 */
#include "testlib.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "hash/hash.h"

static void sha256_known_vectors(void **state)
{
	(void)state;
	char hex[APF_SHA256_HEX];
	assert_apf_ok(apf_sha256_hex(hex, "", 0));
	assert_string_equal(hex, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b9"
				 "34ca495991b7852b855");
	assert_apf_ok(apf_sha256_hex(hex, "abc", 3));
	assert_string_equal(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177"
				 "a9cb410ff61f20015ad");
	/* Streaming in pieces equals one shot. */
	apf_sha256 *h;
	uint8_t d[32];
	assert_apf_ok(apf_sha256_new(&h));
	assert_apf_ok(apf_sha256_update(h, "a", 1));
	assert_apf_ok(apf_sha256_update(h, "bc", 2));
	assert_apf_ok(apf_sha256_final(h, d));
	apf_hex(hex, d, 32);
	assert_string_equal(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177"
				 "a9cb410ff61f20015ad");
	apf_sha256_free(h);
}

static char *make_tree(void)
{
	char *dir = testlib_tmpdir();
	testlib_write_str(dir, "b.txt", "abc");
	testlib_write(dir, "run.sh", "#!/bin/sh\n", 10, 0750);
	testlib_write_str(dir, "sub/deep/x", "");
	testlib_write_str(dir, "a.b", "1");
	testlib_write_str(dir, ".git/HEAD", "ref: refs/heads/main\n");
	char *empty = apf_path_join(dir, "emptydir");
	mkdir(empty, 0755);
	free(empty);
	char *link = apf_path_join(dir, "sub/link");
	assert_int_equal(symlink("../../etc/passwd", link), 0);
	free(link);
	return dir;
}

static void listing_is_the_design_format(void **state)
{
	(void)state;
	char *dir = make_tree();
	apf_tree *t;
	assert_apf_ok(apf_tree_hash(&t, dir, NULL));
	apf_buf b = {0};
	assert_apf_ok(apf_tree_listing(&b, t));
	char sha_link[65];
	assert_apf_ok(apf_sha256_hex(sha_link, "../../etc/passwd", 16));
	apf_buf want = {0};
	apf_buf_printf(&want,
		       "f 644 1 6b86b273ff34fce19d6b804eff5a3f5747ada4eaa22f1d49"
		       "c01e52ddb7875b4b a.b\n"
		       "f 644 3 ba7816bf8f01cfea414140de5dae2223b00361a396177a9c"
		       "b410ff61f20015ad b.txt\n"
		       "f 755 10 %s run.sh\n"
		       "f 644 0 e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934c"
		       "a495991b7852b855 sub/deep/x\n"
		       "l 777 16 %s sub/link\n",
		       "0000000000000000000000000000000000000000000000000000000000000000",
		       sha_link);
	/* run.sh's digest: compute it rather than hard-code it. */
	char sh[65];
	assert_apf_ok(apf_sha256_hex(sh, "#!/bin/sh\n", 10));
	char *p = strstr(want.data, "0000000000000000");
	memcpy(p, sh, 64);
	assert_string_equal(b.data, want.data);
	uint8_t d[32];
	assert_apf_ok(apf_sha256_buf(d, b.data, b.len));
	assert_memory_equal(d, t->digest, 32);
	assert_int_equal(t->n, 5);
	assert_int_equal(t->bytes, 1 + 3 + 10 + 0 + 16);
	const apf_tree_entry *e = apf_tree_find(t, "sub/link");
	assert_non_null(e);
	assert_string_equal(e->link, "../../etc/passwd");
	assert_null(apf_tree_find(t, ".git/HEAD"));
	apf_buf_free(&b);
	apf_buf_free(&want);
	apf_tree_free(t);
	testlib_tmpdir_free(dir);
}

static void digest_ignores_mtimes_and_thread_count(void **state)
{
	(void)state;
	char *dir = testlib_tmpdir();
	char name[32], data[4096];
	for (int i = 0; i < 200; i++) {
		snprintf(name, sizeof name, "d%d/f%03d", i % 7, i);
		for (size_t k = 0; k < sizeof data; k++)
			data[k] = (char)(i * 31 + k);
		testlib_write(dir, name, data, (size_t)(i * 17 % 4096), 0644);
	}
	apf_tree *a, *b;
	struct apf_tree_opts one = {.threads = 1}, many = {.threads = 8};
	assert_apf_ok(apf_tree_hash(&a, dir, &one));
	char *f = apf_path_join(dir, "d3/f003");
	struct timespec ts[2] = {{1, 0}, {1, 0}};
	assert_int_equal(utimensat(AT_FDCWD, f, ts, 0), 0);
	assert_apf_ok(apf_tree_hash(&b, dir, &many));
	assert_memory_equal(a->digest, b->digest, 32);
	/* One changed byte changes the digest. */
	testlib_write(dir, "d3/f003", "x", 1, 0644);
	apf_tree *c;
	assert_apf_ok(apf_tree_hash(&c, dir, &many));
	assert_memory_not_equal(a->digest, c->digest, 32);
	/* So does the executable bit alone. */
	apf_tree_free(c);
	assert_int_equal(chmod(f, 0755), 0);
	assert_apf_ok(apf_tree_hash(&c, dir, &many));
	assert_int_equal(apf_tree_find(c, "d3/f003")->mode, 755);
	apf_tree_free(a);
	apf_tree_free(b);
	apf_tree_free(c);
	free(f);
	testlib_tmpdir_free(dir);
}

static void refuses_fifos_and_bad_names(void **state)
{
	(void)state;
	char *dir = testlib_tmpdir();
	char *fifo = apf_path_join(dir, "pipe");
	assert_int_equal(mkfifo(fifo, 0644), 0);
	apf_tree *t;
	assert_int_equal(apf_tree_hash(&t, dir, NULL), APF_EINPUT);
	assert_non_null(strstr(apf_error_message(), "'pipe': not a regular file"));
	unlink(fifo);
	testlib_write_str(dir, "bad\xff", "x");
	assert_int_equal(apf_tree_hash(&t, dir, NULL), APF_EINPUT);
	assert_non_null(strstr(apf_error_message(), "not UTF-8"));
	free(fifo);
	testlib_tmpdir_free(dir);
	assert_int_equal(apf_tree_hash(&t, "/nonexistent", NULL), APF_EINPUT);
	assert_int_equal(apf_tree_hash(&t, "/etc/hostname", NULL), APF_EINPUT);
	assert_non_null(strstr(apf_error_message(), "not a directory"));
}

static void empty_tree_digest_is_sha256_of_nothing(void **state)
{
	(void)state;
	char *dir = testlib_tmpdir();
	apf_tree *t;
	assert_apf_ok(apf_tree_hash(&t, dir, NULL));
	char hex[65];
	apf_hex(hex, t->digest, 32);
	assert_string_equal(hex, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934"
				 "ca495991b7852b855");
	apf_tree_free(t);
	testlib_tmpdir_free(dir);
}

/* Twelve of tree.c's 256 KiB read buffers and a bit: the digest is SHA-256
 * of the bytes, streamed here in other pieces. */
static void a_file_of_many_buffers_hashes_as_its_bytes(void **state)
{
	(void)state;
	char *dir = testlib_tmpdir();
	size_t n = ((size_t)3 << 20) + 4097;
	unsigned char *b = malloc(n);
	assert_non_null(b);
	for (size_t i = 0; i < n; i++)
		b[i] = (unsigned char)(i * 2654435761u >> 13);
	testlib_write(dir, "big.bin", b, n, 0644);
	apf_sha256 *h;
	uint8_t want[32];
	assert_apf_ok(apf_sha256_new(&h));
	for (size_t off = 0; off < n; off += 100003)
		assert_apf_ok(apf_sha256_update(h, b + off,
						n - off < 100003 ? n - off
								 : 100003));
	assert_apf_ok(apf_sha256_final(h, want));
	apf_sha256_free(h);
	apf_tree *t;
	assert_apf_ok(apf_tree_hash(&t, dir, NULL));
	const apf_tree_entry *e = apf_tree_find(t, "big.bin");
	assert_non_null(e);
	assert_int_equal(e->size, n);
	assert_memory_equal(e->sha256, want, 32);
	apf_tree_free(t);
	free(b);
	testlib_tmpdir_free(dir);
}

struct shrinker {
	char *path;
	size_t size;
	atomic_int stop, failed;
};

/* (no cmocka asserts off the test's thread: failures are counted) */
static void *shrink_and_regrow(void *arg)
{
	struct shrinker *s = arg;
	int fd = open(s->path, O_WRONLY);
	if (fd < 0) {
		atomic_store(&s->failed, 1);
		return NULL;
	}
	/* cut and whole alike long (0.3 ms each), so that hashes begin on
	 * either and meet cuts while they read */
	struct timespec pause = {0, 300 * 1000};
	while (!atomic_load(&s->stop)) {
		if (ftruncate(fd, 4096))
			atomic_store(&s->failed, 1);
		nanosleep(&pause, NULL);
		if (ftruncate(fd, (off_t)s->size))
			atomic_store(&s->failed, 1);
		nanosleep(&pause, NULL);
	}
	close(fd);
	return NULL;
}

/* One thread hashes the tree while another cuts its file to a page and
 * lets it grow back, again and again: each hash is the error a changed
 * file gets or, when the size it read held throughout, a digest (of
 * zeros either way); never a crash or a hang. */
static void a_file_cut_while_hashed_is_an_error_never_a_crash(void **state)
{
	(void)state;
	char *dir = testlib_tmpdir();
	struct shrinker s = {.size = (size_t)16 << 20};
	char *zeros = calloc(1, s.size);
	assert_non_null(zeros);
	testlib_write(dir, "moving.bin", zeros, s.size, 0644);
	free(zeros);
	s.path = apf_path_join(dir, "moving.bin");
	pthread_t th;
	assert_int_equal(pthread_create(&th, NULL, shrink_and_regrow, &s), 0);
	int changed = 0, hashed = 0;
	for (int i = 0; i < 60; i++) {
		apf_tree *t = NULL;
		int rc = apf_tree_hash(&t, dir, NULL);
		if (rc == 0) {
			hashed++;
			apf_tree_free(t);
			continue;
		}
		assert_int_equal(rc, APF_EINPUT);
		assert_non_null(strstr(apf_error_message(),
				       "'moving.bin' changed while it was hashed"));
		changed++;
	}
	atomic_store(&s.stop, 1);
	pthread_join(th, NULL);
	assert_false(atomic_load(&s.failed));
	assert_int_equal(changed + hashed, 60);
	assert_true(changed > 0);
	free(s.path);
	testlib_tmpdir_free(dir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(sha256_known_vectors),
		cmocka_unit_test(listing_is_the_design_format),
		cmocka_unit_test(digest_ignores_mtimes_and_thread_count),
		cmocka_unit_test(refuses_fifos_and_bad_names),
		cmocka_unit_test(empty_tree_digest_is_sha256_of_nothing),
		cmocka_unit_test(a_file_of_many_buffers_hashes_as_its_bytes),
		cmocka_unit_test(a_file_cut_while_hashed_is_an_error_never_a_crash),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
