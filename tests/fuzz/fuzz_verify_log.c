/*
 * fuzz_verify_log.c: libFuzzer target for the verifier's reading of a log
 * (checks 2 and 3: every record's form, the run and unit bindings, the
 * sequence of each unit's records, resumes, and the timing rules) on logs
 * that are chained and signed: the input is a list of records, one JSON
 * object per line without seq and prev ({"t_ns":..,"event":..,...}); the
 * target chains them as the runner does and signs the head with the
 * runner's key, so that what the fuzzer changes gets past the chain and
 * signature into the checks an operator holding the key could attack.
 * Lines that are not such an object are left out. Seeds: the records of a
 * valid run (tests/fuzz/seeds/fuzz_verify_log, from make_verify_run.py).
 */
#include "verify_run.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct verify_fixture *f = verify_fixture("fuzz_verify_log");
	char *log_path = apf_path_join(f->run, "log.jsonl");
	char *head = apf_path_join(f->run, "log.dsse.json");
	if (!log_path || !head)
		abort();
	unlink(log_path);
	unlink(head);
	apf_runlog *l = NULL;
	if (apf_runlog_create(&l, log_path))
		abort();
	char *text = fuzz_text(data, size);
	for (char *line = text, *next; line; line = next) {
		next = strchr(line, '\n');
		if (next)
			*next++ = 0;
		json_t *o = json_loads(line, JSON_REJECT_DUPLICATES, NULL);
		json_t *t = json_object_get(o, "t_ns");
		const char *ev = json_string_value(json_object_get(o, "event"));
		if (json_is_object(o) && ev && json_is_integer(t) &&
		    json_integer_value(t) >= 0 && !json_object_get(o, "seq") &&
		    !json_object_get(o, "prev")) {
			char event[64];
			snprintf(event, sizeof event, "%s", ev);
			uint64_t t_ns = (uint64_t)json_integer_value(t);
			json_object_del(o, "t_ns");
			json_object_del(o, "event");
			if (apf_runlog_append(l, t_ns, event, o, 0))
				apf_error_clear(); /* refused: left out */
		}
		json_decref(o);
	}
	free(text);
	if (apf_runlog_count(l) &&
	    apf_rundir_sign_head(f->run, f->runner, f->run_json_sha256, l))
		abort();
	if (apf_runlog_close(l))
		abort();
	verify_fixture_check(f, 1);
	free(log_path);
	free(head);
	return 0;
}
