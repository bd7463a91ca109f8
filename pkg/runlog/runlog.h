/*
 * runlog: the hash-chained run log (docs/design.md section 2.7).
 *
 * log.jsonl holds one JSON object per line:
 *
 *     {"seq":0,"prev":"000...0","t_ns":123,"event":"run_start",...fields}
 *
 * seq counts from 0 without gaps; prev is the lowercase hex SHA-256 of the
 * previous line's bytes without its newline (64 zeros for the first line);
 * t_ns is the supervisor's monotonic clock; the event's own fields follow.
 * apf writes the first four keys in exactly this order and form, so a reader
 * can check the chain without trusting anything else in the line.
 *
 * Writing: one write() per line through an O_APPEND descriptor, fsync when
 * the caller asks (at every eval and at trial and run boundaries). A crash
 * can leave at most one torn line at the end; apf_runlog_open_append finds
 * it, and the caller (resume) cuts it off before appending, so a finished
 * log never holds a torn line. The head (hash of the last line) is what the
 * runner signs into log.dsse.json.
 *
 * Reading: apf_runlog_read parses and checks every line - JSON object, the
 * four leading keys, contiguous seq, intact prev chain - and hands each
 * record to a callback; the first failure names the line.
 */
#ifndef APF_RUNLOG_H
#define APF_RUNLOG_H

#include <jansson.h>
#include <stdint.h>

#include "base/base.h"

#define APF_RUNLOG_ZERO_HEAD \
	"0000000000000000000000000000000000000000000000000000000000000000"

typedef struct apf_runlog apf_runlog;

/* Creates a new, empty log (refuses an existing file). */
int apf_runlog_create(apf_runlog **out, const char *path);
/* Opens an existing log for appending after checking its chain. A torn
 * final line (no newline, or not a valid record) is cut off when
 * cut_torn_tail is set, else it is an error; *cut (may be NULL) receives the
 * bytes removed. */
int apf_runlog_open_append(apf_runlog **out, const char *path,
			   int cut_torn_tail, uint64_t *cut);
/* Appends {"seq","prev","t_ns","event", fields...}; fields (may be NULL) is
 * an object whose keys follow in their order. sync: fsync after writing. */
int apf_runlog_append(apf_runlog *l, uint64_t t_ns, const char *event,
		      const json_t *fields, int sync);
int apf_runlog_sync(apf_runlog *l);
uint64_t apf_runlog_count(const apf_runlog *l);
/* Hex SHA-256 of the last line (APF_RUNLOG_ZERO_HEAD when empty). */
const char *apf_runlog_head(const apf_runlog *l);
int apf_runlog_close(apf_runlog *l);

/* ---- reading ----------------------------------------------------------------
 * Every line is checked to be one strict JSON object (RFC 8259, as jansson
 * with JSON_REJECT_DUPLICATES: UTF-8, no duplicate keys, paired surrogates,
 * the exact number grammar) by an allocation-free reader that leaves a flat
 * token array: tok[0] is the object, a container is followed by its
 * children (an object's as key, value, key, value ...), and `next` is the
 * index just past a value's subtree. Tokens point into the line. */
enum apf_jtype {
	APF_JOBJECT = 1,
	APF_JARRAY,
	APF_JSTRING,
	APF_JNUMBER,
	APF_JTRUE,
	APF_JFALSE,
	APF_JNULL,
};

#define APF_JTOK_MAX_DEPTH 64

struct apf_jtok {
	uint32_t start, len; /* the value's bytes; a string's without quotes */
	uint32_t next;       /* index of the token after this value's subtree */
	uint8_t type;        /* enum apf_jtype */
	uint8_t escaped;     /* a string holding backslash escapes */
	uint8_t plain;       /* a number of up to 19 plain digits: in value */
	union {
		uint32_t size;   /* an object's members or an array's elements */
		uint64_t value;  /* a plain number's value */
	};
};

/* Parses one JSON text into tok (cap tokens; len / 2 + 2 always suffice).
 * Returns 0, or -1 with *why set to a static reason. */
