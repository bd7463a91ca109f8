/*
 * runs.c: what an apf run directory says of itself, for the scorer's
 * warnings (score.h, "what an apf run directory says of itself").
 *
 * run.json gives the plan's units and the machine; the logs (each unit's
 * own, or the single-log layout's RUN/log.jsonl), read with
 * pkg/runlog's reader (chain checked, records in order) and each unit's
 * records applied with pkg/rundir's apf_rundir_unit_apply (the story as a
 * resume reads it), gives which units started, ended or failed and whether
 * the last session ended with run_end. Nothing here is verified against a
 * signature: `apf score --verify` does that with the verifier, in cmd/apf.
 * Reading the log is best effort - a log that is missing, broken or torn is
 * recorded, not an error - because the scorer must still say what it can.
 */
#include "score/score.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "rundir/resume.h"
#include "rundir/rundir.h"
#include "runlog/runlog.h"

#define NOMEM(what) apf_error(APF_ENOMEM, what, "out of memory")

static void hw_free(struct apf_score_hardware *hw)
{
	free(hw->device);
	free(hw->cpu_model);
	free(hw->gpu_model);
}

void apf_score_run_free(apf_score_run *r)
{
	if (!r)
		return;
	for (size_t i = 0; i < r->nunits; i++) {
		free(r->units[i].name);
		free(r->units[i].dir_name);
		json_decref(r->units[i].evals);
	}
	free(r->units);
	free(r->log_error);
	free(r->submission);
	hw_free(&r->hw);
	free(r);
}

static long unit_find(const apf_score_run *r, const char *name)
{
	for (size_t i = 0; i < r->nunits; i++)
		if (!strcmp(r->units[i].name, name))
			return (long)i;
	return -1;
}

/* Adds a unit (unless its name is there already); *at its index. */
static int unit_add(apf_score_run *r, long study, const char *workload,
		    const char *variant, long trial, int planned, long *at)
{
	char name[512], dir[300];
	int n = apf_rundir_unit_name(name, sizeof name, study, workload,
				     variant, trial);
	if (n < 0 || (size_t)n >= sizeof name)
		return apf_error(APF_EINPUT, "run.json",
				 "unit name of %s too long", workload);
	long k = unit_find(r, name);
	if (k >= 0) {
		if (at)
			*at = k;
		return 0;
	}
	/* The workload directory is the unit name's middle component. */
	const char *a = strchr(name, '/'), *b = a ? strchr(a + 1, '/') : NULL;
	snprintf(dir, sizeof dir, "%.*s", b ? (int)(b - a - 1) : 0,
		 a ? a + 1 : "");
	struct apf_score_unit *nu =
		realloc(r->units, (r->nunits + 1) * sizeof *nu);
	if (!nu)
		return NOMEM("score");
	r->units = nu;
	struct apf_score_unit *u = &r->units[r->nunits];
	memset(u, 0, sizeof *u);
	u->name = apf_strdup(name);
	u->dir_name = apf_strdup(dir);
	u->study = study;
	u->trial = trial;
	u->planned = planned;
	if (!u->name || !u->dir_name) {
		free(u->name);
		free(u->dir_name);
		return NOMEM("score");
	}
	if (at)
		*at = (long)r->nunits;
	r->nunits++;
	return 0;
}

static char *dup_string(const json_t *v)
{
	return json_is_string(v) ? apf_strdup(json_string_value(v)) : NULL;
}

static long integer_or(const json_t *v, long none)
{
	return json_is_integer(v) && json_integer_value(v) >= 0
		       ? (long)json_integer_value(v)
		       : none;
}

