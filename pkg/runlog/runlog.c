/*
 * runlog.c: writing and checking the hash-chained log.
 *
 * The reader works in batches of lines, a buffer of the file each: all
 * cores hash and parse a batch in parallel, then the calling thread checks
 * seq and prev in order and runs the callback, and the buffer is reused.
 * Memory stays bounded whatever the log's length, and the chain check
 * itself is a sequential compare of already computed hashes.
 */
#include "runlog/runlog.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "hash/hash.h"

#define MAX_LINE (1u << 20)
#define BATCH 16384
/* A batch's bytes: read() into a buffer, not mapped. On the VMs apf runs
 * on, the page faults of a mapping cost more than copying the bytes out of
 * the page cache (a 181 MB log: 0.44-0.48 s mapped, 0.37 s read into
 * 4 MiB buffers). 1 MiB measured as fast as 256 KiB and 15% faster than
 * 4 MiB, whose batches' tokens and lines fault in more memory. A buffer
 * that one line fills grows to hold MAX_LINE. */
#define BUF_BYTES (1u << 20)
#define GROWN (MAX_LINE + (64u << 10))

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
			char prev[65], uint64_t *t_ns, size_t *event)
{
	const char *p = line, *end = line + len;
	if (expect(&p, end, "{\"seq\":") || parse_uint(&p, end, seq) ||
	    expect(&p, end, ",\"prev\":\"") || end - p < 64)
		return -1;
	/* Not checked as hex here: the walk compares it with the previous
	 * line's hash, which is stricter. */
	memcpy(prev, p, 64);
	prev[64] = 0;
	p += 64;
	if (expect(&p, end, "\",\"t_ns\":") || parse_uint(&p, end, t_ns) ||
	    expect(&p, end, ",\"event\":\""))
		return -1;
	*event = (size_t)(p - line);
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
	rc = dir ? apf_fsync_dir(slash ? dir : ".")
		 : apf_error(APF_ENOMEM, path, "out of memory");
	free(dir);
	if (rc) {
		/* Closing must not replace the message of the failure. */
		char why[1024];
		apf_error_take(why, sizeof why);
		apf_runlog_close(*out);
		apf_error_restore(rc, why);
		*out = NULL;
	}
	return rc;
}

static int append_json_string(apf_buf *b, const char *s)
{
	json_t *j = json_string(s);
	char *t = j ? json_dumps(j, JSON_ENCODE_ANY | JSON_COMPACT) : NULL;
	int rc = t ? apf_buf_puts(b, t)
		   : apf_error(APF_EINTERNAL, "log",
			       "cannot encode '%.60s' as a JSON string", s);
	free(t);
	json_decref(j);
	return rc;
}

