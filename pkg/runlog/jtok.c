/*
 * jtok.c: the strict JSON reader behind the log reader.
 *
 * A verifier reads every line of a log that may hold millions of them, so
 * this reader allocates nothing and builds no tree: it checks one JSON text
 * against RFC 8259 and leaves a flat array of tokens that point into the
 * text. It is as strict as jansson with JSON_REJECT_DUPLICATES (which the
 * reader used before): UTF-8 only (no overlong forms, no surrogates, nothing
 * past U+10FFFF), no control characters in strings, no NUL escapes, paired
 * \u surrogates, the exact number grammar, no duplicate keys in any object
 * (compared after unescaping), nesting at most APF_JTOK_MAX_DEPTH deep.
 *
 * Layout: a container's token is followed by its children in order (an
 * object's as key, value, key, value ...); every token's `next` is the
 * index just past its subtree, so a reader skips a value in one step.
 */
#include "runlog/runlog.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

struct parser {
	const char *s;
	size_t len, pos;
	struct apf_jtok *tok;
	size_t cap, n;
	const char *why;
};

static int fail(struct parser *p, const char *why)
{
	if (!p->why)
		p->why = why;
	return -1;
}

static inline void skip_ws(struct parser *p)
{
	while (p->pos < p->len && (unsigned char)p->s[p->pos] <= ' ') {
		char c = p->s[p->pos];
		if (c != ' ' && c != '\t' && c != '\n' && c != '\r')
			break;
		p->pos++;
	}
}

static long new_tok(struct parser *p, int type, size_t start)
{
	if (p->n >= p->cap)
		return fail(p, "too many values");
	struct apf_jtok *t = &p->tok[p->n];
	t->start = (uint32_t)start;
	t->len = 0;
	t->next = 0;
	t->value = 0;
	t->type = (uint8_t)type;
	t->escaped = 0;
	t->plain = 0;
	return (long)p->n++;
}

/* ---- strings ------------------------------------------------------------ */

static int hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

static long hex4(const char *s)
{
	long v = 0;
	for (int i = 0; i < 4; i++) {
		int h = hexval(s[i]);
		if (h < 0)
			return -1;
		v = v << 4 | h;
	}
	return v;
}

/* Length of the valid UTF-8 sequence at s (lead byte >= 0x80), else 0. */
static size_t utf8_len(const unsigned char *s, size_t avail)
{
	unsigned c = s[0];
	size_t n;
	unsigned lo = 0x80, hi = 0xbf;
	if (c >= 0xc2 && c <= 0xdf)
		n = 2;
	else if (c >= 0xe0 && c <= 0xef) {
		n = 3;
		if (c == 0xe0)
			lo = 0xa0; /* overlong */
		if (c == 0xed)
			hi = 0x9f; /* surrogates */
	} else if (c >= 0xf0 && c <= 0xf4) {
		n = 4;
		if (c == 0xf0)
			lo = 0x90; /* overlong */
		if (c == 0xf4)
			hi = 0x8f; /* past U+10FFFF */
	} else
		return 0;
	if (avail < n || s[1] < lo || s[1] > hi)
		return 0;
	for (size_t i = 2; i < n; i++)
		if (s[i] < 0x80 || s[i] > 0xbf)
			return 0;
	return n;
}

/* Eight bytes at a time: does the word hold a byte that ends the fast scan
 * (a quote, a backslash, a control character or a non-ASCII byte)? */
static int word_special(uint64_t x)
{
	const uint64_t ones = 0x0101010101010101ull, high = 0x8080808080808080ull;
	uint64_t q = x ^ (ones * '"'), b = x ^ (ones * '\\');
	uint64_t zero_q = (q - ones) & ~q & high;
	uint64_t zero_b = (b - ones) & ~b & high;
	uint64_t ctl = (x - ones * 0x20) & ~x & high;
	return (zero_q | zero_b | ctl | (x & high)) != 0;
}

/* The first byte at or after i that ends the fast scan, or a position
 * close to end where the byte loop takes over. */
