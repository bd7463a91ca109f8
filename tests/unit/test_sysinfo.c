/*
 * test_sysinfo.c: the environment record validates and compares field by
 * field, read without loading a vendor's library into this process; git
 * provenance of a directory outside git, a clean checkout, every
 * kind of dirtiness, credentials in remotes, and a repository owned by
 * another user.
 *
 * No configuration of the machine or the user takes part: every git
 * command runs with an identity and neither global nor system config, and
 * libgit2, in this process, searches no configuration directory, so a
 * fresh machine without a git identity gives the same results.
 */
#include "testlib.h"

#include <dlfcn.h>
#include <git2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sysinfo/sysinfo.h"

/* cmd may chain several git commands: the variables are exported, not
 * prefixed to the first one only. */
static void run(const char *dir, const char *cmd)
{
	apf_buf b = {0};
	apf_buf_printf(&b,
		       "cd '%s' && export GIT_CONFIG_GLOBAL=/dev/null "
		       "GIT_CONFIG_NOSYSTEM=1 GIT_AUTHOR_NAME=t "
		       "GIT_AUTHOR_EMAIL=t@t GIT_COMMITTER_NAME=t "
		       "GIT_COMMITTER_EMAIL=t@t && (%s) >/dev/null 2>&1",
		       dir, cmd);
	if (system(b.data) != 0)
		fail_msg("command failed: %s", b.data);
	apf_buf_free(&b);
}

struct seen_fields {
	int n;
	char fields[2][64];
};

static void diff(void *user, const char *f, const char *a, const char *b)
{
	struct seen_fields *seen = user;
	(void)a;
	(void)b;
	if (seen->n < 2)
		snprintf(seen->fields[seen->n], 64, "%s", f);
	seen->n++;
}

static void env_record_validates_and_compares(void **state)
{
	(void)state;
	json_t *env;
	assert_apf_ok(apf_env_capture(&env));
	assert_apf_ok(apf_env_validate(env));
	json_t *copy = json_deep_copy(env);
	assert_int_equal(apf_env_compare(env, copy, NULL, NULL), 0);
	json_object_set_new(json_object_get(copy, "cpu"), "model",
			    json_string("Other CPU"));
	json_object_set_new(json_object_get(copy, "blas"), "threads",
			    json_integer(64));
	struct seen_fields seen = {0};
	assert_int_equal(apf_env_compare(env, copy, diff, &seen), 2);
	assert_string_equal(seen.fields[0], "cpu.model");
	assert_string_equal(seen.fields[1], "blas.threads");
	json_object_set_new(copy, "surprise", json_true());
	assert_int_equal(apf_env_validate(copy), APF_EINPUT);
	assert_non_null(strstr(apf_error_message(), "surprise"));
	json_object_del(copy, "surprise");
	json_object_set_new(copy, "memory_bytes", json_string("lots"));
	assert_int_equal(apf_env_validate(copy), APF_EINPUT);
	assert_non_null(strstr(apf_error_message(), "memory_bytes"));
	json_decref(copy);
	json_decref(env);
}

/* The GPU and CUDA versions are read in a child process: after a capture
 * no vendor library is mapped here (pack, a run's supervisor and verify
 * capture the record), and yet, where the CUDA runtime is installed (as
 * on a developer's or CI's machine with the toolkit), its version is in
 * the record. */
