/*
 * test_base.c: the error convention, atomic files under injected faults,
 * UTF-8 path checks and hex.
 */
#include "testlib.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/base.h"

static int count_entries(const char *dir)
{
	DIR *d = opendir(dir);
	assert_non_null(d);
	int n = 0;
	struct dirent *de;
	while ((de = readdir(d)))
		if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
			n++;
	closedir(d);
	return n;
}

static void error_message_is_what_colon_why(void **state)
{
	(void)state;
	int rc = apf_error(APF_EINPUT, "x.ini", "line %d: bad value", 3);
	assert_int_equal(rc, APF_EINPUT);
	assert_string_equal(apf_error_message(), "x.ini: line 3: bad value");
	apf_error_prefix(rc, "workload");
	assert_string_equal(apf_error_message(),
			    "workload: x.ini: line 3: bad value");
	apf_error(APF_EINPUT, "a", "two\nlines");
	assert_null(strchr(apf_error_message(), '\n'));
}

static void exit_codes_follow_design(void **state)
{
	(void)state;
	assert_int_equal(apf_exit_code(APF_OK), 0);
	assert_int_equal(apf_exit_code(APF_EVERIFY), 1);
	assert_int_equal(apf_exit_code(APF_EUSAGE), 2);
	assert_int_equal(apf_exit_code(APF_EINPUT), 2);
	assert_int_equal(apf_exit_code(APF_EABORT), 3);
}

static void atomic_write_replaces_whole_file(void **state)
{
	(void)state;
	char *dir = testlib_tmpdir();
	char *path = apf_path_join(dir, "f");
	assert_apf_ok(apf_file_write(path, "old", 3, 0644, 0));
	assert_apf_ok(apf_file_write(path, "new!", 4, 0600, 0));
	char *data;
	size_t len;
	assert_apf_ok(apf_file_read(path, 100, &data, &len));
	assert_int_equal(len, 4);
	assert_string_equal(data, "new!");
	struct stat st;
	assert_int_equal(stat(path, &st), 0);
	assert_int_equal(st.st_mode & 0777, 0600);
	free(data);
	assert_int_equal(count_entries(dir), 1);
	free(path);
	testlib_tmpdir_free(dir);
}

static void injected_faults_leave_old_file_and_no_temporary(void **state)
{
	(void)state;
	const char *ops[] = {"write", "fsync", "rename"};
	char *dir = testlib_tmpdir();
	char *path = apf_path_join(dir, "f");
	assert_apf_ok(apf_file_write(path, "old", 3, 0644, 0));
	for (int i = 0; i < 3; i++) {
		apf_fault_set(ops[i], 1);
		int rc = apf_file_write(path, "new", 3, 0644, 0);
		apf_fault_set(NULL, 0);
		assert_int_equal(rc, APF_EIO);
		assert_non_null(strstr(apf_error_message(), ops[i]));
		char *data;
		assert_apf_ok(apf_file_read(path, 100, &data, NULL));
		assert_string_equal(data, "old");
		free(data);
		assert_int_equal(count_entries(dir), 1);
	}
	free(path);
	testlib_tmpdir_free(dir);
}

static void noreplace_refuses_existing_target(void **state)
{
	(void)state;
	char *dir = testlib_tmpdir();
	char *path = apf_path_join(dir, "key");
	assert_apf_ok(apf_file_write(path, "a", 1, 0600, APF_ATOMIC_NOREPLACE));
	assert_int_equal(apf_file_write(path, "b", 1, 0600,
					APF_ATOMIC_NOREPLACE),
			 APF_EINPUT);
	assert_non_null(strstr(apf_error_message(), "refusing to overwrite"));
	char *data;
	assert_apf_ok(apf_file_read(path, 100, &data, NULL));
	assert_string_equal(data, "a");
	free(data);
	free(path);
	testlib_tmpdir_free(dir);
}

static void file_read_caps_size(void **state)
{
	(void)state;
	char *dir = testlib_tmpdir();
	testlib_write_str(dir, "big", "0123456789");
	char *path = apf_path_join(dir, "big"), *data;
	assert_int_equal(apf_file_read(path, 5, &data, NULL), APF_EINPUT);
	assert_non_null(strstr(apf_error_message(), "limit"));
	assert_null(data);
	free(path);
	testlib_tmpdir_free(dir);
}

static void utf8_paths(void **state)
{
	(void)state;
	assert_true(apf_utf8_path_ok("a/b.c"));
	assert_true(apf_utf8_path_ok("caf\xc3\xa9/\xe2\x82\xac"));
	assert_false(apf_utf8_path_ok("a\nb"));
	assert_false(apf_utf8_path_ok("\xc3"));          /* truncated */
	assert_false(apf_utf8_path_ok("\xc0\xaf"));      /* overlong '/' */
	assert_false(apf_utf8_path_ok("\xed\xa0\x80"));  /* surrogate */
	assert_false(apf_utf8_path_ok("\xff"));
}

static void hex_round_trip(void **state)
{
	(void)state;
	uint8_t in[4] = {0, 0x7f, 0x80, 0xff}, out[4];
	char hex[9];
	apf_hex(hex, in, 4);
	assert_string_equal(hex, "007f80ff");
	assert_int_equal(apf_unhex(out, hex, 4), 0);
	assert_memory_equal(in, out, 4);
	assert_int_not_equal(apf_unhex(out, "007F80FF", 4), 0);
	assert_int_not_equal(apf_unhex(out, "007f80f", 4), 0);
	assert_false(apf_is_hex_digest("abc"));
}

static void remove_tree_does_not_follow_symlinks(void **state)
{
	(void)state;
	char *outside = testlib_tmpdir(), *dir = testlib_tmpdir();
	testlib_write_str(outside, "keep", "x");
	testlib_write_str(dir, "sub/f", "y");
	char *link = apf_path_join(dir, "sub/link");
	assert_int_equal(symlink(outside, link), 0);
	assert_apf_ok(apf_remove_tree(dir));
	struct stat st;
	assert_int_not_equal(stat(dir, &st), 0);
	char *keep = apf_path_join(outside, "keep");
	assert_int_equal(stat(keep, &st), 0);
	free(keep);
	free(link);
	free(dir);
	testlib_tmpdir_free(outside);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(error_message_is_what_colon_why),
		cmocka_unit_test(exit_codes_follow_design),
		cmocka_unit_test(atomic_write_replaces_whole_file),
		cmocka_unit_test(injected_faults_leave_old_file_and_no_temporary),
		cmocka_unit_test(noreplace_refuses_existing_target),
		cmocka_unit_test(file_read_caps_size),
		cmocka_unit_test(utf8_paths),
		cmocka_unit_test(hex_round_trip),
		cmocka_unit_test(remove_tree_does_not_follow_symlinks),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
