/*
 * test_base.c: the error convention, atomic files under injected faults,
 * reading files others wrote (never blocking, never following a symlink
 * out, capped), escaping untrusted text for a terminal, UTF-8 path checks
 * and hex.
 */
#include "testlib.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
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

static void error_prefix_is_not_added_twice(void **state)
{
	(void)state;
	apf_error_errno(APF_EINPUT, ENOENT, "/x/e.apf", "open");
	apf_error_prefix(APF_EINPUT, "/x/e.apf");
	assert_string_equal(apf_error_message(),
			    "/x/e.apf: open: No such file or directory");
	/* Only a whole first component counts: "/x/e" is not "/x/e.apf". */
	apf_error_prefix(APF_EINPUT, "/x/e");
	assert_string_equal(apf_error_message(),
			    "/x/e: /x/e.apf: open: No such file or directory");
	/* A multi-component prefix already there is not repeated either. */
	apf_error(APF_EINPUT, "envelope: payload", "not base64");
	apf_error_prefix(APF_EINPUT, "envelope: payload");
	assert_string_equal(apf_error_message(), "envelope: payload: not base64");
	/* A message that is exactly the name. */
	apf_error_restore(APF_EINPUT, "w");
	apf_error_prefix(APF_EINPUT, "w");
	assert_string_equal(apf_error_message(), "w");
	/* Compared as stored (escaped): a name with a control byte is found. */
	apf_error(APF_EINPUT, "u\x1b", "bad");
	apf_error_prefix(APF_EINPUT, "u\x1b");
	assert_string_equal(apf_error_message(), "u\\x1b: bad");
	/* With no message, the prefix still names the status. */
	apf_error_clear();
	apf_error_prefix(APF_EINPUT, "w");
	assert_string_equal(apf_error_message(), "w: bad input");
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
	assert_apf_ok(apf_file_read(&data, &len, path, 100));
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
		assert_apf_ok(apf_file_read(&data, NULL, path, 100));
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
	assert_apf_ok(apf_file_read(&data, NULL, path, 100));
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
	assert_int_equal(apf_file_read(&data, NULL, path, 5), APF_EINPUT);
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
	/* Every byte value in every place of a four-byte word (apf_hex takes
	 * four at a time) and in the bytes after the last word, against the
	 * table; each round trips. */
	static const char digits[] = "0123456789abcdef";
	uint8_t b[7], back[7];
	char h[15], want[15];
	for (int v = 0; v < 256; v++)
		for (size_t n = 1; n <= 7; n++) {
			for (size_t i = 0; i < n; i++)
				b[i] = (uint8_t)(v + 29 * i);
			b[(size_t)v % n] = (uint8_t)v;
			apf_hex(h, b, n);
			for (size_t i = 0; i < n; i++) {
				want[2 * i] = digits[b[i] >> 4];
				want[2 * i + 1] = digits[b[i] & 15];
			}
			want[2 * n] = 0;
			assert_string_equal(h, want);
			assert_int_equal(apf_unhex(back, h, n), 0);
			assert_memory_equal(back, b, n);
		}
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

/* ---- reading files others wrote ------------------------------------------ */

static void open_regular_refuses_fifo_symlink_and_directory_without_blocking(
	void **state)
{
	(void)state;
	char *dir = testlib_tmpdir();
	testlib_write_str(dir, "f", "data");
	char *f = apf_path_join(dir, "f"), *fifo = apf_path_join(dir, "fifo"),
	     *link = apf_path_join(dir, "link");
	assert_int_equal(mkfifo(fifo, 0600), 0);
	assert_int_equal(symlink(f, link), 0);
	int fd;
	struct stat st;
	assert_apf_ok(apf_file_open_regular(&fd, &st, f, 0));
	assert_true(fd >= 0);
	assert_int_equal(st.st_size, 4);
	close(fd);
	/* Nobody writes the FIFO: a blocking open would hang the test. */
	assert_int_equal(apf_file_open_regular(&fd, NULL, fifo, 0), APF_EINPUT);
	assert_int_equal(fd, -1);
	assert_non_null(strstr(apf_error_message(), "not a regular file (a FIFO)"));
	assert_non_null(strstr(apf_error_message(), fifo));
	char *data = NULL;
	assert_int_equal(apf_file_read(&data, NULL, fifo, 100), APF_EINPUT);
	assert_null(data);
	assert_int_equal(apf_file_open_regular(&fd, NULL, link, 0), APF_EINPUT);
	assert_non_null(strstr(apf_error_message(), "symbolic link"));
	assert_apf_ok(apf_file_open_regular(&fd, NULL, link, APF_FILE_FOLLOW));
	close(fd);
	assert_int_equal(apf_file_open_regular(&fd, NULL, dir, APF_FILE_FOLLOW),
			 APF_EINPUT);
	assert_non_null(strstr(apf_error_message(), "a directory"));
	assert_int_equal(apf_file_open_regular(&fd, NULL, "/dev/zero",
					       APF_FILE_FOLLOW),
			 APF_EINPUT);
	assert_non_null(strstr(apf_error_message(), "a character device"));
	char *none = apf_path_join(dir, "none");
	assert_apf_ok(apf_file_open_regular(&fd, NULL, none, APF_FILE_MISSING_OK));
	assert_int_equal(fd, -1);
	assert_int_equal(apf_file_open_regular(&fd, NULL, none, 0), APF_EINPUT);
	free(none);
	free(f);
	free(fifo);
	free(link);
	testlib_tmpdir_free(dir);
}

static void open_beneath_follows_no_symlink_in_any_component(void **state)
{
	(void)state;
	char *outside = testlib_tmpdir(), *dir = testlib_tmpdir();
	testlib_write_str(outside, "sub/f", "secret");
	testlib_write_str(dir, "a/b/f", "inside");
	char *sub = apf_path_join(outside, "sub"), *link = apf_path_join(dir, "l");
	assert_int_equal(symlink(sub, link), 0);
	char *flink = apf_path_join(dir, "a/fl"), *of = apf_path_join(sub, "f");
	assert_int_equal(symlink(of, flink), 0);
	int fd;
	char *data;
	size_t len;
	assert_apf_ok(apf_file_read_beneath(&data, &len, dir, "a/b/f", 100, 0));
	assert_string_equal(data, "inside");
	free(data);
	/* A directory component that is a symlink, and a last one. */
	assert_int_equal(apf_file_open_beneath(&fd, NULL, dir, "l/f", 0),
			 APF_EINPUT);
	assert_non_null(strstr(apf_error_message(), "l is a symbolic link"));
	assert_int_equal(apf_file_open_beneath(&fd, NULL, dir, "a/fl", 0),
			 APF_EINPUT);
	assert_non_null(strstr(apf_error_message(), "symbolic link"));
	/* Paths that could leave the directory are refused unopened. */
	const char *bad[] = {"../x", "a/../../x", "/etc/passwd", "", "a//f",
			     "./a/b/f", "a/b/f/"};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		assert_int_equal(apf_file_open_beneath(&fd, NULL, dir, bad[i], 0),
				 APF_EINPUT);
		assert_int_equal(fd, -1);
	}
	/* A file where a directory should be. */
	assert_int_equal(apf_file_open_beneath(&fd, NULL, dir, "a/b/f/g", 0),
			 APF_EINPUT);
	assert_non_null(strstr(apf_error_message(), "a/b/f is not a directory"));
	assert_apf_ok(apf_file_read_beneath(&data, NULL, dir, "a/x/y", 100,
					    APF_FILE_MISSING_OK));
	assert_null(data);
	assert_int_equal(apf_file_read_beneath(&data, NULL, dir, "a/x", 100, 0),
			 APF_EINPUT);
	free(sub);
	free(link);
	free(flink);
	free(of);
	testlib_tmpdir_free(dir);
	testlib_tmpdir_free(outside);
}

