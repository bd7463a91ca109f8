/*
 * unit.c: one unit of a run from the supervisor's side - its records,
 * timing, evaluations, checkpoints and decisions (see runner.h for the
 * sequence). The trial process itself is hosted through pkg/host and
 * evaluated through pkg/eval, which the verifier's audits use too.
 *
 * Timing is the supervisor's: a running interval starts just before the
 * trial is resumed after "go" and ends when the trial is frozen again,
 * which the supervisor does once the trial has reported its eval and
 * brought the shared arena up to date ("copied": a download from the
 * device, nothing on the CPU). Everything the trial does while it runs is
 * submission time, the copy included; no word of the trial's stops its
 * clock. Evaluation and logging happen while the trial is frozen and are
 * accounted apart.
 */
#include "runner/runner.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "entry/entry.h"
#include "eval/eval.h"
#include "hash/hash.h"
#include "host/host.h"
#include "rundir/events.h"
#include "rundir/rundir.h"
#include "runlog/runlog.h"
#include "runner/internal.h"
#include "sandbox/sandbox.h"
#include "tuning/tuning.h"
#include "wire/wire.h"
#include "workload/workload.h"

struct unit {
	struct run *r;
	size_t index;
	const struct apf_plan_unit *pu;
	struct apf_rundir_unit *st;
	char name[512];
	char *dir, *work;
	apf_host *host;
	const struct apf_host_unit *hu;
	apf_evaluator *ev;
	uint64_t grace_ns;
	uint64_t sub_ns, eval_ns, log_ns;
	int64_t evals, global_step, preemptions;
	uint64_t interval_start, last_eval_end;
	/* The interval's start on the unit's clock, and the trial's CPU time
	 * and run-queue wait there (apf_host_usage). */
	uint64_t interval_clock, cpu_start, wait_start;
	int64_t short_blocks; /* blocks short of cores (apf_clock_short) */
	uint64_t copy_ns; /* the last eval's copy: its report to "copied" */
	int64_t time_to_target_ns;
	int ended;
	int preempted; /* checkpointed at a preemption's eval and stopped */
	int warn_rc; /* a warning's record could not be written */
	double last_val, best_val; /* validation metric: last eval, best */
};

static int sign_head(struct run *r)
{
	return apf_rundir_sign_head(r->unit_dir, r->key, r->run_json_sha256,
				    r->log);
}

/* ---- records ---------------------------------------------------------------- */

static int record(struct unit *u, const char *event, json_t *fields, int sync)
{
	json_object_set_new(fields, "unit", json_string(u->name));
	/* "unit" first: move it to the front for readability. */
	json_t *ordered = json_object();
	json_object_set(ordered, "unit", json_object_get(fields, "unit"));
	const char *k;
	json_t *v;
	json_object_foreach(fields, k, v)
	{
		if (strcmp(k, "unit"))
			json_object_set(ordered, k, v);
	}
	/* The runner never writes what its verifier would refuse. */
	int rc = apf_rundir_event_check(event, ordered);
	if (!rc)
		rc = apf_runlog_append(u->r->log, apf_now_ns(), event, ordered,
				       sync);
	json_decref(ordered);
	json_decref(fields);
	return rc;
}

