/*
 * test_heldout.c: the held-out draw's seed derivation and choice against
 * answers computed independently (Python's hashlib, as heldout.h shows),
 * the draw from entries held in memory, the draw file's round trip and
 * strict parsing, and the first difference the comparison names.
 */
#include "testlib.h"

#include <stdlib.h>
#include <string.h>

#include "hash/hash.h"
#include "heldout/heldout.h"

#define D0 "0000000000000000000000000000000000000000000000000000000000000000"
#define DA "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
#define DF "f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0"

/* sha256(b"apf-heldout-v1" + D0 + DA + DF).hexdigest() */
#define SEED_0AF \
	"af17ee088ec40a57da800fd3895b3a056ee94997ecc04e64c24a98b60265feb6"

static void seed_from_digests_is_sorted_and_known(void **state)
{
	(void)state;
	char a[APF_HELDOUT_SEED_MAX], b[APF_HELDOUT_SEED_MAX];
	const char *fwd[] = {DA, D0, DF}, *rev[] = {DF, DA, D0};
	assert_apf_ok(apf_heldout_seed_from_digests(a, fwd, 3));
	assert_string_equal(a, SEED_0AF);
	assert_apf_ok(apf_heldout_seed_from_digests(b, rev, 3));
	assert_string_equal(a, b);
	/* One entry changed: another seed. */
	const char *other[] = {DA, D0, D0};
	other[2] = "f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f1";
	assert_apf_ok(apf_heldout_seed_from_digests(b, other, 3));
	assert_string_not_equal(a, b);
}

static void seed_from_digests_refuses_duplicates_and_junk(void **state)
{
	(void)state;
	char s[APF_HELDOUT_SEED_MAX];
	const char *dup[] = {DA, D0, DA};
	assert_int_equal(apf_heldout_seed_from_digests(s, dup, 3), APF_EINPUT);
	assert_non_null(strstr(apf_error_message(), "given twice"));
	const char *upper[] = {"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"};
	assert_int_equal(apf_heldout_seed_from_digests(s, upper, 1), APF_EINPUT);
	const char *shortd[] = {"abc"};
	assert_int_equal(apf_heldout_seed_from_digests(s, shortd, 1), APF_EINPUT);
	assert_int_equal(apf_heldout_seed_from_digests(s, NULL, 0), APF_EINPUT);
}

static void seed_from_number_is_canonical_decimal(void **state)
{
	(void)state;
	char s[APF_HELDOUT_SEED_MAX];
	assert_apf_ok(apf_heldout_seed_from_number(s, "0"));
	assert_string_equal(s, "0");
	assert_apf_ok(apf_heldout_seed_from_number(s, "18446744073709551615"));
	assert_string_equal(s, "18446744073709551615");
	static const char *const bad[] = {
		"", "007", "-1", "+1", " 1", "1 ", "0x10", "1e3",
		"18446744073709551616", "99999999999999999999", "123456789012345678901",
		NULL};
	for (const char *const *b = bad; *b; b++) {
		if (apf_heldout_seed_from_number(s, *b) != APF_EINPUT)
			fail_msg("seed '%s' accepted", *b);
		assert_non_null(strstr(apf_error_message(), "whole number"));
	}
}

static void choice_matches_independent_answers(void **state)
{
	(void)state;
	size_t k;
	/* int.from_bytes(sha256(b"apf-heldout-v1\0" + seed + b"\0" + w)
	 * .digest()[:8], "big") % n */
	assert_apf_ok(apf_heldout_choose("7", "toy", 5, &k));
	assert_int_equal(k, 4);
	assert_apf_ok(apf_heldout_choose("18446744073709551615", "criteo1tb", 3,
					 &k));
	assert_int_equal(k, 0);
	/* A modulus this large depends on all 64 bits, in big-endian order. */
	assert_apf_ok(apf_heldout_choose("1", "toy", 1000003, &k));
	assert_int_equal(k, 584829);
	assert_apf_ok(apf_heldout_choose("1", "toy", 1, &k));
	assert_int_equal(k, 0);
	assert_int_equal(apf_heldout_choose("1", "toy", 0, &k), APF_EINPUT);
}