static void sparse_file_over_the_cap_is_refused_before_reading(void **state)
{
	(void)state;
	char *dir = testlib_tmpdir();
	char *p = apf_path_join(dir, "big");
	int fd = open(p, O_WRONLY | O_CREAT, 0644);
	assert_true(fd >= 0);
	assert_int_equal(ftruncate(fd, (off_t)1 << 40), 0);
	close(fd);
	char *data = NULL;
	uint64_t t0 = apf_now_ns();
	assert_int_equal(apf_file_read_regular(&data, NULL, p, 1 << 20), APF_EINPUT);
	assert_true(apf_now_ns() - t0 < 1000000000ull);
	assert_null(data);
	assert_non_null(strstr(apf_error_message(), "1099511627776 bytes, larger "
						    "than the 1048576-byte limit"));
	free(p);
	testlib_tmpdir_free(dir);
}

/* ---- escaping -------------------------------------------------------------- */

static void text_escape_keeps_printable_utf8_and_escapes_controls(void **state)
{
	(void)state;
	char out[256];
	apf_text_escape(out, sizeof out, "caf\xc3\xa9 \xe2\x82\xac a\\b");
	assert_string_equal(out, "caf\xc3\xa9 \xe2\x82\xac a\\b");
	apf_text_escape(out, sizeof out, "\x1b[31mred\x1b[0m\a\r\n\t\x7f");
	assert_string_equal(out, "\\x1b[31mred\\x1b[0m\\x07\\x0d\\x0a\\x09\\x7f");
	/* C1 CSI, as UTF-8 and as a bare byte; invalid and overlong bytes. */
	apf_text_escape(out, sizeof out, "\xc2\x9b" "2J|\x9b|\xff|\xc0\xaf|\xc3");
	assert_string_equal(out, "\\xc2\\x9b2J|\\x9b|\\xff|\\xc0\\xaf|\\xc3");
	/* Right-to-left override: it would reorder the rest of the line. */
	apf_text_escape(out, sizeof out, "a\xe2\x80\xae" "b");
	assert_string_equal(out, "a\\xe2\\x80\\xaeb");
	/* Escaping what is escaped changes nothing. */
	char twice[256];
	apf_text_escape(twice, sizeof twice, out);
	assert_string_equal(twice, out);
	apf_text_escape(out, sizeof out, NULL);
	assert_string_equal(out, "");
}

