/*
 * runlog.c: writing and checking the hash-chained log.
 *
 * The reader works in batches of lines: all cores hash and parse a batch in
 * parallel, then the calling thread checks seq and prev in order and runs
 * the callback, and the batch is freed. Memory stays bounded whatever the
 * log's length, and the chain check itself is a sequential compare of
 * already computed hashes.
 */
#include "runlog/runlog.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "hash/hash.h"

#define MAX_LINE (1u << 20)
#define BATCH 16384

struct apf_runlog {
	int fd;
	char *path;
	uint64_t count;
	char head[65];
	apf_sha256 *h;
};

/* ---- the fixed prefix ---------------------------------------------------------
 * {"seq":N,"prev":"<64 hex>","t_ns":T,"event":"  -- parsed by hand so the
 * order and form of the chain fields are checked, not just their values. */

static int parse_uint(const char **p, const char *end, uint64_t *out)
{
	const char *s = *p;
	uint64_t v = 0;
	if (s >= end || *s < '0' || *s > '9' || (*s == '0' && s + 1 < end &&
						 s[1] >= '0' && s[1] <= '9'))
		return -1;
	while (s < end && *s >= '0' && *s <= '9') {
		if (v > (UINT64_MAX - 9) / 10)
			return -1;
		v = v * 10 + (uint64_t)(*s - '0');
		s++;
	}
	*p = s;
	*out = v;
	return 0;
}

static int expect(const char **p, const char *end, const char *lit)
{
	size_t n = strlen(lit);
	if ((size_t)(end - *p) < n || memcmp(*p, lit, n))
		return -1;
	*p += n;
	return 0;
}

/* Returns 0 and the fields, or -1 when the prefix is malformed. */
static int parse_prefix(const char *line, size_t len, uint64_t *seq,
			char prev[65], uint64_t *t_ns)
{
	const char *p = line, *end = line + len;
	if (expect(&p, end, "{\"seq\":") || parse_uint(&p, end, seq) ||
	    expect(&p, end, ",\"prev\":\"") || end - p < 64)
		return -1;
	memcpy(prev, p, 64);
	prev[64] = 0;
	if (!apf_is_hex_digest(prev))
		return -1;
	p += 64;
	if (expect(&p, end, "\",\"t_ns\":") || parse_uint(&p, end, t_ns) ||
	    expect(&p, end, ",\"event\":\""))
		return -1;
	return 0;
}

/* ---- writing ------------------------------------------------------------------ */

static int log_new(apf_runlog **out, const char *path, int fd)
{
	apf_runlog *l = apf_calloc(1, sizeof *l);
	if (!l || !(l->path = apf_strdup(path)) || apf_sha256_new(&l->h)) {
		if (l)
			free(l->path);
		free(l);
		close(fd);
		return apf_error(APF_ENOMEM, path, "out of memory");
	}
	l->fd = fd;
	memcpy(l->head, APF_RUNLOG_ZERO_HEAD, 65);
	*out = l;
	return 0;
}

int apf_runlog_create(apf_runlog **out, const char *path)
{
	*out = NULL;
	int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_APPEND | O_CLOEXEC,
		      0644);
	if (fd < 0)
		return apf_error_errno(errno == EEXIST ? APF_EINPUT : APF_EIO,
				       errno, path, "create log");
	int rc = log_new(out, path, fd);
	if (rc)
		return rc;
	/* The new name must survive a crash too. */
	char *dir = apf_strdup(path);
	char *slash = dir ? strrchr(dir, '/') : NULL;
	if (slash)
		*slash = 0;
	rc = apf_fsync_dir(slash ? dir : ".");
	free(dir);
	if (rc) {
		apf_runlog_close(*out);
		*out = NULL;
	}
	return rc;
}

static int append_json_string(apf_buf *b, const char *s)
{
	json_t *j = json_string(s);
	char *t = j ? json_dumps(j, JSON_ENCODE_ANY | JSON_COMPACT) : NULL;
	int rc = t ? apf_buf_puts(b, t) : APF_ENOMEM;
	free(t);
	json_decref(j);
	return rc;
}