/* The plan's units and the machine, as far as run.json has them. */
static int read_run_json(apf_score_run *r, const json_t *j)
{
	const json_t *units = json_object_get(json_object_get(j, "plan"),
					      "units");
	int rc = 0;
	if (json_is_array(units) && json_array_size(units) > 0) {
		r->plan_known = 1;
		size_t i;
		const json_t *u;
		json_array_foreach(units, i, u)
		{
			const char *w = json_string_value(
					   json_object_get(u, "workload")),
				   *v = json_string_value(
					   json_object_get(u, "variant"));
			long study = integer_or(json_object_get(u, "study"), -1),
			     trial = integer_or(json_object_get(u, "trial"), -1);
			if (!w || !v || study < 0 || trial < 0) {
				r->plan_known = 0;
				continue;
			}
			if ((rc = unit_add(r, study, w, v, trial, 1, NULL)))
				return rc;
		}
		r->nplanned = r->nunits;
	}
	struct apf_score_hardware *hw = &r->hw;
	const json_t *env = json_object_get(j, "environment"),
		     *cpu = json_object_get(env, "cpu"),
		     *gpus = json_object_get(env, "gpus");
	const char *digest = json_string_value(json_object_get(
		json_object_get(j, "entry"), "manifest_sha256"));
	if (digest && strlen(digest) == 64 &&
	    strspn(digest, "0123456789abcdef") == 64)
		memcpy(r->entry_manifest, digest, 65);
	const json_t *sub = json_object_get(j, "submission");
	if (json_is_string(sub) && json_string_length(sub) > 0 &&
	    !(r->submission = apf_strdup(json_string_value(sub))))
		return NOMEM("score");
	hw->device = dup_string(json_object_get(j, "device"));
	hw->threads = integer_or(json_object_get(j, "threads"), -1);
	hw->cpu_model = dup_string(json_object_get(cpu, "model"));
	hw->cpu_cores = integer_or(json_object_get(cpu, "cores"), -1);
	hw->gpus = -1;
	if (json_is_array(gpus)) {
		apf_buf b = {0};
		size_t i;
		const json_t *g;
		rc = apf_buf_puts(&b, "");
		json_array_foreach(gpus, i, g)
		{
			const char *name =
				json_string_value(json_object_get(g, "name"));
			if (!rc && i)
				rc = apf_buf_puts(&b, ", ");
			if (!rc)
				rc = apf_buf_puts(&b, name ? name : "?");
		}
		if (rc) {
			apf_buf_free(&b);
			return NOMEM("score");
		}
		hw->gpu_model = b.data;
		hw->gpus = (long)json_array_size(gpus);
	}
	return 0;
}

/* The log walk's state: each unit's story beside the run's units. */
struct walk {
	apf_score_run *r;
	struct apf_rundir_unit *story; /* parallel to r->units */
	size_t nstory;
	int open;       /* a run_start not yet closed by run_end */
	int seen_start;
};

static int story_grow(struct walk *w)
{
	if (w->nstory == w->r->nunits)
		return 0;
	struct apf_rundir_unit *ns =
		realloc(w->story, w->r->nunits * sizeof *ns);
	if (!ns)
		return NOMEM("score");
	w->story = ns;
	while (w->nstory < w->r->nunits)
		apf_rundir_unit_init(&w->story[w->nstory++]);
	return 0;
}

static int on_record(void *user, const struct apf_runlog_record *rec)
{
	struct walk *w = user;
	const json_t *o = rec->obj;
	if (!strcmp(rec->event, "run_start")) {
		w->open = w->seen_start = 1;
		return 0;
	}
	if (!strcmp(rec->event, "run_end")) {
		w->open = 0;
		return 0;
	}
	if (!strcmp(rec->event, "step_block")) {
		const json_t *wait = json_object_get(o, "wait_ns");
		json_int_t s0 = json_integer_value(json_object_get(o, "start_ns")),
			   s1 = json_integer_value(json_object_get(o, "end_ns"));
		w->r->blocks++;
		if (json_is_integer(wait) && s1 >= s0 &&
		    apf_clock_short((uint64_t)(s1 - s0),
				    (uint64_t)json_integer_value(wait),
				    w->r->hw.threads))
			w->r->short_blocks++;
	}
	const char *unit = json_string_value(json_object_get(o, "unit"));
	if (!unit)
		return 0;
	long k = unit_find(w->r, unit);
	if (k < 0 && !strcmp(rec->event, "trial_start")) {
		/* A unit the plan does not list (the verifier refuses it;
		 * here it is counted like any other). */
		const char *wl = json_string_value(
				   json_object_get(o, "workload")),
			   *v = json_string_value(json_object_get(o, "variant"));
		long study = integer_or(json_object_get(o, "study"), -1),
		     trial = integer_or(json_object_get(o, "trial"), -1);
		if (wl && v && study >= 0 && trial >= 0) {
			int rc = unit_add(w->r, study, wl, v, trial, 0, &k);
			if (rc)
				return rc;
			if (strcmp(w->r->units[k].name, unit))
				k = -1;
		}
	}
	if (k < 0)
		return 0;
	int rc = story_grow(w);
	if (rc)
		return rc;
	struct apf_score_unit *u = &w->r->units[k];
	apf_rundir_unit_apply(&w->story[k], rec->event, o);
	const char *s;
	if (!strcmp(rec->event, "sandbox_fault") &&
	    (s = json_string_value(json_object_get(o, "kind"))))
		snprintf(u->fault, sizeof u->fault, "%s", s);
	else if (!strcmp(rec->event, "trial_end") &&
		 (s = json_string_value(json_object_get(o, "reason"))))
		snprintf(u->reason, sizeof u->reason, "%s", s);
	else if (!strcmp(rec->event, "resume"))
		u->reason[0] = u->fault[0] = '\0';
	else if (!strcmp(rec->event, "warning") && u->warnings++ == 0 &&
		 (s = json_string_value(json_object_get(o, "detail"))))
		snprintf(u->warning, sizeof u->warning, "%s", s);
	return 0;
}