static void text_escape_cuts_between_characters_and_escapes(void **state)
{
	(void)state;
	char out[8];
	memset(out, 'z', sizeof out);
	apf_text_escape(out, 6, "ab\x1b" "cd");
	assert_string_equal(out, "ab"); /* \x1b needs 4 of the 3 left */
	apf_text_escape(out, 5, "ab\xe2\x82\xac");
	assert_string_equal(out, "ab"); /* the euro sign needs 3 of 2 left */
	apf_text_escape(out, 1, "abc");
	assert_string_equal(out, "");
	out[0] = 'z';
	apf_text_escape(out, 0, "abc");
	assert_int_equal(out[0], 'z');
	apf_text_escape(out, 8, "abcdefghij");
	assert_string_equal(out, "abcdefg");
}

static void buf_escape_appends_the_whole_text_escaped(void **state)
{
	(void)state;
	apf_buf b = {0};
	assert_int_equal(apf_buf_puts(&b, "name: "), 0);
	assert_int_equal(apf_buf_escape(&b, "\x1b]0;owned\x07 \xc2\x9b" "2J "
					    "\xe2\x80\xae" "cba \xff caf\xc3\xa9\r"),
			 0);
	assert_string_equal(b.data, "name: \\x1b]0;owned\\x07 \\xc2\\x9b2J "
				    "\\xe2\\x80\\xaecba \\xff caf\xc3\xa9\\x0d");
	/* The same as apf_text_escape's, however long: nothing is cut. */
	char in[3000], one[16000];
	for (size_t i = 0; i < sizeof in - 1; i++)
		in[i] = i % 7 ? 'a' : '\x1b';
	in[sizeof in - 1] = 0;
	b.len = 0;
	assert_int_equal(apf_buf_escape(&b, in), 0);
	apf_text_escape(one, sizeof one, in);
	assert_string_equal(b.data, one);
	assert_int_equal(b.len, strlen(one));
	assert_true(b.len > sizeof in);
	/* NULL and "" append nothing, but leave a string. */
	apf_buf e = {0};
	assert_int_equal(apf_buf_escape(&e, NULL), 0);
	assert_non_null(e.data);
	assert_string_equal(e.data, "");
	apf_buf_free(&e);
	apf_buf_free(&b);
}