static inline size_t skip_plain(const char *s, size_t i, size_t end)
{
#ifdef __SSE2__
	/* 16 bytes at a time: a quote, a backslash, or (as signed bytes) a
	 * control character or any non-ASCII byte. */
	const __m128i quote = _mm_set1_epi8('"'), bslash = _mm_set1_epi8('\\'),
		      space = _mm_set1_epi8(0x20);
	while (i + 16 <= end) {
		__m128i x = _mm_loadu_si128((const __m128i *)(s + i));
		__m128i m = _mm_or_si128(
			_mm_or_si128(_mm_cmpeq_epi8(x, quote),
				     _mm_cmpeq_epi8(x, bslash)),
			_mm_cmplt_epi8(x, space));
		unsigned bits = (unsigned)_mm_movemask_epi8(m);
		if (bits)
			return i + (size_t)__builtin_ctz(bits);
		i += 16;
	}
#endif
	while (i + 8 <= end) {
		uint64_t w;
		memcpy(&w, s + i, 8);
		if (word_special(w))
			break;
		i += 8;
	}
	return i;
}

static long parse_string(struct parser *p)
{
	const char *s = p->s;
	size_t end = p->len;
	long t = new_tok(p, APF_JSTRING, p->pos + 1);
	if (t < 0)
		return -1;
	size_t i = p->pos + 1;
	for (;;) {
		i = skip_plain(s, i, end);
		if (i >= end)
			return fail(p, "string never closed");
		unsigned char c = (unsigned char)s[i];
		if (c == '"')
			break;
		if (c < 0x20)
			return fail(p, "control character in a string");
		if (c >= 0x80) {
			size_t n = utf8_len((const unsigned char *)s + i, end - i);
			if (!n)
				return fail(p, "invalid UTF-8 in a string");
			i += n;
			continue;
		}
		if (c != '\\') {
			i++;
			continue;
		}
		p->tok[t].escaped = 1;
		if (i + 1 >= end)
			return fail(p, "string never closed");
		char e = s[i + 1];
		if (strchr("\"\\/bfnrt", e) && e) {
			i += 2;
			continue;
		}
		if (e != 'u')
			return fail(p, "invalid escape in a string");
		long u = i + 6 <= end ? hex4(s + i + 2) : -1;
		if (u < 0)
			return fail(p, "invalid \\u escape");
		if (u == 0)
			return fail(p, "\\u0000 in a string");
		i += 6;
		if (u >= 0xdc00 && u <= 0xdfff)
			return fail(p, "unpaired surrogate in a string");
		if (u >= 0xd800 && u <= 0xdbff) {
			long lo = i + 6 <= end && s[i] == '\\' && s[i + 1] == 'u'
					  ? hex4(s + i + 2)
					  : -1;
			if (lo < 0xdc00 || lo > 0xdfff)
				return fail(p, "unpaired surrogate in a string");
			i += 6;
		}
	}
	p->tok[t].len = (uint32_t)(i - (p->pos + 1));
	p->pos = i + 1;
	p->tok[t].next = (uint32_t)p->n;
	return t;
}

/* The next code point of a validated string's content, advancing *pp. */
static uint32_t next_cp(const char **pp)
{
	const unsigned char *s = (const unsigned char *)*pp;
	if (s[0] == '\\') {
		char e = (char)s[1];
		*pp += 2;
		switch (e) {
		case 'b':
			return '\b';
		case 'f':
			return '\f';
		case 'n':
			return '\n';
		case 'r':
			return '\r';
		case 't':
			return '\t';
		case 'u': {
			uint32_t u = (uint32_t)hex4((const char *)s + 2);
			*pp += 4;
			if (u >= 0xd800 && u <= 0xdbff) {
				uint32_t lo = (uint32_t)hex4((const char *)s + 8);
				*pp += 6;
				return 0x10000 + ((u - 0xd800) << 10) + (lo - 0xdc00);
			}
			return u;
		}
		default:
			return (uint32_t)e; /* " \ / */
		}
	}
	if (s[0] < 0x80) {
		*pp += 1;
		return s[0];
	}
	if (s[0] < 0xe0) {
		*pp += 2;
		return (uint32_t)(s[0] & 0x1f) << 6 | (s[1] & 0x3f);
	}
	if (s[0] < 0xf0) {
		*pp += 3;
		return (uint32_t)(s[0] & 0x0f) << 12 | (uint32_t)(s[1] & 0x3f) << 6 |
		       (s[2] & 0x3f);
	}
	*pp += 4;
	return (uint32_t)(s[0] & 0x07) << 18 | (uint32_t)(s[1] & 0x3f) << 12 |
	       (uint32_t)(s[2] & 0x3f) << 6 | (s[3] & 0x3f);
}