static apf_heldout *empty_draw(const char *seed)
{
	apf_heldout *h = calloc(1, sizeof *h);
	assert_non_null(h);
	h->method = APF_HELDOUT_FROM_SEED;
	snprintf(h->seed, sizeof h->seed, "%s", seed);
	return h;
}

static void pick_sorts_variants_and_bases(void **state)
{
	(void)state;
	apf_heldout *h = empty_draw("7");
	char *toy[] = {"wide", "tanh", "gelu", "deep", "narrow"};
	char *none[] = {NULL};
	assert_apf_ok(apf_heldout_pick(h, "toy", DA, toy, 5));
	assert_apf_ok(apf_heldout_pick(h, "bare", D0, none, 0));
	assert_int_equal(h->npicks, 2);
	assert_string_equal(h->picks[0].base, "bare");
	assert_null(h->picks[0].variant);
	const struct apf_heldout_pick *p = &h->picks[1];
	assert_string_equal(p->variants[0], "deep");
	assert_string_equal(p->variants[4], "wide");
	/* Index 4 of the sorted list, as computed above. */
	assert_string_equal(p->variant, "wide");
	assert_int_equal(apf_heldout_pick(h, "toy", DA, toy, 5), APF_EINPUT);
	assert_non_null(strstr(apf_error_message(), "listed twice"));
	char *dup[] = {"a", "b", "a"};
	assert_int_equal(apf_heldout_pick(h, "dup", DA, dup, 3), APF_EINPUT);
	char *badname[] = {"Wide"};
	assert_int_equal(apf_heldout_pick(h, "bad", DA, badname, 1), APF_EINPUT);
	assert_int_equal(apf_heldout_pick(h, "../x", DA, toy, 5), APF_EINPUT);
	assert_int_equal(apf_heldout_pick(h, "x", "00", toy, 5), APF_EINPUT);
	assert_int_equal(h->npicks, 2);
	apf_heldout_free(h);
}

/* ---- draws from entries held in memory -------------------------------- */

struct fake {
	apf_manifest m;
	struct apf_manifest_workload w[2];
	apf_entry e;
};

static void fake_entry(struct fake *f, const char *path, const char *digest,
		       const char *sub, const char *w1, const char *s1,
		       const char *w2, const char *s2)
{
	memset(f, 0, sizeof *f);
	f->m.submission.name = (char *)sub;
	f->w[0].name = (char *)w1;
	snprintf(f->w[0].spec_digest, 65, "%s", s1);
	f->w[1].name = (char *)w2;
	snprintf(f->w[1].spec_digest, 65, "%s", s2 ? s2 : "");
	f->m.workloads = f->w;
	f->m.nworkloads = w2 ? 2 : 1;
	f->e.manifest = &f->m;
	f->e.path = (char *)path;
	snprintf(f->e.manifest_digest, 65, "%s", digest);
}

static char *spec_digest(const char *name)
{
	char *dir = apf_path_join(testlib_root(), "tests/data/workloads");
	char *wd = apf_path_join(dir, name);
	apf_tree *t;
	assert_apf_ok(apf_tree_hash(&t, wd, NULL));
	char *hex = malloc(65);
	apf_hex(hex, t->digest, 32);
	apf_tree_free(t);
	free(wd);
	free(dir);
	return hex;
}

static void use_test_workloads(void)
{
	char *dir = apf_path_join(testlib_root(), "tests/data/workloads");
	setenv("APF_WORKLOADS_DIR", dir, 1);
	free(dir);
}

