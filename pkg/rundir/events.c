/*
 * events.c: the table of the log's records (events.h) and the writer's
 * check against it.
 */
#include "rundir/events.h"

#include <string.h>

#include "base/base.h"

const char *const apf_rundir_devices[] = {"cpu", "cuda", NULL};
const char *const apf_rundir_directions[] = {"max", "min", NULL};
const char *const apf_rundir_fault_kinds[] = {"syscall", "path",	 "crash",
					  "memory",  "timeout", "protocol",
					  "build",   NULL};
const char *const apf_rundir_reasons[] = {"budget", "targets", "complete",
				      "max_steps", "fault", "error", NULL};
const char *const apf_rundir_preempt_signals[] = {"SIGTERM", "SIGUSR1", NULL};
const char *const apf_rundir_eval_whys[] = {"due", "complete", "max_steps",
					    NULL};

#define REQ 1
#define OPT 0
#define FLD(name, type, req, at, values) {name, sizeof name - 1, type, req, at, values}
#define UNIT_FIELD FLD("unit", APF_F_UNIT, REQ, 0, NULL)
#define END {NULL, 0, 0, 0, 0, NULL}

static const struct apf_event_field f_run_start[] = {
	FLD("run_json_sha256", APF_F_SHA, REQ, 0, NULL),
	FLD("entry_sha256", APF_F_SHA, REQ, 1, NULL),
	FLD("manifest_sha256", APF_F_SHA, REQ, 2, NULL),
	FLD("sealed", APF_F_BOOL, REQ, 0, NULL),
	FLD("device", APF_F_ENUM, REQ, 0, apf_rundir_devices),
	FLD("threads", APF_F_U64_1, REQ, 0, NULL),
	END};
static const struct apf_event_field f_env_drift[] = {
	FLD("allowed", APF_F_TRUE, REQ, 0, NULL),
	FLD("fields", APF_F_DRIFTS, REQ, 0, NULL),
	END};
static const struct apf_event_field f_unsealed[] = {
	FLD("reason", APF_F_STR, REQ, APF_KEEP_NONE, NULL), END};
static const struct apf_event_field f_trial_start[] = {
	UNIT_FIELD,
	FLD("workload", APF_F_STR, REQ, 0, NULL),
	FLD("variant", APF_F_STR, REQ, 1, NULL),
	FLD("study", APF_F_U64, REQ, 0, NULL),
	FLD("trial", APF_F_U64_1, REQ, 1, NULL),
	FLD("hparams", APF_F_OBJ, REQ, 2, NULL),
	FLD("budget_ns", APF_F_U64_1, REQ, 3, NULL),
	FLD("eval_period_ns", APF_F_U64_1, REQ, 4, NULL),
	FLD("max_steps", APF_F_U64, REQ, 5, NULL),
	FLD("validation_target", APF_F_NUM, REQ, 0, NULL),
	FLD("test_target", APF_F_NUM, REQ, 1, NULL),
	FLD("metric", APF_F_STR, REQ, 3, NULL),
	FLD("direction", APF_F_ENUM, REQ, 0, apf_rundir_directions),
	FLD("init_allowance_ns", APF_F_U64_1, REQ, 6, NULL),
	END};
static const struct apf_event_field f_build[] = {
	UNIT_FIELD,
	FLD("so_sha256", APF_F_SHA, REQ, APF_KEEP_NONE, NULL),
	FLD("compiler", APF_F_STR, REQ, APF_KEEP_NONE, NULL),
	FLD("flags", APF_F_STRS, REQ, APF_KEEP_NONE, NULL),
	FLD("build_ns", APF_F_U64, REQ, 0, NULL),
	END};
static const struct apf_event_field f_clock_start[] = {
	UNIT_FIELD,
	FLD("init_ns", APF_F_U64, REQ, 0, NULL),
	FLD("submission_init_ns", APF_F_U64, REQ, 2, NULL),
	FLD("batch_size", APF_F_U64_1, REQ, 1, NULL),
	FLD("checkpoint", APF_F_CKPT, OPT, 1, NULL),
	FLD("memory_limit", APF_F_OBJ, REQ, APF_KEEP_NONE, NULL),
	END};
static const struct apf_event_field f_step_block[] = {
	UNIT_FIELD,
	FLD("first_step", APF_F_U64_1, REQ, 0, NULL),
	FLD("last_step", APF_F_U64, REQ, 1, NULL),
	FLD("start_ns", APF_F_U64, REQ, 2, NULL),
	FLD("end_ns", APF_F_U64, REQ, 3, NULL),
	FLD("accumulated_submission_ns", APF_F_U64, REQ, 4, NULL),
	FLD("cpu_ns", APF_F_U64, OPT, 5, NULL),
	FLD("wait_ns", APF_F_U64, OPT, 6, NULL),
	END};
