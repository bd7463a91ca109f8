/*
 * extract.c: safe extraction of an entry archive into a fresh directory.
 *
 * Everything is written under a temporary sibling of dest, which is renamed
 * to dest (never over an existing one) only after the reader reported the
 * end, that is after the whole frame, its checksum, the re-hash and the
 * symlink check over all members passed. Any failure removes the temporary,
 * so dest either appears complete or not at all.
 *
 * No symlink is ever followed while writing: each path is walked one
 * component at a time from the temporary's directory descriptor with
 * O_NOFOLLOW (a component is a single name, never "." or "..", as the reader
 * guarantees), files are created with O_EXCL, and symlink members are
 * created with symlinkat, which does not follow either. Modes are set with
 * fchmod so the umask cannot change them. Durability comes from one syncfs
 * before the rename instead of an fsync per file.
 */
#include "archive/archive.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "hash/hash.h"

#define DATA_BUF (256 * 1024)

struct extraction {
	const char *archive;
	char *tmp;
	int root;        /* the temporary directory */
	int dir;         /* the cached parent directory (may equal root) */
	char *dir_path;  /* its path relative to root, "" for root */
	char *buf;
	apf_sha256 *sha;
};

static void close_dir(struct extraction *x)
{
	if (x->dir >= 0 && x->dir != x->root)
		close(x->dir);
	x->dir = -1;
	free(x->dir_path);
	x->dir_path = NULL;
}

static int member_error(struct extraction *x, int code, int errnum,
			const char *name, const char *doing)
{
	return apf_error_errno(code, errnum, x->archive, "member \"%s\": %s",
			       name, doing);
}

/* The directory that will hold name (its first plen bytes), created 0755
 * component by component, never through a symlink. */