static void draw_covers_the_union_in_any_order(void **state)
{
	(void)state;
	use_test_workloads();
	char *tiny = spec_digest("tiny"), *toy = spec_digest("toy");
	struct fake a, b;
	fake_entry(&a, "a.apf", DA, "sub-a", "toy", toy, "tiny", tiny);
	fake_entry(&b, "b.apf", D0, "sub-b", "tiny", tiny, NULL, NULL);
	apf_entry *ab[] = {&a.e, &b.e}, *ba[] = {&b.e, &a.e};
	apf_heldout *x, *y;
	assert_apf_ok(apf_heldout_draw(&x, ab, 2, NULL));
	assert_apf_ok(apf_heldout_draw(&y, ba, 2, NULL));
	char *jx, *jy;
	assert_apf_ok(apf_heldout_to_json(&jx, x));
	assert_apf_ok(apf_heldout_to_json(&jy, y));
	assert_string_equal(jx, jy);
	assert_int_equal(x->method, APF_HELDOUT_FROM_ENTRIES);
	const char *d[] = {DA, D0};
	char seed[APF_HELDOUT_SEED_MAX];
	assert_apf_ok(apf_heldout_seed_from_digests(seed, d, 2));
	assert_string_equal(x->seed, seed);
	assert_int_equal(x->nentries, 2);
	assert_string_equal(x->entries[0].manifest_sha256, D0);
	assert_string_equal(x->entries[1].workloads[0], "tiny");
	assert_string_equal(x->entries[1].workloads[1], "toy");
	assert_int_equal(x->npicks, 2);
	assert_string_equal(x->picks[0].base, "tiny");
	assert_string_equal(x->picks[0].variant, "wide");
	assert_string_equal(x->picks[1].base, "toy");
	assert_int_equal(x->picks[1].nvariants, 5);
	size_t k;
	assert_apf_ok(apf_heldout_choose(seed, "toy", 5, &k));
	assert_string_equal(x->picks[1].variant, x->picks[1].variants[k]);
	assert_apf_ok(apf_heldout_compare(x, y, "x"));
	/* A given seed replaces the entries'. */
	apf_heldout *z;
	assert_apf_ok(apf_heldout_draw(&z, ab, 2, "7"));
	assert_int_equal(z->method, APF_HELDOUT_FROM_SEED);
	assert_string_equal(z->seed, "7");
	assert_string_equal(z->picks[1].variant, "wide");
	assert_int_equal(apf_heldout_compare(z, x, "z.json"), APF_EVERIFY);
	free(jx);
	free(jy);
	apf_heldout_free(x);
	apf_heldout_free(y);
	apf_heldout_free(z);
	free(tiny);
	free(toy);
	unsetenv("APF_WORKLOADS_DIR");
}

static void draw_refuses_mixed_or_foreign_specs(void **state)
{
	(void)state;
	use_test_workloads();
	char *toy = spec_digest("toy");
	struct fake a, b;
	apf_heldout *h;
	/* Two entries packed against different toy specs. */
	fake_entry(&a, "a.apf", DA, "sub-a", "toy", toy, NULL, NULL);
	fake_entry(&b, "b.apf", D0, "sub-b", "toy", DF, NULL, NULL);
	apf_entry *ab[] = {&a.e, &b.e};
	assert_int_equal(apf_heldout_draw(&h, ab, 2, NULL), APF_EINPUT);
	assert_non_null(strstr(apf_error_message(), "one spec per workload"));
	/* Both agree, but not with the local workloads directory. */
	fake_entry(&a, "a.apf", DA, "sub-a", "toy", DF, NULL, NULL);
	assert_int_equal(apf_heldout_draw(&h, ab, 2, NULL), APF_EINPUT);
	assert_non_null(strstr(apf_error_message(), "packed against"));
	/* The same entry twice. */
	fake_entry(&a, "a.apf", DA, "sub-a", "toy", toy, NULL, NULL);
	fake_entry(&b, "c.apf", DA, "sub-a", "toy", toy, NULL, NULL);
	assert_int_equal(apf_heldout_draw(&h, ab, 2, NULL), APF_EINPUT);
	assert_non_null(strstr(apf_error_message(), "c.apf: the same entry as a.apf"));
	assert_int_equal(apf_heldout_draw(&h, ab, 0, NULL), APF_EUSAGE);
	/* A seed that is not a canonical number. */
	assert_int_equal(apf_heldout_draw(&h, ab, 1, "-3"), APF_EINPUT);
	free(toy);
	unsetenv("APF_WORKLOADS_DIR");
}

/* ---- the draw file ---------------------------------------------------- */

static const char *file_text =
	"{\"format\": \"apf-heldout-v1\", \"method\": \"seed\", \"seed\": \"7\",\n"
	" \"entries\": [{\"manifest_sha256\": \"" DA "\", \"submission\": \"s\","
	" \"workloads\": [\"toy\", \"bare\"]}],\n"
	" \"draws\": [{\"base\": \"toy\", \"variant\": \"wide\", \"variants\":"
	" [\"deep\", \"wide\"], \"spec_sha256\": \"" DA "\"}],\n"
	" \"undrawn\": [{\"base\": \"bare\", \"spec_sha256\": \"" D0 "\"}]}\n";

