/*
 * hash.c: `apf hash [--list] DIR|FILE`: the tree digest of a directory
 * (README.md, Formats) or the SHA-256 of a file, printed as sha256sum
 * does, so `apf hash --list DIR | sha256sum` prints the same digest as
 * `apf hash DIR`.
 */
#include "cmd.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "hash/hash.h"

int cmd_hash(int argc, char **argv)
{
	int list = 0;
	const struct apf_opt opts[] = {
		{"list", 'l', OPT_FLAG, &list, NULL,
		 "print the listing the digest is computed over"},
		{0},
	};
	const struct apf_usage usage = {
		"hash [--list] DIR|FILE",
		"Print the tree digest of a directory: SHA-256 of one line per "
		"regular file or\nsymlink, sorted bytewise by path:\n"
		"    <f|l> <644|755|777> <size> <sha256> <path>\n"
		"For a file, print the SHA-256 of its content.",
		"Anything named .git is left out; fifos, sockets, devices and "
		"paths that are\nnot UTF-8 are refused. "
		"`apf hash --list DIR | sha256sum` recomputes the digest.",
		1, 1,
		"apf hash submissions/baselines/nadamw\n"
		"apf hash --list submissions/baselines/nadamw | sha256sum\n"
		"apf hash nadamw.apf"};
	int nargs, rc = cmd_start("hash", &usage, opts, argc, argv, &nargs);
	if (rc >= 0)
		return rc;
	const char *path = argv[1];
	struct stat st;
	if (stat(path, &st) != 0) {
		apf_error_errno(APF_EINPUT, errno, path, "cannot read");
		return cmd_fail(APF_EINPUT);
	}
	char hex[APF_SHA256_HEX];
	if (!S_ISDIR(st.st_mode)) {
		uint8_t d[APF_SHA256_LEN];
		uint64_t size;
		rc = apf_sha256_file(d, &size, path);
		if (rc)
			return cmd_fail(rc);
		apf_hex(hex, d, sizeof d);
		if (list) {
			const char *base = strrchr(path, '/');
			printf("f %d %llu %s %s\n", (st.st_mode & 0111) ? 755 : 644,
			       (unsigned long long)size, hex,
			       base ? base + 1 : path);
		} else {
			printf("%s  %s\n", hex, term_text(path));
		}
		return 0;
	}
	apf_tree *t;
	struct apf_tree_opts topts = {.progress = hash_progress};
	rc = apf_tree_hash(&t, path, &topts);
	progress_done();
	if (rc)
		return cmd_fail(rc);
	if (list) {
		apf_buf b = {0};
		rc = apf_tree_listing(&b, t);
		/* The listing is the digest's input and must stay byte for
		 * byte what sha256sum is given, so it is not escaped: the
		 * walk refuses paths with C0 controls or bytes that are not
		 * UTF-8, but C1 controls and bidi overrides, valid UTF-8,
		 * pass and print as they are. */
		if (!rc && b.len)
			fwrite(b.data, 1, b.len, stdout);
		apf_buf_free(&b);
	} else {
		apf_hex(hex, t->digest, sizeof t->digest);
		printf("%s  %s\n", hex, term_text(path));
	}
	apf_tree_free(t);
	if (rc)
		return cmd_fail(rc);
	if (fflush(stdout) != 0) {
		apf_error_errno(APF_EIO, errno, "stdout", "write");
		return cmd_fail(APF_EIO);
	}
	return 0;
}