int apf_runlog_append(apf_runlog *l, uint64_t t_ns, const char *event,
		      const json_t *fields, int sync)
{
	apf_buf b = {0};
	int rc = apf_buf_printf(&b, "{\"seq\":%llu,\"prev\":\"%s\",\"t_ns\":%llu,"
				    "\"event\":",
				(unsigned long long)l->count, l->head,
				(unsigned long long)t_ns);
	if (!rc)
		rc = append_json_string(&b, event);
	const char *key;
	json_t *v;
	if (fields && !json_is_object(fields))
		rc = apf_error(APF_EINTERNAL, l->path, "log fields must be an object");
	json_object_foreach((json_t *)fields, key, v)
	{
		if (rc)
			break;
		if (!strcmp(key, "seq") || !strcmp(key, "prev") ||
		    !strcmp(key, "t_ns") || !strcmp(key, "event")) {
			rc = apf_error(APF_EINTERNAL, l->path,
				       "log field '%s' is reserved", key);
			break;
		}
		char *val = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);
		rc = !val || apf_buf_puts(&b, ",") || append_json_string(&b, key) ||
		     apf_buf_puts(&b, ":") || apf_buf_puts(&b, val);
		free(val);
		if (rc)
			rc = apf_error(APF_ENOMEM, l->path, "out of memory");
	}
	if (!rc && apf_buf_puts(&b, "}"))
		rc = apf_error(APF_ENOMEM, l->path, "out of memory");
	if (!rc && (memchr(b.data, '\n', b.len) || b.len >= MAX_LINE))
		rc = apf_error(APF_EINTERNAL, l->path, "log line too long");
	uint8_t d[APF_SHA256_LEN];
	if (!rc)
		rc = apf_sha256_update(l->h, b.data, b.len);
	if (!rc)
		rc = apf_sha256_final(l->h, d);
	if (!rc && apf_buf_puts(&b, "\n"))
		rc = apf_error(APF_ENOMEM, l->path, "out of memory");
	/* One write per line: a crash leaves a prefix of it at worst. */
	if (!rc)
		rc = apf_write_all(l->fd, b.data, b.len, l->path);
	if (!rc && sync)
		rc = apf_runlog_sync(l);
	if (!rc) {
		apf_hex(l->head, d, sizeof d);
		l->count++;
	}
	apf_buf_free(&b);
	return rc;
}

int apf_runlog_sync(apf_runlog *l)
{
	if (apf_fault_check("fsync"))
		return apf_error_errno(APF_EIO, EIO, l->path, "fsync");
	if (fsync(l->fd) != 0)
		return apf_error_errno(APF_EIO, errno, l->path, "fsync");
	return 0;
}

uint64_t apf_runlog_count(const apf_runlog *l)
{
	return l->count;
}

const char *apf_runlog_head(const apf_runlog *l)
{
	return l->head;
}

int apf_runlog_close(apf_runlog *l)
{
	if (!l)
		return 0;
	int rc = 0;
	if (l->fd >= 0 && close(l->fd) != 0)
		rc = apf_error_errno(APF_EIO, errno, l->path, "close");
	apf_sha256_free(l->h);
	free(l->path);
	free(l);
	return rc;
}

/* ---- reading ------------------------------------------------------------------- */

struct line {
	const char *p;
	size_t len;
	uint64_t seq, t_ns;
	char prev[65];
	char hash[65];
	json_t *obj;
	const char *event;
	char err[160];
};

struct batch {
	struct line *lines;
	size_t n;
	size_t next;
	pthread_mutex_t lock;
};

