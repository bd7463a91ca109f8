/*
 * test_config.c: INI parsing through libinih: typed values, line numbers in
 * errors, long lines, repeated keys, unknown keys, lists.
 */
#include "testlib.h"

#include <stdlib.h>
#include <string.h>

#include "config/config.h"

static const char *sample = "; a workload\n"
			    "[workload]\n"
			    "name = fmnist_mlp\n"
			    "metric = accuracy   ; inline comment\n"
			    "\n"
			    "[budget.cpu]\n"
			    "minutes = 2.5\n"
			    "eval_period_s = 10\n"
			    "[variant.gelu]\n"
			    "activation = gelu\n"
			    "[empty]\n";

static void typed_values_and_lines(void **state)
{
	(void)state;
	apf_config *c;
	assert_apf_ok(apf_config_parse(&c, sample, "w.ini"));
	const char *s;
	double d;
	long l;
	assert_apf_ok(apf_config_string(&s, c, "workload", "name"));
	assert_string_equal(s, "fmnist_mlp");
	assert_apf_ok(apf_config_string(&s, c, "workload", "metric"));
	assert_string_equal(s, "accuracy");
	assert_apf_ok(apf_config_double(&d, c, "budget.cpu", "minutes"));
	assert_true(d == 2.5);
	assert_apf_ok(apf_config_long(&l, c, "budget.cpu", "eval_period_s"));
	assert_int_equal(l, 10);
	assert_int_equal(apf_config_line(c, "budget.cpu", "minutes"), 7);
	assert_int_equal(apf_config_line(c, "variant.gelu", NULL), 9);
	assert_int_equal(apf_config_nsections(c), 4);
	assert_string_equal(apf_config_section(c, 3), "empty");
	assert_true(apf_config_has_section(c, "empty"));
	assert_string_equal(apf_config_key(c, "budget.cpu", 1), "eval_period_s");
	assert_null(apf_config_key(c, "budget.cpu", 2));
	l = 7;
	assert_apf_ok(apf_config_opt_long(&l, c, "budget.cpu", "absent"));
	assert_int_equal(l, 7);
	apf_config_free(c);
}

static void errors_name_file_line_section_key(void **state)
{
	(void)state;
	apf_config *c;
	assert_apf_ok(apf_config_parse(
		&c, "[a]\nx = 1\n\n[b]\nminutes = ten\n", "w.ini"));
	double d;
	assert_int_equal(apf_config_double(&d, c, "b", "minutes"), APF_EINPUT);
	assert_string_equal(apf_error_message(),
			    "w.ini: line 5: [b] minutes: expected a finite "
			    "number, got 'ten'");
	assert_int_equal(apf_config_double(&d, c, "b", "hours"), APF_EINPUT);
	assert_string_equal(apf_error_message(), "w.ini: [b] hours: missing");
	const char *const allowed[] = {"minutes", NULL};
	assert_apf_ok(apf_config_check_keys(c, "b", allowed));
	assert_int_equal(apf_config_check_keys(c, "a", allowed), APF_EINPUT);
	assert_string_equal(apf_error_message(), "w.ini: line 2: [a] x: unknown key");
	apf_config_free(c);
}

static void syntax_errors_and_repeats(void **state)
{
	(void)state;
	apf_config *c;
	assert_int_equal(apf_config_parse(&c, "[a]\nx = 1\nnot a pair\n", "s.ini"),
			 APF_EINPUT);
	assert_non_null(strstr(apf_error_message(), "s.ini: line 3: syntax error"));
	assert_null(c);
	assert_int_equal(apf_config_parse(&c, "[a]\nx = 1\ny=2\nx = 3\n", "s.ini"),
			 APF_EINPUT);
	assert_string_equal(apf_error_message(),
			    "s.ini: line 4: [a] x: set twice (first on line 2)");
	assert_int_equal(apf_config_parse(&c, "x = 1\n", "s.ini"), APF_EINPUT);
	assert_non_null(strstr(apf_error_message(), "outside any [section]"));
}

static void lines_longer_than_inih_default_parse(void **state)
{
	(void)state;
	size_t n = 100000;
	char *text = malloc(n + 64);
	strcpy(text, "[s]\nlong = ");
	size_t off = strlen(text);
	for (size_t i = 0; i < n; i++)
		text[off + i] = (char)('a' + i % 26);
	strcpy(text + off + n, "\nafter = 2\n");
	apf_config *c;
	assert_apf_ok(apf_config_parse(&c, text, "long.ini"));
	const char *v;
	assert_apf_ok(apf_config_string(&v, c, "s", "long"));
	assert_int_equal(strlen(v), n);
	assert_int_equal(v[n - 1], 'a' + (n - 1) % 26);
	assert_int_equal(apf_config_line(c, "s", "after"), 3);
	apf_config_free(c);
	free(text);
}

static void lists_split_and_trim(void **state)
{
	(void)state;
	apf_config *c;
	assert_apf_ok(apf_config_parse(
		&c, "[s]\nfp = 0.1, 0.2 ,0.3\nbad = 1,,2\n", "l.ini"));
	char **items;
	size_t n;
	assert_apf_ok(apf_config_list(c, "s", "fp", &items, &n));
	assert_int_equal(n, 3);
	assert_string_equal(items[1], "0.2");
	assert_string_equal(items[2], "0.3");
	apf_config_list_free(items, n);
	assert_int_equal(apf_config_list(c, "s", "bad", &items, &n), APF_EINPUT);
	assert_non_null(strstr(apf_error_message(), "line 3"));
	apf_config_free(c);
}

static void load_reports_missing_file(void **state)
{
	(void)state;
	apf_config *c;
	assert_int_equal(apf_config_load(&c, "/nonexistent/w.ini"), APF_EINPUT);
	assert_non_null(strstr(apf_error_message(), "/nonexistent/w.ini: open"));
}

static void set_replaces_or_adds(void **state)
{
	(void)state;
	apf_config *c;
	assert_apf_ok(apf_config_parse(&c, "[model]\ndropout = 0.2\n", "s.ini"));
	assert_apf_ok(apf_config_set(c, "model", "dropout", "0.1"));
	assert_apf_ok(apf_config_set(c, "model", "label_smoothing", "0.2"));
	assert_apf_ok(apf_config_set(c, "new", "k", "v"));
	assert_string_equal(apf_config_get(c, "model", "dropout"), "0.1");
	assert_string_equal(apf_config_get(c, "model", "label_smoothing"), "0.2");
	assert_true(apf_config_has_section(c, "new"));
	assert_int_equal(apf_config_line(c, "model", "label_smoothing"), 0);
	apf_config_free(c);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(typed_values_and_lines),
		cmocka_unit_test(errors_name_file_line_section_key),
		cmocka_unit_test(syntax_errors_and_repeats),
		cmocka_unit_test(lines_longer_than_inih_default_parse),
		cmocka_unit_test(lists_split_and_trim),
		cmocka_unit_test(load_reports_missing_file),
		cmocka_unit_test(set_replaces_or_adds),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
