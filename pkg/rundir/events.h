/*
 * events.h: the log's records (manifests/log-events.schema.json) as one
 * table - each event's fields, their types, which are required and which
 * values an enum takes - shared by the writer (pkg/runner checks every
 * record against it before appending it) and the verifier's form check
 * (verify/records.c), so that the two cannot drift apart.
 */
#ifndef APF_RUNDIR_EVENTS_H
#define APF_RUNDIR_EVENTS_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

/* The events of manifests/log-events.schema.json. */
enum apf_event {
	APF_EV_UNKNOWN = 0,
	APF_EV_RUN_START,
	APF_EV_ENV_DRIFT,
	APF_EV_UNSEALED,
	APF_EV_TRIAL_START,
	APF_EV_BUILD,
	APF_EV_CLOCK_START,
	APF_EV_STEP_BLOCK,
	APF_EV_EVAL,
	APF_EV_SANDBOX_FAULT,
	APF_EV_WARNING,
	APF_EV_TRIAL_END,
	APF_EV_RESUME,
	APF_EV_RUN_END,
	APF_EV_PREEMPT,
	APF_EV_COUNT
};

enum apf_event_ftype {
	APF_F_U64,       /* integer >= 0 */
	APF_F_U64_1,     /* integer >= 1 */
	APF_F_U64_NULL,  /* integer >= 0 or null  */
	APF_F_SHA,       /* 64 lowercase hex digits */
	APF_F_STR,
	APF_F_BOOL,
	APF_F_TRUE,
	APF_F_NUM,
	APF_F_OBJ,
	APF_F_STRS,      /* array of strings */
	APF_F_UNIT,
	APF_F_UNIT_NULL,
	APF_F_ENUM,
	APF_F_DRIFTS,    /* env_drift's fields */
	APF_F_METRICS,   /* object of numbers */
	APF_F_CKPT,      /* {file, sha256, bytes} */
};

/* A field's checker slot that keeps nothing. */
#define APF_KEEP_NONE 0xff

struct apf_event_field {
	const char *name;
	uint8_t len;
	uint8_t type;     /* enum apf_event_ftype */
	uint8_t required;
	uint8_t at;       /* the verifier's slot for the value: u[] for
			   * integers, a flags bit for booleans, tok[] for
			   * strings and objects, d[] for numbers */
	const char *const *values; /* APF_F_ENUM: NULL-terminated */
};

struct apf_event_def {
	const char *name;
	const struct apf_event_field *fields; /* ends with a NULL name */
};
extern const struct apf_event_def apf_rundir_events[APF_EV_COUNT];

/* The values of the enum fields, NULL-terminated, in the order the
 * verifier's reasons (trial_end) follow. */
extern const char *const apf_rundir_devices[];     /* run_start.device */
extern const char *const apf_rundir_directions[];  /* trial_start.direction */
extern const char *const apf_rundir_fault_kinds[]; /* sandbox_fault.kind */
extern const char *const apf_rundir_reasons[];     /* trial_end.reason */
extern const char *const apf_rundir_preempt_signals[]; /* preempt.signal */
extern const char *const apf_rundir_eval_whys[];       /* eval.why */

/* The event of a record's name; APF_EV_UNKNOWN when none. */
int apf_rundir_event(const char *name);

/* Whether a record's fields (the object the writer is about to append,
 * "unit" included) are of its event's form: every required field there,
 * none unknown, each of its type. 0, or APF_EINTERNAL naming the event and
 * field (a runner about to write what its verifier would refuse). */
int apf_rundir_event_check(const char *event, const json_t *fields);

#endif
