/*
 * runlog: the hash-chained run log (DESIGN.md section 3.6).
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

/* One parsed record, valid during the callback. */
struct apf_runlog_record {
	uint64_t seq;
	uint64_t t_ns;
	const char *event;
	const json_t *obj;      /* the whole line */
	const char *line;       /* raw bytes, without newline */
	size_t len;
	uint64_t line_no;       /* 1-based */
	char hash[65];          /* SHA-256 of this line */
};
typedef int (*apf_runlog_fn)(void *user, const struct apf_runlog_record *r);

struct apf_runlog_summary {
	uint64_t records;
	char head[65];
};

/* Reads and checks the whole log; fn (may be NULL) sees each record in
 * order and can stop the walk by returning an error. Chain failures are
 * APF_EVERIFY "log.jsonl: line N: ...". Uses all cores for hashing and
 * parsing; fn always runs in order on the calling thread. */
int apf_runlog_read(const char *path, apf_runlog_fn fn, void *user,
		    struct apf_runlog_summary *sum);

#endif
