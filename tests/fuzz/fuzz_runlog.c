/*
 * fuzz_runlog.c: libFuzzer target for the run log reader (apf_runlog_read,
 * on a scratch file) and for reopening a log to append after a crash
 * (apf_runlog_open_append, which finds a torn tail and cuts it off). The
 * records the callback sees are numbered from 0 without gaps; a log that
 * reads cleanly reopens with the same count and head; and once the tail is
 * cut, the log reads cleanly.
 */
#include "fuzzlib.h"

#include "runlog/runlog.h"

struct walk {
	uint64_t next;
};

static int on_record(void *user, const struct apf_runlog_record *r)
{
	struct walk *w = user;
	if (r->seq != w->next || r->line_no != w->next + 1 || !r->event ||
	    !r->obj || strlen(r->hash) != 64)
		abort();
	w->next++;
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *dir = fuzz_tmpdir("fuzz_runlog");
	char *path = apf_path_join(dir, "log.jsonl");
	if (!path)
		abort();
	fuzz_put(path, data, size);
	struct walk w = {0};
	struct apf_runlog_summary sum;
	apf_error_clear();
	int rc = apf_runlog_read(&sum, path, on_record, &w);
	fuzz_expect(rc, "apf_runlog_read");
	if (!rc && sum.records != w.next)
		abort();

	apf_runlog *l;
	uint64_t cut = 0;
	apf_error_clear();
	int arc = apf_runlog_open_append(&l, path, 1, &cut);
	fuzz_expect(arc, "apf_runlog_open_append");
	if (!arc) {
		if (!rc && (cut != 0 || apf_runlog_count(l) != sum.records ||
			    strcmp(apf_runlog_head(l), sum.head)))
			abort();
		uint64_t count = apf_runlog_count(l);
		if (apf_runlog_close(l) != 0)
			abort();
		struct apf_runlog_summary again;
		if (apf_runlog_read(&again, path, NULL, NULL) != 0 ||
		    again.records != count) {
			fprintf(stderr, "after cutting %llu bytes: %s\n",
				(unsigned long long)cut, apf_error_message());
			abort();
		}
	}
	free(path);
	return 0;
}
