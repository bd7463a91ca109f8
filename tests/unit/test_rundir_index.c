/*
 * test_rundir_index.c: the run's signed index of unit heads: what is set
 * reads back; concurrent writers (processes, as apf run -j and Slurm tasks
 * are) never lose each other's entries; an index signed by another key or
 * of another run is refused; the decoder refuses every malformed payload.
 */
#include "testlib.h"

#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "rundir/rundir.h"
#include "sign/sign.h"

#define SHA_A "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
#define SHA_B "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"

/* The index's units, its signature checked by key. */
static json_t *read_index(const char *dir, const apf_key *key, const char *rj)
{
	char *text;
	size_t len;
	char *path = apf_path_join(dir, APF_RUNDIR_INDEX_FILE);
	assert_apf_ok(apf_file_read(&text, &len, path, 1 << 20));
	struct apf_dsse d = {0};
	assert_apf_ok(apf_dsse_parse(&d, text, len));
	apf_buf pae = {0};
	assert_apf_ok(apf_dsse_pae(&pae, d.payload_type, d.payload, d.payload_len));
	assert_apf_ok(apf_key_verify(key, pae.data, pae.len, d.sigs[0], 64));
	json_t *units;
	assert_apf_ok(apf_rundir_index_decode(&units, &d, rj, path));
	apf_buf_free(&pae);
	apf_dsse_free(&d);
	free(text);
	free(path);
	return units;
}

static void entries_set_read_back_and_replace(void **state)
{
	(void)state;
	char *dir = testlib_tmpdir();
	apf_key *k;
	assert_apf_ok(apf_key_generate(&k));
	assert_apf_ok(apf_rundir_index_update(dir, k, SHA_A, NULL, 0, NULL));
	json_t *u = read_index(dir, k, SHA_A);
	assert_int_equal(json_object_size(u), 0);
	json_decref(u);
	assert_apf_ok(apf_rundir_index_update(dir, k, SHA_A, "study_0/w/trial_1", 7, SHA_B));
	assert_apf_ok(apf_rundir_index_update(dir, k, SHA_A, "study_0/w/trial_2", 3, SHA_A));
	assert_apf_ok(apf_rundir_index_update(dir, k, SHA_A, "study_0/w/trial_1", 9, SHA_A));
	u = read_index(dir, k, SHA_A);
	assert_int_equal(json_object_size(u), 2);
	json_t *e = json_object_get(u, "study_0/w/trial_1");
	assert_int_equal(json_integer_value(json_object_get(e, "records")), 9);
	assert_string_equal(json_string_value(json_object_get(e, "head")), SHA_A);
	json_decref(u);
	apf_key_free(k);
	testlib_tmpdir_free(dir);
}

static void concurrent_writers_keep_every_entry(void **state)
{
	(void)state;
	char *dir = testlib_tmpdir();
	apf_key *k;
	assert_apf_ok(apf_key_generate(&k));
	enum { WRITERS = 8, EACH = 10 };
	pid_t pids[WRITERS];
	for (int w = 0; w < WRITERS; w++) {
		pids[w] = fork();
		assert_true(pids[w] >= 0);
		if (pids[w] == 0) {
			int bad = 0;
			for (int i = 0; i < EACH; i++) {
				char name[64];
				snprintf(name, sizeof name, "study_%d/w/trial_%d", w, i + 1);
				bad |= apf_rundir_index_update(dir, k, SHA_A, name,
							       (uint64_t)i + 1, SHA_B) != 0;
			}
			_exit(bad);
		}
	}
	for (int w = 0; w < WRITERS; w++) {
		int st;
		assert_int_equal(waitpid(pids[w], &st, 0), pids[w]);
		assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	}
	json_t *u = read_index(dir, k, SHA_A);
	assert_int_equal(json_object_size(u), WRITERS * EACH);
	json_decref(u);
	apf_key_free(k);
	testlib_tmpdir_free(dir);
}