static int end_trial(struct unit *u, const char *reason, int failed,
		     const char *detail)
{
	if (u->ended)
		return 0;
	u->ended = 1;
	json_t *f = json_pack("{s:s, s:b, s:I, s:I, s:I, s:o}", "reason", reason,
			      "failed", failed, "global_step",
			      (json_int_t)u->global_step, "evals",
			      (json_int_t)u->evals, "accumulated_submission_ns",
			      (json_int_t)u->sub_ns, "time_to_target_ns",
			      u->time_to_target_ns >= 0
				      ? json_integer(u->time_to_target_ns)
				      : json_null());
	if (detail)
		json_object_set_new(f, "detail", json_string(detail));
	int rc = record(u, "trial_end", f, 1);
	if (!rc)
		rc = sign_head(u->r);
	if (failed)
		u->r->failed++;
	else
		u->r->completed++;
	/* A target met only at the eval at or past the budget is logged (the
	 * log says what happened) but counts for nothing. */
	int counted = apf_rundir_ttt_counts(u->time_to_target_ns,
					    u->hu->budget_ns);
	const struct apf_run_opts *o = u->r->o;
	if (o->unit_end) {
		struct apf_run_unit_end e = {
			.unit = u->name,
			.failed = failed,
			.reason = reason,
			.detail = failed ? detail : NULL,
			.time_to_target_s = counted
						    ? (double)u->time_to_target_ns / 1e9
						    : -1,
			.submission_s = (double)u->sub_ns / 1e9,
			.evals = u->evals,
			.global_step = u->global_step,
			.metric = u->hu->spec->metric,
			.best_validation = u->best_val,
			.target = u->hu->validation_target};
		o->unit_end(o->user, &e);
	}
	if (failed)
		apf_runner_notice(u->r, "%s: failed: %s", u->name, reason);
	else if (u->time_to_target_ns >= 0 && !counted)
		apf_runner_notice(u->r,
				  "%s: %s: validation target met only at the "
				  "eval at %.4g s, past the budget of %.4g s: "
				  "not counted (%s %.4f, target %.4f), %lld "
				  "evals",
				  u->name, reason,
				  (double)u->time_to_target_ns / 1e9,
				  (double)u->hu->budget_ns / 1e9,
				  u->hu->spec->metric, u->best_val,
				  u->hu->validation_target, (long long)u->evals);
	else if (u->time_to_target_ns >= 0)
		apf_runner_notice(u->r,
				  "%s: %s: validation target met at %.4g s of "
				  "submission time (%s %.4f, target %.4f), %lld "
				  "evals",
				  u->name, reason,
				  (double)u->time_to_target_ns / 1e9,
				  u->hu->spec->metric, u->best_val,
				  u->hu->validation_target, (long long)u->evals);
	else
		apf_runner_notice(u->r,
				  "%s: %s: validation target not met in %.4g s "
				  "(best %s %.4f, target %.4f), %lld evals",
				  u->name, reason, (double)u->sub_ns / 1e9,
				  u->hu->spec->metric, u->best_val,
				  u->hu->validation_target, (long long)u->evals);
	/* Under the cpu clock the wait is not counted: nothing to say. */
	if (u->short_blocks > 0 && u->r->clock == APF_CLOCK_WALL)
		apf_runner_notice(u->r,
				  "%s: %lld of %lld step blocks short of cores "
				  "(the trial's threads waited over %.0f%% of "
				  "their time for one: this machine ran other "
				  "work); its wall-clock times count the wait "
				  "(apf run --clock cpu does not)",
				  u->name, (long long)u->short_blocks,
				  (long long)u->evals,
				  100 * APF_CLOCK_SHORT_SHARE);
	if (detail && failed) {
		/* The detail is the trial's or the compiler's text. */
		char safe[4 * 1024];
		apf_text_escape(safe, sizeof safe, detail);
		apf_runner_notice(u->r, "%s: %s", u->name, safe);
	}
	return rc;
}

static int fault(struct unit *u, const char *kind, const char *detail)
{
	json_t *f = json_pack("{s:s, s:s}", "kind", kind, "detail", detail);
	int rc = record(u, "sandbox_fault", f, 1);
	int rc2 = end_trial(u, "fault", 1, detail);
	return rc ? rc : rc2;
}

/* Logs how the trial ended (the host says) and ends the unit. */
static int record_ending(struct unit *u)
{
	const char *detail = NULL;
	const char *kind = apf_host_ending(u->host, &detail);
	if (!kind)
		return apf_error(APF_EINTERNAL, "run", "no ending to record");
	if (!strcmp(kind, "error"))
		return end_trial(u, "error", 1, detail);
	return fault(u, kind, detail);
}

/* Compiles the submission inside a sandbox in its setup phase and logs
 * the build; detail says why it failed (empty: it did not). */
static int build(struct unit *u, char *detail, size_t size)
{
	uint64_t t0 = apf_now_ns();
	char hex[65];
	int rc = apf_host_build(u->host, detail, size, hex);
	if (rc || detail[0])
		return rc;
	json_t *flags = json_array();
	for (const char *const *f = apf_submission_cflags; *f; f++)
		json_array_append_new(flags, json_string(*f));
	char compiler[200] = "cc";
	FILE *p = popen("cc --version 2>/dev/null", "r");
	if (p) {
		if (fgets(compiler, sizeof compiler, p))
			compiler[strcspn(compiler, "\n")] = 0;
		pclose(p);
	}
	json_t *f = json_pack("{s:s, s:s, s:o, s:I}", "so_sha256", hex,
			      "compiler", compiler, "flags", flags, "build_ns",
			      (json_int_t)(apf_now_ns() - t0));
	return record(u, "build", f, 0);
}