/* Compares two string tokens' contents after unescaping. */
static int same_string(const char *s, const struct apf_jtok *a,
		       const struct apf_jtok *b)
{
	if (!a->escaped && !b->escaped)
		return a->len == b->len &&
		       !memcmp(s + a->start, s + b->start, a->len);
	const char *x = s + a->start, *xe = x + a->len;
	const char *y = s + b->start, *ye = y + b->len;
	while (x < xe && y < ye)
		if (next_cp(&x) != next_cp(&y))
			return 0;
	return x == xe && y == ye;
}

/* ---- numbers and literals ----------------------------------------------- */

static const uint32_t pow10_u32[9] = {1,	  10,	   100,	     1000,     10000,
				      100000, 1000000, 10000000, 100000000};

/* The value of eight ASCII digits (a little-endian word). */
static inline uint64_t eight_value(uint64_t w)
{
	w -= 0x3030303030303030ull;
	w = (w * 10 + (w >> 8)) & 0x00ff00ff00ff00ffull;
	w = (w * 100 + (w >> 16)) & 0x0000ffff0000ffffull;
	return (w * 10000 + (w >> 32)) & 0xffffffffull;
}

/* The bytes of a little-endian word that are not ASCII digits: nonzero in
 * their high nibbles. */
static inline uint64_t non_digits(uint64_t w)
{
	/* A digit's high nibble is 3, and still 3 once 6 is added to it. A
	 * byte of 0xfa and up carries into the next, which a caller looking
	 * for the first non-digit never reads. */
	const uint64_t high = 0xf0f0f0f0f0f0f0f0ull,
		       three = 0x3030303030303030ull;
	return ((w & high) ^ three) |
	       (((w + 0x0606060606060606ull) & high) ^ three);
}

/* The end of the run of digits at s[i], eight bytes at a time where the
 * text goes on that far (a byte loop's exit, at a length that differs from
 * number to number, is a branch no predictor learns). */
static inline size_t digit_run(const char *s, size_t i, size_t end)
{
	while (i + 8 <= end) {
		uint64_t w;
		memcpy(&w, s + i, 8);
		uint64_t m = non_digits(w);
		if (m)
			return i + (size_t)__builtin_ctzll(m) / 8;
		i += 8;
	}
	while (i < end && s[i] >= '0' && s[i] <= '9')
		i++;
	return i;
}

/* The value of n (at most 19) digits at s, which has avail bytes. */
static inline uint64_t digits_value(const char *s, size_t n, size_t avail)
{
	uint64_t v = 0;
	for (; n >= 8; s += 8, n -= 8, avail -= 8) {
		uint64_t w;
		memcpy(&w, s, 8);
		v = v * 100000000u + eight_value(w);
	}
	if (n && avail >= 8) {
		/* The n digits left, moved to the top of a word (whole-word
		 * loads and shifts: a byte copy into a word stalls the load),
		 * below them zeros. */
		uint64_t w;
		memcpy(&w, s, 8);
		w = w << (8 * (8 - n)) | 0x3030303030303030ull >> (8 * n);
		return v * pow10_u32[n] + eight_value(w);
	}
	while (n--)
		v = v * 10 + (uint64_t)(*s++ - '0');
	return v;
}

