/*
 * file.c: crash-safe writes (temporary + fsync + rename + directory fsync),
 * whole-file reads with a size cap that never block on a FIFO or a device
 * and, inside a directory apf does not trust, never follow a symlink,
 * directory helpers, and the fault-injection point every write, fsync and
 * rename passes through.
 *
 * Invariant: after apf_atomic_commit returns 0 the new content is durable and
 * visible under the target name; after any failure the target is untouched
 * and no temporary is left behind.
 */
#include "base/base.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- fault injection ---------------------------------------------------- */

static pthread_mutex_t fault_lock = PTHREAD_MUTEX_INITIALIZER;
static char fault_op[16];
static long fault_nth;    /* fail the nth matching op; 0 = off */
static long fault_seen;
static int fault_env_read;

void apf_fault_set(const char *op, long nth)
{
	pthread_mutex_lock(&fault_lock);
	snprintf(fault_op, sizeof fault_op, "%s", op ? op : "");
	fault_nth = op ? nth : 0;
	fault_seen = 0;
	fault_env_read = 1;
	pthread_mutex_unlock(&fault_lock);
}

/* APF_FAULT=write:3 makes the third write fail with EIO. */
static void fault_from_env(void)
{
	const char *e = getenv("APF_FAULT");
	fault_env_read = 1;
	if (!e)
		return;
	const char *colon = strchr(e, ':');
	if (!colon || colon - e >= (long)sizeof fault_op)
		return;
	memcpy(fault_op, e, (size_t)(colon - e));
	fault_op[colon - e] = 0;
	fault_nth = strtol(colon + 1, NULL, 10);
}

int apf_fault_check(const char *op)
{
	int fail = 0;
	pthread_mutex_lock(&fault_lock);
	if (!fault_env_read)
		fault_from_env();
	if (fault_nth > 0 && strcmp(op, fault_op) == 0 &&
	    ++fault_seen == fault_nth)
		fail = 1;
	pthread_mutex_unlock(&fault_lock);
	return fail;
}

/* ---- plain helpers -------------------------------------------------------- */