/* ---- evaluation and checkpoint -------------------------------------------------- */

static int checkpoint(struct unit *u, char *hex, uint64_t *bytes)
{
	const void *view = apf_host_arena_view(u->host);
	const struct apf_arena_header *h = view;
	int rc = apf_arena_check(view, u->hu->capacity);
	if (rc)
		return rc;
	*bytes = h->used;
	char name[64];
	apf_rundir_ckpt_name(name, sizeof name, NULL, (uint64_t)u->evals);
	char *path = apf_path_join(u->dir, name);
	rc = path ? apf_file_write(path, view, h->used, 0644, 0)
		  : apf_error(APF_ENOMEM, "run", "out of memory");
	free(path);
	uint8_t d[APF_SHA256_LEN];
	if (!rc)
		rc = apf_sha256_buf(d, view, h->used);
	if (!rc)
		apf_hex(hex, d, sizeof d);
	return rc;
}


/* Why the unit stops after an eval with these flags, or NULL. */
static const char *stop_reason(const struct unit *u, int val_met, int test_met,
			       enum apf_proto_why why)
{
	return u->sub_ns >= u->hu->budget_ns ? "budget"
	       : val_met && test_met	      ? "targets"
	       : why == APF_WHY_COMPLETE      ? "complete"
	       : why == APF_WHY_MAX_STEPS     ? "max_steps"
					      : NULL;
}

/* The eval record of an eval that ended at eval_end with metrics m. */
static json_t *eval_record(const struct unit *u, int64_t step, uint64_t t_end,
			   uint64_t eval_end, json_t *m, int val_met,
			   int test_met, const char *hex, uint64_t bytes,
			   enum apf_proto_why why)
{
	char ck[64];
	apf_rundir_ckpt_name(ck, sizeof ck, NULL, (uint64_t)u->evals);
	return json_pack(
		"{s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:O, s:b, s:b, "
		"s:{s:s, s:s, s:I}, s:I, s:s}",
		"index", (json_int_t)u->evals, "global_step", (json_int_t)step,
		"start_ns", (json_int_t)t_end, "end_ns", (json_int_t)eval_end,
		"accumulated_submission_ns", (json_int_t)u->sub_ns,
		"accumulated_eval_ns", (json_int_t)u->eval_ns,
		"accumulated_logging_ns", (json_int_t)u->log_ns,
		"total_duration_ns", (json_int_t)(u->sub_ns + u->eval_ns + u->log_ns),
		"preemption_count", (json_int_t)u->preemptions, "metrics", m,
		"validation_target_met", val_met, "test_target_met", test_met,
		"checkpoint", "file", ck, "sha256", hex, "bytes",
		(json_int_t)bytes, "copy_ns", (json_int_t)u->copy_ns, "why",
		why == APF_WHY_COMPLETE	   ? "complete"
		: why == APF_WHY_MAX_STEPS ? "max_steps"
					   : "due");
}

/* Eval k's record (its metrics' target flags, time to target), the
 * unit's CSV and the signed head. */
static int record_eval(struct unit *u, int64_t step, uint64_t t_end,
		       uint64_t eval_end, json_t *m, const char *hex,
		       uint64_t bytes, enum apf_proto_why why, int *val_met,
		       int *test_met)
{
	const char *mn = u->hu->spec->metric;
	int dir = u->hu->spec->direction;
	double val = apf_eval_metric(m, "validation", mn), test = apf_eval_metric(m, "test", mn);
	*val_met = !isnan(val) &&
		      apf_workload_meets(dir, val, u->hu->validation_target);
	u->last_val = val;
	if (!isnan(val) &&
	    (isnan(u->best_val) || apf_workload_meets(dir, val, u->best_val)))
		u->best_val = val;
	*test_met = !isnan(test) &&
		       apf_workload_meets(dir, test, u->hu->test_target);
	if (*val_met && u->time_to_target_ns < 0)
		u->time_to_target_ns = (int64_t)u->sub_ns;
	json_t *ev = eval_record(u, step, t_end, eval_end, m, *val_met, *test_met,
				 hex, bytes, why);
	/* Where the cadence asked for it, for a replay to ask there too. */
	int64_t asked = apf_host_asked_after(u->host);
	if (asked > 0)
		json_object_set_new(ev, "asked_after_step", json_integer(asked));
	json_t *row = json_deep_copy(ev);
	int rc = record(u, "eval", ev, 1);
	if (!u->st->rows)
		u->st->rows = json_array();
	json_array_append_new(u->st->rows, row);
	char *csv = apf_path_join(u->dir, "eval_measurements.csv");
	if (!rc)
		rc = csv ? apf_rundir_write_csv(csv, u->st->rows)
			 : apf_error(APF_ENOMEM, "run", "out of memory");
	free(csv);
	if (!rc)
		rc = sign_head(u->r);
	return rc;
}