static void env_capture_loads_no_vendor_library(void **state)
{
	(void)state;
	json_t *env;
	assert_apf_ok(apf_env_capture(&env));
	FILE *f = fopen("/proc/self/maps", "r");
	assert_non_null(f);
	char line[4096];
	static const char *const vendor[] = {"libcudart", "libcublas",
					     "libcudnn", "libnvidia-ml"};
	while (fgets(line, sizeof line, f))
		for (size_t i = 0; i < sizeof vendor / sizeof vendor[0]; i++)
			if (strstr(line, vendor[i])) {
				fprintf(stderr, "mapped here: %s", line);
				fail();
			}
	fclose(f);
	/* Loaded here only now, to learn whether the child should have
	 * found a runtime. */
	void *h = dlopen("libcudart.so", RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
	if (!h)
		h = dlopen("libcudart.so.13",
			   RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
	if (h) {
		json_t *cuda = json_object_get(env, "cuda");
		assert_true(json_is_object(cuda));
		assert_true(json_is_string(json_object_get(cuda, "runtime")));
		dlclose(h);
	}
	json_decref(env);
}

/* The launcher's APF_IMAGE_DIGEST is recorded as given when it is a
 * digest, and refused when it is a tag, a typo or something that would
 * break the one-line error. */
static void image_digest_is_a_digest_or_refused(void **state)
{
	(void)state;
	static const char *const good[] = {
		"sha256:9de2962035f029f49d1d77db226d7a0cf3e4400c63107ff59f8e31b4a462c5fa",
		"localhost/apf@sha256:"
		"9de2962035f029f49d1d77db226d7a0cf3e4400c63107ff59f8e31b4a462c5fa",
		"registry.example:5000/a/b@sha512:"
		"00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff",
	};
	static const char *const bad[] = {
		"apf:latest", "sha256:", "sha256:XYZ", "@sha256:"
		"9de2962035f029f49d1d77db226d7a0cf3e4400c63107ff59f8e31b4a462c5fa",
		"sha256:9DE2962035F029F49D1D77DB226D7A0CF3E4400C63107FF59F8E31B4A462C5FA",
		"a b@sha256:9de2962035f029f49d1d77db226d7a0cf3e4400c63107ff59f8e31b4a462c5fa",
		"sha256:9de2\n962035f029f49d1d77db226d7a0cf3e4400c63107ff59f8e31b4a462c5fa",
	};
	json_t *env;
	for (size_t i = 0; i < sizeof good / sizeof *good; i++) {
		setenv("APF_IMAGE_DIGEST", good[i], 1);
		assert_apf_ok(apf_env_capture(&env));
		assert_string_equal(
			json_string_value(json_object_get(env, "image_digest")),
			good[i]);
		json_decref(env);
	}
	for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
		setenv("APF_IMAGE_DIGEST", bad[i], 1);
		assert_int_equal(apf_env_capture(&env), APF_EINPUT);
		assert_null(env);
		const char *msg = apf_error_message();
		assert_non_null(strstr(msg, "is not an image digest"));
		assert_null(strchr(msg, '\n'));
	}
	setenv("APF_IMAGE_DIGEST", "", 1);
	assert_apf_ok(apf_env_capture(&env));
	assert_true(json_is_null(json_object_get(env, "image_digest")));
	json_decref(env);
	unsetenv("APF_IMAGE_DIGEST");
}

static void outside_git_is_recorded_as_such(void **state)
{
	(void)state;
	char *dir = testlib_tmpdir();
	json_t *g;
	assert_apf_ok(apf_git_provenance(&g, dir));
	assert_true(json_is_false(json_object_get(g, "repository")));
	assert_apf_ok(apf_git_validate(g));
	json_decref(g);
	testlib_tmpdir_free(dir);
}

static char *make_repo(void)
{
	char *dir = testlib_tmpdir();
	testlib_write_str(dir, "sub/submission.c", "int x;\n");
	testlib_write_str(dir, "other/file", "y\n");
	testlib_write_str(dir, ".gitignore", "*.o\n");
	run(dir, "git init -q -b main . && git add -A && git commit -qm init && "
		 "git remote add origin https://alice:s3cret@example.com/r.git");
	return dir;
}

static int dirty(const char *dir)
{
	json_t *g;
	assert_apf_ok(apf_git_provenance(&g, dir));
	int d = json_is_true(json_object_get(g, "dirty"));
	json_decref(g);
	return d;
}

static void clean_checkout_and_credentials(void **state)
{
	(void)state;
	char *dir = make_repo();
	char *sub = apf_path_join(dir, "sub");
	json_t *g;
	assert_apf_ok(apf_git_provenance(&g, sub));
	assert_apf_ok(apf_git_validate(g));
	assert_true(json_is_true(json_object_get(g, "repository")));
	assert_int_equal(strlen(json_string_value(json_object_get(g, "commit"))),
			 40);
	assert_string_equal(json_string_value(json_object_get(g, "branch")),
			    "main");
	assert_string_equal(json_string_value(json_object_get(g, "remote")),
			    "https://example.com/r.git");
	assert_string_equal(json_string_value(json_object_get(g, "path")), "sub");
	assert_true(json_is_false(json_object_get(g, "dirty")));
	json_decref(g);
	free(sub);
	testlib_tmpdir_free(dir);
}

static void every_kind_of_change_under_the_submission_is_dirty(void **state)
{
	(void)state;
	char *dir = make_repo();
	char *sub = apf_path_join(dir, "sub");
	/* A change elsewhere in the repository does not count. */
	testlib_write_str(dir, "other/file", "changed\n");
	assert_false(dirty(sub));
	testlib_write_str(dir, "sub/submission.c", "int y;\n");
	assert_true(dirty(sub));
	run(dir, "git checkout -q -- sub");
	assert_false(dirty(sub));
	testlib_write_str(dir, "sub/new.c", "\n");
	assert_true(dirty(sub));
	run(dir, "git add sub/new.c");
	assert_true(dirty(sub));
	run(dir, "git rm -q --cached sub/new.c && rm sub/new.c");
	assert_false(dirty(sub));
	/* Ignored files are packed but not in the commit. */
	testlib_write_str(dir, "sub/build.o", "\x7f" "ELF");
	assert_true(dirty(sub));
	/* A sibling whose name starts like the submission's does not count. */
	char *dir2 = make_repo();
	testlib_write_str(dir2, "subway/x", "new\n");
	char *sub2 = apf_path_join(dir2, "sub");
	assert_false(dirty(sub2));
	free(sub2);
	testlib_tmpdir_free(dir2);
	free(sub);
	testlib_tmpdir_free(dir);
}

static void repository_owned_by_another_user_still_works(void **state)
{
	(void)state;
	if (geteuid() != 0)
		SKIP_BECAUSE("needs root to chown a repository to another user");
	char *dir = make_repo();
	run(dir, "chown -R 65534:65534 .");
	json_t *g;
	assert_apf_ok(apf_git_provenance(&g, dir));
	assert_true(json_is_true(json_object_get(g, "repository")));
	assert_true(json_is_string(json_object_get(g, "commit")));
	json_decref(g);
	testlib_tmpdir_free(dir);
}

/* Empty search paths for every configuration level. libgit2 is kept
 * initialised until exit, so apf's own init and shutdown leave them. */
static int libgit2_reads_no_machine_config(void)
{
	static const git_config_level_t levels[] = {
		GIT_CONFIG_LEVEL_PROGRAMDATA, GIT_CONFIG_LEVEL_SYSTEM,
		GIT_CONFIG_LEVEL_XDG, GIT_CONFIG_LEVEL_GLOBAL};
	if (git_libgit2_init() < 0)
		return -1;
	for (size_t i = 0; i < sizeof levels / sizeof *levels; i++)
		if (git_libgit2_opts(GIT_OPT_SET_SEARCH_PATH, levels[i], "") < 0)
			return -1;
	return 0;
}

int main(void)
{
	if (libgit2_reads_no_machine_config() != 0) {
		fprintf(stderr, "test_sysinfo: libgit2: cannot clear its "
				"configuration search paths\n");
		return 1;
	}
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(env_record_validates_and_compares),
		cmocka_unit_test(env_capture_loads_no_vendor_library),
		cmocka_unit_test(image_digest_is_a_digest_or_refused),
		cmocka_unit_test(outside_git_is_recorded_as_such),
		cmocka_unit_test(clean_checkout_and_credentials),
		cmocka_unit_test(every_kind_of_change_under_the_submission_is_dirty),
		cmocka_unit_test(repository_owned_by_another_user_still_works),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