static int open_parent(struct extraction *x, const char *name, size_t plen,
		       int *out)
{
	if (x->dir >= 0 && strlen(x->dir_path) == plen &&
	    !memcmp(x->dir_path, name, plen)) {
		*out = x->dir;
		return 0;
	}
	close_dir(x);
	char *path = strndup(name, plen);
	if (!path)
		return apf_error(APF_ENOMEM, x->archive, "out of memory");
	int cur = x->root, rc = 0;
	for (char *c = path; plen && c;) {
		char *slash = strchr(c, '/');
		if (slash)
			*slash = 0;
		int created = mkdirat(cur, c, 0755) == 0;
		if (!created && errno != EEXIST) {
			rc = member_error(x, APF_EIO, errno, name, "mkdir");
			break;
		}
		int next = openat(cur, c,
				  O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (next < 0) {
			rc = errno == ELOOP || errno == ENOTDIR
				     ? member_error(x, APF_EINPUT, errno, name,
						    "path passes through a "
						    "non-directory")
				     : member_error(x, APF_EIO, errno, name,
						    "open directory");
			break;
		}
		if (cur != x->root)
			close(cur);
		cur = next;
		if (created && fchmod(cur, 0755) != 0) {
			rc = member_error(x, APF_EIO, errno, name, "chmod");
			break;
		}
		if (slash)
			*slash = '/';
		c = slash ? slash + 1 : NULL;
	}
	if (rc) {
		if (cur != x->root)
			close(cur);
		free(path);
		return rc;
	}
	x->dir = cur;
	x->dir_path = path;
	*out = cur;
	return 0;
}

static int write_file(struct extraction *x, apf_archive_reader *r,
		      const struct apf_archive_member *m, int dir,
		      const char *base, uint8_t sha[APF_SHA256_LEN])
{
	int fd = openat(dir, base,
			O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
			0600);
	if (fd < 0)
		return member_error(x, errno == EEXIST ? APF_EINPUT : APF_EIO,
				    errno, m->name, "create");
	int rc = 0;
	if (fchmod(fd, (mode_t)m->mode) != 0)
		rc = member_error(x, APF_EIO, errno, m->name, "chmod");
	uint64_t written = 0;
	while (rc == 0) {
		long n = apf_archive_read(r, x->buf, DATA_BUF);
		if (n < 0) {
			rc = (int)n;
			break;
		}
		if (n == 0)
			break;
		rc = apf_write_all(fd, x->buf, (size_t)n, x->archive);
		if (rc == 0)
			rc = apf_sha256_update(x->sha, x->buf, (size_t)n);
		written += (uint64_t)n;
	}
	if (close(fd) != 0 && rc == 0)
		rc = member_error(x, APF_EIO, errno, m->name, "close");
	if (rc == 0 && written != m->size)
		rc = apf_error(APF_EVERIFY, x->archive,
			       "member \"%s\": %llu bytes of data, %llu declared",
			       m->name, (unsigned long long)written,
			       (unsigned long long)m->size);
	if (rc == 0)
		rc = apf_sha256_final(x->sha, sha);
	return rc;
}

static int extract_member(struct extraction *x, apf_archive_reader *r,
			  const struct apf_archive_member *m,
			  apf_archive_check_fn check, void *user)
{
	const char *slash = strrchr(m->name, '/');
	size_t plen = slash ? (size_t)(slash - m->name) : 0;
	const char *base = slash ? slash + 1 : m->name;
	int dir = -1;
	int rc = open_parent(x, m->name, plen, &dir);
	if (rc)
		return rc;
	uint8_t sha[APF_SHA256_LEN];
	if (m->type == APF_MEMBER_FILE) {
		rc = write_file(x, r, m, dir, base, sha);
	} else {
		if (symlinkat(m->link, dir, base) != 0)
			return member_error(x,
					    errno == EEXIST ? APF_EINPUT
							    : APF_EIO,
					    errno, m->name, "symlink");
		/* A symlink is hashed over its target, as in the tree
		 * digest. */
		rc = apf_sha256_buf(sha, m->link, strlen(m->link));
	}
	if (rc || !check)
		return rc;
	rc = check(user, m, sha);
	if (rc > 0)
		rc = apf_error(APF_EINTERNAL, x->archive,
			       "member \"%s\": check returned %d", m->name, rc);
	return rc;
}

/* Makes the finished temporary durable and moves it to dest, never over
 * something that appeared at dest in the meantime. */
static int publish(struct extraction *x, const char *dest, const char *parent)
{
	if (fchmod(x->root, 0755) != 0)
		return apf_error_errno(APF_EIO, errno, dest, "chmod");
	if (apf_fault_check("fsync"))
		return apf_error_errno(APF_EIO, EIO, dest, "syncfs");
	if (syncfs(x->root) != 0)
		return apf_error_errno(APF_EIO, errno, dest, "syncfs");
	if (apf_fault_check("rename"))
		return apf_error_errno(APF_EIO, EIO, dest, "rename");
	if (renameat2(AT_FDCWD, x->tmp, AT_FDCWD, dest, RENAME_NOREPLACE) != 0) {
		int e = errno;
		struct stat st;
		if (e == EEXIST)
			return apf_error(APF_EINPUT, dest,
					 "already exists; refusing to "
					 "extract over it");
		/* Filesystems without RENAME_NOREPLACE: check, then rename
		 * (rename would replace an empty directory). */
		if (e != EINVAL && e != ENOSYS)
			return apf_error_errno(APF_EIO, e, dest, "rename");
		if (lstat(dest, &st) == 0)
			return apf_error(APF_EINPUT, dest,
					 "already exists; refusing to "
					 "extract over it");
		if (rename(x->tmp, dest) != 0)
			return apf_error_errno(APF_EIO, errno, dest, "rename");
	}
	int rc = apf_fsync_dir(parent);
	if (rc) {
		/* Keep the promise: after a failure dest does not exist. The
		 * clean-up must not replace the message of the failure. */
		char why[1024];
		apf_error_take(why, sizeof why);
		apf_remove_tree(dest);
		apf_error_restore(rc, why);
	}
	return rc;
}

int apf_archive_extract(const char *path, const char *dest,
			const struct apf_archive_limits *limits,
			apf_archive_check_fn check, void *user)
{
	size_t dlen = strlen(dest);
	while (dlen > 1 && dest[dlen - 1] == '/')
		dlen--;
	if (dlen == 0 || (dlen == 1 && dest[0] == '/'))
		return apf_error(APF_EINPUT, dest,
				 "not a usable extraction target");
	struct stat st;
	if (lstat(dest, &st) == 0)
		return apf_error(APF_EINPUT, dest,
				 "already exists; refusing to extract over it");
	if (errno != ENOENT)
		return apf_error_errno(APF_EIO, errno, dest, "stat");

	apf_archive_reader *r;
	int rc = apf_archive_reader_open(&r, path, limits);
	if (rc)
		return rc;

	struct extraction x = {.archive = path, .root = -1, .dir = -1};
	char *target = strndup(dest, dlen), *parent = NULL;
	apf_buf tmp = {0};
	if (target) {
		char *slash = strrchr(target, '/');
		parent = slash == target ? strdup("/")
				: slash	 ? strndup(target, (size_t)(slash - target))
					 : strdup(".");
		if (parent && apf_buf_printf(&tmp, "%s/.%s.tmp.XXXXXX", parent,
					     slash ? slash + 1 : target) == 0)
			x.tmp = tmp.data;
	}
	if (!x.tmp)
		apf_buf_free(&tmp);
	x.buf = malloc(DATA_BUF);
	if (!x.tmp || !x.buf)
		rc = apf_error(APF_ENOMEM, dest, "out of memory");
	if (rc == 0)
		rc = apf_sha256_new(&x.sha);
	if (rc == 0 && !mkdtemp(x.tmp)) {
		rc = apf_error_errno(errno == ENOENT || errno == ENOTDIR
					     ? APF_EINPUT
					     : APF_EIO,
				     errno, dest, "create temporary directory");
		free(x.tmp);
		x.tmp = NULL;
	}
	if (rc == 0) {
		x.root = open(x.tmp,
			      O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (x.root < 0)
			rc = apf_error_errno(APF_EIO, errno, x.tmp, "open");
	}
	while (rc == 0) {
		struct apf_archive_member m;
		int more = apf_archive_next(r, &m);
		if (more <= 0) {
			rc = more;
			break;
		}
		rc = extract_member(&x, r, &m, check, user);
	}
	close_dir(&x);
	if (rc == 0)
		rc = publish(&x, target, parent);
	if (x.root >= 0)
		close(x.root);
	if (rc && x.tmp) {
		/* Cleaning up must not replace the message of the failure. */
		char why[1024];
		apf_error_take(why, sizeof why);
		apf_remove_tree(x.tmp);
		apf_error_restore(rc, why);
	}
	apf_archive_reader_close(r);
	apf_sha256_free(x.sha);
	free(x.buf);
	free(x.tmp);
	free(target);
	free(parent);
	return rc;
}