/* A preemption (SIGTERM, or Slurm's SIGUSR1 warning): the trial is stopped
 * where it is, and a resume goes on from the last eval's checkpoint; what
 * it trained since is lost, as in a crash. It never makes an eval: where
 * evals fall is the cadence's alone, so a signal sent at a chosen moment
 * cannot buy a measurement there (an operator's preemptions only cost the
 * unit the work since its last eval, and count in preemption_count). */
static int preempt(struct unit *u)
{
	int rc = record(u, "preempt",
			json_pack("{s:s, s:I}", "signal", apf_run_preempt_signal(),
				  "after_eval", (json_int_t)u->evals),
			1);
	if (!rc)
		rc = sign_head(u->r);
	u->preempted = 1;
	apf_host_kill(u->host);
	if (!rc)
		apf_runner_notice(u->r,
				  "%s: preempted by %s: stopped; a resume goes on "
				  "from eval %lld (step %lld)",
				  u->name, apf_run_preempt_signal(),
				  (long long)u->evals, (long long)u->global_step);
	return rc;
}

/* A step block begins: the trial is frozen, or waits for its go. */
static void interval_begin(struct unit *u)
{
	struct apf_sandbox_usage use;
	if (apf_host_usage(u->host, &use))
		apf_error_clear();
	u->cpu_start = use.cpu_ns;
	u->wait_start = use.wait_ns;
	u->interval_clock = apf_host_clock_ns(u->host);
	u->interval_start = apf_now_ns();
}

/* One eval point: the trial has reported `step` (accepted by the protocol)
 * for reason `why` and copied its arena in copy_ns. Its interval ends once
 * it is frozen. Returns 1 when the trial goes on, 0 when the unit ended
 * (u->ended, or the host's ending for record_ending), or an error of the
 * run itself. */