static void another_key_or_run_is_refused(void **state)
{
	(void)state;
	char *dir = testlib_tmpdir();
	apf_key *k, *mallory;
	assert_apf_ok(apf_key_generate(&k));
	assert_apf_ok(apf_key_generate(&mallory));
	assert_apf_ok(apf_rundir_index_update(dir, mallory, SHA_A, "study_0/w/trial_1", 1, SHA_B));
	assert_int_equal(apf_rundir_index_update(dir, k, SHA_A, "study_0/w/trial_2", 1, SHA_B),
			 APF_EVERIFY);
	assert_non_null(strstr(apf_error_message(), "not signed by this runner's key"));
	apf_error_clear();
	/* Signed by this key, but for another run.json. */
	char *again = testlib_tmpdir();
	assert_apf_ok(apf_rundir_index_update(again, k, SHA_B, NULL, 0, NULL));
	assert_int_equal(apf_rundir_index_update(again, k, SHA_A, "study_0/w/trial_1", 1, SHA_B),
			 APF_EVERIFY);
	assert_non_null(strstr(apf_error_message(), "run_json_sha256"));
	apf_error_clear();
	apf_key_free(k);
	apf_key_free(mallory);
	testlib_tmpdir_free(dir);
	testlib_tmpdir_free(again);
}

static void malformed_payloads_are_refused(void **state)
{
	(void)state;
	static const char *const bad[] = {
		"[]",
		"{\"format\":\"apf-run-index-v2\",\"run_json_sha256\":\"" SHA_A "\",\"units\":{}}",
		"{\"format\":\"apf-run-index-v1\",\"run_json_sha256\":\"xyz\",\"units\":{}}",
		"{\"format\":\"apf-run-index-v1\",\"run_json_sha256\":\"" SHA_A "\",\"units\":[]}",
		"{\"format\":\"apf-run-index-v1\",\"run_json_sha256\":\"" SHA_A "\",\"units\":{},\"x\":1}",
		"{\"format\":\"apf-run-index-v1\",\"run_json_sha256\":\"" SHA_A "\",\"units\":{\"u\":{\"records\":0,\"head\":\"" SHA_A "\"}}}",
		"{\"format\":\"apf-run-index-v1\",\"run_json_sha256\":\"" SHA_A "\",\"units\":{\"u\":{\"records\":1,\"head\":\"AB\"}}}",
		"{\"format\":\"apf-run-index-v1\",\"run_json_sha256\":\"" SHA_A "\",\"units\":{\"u\":{\"records\":1,\"head\":\"" SHA_A "\",\"more\":1}}}",
		"{\"format\":\"apf-run-index-v1\",\"run_json_sha256\":\"" SHA_A "\",\"units\":{},\"units\":{}}",
		"not json",
	};
	for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
		struct apf_dsse d = {.payload_type = APF_RUNDIR_INDEX_TYPE,
				     .payload = (uint8_t *)bad[i],
				     .payload_len = strlen(bad[i])};
		json_t *u = NULL;
		assert_int_equal(apf_rundir_index_decode(&u, &d, SHA_A, "index"), APF_EVERIFY);
		assert_null(u);
		apf_error_clear();
	}
	const char *good = "{\"format\":\"apf-run-index-v1\",\"run_json_sha256\":\"" SHA_A
			   "\",\"units\":{\"u\":{\"records\":1,\"head\":\"" SHA_B "\"}}}";
	struct apf_dsse d = {.payload_type = "application/other",
			     .payload = (uint8_t *)good, .payload_len = strlen(good)};
	json_t *u = NULL;
	assert_int_equal(apf_rundir_index_decode(&u, &d, SHA_A, "index"), APF_EVERIFY);
	d.payload_type = APF_RUNDIR_INDEX_TYPE;
	assert_apf_ok(apf_rundir_index_decode(&u, &d, SHA_A, "index"));
	assert_int_equal(json_object_size(u), 1);
	json_decref(u);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(entries_set_read_back_and_replace),
		cmocka_unit_test(concurrent_writers_keep_every_entry),
		cmocka_unit_test(another_key_or_run_is_refused),
		cmocka_unit_test(malformed_payloads_are_refused),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
