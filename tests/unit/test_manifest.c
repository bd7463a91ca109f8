/*
 * test_manifest.c: the in-toto statement round-trips, and the strict parser
 * refuses every kind of deviation, naming the field.
 */
#include "testlib.h"

#include <stdlib.h>
#include <string.h>

#include "hash/hash.h"
#include "manifest/manifest.h"
#include "sysinfo/sysinfo.h"

static char *digest_of(const char *s)
{
	static char hex[4][65];
	static int k;
	char *out = hex[k++ % 4];
	apf_sha256_hex(out, s, strlen(s));
	return out;
}

static apf_manifest *sample(void)
{
	apf_manifest *m = calloc(1, sizeof *m);
	m->apf_version = strdup(APF_VERSION);
	m->created = strdup("2026-11-30T12:00:00Z");
	m->submission.name = strdup("nadamw");
	m->submission.nauthors = 1;
	m->submission.authors = calloc(1, sizeof(char *));
	m->submission.authors[0] = strdup("A. Author");
	m->submission.ruleset = strdup("external");
	m->submission.nfiles = 2;
	m->submission.files = calloc(2, sizeof *m->submission.files);
	m->submission.files[0] = (struct apf_manifest_file){
		strdup("submission.c"), 'f', 644, 3, ""};
	strcpy(m->submission.files[0].sha256, digest_of("abc"));
	m->submission.files[1] = (struct apf_manifest_file){
		strdup("submission.ini"), 'f', 644, 2, ""};
	strcpy(m->submission.files[1].sha256, digest_of("[]"));
	assert_apf_ok(apf_manifest_files_digest(m, m->submission.tree_digest));
	m->submission.git = json_pack("{s:b}", "repository", 0);
	m->ndatasets = 1;
	m->datasets = calloc(1, sizeof *m->datasets);
	m->datasets[0].name = strdup("fashion-mnist");
	strcpy(m->datasets[0].tree_digest, digest_of("data"));
	m->datasets[0].files = 4;
	m->datasets[0].bytes = 30000000;
	m->nworkloads = 1;
	m->workloads = calloc(1, sizeof *m->workloads);
	m->workloads[0].name = strdup("fmnist_mlp");
	m->workloads[0].variant = strdup("base");
	m->workloads[0].dataset = strdup("fashion-mnist");
	strcpy(m->workloads[0].spec_digest, digest_of("spec"));
	m->tuning.ruleset = strdup("external");
	m->tuning.rules = strdup("algoperf-0.6");
	m->tuning.studies = 3;
	m->tuning.trials = 5;
	m->tuning.budget_multiplier = 1.0;
	strcpy(m->tuning.search_space_digest, digest_of("space"));
	m->tuning.seed = 4000000000u;
	assert_apf_ok(apf_env_capture(&m->environment));
	return m;
}

static void round_trip(void **state)
{
	(void)state;
	apf_manifest *m = sample();
	char *json;
	assert_apf_ok(apf_manifest_to_json(&json, m));
	apf_manifest *back;
	assert_apf_ok(apf_manifest_parse(&back, json, strlen(json)));
	char *again;
	assert_apf_ok(apf_manifest_to_json(&again, back));
	assert_string_equal(json, again);
	assert_int_equal(back->tuning.seed, 4000000000u);
	assert_string_equal(back->submission.files[1].path, "submission.ini");
	assert_non_null(apf_manifest_find_file(back, "submission.c"));
	assert_null(apf_manifest_find_file(back, "nope"));
	free(json);
	free(again);
	apf_manifest_free(back);
	apf_manifest_free(m);
}

/* Applies a change to the statement's JSON and expects the parser to
 * refuse it with a message containing `expect`. */
/* Found by fuzz_manifest: subject names were cut at 511 bytes when written,
 * so a long dataset or workload name gave a manifest that its own parser
 * refused. */
static void long_names_round_trip(void **state)
{
	(void)state;
	apf_manifest *m = sample();
	char name[701];
	memset(name, 'd', sizeof name - 1);
	name[sizeof name - 1] = 0;
	free(m->datasets[0].name);
	free(m->workloads[0].dataset);
	m->datasets[0].name = strdup(name);
	m->workloads[0].dataset = strdup(name);
	memset(name, 'w', sizeof name - 1);
	free(m->workloads[0].name);
	m->workloads[0].name = strdup(name);
	char *json, *again;
	assert_apf_ok(apf_manifest_to_json(&json, m));
	apf_manifest *back;
	assert_apf_ok(apf_manifest_parse(&back, json, strlen(json)));
	assert_string_equal(back->workloads[0].name, name);
	assert_apf_ok(apf_manifest_to_json(&again, back));
	assert_string_equal(json, again);
	free(json);
	free(again);
	apf_manifest_free(back);
	apf_manifest_free(m);
}