int apf_write_all(int fd, const void *buf, size_t len, const char *what)
{
	const char *p = buf;
	while (len > 0) {
		if (apf_fault_check("write"))
			return apf_error_errno(APF_EIO, EIO, what, "write");
		ssize_t n = write(fd, p, len);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return apf_error_errno(APF_EIO, errno, what, "write");
		}
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

static int fsync_fd(int fd, const char *what)
{
	if (apf_fault_check("fsync"))
		return apf_error_errno(APF_EIO, EIO, what, "fsync");
	if (fsync(fd) != 0)
		return apf_error_errno(APF_EIO, errno, what, "fsync");
	return 0;
}

int apf_fsync_dir(const char *dir)
{
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return apf_error_errno(APF_EIO, errno, dir, "open directory");
	int rc = fsync_fd(fd, dir);
	close(fd);
	return rc;
}

static char *dir_of(const char *path)
{
	const char *slash = strrchr(path, '/');
	if (!slash)
		return apf_strdup(".");
	if (slash == path)
		return apf_strdup("/");
	char *d = malloc((size_t)(slash - path) + 1);
	if (d) {
		memcpy(d, path, (size_t)(slash - path));
		d[slash - path] = 0;
	}
	return d;
}

/* ---- atomic replacement ------------------------------------------------- */

struct apf_atomic {
	int fd;
	int flags;
	char *path;
	char *tmp;
};

int apf_atomic_open(apf_atomic **out, const char *path, mode_t mode, int flags)
{
	*out = NULL;
	if (flags & APF_ATOMIC_NOREPLACE) {
		struct stat st;
		if (lstat(path, &st) == 0)
			return apf_error(APF_EINPUT, path,
					 "already exists; refusing to overwrite");
	}
	apf_atomic *af = apf_calloc(1, sizeof *af);
	if (!af)
		return apf_error(APF_ENOMEM, path, "out of memory");
	af->flags = flags;
	af->path = apf_strdup(path);
	apf_buf t = {0};
	char *dir = dir_of(path);
	const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
	if (!af->path || !dir ||
	    apf_buf_printf(&t, "%s/.%s.tmp.XXXXXX", dir, base) != 0) {
		free(dir);
		apf_buf_free(&t);
		free(af->path);
		free(af);
		return apf_error(APF_ENOMEM, path, "out of memory");
	}
	free(dir);
	af->tmp = t.data;
	af->fd = mkostemp(af->tmp, O_CLOEXEC);
	if (af->fd < 0) {
		int e = errno;
		free(af->tmp);
		free(af->path);
		free(af);
		return apf_error_errno(APF_EIO, e, path, "create temporary file");
	}
	if (fchmod(af->fd, mode) != 0) {
		int e = errno;
		apf_atomic_abort(af);
		return apf_error_errno(APF_EIO, e, path, "chmod");
	}
	*out = af;
	return 0;
}

int apf_atomic_fd(const apf_atomic *af)
{
	return af->fd;
}

const char *apf_atomic_tmp_path(const apf_atomic *af)
{
	return af->tmp;
}

int apf_atomic_write(apf_atomic *af, const void *buf, size_t len)
{
	return apf_write_all(af->fd, buf, len, af->path);
}

int apf_atomic_commit(apf_atomic *af)
{
	int rc = fsync_fd(af->fd, af->path);
	if (rc == 0 && close(af->fd) != 0)
		rc = apf_error_errno(APF_EIO, errno, af->path, "close");
	af->fd = -1;
	if (rc == 0 && apf_fault_check("rename"))
		rc = apf_error_errno(APF_EIO, EIO, af->path, "rename");
	if (rc == 0) {
		if (af->flags & APF_ATOMIC_NOREPLACE) {
			/* link() fails with EEXIST instead of replacing. */
			if (link(af->tmp, af->path) != 0)
				rc = apf_error_errno(errno == EEXIST ? APF_EINPUT
								     : APF_EIO,
						     errno, af->path,
						     "create");
			else
				unlink(af->tmp);
		} else if (rename(af->tmp, af->path) != 0) {
			rc = apf_error_errno(APF_EIO, errno, af->path,
					     "rename");
		}
	}
	if (rc == 0) {
		char *dir = dir_of(af->path);
		rc = dir ? apf_fsync_dir(dir)
			 : apf_error(APF_ENOMEM, af->path, "out of memory");
		free(dir);
		free(af->tmp);
		free(af->path);
		free(af);
		return rc;
	}
	apf_atomic_abort(af);
	return rc;
}

void apf_atomic_abort(apf_atomic *af)
{
	if (!af)
		return;
	if (af->fd >= 0)
		close(af->fd);
	unlink(af->tmp);
	free(af->tmp);
	free(af->path);
	free(af);
}

int apf_file_write(const char *path, const void *buf, size_t len, mode_t mode,
		   int flags)
{
	apf_atomic *af;
	int rc = apf_atomic_open(&af, path, mode, flags);
	if (rc)
		return rc;
	rc = apf_atomic_write(af, buf, len);
	if (rc) {
		apf_atomic_abort(af);
		return rc;
	}
	return apf_atomic_commit(af);
}

/* ---- reading files others wrote ------------------------------------------- */

static const char *file_kind(mode_t m)
{
	if (S_ISDIR(m))
		return "a directory";
	if (S_ISFIFO(m))
		return "a FIFO";
	if (S_ISCHR(m))
		return "a character device";
	if (S_ISBLK(m))
		return "a block device";
	if (S_ISSOCK(m))
		return "a socket";
	if (S_ISLNK(m))
		return "a symbolic link";
	return "of an unknown type";
}

/* fd was just opened: a regular file, or closed and refused. */
static int check_regular(int fd, struct stat *st, const char *what)
{
	struct stat own;
	if (!st)
		st = &own;
	if (fstat(fd, st) != 0) {
		int e = errno;
		close(fd);
		return apf_error_errno(APF_EIO, e, what, "stat");
	}
	if (!S_ISREG(st->st_mode)) {
		close(fd);
		return apf_error(APF_EINPUT, what, "not a regular file (%s)",
				 file_kind(st->st_mode));
	}
	return 0;
}

/* open(2) failed with e on what. O_NOFOLLOW reports a symlink as ELOOP. */
static int open_failed(int e, const char *what)
{
	if (e == ELOOP)
		return apf_error(APF_EINPUT, what,
				 "a symbolic link, not a regular file; not "
				 "followed");
	return apf_error_errno(e == ENOENT || e == EACCES || e == ENOTDIR ||
					       e == EPERM
				       ? APF_EINPUT
				       : APF_EIO,
			       e, what, "open");
}

#define READ_FLAGS (O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC)

int apf_file_open_regular(int *fd, struct stat *st, const char *path, int flags)
{
	*fd = -1;
	int f = open(path, READ_FLAGS | (flags & APF_FILE_FOLLOW ? 0 : O_NOFOLLOW));
	if (f < 0) {
		if (errno == ENOENT && (flags & APF_FILE_MISSING_OK))
			return 0;
		return open_failed(errno, path);
	}
	int rc = check_regular(f, st, path);
	if (!rc)
		*fd = f;
	return rc;
}

/* rel's components, checked: relative, none empty, "." or "..". */
static int rel_ok(const char *rel)
{
	if (!*rel || *rel == '/')
		return 0;
	for (const char *p = rel; *p;) {
		size_t n = strcspn(p, "/");
		if (n == 0 || (n == 1 && p[0] == '.') ||
		    (n == 2 && p[0] == '.' && p[1] == '.'))
			return 0;
		p += n;
		if (*p == '/' && !*++p)
			return 0; /* a trailing slash */
	}
	return 1;
}

int apf_file_open_beneath(int *fd, struct stat *st, const char *dir,
			  const char *rel, int flags)
{
	*fd = -1;
	apf_buf what = {0};
	if (apf_buf_printf(&what, "%s/%s", dir, rel) != 0) {
		apf_buf_free(&what);
		return apf_error(APF_ENOMEM, dir, "out of memory");
	}
	if (!rel_ok(rel)) {
		int rc = apf_error(APF_EINPUT, what.data,
				   "not a plain relative path (absolute, empty "
				   "or with . or .. components)");
		apf_buf_free(&what);
		return rc;
	}
	int rc = 0;
	int at = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (at < 0) {
		rc = errno == ENOENT && (flags & APF_FILE_MISSING_OK)
			     ? 0
			     : apf_error_errno(APF_EINPUT, errno, dir, "open directory");
		apf_buf_free(&what);
		return rc;
	}
	char comp[NAME_MAX + 1];
	for (const char *p = rel;;) {
		size_t n = strcspn(p, "/");
		if (n > NAME_MAX) {
			rc = apf_error(APF_EINPUT, what.data, "a name too long");
			break;
		}
		memcpy(comp, p, n);
		comp[n] = 0;
		int last = !p[n];
		int f = openat(at, comp,
			       last ? READ_FLAGS | O_NOFOLLOW
				    : O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (f < 0) {
			int e = errno;
			struct stat lst;
			if (e == ENOENT && (flags & APF_FILE_MISSING_OK))
				;
			else if (last)
				rc = open_failed(e, what.data);
			else if (fstatat(at, comp, &lst, AT_SYMLINK_NOFOLLOW) == 0 &&
				 S_ISLNK(lst.st_mode))
				rc = apf_error(APF_EINPUT, what.data,
					       "%.*s is a symbolic link; none is "
					       "followed here",
					       (int)(p + n - rel), rel);
			else if (e == ENOTDIR || e == ELOOP)
				rc = apf_error(APF_EINPUT, what.data,
					       "%.*s is not a directory",
					       (int)(p + n - rel), rel);
			else
				rc = open_failed(e, what.data);
			break;
		}
		close(at);
		at = -1;
		if (last) {
			rc = check_regular(f, st, what.data);
			if (!rc)
				*fd = f;
			break;
		}
		at = f;
		p += n + 1;
	}
	if (at >= 0)
		close(at);
	apf_buf_free(&what);
	return rc;
}

int apf_file_read_fd(char **out, size_t *len, int fd, const char *what,
		     size_t max)
{
	*out = NULL;
	if (len)
		*len = 0;
	struct stat st;
	if (fstat(fd, &st) != 0)
		return apf_error_errno(APF_EIO, errno, what, "stat");
	/* A sparse or huge file is refused before a byte of it is read. */
	if (S_ISREG(st.st_mode) && (uint64_t)st.st_size > max)
		return apf_error(APF_EINPUT, what,
				 "%llu bytes, larger than the %zu-byte limit",
				 (unsigned long long)st.st_size, max);
	apf_buf b = {0};
	char chunk[65536];
	for (;;) {
		ssize_t n = read(fd, chunk, sizeof chunk);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			int e = errno;
			apf_buf_free(&b);
			return apf_error_errno(APF_EIO, e, what, "read");
		}
		if (n == 0)
			break;
		/* It can still grow while it is read. */
		if (b.len + (size_t)n > max) {
			apf_buf_free(&b);
			return apf_error(APF_EINPUT, what,
					 "larger than the %zu-byte limit", max);
		}
		if (apf_buf_append(&b, chunk, (size_t)n) != 0) {
			apf_buf_free(&b);
			return apf_error(APF_ENOMEM, what, "out of memory");
		}
	}
	if (!b.data && apf_buf_append(&b, "", 0) != 0)
		return apf_error(APF_ENOMEM, what, "out of memory");
	*out = b.data;
	if (len)
		*len = b.len;
	return 0;
}

static int read_open(int fd, int rc, const char *what, size_t max, char **out,
		     size_t *len)
{
	*out = NULL;
	if (len)
		*len = 0;
	if (rc || fd < 0)
		return rc;
	rc = apf_file_read_fd(out, len, fd, what, max);
	close(fd);
	return rc;
}

int apf_file_read(char **out, size_t *len, const char *path, size_t max)
{
	int fd;
	int rc = apf_file_open_regular(&fd, NULL, path, APF_FILE_FOLLOW);
	return read_open(fd, rc, path, max, out, len);
}

int apf_file_read_regular(char **out, size_t *len, const char *path, size_t max)
{
	int fd;
	int rc = apf_file_open_regular(&fd, NULL, path, 0);
	return read_open(fd, rc, path, max, out, len);
}

int apf_file_read_beneath(char **out, size_t *len, const char *dir,
			  const char *rel, size_t max, int flags)
{
	int fd;
	int rc = apf_file_open_beneath(&fd, NULL, dir, rel, flags);
	if (rc || fd < 0) {
		*out = NULL;
		if (len)
			*len = 0;
		return rc;
	}
	apf_buf what = {0};
	apf_buf_printf(&what, "%s/%s", dir, rel);
	rc = read_open(fd, 0, what.data ? what.data : rel, max, out, len);
	apf_buf_free(&what);
	return rc;
}

int apf_mkdirs(const char *path, mode_t mode)
{
	char *p = apf_strdup(path);
	if (!p)
		return apf_error(APF_ENOMEM, path, "out of memory");
	for (char *s = p + 1;; s++) {
		if (*s != '/' && *s != 0)
			continue;
		char c = *s;
		*s = 0;
		if (mkdir(p, mode) != 0 && errno != EEXIST) {
			int e = errno;
			free(p);
			return apf_error_errno(APF_EIO, e, path, "mkdir");
		}
		*s = c;
		if (!c)
			break;
	}
	free(p);
	struct stat st;
	if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode))
		return apf_error(APF_EINPUT, path, "not a directory");
	return 0;
}

static int remove_at(int parent, const char *name)
{
	if (unlinkat(parent, name, 0) == 0 || errno == ENOENT)
		return 0;
	if (errno != EISDIR && errno != EPERM)
		return -1;
	int fd = openat(parent, name,
			O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return -1;
	DIR *d = fdopendir(fd);
	if (!d) {
		close(fd);
		return -1;
	}
	int rc = 0;
	struct dirent *de;
	while ((de = readdir(d)) != NULL) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		if (remove_at(dirfd(d), de->d_name) != 0)
			rc = -1;
	}
	closedir(d);
	if (unlinkat(parent, name, AT_REMOVEDIR) != 0 && errno != ENOENT)
		rc = -1;
	return rc;
}

int apf_dir_is_empty(const char *path)
{
	int fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
	if (!d) {
		if (fd >= 0)
			close(fd);
		return 0;
	}
	int empty = 1;
	struct dirent *de;
	while (empty && (de = readdir(d)))
		if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
			empty = 0;
	closedir(d);
	return empty;
}

int apf_remove_tree(const char *path)
{
	if (remove_at(AT_FDCWD, path) != 0)
		return apf_error_errno(APF_EIO, errno, path, "remove");
	return 0;
}