static void buf_utf8_escapes_only_invalid_utf8(void **state)
{
	(void)state;
	apf_buf b = {0};
	/* Controls, C1 and bidi are valid UTF-8: a JSON or HTML writer
	 * escapes them its own way. Invalid and overlong bytes are not. */
	assert_int_equal(apf_buf_utf8(&b, "a\x1b[2J\xc2\x9b\xe2\x80\xae|\xff|"
					  "\xc0\xaf|\xc3"),
			 0);
	assert_string_equal(b.data, "a\x1b[2J\xc2\x9b\xe2\x80\xae|\\xff|"
				    "\\xc0\\xaf|\\xc3");
	apf_buf_free(&b);
}

static void text_printable_is_what_escaping_leaves_alone(void **state)
{
	(void)state;
	static const char *const kept[] = {"", "plain", "caf\xc3\xa9 \xe2\x82\xac",
					   "a\\x1b", NULL};
	static const char *const changed[] = {"\x1b[2J", "a\rb", "tab\there",
					      "\xc2\x9b", "\xe2\x80\xae", "\xff",
					      "\x7f", "\xe2\x80\xa8"};
	char out[64];
	assert_true(apf_text_printable(NULL));
	for (size_t i = 0; kept[i]; i++) {
		assert_true(apf_text_printable(kept[i]));
		apf_text_escape(out, sizeof out, kept[i]);
		assert_string_equal(out, kept[i]);
	}
	for (size_t i = 0; i < sizeof changed / sizeof *changed; i++) {
		assert_false(apf_text_printable(changed[i]));
		apf_text_escape(out, sizeof out, changed[i]);
		assert_string_not_equal(out, changed[i]);
	}
}

static void error_messages_reach_the_terminal_escaped(void **state)
{
	(void)state;
	apf_error(APF_EINPUT, "build", "trial says \x1b]0;owned\x07 %s", "\x9b");
	assert_string_equal(apf_error_message(),
			    "build: trial says \\x1b]0;owned\\x07 \\x9b");
	apf_error_prefix(APF_EINPUT, "unit\x1b");
	assert_string_equal(apf_error_message(),
			    "unit\\x1b: build: trial says \\x1b]0;owned\\x07 \\x9b");
	apf_error_restore(APF_EINPUT, "from a trial: \x1b[2J");
	assert_string_equal(apf_error_message(), "from a trial: \\x1b[2J");
	for (const char *m = apf_error_message(); *m; m++)
		assert_true((unsigned char)*m >= 0x20 && *m != 0x7f);
}

/* ---- near names ------------------------------------------------------------ */

static void nearest_name_is_a_likely_misspelling_or_none(void **state)
{
	(void)state;
	const char *const space[] = {"learning_rate", "one_minus_beta1", "beta2",
				     "weight_decay", "warmup_factor"};
	const size_t n = sizeof space / sizeof space[0];
	/* A dropped letter, a swap of neighbours, a wrong letter. */
	assert_string_equal(apf_nearest_name("learnig_rate", space, n),
			    "learning_rate");
	assert_string_equal(apf_nearest_name("wieght_decay", space, n),
			    "weight_decay");
	assert_string_equal(apf_nearest_name("beta3", space, n), "beta2");
	/* Too far to be a slip of the keyboard: no guess. */
	assert_null(apf_nearest_name("lr", space, n));
	assert_null(apf_nearest_name("momentum", space, n));
	/* Two names equally near: no guess between them. */
	const char *const two[] = {"beta1", "beta2"};
	assert_null(apf_nearest_name("beta3", two, 2));
	/* An exact name is no misspelling; nothing to choose from. */
	assert_null(apf_nearest_name("beta2", space, n));
	assert_null(apf_nearest_name("beta3", space, 0));
	/* Long names are never near (and never overrun the table). */
	char longname[100];
	memset(longname, 'a', sizeof longname - 1);
	longname[sizeof longname - 1] = 0;
	const char *const longs[] = {longname};
	assert_null(apf_nearest_name(longname + 1, longs, 1));
	assert_null(apf_nearest_name("aaaa", longs, 1));
}

