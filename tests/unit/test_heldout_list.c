/*
 * test_heldout_list.c: the reader of held-out files in every form apf takes
 * (apf_heldout_list_load): a draw file goes to its one strict reader and
 * names its variants as B_<V> even when V starts with "B_"; a draw by hand
 * holds nothing else, so a draw file with its "format" taken out is
 * refused rather than read loosely; and the scorer's loader and the
 * runner's plan refuse a malformed file with the same message.
 */
#include "testlib.h"

#include <stdlib.h>
#include <string.h>

#include "heldout/heldout.h"
#include "rundir/rundir.h"
#include "score/score.h"

#define Z64 "0000000000000000000000000000000000000000000000000000000000000000"

static const char draw_file[] =
	"{\"format\": \"apf-heldout-v1\", \"method\": \"seed\", \"seed\": \"3\","
	" \"entries\": [],"
	" \"draws\": [{\"base\": \"mlp\", \"variant\": \"mlp_x\","
	" \"variants\": [\"mlp_x\", \"y\"], \"spec_sha256\": \"" Z64 "\"}],"
	" \"undrawn\": [{\"base\": \"bare\", \"spec_sha256\": \"" Z64 "\"}]}";

static char *write_file(const char *dir, const char *text)
{
	testlib_write_str(dir, "h.json", text);
	char *p = apf_path_join(dir, "h.json");
	assert_non_null(p);
	return p;
}

static void draw_file_is_read_by_its_strict_reader(void **state)
{
	(void)state;
	char *dir = testlib_tmpdir();
	char *p = write_file(dir, draw_file);
	apf_heldout_list *l = NULL;
	assert_apf_ok(apf_heldout_list_load(&l, p));
	assert_string_equal(l->seed, "3");
	/* The undrawn workload names nothing; the variant is B_<V>. */
	assert_int_equal(l->n, 1);
	assert_string_equal(l->v[0].base, "mlp");
	assert_string_equal(l->v[0].workload, "mlp_mlp_x");
	apf_heldout_list_free(l);
	/* A by-hand draw naming the same keeps its older reading. */
	free(p);
	p = write_file(dir, "{\"seed\": \"3\", \"draws\": [{\"base\": \"mlp\", "
			    "\"variant\": \"mlp_x\"}]}");
	assert_apf_ok(apf_heldout_list_load(&l, p));
	assert_string_equal(l->v[0].workload, "mlp_x");
	apf_heldout_list_free(l);
	free(p);
	p = write_file(dir, "[\"mlp_x\", \"wmt_glu\"]");
	assert_apf_ok(apf_heldout_list_load(&l, p));
	assert_null(l->seed);
	assert_int_equal(l->n, 2);
	assert_null(l->v[1].base);
	assert_string_equal(l->v[1].workload, "wmt_glu");
	apf_heldout_list_free(l);
	free(p);
	testlib_tmpdir_free(dir);
}

/* The file's refusal: the same from every reader apf has for it. */
static void expect_refused(const char *dir, const char *text, const char *why)
{
	char *p = write_file(dir, text);
	char want[1024];
	snprintf(want, sizeof want, "%s: %s", p, why);
	apf_heldout_list *l = NULL;
	assert_int_equal(apf_heldout_list_load(&l, p), APF_EINPUT);
	assert_null(l);
	if (strncmp(apf_error_message(), want, strlen(want)))
		fail_msg("got '%s', want '%s'", apf_error_message(), want);
	char got[1024];
	snprintf(got, sizeof got, "%s", apf_error_message());
	apf_score_heldout *h = NULL;
	assert_int_equal(apf_score_heldout_load(&h, p), APF_EINPUT);
	assert_string_equal(apf_error_message(), got);
	/* The plan is not reached: the file is refused first. */
	char **variants = NULL;
	size_t n = 0;
	assert_int_equal(apf_rundir_plan_heldout(NULL, NULL, p, &variants, &n),
			 APF_EINPUT);
	assert_string_equal(apf_error_message(), got);
	assert_null(variants);
	free(p);
}

static void malformed_files_are_refused_alike(void **state)
{
	(void)state;
	char *dir = testlib_tmpdir();
	char text[2048];
	/* Each edit of the draw file, refused by apf_heldout_parse. */
	snprintf(text, sizeof text, "%.*s, \"note\": 1}",
		 (int)strlen(draw_file) - 1, draw_file);
	expect_refused(dir, text, "draw file: unknown field \"note\"");
	const char *no_format = strstr(draw_file, "\"method\"");
	snprintf(text, sizeof text, "{%s", no_format);
	expect_refused(dir, text,
		       "method: unknown key (a draw by hand holds only "
		       "\"seed\" and \"draws\"");
	snprintf(text, sizeof text, "{\"format\": \"apf-heldout-v2\", %s",
		 no_format);
	expect_refused(dir, text, "format: expected \"apf-heldout-v1\"");
	expect_refused(dir,
		       "{\"seed\": \"1\", \"draws\": [{\"base\": \"a\", "
		       "\"variant\": \"b\", \"variants\": []}]}",
		       "draws[0].variants: unknown key");
	expect_refused(dir,
		       "{\"seed\": \"1\", \"draws\": [{\"base\": \"a\", "
		       "\"variant\": \"b_c\"}, {\"base\": \"a_b\", "
		       "\"variant\": \"c\"}]}",
		       "variant a_b_c is listed twice");
	expect_refused(dir, "{\"draws\": ", "line 1: ");
	expect_refused(dir, "{\"workloads\": {}}",
		       "expected AlgoPerf's held-out list");
	testlib_tmpdir_free(dir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(draw_file_is_read_by_its_strict_reader),
		cmocka_unit_test(malformed_files_are_refused_alike),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
