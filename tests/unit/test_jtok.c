/*
 * test_jtok.c: the log reader's strict JSON tokens (pkg/runlog/jtok.c) and
 * the walk that hands them out: the reader accepts exactly what RFC 8259
 * (and jansson with JSON_REJECT_DUPLICATES) accepts, numbers convert as
 * strtod converts them, a line of a form seen before (apf_jtok_parse_like)
 * gets the same answer and tokens as from the full parse, and the
 * pipelined walk gives every line its own prepared slot, in order, across
 * batch boundaries.
 */
#include "testlib.h"

#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "runlog/runlog.h"

static int parses(const char *s, size_t *ntok)
{
	size_t len = strlen(s), n = 0;
	struct apf_jtok *t = calloc(len / 2 + 2, sizeof *t);
	const char *why = NULL;
	int rc = apf_jtok_parse(s, len, t, len / 2 + 2, &n, &why);
	if (rc == 0 && ntok)
		*ntok = n;
	if (rc)
		assert_non_null(why);
	free(t);
	return rc == 0;
}

static void tokens_describe_the_tree(void **state)
{
	(void)state;
	const char *s = "{\"a\":[1,{\"b\":null},\"x\"],\"c\":true,\"d\":{}}";
	struct apf_jtok t[32];
	size_t n;
	const char *why;
	assert_int_equal(apf_jtok_parse(s, strlen(s), t, 32, &n, &why), 0);
	/* {a:[1,{b:null},"x"], c:true, d:{}}: obj, a, arr, 1, obj, b, null,
	 * "x", c, true, d, obj */
	assert_int_equal(n, 12);
	assert_int_equal(t[0].type, APF_JOBJECT);
	assert_int_equal(t[0].size, 3);
	assert_int_equal(t[0].next, 12);
	assert_int_equal(t[2].type, APF_JARRAY);
	assert_int_equal(t[2].size, 3);
	assert_int_equal(t[2].next, 8);
	assert_int_equal(t[4].next, 7);
	long c = apf_jtok_get(s, t, 0, "c");
	assert_int_equal(c, 9);
	assert_int_equal(t[c].type, APF_JTRUE);
	assert_int_equal(apf_jtok_get(s, t, 0, "zz"), -1);
	long d = apf_jtok_get(s, t, 0, "d");
	assert_int_equal(t[d].type, APF_JOBJECT);
	assert_int_equal(t[d].size, 0);
	assert_true(apf_jtok_eq(s, &t[7], "x"));
	assert_false(apf_jtok_eq(s, &t[7], "xy"));
	/* Too few tokens is an error, not an overflow. */
	assert_int_equal(apf_jtok_parse(s, strlen(s), t, 5, &n, &why), -1);
}

/* Each accepted or refused exactly as RFC 8259 says. */
static void strict_as_the_rfc(void **state)
{
	(void)state;
	static const char *const good[] = {
		"{}", "[]", " {\"a\" : 1 } ", "{\"a\":-0}", "{\"a\":0.5e-3}",
		"{\"a\":1E+2}", "{\"a\":\"\\u00e9\\ud83d\\ude00\\\"\\\\\\/\\b\\f\\n\\r\\t\"}",
		"{\"a\":\"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80\"}",
		"[[[[[[[[[[]]]]]]]]]]", "\"s\"", "12", "{\"a\":\"\\u0041\",\"b\":\"A\"}",
		"{\"\":1}", NULL};
	static const char *const bad[] = {
		"", "{", "{\"a\"}", "{\"a\":}", "{\"a\":1,}", "[1,]", "{a:1}",
		"{'a':1}", "{\"a\":01}", "{\"a\":1.}", "{\"a\":.5}", "{\"a\":+1}",
		"{\"a\":1e}", "{\"a\":-}", "{\"a\":NaN}", "{\"a\":Infinity}",
		"{\"a\":tru}", "{\"a\":nul}", "{\"a\":\"\x01\"}", "{\"a\":\"\t\"}",
		"{\"a\":\"\\x\"}", "{\"a\":\"\\u12\"}", "{\"a\":\"\\u0000\"}",
		"{\"a\":\"\\ud800\"}", "{\"a\":\"\\udc00\"}",
		"{\"a\":\"\\ud800\\u0041\"}", "{\"a\":\"\xc0\xaf\"}",
		"{\"a\":\"\xe0\x80\xaf\"}", "{\"a\":\"\xed\xa0\x80\"}",
		"{\"a\":\"\xf4\x90\x80\x80\"}", "{\"a\":\"\xff\"}",
		"{\"a\":\"\xc3\"}", "{\"a\":1} x", "{\"a\":1}{}", "{\"a\":1,\"a\":2}",
		"{\"a\":1,\"\\u0061\":2}", "{\"x\":{\"k\":1,\"k\":1}}", "{\"a\":\"unclosed}",
		NULL};
	for (int i = 0; good[i]; i++)
		if (!parses(good[i], NULL))
			fail_msg("refused valid JSON: %s", good[i]);
	for (int i = 0; bad[i]; i++)
		if (parses(bad[i], NULL))
			fail_msg("accepted invalid JSON: %s", bad[i]);
	/* Nesting is bounded: MAX_DEPTH arrays in arrays parse, one more
	 * does not. */
	for (int extra = 0; extra < 2; extra++) {
		char deep[2 * APF_JTOK_MAX_DEPTH + 8];
		int d = APF_JTOK_MAX_DEPTH + extra;
		for (int i = 0; i < d; i++) {
			deep[i] = '[';
			deep[2 * d - 1 - i] = ']';
		}
		deep[2 * d] = 0;
		assert_int_equal(parses(deep, NULL), !extra);
	}
}