static int eval_point(struct unit *u, int64_t step, enum apf_proto_why why,
		      uint64_t copy_ns)
{
	if (!apf_host_freeze(u->host))
		return 0;
	uint64_t t_end = apf_now_ns();
	/* Frozen: its CPU time and waits stand still. */
	struct apf_sandbox_usage use;
	if (apf_host_usage(u->host, &use))
		apf_error_clear();
	uint64_t cpu = use.cpu_ns > u->cpu_start ? use.cpu_ns - u->cpu_start : 0;
	uint64_t wait = use.wait_ns > u->wait_start ? use.wait_ns - u->wait_start
						    : 0;
	u->sub_ns += apf_clock_block_ns(u->r->clock, t_end - u->interval_start,
					cpu);
	if (apf_clock_short(t_end - u->interval_start, wait, u->r->threads))
		u->short_blocks++;
	json_t *f = json_pack("{s:I, s:I, s:I, s:I, s:I, s:I, s:I}", "first_step",
			      (json_int_t)u->global_step + 1, "last_step",
			      (json_int_t)step, "start_ns",
			      (json_int_t)u->interval_start, "end_ns",
			      (json_int_t)t_end, "accumulated_submission_ns",
			      (json_int_t)u->sub_ns, "cpu_ns", (json_int_t)cpu,
			      "wait_ns", (json_int_t)wait);
	int rc = record(u, "step_block", f, 0);
	if (rc)
		return rc;
	u->global_step = step;
	u->copy_ns = copy_ns;
	/* Evaluate the frozen arena. */
	json_t *m;
	char err[600] = "";
	rc = apf_evaluator_eval(u->ev, &m, err, sizeof err);
	uint64_t eval_end = apf_now_ns();
	if (rc)
		return rc;
	if (!m) {
		apf_host_end(u->host, "protocol", err);
		return 0;
	}
	u->evals++;
	u->eval_ns += eval_end - t_end;
	char hex[65];
	uint64_t bytes = 0;
	rc = checkpoint(u, hex, &bytes);
	if (rc == APF_EVERIFY) {
		json_decref(m);
		char msg[400];
		snprintf(msg, sizeof msg, "the trial damaged its arena: %s",
			 apf_error_message());
		apf_error_clear();
		apf_host_end(u->host, "protocol", msg);
		return 0;
	}
	if (rc) {
		json_decref(m);
		return rc;
	}
	int val_met = 0, test_met = 0;
	rc = record_eval(u, step, t_end, eval_end, m, hex, bytes, why, &val_met,
			 &test_met);
	u->last_eval_end = eval_end;
	const char *stop = stop_reason(u, val_met, test_met, why);
	if (!rc && stop) {
		json_decref(m);
		rc = end_trial(u, stop, 0, NULL);
		apf_host_stop(u->host);
		return rc;
	}
	if (!rc && apf_run_preempted()) {
		/* A preemption that came while this eval was made: the
		 * unit stops here, at a checkpoint of its own cadence. */
		json_decref(m);
		return preempt(u);
	}
	if (!rc) {
		/* Under the cpu clock the trial's clock stood still since the
		 * freeze: the period counts from here. */
		apf_host_due(u->host, (u->r->clock == APF_CLOCK_CPU
					       ? apf_host_clock_ns(u->host)
					       : eval_end) +
					      u->hu->eval_period_ns);
		rc = apf_host_go(u->host, u->sub_ns, u->evals, m, 0);
	}
	json_decref(m);
	if (rc)
		return rc;
	interval_begin(u);
	u->log_ns += u->interval_start - eval_end;
	return apf_host_resume(u->host);
}

/* ---- the unit ------------------------------------------------------------------ */

static void tick(void *user, int64_t step, uint64_t now)
{
	struct unit *u = user;
	const struct apf_run_opts *o = u->r->o;
	(void)now; /* the host's is from before its wait: take a fresh one */
	if (!o->progress)
		return;
	uint64_t c = apf_host_clock_ns(u->host);
	struct apf_run_progress p = {
		.unit = u->name,
		.ordinal = u->r->ordinal,
		.count = u->r->to_run,
		.slot = u->r->slot,
		.slots = u->r->slots > 0 ? u->r->slots : 1,
		.step = step,
		.evals = u->evals,
		.submission_s = (double)(u->sub_ns + (c > u->interval_clock
							 ? c - u->interval_clock
							 : 0)) /
				1e9,
		.budget_s = (double)u->hu->budget_ns / 1e9,
		.metric = u->hu->spec->metric,
		.validation = u->last_val,
		.target = u->hu->validation_target};
	o->progress(o->user, &p);
}

/* A warning from the trial for the submitter: logged (not synced: it is
 * advice, and the next record's sync covers it) and shown. */
static void warn(void *user, const char *msg)
{
	struct unit *u = user;
	if (u->warn_rc)
		return;
	u->warn_rc = record(u, "warning", json_pack("{s:s}", "detail", msg), 0);
	apf_runner_notice(u->r, "%s: warning: %s", u->name, msg);
}

