/*
 * test_events.c: the log's event table (pkg/rundir/events.h), which the
 * runner checks each record against before writing it and the verifier's
 * form check reads: it is the schema's (manifests/log-events.schema.json,
 * event by event and field by field, required or not), and the writer's
 * check refuses what the verifier would refuse.
 */
#include "testlib.h"

#include <string.h>

#include "base/base.h"
#include "rundir/events.h"

static json_t *schema_events(void)
{
	json_error_t je;
	json_t *s = json_load_file(APF_SOURCE_DIR "/manifests/log-events.schema.json",
				   0, &je);
	if (!s)
		fail_msg("schema: %s", je.text);
	return s;
}

static void the_table_is_the_schemas(void **state)
{
	(void)state;
	json_t *s = schema_events();
	json_t *names = json_object_get(
		json_object_get(json_object_get(s, "properties"), "event"), "enum");
	assert_int_equal(json_array_size(names), APF_EV_COUNT - 1);
	size_t i;
	json_t *rule;
	size_t seen = 0;
	json_array_foreach(json_object_get(s, "allOf"), i, rule)
	{
		const char *ev = json_string_value(json_object_get(
			json_object_get(json_object_get(json_object_get(rule, "if"),
							"properties"),
					"event"),
			"const"));
		if (!ev)
			continue;
		int e = apf_rundir_event(ev);
		if (e == APF_EV_UNKNOWN)
			fail_msg("schema event %s is not in the table", ev);
		seen++;
		json_t *then = json_object_get(rule, "then");
		json_t *props = json_object_get(then, "properties");
		json_t *req = json_object_get(then, "required");
		size_t nfields = 0;
		for (const struct apf_event_field *f = apf_rundir_events[e].fields;
		     f->name; f++, nfields++) {
			if (!json_object_get(props, f->name))
				fail_msg("%s.%s: not in the schema", ev, f->name);
			int required = 0;
			size_t k;
			json_t *r;
			json_array_foreach(req, k, r) required |=
				!strcmp(json_string_value(r), f->name);
			if (required != f->required)
				fail_msg("%s.%s: required %d in the table, %d in "
					 "the schema",
					 ev, f->name, f->required, required);
		}
		/* seq, prev, t_ns, event are the line's, not the event's. */
		assert_int_equal(json_object_size(props), nfields + 4);
	}
	assert_int_equal(seen, APF_EV_COUNT - 1);
	json_decref(s);
}

static json_t *eval_record(void)
{
	return json_pack(
		"{s:s, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:i, "
		"s:{s:f, s:i}, s:b, s:b, s:{s:s, s:s, s:i}}",
		"unit", "study_0/w/trial_1", "index", 1, "global_step", 10,
		"start_ns", 5, "end_ns", 6, "accumulated_submission_ns", 4,
		"accumulated_eval_ns", 1, "accumulated_logging_ns", 0,
		"total_duration_ns", 5, "preemption_count", 0, "metrics",
		"validation/loss", 0.5, "validation/num_examples", 100,
		"validation_target_met", 0, "test_target_met", 0, "checkpoint",
		"file", "ckpt/1.bin", "sha256",
		"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
		"bytes", 4096);
}

static void refused(const char *event, json_t *r, const char *why)
{
	if (apf_rundir_event_check(event, r) != APF_EINTERNAL)
		fail_msg("%s accepted", event);
	if (!strstr(apf_error_message(), why))
		fail_msg("%s: %s (wanted %s)", event, apf_error_message(), why);
	json_decref(r);
}

static void the_writer_refuses_what_the_verifier_would(void **state)
{
	(void)state;
	json_t *r = eval_record();
	assert_int_equal(apf_rundir_event_check("eval", r), 0);
	json_decref(r);
	r = eval_record();
	json_object_del(r, "global_step");
	refused("eval", r, "eval record without global_step");
	r = eval_record();
	json_object_set_new(r, "extra", json_true());
	refused("eval", r, "a field its event does not have");
	r = eval_record();
	json_object_set_new(r, "index", json_integer(0)); /* evals count from 1 */
	refused("eval", r, "index is not of its type");
	r = eval_record();
	json_object_set_new(json_object_get(r, "checkpoint"), "sha256",
			    json_string("ABC"));
	refused("eval", r, "checkpoint is not of its type");
	r = eval_record();
	json_object_set_new(json_object_get(r, "metrics"), "x", json_string("1"));
	refused("eval", r, "metrics is not of its type");
	refused("sandbox_fault",
		json_pack("{s:s, s:s, s:s}", "unit", "u", "kind", "cosmic-ray",
			  "detail", "d"),
		"kind is not of its type");
	refused("step_blocks", json_object(), "not an event of the log");
	/* Optional fields may be left out. */
	r = json_pack("{s:s, s:s, s:b, s:i, s:i, s:i, s:n}", "unit", "u",
		      "reason", "budget", "failed", 0, "global_step", 3, "evals",
		      1, "accumulated_submission_ns", 9, "time_to_target_ns");
	assert_int_equal(apf_rundir_event_check("trial_end", r), 0);
	json_decref(r);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(the_table_is_the_schemas),
		cmocka_unit_test(the_writer_refuses_what_the_verifier_would),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
