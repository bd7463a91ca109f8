/*
 * run.c: `apf run ENTRY.apf [-o RUN_DIR] ...`, the sealed runner, and the
 * hidden subcommands it starts (`apf __build`, `apf __trial`, `apf __eval`).
 */
#include "cmd.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "eval/eval.h"
#include "nn/nn.h"
#include "runner/runner.h"
#include "rundir/rundir.h"
#include "trial/trial.h"
#include "wire/wire.h"

#define STR_(x) #x
#define STR(x) STR_(x)

struct say {
	int progress; /* a progress line may be on the terminal */
	json_t *units; /* --json: one object per unit, as each ends */
	/* -j: one line per slot, redrawn together; lines drawn now. */
	char lines[64][400];
	int nlines, drawn;
};

/* Takes the progress lines off the terminal (the cursor ends where the
 * first was). */
static void progress_clear(struct say *s)
{
	if (s->drawn > 1)
		fprintf(stderr, "\r\033[%dA\033[J", s->drawn - 1);
	else
		fprintf(stderr, "\r\033[K");
	s->drawn = 0;
}

static json_t *number_or_null(double v)
{
	return isnan(v) || v < 0 ? json_null() : json_real(v);
}

/* A string of a unit's end as JSON: the unit's and the metric's names
 * are the entry's and the workload's, a detail the trial's or the
 * compiler's text, none of them sure to be UTF-8. */
static json_t *text_or_null(const char *text)
{
	if (!text)
		return json_null();
	apf_buf b = {0};
	json_t *j = apf_buf_utf8(&b, text) ? NULL : json_string(b.data);
	apf_buf_free(&b);
	return j;
}

static void on_unit_end(void *user, const struct apf_run_unit_end *e)
{
	struct say *s = user;
	json_t *u = json_pack(
		"{s:o, s:s, s:o, s:o, s:o, s:I, s:I, s:o, s:o, s:o}", "unit",
		text_or_null(e->unit ? e->unit : ""), "state",
		e->already ? "already_ended" : e->failed ? "failed" : "completed",
		"reason", text_or_null(e->reason),
		"time_to_target_s", number_or_null(e->time_to_target_s),
		"submission_s", json_real(e->submission_s), "evals",
		(json_int_t)e->evals, "global_step", (json_int_t)e->global_step,
		"metric", text_or_null(e->metric),
		"best_validation", number_or_null(e->best_validation),
		"validation_target", number_or_null(e->target));
	if (u && e->detail)
		json_object_set_new(u, "detail", text_or_null(e->detail));
	if (u && e->already)
		json_object_set_new(u, "failed", json_boolean(e->failed));
	json_array_append_new(s->units, u);
}

/* --json: what ran and how it ended, on stdout, whatever the outcome, so a
 * script reads one object instead of the terminal's lines. */
static int print_json(const struct say *s, const char *run_dir, int rc)
{
	size_t completed = 0, failed = 0, already = 0, i;
	json_t *u;
	json_array_foreach(s->units, i, u)
	{
		const char *st = json_string_value(json_object_get(u, "state"));
		completed += !strcmp(st, "completed");
		failed += !strcmp(st, "failed");
		already += !strcmp(st, "already_ended");
	}
	json_t *j = json_pack("{s:o, s:i, s:o, s:I, s:I, s:I, s:O}", "run_dir",
			      text_or_null(run_dir), "exit", apf_exit_code(rc),
			      "error",
			      rc ? json_string(apf_error_message()) : json_null(),
			      "completed", (json_int_t)completed, "failed", (json_int_t)failed,
			      "already_ended", (json_int_t)already, "units",
			      s->units);
	return cmd_print_json(j, JSON_REAL_PRECISION(10));
}

/* A notice is one line that names units, workloads and metrics of the
 * entry and may quote a trial's warning: escaped here, where it is
 * printed, into a buffer of its own (a run prints notices for as long as
 * it lasts). */
static void on_notice(void *user, const char *line)
{
	struct say *s = user;
	if (s->progress)
		progress_clear(s);
	char safe[16 * 1024];
	apf_text_escape(safe, sizeof safe, line);
	fprintf(stderr, "apf: run: %s\n", safe);
}