/* Reads one log into the walk; a torn or broken log is recorded. *closed:
 * it began with run_start and its last session ended. */
static int read_one_log(apf_score_run *r, struct walk *w, const char *path,
			int *closed)
{
	w->open = w->seen_start = 0;
	int rc = story_grow(w);
	struct apf_runlog_summary sum = {0};
	if (!rc)
		rc = apf_runlog_read(&sum, path, on_record, w);
	if (rc == APF_ENOMEM) {
		/* Nothing to report but that. */
	} else if (rc && sum.torn_bytes) {
		r->log_torn = 1;
		apf_error_clear();
		rc = 0;
	} else if (rc && !r->log_error) {
		r->log_error = apf_strdup(apf_error_message());
		apf_error_clear();
		rc = r->log_error ? 0 : NOMEM(path);
	} else if (rc) {
		apf_error_clear();
		rc = 0;
	}
	*closed = w->seen_start && !w->open;
	return rc;
}

/* The single-log layout's RUN/log.jsonl, or each planned unit's own log
 * (rundir.h): which units started, ended, failed. */
static int read_log(apf_score_run *r, const char *dir)
{
	char *path = apf_path_join(dir, "log.jsonl");
	char *index = apf_path_join(dir, APF_RUNDIR_INDEX_FILE);
	if (!path || !index) {
		free(path);
		free(index);
		return NOMEM(dir);
	}
	struct stat st;
	struct walk w = {.r = r};
	int rc = 0, all_closed = 1, logs = 0;
	if (lstat(path, &st) == 0) {
		r->log_found = 1;
		logs = 1;
		rc = read_one_log(r, &w, path, &all_closed);
	} else if (lstat(index, &st) == 0) {
		r->log_found = 1;
		size_t n = r->nplanned;
		for (size_t i = 0; !rc && i < n; i++) {
			char *unit = apf_path_join(dir, r->units[i].name);
			char *p = unit ? apf_path_join(unit, "log.jsonl") : NULL;
			free(unit);
			if (!p) {
				rc = NOMEM(dir);
				break;
			}
			int closed = 0;
			if (lstat(p, &st) == 0) {
				logs++;
				rc = read_one_log(r, &w, p, &closed);
				all_closed &= closed;
			}
			free(p);
		}
	}
	if (!rc)
		rc = story_grow(&w);
	if (!rc) {
		r->ended = logs && all_closed && !r->log_torn && !r->log_error;
		for (size_t i = 0; i < r->nunits; i++) {
			const struct apf_rundir_unit *s = &w.story[i];
			r->units[i].state =
				!s->started ? APF_SCORE_UNIT_NOT_RUN
				: !s->ended ? APF_SCORE_UNIT_INTERRUPTED
				: s->failed ? APF_SCORE_UNIT_FAILED
					    : APF_SCORE_UNIT_ENDED;
			r->units[i].evals = json_incref(s->rows);
			r->units[i].batch_size = s->batch_size;
			r->units[i].budget_ns = s->budget_ns;
		}
	}
	for (size_t i = 0; i < w.nstory; i++)
		apf_rundir_unit_free(&w.story[i]);
	free(w.story);
	free(path);
	free(index);
	return rc;
}

int apf_score_read_run(apf_score_run **out, const char *dir)
{
	*out = NULL;
	apf_score_run *r = apf_calloc(1, sizeof *r);
	char *path = apf_path_join(dir, "run.json");
	if (!r || !path) {
		free(r);
		free(path);
		return NOMEM(dir);
	}
	r->hw.cpu_cores = r->hw.threads = r->hw.gpus = -1;
	/* Read as the verifier reads it: a regular file inside the run, of
	 * at most its cap (a FIFO or a file of gigabytes is refused, not
	 * waited on or read). */
	char *text = NULL;
	size_t len = 0;
	json_error_t err;
	json_t *j = NULL;
	int rc = apf_file_read_beneath(&text, &len, dir, "run.json",
				       APF_MAX_RUN_JSON_BYTES, 0);
	if (!rc && !(j = json_loadb(text, len, JSON_REJECT_DUPLICATES, &err)))
		rc = apf_error(APF_EINPUT, path, "line %d: %s", err.line,
			       err.text);
	else if (!rc && !json_is_object(j))
		rc = apf_error(APF_EINPUT, path, "not a JSON object");
	free(text);
	if (!rc)
		rc = read_run_json(r, j);
	if (!rc) {
		r->clock = apf_clock_of_run(j);
		r->budget_scale = apf_budget_scale_of_run(j);
		r->numerics = apf_numerics_of_run(j);
	}
	json_decref(j);
	free(path);
	if (!rc)
		rc = read_log(r, dir);
	for (size_t i = 0; !rc && i < r->nunits; i++) {
		char *csv = apf_path_join(dir, r->units[i].name);
		char *f = csv ? apf_path_join(csv, "eval_measurements.csv")
			      : NULL;
		struct stat st;
		if (!f)
			rc = NOMEM(dir);
		else
			r->units[i].has_csv =
				stat(f, &st) == 0 && S_ISREG(st.st_mode);
		free(csv);
		free(f);
	}
	if (rc) {
		apf_score_run_free(r);
		return rc;
	}
	*out = r;
	return 0;
}