static long parse_number(struct parser *p)
{
	const char *s = p->s;
	size_t i = p->pos, end = p->len, start = i;
	uint64_t value = 0;
	int neg = 0;
	if (i < end && s[i] == '-') {
		neg = 1;
		i++;
	}
	size_t digits = i;
	if (i < end && s[i] == '0') {
		i++;
	} else if (i < end && s[i] >= '1' && s[i] <= '9') {
		i = digit_run(s, i, end);
		/* Most numbers in a log are times in ns: their value is kept
		 * for apf_jtok_u64. */
		if (i - digits <= 19)
			value = digits_value(s + digits, i - digits,
					     end - digits);
	} else {
		return fail(p, "invalid number");
	}
	digits = i - digits;
	if (i < end && s[i] == '.') {
		i++;
		if (i >= end || s[i] < '0' || s[i] > '9')
			return fail(p, "invalid number");
		i = digit_run(s, i, end);
	}
	if (i < end && (s[i] == 'e' || s[i] == 'E')) {
		i++;
		if (i < end && (s[i] == '+' || s[i] == '-'))
			i++;
		if (i >= end || s[i] < '0' || s[i] > '9')
			return fail(p, "invalid number");
		i = digit_run(s, i, end);
	}
	long t = new_tok(p, APF_JNUMBER, start);
	if (t < 0)
		return -1;
	p->tok[t].len = (uint32_t)(i - start);
	p->tok[t].next = (uint32_t)p->n;
	if (!neg && digits == i - start && digits <= 19) {
		p->tok[t].plain = 1;
		p->tok[t].value = value;
	}
	p->pos = i;
	return t;
}

static long parse_literal(struct parser *p, const char *word, int type)
{
	size_t n = strlen(word);
	if (p->len - p->pos < n || memcmp(p->s + p->pos, word, n))
		return fail(p, "invalid literal");
	long t = new_tok(p, type, p->pos);
	if (t < 0)
		return -1;
	p->tok[t].len = (uint32_t)n;
	p->tok[t].next = (uint32_t)p->n;
	p->pos += n;
	return t;
}

/* ---- containers --------------------------------------------------------- */

static long parse_value(struct parser *p, int depth);

/* After a member: 1 when a ',' says another follows, 0 at the closing
 * bracket, -1 (failed) otherwise. */
static int next_member(struct parser *p, char close, const char *why)
{
	skip_ws(p);
	if (p->pos < p->len && p->s[p->pos] == ',') {
		p->pos++;
		return 1;
	}
	if (p->pos < p->len && p->s[p->pos] == close) {
		p->pos++;
		return 0;
	}
	return fail(p, why);
}

static long parse_object(struct parser *p, int depth)
{
	long t = new_tok(p, APF_JOBJECT, p->pos);
	if (t < 0)
		return -1;
	p->pos++;
	skip_ws(p);
	/* Duplicate keys: a two-hash Bloom filter over (length, first,
	 * middle and last byte) sends only likely repeats to the full
	 * comparison; once a key holds an escape its raw bytes say nothing, so
	 * every key is compared. */
	uint64_t filter_a = 0, filter_b = 0;
	int any_escaped = 0;
	if (p->pos < p->len && p->s[p->pos] == '}') {
		p->pos++;
	} else {
		for (;;) {
			skip_ws(p);
			if (p->pos >= p->len || p->s[p->pos] != '"')
				return fail(p, "expected a key");
			long k = parse_string(p);
			if (k < 0)
				return -1;
			const struct apf_jtok *kt = &p->tok[k];
			unsigned h = kt->len * 131;
			if (kt->len) {
				const unsigned char *ks =
					(const unsigned char *)p->s + kt->start;
				h += ks[0] * 31u + ks[kt->len / 2] * 7u +
				     ks[kt->len - 1];
			}
			uint64_t bit_a = 1ull << (h & 63),
				 bit_b = 1ull << ((h >> 6) & 63);
			any_escaped |= kt->escaped;
			if (((filter_a & bit_a) && (filter_b & bit_b)) ||
			    any_escaped)
				/* Earlier keys: t+1, then each value's next. */
				for (long e = t + 1; e < k; e = p->tok[e + 1].next)
					if (same_string(p->s, &p->tok[e], kt))
						return fail(p, "duplicate key");
			filter_a |= bit_a;
			filter_b |= bit_b;
			skip_ws(p);
			if (p->pos >= p->len || p->s[p->pos] != ':')
				return fail(p, "expected ':'");
			p->pos++;
			if (parse_value(p, depth + 1) < 0)
				return -1;
			p->tok[t].size++;
			int more = next_member(p, '}', "expected ',' or '}'");
			if (more < 0)
				return -1;
			if (!more)
				break;
		}
	}
	p->tok[t].len = (uint32_t)(p->pos - p->tok[t].start);
	p->tok[t].next = (uint32_t)p->n;
	return t;
}

