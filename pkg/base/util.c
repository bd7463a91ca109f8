/*
 * util.c: small helpers every package uses: a growable buffer, hex, UTF-8
 * path checks, the escaping of untrusted text for terminals and for
 * writers that need valid UTF-8, $APF_HOME, the monotonic clock and the
 * usable CPU count.
 */
#include "base/base.h"

#include <pwd.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

int apf_buf_append(apf_buf *b, const void *data, size_t len)
{
	if (b->len + len + 1 > b->cap) {
		size_t cap = b->cap ? b->cap : 256;
		while (cap < b->len + len + 1)
			cap *= 2;
		char *p = realloc(b->data, cap);
		if (!p)
			return apf_error(APF_ENOMEM, "buffer", "out of memory");
		b->data = p;
		b->cap = cap;
	}
	if (len)
		memcpy(b->data + b->len, data, len);
	b->len += len;
	b->data[b->len] = 0;
	return 0;
}

int apf_buf_puts(apf_buf *b, const char *s)
{
	return apf_buf_append(b, s, strlen(s));
}

int apf_buf_printf(apf_buf *b, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(NULL, 0, fmt, ap);
	va_end(ap);
	if (n < 0)
		return apf_error(APF_EINTERNAL, "buffer",
				 "cannot format '%.40s'", fmt);
	int rc = apf_buf_append(b, NULL, 0);
	if (rc)
		return rc;
	size_t need = b->len + (size_t)n + 1;
	if (need > b->cap) {
		size_t cap = b->cap;
		while (cap < need)
			cap *= 2;
		char *p = realloc(b->data, cap);
		if (!p)
			return apf_error(APF_ENOMEM, "buffer", "out of memory");
		b->data = p;
		b->cap = cap;
	}
	va_start(ap, fmt);
	vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
	va_end(ap);
	b->len += (size_t)n;
	return 0;
}

void apf_buf_free(apf_buf *b)
{
	free(b->data);
	b->data = NULL;
	b->len = b->cap = 0;
}

/* Four bytes as eight lowercase hex digits in a little-endian word: each
 * nibble spread to a byte (the high nibble first), then '0' added, and 39
 * more where the nibble is over 9 ('a' - '0' - 10). */
static inline uint64_t hex4(uint32_t w)
{
	uint64_t x = w;
	x = (x | x << 16) & 0x0000ffff0000ffffull;
	x = (x | x << 8) & 0x00ff00ff00ff00ffull;
	x = (x >> 4 & 0x000f000f000f000full) | (x & 0x000f000f000f000full) << 8;
	uint64_t over9 = ((x + 0x0606060606060606ull) >> 4) & 0x0101010101010101ull;
	return x + 0x3030303030303030ull + over9 * 39;
}

void apf_hex(char *out, const uint8_t *in, size_t n)
{
	static const char digits[] = "0123456789abcdef";
	size_t i = 0;
	/* A digest at a time of a log's million lines: four bytes a word. */
	for (; i + 4 <= n; i += 4) {
		uint32_t w;
		memcpy(&w, in + i, 4);
		uint64_t h = hex4(w);
		memcpy(out + 2 * i, &h, 8);
	}
	for (; i < n; i++) {
		out[2 * i] = digits[in[i] >> 4];
		out[2 * i + 1] = digits[in[i] & 15];
	}
	out[2 * n] = 0;
}

static int hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	return -1;
}

int apf_unhex(uint8_t *out, const char *in, size_t n)
{
	if (strlen(in) != 2 * n)
		return apf_error(APF_EINPUT, "hex", "%zu digits, expected %zu",
				 strlen(in), 2 * n);
	for (size_t i = 0; i < n; i++) {
		int hi = hexval(in[2 * i]), lo = hexval(in[2 * i + 1]);
		if (hi < 0 || lo < 0)
			return apf_error(APF_EINPUT, "hex",
					 "not lowercase hex digits at %zu",
					 2 * i);
		out[i] = (uint8_t)(hi << 4 | lo);
	}
	return 0;
}

int apf_is_hex_digest(const char *s)
{
	if (!s || strlen(s) != 64)
		return 0;
	for (int i = 0; i < 64; i++)
		if (hexval(s[i]) < 0)
			return 0;
	return 1;
}

/* The length of the valid UTF-8 sequence at p and its code point, or 0:
 * truncated, overlong, a surrogate or past U+10FFFF. */