static void on_progress(void *user, const struct apf_run_progress *p)
{
	struct say *s = user;
	/* The unit's name holds the entry's workload names. */
	char unit[160], metric[64], val[128] = "";
	apf_text_escape(unit, sizeof unit, p->unit);
	apf_text_escape(metric, sizeof metric, p->metric);
	if (!isnan(p->validation))
		snprintf(val, sizeof val, "  %s %.4f (target %.4f)", metric,
			 p->validation, p->target);
	/* The budget is checked at evals (docs/design.md, 3.5): a trial
	 * runs past it until its next eval, which ends it. */
	const char *over = p->submission_s > p->budget_s
				   ? " (budget spent: ends at its next eval)"
				   : "";
	if (p->slots <= 1) {
		fprintf(stderr,
			"\r[%zu/%zu] %s  step %lld  %.1f/%.0f s%s  evals "
			"%lld%s\033[K",
			p->ordinal, p->count, unit, (long long)p->step,
			p->submission_s, p->budget_s, over, (long long)p->evals,
			val);
		s->drawn = 1;
		return;
	}
	/* -j: every running unit on its own line, in slot order. */
	int slots = p->slots < 64 ? p->slots : 64;
	if (p->slot < 0 || p->slot >= slots)
		return;
	s->nlines = slots;
	snprintf(s->lines[p->slot], sizeof s->lines[p->slot],
		 "[%zu/%zu] %s  step %lld  %.1f/%.0f s%s  evals %lld%s",
		 p->ordinal, p->count, unit, (long long)p->step,
		 p->submission_s, p->budget_s, over, (long long)p->evals,
		 val);
	progress_clear(s);
	for (int i = 0; i < slots; i++)
		fprintf(stderr, "%s%s\033[K", i ? "\n" : "",
			s->lines[i][0] ? s->lines[i] : "-");
	s->drawn = slots;
}