static const struct apf_event_field f_eval[] = {
	UNIT_FIELD,
	FLD("index", APF_F_U64_1, REQ, 0, NULL),
	FLD("global_step", APF_F_U64, REQ, 1, NULL),
	FLD("start_ns", APF_F_U64, REQ, 2, NULL),
	FLD("end_ns", APF_F_U64, REQ, 3, NULL),
	FLD("accumulated_submission_ns", APF_F_U64, REQ, 4, NULL),
	FLD("accumulated_eval_ns", APF_F_U64, REQ, 5, NULL),
	FLD("accumulated_logging_ns", APF_F_U64, REQ, 6, NULL),
	FLD("total_duration_ns", APF_F_U64, REQ, 7, NULL),
	FLD("preemption_count", APF_F_U64, REQ, 8, NULL),
	FLD("metrics", APF_F_METRICS, REQ, 0, NULL),
	FLD("validation_target_met", APF_F_BOOL, REQ, 0, NULL),
	FLD("test_target_met", APF_F_BOOL, REQ, 1, NULL),
	FLD("checkpoint", APF_F_CKPT, REQ, 1, NULL),
	/* The trial's copy, from its eval report to "copied" (runner.h):
	 * inside the step block, so submission time; absent in logs from
	 * before it, read as 0. */
	FLD("copy_ns", APF_F_U64, OPT, 10, NULL),
	/* Why the trial reported: the cadence asked ("due"), the submission
	 * said it is done, or max_steps. Only the last two may come before
	 * the eval period; absent in logs from before it, read as "due". */
	FLD("why", APF_F_ENUM, OPT, 0, apf_rundir_eval_whys),
	/* The step count after which the supervisor asked for the eval (the
	 * control page's eval_at), so that a replay asks after the same step;
	 * absent when it was not asked (the first eval, given with the go; a
	 * complete or max_steps before it was due; logs from before it). */
	FLD("asked_after_step", APF_F_U64_1, OPT, 11, NULL),
	END};
static const struct apf_event_field f_sandbox_fault[] = {
	UNIT_FIELD,
	FLD("kind", APF_F_ENUM, REQ, 0, apf_rundir_fault_kinds),
	FLD("detail", APF_F_STR, REQ, APF_KEEP_NONE, NULL),
	END};
static const struct apf_event_field f_warning[] = {
	UNIT_FIELD,
	FLD("detail", APF_F_STR, REQ, APF_KEEP_NONE, NULL),
	END};
static const struct apf_event_field f_trial_end[] = {
	UNIT_FIELD,
	FLD("reason", APF_F_ENUM, REQ, 0, apf_rundir_reasons),
	FLD("failed", APF_F_BOOL, REQ, 0, NULL),
	FLD("global_step", APF_F_U64, REQ, 0, NULL),
	FLD("evals", APF_F_U64, REQ, 1, NULL),
	FLD("accumulated_submission_ns", APF_F_U64, REQ, 2, NULL),
	FLD("time_to_target_ns", APF_F_U64_NULL, REQ, 3, NULL),
	FLD("detail", APF_F_STR, OPT, APF_KEEP_NONE, NULL),
	END};
static const struct apf_event_field f_resume[] = {
	FLD("cut_bytes", APF_F_U64, REQ, 0, NULL),
	FLD("unit", APF_F_UNIT_NULL, REQ, 0, NULL),
	FLD("from_eval", APF_F_U64, REQ, 1, NULL),
	FLD("preemption_count", APF_F_U64_1, REQ, 2, NULL),
	END};
static const struct apf_event_field f_preempt[] = {
	UNIT_FIELD,
	FLD("signal", APF_F_ENUM, REQ, 0, apf_rundir_preempt_signals),
	FLD("after_eval", APF_F_U64_1, REQ, 0, NULL),
	END};
static const struct apf_event_field f_run_end[] = {
	FLD("units", APF_F_U64, REQ, 0, NULL),
	FLD("completed", APF_F_U64, REQ, 1, NULL),
	FLD("failed", APF_F_U64, REQ, 2, NULL),
	END};