static int utf8_char(const unsigned char *p, unsigned *cp)
{
	unsigned c = *p;
	int extra;
	unsigned min;
	if (c < 0x80) {
		*cp = c;
		return 1;
	} else if ((c & 0xe0) == 0xc0) {
		extra = 1, min = 0x80, c &= 0x1f;
	} else if ((c & 0xf0) == 0xe0) {
		extra = 2, min = 0x800, c &= 0x0f;
	} else if ((c & 0xf8) == 0xf0) {
		extra = 3, min = 0x10000, c &= 0x07;
	} else {
		return 0;
	}
	for (int i = 1; i <= extra; i++) {
		if ((p[i] & 0xc0) != 0x80)
			return 0;
		c = c << 6 | (p[i] & 0x3f);
	}
	if (c < min || c > 0x10ffff || (c >= 0xd800 && c <= 0xdfff))
		return 0;
	*cp = c;
	return extra + 1;
}

int apf_utf8_path_ok(const char *s)
{
	const unsigned char *p = (const unsigned char *)s;
	while (*p) {
		unsigned c;
		int n = utf8_char(p, &c);
		if (!n || c < 0x20 || c == 0x7f)
			return 0;
		p += n;
	}
	return 1;
}

/* Code points a terminal acts on instead of showing: C0 and C1 controls,
 * DEL, the line and paragraph separators, and the bidirectional overrides
 * and isolates that reorder what follows them on the line. */
static int terminal_control(unsigned c)
{
	return c < 0x20 || (c >= 0x7f && c <= 0x9f) || c == 0x2028 ||
	       c == 0x2029 || (c >= 0x202a && c <= 0x202e) ||
	       (c >= 0x2066 && c <= 0x2069);
}

/* How the escapers treat the text at p: *n bytes, to keep as they are
 * (returns 1) or to write as \xNN each (returns 0). Invalid UTF-8 is
 * escaped a byte at a time; with controls, so is every byte of a
 * terminal_control character. */
static int text_unit(const unsigned char *p, int controls, int *n)
{
	unsigned c;
	*n = utf8_char(p, &c);
	if (*n && !(controls && terminal_control(c)))
		return 1;
	if (!*n)
		*n = 1;
	return 0;
}

static void hex_escape(char *out, unsigned char byte)
{
	static const char digits[] = "0123456789abcdef";
	out[0] = '\\';
	out[1] = 'x';
	out[2] = digits[byte >> 4];
	out[3] = digits[byte & 15];
}

size_t apf_text_escape_lines(apf_buf *out, const char *in, size_t len,
			     int final)
{
	const unsigned char *p = (const unsigned char *)in, *end = p + len;
	while (p < end) {
		/* A sequence the next block may complete: left for it. */
		int want = *p >= 0xf0 ? 4 : *p >= 0xe0 ? 3 : *p >= 0xc0 ? 2 : 1;
		if (!final && end - p < want) {
			int prefix = 1;
			for (const unsigned char *q = p + 1; q < end; q++)
				prefix &= (*q & 0xc0) == 0x80;
			if (prefix && *p >= 0xc0 && *p < 0xf8)
				break;
		}
		unsigned char seq[5] = {0};
		size_t have = (size_t)(end - p) < 4 ? (size_t)(end - p) : 4;
		memcpy(seq, p, have);
		unsigned c;
		int n = utf8_char(seq, &c);
		if (n && (!terminal_control(c) || c == '\n' || c == '\t')) {
			if (apf_buf_append(out, p, (size_t)n))
				return (size_t)((const char *)p - in);
			p += n;
			continue;
		}
		char e[4];
		hex_escape(e, *p);
		if (apf_buf_append(out, e, 4))
			return (size_t)((const char *)p - in);
		p++;
	}
	return (size_t)((const char *)p - in);
}

void apf_text_escape(char *out, size_t size, const char *in)
{
	if (!size)
		return;
	const unsigned char *p = (const unsigned char *)(in ? in : "");
	size_t len = 0;
	while (*p) {
		int n;
		if (text_unit(p, 1, &n)) {
			/* Whole characters only: a cut never leaves half of
			 * one. */
			if (len + (size_t)n >= size)
				break;
			memcpy(out + len, p, (size_t)n);
			len += (size_t)n;
			p += n;
			continue;
		}
		/* Each byte of an invalid sequence or a control, as \xNN. */
		if (len + 4 * (size_t)n >= size)
			break;
		for (int i = 0; i < n; i++, p++, len += 4)
			hex_escape(out + len, *p);
	}
	out[len] = 0;
}

int apf_text_printable(const char *s)
{
	const unsigned char *p = (const unsigned char *)(s ? s : "");
	int n;
	while (*p && text_unit(p, 1, &n))
		p += n;
	return !*p;
}