int cmd_run(int argc, char **argv)
{
	struct apf_run_opts o = {.study = -1, .trial = -1};
	/* LONG_MIN: not given (then all studies, all trials, the entry's
	 * threads, the default memory limit). */
	long study = LONG_MIN, trial = LONG_MIN, threads = LONG_MIN,
	     memory_mib = LONG_MIN, jobs = LONG_MIN, numerics = LONG_MIN;
	int resume = 0, unsealed = 0, drift = 0, quiet = 0, json = 0, slurm = 0;
	long parallelism = LONG_MIN;
	struct apf_slurm_opts so = {0};
	const char *clock = NULL, *scale = NULL;
	/* sbatch options after "--" (with --slurm only). */
	for (int i = 1; i < argc; i++)
		if (!strcmp(argv[i], "--")) {
			so.sbatch_args = argv + i + 1;
			so.nsbatch_args = (size_t)(argc - i - 1);
			argc = i;
			break;
		}
	const struct apf_opt opts[] = {
		{"output", 'o', OPT_STRING, &o.run_dir, "RUN_DIR",
		 "the run directory (default: <entry>.run)"},
		{"key", 'k', OPT_STRING, &o.key_path, "KEY",
		 "sign the log with this private key (default: $APF_HOME/keys/"
		 "default.key.pem)"},
		{"entry-key", 0, OPT_STRING, &o.trust_key, "PUB.pem",
		 "trust only this key for the entry (default: $APF_HOME/trusted/)"},
		{"workload", 0, OPT_STRING, &o.workload, "W",
		 "run only this workload's units"},
		{"variant", 0, OPT_STRING, &o.variant, "V",
		 "run only the units of this held-out variant (base: the base "
		 "workloads')"},
		{"study", 0, OPT_INT, &study, "K", "run only study K (from 0)"},
		{"trial", 0, OPT_INT, &trial, "N", "run only trial N (from 1)"},
		{"heldout", 0, OPT_STRING, &o.heldout, "DRAW.json",
		 "also run the held-out variants this draw names (apf heldout "
		 "draw)"},
		{"device", 0, OPT_STRING, &o.device, "cpu|cuda",
		 "where trials run (default: cpu)"},
		{"threads", 0, OPT_INT, &threads, "N",
		 "compute threads (default: all usable cores)"},
		{"jobs", 'j', OPT_INT, &jobs, "N",
		 "run N units at once, each pinned to its threads' share of "
		 "the cores (default: 1)"},
		{"resume", 0, OPT_FLAG, &resume, NULL,
		 "continue an interrupted run from its last checkpoints"},
		{"unsealed", 0, OPT_FLAG, &unsealed, NULL,
		 "run without namespaces when the kernel refuses them (logged)"},
		{"allow-env-drift", 0, OPT_FLAG, &drift, NULL,
		 "run although this machine differs from the entry's record "
		 "(logged)"},
		{"memory-limit", 0, OPT_INT, &memory_mib, "MiB",
		 "memory limit of a trial, counting all it holds (a cgroup where the kernel offers one; default: 16384)"},
		{"clock", 0, OPT_STRING, &clock, "wall|cpu",
		 "what submission time is: wall time (AlgoPerf's rule, for a "
		 "machine doing nothing else), or the trial's CPU time over 2 "
		 "cores (the same under load; device cpu only). Default: "
		 "wall, or a resumed run's"},
		{"numerics", 0, OPT_INT, &numerics, "N",
		 "the CPU layers' formulas (1 to " STR(APF_NUMERICS_LATEST)
		 "), recorded in run.json; verify recomputes with the run's. "
		 "Default: the latest, or a resumed run's"},
		{"budget-scale", 0, OPT_STRING, &scale, "F",
		 "scale every budget and eval period by F in (0, 1]: a quick "
		 "look at a submission, marked unofficial by verify, score and "
		 "report (refused by score --strict)"},
		{"slurm", 0, OPT_FLAG, &slurm, NULL,
		 "submit the unfinished units as one Slurm job array (sbatch), "
		 "one unit per task, instead of running them; with --resume, "
		 "again after preemptions or failures of the cluster"},
		{"partition", 0, OPT_STRING, &so.partition, "P",
		 "--slurm: the partition"},
		{"gres", 0, OPT_STRING, &so.gres, "gpu:N",
		 "--slurm: generic resources per task"},
		{"time", 0, OPT_STRING, &so.time, "T",
		 "--slurm: each task's time limit (sbatch --time)"},
		{"array-parallelism", 0, OPT_INT, &parallelism, "K",
		 "--slurm: at most K tasks at once"},
		{"quiet", 'q', OPT_FLAG, &quiet, NULL, "no progress line"},
		{"json", 0, OPT_FLAG, &json, NULL,
		 "print each unit's outcome as JSON on stdout at the end"},
		{0},
	};
	const struct apf_usage usage = {
		"run ENTRY.apf [-o RUN_DIR] [-k KEY] [--entry-key PUB.pem] "
		"[--workload W] [--variant V] [--study K] [--trial N] "
		"[--heldout DRAW.json] "
		"[--device cpu|cuda] [--threads N] [-j N] [--resume] [--unsealed] "
		"[--allow-env-drift] [--memory-limit MiB] [--clock wall|cpu] "
		"[--numerics N] [--budget-scale F] [-q] [--json] "
		"[--slurm [--partition P] [--gres gpu:N] [--time T] "
		"[--array-parallelism K] [-- SBATCH_OPTIONS...]]",
		"Run an entry's trials in the sealed runner: the entry is "
		"verified, its\nworkloads' specs and datasets and this machine's "
		"environment are checked\nagainst the manifest, then every "
		"trial runs sandboxed with harness-controlled\ntiming and "
		"evaluation, into a hash-chained, signed log with checkpoints.",
		"A failed trial (a sandbox fault, a crash, a submission error) is "
		"logged and the\nrun goes on. `apf verify RUN_DIR` checks the "
		"result; `apf score RUN_DIR`\nscores it.\n"
		"Exit 0: every unit run completed. 2: bad options or inputs, "
		"before anything ran.\n3: a unit failed (the last line says how "
		"many), or the run was interrupted.",
		1, 1,
		"apf run nadamw.apf -o runs/nadamw\n"
		"apf run nadamw.apf -o runs/nadamw --workload fmnist_mlp --study 0 "
		"--trial 1\n"
		"apf run nadamw.apf -o runs/nadamw --heldout heldout.json\n"
		"apf run nadamw.apf -o runs/nadamw --heldout heldout.json --variant "
		"base\n"
		"apf run nadamw.apf -o runs/nadamw -j 4 --threads 2\n"
		"apf run nadamw.apf -o quick --clock cpu --budget-scale 0.25\n"
		"apf run nadamw.apf -o runs/nadamw --slurm --time 2:00:00 "
		"--array-parallelism 8\n"
		"apf run nadamw.apf -o runs/nadamw --resume"};
	int nargs, rc = cmd_start("run", &usage, opts, argc, argv, &nargs);
	if (rc >= 0)
		return rc;
	const char *bad = study != LONG_MIN && study < 0 ? "--study K counts from 0"
			  : trial != LONG_MIN && trial < 1 ? "--trial N counts from 1"
			  : threads != LONG_MIN && (threads < 1 || threads > 4096)
				  ? "--threads takes 1 to 4096"
			  : jobs != LONG_MIN && (jobs < 1 || jobs > 64)
				  ? "-j takes 1 to 64"
			  : parallelism != LONG_MIN && parallelism < 1
				  ? "--array-parallelism takes K >= 1"
			  : !slurm && (so.partition || so.gres || so.time ||
				       parallelism != LONG_MIN || so.sbatch_args)
				  ? "--partition, --gres, --time, "
				    "--array-parallelism and sbatch options "
				    "after -- go with --slurm"
			  : slurm && jobs != LONG_MIN
				  ? "--slurm runs one unit per array task; -j "
				    "is for one machine"
			  : memory_mib != LONG_MIN && memory_mib < 1
				  ? "--memory-limit takes MiB >= 1"
			  : clock && apf_clock_parse(clock) < 0
				  ? "--clock takes wall or cpu"
			  : numerics != LONG_MIN &&
					  (numerics < APF_NUMERICS_OLDEST ||
					   numerics > APF_NUMERICS_LATEST)
				  ? "--numerics takes 1 to " STR(
					    APF_NUMERICS_LATEST) ", the "
					    "versions this apf computes"
				  : NULL;
	double bscale = 0;
	if (!bad && scale && !(bscale = cmd_budget_scale(scale)))
		bad = CMD_BUDGET_SCALE_BAD;
	if (bad) {
		apf_error(APF_EUSAGE, "run", "%s", bad);
		return cmd_fail(APF_EUSAGE);
	}
	study = study == LONG_MIN ? -1 : study;
	trial = trial == LONG_MIN ? -1 : trial;
	threads = threads == LONG_MIN ? 0 : threads;
	memory_mib = memory_mib == LONG_MIN ? 0 : memory_mib;
	o.entry = argv[1];
	o.study = study;
	o.trial = trial;
	o.threads = (int)threads;
	o.jobs = jobs == LONG_MIN ? 1 : (int)jobs;
	so.array_parallelism = parallelism == LONG_MIN ? 0 : parallelism;
	o.slurm = slurm ? &so : NULL;
	o.resume = resume;
	o.unsealed = unsealed;
	o.allow_env_drift = drift;
	o.memory_limit = (uint64_t)memory_mib << 20;
	o.clock = clock ? apf_clock_parse(clock) : -1;
	o.budget_scale = bscale;
	o.numerics = numerics == LONG_MIN ? 0 : (int)numerics;
	struct say say = {.progress = !quiet && progress_enabled() && isatty(2),
			  .units = json ? json_array() : NULL};
	o.notice = on_notice;
	o.progress = say.progress ? on_progress : NULL;
	o.unit_end = json ? on_unit_end : NULL;
	o.user = &say;
	rc = apf_run(&o);
	if (!rc && slurm && so.job_id[0] && !json)
		printf("%s\n", term_text(so.job_id));
	if (json) {
		char *dir = o.run_dir ? NULL : apf_run_default_dir(o.entry);
		int jrc = print_json(&say,
				     o.run_dir ? o.run_dir : dir ? dir : "", rc);
		rc = rc ? rc : jrc;
		free(dir);
		json_decref(say.units);
	}
	return rc ? cmd_fail(rc) : 0;
}

