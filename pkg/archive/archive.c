/*
 * archive.c: writing and reading the deterministic entry archive (layout and
 * member rules in archive.h).
 *
 * Writing. libarchive formats restricted-pax tar in 10240-byte records; its
 * write callback compresses them with libzstd (fixed level, content checksum,
 * no worker threads) into an apf_atomic temporary and hashes every compressed
 * byte. Commit ends the frame and appends the skippable integrity trailer.
 * Every member is checked against the same rules the reader applies before
 * libarchive sees it, so a writer can only produce archives the reader
 * accepts.
 *
 * Reading. A first pass over the file checks the trailer and classifies a bad
 * file (changed, damaged, truncated, not an entry) before anything is parsed.
 * A second pass streams the one zstd frame into libarchive's tar reader (tar
 * only: no other format, no filter), re-hashing the compressed bytes so that
 * a file changed between the two passes is caught before the end is
 * reported. Each header is checked before any of its data is read; the
 * decompressed stream may not grow beyond what the declared members account
 * for, so a small file cannot make the reader churn through gigabytes.
 *
 * Locale. libarchive converts names between the locale's charset and UTF-8.
 * Its calls run under a locale chosen here (uselocale), never the caller's:
 * the writer uses C.UTF-8, in which the conversion of a (checked) UTF-8 name
 * to the pax header's UTF-8 is the identity, so a non-ASCII name is stored
 * as a plain pax "path" that any tar lists; the reader uses C, in which
 * libarchive converts nothing (or fails to and keeps the raw bytes), so the
 * names read are exactly the bytes stored, with no Unicode normalisation.
 */
#include "archive/archive.h"

#include <archive.h>
#include <archive_entry.h>
#include <errno.h>
#include <fcntl.h>
#include <locale.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zstd.h>

#include "hash/hash.h"

#define TRAILER_MAGIC 0x184D2A5Au
#define TRAILER_PAYLOAD 36u
#define TRAILER_LEN 44 /* magic, size, "apf1", SHA-256 */
#define ZSTD_FRAME_MAGIC 0xFD2FB528u
#define ZSTD_LEVEL 12
#define TAR_RECORD 10240
#define IO_BUF (256 * 1024)
#define NAME_MAX_BYTES 4095
#define COMPONENT_MAX_BYTES 255
#define SYMLINK_FOLLOW_MAX 40 /* as Linux's MAXSYMLINKS */
/* Tar overhead one member may legitimately add to the stream: its header,
 * a pax header holding a long path and link target, and padding. */
#define MEMBER_OVERHEAD (64 * 1024)

/* ---- shared helpers ------------------------------------------------------ */

static locale_t c_locale, utf8_locale;
static pthread_once_t locale_once = PTHREAD_ONCE_INIT;

static void locales_make(void)
{
	c_locale = newlocale(LC_ALL_MASK, "C", (locale_t)0);
	/* Built into glibc since 2.35, shipped by Debian long before. */
	utf8_locale = newlocale(LC_ALL_MASK, "C.UTF-8", (locale_t)0);
}

__attribute__((destructor)) static void locales_release(void)
{
	if (c_locale)
		freelocale(c_locale);
	if (utf8_locale)
		freelocale(utf8_locale);
	c_locale = utf8_locale = (locale_t)0;
}

/* Switches the calling thread to the C (utf8 = 0) or the C.UTF-8 locale;
 * returns the previous one for locale_leave. */
static locale_t locale_enter(int utf8)
{
	pthread_once(&locale_once, locales_make);
	locale_t l = utf8 ? utf8_locale : c_locale;
	return l ? uselocale(l) : (locale_t)0;
}

static int have_utf8_locale(void)
{
	pthread_once(&locale_once, locales_make);
	return utf8_locale != (locale_t)0;
}

static void locale_leave(locale_t old)
{
	if (old)
		uselocale(old);
}

static void put_le32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

/* The first 12 bytes every trailer starts with. */
static void trailer_head(uint8_t out[12])
{
	put_le32(out, TRAILER_MAGIC);
	put_le32(out + 4, TRAILER_PAYLOAD);
	memcpy(out + 8, "apf1", 4);
}

/* A member name or link target made safe for a one-line message: printable
 * ASCII stays, anything else becomes \xNN, long names are cut. */
static const char *esc(char out[160], const char *s)
{
	static const char hex[] = "0123456789abcdef";
	size_t o = 0;
	for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
		if (o + 8 >= 160) {
			memcpy(out + o, "...", 4);
			return out;
		}
		if (*p >= 0x20 && *p < 0x7f && *p != '\\' && *p != '"') {
			out[o++] = (char)*p;
		} else {
			out[o++] = '\\';
			out[o++] = 'x';
			out[o++] = hex[*p >> 4];
			out[o++] = hex[*p & 15];
		}
	}
	out[o] = 0;
	return out;
}

static int has_non_ascii(const char *s)
{
	for (; *s; s++)
		if ((unsigned char)*s >= 0x80)
			return 1;
	return 0;
}

/* A reader's or writer's failure is sticky: every later call returns it
 * again, and with it the message it had, not whatever another call
 * recorded since. msg holds the message once the failing call returned. */
#define STICKY_MSG 1024

static void sticky_note(int rc, int *err, char msg[STICKY_MSG])
{
	if (rc >= 0 || msg[0])
		return;
	if (!*err)
		*err = rc;
	snprintf(msg, STICKY_MSG, "%s", apf_error_message());
}

static int sticky_again(int err, const char msg[STICKY_MSG])
{
	apf_error_restore(err, msg);
	return err;
}

/* ---- member rules -------------------------------------------------------- */

/* Every name seen so far, and every directory those names imply: 'f' file,
 * 'l' symlink, 'd' directory. Open addressing, FNV-1a. */
struct slot {
	char *name;
	char *link;
	char type;
};

