/*
 * test_rundir_csv.c: the run directory's one CSV reader
 * (apf_rundir_csv_parse), which the verifier and the scorer both read
 * eval_measurements.csv with: what it reads (quotes, CRLF, a byte-order
 * mark, blank lines, the physical line of every row), what it refuses and
 * where (broken quoting, a NUL byte, a column named twice), and what it
 * leaves to its callers (a row's width, what a cell means), shown through
 * the scorer.
 */
#include "testlib.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "rundir/rundir.h"
#include "score/score.h"

static apf_rundir_csv *parse_ok(const char *text)
{
	apf_rundir_csv *t = NULL;
	struct apf_rundir_csv_fault fault;
	assert_apf_ok(apf_rundir_csv_parse(&t, &fault, text, strlen(text),
					   "d.csv"));
	assert_int_equal(fault.kind, 0);
	assert_non_null(t);
	return t;
}

/* The text is refused: APF_EINPUT, the message, and the fault. */
static void expect_fault(const char *text, size_t len, int kind, long line,
			 const char *message)
{
	apf_rundir_csv *t = (apf_rundir_csv *)1;
	struct apf_rundir_csv_fault fault;
	assert_int_equal(apf_rundir_csv_parse(&t, &fault, text, len, "d.csv"),
			 APF_EINPUT);
	assert_null(t);
	assert_int_equal(fault.kind, kind);
	assert_int_equal(fault.line, line);
	if (strcmp(apf_error_message(), message))
		fail_msg("got '%s', want '%s'", apf_error_message(), message);
	/* The fault is optional. */
	assert_int_equal(apf_rundir_csv_parse(&t, NULL, text, len, "d.csv"),
			 APF_EINPUT);
	assert_string_equal(apf_error_message(), message);
}

static void reads_quotes_crlf_bom_and_blank_lines(void **state)
{
	(void)state;
	const char *text = "\xef\xbb\xbf\r\n"
			   "\"a\",b,\"c,d\"\r\n"
			   "1,\"x \"\"y\"\"\",\r\n"
			   " \t\r\n"
			   "2,\"two\nlines\",3\r\n"
			   "\n"
			   "4,5,6";
	apf_rundir_csv *t = parse_ok(text);
	assert_int_equal(t->header_line, 2);
	assert_int_equal(t->ncols, 3);
	assert_string_equal(t->header[0], "a");
	assert_string_equal(t->header[1], "b");
	assert_string_equal(t->header[2], "c,d");
	assert_int_equal(apf_rundir_csv_column(t, "c,d"), 2);
	assert_int_equal(apf_rundir_csv_column(t, "c"), -1);
	assert_int_equal(t->nrows, 3);
	assert_int_equal(t->rows[0].line, 3);
	assert_string_equal(t->rows[0].cell[1], "x \"y\"");
	assert_string_equal(t->rows[0].cell[2], "");
	/* The blank line between is skipped, and counted. */
	assert_int_equal(t->rows[1].line, 5);
	assert_string_equal(t->rows[1].cell[1], "two\nlines");
	/* The quoted newline moves the rows after it. */
	assert_int_equal(t->rows[2].line, 8);
	assert_int_equal(t->rows[2].n, 3);
	assert_string_equal(t->rows[2].cell[2], "6");
	/* An unended last line counts. */
	assert_int_equal(t->lines, 8);
	apf_rundir_csv_free(t);
}

static void header_alone_has_no_rows_and_blanks_no_header(void **state)
{
	(void)state;
	apf_rundir_csv *t = parse_ok("score,validation/accuracy\n");
	assert_int_equal(t->header_line, 1);
	assert_int_equal(t->ncols, 2);
	assert_int_equal(t->nrows, 0);
	assert_int_equal(t->lines, 1);
	apf_rundir_csv_free(t);
	/* What a header alone means is the caller's: no eval for the
	 * scorer, too few for a verifier whose log has evals. */
	const struct apf_score_target acc = {"accuracy", 1, 0.8, 0};
	long evals, hit;
	double time;
	const char *h = "score,validation/accuracy\n";
	assert_apf_ok(apf_score_parse_trial(h, strlen(h), "h.csv", &acc, &evals,
					    &hit, &time));
	assert_int_equal(evals, 0);
	assert_int_equal(hit, -1);
	for (int i = 0; i < 3; i++) {
		const char *blank[] = {"", "\n\n", "\xef\xbb\xbf \r\n\t\n"};
		t = parse_ok(blank[i]);
		assert_null(t->header);
		assert_int_equal(t->header_line, 0);
		assert_int_equal(t->ncols, 0);
		assert_int_equal(t->nrows, 0);
		apf_rundir_csv_free(t);
	}
	assert_int_equal(apf_score_parse_trial("\n\n", 2, "e.csv", &acc,
					       &evals, &hit, &time),
			 APF_EINPUT);
	assert_string_equal(apf_error_message(),
			    "score: e.csv: empty file (no header line)");
}