/* Agreement with jansson on many keys: duplicates found whatever the
 * filter's collisions, distinct keys never refused. */
static void duplicate_keys_are_found_among_many(void **state)
{
	(void)state;
	char buf[8192];
	srand(7);
	for (int round = 0; round < 300; round++) {
		size_t n = 0, keys = 2 + (size_t)(rand() % 60);
		n += (size_t)sprintf(buf + n, "{");
		for (size_t i = 0; i < keys; i++) {
			char key[16];
			int len = 1 + rand() % 4;
			for (int c = 0; c < len; c++)
				key[c] = (char)('a' + rand() % 3);
			key[len] = 0;
			n += (size_t)sprintf(buf + n, "%s\"%s\":%zu", i ? "," : "",
					     key, i);
		}
		n += (size_t)sprintf(buf + n, "}");
		json_error_t je;
		json_t *j = json_loadb(buf, n, JSON_REJECT_DUPLICATES, &je);
		int ours = parses(buf, NULL);
		if (ours != (j != NULL))
			fail_msg("jansson %s, jtok %s: %s", j ? "accepts" : "refuses",
				 ours ? "accepts" : "refuses", buf);
		json_decref(j);
	}
}

static void numbers_convert_as_strtod_does(void **state)
{
	(void)state;
	struct apf_jtok t[4];
	size_t n;
	const char *why;
	char text[64];
	srand(11);
	for (int i = 0; i < 200000; i++) {
		double x;
		switch (i % 4) {
		case 0: /* float32 values, as a model computes metrics */
			x = (float)((double)rand() / RAND_MAX);
			break;
		case 1:
			x = ((double)rand() / RAND_MAX - 0.5) * pow(10, rand() % 40 - 20);
			break;
		case 2:
			x = (double)(rand() % 100000) / 1000.0;
			break;
		default:
			x = (double)rand() * (double)rand();
		}
		static const char *const fmt[] = {"%.17g", "%.9g", "%.6f", "%.3e"};
		snprintf(text, sizeof text, fmt[(i / 4) % 4], x);
		assert_int_equal(apf_jtok_parse(text, strlen(text), t, 4, &n, &why), 0);
		double got;
		assert_int_equal(apf_jtok_double(&got, text, &t[0]), 0);
		double want = strtod(text, NULL);
		if (memcmp(&got, &want, sizeof got))
			fail_msg("%s: %.17g, strtod %.17g", text, got, want);
	}
	const char *huge = "1e400";
	assert_int_equal(apf_jtok_parse(huge, 5, t, 4, &n, &why), 0);
	double d;
	assert_int_equal(apf_jtok_double(&d, huge, &t[0]), -1);
}

