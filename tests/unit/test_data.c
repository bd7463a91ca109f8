/*
 * test_data.c: the IDX reader on files the test writes (gzip'd and plain,
 * good and broken in every way the reader promises to name), the
 * train/validation/test split, normalisation, and the shuffled batch stream
 * whose position is all a checkpoint needs.
 */
#include "testlib.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "data/data.h"

/* An IDX file: magic 0 0 type ndim, big-endian dims, then payload. */
static size_t idx_bytes(uint8_t *buf, int type, int ndim, const uint32_t *dims,
			const uint8_t *payload, size_t n)
{
	size_t k = 0;
	buf[k++] = 0, buf[k++] = 0, buf[k++] = (uint8_t)type;
	buf[k++] = (uint8_t)ndim;
	for (int i = 0; i < ndim; i++) {
		buf[k++] = (uint8_t)(dims[i] >> 24);
		buf[k++] = (uint8_t)(dims[i] >> 16);
		buf[k++] = (uint8_t)(dims[i] >> 8);
		buf[k++] = (uint8_t)dims[i];
	}
	memcpy(buf + k, payload, n);
	return k + n;
}

static void write_gz(const char *dir, const char *name, const void *data,
		     size_t len)
{
	char *path = apf_path_join(dir, name);
	gzFile f = gzopen(path, "wb");
	assert_non_null(f);
	assert_int_equal(gzwrite(f, data, (unsigned)len), (int)len);
	assert_int_equal(gzclose(f), Z_OK);
	free(path);
}

/* n images of 2x3 whose pixels are the item index, labels index % classes */
static void write_set(const char *dir, const char *prefix, uint32_t n,
		      int classes, int gz)
{
	uint8_t *pix = malloc(n * 6), *lab = malloc(n);
	for (uint32_t i = 0; i < n; i++) {
		memset(pix + i * 6, (int)(i & 0xff), 6);
		lab[i] = (uint8_t)(i % (uint32_t)classes);
	}
	uint8_t *buf = malloc(n * 6 + 64);
	uint32_t d3[3] = {n, 2, 3}, d1[1] = {n};
	char name[64];
	size_t len = idx_bytes(buf, 8, 3, d3, pix, n * 6);
	snprintf(name, sizeof name, "%s-images%s", prefix, gz ? ".gz" : "");
	if (gz)
		write_gz(dir, name, buf, len);
	else
		testlib_write(dir, name, buf, len, 0644);
	len = idx_bytes(buf, 8, 1, d1, lab, n);
	snprintf(name, sizeof name, "%s-labels%s", prefix, gz ? ".gz" : "");
	if (gz)
		write_gz(dir, name, buf, len);
	else
		testlib_write(dir, name, buf, len, 0644);
	free(pix);
	free(lab);
	free(buf);
}

static int read_one(const char *dir, const char *name, apf_idx **out)
{
	char *p = apf_path_join(dir, name);
	int rc = apf_idx_read(out, p, 1 << 20);
	free(p);
	return rc;
}

static void idx_reads_gzip_and_plain(void **state)
{
	(void)state;
	char *dir = testlib_tmpdir();
	write_set(dir, "a", 10, 3, 1);
	write_set(dir, "b", 10, 3, 0);
	apf_idx *x, *y;
	assert_apf_ok(read_one(dir, "a-images.gz", &x));
	assert_apf_ok(read_one(dir, "b-images", &y));
	assert_int_equal(x->ndim, 3);
	assert_int_equal(x->count, 10);
	assert_int_equal(x->item_size, 6);
	assert_int_equal(x->dims[2], 3);
	assert_memory_equal(x->data, y->data, 60);
	assert_int_equal(x->data[6 * 7], 7);
	apf_idx_free(x);
	apf_idx_free(y);
	testlib_tmpdir_free(dir);
}

static void expect_idx_error(const char *dir, const char *name,
			     const void *data, size_t len, const char *why)
{
	testlib_write(dir, name, data, len, 0644);
	apf_idx *x = NULL;
	assert_int_equal(read_one(dir, name, &x), APF_EINPUT);
	assert_null(x);
	const char *msg = apf_error_message();
	if (!strstr(msg, why) || !strstr(msg, name))
		fail_msg("error '%s' should name %s and say '%s'", msg, name,
			 why);
}