static void short_and_long_rows_are_left_to_the_caller(void **state)
{
	(void)state;
	apf_rundir_csv *t = parse_ok("score,validation/accuracy\n1\n2,0.5,9\n");
	assert_int_equal(t->nrows, 2);
	assert_int_equal(t->rows[0].n, 1);
	assert_int_equal(t->rows[1].n, 3);
	apf_rundir_csv_free(t);
	/* The scorer pads a short row with empty values, as pandas does, so a
	 * clock missing from it is refused; a long row is malformed. */
	const struct apf_score_target acc = {"accuracy", 1, 0.8, 0};
	long evals, hit;
	double time;
	const char *short_metric = "score,validation/accuracy\n1\n2,0.9\n";
	assert_apf_ok(apf_score_parse_trial(short_metric, strlen(short_metric),
					    "s.csv", &acc, &evals, &hit,
					    &time));
	assert_int_equal(evals, 2);
	assert_int_equal(hit, 1);
	assert_true(time == 2);
	const char *short_clock = "validation/accuracy,score\n0.9\n";
	assert_int_equal(apf_score_parse_trial(short_clock, strlen(short_clock),
					       "s.csv", &acc, &evals, &hit,
					       &time),
			 APF_EINPUT);
	assert_string_equal(apf_error_message(),
			    "score: s.csv:2: column 'score': empty; a number "
			    "is required");
	const char *wide = "score,validation/accuracy\n1,0.5,9\n";
	assert_int_equal(apf_score_parse_trial(wide, strlen(wide), "w.csv",
					       &acc, &evals, &hit, &time),
			 APF_EINPUT);
	assert_string_equal(apf_error_message(),
			    "score: w.csv:2: more fields than the 2 columns "
			    "of the header");
}

static void cells_are_text_and_numbers_the_callers_rule(void **state)
{
	(void)state;
	apf_rundir_csv *t = parse_ok("score,validation/accuracy\n1,abc\n");
	assert_string_equal(t->rows[0].cell[1], "abc");
	apf_rundir_csv_free(t);
	const struct apf_score_target acc = {"accuracy", 1, 0.8, 0};
	long evals, hit;
	double time;
	const char *text = "score,validation/accuracy\n1,0.5\n2,abc\n";
	assert_int_equal(apf_score_parse_trial(text, strlen(text), "n.csv",
					       &acc, &evals, &hit, &time),
			 APF_EINPUT);
	assert_string_equal(apf_error_message(),
			    "score: n.csv:3: column 'validation/accuracy': "
			    "'abc' is not a plain decimal number");
}

static void column_named_twice_is_refused(void **state)
{
	(void)state;
	const char *dup = "\n\nscore,a,b,a,b\n1,2,3,4,5\n";
	expect_fault(dup, strlen(dup), APF_RUNDIR_CSV_TWICE,
		     3, "d.csv:3: column 'a' appears twice");
	struct apf_rundir_csv_fault fault;
	apf_rundir_csv *t;
	const char *text = "x,y,x\n";
	assert_int_equal(apf_rundir_csv_parse(&t, &fault, text, strlen(text),
					      "d.csv"),
			 APF_EINPUT);
	assert_string_equal(fault.column, "x");
	/* A wide header is checked without comparing every pair: 200,000
	 * columns, the last one a repeat of the first. */
	enum { N = 200000 };
	apf_buf b = {0};
	for (int i = 0; i < N; i++)
		assert_int_equal(apf_buf_printf(&b, "c%d,", i), 0);
	assert_int_equal(apf_buf_puts(&b, "c0\n"), 0);
	assert_int_equal(apf_rundir_csv_parse(&t, &fault, b.data, b.len,
					      "wide.csv"),
			 APF_EINPUT);
	assert_int_equal(fault.kind, APF_RUNDIR_CSV_TWICE);
	assert_string_equal(fault.column, "c0");
	apf_buf_free(&b);
	/* The same name in a data row is only a value. */
	t = parse_ok("a,b\nx,x\n");
	apf_rundir_csv_free(t);
}