static void integers_are_plain_digits_in_64_bits(void **state)
{
	(void)state;
	static const struct {
		const char *s;
		int ok;
		uint64_t v;
	} cases[] = {
		{"0", 1, 0},
		{"18446744073709551615", 1, UINT64_MAX},
		{"18446744073709551616", 0, 0},
		{"99999999999999999999", 0, 0},
		{"1234567890123456789", 1, 1234567890123456789ull},
		{"-1", 0, 0},
		{"1.0", 0, 0},
		{"1e3", 0, 0},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		struct apf_jtok t[2];
		size_t n;
		const char *why;
		const char *s = cases[i].s;
		assert_int_equal(apf_jtok_parse(s, strlen(s), t, 2, &n, &why), 0);
		uint64_t v = 7;
		int rc = apf_jtok_u64(&v, s, &t[0]);
		if ((rc == 0) != cases[i].ok || (rc == 0 && v != cases[i].v))
			fail_msg("%s: rc %d value %llu", s, rc, (unsigned long long)v);
	}
	/* Every length, where the text ends at the number and where more of
	 * it follows (the value is read a word at a time when it can be),
	 * with every digit in every place. */
	for (int len = 1; len <= 20; len++)
		for (int d = 0; d < 10; d++) {
			char digits[24], text[64];
			for (int k = 0; k < len; k++)
				digits[k] = (char)('0' + (k == 0 ? 1 + (d + 8) % 9
								  : (d + 3 * k) % 10));
			digits[len] = 0;
			uint64_t want = strtoull(digits, NULL, 10);
			int fits = len < 20 || strcmp(digits, "18446744073709551615") <= 0;
			for (int tail = 0; tail < 2; tail++) {
				snprintf(text, sizeof text, tail ? "[%s,\"pad..\"]" : "%s",
					 digits);
				struct apf_jtok t[4];
				size_t n;
				const char *why;
				assert_int_equal(apf_jtok_parse(text, strlen(text), t, 4, &n,
								&why), 0);
				uint64_t v = 7;
				int rc = apf_jtok_u64(&v, text, &t[tail]);
				if ((rc == 0) != fits || (fits && v != want))
					fail_msg("%s: rc %d value %llu", text, rc,
						 (unsigned long long)v);
			}
		}
}

static void strings_unescape_to_utf8(void **state)
{
	(void)state;
	const char *s = "{\"k\\u0065y\":\"a\\u00e9\\ud83d\\ude00\\n\\\"\"}";
	struct apf_jtok t[8];
	size_t n;
	const char *why;
	assert_int_equal(apf_jtok_parse(s, strlen(s), t, 8, &n, &why), 0);
	long v = apf_jtok_get(s, t, 0, "key");
	assert_int_equal(v, 2);
	char buf[32];
	assert_int_equal(apf_jtok_string(s, &t[v], buf, sizeof buf), 0);
	assert_string_equal(buf, "a\xc3\xa9\xf0\x9f\x98\x80\n\"");
	assert_true(apf_jtok_eq(s, &t[v], "a\xc3\xa9\xf0\x9f\x98\x80\n\""));
	assert_int_equal(apf_jtok_string(s, &t[v], buf, 5), -1);
}

/* ---- the walk -------------------------------------------------------------- */

struct slot {
	uint64_t seq;
	uint64_t step;
	int prepared;
};

static void prepare(void *user, const struct apf_runlog_record *r, void *vs)
{
	(void)user;
	struct slot *s = vs;
	s->seq = r->seq;
	s->step = 0;
	long k = apf_jtok_get(r->line, r->tok, 0, "step");
	if (k >= 0)
		apf_jtok_u64(&s->step, r->line, &r->tok[k]);
	s->prepared = 1;
}

struct order {
	uint64_t n;
};

static int in_order(void *user, const struct apf_runlog_record *r)
{
	struct order *o = user;
	const struct slot *s = r->slot;
	assert_true(s->prepared);
	assert_int_equal(s->seq, o->n);
	assert_int_equal(s->step, 3 * o->n);
	assert_int_equal(r->line_no, o->n + 1);
	assert_null(r->obj);
	assert_string_equal(r->event, o->n % 2 ? "eval" : "step_block");
	o->n++;
	return 0;
}

static char *write_log(const char *dir, int n)
{
	char *path = apf_path_join(dir, "log.jsonl");
	apf_runlog *l;
	assert_apf_ok(apf_runlog_create(&l, path));
	for (int i = 0; i < n; i++) {
		json_t *f = json_pack("{s:I}", "step", (json_int_t)3 * i);
		assert_apf_ok(apf_runlog_append(l, (uint64_t)i, i % 2 ? "eval" : "step_block",
						f, 0));
		json_decref(f);
	}
	assert_apf_ok(apf_runlog_close(l));
	return path;
}

static void walk_prepares_every_line_across_batches(void **state)
{
	(void)state;
	char *dir = testlib_tmpdir();
	/* Several of the reader's batches of 16384 lines. */
	char *path = write_log(dir, 40000);
	struct order o = {0};
	struct apf_runlog_read_opts opts = {.fn = in_order, .user = &o,
					    .prepare = prepare,
					    .slot_size = sizeof(struct slot)};
	struct apf_runlog_summary sum;
	assert_apf_ok(apf_runlog_walk(&sum, path, &opts));
	assert_int_equal(o.n, 40000);
	assert_int_equal(sum.records, 40000);
	/* A broken line in the third batch is named by its number. */
	char *text;
	size_t len;
	assert_apf_ok(apf_file_read(&text, &len, path, 1 << 30));
	char *p = text;
	for (int i = 0; i < 35000; i++)
		p = strchr(p, '\n') + 1;
	char *step = strstr(p, "\"step\":");
	step[7] = step[7] == '9' ? '8' : '9';
	assert_apf_ok(apf_file_write(path, text, len, 0644, 0));
	free(text);
	o.n = 0;
	int rc = apf_runlog_walk(NULL, path, &(struct apf_runlog_read_opts){0});
	assert_int_equal(rc, APF_EVERIFY);
	assert_non_null(strstr(apf_error_message(), "line 35002: prev does not match"));
	free(path);
	testlib_tmpdir_free(dir);
}

