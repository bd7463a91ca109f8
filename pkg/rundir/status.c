/*
 * status.c: where each unit of a run directory stands (`apf status`), from
 * run.json's plan, the units' logs (or the single-log layout's one log), the
 * index and the units' locks. Nothing is verified here: `apf verify` does
 * that; this answers "how far along is it" while a run is under way, so a
 * torn or unreadable log is reported, not an error.
 */
#include "rundir/rundir.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "rundir/resume.h"
#include "runlog/runlog.h"
#include "sign/sign.h"

struct unit_walk {
	const char *only;          /* the single-log layout: this unit's records */
	struct apf_rundir_unit st;
	int64_t budget_ns;
	int sessions;
};

static int on_record(void *user, const struct apf_runlog_record *rec)
{
	struct unit_walk *w = user;
	const char *unit = json_string_value(json_object_get(rec->obj, "unit"));
	if (!strcmp(rec->event, "run_start") && !w->only)
		w->sessions++;
	if (!unit || (w->only && strcmp(unit, w->only)))
		return 0;
	if (!strcmp(rec->event, "trial_start"))
		w->budget_ns = json_integer_value(json_object_get(rec->obj, "budget_ns"));
	apf_rundir_unit_apply(&w->st, rec->event, rec->obj);
	return 0;
}

/* Whether a process holds the unit's .running lock (it is running; its
 * .lock may be held by a runner that has it queued). */
static int unit_locked(const char *dir)
{
	char *p = apf_path_join(dir, ".running");
	int fd = p ? open(p, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK) : -1;
	free(p);
	if (fd < 0)
		return 0;
	int held = flock(fd, LOCK_SH | LOCK_NB) != 0 && errno == EWOULDBLOCK;
	close(fd);
	return held;
}

static json_t *number_or_null(int64_t ns)
{
	return ns >= 0 ? json_real((double)ns / 1e9) : json_null();
}

int apf_rundir_check(const char *dir)
{
	char *p = apf_path_join(dir, "run.json");
	if (!p)
		return apf_error(APF_ENOMEM, dir, "out of memory");
	struct stat st;
	int absent = lstat(p, &st) != 0 && (errno == ENOENT || errno == ENOTDIR);
	free(p);
	return absent ? apf_error(APF_EINPUT, dir,
				  "not a run directory (no run.json)")
		      : 0;
}