static int prepare(struct unit *u)
{
	struct run *r = u->r;
	const apf_manifest *man = r->entry->manifest;
	const struct apf_plan_unit *pu = u->pu;
	apf_rundir_unit_name(u->name, sizeof u->name, pu->study, pu->workload,
			     pu->variant, pu->trial + 1);
	u->dir = apf_path_join(r->run_dir, u->name);
	char wname[32];
	snprintf(wname, sizeof wname, "unit_%zu", u->index);
	u->work = apf_path_join(r->work, wname);
	char *ck = u->dir ? apf_path_join(u->dir, "ckpt") : NULL;
	int rc = ck && u->work ? apf_mkdirs(ck, 0755)
			       : apf_error(APF_ENOMEM, "run", "out of memory");
	free(ck);
	struct apf_host_opts ho = {
		.exe = r->exe,
		.workloads_dir = r->workloads_dir,
		.include_dir = r->include_dir,
		.src = r->src,
		.work = u->work,
		.log_dir = u->dir,
		.sealed = r->sealed,
		.memory_limit = r->o->memory_limit,
		.workload = pu->workload,
		.variant = pu->variant,
		.device = r->device,
		.seed = man->tuning.seed,
		.study = (uint32_t)pu->study,
		.trial = (uint32_t)pu->trial + 1,
		.threads = r->threads,
		.numerics = r->numerics,
		.budget_multiplier = man->tuning.budget_multiplier,
		.budget_scale = r->budget_scale,
		.clock = r->clock,
		.hp = &pu->hp,
		.interrupted = apf_run_stopping,
		.tick = tick,
		.warn = warn,
		.user = u};
	if (!rc)
		rc = apf_host_open(&u->host, &ho);
	if (rc)
		return rc;
	u->hu = apf_host_unit(u->host);
	u->grace_ns = u->hu->eval_period_ns +
		      (uint64_t)fmax(5e9, 0.1 * (double)u->hu->budget_ns);
	/* hparams.json, for the auditor (the trial reads the host's copy). */
	char *pub = apf_path_join(u->dir, "hparams.json");
	rc = pub ? apf_host_write_hparams(u->host, pub)
		 : apf_error(APF_ENOMEM, "run", "out of memory");
	free(pub);
	return rc;
}

/* Restoring a checkpoint: its file must be the one the log names. */
static int load_checkpoint(struct unit *u, char **data, size_t *len)
{
	char name[64];
	apf_rundir_ckpt_name(name, sizeof name, NULL,
			     (uint64_t)u->st->last_eval);
	char *path = apf_path_join(u->dir, name);
	int rc = path ? apf_file_read(data, len, path, u->hu->capacity)
		      : apf_error(APF_ENOMEM, "run", "out of memory");
	char hex[65];
	if (!rc)
		rc = apf_sha256_hex(hex, *data, *len);
	if (!rc && strcmp(hex, u->st->ckpt_sha256))
		rc = apf_error(APF_EVERIFY, path,
			       "differs from the checkpoint the log names");
	if (!rc)
		rc = apf_arena_check(*data, *len);
	free(path);
	if (rc) {
		free(*data);
		*data = NULL;
	}
	return rc;
}

static void cleanup(struct unit *u)
{
	apf_evaluator_stop(u->ev);
	apf_host_close(u->host);
	free(u->dir);
	free(u->work);
}

static int start_records(struct unit *u, int *restore_eval)
{
	struct apf_rundir_unit *st = u->st;
	*restore_eval = 0;
	if (st->started && !st->ended) {
		/* Resume: from the last eval's checkpoint, or from scratch. */
		*restore_eval = (int)st->last_eval;
		u->preemptions = st->preemptions + 1;
		json_t *f = json_pack("{s:I, s:I, s:I}", "cut_bytes", (json_int_t)0,
				      "from_eval", (json_int_t)st->last_eval,
				      "preemption_count",
				      (json_int_t)u->preemptions);
		int rc = record(u, "resume", f, 1);
		if (rc || st->last_eval > 0) {
			u->evals = st->last_eval;
			u->global_step = st->global_step;
			u->sub_ns = st->sub_ns;
			u->eval_ns = st->eval_ns;
			u->log_ns = st->log_ns;
			u->time_to_target_ns = st->time_to_target_ns;
			return rc;
		}
		json_decref(st->rows);
		st->rows = NULL;
	}
	const apf_workload_spec *s = u->hu->spec;
	json_t *f = json_pack(
		"{s:s, s:s, s:I, s:I, s:o, s:I, s:I, s:I, s:f, s:f, s:s, s:s}",
		"workload", u->pu->workload, "variant", u->pu->variant, "study",
		(json_int_t)u->pu->study, "trial", (json_int_t)u->pu->trial + 1,
		"hparams", apf_hparams_to_json(&u->pu->hp), "budget_ns", (json_int_t)u->hu->budget_ns, "eval_period_ns",
		(json_int_t)u->hu->eval_period_ns, "max_steps",
		(json_int_t)s->max_steps, "validation_target", u->hu->validation_target,
		"test_target", u->hu->test_target, "metric", s->metric, "direction",
		s->direction > 0 ? "max" : "min");
	json_object_set_new(f, "init_allowance_ns",
			    json_integer((json_int_t)u->hu->init_allowance_ns));
	return record(u, "trial_start", f, 1);
}