/* apf __build SRC_DIR INCLUDE_DIR OUT.so: runs inside the build sandbox;
 * the shared object, built in the sandbox's scratch, is copied into
 * APF_FD_BUILD_OUT, the memfd the host passed. */
static int copy_to_build_out(const char *so)
{
	char *data = NULL;
	size_t len = 0;
	int rc = apf_file_read(&data, &len, so, 256ull << 20);
	for (size_t off = 0; !rc && off < len;) {
		ssize_t w = write(APF_FD_BUILD_OUT, data + off, len - off);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			rc = apf_error_errno(APF_EIO, w < 0 ? errno : EIO,
					     "__build", "writing the shared object");
		else
			off += (size_t)w;
	}
	free(data);
	return rc;
}

int cmd_build_internal(int argc, char **argv)
{
	if (argc != 4) {
		apf_error(APF_EUSAGE, "__build", "SRC_DIR INCLUDE_DIR OUT.so");
		return cmd_fail(APF_EUSAGE);
	}
	apf_buf log = {0};
	int rc = apf_submission_build(argv[1], argv[2], argv[3], &log);
	if (!rc)
		rc = apf_submission_check_exports(argv[3]);
	if (!rc)
		rc = copy_to_build_out(argv[3]);
	if (log.len)
		fwrite(log.data, 1, log.len, stderr);
	apf_buf_free(&log);
	return rc ? cmd_fail(rc) : 0;
}

int cmd_trial_internal(int argc, char **argv)
{
	return apf_trial_main(argc, argv);
}

int cmd_eval_internal(int argc, char **argv)
{
	return apf_eval_main(argc, argv);
}