/* apf_buf_escape and apf_buf_utf8: the whole text, appended. */
static int buf_escape(apf_buf *b, const char *in, int controls)
{
	const unsigned char *p = (const unsigned char *)(in ? in : "");
	int rc = apf_buf_append(b, NULL, 0);
	while (!rc && *p) {
		/* The longest run kept as it is, in one append. */
		const unsigned char *run = p;
		int n;
		while (*p && text_unit(p, controls, &n))
			p += n;
		if (p > run)
			rc = apf_buf_append(b, run, (size_t)(p - run));
		if (rc || !*p)
			break;
		text_unit(p, controls, &n);
		char esc[16];
		for (int i = 0; i < n; i++, p++)
			hex_escape(esc + 4 * i, *p);
		rc = apf_buf_append(b, esc, 4 * (size_t)n);
	}
	return rc;
}

int apf_buf_escape(apf_buf *b, const char *in)
{
	return buf_escape(b, in, 1);
}

int apf_buf_utf8(apf_buf *b, const char *in)
{
	return buf_escape(b, in, 0);
}

char *apf_strdup(const char *s)
{
	return s ? strdup(s) : NULL;
}

void *apf_calloc(size_t n, size_t size)
{
	return calloc(n ? n : 1, size ? size : 1);
}

#define BIG_PAGE ((size_t)2 << 20)

void *apf_alloc_big(size_t n)
{
	void *p = NULL;
	if (n < BIG_PAGE)
		return posix_memalign(&p, 64, n ? n : 64) ? NULL : p;
	if (posix_memalign(&p, BIG_PAGE, n))
		return NULL;
	/* advice only: without it the pages are 4 KiB ones */
	(void)madvise(p, n / BIG_PAGE * BIG_PAGE, MADV_HUGEPAGE);
	return p;
}

char *apf_path_join(const char *a, const char *b)
{
	apf_buf p = {0};
	size_t la = strlen(a);
	if (apf_buf_printf(&p, "%s%s%s", a, la && a[la - 1] == '/' ? "" : "/",
			   b) != 0) {
		apf_buf_free(&p);
		return NULL;
	}
	return p.data;
}

char *apf_home(void)
{
	const char *h = getenv("APF_HOME");
	if (h && *h)
		return apf_strdup(h);
	const char *home = getenv("HOME");
	if (!home || !*home) {
		struct passwd *pw = getpwuid(getuid());
		home = pw ? pw->pw_dir : "/";
	}
	return apf_path_join(home, ".config/apf");
}

uint64_t apf_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

int apf_cpu_count(void)
{
	cpu_set_t set;
	if (sched_getaffinity(0, sizeof set, &set) == 0) {
		int n = CPU_COUNT(&set);
		if (n > 0)
			return n;
	}
	long n = sysconf(_SC_NPROCESSORS_ONLN);
	return n > 0 ? (int)n : 1;
}

/* Optimal string alignment distance of a and b (each under 64 bytes). */
static size_t edit_distance(const char *a, size_t la, const char *b,
			    size_t lb)
{
	size_t d[64][64];
	for (size_t i = 0; i <= la; i++)
		d[i][0] = i;
	for (size_t j = 0; j <= lb; j++)
		d[0][j] = j;
	for (size_t i = 1; i <= la; i++)
		for (size_t j = 1; j <= lb; j++) {
			size_t best = d[i - 1][j - 1] + (a[i - 1] != b[j - 1]);
			if (d[i - 1][j] + 1 < best)
				best = d[i - 1][j] + 1;
			if (d[i][j - 1] + 1 < best)
				best = d[i][j - 1] + 1;
			if (i > 1 && j > 1 && a[i - 1] == b[j - 2] &&
			    a[i - 2] == b[j - 1] && d[i - 2][j - 2] + 1 < best)
				best = d[i - 2][j - 2] + 1;
			d[i][j] = best;
		}
	return d[la][lb];
}

const char *apf_nearest_name(const char *name, const char *const *names,
			     size_t n)
{
	size_t la = name ? strlen(name) : 64;
	if (la >= 64)
		return NULL;
	size_t limit = la / 3 > 1 ? la / 3 : 1, best = limit + 1;
	const char *found = NULL;
	int tied = 0;
	for (size_t i = 0; i < n; i++) {
		size_t lb = names[i] ? strlen(names[i]) : 64;
		if (lb >= 64)
			continue;
		size_t dist = edit_distance(name, la, names[i], lb);
		if (dist < best) {
			best = dist;
			found = names[i];
			tied = 0;
		} else if (dist == best && found) {
			tied = 1;
		}
	}
	return found && !tied && best > 0 ? found : NULL;
}
