/*
 * bench/archive/archive.c: the driver bench/archive/run.sh times against
 * tar and zstd.
 *
 *     archive pack SRC OUT.apf     every regular file and symlink under SRC,
 *                                  sorted bytewise, as an entry archive
 *     archive read IN.apf          reads every member (what verify does)
 *     archive extract IN.apf DEST  safe extraction
 */
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "archive/archive.h"

static char **paths;
static size_t npaths, cap;
static size_t root_len;

static int collect(const char *p, const struct stat *st, int flag,
		   struct FTW *ftw)
{
	(void)st;
	(void)ftw;
	if (flag != FTW_F && flag != FTW_SL)
		return 0;
	if (npaths == cap) {
		cap = cap ? 2 * cap : 1024;
		paths = realloc(paths, cap * sizeof *paths);
		if (!paths)
			return -1;
	}
	paths[npaths++] = strdup(p + root_len + 1);
	return 0;
}

static int by_bytes(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static int pack(const char *src, const char *out)
{
	root_len = strlen(src);
	if (nftw(src, collect, 64, FTW_PHYS) != 0)
		return apf_error(APF_EIO, src, "walk");
	qsort(paths, npaths, sizeof *paths, by_bytes);
	apf_archive_writer *w;
	int rc = apf_archive_writer_open(&w, out, 0);
	for (size_t i = 0; !rc && i < npaths; i++) {
		char *p = apf_path_join(src, paths[i]);
		struct stat st;
		if (!p || lstat(p, &st) != 0) {
			rc = apf_error(APF_EIO, paths[i], "stat");
		} else if (S_ISLNK(st.st_mode)) {
			char t[4096];
			ssize_t n = readlink(p, t, sizeof t - 1);
			t[n < 0 ? 0 : n] = 0;
			rc = apf_archive_add_symlink(w, paths[i], t);
		} else {
			int fd = open(p, O_RDONLY | O_CLOEXEC);
			rc = fd < 0 ? apf_error(APF_EIO, p, "open")
				    : apf_archive_add_file_fd(
					      w, paths[i],
					      st.st_mode & 0100 ? 0755 : 0644,
					      fd, (uint64_t)st.st_size);
			if (fd >= 0)
				close(fd);
		}
		free(p);
	}
	if (rc) {
		apf_archive_writer_abort(w);
		return rc;
	}
	return apf_archive_writer_commit(w);
}

static int read_all(const char *in)
{
	apf_archive_reader *r;
	int rc = apf_archive_reader_open(&r, in, NULL);
	if (rc)
		return rc;
	static char buf[1 << 18];
	struct apf_archive_member m;
	while ((rc = apf_archive_next(r, &m)) == 1) {
		long n;
		while ((n = apf_archive_read(r, buf, sizeof buf)) > 0)
			;
		if (n < 0) {
			rc = (int)n;
			break;
		}
	}
	apf_archive_reader_close(r);
	return rc;
}

int main(int argc, char **argv)
{
	int rc = APF_EUSAGE;
	if (argc == 4 && !strcmp(argv[1], "pack"))
		rc = pack(argv[2], argv[3]);
	else if (argc == 3 && !strcmp(argv[1], "read"))
		rc = read_all(argv[2]);
	else if (argc == 4 && !strcmp(argv[1], "extract"))
		rc = apf_archive_extract(argv[2], argv[3], NULL, NULL, NULL);
	else
		apf_error(APF_EUSAGE, "usage",
			  "archive pack SRC OUT | read IN | extract IN DEST");
	if (rc)
		fprintf(stderr, "archive: %s\n", apf_error_message());
	return apf_exit_code(rc);
}