struct rules {
	struct slot *slots;
	size_t cap, n;
	char **links; /* symlink names in archive order (point into slots) */
	size_t nlinks, links_cap;
	char *prev;
	size_t count;
};

static uint64_t fnv1a(const char *s, size_t len)
{
	uint64_t h = 1469598103934665603ull;
	for (size_t i = 0; i < len; i++)
		h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
	return h;
}

static struct slot *rules_find(const struct rules *r, const char *name,
			       size_t len)
{
	if (!r->cap)
		return NULL;
	for (size_t i = fnv1a(name, len) & (r->cap - 1);;
	     i = (i + 1) & (r->cap - 1)) {
		struct slot *s = &r->slots[i];
		if (!s->name)
			return NULL;
		if (strlen(s->name) == len && !memcmp(s->name, name, len))
			return s;
	}
}

static int rules_grow(struct rules *r)
{
	size_t cap = r->cap ? 2 * r->cap : 1024;
	struct slot *slots = calloc(cap, sizeof *slots);
	if (!slots)
		return apf_error(APF_ENOMEM, "archive", "out of memory");
	for (size_t i = 0; i < r->cap; i++) {
		struct slot *s = &r->slots[i];
		if (!s->name)
			continue;
		size_t j = fnv1a(s->name, strlen(s->name)) & (cap - 1);
		while (slots[j].name)
			j = (j + 1) & (cap - 1);
		slots[j] = *s;
	}
	free(r->slots);
	r->slots = slots;
	r->cap = cap;
	return 0;
}

static struct slot *rules_insert(struct rules *r, const char *name, size_t len,
				 char type, const char *link)
{
	if ((r->n + 1) * 2 > r->cap && rules_grow(r) != 0)
		return NULL;
	char *n = strndup(name, len), *l = link ? strdup(link) : NULL;
	if (!n || (link && !l)) {
		free(n);
		free(l);
		return NULL;
	}
	size_t i = fnv1a(name, len) & (r->cap - 1);
	while (r->slots[i].name)
		i = (i + 1) & (r->cap - 1);
	r->slots[i] = (struct slot){n, l, type};
	r->n++;
	return &r->slots[i];
}

static void rules_free(struct rules *r)
{
	for (size_t i = 0; i < r->cap; i++) {
		free(r->slots[i].name);
		free(r->slots[i].link);
	}
	free(r->slots);
	free(r->links);
	free(r->prev);
	memset(r, 0, sizeof *r);
}

/* Why a member name breaks the rules, or NULL. */
static const char *name_problem(const char *name)
{
	if (!*name)
		return "empty name";
	if (name[0] == '/')
		return "absolute path";
	if (!apf_utf8_path_ok(name))
		return "name is not UTF-8 or holds control characters";
	if (strlen(name) > NAME_MAX_BYTES)
		return "name longer than 4095 bytes";
	for (const char *c = name;;) {
		size_t len = strcspn(c, "/");
		if (len == 0)
			return "empty path component";
		if (len == 1 && c[0] == '.')
			return "\".\" path component";
		if (len == 2 && c[0] == '.' && c[1] == '.')
			return "\"..\" path component";
		if (len > COMPONENT_MAX_BYTES)
			return "path component longer than 255 bytes";
		if (!c[len])
			return NULL;
		c += len + 1;
	}
}

static const char *target_problem(const char *target)
{
	if (!*target)
		return "empty symlink target";
	if (target[0] == '/')
		return "absolute symlink target";
	if (!apf_utf8_path_ok(target))
		return "symlink target is not UTF-8 or holds control characters";
	if (strlen(target) > NAME_MAX_BYTES)
		return "symlink target longer than 4095 bytes";
	return NULL;
}

static int refuse(const char *what, const char *name, const char *why)
{
	char e[160];
	return apf_error(APF_EINPUT, what, "member \"%s\": %s", esc(e, name),
			 why);
}

/* Checks one member against the rules and the members before it, and
 * records it. what names the archive in messages. */
static int rules_add(struct rules *r, const char *what, const char *name,
		     char type, const char *link)
{
	const char *why = name_problem(name);
	if (!why && type == 'l')
		why = target_problem(link);
	if (why)
		return refuse(what, name, why);
	/* The first member is exempt from the order (the manifest leads);
	 * from the third on each must sort after the one before it. */
	if (r->count >= 2 && strcmp(name, r->prev) <= 0)
		return refuse(what, name,
			      strcmp(name, r->prev) == 0
				      ? "duplicate member"
				      : "out of order (members after the first "
					"must be sorted bytewise)");
	size_t len = strlen(name);
	for (size_t i = 0; i < len; i++) {
		if (name[i] != '/')
			continue;
		struct slot *s = rules_find(r, name, i);
		if (s && s->type != 'd') {
			char e[160], d[160];
			snprintf(d, sizeof d, "path passes through %s \"%s\"",
				 s->type == 'l' ? "symlink" : "file",
				 esc(e, s->name));
			return refuse(what, name, d);
		}
		if (!s && !rules_insert(r, name, i, 'd', NULL))
			return apf_error(APF_ENOMEM, what, "out of memory");
	}
	struct slot *s = rules_find(r, name, len);
	if (s)
		return refuse(what, name,
			      s->type == 'd' ? "is also a directory of other "
					       "members"
					     : "duplicate member");
	s = rules_insert(r, name, len, type, link);
	if (!s)
		return apf_error(APF_ENOMEM, what, "out of memory");
	if (type == 'l') {
		if (r->nlinks == r->links_cap) {
			size_t cap = r->links_cap ? 2 * r->links_cap : 64;
			char **v = realloc(r->links, cap * sizeof *v);
			if (!v)
				return apf_error(APF_ENOMEM, what,
						 "out of memory");
			r->links = v;
			r->links_cap = cap;
		}
		r->links[r->nlinks++] = s->name;
	}
	char *prev = strdup(name);
	if (!prev)
		return apf_error(APF_ENOMEM, what, "out of memory");
	free(r->prev);
	r->prev = prev;
	r->count++;
	return 0;
}