static void broken_quoting_is_refused_at_its_line(void **state)
{
	(void)state;
	const char *never = "a,b\n1,\"2\n3\n";
	expect_fault(never, strlen(never), APF_RUNDIR_CSV_QUOTING, 2,
		     "d.csv:2: quoted field never closed");
	const char *after = "a,b\n1,\"2\n3\"x\n";
	expect_fault(after, strlen(after), APF_RUNDIR_CSV_QUOTING, 3,
		     "d.csv:3: text after a closing quote");
	const char *inside = "a,b\n\n1,2\"3\n";
	expect_fault(inside, strlen(inside), APF_RUNDIR_CSV_QUOTING, 3,
		     "d.csv:3: quote inside an unquoted field");
	/* In the header too. */
	const char *head = "a,\"b\n";
	expect_fault(head, strlen(head), APF_RUNDIR_CSV_QUOTING, 1,
		     "d.csv:1: quoted field never closed");
	/* A closing quote before CRLF or the end is fine. */
	apf_rundir_csv *t = parse_ok("a,\"b\"\r\n\"1\",\"2\"");
	assert_string_equal(t->rows[0].cell[1], "2");
	apf_rundir_csv_free(t);
}

static void nul_byte_is_refused(void **state)
{
	(void)state;
	const char text[] = "a,b\n1,2\0junk\n";
	expect_fault(text, sizeof text - 1, APF_RUNDIR_CSV_NUL, 0,
		     "d.csv: holds a NUL byte; not a CSV file");
}

/* The writer (apf_rundir_write_csv): a metric a row lacks, because its
 * value was not finite and the log's JSON could not hold it, is an empty
 * cell that the scorer reads as NaN, never 0 (which would meet a
 * minimised target the trial never reached). */
static void a_metric_the_log_lacks_is_an_empty_cell(void **state)
{
	(void)state;
	json_error_t je;
	json_t *rows = json_loads(
		"[{\"global_step\": 1, \"preemption_count\": 0, "
		"\"accumulated_eval_ns\": 1000000000, "
		"\"accumulated_logging_ns\": 0, "
		"\"accumulated_submission_ns\": 2000000000, "
		"\"total_duration_ns\": 3000000000, \"metrics\": "
		"{\"validation/cross_entropy\": 5.5, "
		"\"validation/perplexity\": 244.69, "
		"\"validation/num_examples\": 125}},"
		" {\"global_step\": 75, \"preemption_count\": 0, "
		"\"accumulated_eval_ns\": 2000000000, "
		"\"accumulated_logging_ns\": 0, "
		"\"accumulated_submission_ns\": 5000000000, "
		"\"total_duration_ns\": 7000000000, \"metrics\": "
		"{\"validation/num_examples\": 125}}]",
		0, &je);
	assert_non_null(rows);
	char dir[] = "/tmp/apf-csv-XXXXXX";
	assert_non_null(mkdtemp(dir));
	char path[64];
	snprintf(path, sizeof path, "%s/e.csv", dir);
	assert_apf_ok(apf_rundir_write_csv(path, rows));
	char *text = NULL;
	size_t len = 0;
	assert_apf_ok(apf_file_read(&text, &len, path, 1 << 20));
	apf_rundir_csv *t = parse_ok(text);
	assert_int_equal(t->nrows, 2);
	long ce = apf_rundir_csv_column(t, "validation/cross_entropy");
	long pp = apf_rundir_csv_column(t, "validation/perplexity");
	long n = apf_rundir_csv_column(t, "validation/num_examples");
	assert_true(ce >= 0 && pp >= 0 && n >= 0);
	assert_string_equal(t->rows[0].cell[ce], "5.5");
	assert_string_equal(t->rows[1].cell[ce], "");
	assert_string_equal(t->rows[1].cell[pp], "");
	assert_string_equal(t->rows[1].cell[n], "125");
	apf_rundir_csv_free(t);
	free(text);
	unlink(path);
	rmdir(dir);
	json_decref(rows);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(reads_quotes_crlf_bom_and_blank_lines),
		cmocka_unit_test(header_alone_has_no_rows_and_blanks_no_header),
		cmocka_unit_test(short_and_long_rows_are_left_to_the_caller),
		cmocka_unit_test(cells_are_text_and_numbers_the_callers_rule),
		cmocka_unit_test(column_named_twice_is_refused),
		cmocka_unit_test(broken_quoting_is_refused_at_its_line),
		cmocka_unit_test(nul_byte_is_refused),
		cmocka_unit_test(a_metric_the_log_lacks_is_an_empty_cell),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