static void event_names_the_reader_refuses_are_not_written(void **state)
{
	(void)state;
	char *dir = testlib_tmpdir();
	char *path = apf_path_join(dir, "log.jsonl");
	apf_runlog *l;
	assert_apf_ok(apf_runlog_create(&l, path));
	char longname[64];
	memset(longname, 'e', 48);
	longname[48] = 0;
	assert_int_equal(apf_runlog_append(l, 1, longname, NULL, 0), APF_EINTERNAL);
	assert_int_equal(apf_runlog_append(l, 1, "quo\"te", NULL, 0), APF_EINTERNAL);
	assert_int_equal(apf_runlog_append(l, 1, "", NULL, 0), APF_EINTERNAL);
	longname[47] = 0;
	assert_apf_ok(apf_runlog_append(l, 1, longname, NULL, 0));
	assert_apf_ok(apf_runlog_close(l));
	assert_apf_ok(apf_runlog_walk(NULL, path, &(struct apf_runlog_read_opts){0}));
	free(path);
	testlib_tmpdir_free(dir);
}

/* The fields apf_jtok_parse sets; 1 when every token of both is the same. */
static int same_tokens(const struct apf_jtok *a, const struct apf_jtok *b,
		       size_t n)
{
	for (size_t i = 0; i < n; i++) {
		if (a[i].start != b[i].start || a[i].len != b[i].len ||
		    a[i].next != b[i].next || a[i].type != b[i].type ||
		    a[i].escaped != b[i].escaped || a[i].plain != b[i].plain)
			return 0;
		if (a[i].plain ? a[i].value != b[i].value
			       : (a[i].type == APF_JOBJECT || a[i].type == APF_JARRAY) &&
					 a[i].size != b[i].size)
			return 0;
	}
	return 1;
}

/* Each form: '@' marks a value; the first of each form's values fills
 * every '@' of the text kept as the shape. */
static const char *const forms[] = {
	"{\"seq\":@,\"prev\":@,\"t_ns\":@,\"event\":@,\"metrics\":{\"a/b\":@,"
	"\"c\":@},\"ok\":@,\"list\":[@,@,[@]],\"k\\u0065y\":@,\"empty\":{},"
	"\"e2\":[]}",
	" [ @ , {\"a\" : @ } ,\t@ ]\n",
	"@",
	"{\"deep\":[[[{\"x\":@}]]],\"caf\xc3\xa9\":@}",
};

/* Scalars that parse on their own: a text that differs from its shape in
 * these only must be matched. */
static const char *const scalars[] = {
	"0", "7", "-12.5e+3", "1E-7", "18446744073709551615",
	"123456789012345678901234", "0.45500001311302185", "1000000000123",
	"\"\"", "\"x\"", "\"\\ud83d\\ude00 \\\"q\\\" \\n\"", "\"caf\xc3\xa9\"",
	"\"0000000000000000000000000000000000000000000000000000000000000000\"",
	"true", "false", "null", "-0",
};

/* Anything else: invalid scalars, containers, spaces around a value. The
 * full parse decides each (some are valid JSON). */
static const char *const others[] = {
	"01", "-", "1.", ".5", "1e", "+1", "tru", "nulll", "truex", "\"\x01\"",
	"\"\\u0000\"", "\"\\ud800\"", "\"\xff\"", "\"\xc0\x80\"", "\"\\x\"",
	"{}", "[1]", "{\"a\":1}", " 1", "1 ", "\"a", "\"",
	"1,\"seq\":2", "", "NaN", "\"\\\"", "1}", "\"x\",\"k\":\"y\"",
};

/* form with every '@' the default, but value k (every value: k == -1;
 * none: k < -1) as v. */
static char *fill(const char *form, const char *def, long k, const char *v)
{
	size_t cap = strlen(form) * 64 + 1024, n = 0;
	char *out = malloc(cap);
	long i = 0;
	for (const char *p = form; *p; p++) {
		if (*p != '@') {
			out[n++] = *p;
			continue;
		}
		const char *x = (k == -1 || k == i) ? v : def;
		memcpy(out + n, x, strlen(x));
		n += strlen(x);
		i++;
	}
	out[n] = 0;
	return out;
}