static long parse_array(struct parser *p, int depth)
{
	long t = new_tok(p, APF_JARRAY, p->pos);
	if (t < 0)
		return -1;
	p->pos++;
	skip_ws(p);
	if (p->pos < p->len && p->s[p->pos] == ']') {
		p->pos++;
	} else {
		for (;;) {
			if (parse_value(p, depth + 1) < 0)
				return -1;
			p->tok[t].size++;
			int more = next_member(p, ']', "expected ',' or ']'");
			if (more < 0)
				return -1;
			if (!more)
				break;
		}
	}
	p->tok[t].len = (uint32_t)(p->pos - p->tok[t].start);
	p->tok[t].next = (uint32_t)p->n;
	return t;
}

/* A string, literal or number at p->pos (which is inside the text); a
 * bracket fails as a number does. Inlined: a shape's match calls it for
 * every value (a call there cost the log check 1%). */
static inline __attribute__((always_inline)) long
parse_scalar(struct parser *p)
{
	switch (p->s[p->pos]) {
	case '"':
		return parse_string(p);
	case 't':
		return parse_literal(p, "true", APF_JTRUE);
	case 'f':
		return parse_literal(p, "false", APF_JFALSE);
	case 'n':
		return parse_literal(p, "null", APF_JNULL);
	default:
		return parse_number(p);
	}
}

static long parse_value(struct parser *p, int depth)
{
	if (depth > APF_JTOK_MAX_DEPTH)
		return fail(p, "nested too deeply");
	skip_ws(p);
	if (p->pos >= p->len)
		return fail(p, "expected a value");
	switch (p->s[p->pos]) {
	case '{':
		return parse_object(p, depth);
	case '[':
		return parse_array(p, depth);
	default:
		return parse_scalar(p);
	}
}

int apf_jtok_parse(const char *s, size_t len, struct apf_jtok *tok, size_t cap,
		   size_t *ntok, const char **why)
{
	struct parser p = {s, len, 0, tok, cap, 0, NULL};
	*ntok = 0;
	if (len > UINT32_MAX) {
		*why = "text too long";
		return -1;
	}
	long t = parse_value(&p, 1);
	if (t >= 0) {
		skip_ws(&p);
		if (p.pos != len)
			fail(&p, "text after the value");
	}
	if (p.why) {
		if (why)
			*why = p.why;
		return -1;
	}
	*ntok = p.n;
	return 0;
}

/* ---- lines of a form seen before ---------------------------------------- *
 * A log holds a few forms of line (a step_block's members, an eval's), each
 * millions of times, the same but for the values. A shape keeps one line
 * apf_jtok_parse accepted and its tokens; a text matches it when every byte
 * outside the shape's scalar values (strings, numbers, literals) is the
 * same - every key, bracket, colon, comma and space - and each value there
 * is a scalar that parse_string, parse_number or parse_literal accepts on
 * its own. Such a text is the shape's with valid scalars put in place of
 * valid scalars: valid JSON with the same tree, keys (so no duplicate the
 * shape did not have) and depth, whose tokens are the shape's moved by the
 * lengths of the values before them. apf_jtok_parse would accept it and
 * leave exactly those tokens (test_jtok and fuzz_jtok hold the two to it);
 * any text that does not match is parsed by apf_jtok_parse itself. */

#define SHAPES 16
#define SHAPE_MAX_LEN 4096
#define SHAPE_KEY 48

/* A scalar value of the shape: its token, where the bytes before it start
 * in the text (the previous value's end), and where it starts and ends
 * (a string's quotes included). */
struct shape_value {
	uint32_t tok, at, raw, end;
};

/* Any other token (a key, an object, an array): how many values come
 * before it, and before its subtree's end. */
struct shape_fix {
	uint32_t tok, before, before_end;
};

struct shape {
	char key[SHAPE_KEY];
	size_t key_len;
	char *text;
	size_t len;
	struct apf_jtok *tok;
	size_t ntok;
	struct shape_value *val;
	size_t nval;
	struct shape_fix *fix;
	size_t nfix;
	int64_t *shift;         /* a match's scratch: after value k, how far
				 * the text has moved from the shape's */
	unsigned long used;
};