const struct apf_event_def apf_rundir_events[APF_EV_COUNT] = {
	[APF_EV_RUN_START] = {"run_start", f_run_start},
	[APF_EV_ENV_DRIFT] = {"env_drift", f_env_drift},
	[APF_EV_UNSEALED] = {"unsealed", f_unsealed},
	[APF_EV_TRIAL_START] = {"trial_start", f_trial_start},
	[APF_EV_BUILD] = {"build", f_build},
	[APF_EV_CLOCK_START] = {"clock_start", f_clock_start},
	[APF_EV_STEP_BLOCK] = {"step_block", f_step_block},
	[APF_EV_EVAL] = {"eval", f_eval},
	[APF_EV_SANDBOX_FAULT] = {"sandbox_fault", f_sandbox_fault},
	[APF_EV_WARNING] = {"warning", f_warning},
	[APF_EV_TRIAL_END] = {"trial_end", f_trial_end},
	[APF_EV_RESUME] = {"resume", f_resume},
	[APF_EV_RUN_END] = {"run_end", f_run_end},
	[APF_EV_PREEMPT] = {"preempt", f_preempt},
};

int apf_rundir_event(const char *name)
{
	for (int i = 1; i < APF_EV_COUNT; i++)
		if (!strcmp(apf_rundir_events[i].name, name))
			return i;
	return APF_EV_UNKNOWN;
}

static int is_sha(const json_t *v)
{
	const char *s = json_string_value(v);
	if (!s || strlen(s) != 64)
		return 0;
	for (const char *p = s; *p; p++)
		if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f')))
			return 0;
	return 1;
}

static int is_u64(const json_t *v, json_int_t min)
{
	return json_is_integer(v) && json_integer_value(v) >= min;
}

static int strings_of(const json_t *o, const char *const *names, size_t n)
{
	if (!json_is_object(o) || json_object_size(o) != n)
		return 0;
	for (size_t i = 0; i < n; i++)
		if (!json_is_string(json_object_get(o, names[i])))
			return 0;
	return 1;
}

/* Whether v is of field f's type. */
static int of_type(const struct apf_event_field *f, const json_t *v)
{
	size_t i;
	const char *k;
	json_t *x;
	switch (f->type) {
	case APF_F_U64:
		return is_u64(v, 0);
	case APF_F_U64_1:
		return is_u64(v, 1);
	case APF_F_U64_NULL:
		return json_is_null(v) || is_u64(v, 0);
	case APF_F_SHA:
		return is_sha(v);
	case APF_F_STR:
	case APF_F_UNIT:
		return json_is_string(v);
	case APF_F_UNIT_NULL:
		return json_is_null(v) || json_is_string(v);
	case APF_F_BOOL:
		return json_is_boolean(v);
	case APF_F_TRUE:
		return json_is_true(v);
	case APF_F_NUM:
		return json_is_number(v);
	case APF_F_OBJ:
		return json_is_object(v);
	case APF_F_STRS:
		if (!json_is_array(v))
			return 0;
		json_array_foreach(v, i, x) if (!json_is_string(x)) return 0;
		return 1;
	case APF_F_ENUM:
		for (int e = 0; json_is_string(v) && f->values[e]; e++)
			if (!strcmp(json_string_value(v), f->values[e]))
				return 1;
		return 0;
	case APF_F_DRIFTS: {
		static const char *const names[] = {"field", "expected",
						    "actual"};
		if (!json_is_array(v) || !json_array_size(v))
			return 0;
		json_array_foreach(v, i, x) if (!strings_of(x, names, 3)) return 0;
		return 1;
	}
	case APF_F_METRICS:
		if (!json_is_object(v))
			return 0;
		json_object_foreach((json_t *)v, k, x) if (!json_is_number(x)) return 0;
		return 1;
	case APF_F_CKPT:
		return json_is_object(v) && json_object_size(v) == 3 &&
		       json_is_string(json_object_get(v, "file")) &&
		       is_sha(json_object_get(v, "sha256")) &&
		       is_u64(json_object_get(v, "bytes"), 0);
	}
	return 0;
}

int apf_rundir_event_check(const char *event, const json_t *fields)
{
	int ev = apf_rundir_event(event);
	if (ev == APF_EV_UNKNOWN)
		return apf_error(APF_EINTERNAL, "log",
				 "'%s' is not an event of the log", event);
	const struct apf_event_field *fs = apf_rundir_events[ev].fields;
	size_t known = 0;
	for (const struct apf_event_field *f = fs; f->name; f++) {
		const json_t *v = json_object_get(fields, f->name);
		if (!v && f->required)
			return apf_error(APF_EINTERNAL, "log",
					 "%s record without %s", event, f->name);
		if (v && !of_type(f, v))
			return apf_error(APF_EINTERNAL, "log",
					 "%s record: %s is not of its type",
					 event, f->name);
		known += v != NULL;
	}
	if (known != json_object_size(fields))
		return apf_error(APF_EINTERNAL, "log",
				 "%s record with a field its event does not have",
				 event);
	return 0;
}