static void file_round_trips(void **state)
{
	(void)state;
	apf_heldout *h, *g;
	assert_apf_ok(apf_heldout_parse(&h, file_text, strlen(file_text), "d.json"));
	assert_int_equal(h->method, APF_HELDOUT_FROM_SEED);
	assert_int_equal(h->npicks, 2);
	/* Picks are kept sorted by base, undrawn or not. */
	assert_string_equal(h->picks[0].base, "bare");
	assert_null(h->picks[0].variant);
	assert_string_equal(h->picks[1].variant, "wide");
	char *text;
	assert_apf_ok(apf_heldout_to_json(&text, h));
	assert_apf_ok(apf_heldout_parse(&g, text, strlen(text), "again.json"));
	assert_apf_ok(apf_heldout_compare(g, h, "again.json"));
	char *text2;
	assert_apf_ok(apf_heldout_to_json(&text2, g));
	assert_string_equal(text, text2);
	free(text);
	free(text2);
	apf_heldout_free(g);
	apf_heldout_free(h);
}

/* file_text with its first `from` replaced by `to`. */
static char *edited(const char *from, const char *to)
{
	const char *at = strstr(file_text, from);
	assert_non_null(at);
	apf_buf b = {0};
	assert_int_equal(apf_buf_printf(&b, "%.*s%s%s", (int)(at - file_text),
					file_text, to, at + strlen(from)),
			 0);
	return b.data;
}

static void parse_refuses_malformed_files(void **state)
{
	(void)state;
	static const char *const edits[][3] = {
		{"\"format\": \"apf-heldout-v1\"", "\"format\": \"apf-heldout-v2\"",
		 "format"},
		{"\"method\": \"seed\"", "\"method\": \"coin\"", "method"},
		{"\"seed\": \"7\"", "\"seed\": \"07\"", "whole number"},
		{"\"seed\": \"7\"", "\"seed\": 7", "seed"},
		{"\"seed\": \"7\"", "\"seed\": \"7\", \"note\": 1",
		 "unknown field \"note\""},
		{"\"submission\": \"s\",", "", "missing field \"submission\""},
		{"\"variant\": \"wide\"", "\"variant\": \"../w\"", "draws[0]"},
		{"\"workloads\": [\"toy\", \"bare\"]", "\"workloads\": \"toy\"",
		 "entries[0]"},
		{"\"spec_sha256\": \"" D0 "\"", "\"spec_sha256\": \"zz\"",
		 "undrawn[0]"},
		{"\"base\": \"bare\"", "\"base\": \"toy\"", "listed twice"},
		{"\"draws\": [", "\"draws\": {\"a\": [", "line"},
		{"\"undrawn\":", "\"seed\":", "duplicate"},
	};
	for (size_t i = 0; i < sizeof edits / sizeof edits[0]; i++) {
		char *t = edited(edits[i][0], edits[i][1]);
		apf_heldout *h = NULL;
		int rc = apf_heldout_parse(&h, t, strlen(t), "d.json");
		if (rc != APF_EINPUT)
			fail_msg("edit %zu accepted (rc %d)", i, rc);
		assert_null(h);
		if (!strstr(apf_error_message(), edits[i][2]))
			fail_msg("edit %zu: '%s' does not say '%s'", i,
				 apf_error_message(), edits[i][2]);
		free(t);
	}
	apf_heldout *h = NULL;
	assert_int_equal(apf_heldout_parse(&h, "[]", 2, "d.json"), APF_EINPUT);
	assert_int_equal(apf_heldout_parse(&h, "", 0, "d.json"), APF_EINPUT);
}

