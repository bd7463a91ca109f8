/*
 * tree.c: the tree digest of docs/design.md section 2.4.
 *
 * Two phases. The walk (one thread) collects regular files and symlinks with
 * lstat data, refusing anything the format cannot represent. The hashing
 * phase streams the files on all usable cores: workers take files largest
 * first from a shared counter (so one big file does not end up last on one
 * core), each through its own 256 KiB buffer, small enough to stay in L2
 * while OpenSSL hashes it. (Hashing from a mapping instead, which saves
 * read()'s copy, ran at half the rate on the VMs apf is measured on: their
 * page faults cost more than the copy; bench/hash, issue 36.) A file whose
 * size changes while it is read is an error: a digest must describe one
 * state of the tree.
 */
#include "hash/hash.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define HASH_BUF (256 * 1024)

struct walk {
	const char *root;
	apf_tree_entry *v;
	size_t n, cap;
};

static int push(struct walk *w, apf_tree_entry *e)
{
	if (w->n == w->cap) {
		size_t cap = w->cap ? 2 * w->cap : 256;
		apf_tree_entry *v = realloc(w->v, cap * sizeof *v);
		if (!v)
			return apf_error(APF_ENOMEM, w->root, "out of memory");
		w->v = v;
		w->cap = cap;
	}
	w->v[w->n++] = *e;
	return 0;
}