/* Resolves the symlink member name -> target the way the kernel would,
 * following the other symlink members on the way, and says why it leaves
 * the tree (or loops), or NULL. */
static const char *link_problem(const struct rules *r, const char *name,
				const char *target, int *oom)
{
	apf_buf path = {0}, rest = {0};
	const char *why = NULL;
	const char *slash = strrchr(name, '/');
	*oom = apf_buf_append(&path, name, slash ? (size_t)(slash - name) : 0) ||
	       apf_buf_puts(&rest, target);
	size_t pos = 0;
	int follows = 0;
	while (!*oom && !why && pos < rest.len) {
		const char *c = rest.data + pos;
		size_t len = strcspn(c, "/");
		pos += len + (c[len] == '/');
		if (len == 0 || (len == 1 && c[0] == '.'))
			continue;
		if (len == 2 && c[0] == '.' && c[1] == '.') {
			if (path.len == 0) {
				why = "symlink leaves the tree";
				break;
			}
			char *up = memrchr(path.data, '/', path.len);
			path.len = up ? (size_t)(up - path.data) : 0;
			path.data[path.len] = 0;
			continue;
		}
		size_t mark = path.len;
		if ((mark && apf_buf_puts(&path, "/")) ||
		    apf_buf_append(&path, c, len)) {
			*oom = 1;
			break;
		}
		struct slot *s = rules_find(r, path.data, path.len);
		if (!s || s->type != 'l')
			continue;
		if (++follows > SYMLINK_FOLLOW_MAX) {
			why = "symlink loop (more than 40 links followed)";
			break;
		}
		/* Continue with the link's target in place of the component. */
		path.len = mark;
		path.data[mark] = 0;
		apf_buf next = {0};
		if (apf_buf_puts(&next, s->link) || apf_buf_puts(&next, "/") ||
		    apf_buf_append(&next, rest.data + pos, rest.len - pos)) {
			apf_buf_free(&next);
			*oom = 1;
			break;
		}
		apf_buf_free(&rest);
		rest = next;
		pos = 0;
	}
	apf_buf_free(&path);
	apf_buf_free(&rest);
	return why;
}

static int rules_check_links(const struct rules *r, const char *what)
{
	for (size_t i = 0; i < r->nlinks; i++) {
		const struct slot *s =
			rules_find(r, r->links[i], strlen(r->links[i]));
		int oom;
		const char *why = link_problem(r, s->name, s->link, &oom);
		if (oom)
			return apf_error(APF_ENOMEM, what, "out of memory");
		if (why) {
			char e[160], t[160], d[400];
			snprintf(d, sizeof d, "%s (-> \"%s\")", why,
				 esc(t, s->link));
			return apf_error(APF_EINPUT, what, "member \"%s\": %s",
					 esc(e, s->name), d);
		}
	}
	return 0;
}

/* ---- writing ------------------------------------------------------------- */

struct apf_archive_writer {
	char *path;
	apf_atomic *af;
	struct archive *a;
	ZSTD_CCtx *cctx;
	apf_sha256 *sha;
	uint8_t *zbuf;
	size_t zcap;
	int64_t mtime;
	struct rules rules;
	int err;     /* sticky: the first failure */
	char err_msg[STICKY_MSG]; /* its message */
	int discard; /* aborting: the write callback drops everything */
};

static int writer_emit(apf_archive_writer *w, const void *buf, size_t len)
{
	int rc = apf_atomic_write(w->af, buf, len);
	if (rc == 0)
		rc = apf_sha256_update(w->sha, buf, len);
	return rc;
}

/* Compresses src (mode ZSTD_e_continue or ZSTD_e_end) into the file. */
static int writer_compress(apf_archive_writer *w, const void *src, size_t len,
			   ZSTD_EndDirective mode)
{
	ZSTD_inBuffer in = {src, len, 0};
	for (;;) {
		ZSTD_outBuffer out = {w->zbuf, w->zcap, 0};
		size_t left = ZSTD_compressStream2(w->cctx, &out, &in, mode);
		if (ZSTD_isError(left))
			return apf_error(APF_EINTERNAL, w->path, "zstd: %s",
					 ZSTD_getErrorName(left));
		if (out.pos) {
			int rc = writer_emit(w, w->zbuf, out.pos);
			if (rc)
				return rc;
		}
		if (mode == ZSTD_e_end ? left == 0 : in.pos == in.size)
			return 0;
	}
}

static la_ssize_t writer_cb(struct archive *a, void *user, const void *buf,
			    size_t len)
{
	apf_archive_writer *w = user;
	if (w->discard)
		return (la_ssize_t)len;
	int rc = writer_compress(w, buf, len, ZSTD_e_continue);
	if (rc) {
		w->err = rc;
		archive_set_error(a, EIO, "%s", apf_error_message());
		return -1;
	}
	return (la_ssize_t)len;
}

/* A libarchive failure: our own callback's error when it had one. */
static int writer_fail(apf_archive_writer *w, const char *doing)
{
	if (!w->err)
		w->err = apf_error(APF_EIO, w->path, "%s: %s", doing,
				   archive_error_string(w->a)
					   ? archive_error_string(w->a)
					   : "libarchive failed");
	return w->err;
}

