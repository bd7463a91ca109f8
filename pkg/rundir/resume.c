/*
 * resume.c: a unit's story as a resume reads it (resume.h).
 */
#include "rundir/resume.h"

#include <stdio.h>
#include <string.h>

void apf_rundir_unit_init(struct apf_rundir_unit *s)
{
	memset(s, 0, sizeof *s);
	s->time_to_target_ns = -1;
}

void apf_rundir_unit_free(struct apf_rundir_unit *s)
{
	json_decref(s->rows);
	s->rows = NULL;
}

#define I(k) json_integer_value(json_object_get(rec, k))

void apf_rundir_unit_apply(struct apf_rundir_unit *s, const char *ev,
			   const json_t *rec)
{
	if (!strcmp(ev, "trial_start")) {
		s->started = 1;
		if (I("budget_ns") > 0)
			s->budget_ns = (uint64_t)I("budget_ns");
	} else if (!strcmp(ev, "clock_start")) {
		if (I("batch_size") > s->batch_size)
			s->batch_size = I("batch_size");
	} else if (!strcmp(ev, "eval")) {
		s->last_eval = I("index");
		s->global_step = I("global_step");
		s->sub_ns = (uint64_t)I("accumulated_submission_ns");
		s->eval_ns = (uint64_t)I("accumulated_eval_ns");
		s->log_ns = (uint64_t)I("accumulated_logging_ns");
		const char *sha = json_string_value(json_object_get(
			json_object_get(rec, "checkpoint"), "sha256"));
		snprintf(s->ckpt_sha256, sizeof s->ckpt_sha256, "%s",
			 sha ? sha : "");
		if (!s->rows)
			s->rows = json_array();
		json_array_append(s->rows, (json_t *)rec);
		if (s->time_to_target_ns < 0 &&
		    json_is_true(json_object_get(rec, "validation_target_met")))
			s->time_to_target_ns = (int64_t)s->sub_ns;
	} else if (!strcmp(ev, "trial_end")) {
		s->ended = 1;
		s->failed = json_is_true(json_object_get(rec, "failed"));
	} else if (!strcmp(ev, "resume")) {
		s->preemptions = I("preemption_count");
		/* Work after the eval it resumes from was lost. */
		int64_t from = I("from_eval");
		while (s->rows && (int64_t)json_array_size(s->rows) > from)
			json_array_remove(s->rows, json_array_size(s->rows) - 1);
		if (from == 0) {
			json_decref(s->rows);
			s->rows = NULL;
			s->last_eval = 0;
			s->sub_ns = s->eval_ns = s->log_ns = 0;
			s->global_step = 0;
			s->time_to_target_ns = -1;
		}
	}
}