static void expect_refused(void (*change)(json_t *st), const char *expect)
{
	apf_manifest *m = sample();
	char *json;
	assert_apf_ok(apf_manifest_to_json(&json, m));
	json_t *st = json_loads(json, 0, NULL);
	change(st);
	char *bad = json_dumps(st, 0);
	apf_manifest *out = NULL;
	int rc = apf_manifest_parse(&out, bad, strlen(bad));
	if (rc != APF_EINPUT || !strstr(apf_error_message(), expect))
		fail_msg("expected refusal mentioning '%s', got %d: %s", expect,
			 rc, rc ? apf_error_message() : "accepted");
	assert_null(out);
	free(bad);
	free(json);
	json_decref(st);
	apf_manifest_free(m);
}

#define PRED(st) json_object_get(st, "predicate")
#define SUB(st) json_object_get(PRED(st), "submission")
#define FILE0(st) json_array_get(json_object_get(SUB(st), "files"), 0)

static void c_type(json_t *st) { json_object_set_new(st, "_type", json_string("x")); }
static void c_ptype(json_t *st) { json_object_set_new(st, "predicateType", json_string("urn:other")); }
static void c_extra(json_t *st) { json_object_set_new(PRED(st), "extra", json_true()); }
static void c_digest(json_t *st) { json_object_set_new(FILE0(st), "sha256", json_string("ABC")); }
static void c_size(json_t *st) { json_object_set_new(FILE0(st), "size", json_integer(4)); }
static void c_mode(json_t *st) { json_object_set_new(FILE0(st), "mode", json_string("600")); }
static void c_path(json_t *st) { json_object_set_new(FILE0(st), "path", json_string("../x")); }
static void c_order(json_t *st)
{
	json_t *files = json_object_get(SUB(st), "files");
	json_t *a = json_incref(json_array_get(files, 0));
	json_array_remove(files, 0);
	json_array_append_new(files, a);
}
static void c_subject(json_t *st)
{
	json_t *s = json_array_get(json_object_get(st, "subject"), 1);
	json_object_set_new(json_object_get(s, "digest"), "sha256",
			    json_string(digest_of("other")));
}
static void c_subject_missing(json_t *st) { json_array_remove(json_object_get(st, "subject"), 2); }
static void c_created(json_t *st) { json_object_set_new(PRED(st), "created", json_string("yesterday")); }
static void c_ruleset(json_t *st) { json_object_set_new(SUB(st), "ruleset", json_string("magic")); }
static void c_seed(json_t *st) { json_object_set_new(json_object_get(PRED(st), "tuning"), "seed", json_integer(1LL << 33)); }
static void c_env(json_t *st) { json_object_del(json_object_get(PRED(st), "environment"), "cpu"); }
static void c_git(json_t *st) { json_object_set_new(SUB(st), "git", json_pack("{s:b, s:s}", "repository", 1, "commit", "abc")); }
static void c_dataset(json_t *st)
{
	json_object_set_new(json_array_get(json_object_get(PRED(st), "workloads"), 0),
			    "dataset", json_string("imagenet"));
}
static void c_no_workloads(json_t *st) { json_array_clear(json_object_get(PRED(st), "workloads")); }

static void strict_parser_refuses_deviations(void **state)
{
	(void)state;
	expect_refused(c_type, "_type");
	expect_refused(c_ptype, "predicateType");
	expect_refused(c_extra, "unexpected field 'extra'");
	expect_refused(c_digest, "sha256");
	expect_refused(c_size, "tree_digest: does not match the file list");
	expect_refused(c_mode, "type/mode");
	expect_refused(c_path, "not a clean relative");
	expect_refused(c_order, "out of order");
	expect_refused(c_subject, "digest differs");
	expect_refused(c_subject_missing, "subjects");
	expect_refused(c_created, "created");
	expect_refused(c_ruleset, "ruleset");
	expect_refused(c_seed, "seed");
	expect_refused(c_env, "cpu");
	expect_refused(c_git, "commit");
	expect_refused(c_dataset, "imagenet");
	expect_refused(c_no_workloads, "workloads");
}

static void duplicate_keys_and_bad_json_are_refused(void **state)
{
	(void)state;
	apf_manifest *out;
	const char *dup = "{\"_type\": \"a\", \"_type\": \"b\"}";
	assert_int_equal(apf_manifest_parse(&out, dup, strlen(dup)), APF_EINPUT);
	assert_non_null(strstr(apf_error_message(), "duplicate"));
	assert_int_equal(apf_manifest_parse(&out, "{", 1), APF_EINPUT);
	assert_int_equal(apf_manifest_parse(&out, "[]", 2), APF_EINPUT);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(round_trip),
		cmocka_unit_test(long_names_round_trip),
		cmocka_unit_test(strict_parser_refuses_deviations),
		cmocka_unit_test(duplicate_keys_and_bad_json_are_refused),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