int apf_rundir_status(json_t **out, const char *run_dir)
{
	*out = NULL;
	int rc0 = apf_rundir_check(run_dir);
	if (rc0)
		return rc0;
	char *rj_path = apf_path_join(run_dir, "run.json");
	char *single = apf_path_join(run_dir, "log.jsonl");
	if (!rj_path || !single) {
		free(rj_path);
		free(single);
		return apf_error(APF_ENOMEM, run_dir, "out of memory");
	}
	char *text = NULL;
	size_t len = 0;
	int rc = apf_file_read_beneath(&text, &len, run_dir, "run.json",
				       APF_MAX_RUN_JSON_BYTES, 0);
	json_error_t je;
	json_t *rj = rc ? NULL : json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
	free(text);
	json_t *plan = json_object_get(json_object_get(rj, "plan"), "units");
	if (!rc && !json_is_array(plan))
		rc = apf_error(APF_EINPUT, rj_path,
			       "not a run.json with plan.units");
	struct stat st;
	int is_single = lstat(single, &st) == 0;
	json_t *index = NULL;
	if (!rc && !is_single) {
		/* Read, not verified: the units it names. */
		char *it = NULL;
		size_t il = 0;
		struct apf_dsse d = {0};
		if (!apf_file_read_beneath(&it, &il, run_dir,
					   APF_RUNDIR_INDEX_FILE,
					   APF_MAX_RUN_JSON_BYTES,
					   APF_FILE_MISSING_OK) &&
		    it && !apf_dsse_parse(&d, it, il)) {
			json_t *p = json_loadb((const char *)d.payload,
					       d.payload_len, 0, NULL);
			index = json_incref(json_object_get(p, "units"));
			json_decref(p);
		}
		apf_error_clear();
		apf_dsse_free(&d);
		free(it);
	}
	json_t *units = json_array();
	size_t counts[5] = {0};
	static const char *const states[] = {"pending", "running", "done",
					     "failed", "preempted"};
	size_t i;
	json_t *pu;
	json_array_foreach(rc ? NULL : plan, i, pu)
	{
		const char *w = json_string_value(json_object_get(pu, "workload"));
		const char *v = json_string_value(json_object_get(pu, "variant"));
		char name[512];
		int n = apf_rundir_unit_name(
			name, sizeof name,
			(long)json_integer_value(json_object_get(pu, "study")),
			w ? w : "?", v,
			(long)json_integer_value(json_object_get(pu, "trial")));
		if (n < 0 || (size_t)n >= sizeof name || !w)
			continue;
		struct unit_walk uw = {.only = is_single ? name : NULL,
				       .budget_ns = -1};
		apf_rundir_unit_init(&uw.st);
		char *dir = apf_path_join(run_dir, name);
		char *log = is_single ? apf_strdup(single)
			    : dir     ? apf_path_join(dir, "log.jsonl")
				      : NULL;
		int has_log = log && lstat(log, &st) == 0;
		const char *problem = NULL;
		struct apf_runlog_summary sum = {0};
		if (has_log) {
			const struct apf_runlog_read_opts ro = {
				.fn = on_record, .user = &uw, .json = 1};
			int lrc = apf_runlog_walk(&sum, log, &ro);
			if (lrc && sum.torn_bytes)
				problem = "its log ends in a torn line";
			else if (lrc)
				problem = "its log cannot be read";
			apf_error_clear();
		}
		int locked = dir && unit_locked(dir);
		int s = locked			  ? 1
			: !uw.st.started	  ? 0
			: uw.st.ended && !uw.st.failed ? 2
			: uw.st.ended		  ? 3
						  : 4;
		counts[s]++;
		json_t *u = json_pack(
			"{s:s, s:s, s:I, s:o, s:o, s:I, s:b}", "unit", name,
			"state", states[s], "evals", (json_int_t)uw.st.last_eval,
			"submission_s",
			uw.st.started ? number_or_null((int64_t)uw.st.sub_ns)
				      : json_null(),
			"budget_s", number_or_null(uw.budget_ns), "preemptions",
			(json_int_t)uw.st.preemptions, "indexed",
			!is_single && json_object_get(index, name) != NULL);
		/* As the scorer counts it: under the budget only. */
		if (u && apf_rundir_ttt_counts(uw.st.time_to_target_ns,
					       uw.st.budget_ns))
			json_object_set_new(u, "time_to_target_s",
					    number_or_null(uw.st.time_to_target_ns));
		if (u && problem)
			json_object_set_new(u, "problem", json_string(problem));
		/* A Slurm array task's job and task (apf run --slurm). */
		char *sl = NULL;
		size_t sll = 0;
		char rel[600];
		snprintf(rel, sizeof rel, "%s/slurm.json", name);
		if (u && !apf_file_read_beneath(&sl, &sll, run_dir, rel,
						APF_MAX_SMALL_JSON_BYTES,
						APF_FILE_MISSING_OK) &&
		    sl) {
			json_t *sj = json_loadb(sl, sll, 0, NULL);
			if (json_is_object(sj))
				json_object_set(u, "slurm", sj);
			json_decref(sj);
		}
		apf_error_clear();
		free(sl);
		json_array_append_new(units, u);
		apf_rundir_unit_free(&uw.st);
		free(dir);
		free(log);
	}
	/* The directory as the user named it, made valid UTF-8 (jansson
	 * refuses anything else): a name that is not must not turn the
	 * status into an error. */
	apf_buf shown = {0};
	if (!rc)
		rc = apf_buf_utf8(&shown, run_dir);
	if (!rc) {
		*out = json_pack("{s:s, s:s, s:I, s:{s:I, s:I, s:I, s:I, s:I}, s:O}",
				 "run_dir", shown.data, "layout",
				 is_single ? "single-log" : "per-unit", "units_planned",
				 (json_int_t)json_array_size(plan), "counts",
				 "pending", (json_int_t)counts[0], "running",
				 (json_int_t)counts[1], "done", (json_int_t)counts[2],
				 "failed", (json_int_t)counts[3], "preempted",
				 (json_int_t)counts[4], "units", units);
		if (!*out)
			rc = apf_error(APF_ENOMEM, run_dir, "out of memory");
	}
	apf_buf_free(&shown);
	json_decref(units);
	json_decref(index);
	json_decref(rj);
	free(rj_path);
	free(single);
	return rc;
}