static void idx_refuses_broken_files_with_reasons(void **state)
{
	(void)state;
	char *dir = testlib_tmpdir();
	uint8_t buf[256], pay[24] = {0};
	uint32_t d2[2] = {4, 6}, big[2] = {0x10000, 0x10000}, zero[2] = {0, 6};
	apf_idx *x = NULL;
	assert_int_equal(read_one(dir, "missing.gz", &x), APF_EINPUT);
	assert_non_null(strstr(apf_error_message(), "cannot open"));
	expect_idx_error(dir, "empty", "", 0, "truncated");
	size_t n = idx_bytes(buf, 8, 2, d2, pay, 24);
	buf[0] = 1;
	expect_idx_error(dir, "magic", buf, n, "not an IDX file");
	n = idx_bytes(buf, 0x0d, 2, d2, pay, 24);
	expect_idx_error(dir, "float", buf, n, "element type 0x0d");
	n = idx_bytes(buf, 8, 2, d2, pay, 24);
	buf[3] = 7;
	expect_idx_error(dir, "dims7", buf, n, "7 dimensions");
	n = idx_bytes(buf, 8, 2, d2, pay, 24);
	expect_idx_error(dir, "short", buf, n - 5, "truncated");
	expect_idx_error(dir, "header-cut", buf, 6, "truncated");
	expect_idx_error(dir, "long", buf, n + 1, "trailing bytes");
	n = idx_bytes(buf, 8, 2, big, pay, 0);
	expect_idx_error(dir, "huge", buf, n, "too large");
	n = idx_bytes(buf, 8, 2, zero, pay, 0);
	expect_idx_error(dir, "zero", buf, n, "zero");
	/* a gzip stream cut in the middle */
	write_set(dir, "c", 200, 3, 1);
	char *path = apf_path_join(dir, "c-images.gz");
	char *data;
	size_t len;
	assert_apf_ok(apf_file_read(&data, &len, path, 1 << 20));
	free(path);
	testlib_write(dir, "cut.gz", data, len / 2, 0644);
	assert_int_equal(read_one(dir, "cut.gz", &x), APF_EINPUT);
	assert_non_null(strstr(apf_error_message(), "cut.gz"));
	/* and one with its payload corrupted */
	for (size_t i = 20; i < len - 8; i += 7)
		data[i] ^= 0x5a;
	testlib_write(dir, "bad.gz", data, len, 0644);
	assert_int_equal(read_one(dir, "bad.gz", &x), APF_EINPUT);
	assert_non_null(strstr(apf_error_message(), "bad.gz"));
	free(data);
	testlib_tmpdir_free(dir);
}

static apf_image_dataset_opts opts_for(const char *dir)
{
	return (apf_image_dataset_opts){
		.dir = dir, .train_images = "tr-images.gz",
		.train_labels = "tr-labels.gz", .test_images = "te-images.gz",
		.test_labels = "te-labels.gz", .validation_size = 20,
		.classes = 5, .mean = 0.5f, .std = 0.25f};
}

static void splits_take_validation_from_the_end(void **state)
{
	(void)state;
	char *dir = testlib_tmpdir();
	write_set(dir, "tr", 100, 5, 1);
	write_set(dir, "te", 30, 5, 1);
	apf_image_dataset_opts o = opts_for(dir);
	apf_image_dataset *ds;
	assert_apf_ok(apf_image_dataset_load(&ds, &o));
	assert_int_equal(ds->H, 2);
	assert_int_equal(ds->W, 3);
	assert_int_equal(ds->split[APF_SPLIT_TRAIN].n, 80);
	assert_int_equal(ds->split[APF_SPLIT_VALIDATION].n, 20);
	assert_int_equal(ds->split[APF_SPLIT_TEST].n, 30);
	float x[12];
	int32_t y[2];
	apf_image_gather(ds, APF_SPLIT_VALIDATION, NULL, 0, 2, x, y);
	/* validation item 0 is training-file item 80 */
	assert_int_equal(y[0], 80 % 5);
	assert_true(x[0] == (80.0f / 255.0f - 0.5f) / 0.25f);
	assert_true(x[6] == (81.0f / 255.0f - 0.5f) / 0.25f);
	apf_image_dataset_free(ds);
	o.train_size = 90; /* 90 + 20 > 100 */
	assert_int_equal(apf_image_dataset_load(&ds, &o), APF_EINPUT);
	assert_non_null(strstr(apf_error_message(), "cannot give"));
	testlib_tmpdir_free(dir);
}