int apf_archive_writer_open(apf_archive_writer **out, const char *path,
			    int64_t mtime)
{
	*out = NULL;
	if (mtime < 0)
		return apf_error(APF_EINPUT, path, "negative member mtime %lld",
				 (long long)mtime);
	apf_archive_writer *w = apf_calloc(1, sizeof *w);
	if (!w || !(w->path = apf_strdup(path))) {
		free(w);
		return apf_error(APF_ENOMEM, path, "out of memory");
	}
	w->mtime = mtime;
	w->zcap = ZSTD_CStreamOutSize();
	int rc = apf_sha256_new(&w->sha);
	if (rc == 0 && (!(w->zbuf = malloc(w->zcap)) ||
			!(w->cctx = ZSTD_createCCtx()) ||
			!(w->a = archive_write_new())))
		rc = apf_error(APF_ENOMEM, path, "out of memory");
	/* Level, checksum and a single thread fix the compressed bytes for a
	 * given libzstd; nothing here depends on the machine. */
	if (rc == 0 &&
	    (ZSTD_isError(ZSTD_CCtx_setParameter(
		     w->cctx, ZSTD_c_compressionLevel, ZSTD_LEVEL)) ||
	     ZSTD_isError(ZSTD_CCtx_setParameter(w->cctx,
						 ZSTD_c_checksumFlag, 1)) ||
	     ZSTD_isError(ZSTD_CCtx_setParameter(w->cctx, ZSTD_c_nbWorkers,
						 0))))
		rc = apf_error(APF_EINTERNAL, path,
			       "zstd refused the compression parameters");
	if (rc == 0 &&
	    (archive_write_set_format_pax_restricted(w->a) != ARCHIVE_OK ||
	     archive_write_set_bytes_per_block(w->a, TAR_RECORD) !=
		     ARCHIVE_OK))
		rc = apf_error(APF_EINTERNAL, path, "libarchive: %s",
			       archive_error_string(w->a));
	if (rc == 0)
		rc = apf_atomic_open(&w->af, path, 0644, 0);
	if (rc == 0 && archive_write_open(w->a, w, NULL, writer_cb, NULL) !=
			       ARCHIVE_OK)
		rc = writer_fail(w, "open");
	if (rc) {
		apf_archive_writer_abort(w);
		return rc;
	}
	*out = w;
	return 0;
}

/* Checks a member and writes its header. */
static int writer_header(apf_archive_writer *w, const char *name, char type,
			 int mode, uint64_t size, const char *target)
{
	if (w->err)
		return w->err;
	int rc = rules_add(&w->rules, w->path, name, type, target);
	if (rc)
		return w->err = rc;
	/* Without C.UTF-8 libarchive would store a non-ASCII name under
	 * hdrcharset=BINARY: other bytes than elsewhere, so refuse instead. */
	if ((has_non_ascii(name) || (target && has_non_ascii(target))) &&
	    !have_utf8_locale())
		return w->err = refuse(w->path, name,
				       "non-ASCII names need the C.UTF-8 "
				       "locale, which this system lacks");
	struct archive_entry *e = archive_entry_new();
	if (!e)
		return w->err = apf_error(APF_ENOMEM, w->path, "out of memory");
	archive_entry_copy_pathname(e, name);
	archive_entry_set_filetype(e, type == 'f' ? AE_IFREG : AE_IFLNK);
	archive_entry_set_perm(e, (mode_t)mode);
	archive_entry_set_size(e, (la_int64_t)size);
	archive_entry_set_mtime(e, (time_t)w->mtime, 0);
	archive_entry_set_uid(e, 0);
	archive_entry_set_gid(e, 0);
	if (target)
		archive_entry_copy_symlink(e, target);
	locale_t old = locale_enter(1);
	int ar = archive_write_header(w->a, e);
	locale_leave(old);
	archive_entry_free(e);
	/* A warning would mean a name fell back to hdrcharset=BINARY. */
	if (ar == ARCHIVE_OK)
		return 0;
	return writer_fail(w, name);
}