static int walk_dir(struct walk *w, int dirfd, const char *rel)
{
	int fd = openat(dirfd, rel[0] ? rel : ".",
			O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return apf_error_errno(APF_EINPUT, errno, w->root,
				       "open directory '%s'", rel[0] ? rel : ".");
	DIR *d = fdopendir(fd);
	if (!d) {
		close(fd);
		return apf_error_errno(APF_EIO, errno, w->root, "read directory");
	}
	int rc = 0;
	struct dirent *de;
	errno = 0;
	while (!rc && (de = readdir(d)) != NULL) {
		const char *name = de->d_name;
		if (!strcmp(name, ".") || !strcmp(name, "..") ||
		    !strcmp(name, ".git"))
			continue;
		apf_buf path = {0};
		if (apf_buf_printf(&path, "%s%s%s", rel, rel[0] ? "/" : "",
				   name) != 0) {
			rc = apf_error(APF_ENOMEM, w->root, "out of memory");
			break;
		}
		if (!apf_utf8_path_ok(name)) {
			rc = apf_error(APF_EINPUT, w->root,
				       "'%s': path is not UTF-8 or holds a "
				       "control character", path.data);
			apf_buf_free(&path);
			break;
		}
		struct stat st;
		if (fstatat(dirfd, path.data, &st, AT_SYMLINK_NOFOLLOW) != 0) {
			rc = apf_error_errno(APF_EIO, errno, w->root, "stat '%s'",
					     path.data);
			apf_buf_free(&path);
			break;
		}
		apf_tree_entry e = {0};
		if (S_ISDIR(st.st_mode)) {
			rc = walk_dir(w, dirfd, path.data);
			apf_buf_free(&path);
			continue;
		} else if (S_ISREG(st.st_mode)) {
			e.type = 'f';
			e.mode = (st.st_mode & 0111) ? 755 : 644;
			e.size = (uint64_t)st.st_size;
		} else if (S_ISLNK(st.st_mode)) {
			char target[4096];
			ssize_t n = readlinkat(dirfd, path.data, target,
					       sizeof target - 1);
			if (n < 0) {
				rc = apf_error_errno(APF_EIO, errno, w->root,
						     "readlink '%s'", path.data);
				apf_buf_free(&path);
				break;
			}
			target[n] = 0;
			e.type = 'l';
			e.mode = 777;
			e.size = (uint64_t)n;
			e.link = apf_strdup(target);
			if (!e.link) {
				rc = apf_error(APF_ENOMEM, w->root, "out of memory");
				apf_buf_free(&path);
				break;
			}
		} else {
			rc = apf_error(APF_EINPUT, w->root,
				       "'%s': not a regular file, directory or "
				       "symlink (fifo, socket or device)",
				       path.data);
			apf_buf_free(&path);
			break;
		}
		e.path = path.data;
		rc = push(w, &e);
		if (rc) {
			free(e.path);
			free(e.link);
		}
	}
	if (!rc && errno != 0 && de == NULL)
		rc = apf_error_errno(APF_EIO, errno, w->root, "read directory");
	closedir(d);
	return rc;
}

static int cmp_path(const void *a, const void *b)
{
	const apf_tree_entry *x = a, *y = b;
	return strcmp(x->path, y->path); /* bytewise: strcmp compares as unsigned char */
}

/* ---- parallel hashing ----------------------------------------------------- */

struct job {
	apf_tree *t;
	int rootfd;
	const char *root;
	size_t *order;         /* indices, largest file first */
	atomic_size_t next;
	atomic_uint_least64_t done_bytes;
	atomic_size_t done_files;
	atomic_int failed;
	pthread_mutex_t lock;
	int rc;                /* first error */
	char msg[1024];
	int finished;
	pthread_cond_t cond;
	int running;
};

static void job_fail(struct job *j, int rc)
{
	pthread_mutex_lock(&j->lock);
	if (!j->rc) {
		j->rc = rc;
		apf_error_take(j->msg, sizeof j->msg);
	}
	pthread_mutex_unlock(&j->lock);
	atomic_store(&j->failed, 1);
}

/* Hashes fd by read() into buf; *total the bytes it read. */
static int hash_read(struct job *j, apf_sha256 *h, char *buf, int fd,
		     const char *path, uint64_t *total)
{
	*total = 0;
	for (;;) {
		ssize_t n = read(fd, buf, HASH_BUF);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return apf_error_errno(APF_EIO, errno, j->root,
					       "read '%s'", path);
		if (n == 0)
			return 0;
		*total += (uint64_t)n;
		atomic_fetch_add(&j->done_bytes, (uint64_t)n);
		int rc = apf_sha256_update(h, buf, (size_t)n);
		if (rc || atomic_load(&j->failed))
			return rc;
	}
}

static int hash_one(struct job *j, apf_sha256 *h, char *buf, apf_tree_entry *e)
{
	if (e->type == 'l') {
		int rc = apf_sha256_update(h, e->link, strlen(e->link));
		return rc ? rc : apf_sha256_final(h, e->sha256);
	}
	/* O_NONBLOCK: a fifo put in the file's place since the walk must
	 * not block the open; fstat then refuses whatever is not the
	 * regular file of the walk's size. */
	int fd = openat(j->rootfd, e->path,
			O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
	if (fd < 0)
		return apf_error_errno(APF_EINPUT, errno, j->root, "open '%s'",
				       e->path);
	struct stat st;
	if (fstat(fd, &st) != 0) {
		int rc = apf_error_errno(APF_EIO, errno, j->root, "stat '%s'",
					 e->path);
		close(fd);
		return rc;
	}
	int changed = !S_ISREG(st.st_mode) || (uint64_t)st.st_size != e->size;
	int rc = 0;
	if (!changed) {
		posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
		uint64_t total = 0;
		rc = hash_read(j, h, buf, fd, e->path, &total);
		changed = !rc && total != e->size;
	}
	/* grown past the bytes read meanwhile */
	if (!changed && !rc &&
	    (fstat(fd, &st) != 0 || (uint64_t)st.st_size != e->size))
		changed = 1;
	close(fd);
	if (!rc && changed)
		rc = apf_error(APF_EINPUT, j->root,
			       "'%s' changed while it was hashed", e->path);
	if (!rc)
		rc = apf_sha256_final(h, e->sha256);
	return rc;
}

static void *worker(void *arg)
{
	struct job *j = arg;
	apf_sha256 *h = NULL;
	char *buf = malloc(HASH_BUF);
	int rc = buf ? apf_sha256_new(&h)
		     : apf_error(APF_ENOMEM, j->root, "out of memory");
	if (rc)
		job_fail(j, rc);
	while (!rc && !atomic_load(&j->failed)) {
		size_t k = atomic_fetch_add(&j->next, 1);
		if (k >= j->t->n)
			break;
		rc = hash_one(j, h, buf, &j->t->entries[j->order[k]]);
		if (rc)
			job_fail(j, rc);
		atomic_fetch_add(&j->done_files, 1);
	}
	apf_sha256_free(h);
	free(buf);
	pthread_mutex_lock(&j->lock);
	if (--j->running == 0)
		pthread_cond_signal(&j->cond);
	pthread_mutex_unlock(&j->lock);
	return NULL;
}

struct by_size {
	uint64_t size;
	size_t index;
};

static int cmp_size_desc(const void *a, const void *b)
{
	const struct by_size *x = a, *y = b;
	if (x->size != y->size)
		return x->size < y->size ? 1 : -1;
	return x->index < y->index ? -1 : x->index > y->index;
}

static int hash_parallel(apf_tree *t, int rootfd, const char *root,
			 const struct apf_tree_opts *opts)
{
	struct job j = {.t = t, .rootfd = rootfd, .root = root};
	j.order = malloc((t->n ? t->n : 1) * sizeof *j.order);
	if (!j.order)
		return apf_error(APF_ENOMEM, root, "out of memory");
	struct by_size *bs = malloc((t->n ? t->n : 1) * sizeof *bs);
	if (!bs) {
		free(j.order);
		return apf_error(APF_ENOMEM, root, "out of memory");
	}
	for (size_t i = 0; i < t->n; i++)
		bs[i] = (struct by_size){t->entries[i].size, i};
	qsort(bs, t->n, sizeof *bs, cmp_size_desc);
	for (size_t i = 0; i < t->n; i++)
		j.order[i] = bs[i].index;
	free(bs);

	int threads = opts && opts->threads > 0 ? opts->threads : apf_cpu_count();
	if ((size_t)threads > t->n)
		threads = t->n ? (int)t->n : 1;
	pthread_mutex_init(&j.lock, NULL);
	pthread_cond_init(&j.cond, NULL);
	pthread_t *tids = calloc((size_t)threads, sizeof *tids);
	if (!tids) {
		free(j.order);
		return apf_error(APF_ENOMEM, root, "out of memory");
	}
	int started = 0;
	for (int i = 0; i < threads; i++) {
		pthread_mutex_lock(&j.lock);
		j.running++;
		pthread_mutex_unlock(&j.lock);
		if (pthread_create(&tids[i], NULL, worker, &j) != 0) {
			pthread_mutex_lock(&j.lock);
			j.running--;
			pthread_mutex_unlock(&j.lock);
			break;
		}
		started++;
	}
	if (started == 0) {
		j.running = 1;
		worker(&j);
	}
	/* Report progress while the workers run. */
	pthread_mutex_lock(&j.lock);
	while (j.running > 0) {
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_nsec += 100 * 1000000L;
		if (ts.tv_nsec >= 1000000000L) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000L;
		}
		pthread_cond_timedwait(&j.cond, &j.lock, &ts);
		if (opts && opts->progress && j.running > 0) {
			pthread_mutex_unlock(&j.lock);
			opts->progress(opts->user, atomic_load(&j.done_bytes),
				       t->bytes, atomic_load(&j.done_files),
				       t->n);
			pthread_mutex_lock(&j.lock);
		}
	}
	pthread_mutex_unlock(&j.lock);
	for (int i = 0; i < started; i++)
		pthread_join(tids[i], NULL);
	free(tids);
	free(j.order);
	pthread_mutex_destroy(&j.lock);
	pthread_cond_destroy(&j.cond);
	if (j.rc)
		apf_error_restore(j.rc, j.msg);
	return j.rc;
}

int apf_tree_hash(apf_tree **out, const char *root,
		  const struct apf_tree_opts *opts)
{
	*out = NULL;
	struct stat st;
	if (stat(root, &st) != 0)
		return apf_error_errno(APF_EINPUT, errno, root, "cannot read");
	if (!S_ISDIR(st.st_mode))
		return apf_error(APF_EINPUT, root, "not a directory");
	int rootfd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (rootfd < 0)
		return apf_error_errno(APF_EINPUT, errno, root, "open");
	struct walk w = {.root = root};
	int rc = walk_dir(&w, rootfd, "");
	apf_tree *t = apf_calloc(1, sizeof *t);
	if (!t && !rc)
		rc = apf_error(APF_ENOMEM, root, "out of memory");
	if (t) {
		t->entries = w.v;
		t->n = w.n;
	} else {
		for (size_t i = 0; i < w.n; i++) {
			free(w.v[i].path);
			free(w.v[i].link);
		}
		free(w.v);
	}
	if (!rc) {
		if (t->n)
			qsort(t->entries, t->n, sizeof *t->entries, cmp_path);
		for (size_t i = 0; i < t->n; i++)
			t->bytes += t->entries[i].size;
		rc = hash_parallel(t, rootfd, root, opts);
	}
	close(rootfd);
	if (!rc)
		rc = apf_tree_finish(t);
	if (rc) {
		apf_tree_free(t);
		return rc;
	}
	*out = t;
	return 0;
}

int apf_tree_listing(apf_buf *out, const apf_tree *t)
{
	for (size_t i = 0; i < t->n; i++) {
		const apf_tree_entry *e = &t->entries[i];
		char hex[APF_SHA256_HEX];
		apf_hex(hex, e->sha256, APF_SHA256_LEN);
		if (apf_buf_printf(out, "%c %d %llu %s %s\n", e->type, e->mode,
				   (unsigned long long)e->size, hex,
				   e->path) != 0)
			return apf_error(APF_ENOMEM, "tree", "out of memory");
	}
	return 0;
}

int apf_tree_finish(apf_tree *t)
{
	if (t->n)
		qsort(t->entries, t->n, sizeof *t->entries, cmp_path);
	t->bytes = 0;
	for (size_t i = 0; i < t->n; i++) {
		t->bytes += t->entries[i].size;
		if (i > 0 && !strcmp(t->entries[i - 1].path, t->entries[i].path))
			return apf_error(APF_EINPUT, t->entries[i].path,
					 "listed twice");
	}
	apf_buf listing = {0};
	int rc = apf_tree_listing(&listing, t);
	if (!rc)
		rc = apf_sha256_buf(t->digest, listing.data ? listing.data : "",
				    listing.len);
	apf_buf_free(&listing);
	return rc;
}

const apf_tree_entry *apf_tree_find(const apf_tree *t, const char *path)
{
	apf_tree_entry key = {.path = (char *)path};
	if (!t->n)
		return NULL;
	return bsearch(&key, t->entries, t->n, sizeof key, cmp_path);
}

void apf_tree_free(apf_tree *t)
{
	if (!t)
		return;
	for (size_t i = 0; i < t->n; i++) {
		free(t->entries[i].path);
		free(t->entries[i].link);
	}
	free(t->entries);
	free(t);
}