int apf_jtok_parse(const char *s, size_t len, struct apf_jtok *tok, size_t cap,
		   size_t *ntok, const char **why);
/* Forms of lines seen before, for apf_jtok_parse_like; one per thread. */
typedef struct apf_jtok_shapes apf_jtok_shapes;
apf_jtok_shapes *apf_jtok_shapes_new(void); /* NULL when out of memory */
void apf_jtok_shapes_free(apf_jtok_shapes *shs);
/* How many texts matched a form seen before (for tests and benches). */
uint64_t apf_jtok_shapes_hits(const apf_jtok_shapes *shs);
/* apf_jtok_parse, with the same result and tokens, faster for a text that
 * differs from one it parsed before under the same key (any bytes: a log
 * reader passes the event's name) only in the values of strings, numbers
 * and literals: that text is checked against the earlier one and only its
 * values parsed. shs may be NULL (then it is apf_jtok_parse). */
int apf_jtok_parse_like(apf_jtok_shapes *shs, const char *key, size_t key_len,
			const char *s, size_t len, struct apf_jtok *tok,
			size_t cap, size_t *ntok, const char **why);
/* Index of key's value in the object tok[obj], or -1 when absent. */
long apf_jtok_get(const char *s, const struct apf_jtok *tok, uint32_t obj,
		  const char *key);
/* A string token equal to lit (after unescaping). */
int apf_jtok_eq(const char *s, const struct apf_jtok *t, const char *lit);
/* A number written as plain digits (no sign, fraction or exponent) that
 * fits in 64 bits; else -1. */
int apf_jtok_u64(uint64_t *out, const char *s, const struct apf_jtok *t);
/* Any finite number, correctly rounded; else -1. */
int apf_jtok_double(double *out, const char *s, const struct apf_jtok *t);
/* A string's content unescaped into buf (NUL-terminated); -1 when it is
 * not a string or does not fit. */
int apf_jtok_string(const char *s, const struct apf_jtok *t, char *buf,
		    size_t size);

/* One parsed record, valid during the callback. */
struct apf_runlog_record {
	uint64_t seq;
	uint64_t t_ns;
	const char *event;
	const json_t *obj;      /* the whole line; NULL unless asked for */
	const struct apf_jtok *tok; /* the line's tokens (see above) */
	size_t ntok;
	const char *line;       /* raw bytes, without newline */
	size_t len;
	uint64_t line_no;       /* 1-based */
	char hash[65];          /* SHA-256 of this line */
	void *slot;             /* what prepare left for this line, or NULL */
};
typedef int (*apf_runlog_fn)(void *user, const struct apf_runlog_record *r);

struct apf_runlog_summary {
	uint64_t records;
	char head[65];
	/* Set whether or not the walk succeeds: when it stopped at a last
	 * line without a newline (torn by a crash), that line's length, else
	 * 0. Every line before it checked out. For callers that accept a torn
	 * tail, instead of reading the message. */
	uint64_t torn_bytes;
};

struct apf_runlog_read_opts {
	/* Sees each record in order on the calling thread; returning an error
	 * stops the walk. May be NULL. */
	apf_runlog_fn fn;
	void *user;
	/* Runs on the worker threads, in no particular order, for every line
	 * that parsed, before fn sees it; it fills its slot (slot_size bytes,
	 * not cleared: the slot of an earlier line) for fn. It cannot fail:
	 * it records problems in the slot so that fn reports them in line
	 * order. May be NULL. */
	void (*prepare)(void *user, const struct apf_runlog_record *r,
			void *slot);
	size_t slot_size;
	int json;               /* also build r->obj with jansson (slower) */
};

/* Reads and checks the whole log. Chain failures are APF_EVERIFY
 * "log.jsonl: line N: ...". Uses all cores for hashing and parsing; fn
 * always runs in order on the calling thread. */
int apf_runlog_walk(struct apf_runlog_summary *sum, const char *path,
		    const struct apf_runlog_read_opts *o);
/* The same with r->obj built: fn (may be NULL) sees each record. */
int apf_runlog_read(struct apf_runlog_summary *sum, const char *path,
		    apf_runlog_fn fn, void *user);

#endif