static void compare_names_the_first_difference(void **state)
{
	(void)state;
	static const char *const edits[][3] = {
		{"\"variant\": \"wide\"", "\"variant\": \"deep\"",
		 "toy: variant 'deep'; the draw gives 'wide'"},
		{"\"seed\": \"7\"", "\"seed\": \"8\"", "seed 8; the entries give 7"},
		{"\"submission\": \"s\"", "\"submission\": \"t\"",
		 "entries[0]: submission 't'"},
		{"\"variants\": [\"deep\", \"wide\"]",
		 "\"variants\": [\"deep\", \"tall\", \"wide\"]",
		 "toy: variants [deep, tall, wide]; the workload declares "
		 "[deep, wide]"},
		{"\"spec_sha256\": \"" DA "\"", "\"spec_sha256\": \"" DF "\"",
		 "toy: spec sha256:f0f0"},
		{"\"manifest_sha256\": \"" DA "\"",
		 "\"manifest_sha256\": \"" DF "\"", "entries[0]: manifest"},
		{"\"undrawn\": [{\"base\": \"bare\", \"spec_sha256\": \"" D0 "\"}]",
		 "\"undrawn\": []", "bare: covered by the entries, but not in"},
		{"\"entries\": [", "\"entries\": [{\"manifest_sha256\": \"" D0
		 "\", \"submission\": \"x\", \"workloads\": []}, ",
		 "entries[0]: manifest"},
	};
	apf_heldout *want;
	assert_apf_ok(apf_heldout_parse(&want, file_text, strlen(file_text),
					"want"));
	for (size_t i = 0; i < sizeof edits / sizeof edits[0]; i++) {
		char *t = edited(edits[i][0], edits[i][1]);
		apf_heldout *h;
		assert_apf_ok(apf_heldout_parse(&h, t, strlen(t), "d.json"));
		assert_int_equal(apf_heldout_compare(h, want, "d.json"),
				 APF_EVERIFY);
		if (!strstr(apf_error_message(), edits[i][2]))
			fail_msg("edit %zu: '%s' does not say '%s'", i,
				 apf_error_message(), edits[i][2]);
		apf_heldout_free(h);
		free(t);
	}
	apf_heldout_free(want);
}

/* 100,000 draws in reverse order read in a moment, sorted; a base listed
 * twice is found however far apart. Inserting each pick at its sorted
 * place made this quadratic (its failure mode is the runner's timeout). */
static void large_file_reads_in_linear_time(void **state)
{
	(void)state;
	enum { N = 100000 };
	apf_buf b = {0};
	for (int dup = 0; dup < 2; dup++) {
		b.len = 0;
		assert_int_equal(apf_buf_puts(&b, "{\"format\": \"apf-heldout-v1\", "
					      "\"method\": \"seed\", \"seed\": \"1\", "
					      "\"entries\": [], \"undrawn\": [], "
					      "\"draws\": ["), 0);
		for (int i = 0; i < N; i++)
			assert_int_equal(
				apf_buf_printf(&b, "%s{\"base\": \"w%06d\", "
					       "\"variant\": \"v\", \"variants\": "
					       "[\"v\"], \"spec_sha256\": \"" D0 "\"}",
					       i ? ", " : "",
					       dup && i == N - 1 ? 7 : N - i),
				0);
		assert_int_equal(apf_buf_puts(&b, "]}\n"), 0);
		apf_heldout *h = NULL;
		int rc = apf_heldout_parse(&h, b.data, b.len, "big.json");
		if (dup) {
			assert_int_equal(rc, APF_EINPUT);
			assert_non_null(strstr(apf_error_message(),
					       "workload w000007 is listed twice"));
		} else {
			assert_apf_ok(rc);
			assert_int_equal(h->npicks, N);
			assert_string_equal(h->picks[0].base, "w000001");
			assert_string_equal(h->picks[N - 1].base, "w100000");
		}
		apf_heldout_free(h);
	}
	apf_buf_free(&b);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(seed_from_digests_is_sorted_and_known),
		cmocka_unit_test(seed_from_digests_refuses_duplicates_and_junk),
		cmocka_unit_test(seed_from_number_is_canonical_decimal),
		cmocka_unit_test(choice_matches_independent_answers),
		cmocka_unit_test(pick_sorts_variants_and_bases),
		cmocka_unit_test(draw_covers_the_union_in_any_order),
		cmocka_unit_test(draw_refuses_mixed_or_foreign_specs),
		cmocka_unit_test(file_round_trips),
		cmocka_unit_test(parse_refuses_malformed_files),
		cmocka_unit_test(compare_names_the_first_difference),
		cmocka_unit_test(large_file_reads_in_linear_time),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