/* A unit of the plan, before prepare(). */
static struct unit unit_of(struct run *r, size_t index)
{
	return (struct unit){.r = r,
			     .index = index,
			     .pu = &r->plan->units[index],
			     .st = &r->states[index],
			     .time_to_target_ns = -1,
			     .last_val = NAN,
			     .best_val = NAN};
}

/* After init_optimizer_state, from scratch: the trial is frozen and its
 * arena must hold the workload's initialisation for the trial's seed
 * (parameters and model state bit for bit), at step 0 with the data
 * stream untouched; then it is checkpoint 0. 1: it is (hex and bytes
 * describe ckpt/0.bin; the trial stays frozen), 0: it is not (the host's
 * ending set), or an error. */
static int check_initial_state(struct unit *u, char hex[65], uint64_t *bytes)
{
	if (!apf_host_freeze(u->host))
		return 0;
	char why[200];
	const struct apf_host_unit *hu = u->hu;
	apf_arena_initial_differs(apf_host_arena_view(u->host), hu->capacity,
				  hu->init_state, hu->param_floats,
				  hu->state_floats, why, sizeof why);
	apf_error_clear();
	if (why[0]) {
		apf_host_end(u->host, "protocol", why);
		return 0;
	}
	int rc = checkpoint(u, hex, bytes);
	if (rc == APF_EVERIFY) {
		apf_host_end(u->host, "protocol", apf_error_message());
		apf_error_clear();
		return 0;
	}
	return rc ? rc : 1;
}

/* Resuming after the last kept eval: the CSV may lag the log by the eval
 * the crash interrupted, and that eval may already have ended the trial.
 * *done: it did (recorded). */
static int resume_after_eval(struct unit *u, int *done)
{
	*done = 0;
	char *csv = apf_path_join(u->dir, "eval_measurements.csv");
	int rc = csv ? apf_rundir_write_csv(csv, u->st->rows)
		     : apf_error(APF_ENOMEM, "run", "out of memory");
	free(csv);
	/* What the progress line and the end line say of the kept evals. */
	size_t i;
	json_t *row;
	json_array_foreach(u->st->rows, i, row)
	{
		double v = apf_eval_metric(json_object_get(row, "metrics"),
					   "validation", u->hu->spec->metric);
		u->last_val = v;
		if (!isnan(v) && (isnan(u->best_val) ||
				  apf_workload_meets(u->hu->spec->direction, v,
						     u->best_val)))
			u->best_val = v;
	}
	json_t *last = json_array_get(u->st->rows, json_array_size(u->st->rows) - 1);
	int max = u->hu->spec->max_steps;
	const char *stop =
		u->sub_ns >= u->hu->budget_ns ? "budget"
		: json_is_true(json_object_get(last, "validation_target_met")) &&
				json_is_true(json_object_get(last, "test_target_met"))
			? "targets"
		: max > 0 && u->global_step >= max ? "max_steps"
						   : NULL;
	if (!rc && stop) {
		*done = 1;
		rc = end_trial(u, stop, 0, NULL);
	}
	return rc;
}

/* clock_start: the set-up's times, the memory limit and, from scratch,
 * checkpoint 0. */
static int record_clock_start(struct unit *u, const char *init_hex,
			      uint64_t init_bytes)
{
	uint64_t init_ns, sub_init_ns;
	int64_t batch;
	apf_host_setup_times(u->host, &init_ns, &sub_init_ns, &batch);
	json_t *f = json_pack("{s:I, s:I, s:I}", "init_ns", (json_int_t)init_ns,
			      "submission_init_ns", (json_int_t)sub_init_ns,
			      "batch_size", (json_int_t)batch);
	json_object_set_new(
		f, "memory_limit",
		json_pack("{s:I, s:s}", "bytes",
			  (json_int_t)apf_host_memory_limit(u->host), "mechanism",
			  apf_host_memory_mechanism(u->host)));
	char ck0[64];
	apf_rundir_ckpt_name(ck0, sizeof ck0, NULL, 0);
	if (init_hex[0])
		json_object_set_new(f, "checkpoint",
				    json_pack("{s:s, s:s, s:I}", "file", ck0,
					      "sha256", init_hex, "bytes",
					      (json_int_t)init_bytes));
	return record(u, "clock_start", f, 0);
}