static void check_line(struct line *ln)
{
	uint8_t d[APF_SHA256_LEN];
	if (ln->err[0])
		return; /* already refused while splitting */
	if (apf_sha256_buf(ln->p, ln->len, d)) {
		snprintf(ln->err, sizeof ln->err, "cannot hash");
		return;
	}
	apf_hex(ln->hash, d, sizeof d);
	if (parse_prefix(ln->p, ln->len, &ln->seq, ln->prev, &ln->t_ns)) {
		snprintf(ln->err, sizeof ln->err,
			 "does not start with {\"seq\":N,\"prev\":\"<sha256>\","
			 "\"t_ns\":T,\"event\":");
		return;
	}
	json_error_t je;
	ln->obj = json_loadb(ln->p, ln->len, JSON_REJECT_DUPLICATES, &je);
	if (!ln->obj || !json_is_object(ln->obj)) {
		snprintf(ln->err, sizeof ln->err, "not a JSON object (%.100s)",
			 ln->obj ? "not an object" : je.text);
		return;
	}
	ln->event = json_string_value(json_object_get(ln->obj, "event"));
	if (!ln->event || !ln->event[0])
		snprintf(ln->err, sizeof ln->err, "event is not a string");
}

static void *batch_worker(void *arg)
{
	struct batch *b = arg;
	for (;;) {
		pthread_mutex_lock(&b->lock);
		size_t k = b->next;
		b->next += 64;
		pthread_mutex_unlock(&b->lock);
		if (k >= b->n)
			break;
		size_t end = k + 64 < b->n ? k + 64 : b->n;
		for (size_t i = k; i < end; i++)
			check_line(&b->lines[i]);
	}
	return NULL;
}

static void run_batch(struct batch *b, int threads)
{
	b->next = 0;
	pthread_t tid[64];
	int started = 0;
	for (int i = 1; i < threads && i < 64; i++)
		if (pthread_create(&tid[started], NULL, batch_worker, b) == 0)
			started++;
	batch_worker(b);
	for (int i = 0; i < started; i++)
		pthread_join(tid[i], NULL);
}

/* Walks the log. With `valid_bytes`, stops quietly at the first bad line
 * and reports how many leading bytes form a valid chain (for appending). */