struct apf_jtok_shapes {
	struct shape s[SHAPES];
	unsigned long clock;
	uint64_t hits;
};

uint64_t apf_jtok_shapes_hits(const apf_jtok_shapes *shs)
{
	return shs ? shs->hits : 0;
}

apf_jtok_shapes *apf_jtok_shapes_new(void)
{
	return calloc(1, sizeof(apf_jtok_shapes));
}

static void shape_clear(struct shape *sh)
{
	free(sh->text);
	free(sh->tok);
	free(sh->val);
	free(sh->fix);
	free(sh->shift);
	memset(sh, 0, sizeof *sh);
}

void apf_jtok_shapes_free(apf_jtok_shapes *shs)
{
	if (!shs)
		return;
	for (int i = 0; i < SHAPES; i++)
		shape_clear(&shs->s[i]);
	free(shs);
}

/* Where a scalar's bytes end in the text: past a string's closing quote. */
static uint32_t value_end(const struct apf_jtok *t)
{
	return t->start + t->len + (t->type == APF_JSTRING);
}

/* Marks the scalar values below container t[c] (keys are not values) with
 * their ends. */
static void mark_values(const struct apf_jtok *t, uint32_t c, uint32_t *end)
{
	int object = t[c].type == APF_JOBJECT;
	uint32_t i = c + 1;
	for (uint32_t m = 0; m < t[c].size; m++) {
		if (object)
			i++; /* the key */
		if (t[i].type == APF_JOBJECT || t[i].type == APF_JARRAY)
			mark_values(t, i, end);
		else
			end[i] = value_end(&t[i]);
		i = t[i].next;
	}
}

/* Keeps s (parsed into tok) as the shape sh: its values in text order and
 * the other tokens; quietly keeps nothing when out of memory. */
static void shape_keep(struct shape *sh, const char *key, size_t key_len,
		       const char *s, size_t len, const struct apf_jtok *tok,
		       size_t ntok)
{
	shape_clear(sh);
	uint32_t *end = calloc(ntok, sizeof *end);
	uint32_t *before = malloc((ntok + 1) * sizeof *before);
	sh->text = malloc(len ? len : 1);
	sh->tok = malloc(ntok * sizeof *tok);
	sh->val = malloc(ntok * sizeof *sh->val);
	sh->fix = malloc(ntok * sizeof *sh->fix);
	sh->shift = malloc((ntok + 1) * sizeof *sh->shift);
	if (!end || !before || !sh->text || !sh->tok || !sh->val || !sh->fix ||
	    !sh->shift) {
		shape_clear(sh);
		free(end);
		free(before);
		return;
	}
	memcpy(sh->key, key, key_len);
	sh->key_len = key_len;
	memcpy(sh->text, s, len);
	sh->len = len;
	memcpy(sh->tok, tok, ntok * sizeof *tok);
	sh->ntok = ntok;
	if (tok[0].type == APF_JOBJECT || tok[0].type == APF_JARRAY)
		mark_values(tok, 0, end);
	else
		end[0] = value_end(&tok[0]);
	uint32_t at = 0;
	for (uint32_t i = 0; i < ntok; i++) {
		before[i] = (uint32_t)sh->nval;
		if (end[i]) {
			sh->val[sh->nval++] = (struct shape_value){
				i, at, tok[i].start - (tok[i].type == APF_JSTRING),
				end[i]};
			at = end[i];
		}
	}
	before[ntok] = (uint32_t)sh->nval;
	for (uint32_t i = 0; i < ntok; i++)
		if (!end[i])
			sh->fix[sh->nfix++] = (struct shape_fix){
				i, before[i], before[tok[i].next]};
	free(end);
	free(before);
}