/* ---- big allocations ------------------------------------------------------ */

/* flags = the VmFlags of the mapping in /proc/self/smaps that holds p,
 * each flag between spaces (" rd wr ... "); "" when no mapping does. */
static void vm_flags_of(const void *p, char *flags, size_t cap)
{
	FILE *f = fopen("/proc/self/smaps", "r");
	assert_non_null(f);
	char line[512];
	int inside = 0;
	uintptr_t a = (uintptr_t)p;
	flags[0] = 0;
	while (fgets(line, sizeof line, f)) {
		unsigned long lo, hi;
		char dash;
		if (sscanf(line, "%lx%c%lx ", &lo, &dash, &hi) == 3 &&
		    dash == '-') {
			inside = a >= lo && a < hi;
			continue;
		}
		if (inside && !strncmp(line, "VmFlags:", 8)) {
			line[strcspn(line, "\n")] = 0;
			snprintf(flags, cap, "%s ", line + 8);
			break;
		}
	}
	fclose(f);
}

/* A buffer of 2 MiB and more is 2 MiB-aligned and advised for transparent
 * huge pages (its mapping carries the kernel's "hg" flag, which is what
 * MADV_HUGEPAGE sets, whatever the system's THP mode); a smaller one is
 * 64-byte aligned. Every byte of either can be written. */
static void big_allocations_ask_for_huge_pages(void **state)
{
	(void)state;
	const size_t big = (size_t)5 << 20;
	char *s = apf_alloc_big(100), *b = apf_alloc_big(big);
	assert_non_null(s);
	assert_non_null(b);
	assert_int_equal((uintptr_t)s % 64, 0);
	assert_int_equal((uintptr_t)b % ((size_t)2 << 20), 0);
	memset(s, 1, 100);
	memset(b, 1, big);
	char flags[512];
	vm_flags_of(b, flags, sizeof flags);
	int thp = access("/sys/kernel/mm/transparent_hugepage/enabled", F_OK) == 0;
	if (thp && !strstr(flags, " hg "))
		fail_msg("a %zu-byte buffer's mapping has VmFlags%s: no hg", big,
			 flags);
	free(s);
	free(b);
	if (!thp)
		SKIP_BECAUSE("this kernel has no transparent huge pages: the "
			     "alignments were checked, the advice cannot be");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(error_message_is_what_colon_why),
		cmocka_unit_test(error_prefix_is_not_added_twice),
		cmocka_unit_test(exit_codes_follow_design),
		cmocka_unit_test(atomic_write_replaces_whole_file),
		cmocka_unit_test(injected_faults_leave_old_file_and_no_temporary),
		cmocka_unit_test(noreplace_refuses_existing_target),
		cmocka_unit_test(file_read_caps_size),
		cmocka_unit_test(utf8_paths),
		cmocka_unit_test(hex_round_trip),
		cmocka_unit_test(remove_tree_does_not_follow_symlinks),
		cmocka_unit_test(open_regular_refuses_fifo_symlink_and_directory_without_blocking),
		cmocka_unit_test(open_beneath_follows_no_symlink_in_any_component),
		cmocka_unit_test(sparse_file_over_the_cap_is_refused_before_reading),
		cmocka_unit_test(text_escape_keeps_printable_utf8_and_escapes_controls),
		cmocka_unit_test(text_escape_cuts_between_characters_and_escapes),
		cmocka_unit_test(buf_escape_appends_the_whole_text_escaped),
		cmocka_unit_test(buf_utf8_escapes_only_invalid_utf8),
		cmocka_unit_test(text_printable_is_what_escaping_leaves_alone),
		cmocka_unit_test(error_messages_reach_the_terminal_escaped),
		cmocka_unit_test(nearest_name_is_a_likely_misspelling_or_none),
		cmocka_unit_test(big_allocations_ask_for_huge_pages),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