int apf_runlog_append(apf_runlog *l, uint64_t t_ns, const char *event,
		      const json_t *fields, int sync)
{
	/* The reader takes event names of 1 to 47 characters that JSON
	 * writes without escapes. */
	size_t elen = strlen(event);
	int plain = elen > 0 && elen < 48;
	for (size_t i = 0; plain && i < elen; i++)
		plain = event[i] > 0x1f && event[i] < 0x7f && event[i] != '"' &&
			event[i] != '\\';
	if (!plain)
		return apf_error(APF_EINTERNAL, l->path,
				 "event name '%.60s' is not 1 to 47 plain "
				 "characters",
				 event);
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

/* One line of a batch, filled by whichever thread checks it. */
struct line {
	const char *p;
	size_t len;
	uint64_t off;           /* where it starts in the file */
	uint64_t seq, t_ns;
	char prev[65];
	char hash[65];
	char event[48];
	json_t *obj;
	struct apf_jtok *tok;   /* its tokens, in its checker's token store */
	size_t ntok;
	void *slot;
	char err[160];
	uint64_t torn;          /* the last line, without its newline: its
				 * whole length, else 0 */
};

/* A thread's tokens for one batch: chunks that are never moved (a line's
 * tokens stay where they were parsed) and are kept for the next batch. */
#define TOK_CHUNK ((size_t)1 << 16)
struct tokchunk {
	struct apf_jtok *tok;
	size_t n, cap;
};
struct tokvec {
	struct tokchunk *c;
	size_t nc, cur;
};

struct batch {
	struct line *lines;
	size_t n, lines_cap;
	char *buf;              /* the lines' bytes */
	size_t buf_len, buf_cap;
	uint64_t buf_off;       /* where buf[0] is in the file */
	size_t next;            /* next chunk to hand out */
	size_t finished;        /* lines checked */
	struct tokvec *tv;      /* one per thread */
	char *slots;
	int oom;
};

struct pool {
	pthread_mutex_t lock;
	pthread_cond_t work, done;
	struct batch *cur;
	unsigned gen;
	int quit;
	int nthreads;           /* the caller plus the workers */
	pthread_t *tid;
	int started;
	const struct apf_runlog_read_opts *o;
	apf_sha256 *hasher[64]; /* one per thread: a context per line costs
				 * more than hashing the line */
	apf_jtok_shapes *shapes[64]; /* one per thread */
};

struct worker_arg {
	struct pool *pool;
	int id;
};

#define CHUNK 64

/* A chunk of tv with room for need tokens: the current one, a later one
 * kept from an earlier batch, or a new one. NULL when out of memory. */
static struct tokchunk *tok_room(struct tokvec *tv, size_t need)
{
	while (tv->cur < tv->nc && tv->c[tv->cur].cap - tv->c[tv->cur].n < need)
		tv->cur++;
	if (tv->cur == tv->nc) {
		struct tokchunk *c = realloc(tv->c, (tv->nc + 1) * sizeof *c);
		if (!c)
			return NULL;
		tv->c = c;
		size_t cap = need > TOK_CHUNK ? need : TOK_CHUNK;
		c[tv->nc].tok = malloc(cap * sizeof *c[tv->nc].tok);
		if (!c[tv->nc].tok)
			return NULL;
		c[tv->nc].n = 0;
		c[tv->nc].cap = cap;
		tv->nc++;
	}
	return &tv->c[tv->cur];
}

static void check_line(struct pool *pl, struct batch *b, struct line *ln,
		       int id)
{
	const struct apf_runlog_read_opts *o = pl->o;
	uint8_t d[APF_SHA256_LEN];
	ln->slot = o->slot_size
			   ? b->slots + (size_t)(ln - b->lines) * o->slot_size
			   : NULL;
	if (ln->err[0])
		return; /* already refused while splitting */
	if (apf_sha256_update(pl->hasher[id], ln->p, ln->len) ||
	    apf_sha256_final(pl->hasher[id], d)) {
		snprintf(ln->err, sizeof ln->err, "cannot hash");
		return;
	}
	apf_hex(ln->hash, d, sizeof d);
	size_t ev_at;
	if (parse_prefix(ln->p, ln->len, &ln->seq, ln->prev, &ln->t_ns,
			 &ev_at)) {
		snprintf(ln->err, sizeof ln->err,
			 "does not start with {\"seq\":N,\"prev\":\"<sha256>\","
			 "\"t_ns\":T,\"event\":");
		return;
	}
	size_t need = ln->len / 2 + 2;
	struct tokchunk *c = tok_room(&b->tv[id], need);
	if (!c) {
		b->oom = 1;
		snprintf(ln->err, sizeof ln->err, "out of memory");
		return;
	}
	struct apf_jtok *tok = c->tok + c->n;
	const char *why = NULL;
	/* Lines of one event mostly differ in their values only: the
	 * event's name (its raw bytes up to a quote) picks the form to try. */
	const char *ev_name = ln->p + ev_at,
		   *ev_end = memchr(ev_name, '"', ln->len - ev_at);
	size_t ev_len = ev_end ? (size_t)(ev_end - ev_name) : 0;
	if (apf_jtok_parse_like(pl->shapes[id], ev_name, ev_len, ln->p,
				ln->len, tok, c->cap - c->n, &ln->ntok, &why)) {
		snprintf(ln->err, sizeof ln->err, "not valid JSON (%s)", why);
		return;
	}
	ln->tok = tok;
	c->n += ln->ntok;
	/* The prefix fixed the first four members; the event's value is
	 * token 8. */
	const struct apf_jtok *ev = &tok[8];
	if (tok[0].type != APF_JOBJECT || ln->ntok < 9 ||
	    ev->type != APF_JSTRING || ev->escaped || ev->len == 0 ||
	    ev->len >= sizeof ln->event) {
		snprintf(ln->err, sizeof ln->err,
			 "event is not a plain name of 1 to %zu bytes",
			 sizeof ln->event - 1);
		return;
	}
	memcpy(ln->event, ln->p + ev->start, ev->len);
	ln->event[ev->len] = 0;
	if (o->json) {
		json_error_t je;
		ln->obj = json_loadb(ln->p, ln->len, JSON_REJECT_DUPLICATES, &je);
		if (!ln->obj) {
			snprintf(ln->err, sizeof ln->err, "not valid JSON (%.100s)",
				 je.text);
			return;
		}
	}
	if (o->prepare) {
		struct apf_runlog_record r = {
			.seq = ln->seq, .t_ns = ln->t_ns, .event = ln->event,
			.obj = ln->obj, .tok = tok, .ntok = ln->ntok,
			.line = ln->p, .len = ln->len, .slot = ln->slot};
		memcpy(r.hash, ln->hash, 65);
		o->prepare(o->user, &r, ln->slot);
	}
}

/* Checks chunks of batch b, handed out as generation gen, until none is
 * left. A worker that wakes late finds a newer generation and touches
 * nothing. */
static void work_on(struct pool *pl, struct batch *b, int id, unsigned gen)
{
	for (;;) {
		pthread_mutex_lock(&pl->lock);
		if (pl->gen != gen) {
			pthread_mutex_unlock(&pl->lock);
			return;
		}
		size_t k = b->next, n = b->n;
		b->next += CHUNK;
		pthread_mutex_unlock(&pl->lock);
		if (k >= n)
			return;
		size_t end = k + CHUNK < n ? k + CHUNK : n;
		for (size_t i = k; i < end; i++)
			check_line(pl, b, &b->lines[i], id);
		pthread_mutex_lock(&pl->lock);
		b->finished += end - k;
		if (b->finished == b->n)
			pthread_cond_broadcast(&pl->done);
		pthread_mutex_unlock(&pl->lock);
	}
}

static void *worker_main(void *arg)
{
	struct worker_arg *wa = arg;
	struct pool *pl = wa->pool;
	unsigned seen = 0;
	for (;;) {
		pthread_mutex_lock(&pl->lock);
		while (!pl->quit && pl->gen == seen)
			pthread_cond_wait(&pl->work, &pl->lock);
		if (pl->quit) {
			pthread_mutex_unlock(&pl->lock);
			return NULL;
		}
		seen = pl->gen;
		struct batch *b = pl->cur;
		pthread_mutex_unlock(&pl->lock);
		work_on(pl, b, wa->id, seen);
	}
}

/* Hands b to the workers; the caller joins in with finish(). */
static void submit(struct pool *pl, struct batch *b)
{
	pthread_mutex_lock(&pl->lock);
	b->next = 0;
	b->finished = 0;
	pl->cur = b;
	pl->gen++;
	pthread_cond_broadcast(&pl->work);
	pthread_mutex_unlock(&pl->lock);
}

static void finish(struct pool *pl, struct batch *b)
{
	pthread_mutex_lock(&pl->lock);
	unsigned gen = pl->gen;
	pthread_mutex_unlock(&pl->lock);
	work_on(pl, b, 0, gen);
	pthread_mutex_lock(&pl->lock);
	while (b->finished < b->n)
		pthread_cond_wait(&pl->done, &pl->lock);
	pthread_mutex_unlock(&pl->lock);
}

static void batch_reset(struct batch *b, int nthreads)
{
	for (size_t i = 0; i < b->n; i++)
		json_decref(b->lines[i].obj);
	for (int i = 0; i < nthreads; i++) {
		for (size_t k = 0; k < b->tv[i].nc; k++)
			b->tv[i].c[k].n = 0;
		b->tv[i].cur = 0;
	}
	b->n = 0;
}

static void batch_free(struct batch *b, int nthreads)
{
	if (b->tv) {
		batch_reset(b, nthreads);
		for (int i = 0; i < nthreads; i++) {
			for (size_t k = 0; k < b->tv[i].nc; k++)
				free(b->tv[i].c[k].tok);
			free(b->tv[i].c);
		}
	}
	free(b->tv);
	free(b->lines);
	free(b->slots);
	free(b->buf);
}

/* The log's bytes, read in order; what the last batch left of a line it
 * did not finish (still in that batch's buffer) starts the next. */
struct reader {
	const char *path;
	int fd;
	uint64_t pos;           /* bytes read */
	uint64_t size;          /* the file's size when opened: no more is read */
	int eof;
	const char *carry;
	size_t carry_len;
};

/* Appends up to want bytes of the file at dst; *got says how many. */
static int read_some(struct reader *rd, char *dst, size_t want, size_t *got)
{
	*got = 0;
	if (rd->pos + want > rd->size)
		want = (size_t)(rd->size - rd->pos);
	while (*got < want) {
		ssize_t r = read(rd->fd, dst + *got, want - *got);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return apf_error_errno(APF_EIO, errno, rd->path, "read");
		if (r == 0)
			break; /* it shrank since it was opened */
		*got += (size_t)r;
	}
	rd->pos += *got;
	if (*got < want || rd->pos >= rd->size)
		rd->eof = 1;
	return 0;
}

static struct line *new_line(struct batch *b, size_t slot_size)
{
	if (b->n == b->lines_cap) {
		size_t cap = b->lines_cap ? b->lines_cap * 2 : 64;
		struct line *l = realloc(b->lines, cap * sizeof *l);
		if (!l)
			return NULL;
		b->lines = l;
		if (slot_size) {
			char *sl = realloc(b->slots, cap * slot_size);
			if (!sl)
				return NULL;
			b->slots = sl;
		}
		b->lines_cap = cap;
	}
	struct line *ln = &b->lines[b->n++];
	ln->obj = NULL;
	ln->ntok = 0;
	ln->err[0] = 0;
	ln->torn = 0;
	ln->slot = NULL;
	return ln;
}

/* A line that filled the buffer (len bytes, more than MAX_LINE) with more
 * of the file to come: reads on, into the buffer past the MAX_LINE bytes
 * the line keeps, to learn whether it ends in a newline or is the torn last
 * line, and how long it is. */
static int long_line(struct reader *rd, struct batch *b, struct line *ln,
		     size_t len)
{
	uint64_t total = len;
	char *scratch = b->buf + MAX_LINE;
	size_t room = b->buf_cap - MAX_LINE; /* > 0: the buffer has grown */
	while (!rd->eof) {
		size_t got;
		int rc = read_some(rd, scratch, room, &got);
		if (rc)
			return rc;
		const char *nl = memchr(scratch, '\n', got);
		if (nl) {
			snprintf(ln->err, sizeof ln->err, "longer than %u bytes",
				 MAX_LINE);
			return 0;
		}
		total += got;
	}
	ln->torn = total;
	snprintf(ln->err, sizeof ln->err, "torn: the last line has no newline");
	return 0;
}

/* Makes b's buffer (holding the start of one line, no newline, the file
 * not at its end) large enough for a line of MAX_LINE bytes, and reads on
 * into it. */
static int grow(struct batch *b, struct reader *rd)
{
	size_t cap = GROWN;
	char *buf = realloc(b->buf, cap);
	if (!buf)
		return apf_error(APF_ENOMEM, rd->path, "out of memory");
	b->buf = buf;
	b->buf_cap = cap;
	size_t got;
	int rc = read_some(rd, b->buf + b->buf_len, cap - b->buf_len, &got);
	b->buf_len += got;
	return rc;
}

/* Reads the next lines into b: what the batch before left over, then as
 * much of the file as the buffer holds. Lines go to the workers; what
 * follows the last newline (a line cut by the buffer's end) is left for
 * the next batch. A line that is too long or torn ends the reading. */
static int batch_fill(struct batch *b, struct reader *rd, size_t slot_size)
{
	b->buf_off = rd->pos - rd->carry_len;
	if (rd->carry_len)
		memcpy(b->buf, rd->carry, rd->carry_len);
	b->buf_len = rd->carry_len;
	rd->carry_len = 0;
	if (!rd->eof) {
		size_t got;
		int rc = read_some(rd, b->buf + b->buf_len,
				   b->buf_cap - b->buf_len, &got);
		if (rc)
			return rc;
		b->buf_len += got;
	}
	size_t scan = 0;
	while (b->n < BATCH && scan < b->buf_len) {
		const char *nl = memchr(b->buf + scan, '\n', b->buf_len - scan);
		size_t len = nl ? (size_t)(nl - (b->buf + scan))
				: b->buf_len - scan;
		int last = !nl && rd->eof;
		int full = !nl && !last && b->n == 0;
		if (!nl && !last && !full)
			break; /* the next batch finishes it */
		if (full && b->buf_cap < GROWN) {
			/* One line fills the buffer: room for the longest,
			 * and past it to look for its end. */
			int rc = grow(b, rd);
			if (rc)
				return rc;
			continue;
		}
		struct line *ln = new_line(b, slot_size);
		if (!ln)
			return apf_error(APF_ENOMEM, rd->path, "out of memory");
		ln->p = b->buf + scan;
		ln->off = b->buf_off + scan;
		ln->len = len;
		if (last) {
			ln->torn = len;
			snprintf(ln->err, sizeof ln->err,
				 "torn: the last line has no newline");
		} else if (full) {
			ln->len = MAX_LINE;
			int rc = long_line(rd, b, ln, len);
			if (rc)
				return rc;
		} else if (len >= MAX_LINE) {
			snprintf(ln->err, sizeof ln->err, "longer than %u bytes",
				 MAX_LINE);
		}
		if (ln->err[0]) {
			rd->eof = 1; /* the walk stops at this line */
			return 0;
		}
		scan += len + 1;
	}
	rd->carry = b->buf + scan;
	rd->carry_len = b->buf_len - scan;
	return 0;
}

struct walk_state {
	const char *path;
	const struct apf_runlog_read_opts *o;
	char head[65];
	uint64_t count, good_end, line_no;
	int stop;               /* a bad line was met */
	uint64_t torn_bytes;    /* it was the torn last line, this long */
};

/* The in-order half: seq, prev, the caller's fn. */
static int consume(struct walk_state *w, struct batch *b, uint64_t *valid_bytes)
{
	int rc = 0;
	if (b->oom)
		return apf_error(APF_ENOMEM, w->path, "out of memory");
	for (size_t i = 0; i < b->n && !rc && !w->stop; i++) {
		struct line *ln = &b->lines[i];
		w->line_no++;
		const char *why = ln->err[0] ? ln->err : NULL;
		char buf[200];
		if (!why && ln->seq != w->count) {
			snprintf(buf, sizeof buf,
				 "seq %llu where %llu was due (a line was "
				 "removed, duplicated or reordered)",
				 (unsigned long long)ln->seq,
				 (unsigned long long)w->count);
			why = buf;
		} else if (!why && memcmp(ln->prev, w->head, 64)) {
			snprintf(buf, sizeof buf,
				 "prev does not match the hash of line "
				 "%llu (a line before it was changed)",
				 (unsigned long long)w->line_no - 1);
			why = buf;
		}
		if (why) {
			w->stop = 1;
			w->torn_bytes = ln->torn;
			if (!valid_bytes)
				rc = apf_error(APF_EVERIFY, w->path,
					       "line %llu: %s",
					       (unsigned long long)w->line_no,
					       why);
			break;
		}
		memcpy(w->head, ln->hash, 65);
		w->count++;
		w->good_end = ln->off + ln->len + 1;
		if (w->o->fn) {
			struct apf_runlog_record r = {
				.seq = ln->seq, .t_ns = ln->t_ns,
				.event = ln->event, .obj = ln->obj,
				.tok = ln->tok,
				.ntok = ln->ntok, .line = ln->p, .len = ln->len,
				.line_no = w->line_no, .slot = ln->slot};
			memcpy(r.hash, ln->hash, 65);
			rc = w->o->fn(w->o->user, &r);
		}
	}
	return rc;
}

/* Walks the log: two batches in flight, so the workers check the next
 * batch while the caller's thread runs the in-order half of this one and
 * then reads the batch after (the read and the line split are the
 * caller's, and would leave the workers idle otherwise). With
 * `valid_bytes`, stops quietly at the first bad line and reports how many
 * leading bytes form a valid chain (for appending). */
static int walk(const char *path, const struct apf_runlog_read_opts *o,
		struct apf_runlog_summary *sum, uint64_t *valid_bytes)
{
	/* Whoever wrote the log is not trusted by its reader: a FIFO or a
	 * device would block or never end, a symlink could point anywhere. */
	int fd;
	struct stat st;
	int rc = apf_file_open_regular(&fd, &st, path, 0);
	if (rc)
		return rc;
	if ((uint64_t)st.st_size > APF_MAX_LOG_BYTES) {
		close(fd);
		return apf_error(APF_EINPUT, path,
				 "%llu bytes, larger than the %llu-byte limit",
				 (unsigned long long)st.st_size,
				 (unsigned long long)APF_MAX_LOG_BYTES);
	}
	struct reader rd = {.path = path, .fd = fd,
			    .size = (uint64_t)st.st_size, .eof = !st.st_size};
	posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
	struct pool pl = {.o = o};
	pl.nthreads = apf_cpu_count();
	if (pl.nthreads < 1)
		pl.nthreads = 1;
	if (pl.nthreads > 64)
		pl.nthreads = 64;
	pthread_mutex_init(&pl.lock, NULL);
	pthread_cond_init(&pl.work, NULL);
	pthread_cond_init(&pl.done, NULL);
	struct batch bt[2] = {{0}};
	struct worker_arg args[64];
	/* A short log (a resume, a fuzz input) gets buffers its size, not
	 * BUF_BYTES; the lines' records grow as lines come. */
	size_t buf_cap = rd.size < BUF_BYTES ? (size_t)rd.size + 1 : BUF_BYTES;
	for (int k = 0; k < 2 && !rc; k++) {
		bt[k].buf = malloc(buf_cap);
		bt[k].buf_cap = buf_cap;
		bt[k].tv = calloc((size_t)pl.nthreads, sizeof *bt[k].tv);
		if (!bt[k].buf || !bt[k].tv)
			rc = apf_error(APF_ENOMEM, path, "out of memory");
	}
	pl.tid = calloc((size_t)pl.nthreads, sizeof *pl.tid);
	if (!rc && !pl.tid)
		rc = apf_error(APF_ENOMEM, path, "out of memory");
	for (int i = 0; !rc && i < pl.nthreads; i++) {
		rc = apf_sha256_new(&pl.hasher[i]);
		if (!rc && !(pl.shapes[i] = apf_jtok_shapes_new()))
			rc = apf_error(APF_ENOMEM, path, "out of memory");
	}
	for (int i = 1; !rc && i < pl.nthreads; i++) {
		args[i].pool = &pl;
		args[i].id = i;
		if (pthread_create(&pl.tid[pl.started], NULL, worker_main,
				   &args[i]) == 0)
			pl.started++;
	}
	struct walk_state w = {.path = path, .o = o};
	memcpy(w.head, APF_RUNLOG_ZERO_HEAD, 65);
	int cur = 0, nxt = 1;
	if (!rc && !rd.eof) {
		rc = batch_fill(&bt[cur], &rd, o->slot_size);
		if (!rc) {
			submit(&pl, &bt[cur]);
			finish(&pl, &bt[cur]);
		}
	}
	/* From here bt[cur] is checked and bt[nxt] read, not handed out. */
	if (!rc && bt[cur].n && (!rd.eof || rd.carry_len))
		rc = batch_fill(&bt[nxt], &rd, o->slot_size);
	while (!rc && bt[cur].n) {
		if (bt[nxt].n)
			submit(&pl, &bt[nxt]);
		rc = consume(&w, &bt[cur], valid_bytes);
		/* cur is spent: it reads the lines after nxt's (the carry is
		 * in nxt's buffer, past the lines the workers read) */
		batch_reset(&bt[cur], pl.nthreads);
		int fill_rc = 0;
		if (!rc && !w.stop && (!rd.eof || rd.carry_len))
			fill_rc = batch_fill(&bt[cur], &rd, o->slot_size);
		if (bt[nxt].n)
			finish(&pl, &bt[nxt]);
		if (!rc)
			rc = fill_rc;
		if (w.stop)
			break;
		int spent = cur;
		cur = nxt;
		nxt = spent;
	}
	pthread_mutex_lock(&pl.lock);
	pl.quit = 1;
	pthread_cond_broadcast(&pl.work);
	pthread_mutex_unlock(&pl.lock);
	for (int i = 0; i < pl.started; i++)
		pthread_join(pl.tid[i], NULL);
	free(pl.tid);
	for (int i = 0; i < pl.nthreads; i++) {
		apf_sha256_free(pl.hasher[i]);
		apf_jtok_shapes_free(pl.shapes[i]);
	}
	for (int k = 0; k < 2; k++)
		batch_free(&bt[k], pl.nthreads);
	pthread_cond_destroy(&pl.work);
	pthread_cond_destroy(&pl.done);
	pthread_mutex_destroy(&pl.lock);
	close(fd);
	if (!rc && sum) {
		sum->records = w.count;
		memcpy(sum->head, w.head, 65);
	}
	if (sum)
		sum->torn_bytes = w.torn_bytes;
	if (valid_bytes)
		*valid_bytes = w.good_end;
	return rc;
}

int apf_runlog_walk(struct apf_runlog_summary *sum, const char *path,
		    const struct apf_runlog_read_opts *o)
{
	return walk(path, o, sum, NULL);
}

int apf_runlog_read(struct apf_runlog_summary *sum, const char *path,
		    apf_runlog_fn fn, void *user)
{
	struct apf_runlog_read_opts o = {.fn = fn, .user = user, .json = 1};
	return walk(path, &o, sum, NULL);
}

int apf_runlog_open_append(apf_runlog **out, const char *path,
			   int cut_torn_tail, uint64_t *cut)
{
	*out = NULL;
	if (cut)
		*cut = 0;
	struct apf_runlog_summary sum;
	uint64_t valid = 0;
	const struct apf_runlog_read_opts none = {0};
	int rc = walk(path, &none, &sum, &valid);
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