/* Whether s matches shape sh (see above); its tokens in tok when it does. */
static int shape_match(struct shape *sh, const char *s, size_t len,
		       struct apf_jtok *tok, size_t cap)
{
	if (sh->ntok > cap || len > UINT32_MAX)
		return 0;
	struct parser p = {s, len, 0, tok, cap, 0, NULL};
	int64_t *shift = sh->shift;
	size_t pos = 0, at = 0;
	shift[0] = 0;
	for (size_t k = 0; k < sh->nval; k++) {
		const struct shape_value *v = &sh->val[k];
		size_t same = v->raw - v->at;
		if (len - pos <= same || memcmp(s + pos, sh->text + v->at, same))
			return 0;
		p.pos = pos + same;
		p.n = v->tok;
		if (parse_scalar(&p) < 0)
			return 0;
		pos = p.pos;
		at = v->end;
		shift[k + 1] = (int64_t)pos - (int64_t)at;
	}
	if (len - pos != sh->len - at || memcmp(s + pos, sh->text + at, len - pos))
		return 0;
	const struct apf_jtok *st = sh->tok;
	for (size_t j = 0; j < sh->nfix; j++) {
		const struct shape_fix *f = &sh->fix[j];
		const struct apf_jtok *t = &st[f->tok];
		struct apf_jtok *o = &tok[f->tok];
		*o = *t;
		o->start = (uint32_t)((int64_t)t->start + shift[f->before]);
		if (t->type == APF_JOBJECT || t->type == APF_JARRAY)
			o->len = (uint32_t)((int64_t)t->len + shift[f->before_end] -
					    shift[f->before]);
	}
	return 1;
}

int apf_jtok_parse_like(apf_jtok_shapes *shs, const char *key, size_t key_len,
			const char *s, size_t len, struct apf_jtok *tok,
			size_t cap, size_t *ntok, const char **why)
{
	struct shape *found = NULL;
	if (shs && key_len < SHAPE_KEY)
		for (int i = 0; i < SHAPES && !found; i++)
			if (shs->s[i].text && shs->s[i].key_len == key_len &&
			    !memcmp(shs->s[i].key, key, key_len))
				found = &shs->s[i];
	if (found && shape_match(found, s, len, tok, cap)) {
		found->used = ++shs->clock;
		shs->hits++;
		*ntok = found->ntok;
		return 0;
	}
	int rc = apf_jtok_parse(s, len, tok, cap, ntok, why);
	if (rc || !shs || key_len >= SHAPE_KEY || len > SHAPE_MAX_LEN)
		return rc;
	if (!found) {
		/* The slot used longest ago. */
		found = &shs->s[0];
		for (int i = 1; i < SHAPES; i++)
			if (shs->s[i].used < found->used)
				found = &shs->s[i];
	}
	shape_keep(found, key, key_len, s, len, tok, *ntok);
	found->used = ++shs->clock;
	return 0;
}

/* ---- access ------------------------------------------------------------- */

long apf_jtok_get(const char *s, const struct apf_jtok *t, uint32_t obj,
		  const char *key)
{
	if (t[obj].type != APF_JOBJECT)
		return -1;
	size_t klen = strlen(key);
	uint32_t k = obj + 1;
	for (uint32_t m = 0; m < t[obj].size; m++, k = t[k + 1].next) {
		if (!t[k].escaped) {
			if (t[k].len == klen && !memcmp(s + t[k].start, key, klen))
				return k + 1;
			continue;
		}
		const char *x = s + t[k].start, *xe = x + t[k].len;
		const char *y = key, *ye = key + klen;
		while (x < xe && y < ye && next_cp(&x) == next_cp(&y))
			;
		if (x == xe && y == ye)
			return k + 1;
	}
	return -1;
}

int apf_jtok_eq(const char *s, const struct apf_jtok *t, const char *lit)
{
	if (t->type != APF_JSTRING)
		return 0;
	size_t n = strlen(lit);
	if (!t->escaped)
		return t->len == n && !memcmp(s + t->start, lit, n);
	const char *x = s + t->start, *xe = x + t->len, *y = lit, *ye = lit + n;
	while (x < xe && y < ye)
		if (next_cp(&x) != next_cp(&y))
			return 0;
	return x == xe && y == ye;
}