/* Training: reports until the unit ends or the run is interrupted. */
static int train(struct unit *u)
{
	int rc = 0;
	while (!rc && !u->ended && !u->preempted && !apf_run_interrupted()) {
		uint64_t left = u->hu->budget_ns > u->sub_ns
					? u->hu->budget_ns - u->sub_ns
					: 0;
		uint64_t deadline = u->interval_clock + left + u->grace_ns;
		int64_t step = 0;
		enum apf_proto_why why = APF_WHY_DUE;
		int w = apf_host_next(u->host, deadline, &step, &why);
		uint64_t report_ns = 0, copy_ns = 0;
		if (w == APF_HOST_REPORT)
			apf_host_report_times(u->host, &report_ns, &copy_ns);
		if (w < 0)
			return w;
		if (u->warn_rc)
			return u->warn_rc;
		if (w == APF_HOST_TIMEOUT && apf_run_interrupted())
			break;
		if (w == APF_HOST_TIMEOUT && apf_run_preempted()) {
			rc = preempt(u);
			break;
		}
		if (w == APF_HOST_TIMEOUT)
			apf_host_end(u->host, "timeout",
				     "no eval report within the budget (a step "
				     "ran past it)");
		else if (w == APF_HOST_REPORT &&
			 (rc = eval_point(u, step, why, copy_ns)) > 0)
			rc = 0;
		if (!rc && !u->ended && apf_host_ending(u->host, NULL))
			rc = record_ending(u);
	}
	return rc;
}

int apf_runner_unit(struct run *r, size_t index)
{
	struct unit u = unit_of(r, index);
	int rc = prepare(&u);
	int restore_eval = 0, done = 0;
	if (!rc)
		rc = start_records(&u, &restore_eval);
	if (!rc && restore_eval > 0)
		rc = resume_after_eval(&u, &done);
	char *restore = NULL;
	size_t restore_len = 0;
	if (!rc && !done && restore_eval > 0)
		rc = load_checkpoint(&u, &restore, &restore_len);
	char detail[600] = "";
	if (!rc && !done)
		rc = build(&u, detail, sizeof detail);
	if (!rc && !done && detail[0]) {
		rc = end_trial(&u, "error", 1, detail);
		done = 1;
	}
	if (!rc && !done)
		rc = apf_host_arena(u.host, restore, restore_len);
	free(restore);
	if (!rc && !done)
		rc = apf_host_evaluator(&u.ev, u.host);
	int ready = 0;
	if (!rc && !done) {
		rc = apf_host_start(u.host, u.global_step);
		ready = rc > 0;
		rc = rc > 0 ? 0 : rc;
		if (!rc)
			rc = u.warn_rc;
	}
	if (!rc && !done && !ready && apf_host_ending(u.host, NULL))
		rc = record_ending(&u);
	/* From scratch, the trial must have left the workload's initial state
	 * as it is (checkpoint 0, which the verifier can replay from). */
	char init_hex[65] = "";
	uint64_t init_bytes = 0;
	if (!rc && ready && restore_eval == 0) {
		rc = check_initial_state(&u, init_hex, &init_bytes);
		if (rc > 0) {
			rc = 0;
		} else if (!rc) {
			ready = 0;
			rc = record_ending(&u);
		}
	}
	if (!rc && ready) {
		rc = record_clock_start(&u, init_hex, init_bytes);
		/* The first eval comes after the first step. */
		if (u.evals > 0)
			apf_host_due(u.host, apf_host_clock_ns(u.host) +
						     u.hu->eval_period_ns);
		const json_t *last =
			u.st->rows ? json_object_get(
					     json_array_get(u.st->rows,
							    json_array_size(u.st->rows) - 1),
					     "metrics")
				   : NULL;
		/* Its usage read before the go: whatever it does after
		 * counts. */
		interval_begin(&u);
		if (!rc)
			rc = apf_host_go(u.host, u.sub_ns, u.evals, last,
					 u.evals == 0 ? u.global_step + 1 : 0);
		if (!rc && init_hex[0] && !apf_host_resume(u.host))
			rc = record_ending(&u);
	}
	if (!rc && ready)
		rc = train(&u);
	cleanup(&u);
	return rc;
}