/* Parses text both ways after shape; returns whether the shape was used
 * (the two must agree on everything). */
static int parse_both(const char *shape, const char *text)
{
	size_t cap = 1024, n1 = 0, n2 = 0;
	struct apf_jtok *t1 = calloc(cap, sizeof *t1), *t2 = calloc(cap, sizeof *t2);
	apf_jtok_shapes *shs = apf_jtok_shapes_new();
	assert_non_null(shs);
	const char *why1 = NULL, *why2 = NULL;
	assert_int_equal(apf_jtok_parse_like(shs, "k", 1, shape, strlen(shape), t1,
					     cap, &n1, &why1), 0);
	assert_int_equal(apf_jtok_shapes_hits(shs), 0);
	int rc1 = apf_jtok_parse_like(shs, "k", 1, text, strlen(text), t1, cap,
				      &n1, &why1);
	int rc2 = apf_jtok_parse(text, strlen(text), t2, cap, &n2, &why2);
	int hit = apf_jtok_shapes_hits(shs) == 1;
	if (rc1 != rc2 || (rc1 && strcmp(why1, why2)) ||
	    (!rc1 && (n1 != n2 || !same_tokens(t1, t2, n1))))
		fail_msg("shape %s\ntext %s\nshape path rc %d (%s), full parse "
			 "rc %d (%s)", shape, text, rc1, rc1 ? why1 : "",
			 rc2, rc2 ? why2 : "");
	apf_jtok_shapes_free(shs);
	free(t1);
	free(t2);
	return hit;
}

/* A text of a form seen before is read from its values alone; the result
 * is apf_jtok_parse's, token for token, whatever the text. */
static void lines_of_a_known_form_parse_as_the_full_parser_does(void **state)
{
	(void)state;
	size_t nf = sizeof forms / sizeof *forms,
	       ns = sizeof scalars / sizeof *scalars,
	       no = sizeof others / sizeof *others;
	for (size_t f = 0; f < nf; f++) {
		long values = 0;
		for (const char *p = forms[f]; *p; p++)
			values += *p == '@';
		/* Shapes of three kinds of value. */
		static const char *const defaults[] = {"7", "\"x\"", "null"};
		for (size_t d = 0; d < 3; d++) {
			char *shape = fill(forms[f], defaults[d], -2, NULL);
			for (long k = -1; k < values; k++) {
				for (size_t i = 0; i < ns; i++) {
					char *text = fill(forms[f], defaults[d], k,
							  scalars[i]);
					if (!parse_both(shape, text))
						fail_msg("not matched: shape %s\n"
							 "text %s", shape, text);
					free(text);
				}
				for (size_t i = 0; i < no; i++) {
					char *text = fill(forms[f], defaults[d], k,
							  others[i]);
					if (parse_both(shape, text))
						fail_msg("matched: shape %s\n"
							 "text %s", shape, text);
					free(text);
				}
			}
			/* The bytes between values: each one changed, dropped
			 * or doubled; and bytes after the text. */
			size_t len = strlen(shape);
			char *text = malloc(len + 3);
			for (size_t j = 0; j < len; j++) {
				static const char subs[] = "x \"{}[],:\\";
				for (const char *c = subs; *c; c++) {
					memcpy(text, shape, len + 1);
					if (text[j] == *c)
						continue;
					text[j] = *c;
					parse_both(shape, text);
				}
				memcpy(text, shape, j);
				memcpy(text + j, shape + j + 1, len - j);
				parse_both(shape, text);
				memcpy(text, shape, j + 1);
				memcpy(text + j + 1, shape + j, len - j + 1);
				parse_both(shape, text);
			}
			snprintf(text, len + 3, "%sx", shape);
			assert_false(parse_both(shape, text));
			free(text);
			free(shape);
		}
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(tokens_describe_the_tree),
		cmocka_unit_test(strict_as_the_rfc),
		cmocka_unit_test(duplicate_keys_are_found_among_many),
		cmocka_unit_test(numbers_convert_as_strtod_does),
		cmocka_unit_test(integers_are_plain_digits_in_64_bits),
		cmocka_unit_test(strings_unescape_to_utf8),
		cmocka_unit_test(lines_of_a_known_form_parse_as_the_full_parser_does),
		cmocka_unit_test(walk_prepares_every_line_across_batches),
		cmocka_unit_test(event_names_the_reader_refuses_are_not_written),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