static void mismatched_files_are_refused(void **state)
{
	(void)state;
	char *dir = testlib_tmpdir();
	write_set(dir, "tr", 100, 5, 1);
	write_set(dir, "te", 30, 5, 1);
	write_set(dir, "few", 29, 5, 1);
	write_set(dir, "many", 30, 9, 1); /* labels up to 8 with 5 classes */
	apf_image_dataset_opts o = opts_for(dir);
	apf_image_dataset *ds;
	o.test_labels = "few-labels.gz";
	assert_int_equal(apf_image_dataset_load(&ds, &o), APF_EINPUT);
	assert_non_null(strstr(apf_error_message(), "29 labels for 30 images"));
	o.test_labels = "many-labels.gz";
	assert_int_equal(apf_image_dataset_load(&ds, &o), APF_EINPUT);
	assert_non_null(strstr(apf_error_message(), "is not below 5"));
	o.test_labels = "te-images.gz";
	assert_int_equal(apf_image_dataset_load(&ds, &o), APF_EINPUT);
	assert_non_null(strstr(apf_error_message(), "expected labels"));
	o = opts_for(dir);
	o.train_images = "nope.gz";
	assert_int_equal(apf_image_dataset_load(&ds, &o), APF_EINPUT);
	assert_non_null(strstr(apf_error_message(), "nope.gz: cannot open"));
	testlib_tmpdir_free(dir);
}

static void permutation_is_a_pure_function_of_key_and_epoch(void **state)
{
	(void)state;
	enum { N = 1000 };
	uint32_t a[N], b[N], c[N];
	apf_rng_key k = {9, 1, 2, APF_RNG_SHUFFLE};
	apf_data_permutation(a, N, &k, 3);
	apf_data_permutation(b, N, &k, 3);
	apf_data_permutation(c, N, &k, 4);
	assert_memory_equal(a, b, sizeof a);
	assert_memory_not_equal(a, c, sizeof a);
	char seen[N] = {0};
	for (int i = 0; i < N; i++) {
		assert_true(a[i] < N);
		assert_false(seen[a[i]]);
		seen[a[i]] = 1;
	}
}

static void batches_roll_over_epochs_and_resume_from_a_position(void **state)
{
	(void)state;
	char *dir = testlib_tmpdir();
	write_set(dir, "tr", 100, 5, 1);
	write_set(dir, "te", 30, 5, 1);
	apf_image_dataset_opts o = opts_for(dir);
	apf_image_dataset *ds;
	assert_apf_ok(apf_image_dataset_load(&ds, &o));
	apf_rng_key k = {1, 0, 0, APF_RNG_SHUFFLE};
	apf_batcher *b;
	assert_apf_ok(apf_batcher_new(&b, ds, APF_SPLIT_TRAIN, &k));
	apf_data_pos pos = {0, 0};
	float x[30 * 6];
	int32_t y[30];
	int count[80] = {0};
	/* two batches of 30 use 60 of 80; the third starts epoch 1 */
	for (int i = 0; i < 2; i++) {
		assert_apf_ok(apf_batcher_next(b, &pos, 30, x, y));
		for (int j = 0; j < 30; j++) {
			int item = (int)(x[j * 6] * 0.25f * 255.0f + 0.5f * 255.0f + 0.5f);
			assert_true(item >= 0 && item < 80);
			assert_int_equal(y[j], item % 5);
			count[item]++;
		}
	}
	for (int i = 0; i < 80; i++)
		assert_true(count[i] <= 1); /* no repeats within an epoch */
	assert_int_equal(pos.epoch, 0);
	assert_int_equal(pos.index, 60);
	apf_data_pos saved = pos;
	float x1[30 * 6], x2[30 * 6];
	assert_apf_ok(apf_batcher_next(b, &pos, 30, x1, y));
	assert_int_equal(pos.epoch, 1);
	assert_int_equal(pos.index, 30);
	/* a fresh batcher from the saved position serves the same batch */
	apf_batcher *b2;
	assert_apf_ok(apf_batcher_new(&b2, ds, APF_SPLIT_TRAIN, &k));
	assert_apf_ok(apf_batcher_next(b2, &saved, 30, x2, y));
	assert_memory_equal(x1, x2, sizeof x1);
	assert_int_equal(apf_batcher_next(b2, &saved, 81, x, y), APF_EINPUT);
	apf_batcher_free(b);
	apf_batcher_free(b2);
	apf_image_dataset_free(ds);
	testlib_tmpdir_free(dir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(idx_reads_gzip_and_plain),
		cmocka_unit_test(idx_refuses_broken_files_with_reasons),
		cmocka_unit_test(splits_take_validation_from_the_end),
		cmocka_unit_test(mismatched_files_are_refused),
		cmocka_unit_test(permutation_is_a_pure_function_of_key_and_epoch),
		cmocka_unit_test(batches_roll_over_epochs_and_resume_from_a_position),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