static int writer_data(apf_archive_writer *w, const char *name,
		       const void *data, size_t len)
{
	const char *p = data;
	while (len > 0) {
		la_ssize_t n = archive_write_data(w->a, p, len);
		if (n <= 0)
			return writer_fail(w, name);
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

static int writer_end_member(apf_archive_writer *w, const char *name)
{
	if (archive_write_finish_entry(w->a) != ARCHIVE_OK)
		return writer_fail(w, name);
	return 0;
}

static int add_file(apf_archive_writer *w, const char *name, int mode,
		    const void *data, size_t size)
{
	if (mode != 0644 && mode != 0755)
		return w->err = refuse(w->path, name,
				       "file mode must be 0644 or 0755");
	if (size && !data)
		return w->err = apf_error(APF_EINTERNAL, w->path,
					  "no data for %zu bytes", size);
	int rc = writer_header(w, name, 'f', mode, size, NULL);
	if (rc == 0)
		rc = writer_data(w, name, data, size);
	if (rc == 0)
		rc = writer_end_member(w, name);
	return rc;
}

int apf_archive_add_file(apf_archive_writer *w, const char *name, int mode,
			 const void *data, size_t size)
{
	if (w->err)
		return sticky_again(w->err, w->err_msg);
	int rc = add_file(w, name, mode, data, size);
	sticky_note(rc, &w->err, w->err_msg);
	return rc;
}

static int add_file_fd(apf_archive_writer *w, const char *name, int mode,
		       int fd, uint64_t size)
{
	if (mode != 0644 && mode != 0755)
		return w->err = refuse(w->path, name,
				       "file mode must be 0644 or 0755");
	int rc = writer_header(w, name, 'f', mode, size, NULL);
	if (rc)
		return rc;
	char *buf = malloc(IO_BUF);
	if (!buf)
		return w->err = apf_error(APF_ENOMEM, w->path, "out of memory");
	uint64_t left = size;
	/* One byte past size tells a file that grew from one that did not. */
	while (rc == 0) {
		size_t want = left < IO_BUF ? (size_t)left + 1 : IO_BUF;
		ssize_t n = read(fd, buf, want);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			rc = apf_error_errno(APF_EIO, errno, w->path,
					     "member \"%s\": read", name);
		} else if ((uint64_t)n > left) {
			rc = refuse(w->path, name,
				    "file grew while it was packed");
		} else if (n == 0) {
			if (left)
				rc = refuse(w->path, name,
					    "file shrank while it was packed");
			break;
		} else {
			rc = writer_data(w, name, buf, (size_t)n);
			left -= (uint64_t)n;
		}
	}
	free(buf);
	if (rc)
		return w->err ? w->err : (w->err = rc);
	return writer_end_member(w, name);
}

int apf_archive_add_file_fd(apf_archive_writer *w, const char *name, int mode,
			    int fd, uint64_t size)
{
	if (w->err)
		return sticky_again(w->err, w->err_msg);
	int rc = add_file_fd(w, name, mode, fd, size);
	sticky_note(rc, &w->err, w->err_msg);
	return rc;
}

int apf_archive_add_symlink(apf_archive_writer *w, const char *name,
			    const char *target)
{
	if (w->err)
		return sticky_again(w->err, w->err_msg);
	int rc = writer_header(w, name, 'l', 0777, 0, target);
	if (rc == 0)
		rc = writer_end_member(w, name);
	sticky_note(rc, &w->err, w->err_msg);
	return rc;
}

static void writer_free(apf_archive_writer *w)
{
	if (w->a) {
		w->discard = 1;
		archive_write_free(w->a);
	}
	ZSTD_freeCCtx(w->cctx);
	apf_sha256_free(w->sha);
	rules_free(&w->rules);
	free(w->zbuf);
	free(w->path);
	free(w);
}

int apf_archive_writer_commit(apf_archive_writer *w)
{
	int rc = w->err ? sticky_again(w->err, w->err_msg) : 0;
	if (rc == 0)
		rc = rules_check_links(&w->rules, w->path);
	if (rc == 0 && archive_write_close(w->a) != ARCHIVE_OK)
		rc = writer_fail(w, "close");
	if (rc == 0)
		rc = writer_compress(w, NULL, 0, ZSTD_e_end);
	uint8_t trailer[TRAILER_LEN];
	trailer_head(trailer);
	if (rc == 0)
		rc = apf_sha256_final(w->sha, trailer + 12);
	if (rc == 0)
		rc = apf_atomic_write(w->af, trailer, sizeof trailer);
	if (rc == 0) {
		rc = apf_atomic_commit(w->af);
		w->af = NULL;
	}
	apf_atomic_abort(w->af);
	writer_free(w);
	return rc;
}

void apf_archive_writer_abort(apf_archive_writer *w)
{
	if (!w)
		return;
	apf_atomic_abort(w->af);
	writer_free(w);
}

/* ---- the integrity trailer and the frame's extent ------------------------- */

static int pread_full(int fd, void *buf, size_t len, uint64_t off,
		      const char *path)
{
	char *p = buf;
	while (len > 0) {
		ssize_t n = pread(fd, p, len, (off_t)off);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return apf_error_errno(APF_EIO, errno, path, "read");
		if (n == 0)
			return apf_error(APF_EVERIFY, path,
					 "changed while being read (shrank)");
		p += n;
		off += (uint64_t)n;
		len -= (size_t)n;
	}
	return 0;
}

enum frame_extent { FRAME_NONE, FRAME_CUT, FRAME_WHOLE };

/* Where the zstd frame at the start of the first len bytes of fd ends,
 * found from its header and block headers alone (RFC 8878 section 3.1.1),
 * so that nothing but those few bytes is read. It gives the same answer as
 * ZSTD_findFrameCompressedSize on the whole buffer: FRAME_NONE when the
 * bytes do not start with the frame magic (or are not a prefix of it),
 * FRAME_CUT when the frame is incomplete or invalid, else FRAME_WHOLE and
 * *end. */
static int frame_extent(int fd, uint64_t len, const char *path, int *kind,
			uint64_t *end)
{
	uint8_t h[18], magic[4];
	put_le32(magic, ZSTD_FRAME_MAGIC);
	size_t n = len < sizeof h ? (size_t)len : sizeof h;
	int rc = pread_full(fd, h, n, 0, path);
	if (rc)
		return rc;
	*kind = FRAME_NONE;
	if (memcmp(h, magic, n < 4 ? n : 4) != 0)
		return 0;
	*kind = FRAME_CUT;
	if (n < 5)
		return 0;
	unsigned fhd = h[4], fcs_flag = fhd >> 6, single = (fhd >> 5) & 1,
		 did_flag = fhd & 3, checksum = (fhd >> 2) & 1;
	if (fhd & 0x08) /* reserved bit */
		return 0;
	static const unsigned did_size[] = {0, 1, 2, 4};
	static const unsigned fcs_size[] = {0, 2, 4, 8};
	uint64_t pos = 5 + !single + did_size[did_flag] +
		       (fcs_flag == 0 ? single : fcs_size[fcs_flag]);
	if (pos > len)
		return 0;
	if (!single && 10 + (h[5] >> 3) > 31) /* window log beyond zstd's */
		return 0;
	for (;;) {
		uint8_t b[3];
		if (pos + 3 > len)
			return 0;
		if ((rc = pread_full(fd, b, 3, pos, path)))
			return rc;
		uint32_t bh = b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16;
		unsigned last = bh & 1, type = (bh >> 1) & 3;
		if (type == 3) /* reserved block type */
			return 0;
		pos += 3 + (type == 1 ? 1 : bh >> 3);
		if (pos > len)
			return 0;
		if (last)
			break;
	}
	pos += checksum ? 4 : 0;
	if (pos > len)
		return 0;
	*kind = FRAME_WHOLE;
	*end = pos;
	return 0;
}

/* No well-formed trailer at the end: say what the file is instead. */
static int classify_damage(int fd, uint64_t size, const char *path)
{
	int kind;
	uint64_t end = 0;
	int rc = frame_extent(fd, size, path, &kind, &end);
	if (rc)
		return rc;
	if (kind == FRAME_NONE)
		return apf_error(APF_EINPUT, path,
				 "not an apf entry (no zstd frame at its start)");
	if (kind == FRAME_CUT)
		return apf_error(APF_EINPUT, path,
				 "truncated (the zstd frame is cut short)");
	uint64_t rest = size - end;
	if (rest == 0)
		return apf_error(APF_EINPUT, path,
				 "truncated (the integrity trailer is missing)");
	uint8_t t[TRAILER_LEN], head[12];
	trailer_head(head);
	size_t got = rest < TRAILER_LEN ? (size_t)rest : TRAILER_LEN;
	if ((rc = pread_full(fd, t, got, end, path)))
		return rc;
	int head_ok = !memcmp(t, head, got < 12 ? got : 12);
	if (rest < TRAILER_LEN && head_ok)
		return apf_error(APF_EINPUT, path,
				 "truncated (the integrity trailer is cut short)");
	if (rest > TRAILER_LEN && head_ok)
		return apf_error(APF_EVERIFY, path,
				 "changed after packing (data appended after "
				 "the integrity trailer)");
	return apf_error(APF_EVERIFY, path, "integrity trailer damaged");
}

/* The first pass: the trailer must hold the SHA-256 of everything before
 * it, and the one zstd frame must end exactly where the trailer begins. */
static int check_integrity(int fd, uint64_t size, const char *path,
			   uint8_t digest[APF_SHA256_LEN])
{
	if (size == 0)
		return apf_error(APF_EINPUT, path,
				 "not an apf entry (empty file)");
	uint8_t t[TRAILER_LEN], head[12];
	trailer_head(head);
	int rc = 0;
	if (size >= TRAILER_LEN)
		rc = pread_full(fd, t, TRAILER_LEN, size - TRAILER_LEN, path);
	if (rc)
		return rc;
	if (size < TRAILER_LEN || memcmp(t, head, 12) != 0)
		return classify_damage(fd, size, path);
	uint64_t body = size - TRAILER_LEN;
	apf_sha256 *h;
	char *buf = malloc(IO_BUF);
	if (!buf)
		return apf_error(APF_ENOMEM, path, "out of memory");
	if ((rc = apf_sha256_new(&h))) {
		free(buf);
		return rc;
	}
	for (uint64_t off = 0; rc == 0 && off < body;) {
		size_t n = body - off < IO_BUF ? (size_t)(body - off) : IO_BUF;
		rc = pread_full(fd, buf, n, off, path);
		if (rc == 0)
			rc = apf_sha256_update(h, buf, n);
		off += n;
	}
	if (rc == 0)
		rc = apf_sha256_final(h, digest);
	apf_sha256_free(h);
	free(buf);
	if (rc)
		return rc;
	if (memcmp(digest, t + 12, APF_SHA256_LEN) != 0)
		return apf_error(APF_EVERIFY, path,
				 "changed after packing (integrity trailer "
				 "mismatch)");
	int kind;
	uint64_t end = 0;
	if ((rc = frame_extent(fd, body, path, &kind, &end)))
		return rc;
	if (kind != FRAME_WHOLE || end != body)
		return apf_error(APF_EVERIFY, path,
				 "corrupted archive: the bytes before the "
				 "integrity trailer are not one zstd frame");
	return 0;
}

/* ---- reading ------------------------------------------------------------- */

struct apf_archive_reader {
	char *path;
	int fd;
	uint64_t body;        /* bytes before the trailer: the zstd frame */
	uint8_t digest[APF_SHA256_LEN];
	apf_sha256 *rehash;
	uint64_t consumed;    /* compressed bytes read by the second pass */
	ZSTD_DCtx *dctx;
	uint8_t *inbuf, *outbuf;
	size_t incap, outcap;
	ZSTD_inBuffer in;
	int frame_done;
	uint64_t out_total;   /* tar bytes decompressed so far */
	uint64_t zero_from;   /* tar offset after the last nonzero byte */
	struct archive *a;
	struct apf_archive_limits lim;
	struct rules rules;
	uint64_t declared;    /* sum of the file members' sizes */
	int has_member, cur_type;
	int err;              /* sticky: the first failure */
	char err_msg[STICKY_MSG]; /* its message */
	int cb_err;           /* failure inside the read callback */
	int done;
};

/* Decompresses the next piece of the frame into outbuf; *n = 0 once the
 * frame is complete, its checksum checked and the re-hash compared. */
static int inflate_some(apf_archive_reader *r, size_t *n)
{
	*n = 0;
	while (!r->frame_done) {
		if (r->in.pos == r->in.size) {
			if (r->consumed == r->body)
				return apf_error(APF_EVERIFY, r->path,
						 "corrupted archive: the zstd "
						 "frame ends early");
			size_t want = r->body - r->consumed < r->incap
					      ? (size_t)(r->body - r->consumed)
					      : r->incap;
			int rc = pread_full(r->fd, r->inbuf, want, r->consumed,
					    r->path);
			if (rc == 0)
				rc = apf_sha256_update(r->rehash, r->inbuf,
						       want);
			if (rc)
				return rc;
			r->consumed += want;
			r->in = (ZSTD_inBuffer){r->inbuf, want, 0};
		}
		ZSTD_outBuffer out = {r->outbuf, r->outcap, 0};
		size_t ret = ZSTD_decompressStream(r->dctx, &out, &r->in);
		if (ZSTD_isError(ret))
			return apf_error(APF_EVERIFY, r->path,
					 "corrupted archive: zstd: %s",
					 ZSTD_getErrorName(ret));
		if (ret == 0) {
			r->frame_done = 1;
			uint8_t d[APF_SHA256_LEN];
			int rc = apf_sha256_final(r->rehash, d);
			if (rc)
				return rc;
			if (r->in.pos != r->in.size || r->consumed != r->body)
				return apf_error(APF_EVERIFY, r->path,
						 "corrupted archive: data "
						 "between the zstd frame and "
						 "the trailer");
			if (memcmp(d, r->digest, sizeof d) != 0)
				return apf_error(APF_EVERIFY, r->path,
						 "changed while being read");
		}
		if (out.pos == 0)
			continue;
		for (size_t i = out.pos; i > 0; i--)
			if (r->outbuf[i - 1]) {
				r->zero_from = r->out_total + i;
				break;
			}
		r->out_total += out.pos;
		uint64_t allowed = r->declared +
				   (r->rules.count + 2) * (uint64_t)MEMBER_OVERHEAD +
				   2 * (uint64_t)r->outcap;
		if (r->out_total > allowed)
			return apf_error(APF_EVERIFY, r->path,
					 "corrupted archive: the tar stream is "
					 "larger than its members account for");
		*n = out.pos;
		return 0;
	}
	return 0;
}

static la_ssize_t reader_cb(struct archive *a, void *user, const void **buf)
{
	apf_archive_reader *r = user;
	size_t n;
	int rc = inflate_some(r, &n);
	if (rc) {
		r->cb_err = rc;
		archive_set_error(a, EIO, "%s", apf_error_message());
		return -1;
	}
	*buf = r->outbuf;
	return (la_ssize_t)n;
}

/* A libarchive failure: our callback's error when it had one, else the tar
 * stream itself is malformed. */
static int reader_fail(apf_archive_reader *r)
{
	if (r->err)
		return r->err;
	if (r->cb_err)
		return r->err = r->cb_err;
	const char *why = archive_error_string(r->a);
	return r->err = apf_error(APF_EVERIFY, r->path,
				  "corrupted archive: %s at tar offset %lld",
				  why ? why : "unreadable tar stream",
				  (long long)archive_filter_bytes(r->a, 0));
}

int apf_archive_reader_open(apf_archive_reader **out, const char *path,
			    const struct apf_archive_limits *limits)
{
	*out = NULL;
	apf_archive_reader *r = apf_calloc(1, sizeof *r);
	if (!r || !(r->path = apf_strdup(path))) {
		free(r);
		return apf_error(APF_ENOMEM, path, "out of memory");
	}
	r->fd = -1;
	if (limits)
		r->lim = *limits;
	if (!r->lim.max_member_bytes)
		r->lim.max_member_bytes = (uint64_t)1 << 30;
	if (!r->lim.max_total_bytes)
		r->lim.max_total_bytes = (uint64_t)4 << 30;
	if (!r->lim.max_members)
		r->lim.max_members = 100000;
	if (!r->lim.max_archive_bytes)
		r->lim.max_archive_bytes = APF_MAX_ENTRY_BYTES;
	int rc = 0;
	struct stat st;
	/* A FIFO or a device named as the entry must neither block nor
	 * stream forever: regular files only, opened without blocking, of at
	 * most max_archive_bytes. */
	rc = apf_file_open_regular(&r->fd, &st, path, APF_FILE_FOLLOW);
	if (rc == 0 && (uint64_t)st.st_size > r->lim.max_archive_bytes)
		rc = apf_error(APF_EINPUT, path,
			       "%llu bytes, larger than the %llu-byte limit "
			       "of an entry",
			       (unsigned long long)st.st_size,
			       (unsigned long long)r->lim.max_archive_bytes);
	if (rc == 0)
		rc = check_integrity(r->fd, (uint64_t)st.st_size, path,
				     r->digest);
	if (rc == 0) {
		r->body = (uint64_t)st.st_size - TRAILER_LEN;
		r->incap = ZSTD_DStreamInSize();
		r->outcap = ZSTD_DStreamOutSize();
		rc = apf_sha256_new(&r->rehash);
	}
	if (rc == 0 && (!(r->inbuf = malloc(r->incap)) ||
			!(r->outbuf = malloc(r->outcap)) ||
			!(r->dctx = ZSTD_createDCtx()) ||
			!(r->a = archive_read_new())))
		rc = apf_error(APF_ENOMEM, path, "out of memory");
	if (rc == 0 && archive_read_support_format_tar(r->a) != ARCHIVE_OK)
		rc = apf_error(APF_EINTERNAL, path, "libarchive: %s",
			       archive_error_string(r->a));
	if (rc == 0) {
		locale_t old = locale_enter(0);
		int ar = archive_read_open(r->a, r, NULL, reader_cb, NULL);
		locale_leave(old);
		if (ar != ARCHIVE_OK)
			rc = reader_fail(r);
	}
	if (rc) {
		apf_archive_reader_close(r);
		return rc;
	}
	*out = r;
	return 0;
}

static const char *type_name(mode_t ft)
{
	switch (ft) {
	case AE_IFDIR:
		return "directory refused";
	case AE_IFCHR:
		return "character device refused";
	case AE_IFBLK:
		return "block device refused";
	case AE_IFIFO:
		return "fifo refused";
	case AE_IFSOCK:
		return "socket refused";
	default:
		return "member of unknown type refused";
	}
}

/* Checks the header just read; nothing of the member's data is read. */
static int reader_take(apf_archive_reader *r, struct archive_entry *e,
		       struct apf_archive_member *m)
{
	const char *name = archive_entry_pathname(e);
	if (!name)
		return r->err = apf_error(APF_EINPUT, r->path,
					  "member without a name");
	if (r->rules.count >= r->lim.max_members)
		return r->err = apf_error(APF_EINPUT, r->path,
					  "more than %zu members",
					  r->lim.max_members);
	if (archive_entry_hardlink(e))
		return r->err = refuse(r->path, name, "hard link refused");
	mode_t ft = archive_entry_filetype(e);
	if (ft != AE_IFREG && ft != AE_IFLNK)
		return r->err = refuse(r->path, name, type_name(ft));
	if (archive_entry_sparse_count(e) > 0)
		return r->err = refuse(r->path, name, "sparse file refused");
	int mode = (int)(archive_entry_perm(e) & 07777);
	char why[160];
	const char *link = NULL;
	uint64_t size;
	if (ft == AE_IFREG) {
		if (mode != 0644 && mode != 0755) {
			snprintf(why, sizeof why,
				 "file mode %04o refused (0644 or 0755 only)",
				 mode);
			return r->err = refuse(r->path, name, why);
		}
		la_int64_t s = archive_entry_size(e);
		if (!archive_entry_size_is_set(e) || s < 0)
			return r->err = refuse(r->path, name,
					       "no valid size in its header");
		size = (uint64_t)s;
		if (size > r->lim.max_member_bytes) {
			snprintf(why, sizeof why,
				 "declared size %llu exceeds the %llu-byte "
				 "member cap",
				 (unsigned long long)size,
				 (unsigned long long)r->lim.max_member_bytes);
			return r->err = refuse(r->path, name, why);
		}
		if (size > r->lim.max_total_bytes - r->declared) {
			snprintf(why, sizeof why,
				 "the members exceed the %llu-byte total cap",
				 (unsigned long long)r->lim.max_total_bytes);
			return r->err = refuse(r->path, name, why);
		}
	} else {
		if (mode != 0777) {
			snprintf(why, sizeof why,
				 "symlink mode %04o refused (0777 only)", mode);
			return r->err = refuse(r->path, name, why);
		}
		link = archive_entry_symlink(e);
		if (!link)
			return r->err = refuse(r->path, name,
					       "symlink without a target");
		size = strlen(link);
	}
	int rc = rules_add(&r->rules, r->path, name, ft == AE_IFREG ? 'f' : 'l',
			   link);
	if (rc)
		return r->err = rc;
	if (ft == AE_IFREG)
		r->declared += size;
	*m = (struct apf_archive_member){
		.name = name,
		.type = ft == AE_IFREG ? APF_MEMBER_FILE : APF_MEMBER_SYMLINK,
		.mode = mode,
		.size = size,
		.link = link,
	};
	r->has_member = 1;
	r->cur_type = m->type;
	return 1;
}

/* libarchive reported the end: the end-of-archive marker must be there and
 * be followed by nothing but zeros to the end of the frame; then the frame's
 * checksum and the re-hash are checked, and the symlinks resolved. */
static int reader_finish(apf_archive_reader *r, int64_t data_end)
{
	int64_t end = archive_filter_bytes(r->a, 0);
	if (end - data_end != 1024)
		return r->err = apf_error(APF_EVERIFY, r->path,
					  "corrupted archive: no tar "
					  "end-of-archive marker at offset %lld",
					  (long long)data_end);
	size_t n;
	do {
		int rc = inflate_some(r, &n);
		if (rc)
			return r->err = rc;
	} while (n > 0);
	if (r->zero_from > (uint64_t)end)
		return r->err = apf_error(APF_EVERIFY, r->path,
					  "corrupted archive: data after the "
					  "tar end-of-archive marker");
	int rc = rules_check_links(&r->rules, r->path);
	if (rc)
		return r->err = rc;
	r->done = 1;
	return 0;
}

static int reader_next(apf_archive_reader *r, struct apf_archive_member *m)
{
	if (r->done)
		return 0;
	if (r->has_member) {
		r->has_member = 0;
		if (archive_read_data_skip(r->a) != ARCHIVE_OK)
			return reader_fail(r);
	}
	int64_t data_end = archive_filter_bytes(r->a, 0);
	struct archive_entry *e;
	locale_t old = locale_enter(0);
	int ar = archive_read_next_header(r->a, &e);
	locale_leave(old);
	if (ar == ARCHIVE_EOF)
		return r->cb_err ? reader_fail(r) : reader_finish(r, data_end);
	/* A name libarchive could not convert from UTF-8 to the C locale is
	 * kept as its raw bytes, which the member rules then judge; every
	 * other warning means the tar stream is malformed. libarchive reports
	 * a failed conversion with its private ARCHIVE_ERRNO_FILE_FORMAT,
	 * which is EILSEQ on Linux; its other tar warnings use other codes. */
	if (ar == ARCHIVE_OK ||
	    (ar == ARCHIVE_WARN && !r->cb_err &&
	     archive_errno(r->a) == EILSEQ))
		return reader_take(r, e, m);
	return reader_fail(r);
}

int apf_archive_next(apf_archive_reader *r, struct apf_archive_member *m)
{
	memset(m, 0, sizeof *m);
	if (r->err)
		return sticky_again(r->err, r->err_msg);
	int rc = reader_next(r, m);
	sticky_note(rc, &r->err, r->err_msg);
	return rc;
}

long apf_archive_read(apf_archive_reader *r, void *buf, size_t len)
{
	if (r->err)
		return sticky_again(r->err, r->err_msg);
	if (!r->has_member || r->cur_type != APF_MEMBER_FILE || len == 0)
		return 0;
	la_ssize_t n = archive_read_data(r->a, buf, len);
	if (n >= 0)
		return (long)n;
	int rc = reader_fail(r);
	sticky_note(rc, &r->err, r->err_msg);
	return rc;
}

void apf_archive_reader_close(apf_archive_reader *r)
{
	if (!r)
		return;
	if (r->a)
		archive_read_free(r->a);
	if (r->fd >= 0)
		close(r->fd);
	ZSTD_freeDCtx(r->dctx);
	apf_sha256_free(r->rehash);
	rules_free(&r->rules);
	free(r->inbuf);
	free(r->outbuf);
	free(r->path);
	free(r);
}
