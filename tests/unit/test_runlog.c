/*
 * test_runlog.c: the hash-chained log: what is written reads back with an
 * intact chain; every kind of tampering is caught and names the line; a torn
 * tail is cut on reopening and the chain continues.
 */
#include "testlib.h"

#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "hash/hash.h"
#include "runlog/runlog.h"

static char *write_log(const char *dir, int n)
{
	char *path = apf_path_join(dir, "log.jsonl");
	apf_runlog *l;
	assert_apf_ok(apf_runlog_create(&l, path));
	for (int i = 0; i < n; i++) {
		json_t *f = json_pack("{s:i, s:s, s:f}", "step", i, "note",
				      "caf\xc3\xa9 \"quoted\"", "loss", 0.5 * i);
		assert_apf_ok(apf_runlog_append(l, 1000 + (uint64_t)i,
						i % 3 ? "step_block" : "eval", f,
						i % 3 == 0));
		json_decref(f);
	}
	assert_int_equal(apf_runlog_count(l), (uint64_t)n);
	assert_apf_ok(apf_runlog_close(l));
	return path;
}

struct seen {
	uint64_t n;
	char last_hash[65];
};

static int count_cb(void *user, const struct apf_runlog_record *r)
{
	struct seen *s = user;
	assert_int_equal(r->seq, s->n);
	assert_int_equal(r->t_ns, 1000 + s->n);
	assert_int_equal(json_integer_value(json_object_get(r->obj, "step")),
			 (json_int_t)s->n);
	s->n++;
	memcpy(s->last_hash, r->hash, 65);
	return 0;
}

static void written_log_reads_back_with_chain(void **state)
{
	(void)state;
	char *dir = testlib_tmpdir();
	char *path = write_log(dir, 50);
	struct seen s = {0};
	struct apf_runlog_summary sum;
	assert_apf_ok(apf_runlog_read(&sum, path, count_cb, &s));
	assert_int_equal(s.n, 50);
	assert_int_equal(sum.records, 50);
	assert_string_equal(sum.head, s.last_hash);
	/* The first line is exactly the documented form. */
	char *text;
	assert_apf_ok(apf_file_read(&text, NULL, path, 1 << 20));
	assert_memory_equal(text, "{\"seq\":0,\"prev\":\"" APF_RUNLOG_ZERO_HEAD
				  "\",\"t_ns\":1000,\"event\":\"eval\",\"step\":0,",
			    strlen("{\"seq\":0,\"prev\":\"") + 64 +
				    strlen("\",\"t_ns\":1000,\"event\":\"eval\",\"step\":0,"));
	/* prev of line 2 is the SHA-256 of line 1. */
	char *nl = strchr(text, '\n');
	char h[65];
	assert_apf_ok(apf_sha256_hex(h, text, (size_t)(nl - text)));
	assert_memory_equal(strstr(nl + 1, "\"prev\":\"") + 8, h, 64);
	free(text);
	free(path);
	testlib_tmpdir_free(dir);
}

/* Rewrites the log through f and expects verification to fail naming
 * `line`. */
static void expect_broken(const char *path, void (*f)(char *text, size_t *len),
			  const char *want)
{
	char *text;
	size_t len;
	assert_apf_ok(apf_file_read(&text, &len, path, 1 << 20));
	char *copy = malloc(len + 1);
	memcpy(copy, text, len + 1);
	f(copy, &len);
	char *bad = malloc(strlen(path) + 8);
	sprintf(bad, "%s.bad", path);
	assert_apf_ok(apf_file_write(bad, copy, len, 0644, 0));
	int rc = apf_runlog_read(NULL, bad, NULL, NULL);
	if (rc != APF_EVERIFY || !strstr(apf_error_message(), want))
		fail_msg("expected '%s', got %d: %s", want, rc,
			 rc ? apf_error_message() : "verified");
	free(bad);
	free(copy);
	free(text);
}

static char *nth_line(char *text, int n)
{
	char *p = text;
	while (n-- > 0)
		p = strchr(p, '\n') + 1;
	return p;
}

static void change_metric(char *t, size_t *len)
{
	(void)len;
	char *p = strstr(nth_line(t, 7), "\"step\":7");
	p[7] = '8';
}
static void change_time(char *t, size_t *len)
{
	(void)len;
	char *p = strstr(nth_line(t, 3), "\"t_ns\":1003");
	p[10] = '4';
}
static void delete_line(char *t, size_t *len)
{
	char *a = nth_line(t, 4), *b = nth_line(t, 5);
	memmove(a, b, *len - (size_t)(b - t) + 1);
	*len -= (size_t)(b - a);
}
static void swap_lines(char *t, size_t *len)
{
	char *a = nth_line(t, 4), *b = nth_line(t, 5), *c = nth_line(t, 6);
	size_t la = (size_t)(b - a), lb = (size_t)(c - b);
	char *tmp = malloc(la + lb);
	memcpy(tmp, b, lb);
	memcpy(tmp + lb, a, la);
	memcpy(a, tmp, la + lb);
	free(tmp);
	(void)len;
}
static void truncate_mid_line(char *t, size_t *len)
{
	*len = (size_t)(nth_line(t, 9) - t) + 20;
}
static void extra_key_order(char *t, size_t *len)
{
	(void)len;
	char *p = nth_line(t, 2);
	memcpy(p, "{\"sEq\"", 6);
}