/* ---- the machine ---------------------------------------------------------- */

int apf_score_hardware_describe(apf_buf *out,
				const struct apf_score_hardware *hw)
{
	int rc = apf_buf_printf(out, "%s %s", hw->device ? hw->device : "?",
				hw->cpu_model ? hw->cpu_model : "unknown CPU");
	if (!rc && hw->cpu_cores >= 0)
		rc = apf_buf_printf(out, " (%ld core%s)", hw->cpu_cores,
				    hw->cpu_cores == 1 ? "" : "s");
	if (!rc && hw->threads >= 0)
		rc = apf_buf_printf(out, ", %ld thread%s", hw->threads,
				    hw->threads == 1 ? "" : "s");
	if (!rc)
		rc = hw->gpus < 0    ? apf_buf_puts(out, ", GPUs unknown")
		     : hw->gpus == 0 ? apf_buf_puts(out, ", no GPU")
				     : apf_buf_printf(out, ", %ld x GPU %s",
						      hw->gpus, hw->gpu_model);
	return rc ? NOMEM("score") : 0;
}

/* One field's value of a machine, as the messages write it. */
static void hw_value(const struct apf_score_hardware *hw, int field,
		     char *out, size_t size)
{
	const char *s = NULL;
	long v = -1;
	switch (field) {
	case 0:
		s = hw->device;
		break;
	case 1:
		s = hw->cpu_model;
		break;
	case 2:
		v = hw->cpu_cores;
		break;
	case 3:
		v = hw->threads;
		break;
	case 4:
		s = hw->gpu_model ? (*hw->gpu_model ? hw->gpu_model : "none")
				  : NULL;
		break;
	default:
		v = hw->gpus;
	}
	if ((field == 2 || field == 3 || field == 5) && v >= 0)
		snprintf(out, size, "%ld", v);
	else if (field == 2 || field == 3 || field == 5)
		snprintf(out, size, "unknown");
	else
		snprintf(out, size, "%s", s ? s : "unknown");
}

int apf_score_hardware_compare(char ***out, size_t *n,
			       const char *const *names,
			       const struct apf_score_hardware *const *hw,
			       size_t nruns)
{
	static const char *const field[] = {"device",  "cpu.model",
					    "cpu.cores", "threads",
					    "gpu.model", "gpu.count"};
	*out = NULL;
	*n = 0;
	char **v = NULL;
	size_t k = 0;
	for (int f = 0; f < 6; f++) {
		char a[256], b[256];
		int differ = 0;
		hw_value(hw[0], f, a, sizeof a);
		for (size_t i = 1; i < nruns && !differ; i++) {
			hw_value(hw[i], f, b, sizeof b);
			differ = strcmp(a, b) != 0;
		}
		if (!differ)
			continue;
		apf_buf m = {0};
		int rc = apf_buf_printf(&m, "runs differ in %s (", field[f]);
		for (size_t i = 0; !rc && i < nruns; i++) {
			hw_value(hw[i], f, b, sizeof b);
			rc = apf_buf_printf(&m, "%s%s: %s", i ? "; " : "",
					    names[i], b);
		}
		if (!rc)
			rc = apf_buf_puts(&m, "): time-to-target is comparable "
					      "only on the same hardware");
		char **nv = rc ? NULL : realloc(v, (k + 1) * sizeof *nv);
		if (!nv) {
			apf_buf_free(&m);
			for (size_t i = 0; i < k; i++)
				free(v[i]);
			free(v);
			return NOMEM("score");
		}
		v = nv;
		v[k++] = m.data;
	}
	*out = v;
	*n = k;
	return 0;
}