static int walk(const char *path, apf_runlog_fn fn, void *user,
		struct apf_runlog_summary *sum, uint64_t *valid_bytes)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return apf_error_errno(APF_EINPUT, errno, path, "open");
	struct stat st;
	if (fstat(fd, &st) != 0) {
		close(fd);
		return apf_error_errno(APF_EIO, errno, path, "stat");
	}
	size_t size = (size_t)st.st_size;
	const char *data = NULL;
	if (size) {
		data = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
		if (data == MAP_FAILED) {
			close(fd);
			return apf_error_errno(APF_EIO, errno, path, "map");
		}
		madvise((void *)data, size, MADV_SEQUENTIAL);
	}
	close(fd);
	/* A batch holds at most the lines there are: a short log (the usual
	 * case when resuming, and every fuzz input) should not pay for
	 * zeroing BATCH records. */
	size_t cap = 1;
	for (const char *p = data, *nl; cap < BATCH && p && size &&
					(nl = memchr(p, '\n', size - (size_t)(p - data)));
	     p = nl + 1 < data + size ? nl + 1 : NULL)
		cap++;
	struct batch b = {0};
	b.lines = calloc(cap, sizeof *b.lines);
	pthread_mutex_init(&b.lock, NULL);
	int threads = apf_cpu_count();
	char head[65];
	memcpy(head, APF_RUNLOG_ZERO_HEAD, 65);
	uint64_t count = 0, good_end = 0, line_no = 0;
	size_t off = 0;
	int rc = b.lines ? 0 : apf_error(APF_ENOMEM, path, "out of memory");
	while (!rc && off < size) {
		b.n = 0;
		size_t scan = off;
		while (b.n < cap && scan < size) {
			const char *nl = memchr(data + scan, '\n', size - scan);
			size_t len = nl ? (size_t)(nl - (data + scan)) : size - scan;
			struct line *ln = &b.lines[b.n++];
			memset(ln, 0, sizeof *ln);
			ln->p = data + scan;
			ln->len = len;
			if (!nl)
				snprintf(ln->err, sizeof ln->err,
					 "torn: the last line has no newline");
			else if (len >= MAX_LINE)
				snprintf(ln->err, sizeof ln->err, "longer than %u bytes",
					 MAX_LINE);
			scan += len + (nl ? 1 : 0);
		}
		run_batch(&b, threads);
		for (size_t i = 0; i < b.n && !rc; i++) {
			struct line *ln = &b.lines[i];
			line_no++;
			const char *why = ln->err[0] ? ln->err : NULL;
			char buf[200];
			if (!why && ln->seq != count) {
				snprintf(buf, sizeof buf,
					 "seq %llu where %llu was due (a line was "
					 "removed, duplicated or reordered)",
					 (unsigned long long)ln->seq,
					 (unsigned long long)count);
				why = buf;
			} else if (!why && strcmp(ln->prev, head)) {
				snprintf(buf, sizeof buf,
					 "prev does not match the hash of line "
					 "%llu (a line before it was changed)",
					 (unsigned long long)line_no - 1);
				why = buf;
			}
			if (why) {
				if (valid_bytes) {
					off = size; /* stop: the rest is cut */
					break;
				}
				rc = apf_error(APF_EVERIFY, path, "line %llu: %s",
					       (unsigned long long)line_no, why);
				break;
			}
			memcpy(head, ln->hash, 65);
			count++;
			good_end = (uint64_t)(ln->p - data) + ln->len + 1;
			if (fn) {
				struct apf_runlog_record r = {
					ln->seq, ln->t_ns, ln->event, ln->obj,
					ln->p,	 ln->len,  line_no,   ""};
				memcpy(r.hash, ln->hash, 65);
				rc = fn(user, &r);
			}
		}
		for (size_t i = 0; i < b.n; i++)
			json_decref(b.lines[i].obj);
		if (off < size)
			off = scan;
	}
	free(b.lines);
	pthread_mutex_destroy(&b.lock);
	if (data)
		munmap((void *)data, size);
	if (!rc && sum) {
		sum->records = count;
		memcpy(sum->head, head, 65);
	}
	if (valid_bytes)
		*valid_bytes = good_end;
	return rc;
}

int apf_runlog_read(const char *path, apf_runlog_fn fn, void *user,
		    struct apf_runlog_summary *sum)
{
	return walk(path, fn, user, sum, NULL);
}

int apf_runlog_open_append(apf_runlog **out, const char *path,
			   int cut_torn_tail, uint64_t *cut)
{
	*out = NULL;
	if (cut)
		*cut = 0;
	struct apf_runlog_summary sum;
	uint64_t valid = 0;
	int rc = walk(path, NULL, NULL, &sum, &valid);
	if (rc)
		return rc;
	struct stat st;
	if (stat(path, &st) != 0)
		return apf_error_errno(APF_EIO, errno, path, "stat");
	uint64_t extra = (uint64_t)st.st_size - valid;
	if (extra && !cut_torn_tail)
		return apf_error(APF_EVERIFY, path,
				 "%llu bytes at the end are not a valid record "
				 "(torn by a crash?)",
				 (unsigned long long)extra);
	int fd = open(path, O_WRONLY | O_APPEND | O_CLOEXEC);
	if (fd < 0)
		return apf_error_errno(APF_EIO, errno, path, "open log");
	if (extra) {
		if (ftruncate(fd, (off_t)valid) != 0 || fsync(fd) != 0) {
			int e = errno;
			close(fd);
			return apf_error_errno(APF_EIO, e, path, "cut torn tail");
		}
		if (cut)
			*cut = extra;
	}
	rc = log_new(out, path, fd);
	if (!rc) {
		(*out)->count = sum.records;
		memcpy((*out)->head, sum.head, 65);
	}
	return rc;
}
