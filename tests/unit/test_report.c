/*
 * test_report.c: the page builder's pieces that untrusted input passes
 * through (HTML text and JSON in <script>) and the curves it draws: what a
 * trial's CSV gives (missing columns, empty and malformed cells), and the
 * SVG path of a polyline (whole pixels, points closer than the tolerance
 * left out but never the last, breaks at missing values).
 */
#include "testlib.h"

#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "report/report.h"

static char *html(const char *s)
{
	apf_buf b = {0};
	assert_apf_ok(apf_report_html_text(&b, s));
	return b.data ? b.data : strdup("");
}

static void markup_is_text(void **state)
{
	(void)state;
	char *t = html("<script>alert(1)</script>");
	assert_string_equal(t, "&lt;script&gt;alert(1)&lt;/script&gt;");
	free(t);
	t = html("a\"b'c&d");
	assert_string_equal(t, "a&quot;b&#39;c&amp;d");
	free(t);
	t = html("&amp;");
	assert_string_equal(t, "&amp;amp;");
	free(t);
	t = html(NULL);
	assert_string_equal(t, "");
	free(t);
}

static void controls_and_bad_utf8_become_replacement(void **state)
{
	(void)state;
	/* Tab and newline stay; ESC, DEL, a lone continuation byte, an
	 * overlong form, a surrogate and a cut sequence do not. */
	char *t = html("a\tb\nc\x1b[0m\x7f");
	assert_string_equal(t, "a\tb\nc\xef\xbf\xbd[0m\xef\xbf\xbd");
	free(t);
	t = html("\x80x\xc0\xafy\xed\xa0\x80z\xe2\x82");
#define R "\xef\xbf\xbd"
	assert_string_equal(t, R "x" R R "y" R R R "z" R R);
#undef R
	free(t);
	/* Valid multibyte text is kept as it is. */
	t = html("\xc3\xa9t\xc3\xa9 \xe2\x89\xa5 \xf0\x9f\x93\x88");
	assert_string_equal(t, "\xc3\xa9t\xc3\xa9 \xe2\x89\xa5 \xf0\x9f\x93\x88");
	free(t);
}

static void json_in_script_cannot_end_the_script(void **state)
{
	(void)state;
	json_t *o = json_pack("{s:s, s:[s]}", "name", "</script><b>&</b>",
			      "x", "\xe2\x80\xa8line");
	char *text = json_dumps(o, JSON_COMPACT);
	apf_buf b = {0};
	assert_apf_ok(apf_report_json_script(&b, text));
	assert_null(strchr(b.data, '<'));
	assert_null(strchr(b.data, '>'));
	assert_null(strchr(b.data, '&'));
	assert_null(strstr(b.data, "\xe2\x80\xa8"));
	/* It reads back to the same value. */
	json_t *back = json_loads(b.data, 0, NULL);
	assert_non_null(back);
	assert_true(json_equal(o, back));
	json_decref(back);
	json_decref(o);
	free(text);
	apf_buf_free(&b);
}

static char *path_of(const double *x, const double *y, size_t n, double tol)
{
	apf_buf b = {0};
	assert_apf_ok(apf_report_svg_path(&b, x, y, n, tol));
	return b.data ? b.data : strdup("");
}

static void path_is_relative_whole_pixels(void **state)
{
	(void)state;
	const double x[] = {10.4, 20.6, 30.5, 40};
	const double y[] = {100, 90.2, 95, 50};
	char *p = path_of(x, y, 4, 1);
	/* 10,100 -> 21,90 -> 31,95 (30.5 rounds away) -> 40,50 */
	assert_string_equal(p, "M10 100l11-10l10 5l9-45");
	free(p);
}

static void close_points_are_left_out_but_not_the_last(void **state)
{
	(void)state;
	const double x[] = {0, 1, 2, 3, 4, 5};
	const double y[] = {0, 0, 1, 1, 1, 2};
	char *p = path_of(x, y, 6, 3);
	/* (1,0) and (2,1) are within 3 px of (0,0); (3,1) is not; (4,1)
	 * is within 3 px of it, and the last point is kept anyway. */
	assert_string_equal(p, "M0 0l3 1l2 1");
	free(p);
	p = path_of(x, y, 6, 1);
	assert_string_equal(p, "M0 0l1 0l1 1l1 0l1 0l1 1");
	free(p);
	/* A point on the last one kept adds nothing. */
	const double same[] = {3, 3, 3};
	p = path_of(same, same, 3, 1);
	assert_string_equal(p, "M3 3");
	free(p);
}

static void missing_values_break_the_line(void **state)
{
	(void)state;
	const double x[] = {0, 10, 20, 30, 40};
	const double y[] = {0, 10, NAN, 30, INFINITY};
	char *p = path_of(x, y, 5, 1);
	assert_string_equal(p, "M0 0l10 10M30 30");
	free(p);
	const double none[] = {NAN, NAN};
	p = path_of(none, none, 2, 1);
	assert_string_equal(p, "");
	free(p);
}

static void curve_reads_the_columns_that_are_there(void **state)
{
	(void)state;
	char *dir = testlib_tmpdir();
	testlib_write_str(dir, "eval_measurements.csv",
			  "global_step,score,train/accuracy,validation/accuracy,"
			  "validation/loss\n"
			  "1,0.5,0.1,0.12,2.3\n"
			  "100,1.5,,0.5,1\n"
			  "200,2.5,0.9,nan,0.5\n"
			  "300,3.5,0.95,0x1p0,0.4\n");
	char *csv = apf_path_join(dir, "eval_measurements.csv");
	struct apf_report_curve c;
	assert_apf_ok(apf_report_curve_read(&c, csv, "accuracy"));
	assert_int_equal(c.n, 4);
	assert_true(c.has_step);
	assert_true(c.has_train);
	assert_false(c.has_test);
	assert_true(c.step[1] == 100);
	assert_true(c.time[3] == 3.5);
	assert_true(c.val[0] == 0.12);
	assert_true(isnan(c.train[1])); /* empty */
	assert_true(isnan(c.val[2]));   /* nan */
	/* Hex is no plain decimal (strtod would read it): not drawn. */
	assert_true(isnan(c.val[3]));
	assert_true(isnan(c.test[0]));
	apf_report_curve_free(&c);
	free(csv);

	/* accumulated_submission_time stands in for score. */
	testlib_write_str(dir, "b.csv",
			  "accumulated_submission_time,validation/wer\n"
			  "7,0.3\n");
	csv = apf_path_join(dir, "b.csv");
	assert_apf_ok(apf_report_curve_read(&c, csv, "wer"));
	assert_int_equal(c.n, 1);
	assert_false(c.has_step);
	assert_true(c.time[0] == 7);
	assert_true(c.val[0] == 0.3);
	apf_report_curve_free(&c);
	free(csv);

	/* No file: an error naming it. */
	csv = apf_path_join(dir, "none.csv");
	assert_int_equal(apf_report_curve_read(&c, csv, "wer"), APF_EINPUT);
	apf_error_clear();
	free(csv);
	testlib_tmpdir_free(dir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(markup_is_text),
		cmocka_unit_test(controls_and_bad_utf8_become_replacement),
		cmocka_unit_test(json_in_script_cannot_end_the_script),
		cmocka_unit_test(path_is_relative_whole_pixels),
		cmocka_unit_test(close_points_are_left_out_but_not_the_last),
		cmocka_unit_test(missing_values_break_the_line),
		cmocka_unit_test(curve_reads_the_columns_that_are_there),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