int apf_jtok_u64(uint64_t *out, const char *s, const struct apf_jtok *t)
{
	if (t->type != APF_JNUMBER || t->len == 0 || t->len > 20)
		return -1;
	if (t->plain) {
		*out = t->value;
		return 0;
	}
	const char *p = s + t->start;
	uint64_t v = 0;
	/* 19 digits cannot overflow; only the 20th needs a check. */
	uint32_t fast = t->len < 20 ? t->len : 19;
	for (uint32_t i = 0; i < fast; i++) {
		unsigned d = (unsigned)(unsigned char)p[i] - '0';
		if (d > 9)
			return -1; /* a sign, a fraction or an exponent */
		v = v * 10 + d;
	}
	if (t->len == 20) {
		unsigned d = (unsigned)(unsigned char)p[19] - '0';
		if (d > 9 || v > (UINT64_MAX - d) / 10)
			return -1;
		v = v * 10 + d;
	}
	*out = v;
	return 0;
}

int apf_jtok_double(double *out, const char *s, const struct apf_jtok *t)
{
	if (t->type != APF_JNUMBER)
		return -1;
	/* Clinger's fast path: up to 15 significant digits and a power of ten
	 * up to 22 are both exact doubles, so one IEEE multiply or divide gives
	 * the correctly rounded value, as strtod would. */
	static const double pow10[] = {1e0,  1e1,  1e2,	 1e3,  1e4,  1e5,
				       1e6,  1e7,  1e8,	 1e9,  1e10, 1e11,
				       1e12, 1e13, 1e14, 1e15, 1e16, 1e17,
				       1e18, 1e19, 1e20, 1e21, 1e22};
	const char *p = s + t->start, *end = p + t->len;
	int neg = *p == '-';
	if (neg)
		p++;
	uint64_t m = 0;
	int digits = 0, exp10 = 0, simple = 1;
	for (; p < end && *p >= '0' && *p <= '9'; p++) {
		if (m || *p != '0')
			digits++;
		m = m * 10 + (uint64_t)(*p - '0');
		if (digits > 15)
			simple = 0;
	}
	if (simple && p < end && *p == '.')
		for (p++; p < end && *p >= '0' && *p <= '9'; p++) {
			if (m || *p != '0')
				digits++;
			m = m * 10 + (uint64_t)(*p - '0');
			exp10--;
			if (digits > 15) {
				simple = 0;
				break;
			}
		}
	if (simple && p < end)
		simple = 0; /* an exponent: leave it to strtod */
	if (simple && exp10 >= -22) {
		double v = (double)m;
		v = exp10 < 0 ? v / pow10[-exp10] : v;
		*out = neg ? -v : v;
		return 0;
	}
	/* The token ends at a character that cannot continue a number, so
	 * strtod stops exactly at its end. */
	char *stop;
	errno = 0;
	double v = strtod(s + t->start, &stop);
	if (stop != s + t->start + t->len || (errno == ERANGE && isinf(v)))
		return -1;
	*out = v;
	return 0;
}

int apf_jtok_string(const char *s, const struct apf_jtok *t, char *buf,
		    size_t size)
{
	if (t->type != APF_JSTRING || size == 0)
		return -1;
	const char *x = s + t->start, *xe = x + t->len;
	size_t n = 0;
	if (!t->escaped) {
		if (t->len >= size)
			return -1;
		memcpy(buf, x, t->len);
		buf[t->len] = 0;
		return 0;
	}
	while (x < xe) {
		uint32_t c = next_cp(&x);
		char u[4];
		size_t k;
		if (c < 0x80) {
			u[0] = (char)c;
			k = 1;
		} else if (c < 0x800) {
			u[0] = (char)(0xc0 | c >> 6);
			u[1] = (char)(0x80 | (c & 0x3f));
			k = 2;
		} else if (c < 0x10000) {
			u[0] = (char)(0xe0 | c >> 12);
			u[1] = (char)(0x80 | ((c >> 6) & 0x3f));
			u[2] = (char)(0x80 | (c & 0x3f));
			k = 3;
		} else {
			u[0] = (char)(0xf0 | c >> 18);
			u[1] = (char)(0x80 | ((c >> 12) & 0x3f));
			u[2] = (char)(0x80 | ((c >> 6) & 0x3f));
			u[3] = (char)(0x80 | (c & 0x3f));
			k = 4;
		}
		if (n + k >= size)
			return -1;
		memcpy(buf + n, u, k);
		n += k;
	}
	buf[n] = 0;
	return 0;
}