static void tampering_names_the_line(void **state)
{
	(void)state;
	char *dir = testlib_tmpdir();
	char *path = write_log(dir, 20);
	expect_broken(path, change_metric, "line 9: prev does not match");
	expect_broken(path, change_time, "line 5: prev does not match");
	expect_broken(path, delete_line, "line 5: seq 5 where 4 was due");
	expect_broken(path, swap_lines, "line 5: seq 5 where 4 was due");
	expect_broken(path, truncate_mid_line, "line 10: torn");
	expect_broken(path, extra_key_order, "line 3: does not start with");
	free(path);
	testlib_tmpdir_free(dir);
}

static void torn_tail_is_cut_and_chain_continues(void **state)
{
	(void)state;
	char *dir = testlib_tmpdir();
	char *path = write_log(dir, 10);
	int fd = open(path, O_WRONLY | O_APPEND);
	assert_true(write(fd, "{\"seq\":10,\"prev\":\"ab", 20) == 20);
	close(fd);
	assert_int_equal(apf_runlog_read(NULL, path, NULL, NULL), APF_EVERIFY);
	apf_runlog *l;
	assert_int_equal(apf_runlog_open_append(&l, path, 0, NULL), APF_EVERIFY);
	uint64_t cut;
	assert_apf_ok(apf_runlog_open_append(&l, path, 1, &cut));
	assert_int_equal(cut, 20);
	assert_int_equal(apf_runlog_count(l), 10);
	json_t *f = json_pack("{s:i}", "step", 10);
	assert_apf_ok(apf_runlog_append(l, 1010, "resume", f, 1));
	json_decref(f);
	assert_apf_ok(apf_runlog_close(l));
	struct seen s = {0};
	assert_apf_ok(apf_runlog_read(NULL, path, count_cb, &s));
	assert_int_equal(s.n, 11);
	free(path);
	testlib_tmpdir_free(dir);
}

static void reserved_keys_and_existing_logs_are_refused(void **state)
{
	(void)state;
	char *dir = testlib_tmpdir();
	char *path = write_log(dir, 1);
	apf_runlog *l;
	assert_int_equal(apf_runlog_create(&l, path), APF_EINPUT);
	assert_apf_ok(apf_runlog_open_append(&l, path, 0, NULL));
	json_t *f = json_pack("{s:i}", "seq", 99);
	assert_int_equal(apf_runlog_append(l, 1, "x", f, 0), APF_EINTERNAL);
	json_decref(f);
	assert_int_equal(apf_runlog_count(l), 1);
	apf_runlog_close(l);
	assert_apf_ok(apf_runlog_read(NULL, path, NULL, NULL));
	free(path);
	testlib_tmpdir_free(dir);
}

/* A log longer than one reading batch (16384 lines): every record is seen
 * in order, a broken line past the first batch is named, and a torn tail
 * there is cut. Batches are sized by the lines a log holds, so both the
 * short and the long path are covered. */
static void log_longer_than_a_batch(void **state)
{
	(void)state;
	enum { N = 16384 + 700 };
	char *dir = testlib_tmpdir();
	apf_buf b = {0};
	char prev[65] = APF_RUNLOG_ZERO_HEAD;
	size_t line_start, broken_at = 0;
	for (int i = 0; i < N; i++) {
		line_start = b.len;
		assert_int_equal(apf_buf_printf(&b,
						"{\"seq\":%d,\"prev\":\"%s\","
						"\"t_ns\":%d,\"event\":\"step_block\","
						"\"step\":%d}",
						i, prev, 1000 + i, i),
				 0);
		assert_apf_ok(apf_sha256_hex(prev, b.data + line_start,
					     b.len - line_start));
		if (i == 16384 + 500)
			broken_at = b.len - 2; /* the last digit of "step" */
		assert_int_equal(apf_buf_puts(&b, "\n"), 0);
	}
	testlib_write(dir, "log.jsonl", b.data, b.len, 0644);
	char *path = apf_path_join(dir, "log.jsonl");
	struct seen s = {0};
	struct apf_runlog_summary sum;
	assert_apf_ok(apf_runlog_read(&sum, path, count_cb, &s));
	assert_int_equal(s.n, N);
	assert_string_equal(sum.head, prev);
	/* One changed digit in line 16885: the next line's prev breaks. */
	b.data[broken_at] ^= 1;
	testlib_write(dir, "log.jsonl", b.data, b.len, 0644);
	assert_int_equal(apf_runlog_read(NULL, path, NULL, NULL), APF_EVERIFY);
	assert_non_null(strstr(apf_error_message(), "line 16886: prev"));
	/* Restored, plus a torn line: cut on reopening, all records kept. */
	b.data[broken_at] ^= 1;
	assert_int_equal(apf_buf_puts(&b, "{\"seq\":"), 0);
	testlib_write(dir, "log.jsonl", b.data, b.len, 0644);
	apf_runlog *l;
	uint64_t cut;
	assert_apf_ok(apf_runlog_open_append(&l, path, 1, &cut));
	assert_int_equal(cut, 7);
	assert_int_equal(apf_runlog_count(l), N);
	assert_apf_ok(apf_runlog_close(l));
	apf_buf_free(&b);
	free(path);
	testlib_tmpdir_free(dir);
}

static void pad(apf_buf *b, char c, size_t n)
{
	char *p = malloc(n + 1);
	assert_non_null(p);
	memset(p, c, n);
	assert_int_equal(apf_buf_append(b, p, n), 0);
	free(p);
}

/* Appends record i, padded to exactly len bytes before its newline. */
static void add_record(apf_buf *b, char prev[65], int i, size_t len)
{
	size_t start = b->len;
	assert_int_equal(apf_buf_printf(b,
					"{\"seq\":%d,\"prev\":\"%s\",\"t_ns\":%d,"
					"\"event\":\"step_block\",\"step\":%d,"
					"\"pad\":\"",
					i, prev, 1000 + i, i),
			 0);
	size_t head = b->len - start;
	assert_true(len >= head + 2);
	pad(b, 'x', len - 2 - head);
	assert_int_equal(apf_buf_puts(b, "\"}"), 0);
	assert_int_equal(b->len - start, len);
	assert_apf_ok(apf_sha256_hex(prev, b->data + start, len));
	assert_int_equal(apf_buf_puts(b, "\n"), 0);
}

/* The reader takes the file a buffer (4 MiB) at a time: lines of every
 * length up to the limit, across buffer ends, read back whole; a line of
 * the limit's length is refused by number past the first buffer; a torn
 * last line longer than a buffer is still known as torn and cut whole. */
static void lines_of_any_length_across_buffers(void **state)
{
	(void)state;
	enum { N = 90, LIMIT = 1 << 20 };
	char *dir = testlib_tmpdir();
	char *path = apf_path_join(dir, "log.jsonl");
	apf_buf b = {0};
	char prev[65] = APF_RUNLOG_ZERO_HEAD;
	for (int i = 0; i < N; i++)
		add_record(&b, prev, i,
			   i == 20 ? LIMIT - 1
				   : 200 + (size_t)i * 7919 % 300000);
	assert_true(b.len > (12u << 20));
	testlib_write(dir, "log.jsonl", b.data, b.len, 0644);
	struct seen s = {0};
	struct apf_runlog_summary sum;
	assert_apf_ok(apf_runlog_read(&sum, path, count_cb, &s));
	assert_int_equal(s.n, N);
	assert_string_equal(sum.head, prev);
	assert_int_equal(sum.torn_bytes, 0);

	/* A line of the limit's length, the 91st, 12 MiB in. */
	size_t good = b.len;
	char head[65];
	memcpy(head, prev, 65);
	add_record(&b, prev, N, LIMIT);
	add_record(&b, prev, N + 1, 300);
	testlib_write(dir, "log.jsonl", b.data, b.len, 0644);
	assert_int_equal(apf_runlog_read(&sum, path, NULL, NULL), APF_EVERIFY);
	assert_non_null(strstr(apf_error_message(),
			       "line 91: longer than 1048576 bytes"));
	assert_int_equal(sum.torn_bytes, 0);

	/* A torn last line of 5 MiB, longer than a buffer. */
	b.len = good;
	memcpy(prev, head, 65);
	size_t torn = (size_t)5 << 20;
	assert_int_equal(apf_buf_printf(&b, "{\"seq\":%d,\"prev\":\"", N), 0);
	pad(&b, '0', good + torn - b.len);
	testlib_write(dir, "log.jsonl", b.data, b.len, 0644);
	assert_int_equal(apf_runlog_walk(&sum, path,
					 &(struct apf_runlog_read_opts){0}),
			 APF_EVERIFY);
	assert_non_null(strstr(apf_error_message(), "line 91: torn"));
	assert_int_equal(sum.torn_bytes, torn);
	apf_runlog *l;
	uint64_t cut;
	assert_apf_ok(apf_runlog_open_append(&l, path, 1, &cut));
	assert_int_equal(cut, torn);
	assert_int_equal(apf_runlog_count(l), N);
	assert_apf_ok(apf_runlog_close(l));
	s = (struct seen){0};
	assert_apf_ok(apf_runlog_read(&sum, path, count_cb, &s));
	assert_int_equal(s.n, N);
	assert_string_equal(sum.head, head);
	apf_buf_free(&b);
	free(path);
	testlib_tmpdir_free(dir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(written_log_reads_back_with_chain),
		cmocka_unit_test(tampering_names_the_line),
		cmocka_unit_test(torn_tail_is_cut_and_chain_continues),
		cmocka_unit_test(reserved_keys_and_existing_logs_are_refused),
		cmocka_unit_test(log_longer_than_a_batch),
		cmocka_unit_test(lines_of_any_length_across_buffers),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
