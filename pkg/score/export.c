/*
 * export.c: a scored result in the layout AlgoPerf's own scorer reads
 * (`apf score ... --export-algoperf DIR`; score.h, "the AlgoPerf export").
 *
 * AlgoPerf's scorer (scoring/score_submissions.py of
 * mlcommons/submissions_algorithms) takes a directory whose every entry is
 * a submission holding only study directories, each holding one directory
 * per workload with trial_<n>/eval_measurements.csv, and a
 * workload_targets JSON naming the base and held-out workloads and each
 * one's target metric, target and step hint. An apf run directory holds
 * more (entry.apf, run.json, the logs), which that scorer stops on, so the
 * export copies what apf scored - no more - into that layout.
 *
 * What it promises: AlgoPerf's scorer over the export gives the scores
 * apf printed. So it exports only under AlgoPerf's rules (its scorer takes
 * a study's trial by the earliest eval, apf's rules by the fastest time),
 * only the submissions ranked (a run that failed --verify is not), only
 * the base workloads and held-out variants scored, each CSV byte for byte
 * but for the row of an apf unit's eval at or past its budget (AlgoPerf's
 * runner makes none, so its scorer would count a target met there), and
 * re-read from the bytes written, which must give the eval and time apf
 * scored (a file changed in between is an error, not a different
 * export). A trial apf refused (malformed numbers) stops the export:
 * AlgoPerf's scorer would read it some other way. A target metric that
 * scorer has no direction for (text_lm's cross_entropy, clicks_dlrm's
 * log_loss) is exported as "loss" when the CSV's validation/loss column
 * holds the same text in every row (the workload's loss is that metric),
 * else the export stops. Studies whose first trials to meet the target did
 * so at the same eval are a warning: apf counts the fastest, AlgoPerf
 * whichever its directory listing returns first.
 *
 * Everything is written under DIR.tmp-XXXXXX beside DIR and renamed onto
 * DIR at the end (DIR may be an empty directory), so an export is whole or
 * absent. Names from the logs (a submission's, a workload directory's)
 * become directory names only if they are plain names (letters, digits,
 * '.', '_', '+', '-', not starting with '.'): a run.json naming its
 * submission "../x" cannot write outside DIR.
 */
#include "score/score.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "rundir/rundir.h"

#define NOMEM(what) apf_error(APF_ENOMEM, what, "out of memory")

struct export {
	const apf_score_result *r;
	apf_score_targets *targets;
	const char *dir;     /* as given */
	char *tmp;           /* DIR.tmp-XXXXXX */
	/* Per column of r->workloads: the target apf scored with, and the
	 * metric name the export gives AlgoPerf's scorer. */
	struct apf_score_target *tg;
	const char **metric;
	char *command;       /* AlgoPerf's scorer over the export */
	json_t *ties;        /* ties(), in the order met */
	char **warnings;
	size_t nwarnings;
};

static int warn(struct export *x, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
static int warn(struct export *x, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	char *s = NULL;
	int n = vasprintf(&s, fmt, ap);
	va_end(ap);
	char **nv = n < 0 ? NULL
			  : realloc(x->warnings,
				    (x->nwarnings + 1) * sizeof *nv);
	if (!nv) {
		if (n >= 0)
			free(s);
		return NOMEM("--export-algoperf");
	}
	x->warnings = nv;
	x->warnings[x->nwarnings++] = s;
	return 0;
}

/* A name from the logs that may name a directory of the export. */
static int plain_name(const char *s)
{
	size_t n = strlen(s);
	if (n == 0 || n > 200 || s[0] == '.')
		return 0;
	for (; *s; s++)
		if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') ||
		      (*s >= '0' && *s <= '9') || *s == '.' || *s == '_' ||
		      *s == '+' || *s == '-'))
			return 0;
	return 1;
}

static int name_refused(const char *what, const char *name, const char *hint)
{
	apf_buf b = {0};
	int rc = apf_buf_escape(&b, name);
	rc = rc ? NOMEM("--export-algoperf")
		: apf_error(APF_EINPUT, "--export-algoperf",
			    "%s '%s' cannot name a directory of the export "
			    "(letters, digits, '.', '_', '+' and '-', not "
			    "starting with '.')%s",
			    what, b.data, hint);
	apf_buf_free(&b);
	return rc;
}

static const struct apf_score_workload *
find_workload(const struct apf_score_submission *s, const char *name)
{
	for (size_t i = 0; i < s->nw; i++)
		if (!strcmp(s->w[i].name, name))
			return &s->w[i];
	return NULL;
}

/* ---- what AlgoPerf's scorer is told ---------------------------------------- */

/* The metric name for column c: apf's when AlgoPerf's scorer knows its
 * direction (the same one), "loss" when it is a minimised metric the
 * scorer does not know (each trial's CSV is then checked to hold it as
 * validation/loss too), else none. */
static int choose_metric(struct export *x, size_t c)
{
	const struct apf_score_target *t = &x->tg[c];
	const char *w = x->r->workloads[c];
	int known = apf_score_metric_direction(x->r->rules, t->metric);
	if (known == t->direction) {
		x->metric[c] = t->metric;
		return 0;
	}
	if (known == 0 && t->direction < 0) {
		x->metric[c] = "loss";
		return 0;
	}
	return apf_error(APF_EINPUT, "--export-algoperf",
			 "%s: AlgoPerf's scorer %s metric '%s', which apf "
			 "%s; it cannot score this workload",
			 w, known ? "takes the other direction for"
				  : "knows no direction for",
			 t->metric,
			 t->direction > 0 ? "maximises" : "minimises");
}

static int targets_json(struct export *x, apf_buf *out)
{
	const apf_score_result *r = x->r;
	const char *version =
		!strcmp(r->rules->name, "algoperf-0.5") ? "0.5" : "0.6";
	json_t *root = json_object(), *base = json_array(),
	       *held = json_array(), *ws = json_object();
	int bad = !root || !base || !held || !ws;
	bad = bad || json_object_set_new(
			     root, "_comment",
			     json_string("Written by apf score "
					 "--export-algoperf: the targets apf "
					 "scored these logs with. AlgoPerf's "
					 "scorer reads it with "
					 "--workload_targets."));
	bad = bad || json_object_set_new(root, "benchmark_version",
					 json_string(version));
	for (size_t c = 0; !bad && c < r->nbase + r->nvar; c++) {
		const struct apf_score_target *t = &x->tg[c];
		json_t *o = json_pack("{s:s, s:f, s:I}", "target_metric_name",
				      x->metric[c], "validation_target_value",
				      t->validation, "step_hint",
				      (json_int_t)t->step_hint);
		bad = !o ||
		      json_array_append_new(c < r->nbase ? base : held,
					    json_string(r->workloads[c])) ||
		      json_object_set_new(ws, r->workloads[c], o);
	}
	bad = bad || json_object_set(root, "base_workloads", base) ||
	      json_object_set(root, "held_out_workloads", held) ||
	      json_object_set(root, "workloads", ws);
	json_decref(base);
	json_decref(held);
	json_decref(ws);
	char *text = bad ? NULL
			 : json_dumps(root, JSON_INDENT(2) | JSON_ENSURE_ASCII |
						    JSON_REAL_PRECISION(17));
	json_decref(root);
	int rc = !text || apf_buf_puts(out, text) || apf_buf_puts(out, "\n");
	free(text);
	return rc ? NOMEM("--export-algoperf") : 0;
}

/* ---- one trial ------------------------------------------------------------- */

static int write_json(const char *dir, const char *name, json_t *o)
{
	char *text = o ? json_dumps(o, JSON_INDENT(2) | JSON_SORT_KEYS |
					       JSON_ENSURE_ASCII)
		       : NULL;
	char *path = apf_path_join(dir, name);
	int rc = !text || !path
			 ? NOMEM(name)
			 : apf_file_write(path, text, strlen(text), 0644, 0);
	free(text);
	free(path);
	return rc;
}

/* validation/loss holds what validation/<metric> holds, row by row. */
static int same_as_loss(const char *text, size_t len, const char *csv,
			const char *metric)
{
	apf_rundir_csv *t;
	int rc = apf_rundir_csv_parse(&t, NULL, text, len, csv);
	if (rc)
		return rc;
	char col[160];
	snprintf(col, sizeof col, "validation/%s", metric);
	long m = apf_rundir_csv_column(t, col),
	     l = apf_rundir_csv_column(t, "validation/loss");
	if (l < 0)
		rc = apf_error(APF_EINPUT, csv,
			       "no validation/loss column: AlgoPerf's scorer "
			       "knows no direction for %s and the export "
			       "names it by the loss",
			       col);
	for (size_t i = 0; !rc && i < t->nrows; i++) {
		const struct apf_rundir_csv_row *row = &t->rows[i];
		const char *a = (size_t)m < row->n ? row->cell[m] : "",
			   *b = (size_t)l < row->n ? row->cell[l] : "";
		if (strcmp(a, b))
			rc = apf_error(APF_EINPUT, csv,
				       "line %ld: validation/loss is not %s, "
				       "so the export cannot name the target "
				       "metric by a name AlgoPerf's scorer "
				       "knows",
				       row->line, col);
	}
	apf_rundir_csv_free(t);
	return rc;
}

/* An AlgoPerf log's own meta_data_<k>.json and flags_<k>.json, copied
 * when they are JSON objects. */
static int copy_algoperf_json(const char *from, const char *to)
{
	for (int kind = 0; kind < 2; kind++)
		for (int k = 0; k < 100; k++) {
			char name[32];
			snprintf(name, sizeof name, "%s_%d.json",
				 kind ? "flags" : "meta_data", k);
			char *text;
			size_t len;
			int rc = apf_file_read_beneath(
				&text, &len, from, name,
				APF_MAX_SMALL_JSON_BYTES, APF_FILE_MISSING_OK);
			if (rc)
				return rc;
			if (!text)
				break;
			json_t *o = json_loadb(text, len, 0, NULL);
			if (!json_is_object(o)) {
				json_decref(o);
				free(text);
				continue;
			}
			json_decref(o);
			char *path = apf_path_join(to, name);
			rc = path ? apf_file_write(path, text, len, 0644, 0)
				  : NOMEM(name);
			free(path);
			free(text);
			if (rc)
				return rc;
		}
	return 0;
}

/* What AlgoPerf's runner writes beside each trial's CSV, from what the
 * run directory says (run.json's machine), for an apf run. */
static int apf_meta(const struct export *x, size_t c,
		    const struct apf_score_submission *s, int study, int trial,
		    size_t ntrials, const char *to)
{
	const struct apf_score_target *t = &x->tg[c];
	json_t *meta = json_pack("{s:s, s:f, s:I}", "workload.target_metric_name",
				 x->metric[c], "workload.validation_target_value",
				 t->validation, "workload.step_hint",
				 (json_int_t)t->step_hint);
	const struct apf_score_hardware *hw = s->run ? &s->run->hw : NULL;
	int bad = !meta;
	if (!bad && hw && hw->cpu_model)
		bad = json_object_set_new(meta, "cpu_model_name",
					  json_string(hw->cpu_model));
	if (!bad && hw && hw->cpu_cores >= 0)
		bad = json_object_set_new(meta, "cpu_count",
					  json_integer(hw->cpu_cores));
	if (!bad && hw && hw->gpus > 0 && hw->gpu_model)
		bad = json_object_set_new(meta, "gpu_model_name",
					  json_string(hw->gpu_model)) ||
		      json_object_set_new(meta, "gpu_count",
					  json_integer(hw->gpus));
	if (!bad && hw && hw->device)
		bad = json_object_set_new(meta, "apf.device",
					  json_string(hw->device));
	if (!bad && hw && hw->threads >= 0)
		bad = json_object_set_new(meta, "apf.threads",
					  json_integer(hw->threads));
	char unit[512];
	int n = apf_rundir_unit_name(unit, sizeof unit, study,
				     x->r->workloads[c], NULL, trial);
	bad = bad || n < 0 || (size_t)n >= sizeof unit ||
	      json_object_set_new(meta, "apf.unit", json_string(unit)) ||
	      json_object_set_new(meta, "apf.verified",
				  json_boolean(s->verified ==
					       APF_SCORE_VERIFIED));
	int rc = bad ? NOMEM("meta_data_0.json")
		     : write_json(to, "meta_data_0.json", meta);
	json_decref(meta);
	if (rc)
		return rc;
	json_t *flags = json_pack(
		"{s:s, s:s, s:s, s:s, s:I}", "framework", "apf", "workload",
		x->r->workloads[c], "tuning_ruleset",
		x->r->rules->self_tuning ? "self" : "external",
		"experiment_name", s->name, "num_tuning_trials",
		(json_int_t)ntrials);
	rc = flags ? write_json(to, "flags_0.json", flags)
		   : NOMEM("flags_0.json");
	json_decref(flags);
	return rc;
}

static int export_trial(struct export *x, size_t c,
			const struct apf_score_submission *s,
			const struct apf_score_workload *w,
			const struct apf_score_study *st,
			const struct apf_score_trial *tr, const char *sdir)
{
	const char *csv = tr->csv;
	if (tr->missing) {
		char unit[512];
		int n = apf_rundir_unit_name(unit, sizeof unit, st->number,
					     w->dir_name, NULL, tr->number);
		return apf_error(APF_EINPUT, "--export-algoperf",
				 "%s: %s has no eval_measurements.csv: apf "
				 "counts it as never meeting its target, "
				 "AlgoPerf's scorer would leave it out; a run "
				 "missing units of its plan is not exported",
				 s->name,
				 n > 0 && (size_t)n < sizeof unit ? unit
								  : w->dir_name);
	}
	if (tr->refused)
		return apf_error(APF_EINPUT, "--export-algoperf",
				 "%s: refused when scored, so AlgoPerf's scorer "
				 "would read it otherwise; the export holds "
				 "only what apf scored",
				 csv);
	/* The unit's directory, named as apf names a run's (the workload
	 * directory as found: AlgoPerf's keep their framework suffix). */
	char unit[512];
	int n = apf_rundir_unit_name(unit, sizeof unit, st->number,
				     w->dir_name, NULL, tr->number);
	if (n < 0 || (size_t)n >= sizeof unit)
		return apf_error(APF_EINPUT, "--export-algoperf",
				 "%s: unit name too long", csv);
	char *to = apf_path_join(sdir, unit);
	char *parent = to ? apf_strdup(to) : NULL;
	if (!parent) {
		free(to);
		return NOMEM(csv);
	}
	*strrchr(parent, '/') = '\0';
	int rc = apf_mkdirs(parent, 0755);
	free(parent);
	if (!rc && mkdir(to, 0755) != 0)
		rc = errno == EEXIST
			     ? apf_error(APF_EINPUT, "--export-algoperf",
					 "%s: another trial of %s has the same "
					 "number %d (numbers with leading zeros "
					 "name one directory)",
					 csv, x->r->workloads[c], tr->number)
			     : apf_error_errno(APF_EIO, errno, to, "mkdir");
	char *text = NULL;
	size_t len = 0;
	if (!rc)
		rc = apf_file_read_regular(&text, &len, csv, APF_MAX_CSV_BYTES);
	/* The bytes written must be the ones scored: up to the row of the
	 * eval at or past the budget, which AlgoPerf's runner never makes
	 * (its scorer would count a target met there). */
	long evals, hit = -1;
	double time = INFINITY;
	int late = 0;
	size_t cut = len;
	if (!rc)
		rc = apf_score_parse_trial_within(text, len, csv, &x->tg[c],
						  tr->budget, &evals, &hit,
						  &time, &late, &cut);
	if (!rc)
		len = cut;
	if (!rc && (hit != tr->hit ||
		    !(time == tr->time || (isinf(time) && isinf(tr->time)))))
		rc = apf_error(APF_EINPUT, csv,
			       "changed since it was scored; score and export "
			       "again");
	if (!rc && strcmp(x->metric[c], x->tg[c].metric))
		rc = same_as_loss(text, len, csv, x->tg[c].metric);
	char *path = rc ? NULL : apf_path_join(to, "eval_measurements.csv");
	if (!rc)
		rc = path ? apf_file_write(path, text, len, 0644, 0)
			  : NOMEM(csv);
	free(path);
	free(text);
	/* hparams.json as it is, when it is a JSON object (the runner wrote
	 * it; AlgoPerf's scorer does not read it, people do). */
	char *from = rc ? NULL : apf_strdup(csv);
	char *slash = from ? strrchr(from, '/') : NULL;
	if (!rc && !from)
		rc = NOMEM(csv);
	if (slash)
		*slash = '\0';
	if (!rc && slash) {
		text = NULL;
		rc = apf_file_read_beneath(&text, &len, from, "hparams.json",
					   APF_MAX_SMALL_JSON_BYTES,
					   APF_FILE_MISSING_OK);
		json_t *h = !rc && text ? json_loadb(text, len, 0, NULL) : NULL;
		if (json_is_object(h)) {
			path = apf_path_join(to, "hparams.json");
			rc = path ? apf_file_write(path, text, len, 0644, 0)
				  : NOMEM(csv);
			free(path);
		}
		json_decref(h);
		free(text);
	}
	if (!rc && slash)
		rc = s->apf_run ? apf_meta(x, c, s, st->number, tr->number,
					   st->ntrials, to)
				: copy_algoperf_json(from, to);
	free(from);
	free(to);
	return rc;
}

/* A study whose earliest eval to meet the target was met by more than one
 * trial, at different times: AlgoPerf's scorer takes whichever of them its
 * directory listing returns first, apf the fastest. Recorded in x->ties
 * ({submission, workload, study, eval, trials, times}; eval counts from 1). */
static int ties(struct export *x, size_t c,
		const struct apf_score_submission *s,
		const struct apf_score_study *st)
{
	long first = -1;
	for (size_t i = 0; i < st->ntrials; i++)
		if (st->trials[i].hit >= 0 &&
		    (first < 0 || st->trials[i].hit < first))
			first = st->trials[i].hit;
	if (first < 0)
		return 0;
	size_t at = 0, differ = 0;
	double t0 = NAN;
	for (size_t i = 0; i < st->ntrials; i++) {
		if (st->trials[i].hit != first)
			continue;
		if (at++ == 0)
			t0 = st->trials[i].time;
		else if (st->trials[i].time != t0)
			differ = 1;
	}
	if (!differ)
		return 0;
	json_t *trials = json_array(), *times = json_array();
	int bad = !trials || !times;
	for (size_t i = 0; !bad && i < st->ntrials; i++)
		if (st->trials[i].hit == first)
			bad = json_array_append_new(
				      trials,
				      json_integer(st->trials[i].number)) ||
			      json_array_append_new(
				      times, json_real(st->trials[i].time));
	json_t *o = bad ? NULL
			: json_pack("{s:s, s:s, s:i, s:I, s:O, s:O}",
				    "submission", s->name, "workload",
				    x->r->workloads[c], "study", st->number,
				    "eval", (json_int_t)first + 1, "trials",
				    trials,
				    "times", times);
	json_decref(trials);
	json_decref(times);
	if (!o || json_array_append_new(x->ties, o))
		return NOMEM("--export-algoperf");
	return 0;
}

/* The one warning the ties make: how many, and the first few. */
static int ties_warning(struct export *x)
{
	size_t n = json_array_size(x->ties);
	if (!n)
		return 0;
	apf_buf b = {0};
	int rc = 0;
	for (size_t i = 0; !rc && i < n && i < 3; i++) {
		json_t *t = json_array_get(x->ties, i);
		rc = apf_buf_printf(
			&b, "%s%s: study %d of %s at eval %lld", i ? "; " : "",
			json_string_value(json_object_get(t, "submission")),
			(int)json_integer_value(json_object_get(t, "study")),
			json_string_value(json_object_get(t, "workload")),
			(long long)json_integer_value(json_object_get(t, "eval")));
	}
	if (!rc)
		rc = warn(x,
			  "%zu stud%s in which trials first met the target at "
			  "the same eval at different times (%s%s): apf counts "
			  "the fastest, AlgoPerf's scorer whichever its "
			  "directory listing returns first, so its times there "
			  "may differ (apf_export.json lists them all)",
			  n, n == 1 ? "y" : "ies", b.data, n > 3 ? "; ..." : "");
	else
		rc = NOMEM("--export-algoperf");
	apf_buf_free(&b);
	return rc;
}

static int export_submission(struct export *x,
			     const struct apf_score_submission *s,
			     const char *subs)
{
	if (!plain_name(s->name))
		return name_refused("submission name", s->name,
				    "; score it as DIR=LABEL");
	char *sdir = apf_path_join(subs, s->name);
	if (!sdir)
		return NOMEM(s->name);
	int rc = 0;
	if (mkdir(sdir, 0755) != 0)
		rc = apf_error_errno(APF_EIO, errno, sdir, "mkdir");
	const apf_score_result *r = x->r;
	for (size_t c = 0; !rc && c < r->nbase + r->nvar; c++) {
		const struct apf_score_workload *w =
			find_workload(s, r->workloads[c]);
		if (!w)
			continue;
		if (!plain_name(w->dir_name))
			rc = name_refused("workload directory", w->dir_name,
					  "");
		for (size_t k = 0; !rc && k < w->nstudies; k++) {
			const struct apf_score_study *st = &w->studies[k];
			for (size_t i = 0; !rc && i < st->ntrials; i++)
				rc = export_trial(x, c, s, w, st,
						  &st->trials[i], sdir);
			if (!rc && r->rules->best == APF_SCORE_BEST_FIRST_EVAL)
				rc = ties(x, c, s, st);
		}
	}
	free(sdir);
	return rc;
}

/* apf_export.json: where the export came from and what apf made of it. */
static int provenance(struct export *x, const char *path)
{
	json_t *s = apf_score_result_json(x->r);
	int bad = !s;
	json_t *warnings = json_array();
	for (size_t i = 0; !bad && warnings && i < x->nwarnings; i++)
		bad = json_array_append_new(warnings,
					    json_string(x->warnings[i]));
	json_t *o = bad || !warnings
			    ? NULL
			    : json_pack("{s:s, s:s, s:O, s:O, s:O}", "format",
					"apf-algoperf-export/1",
					"algoperf_command", x->command,
					"export_warnings", warnings, "ties",
					x->ties, "apf_score", s);
	json_decref(warnings);
	json_decref(s);
	int rc = o ? write_json(path, "apf_export.json", o)
		 : NOMEM("apf_export.json");
	json_decref(o);
	return rc;
}

/* p for a shell: as it is when it holds only [A-Za-z0-9._/+-], else in
 * single quotes. */
static int shell_word(apf_buf *b, const char *p, size_t n)
{
	int plain = n > 0;
	for (size_t i = 0; i < n && plain; i++)
		plain = strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
			       "0123456789._/+-",
			       p[i]) != NULL;
	if (plain)
		return apf_buf_append(b, p, n);
	int rc = apf_buf_puts(b, "'");
	for (size_t i = 0; !rc && i < n; i++)
		rc = p[i] == '\'' ? apf_buf_puts(b, "'\\''")
				  : apf_buf_append(b, &p[i], 1);
	return rc || apf_buf_puts(b, "'");
}

/* The command that scores the export, from AlgoPerf's repository root:
 * so with dir made absolute. */
static int scorer_command(struct export *x, size_t dlen)
{
	apf_buf abs = {0}, c = {0};
	int rc = 0;
	if (x->dir[0] != '/') {
		char *cwd = getcwd(NULL, 0);
		rc = !cwd || apf_buf_printf(&abs, "%s/", cwd);
		free(cwd);
	}
	rc = rc || apf_buf_append(&abs, x->dir, dlen);
	for (int k = 0; !rc && k < 2; k++)
		rc = apf_buf_puts(&c, k ? " --workload_targets "
					: "python3 -m scoring.score_submissions "
					  "--submission_directory ") ||
		     shell_word(&c, abs.data, abs.len) ||
		     apf_buf_puts(&c, k ? "/workload_targets.json"
					: "/submissions");
	rc = rc || apf_buf_printf(&c, " --compute_performance_profiles%s",
				  x->r->rules->self_tuning
					  ? " --self_tuning_ruleset"
					  : "");
	apf_buf_free(&abs);
	if (rc) {
		apf_buf_free(&c);
		return NOMEM("--export-algoperf");
	}
	x->command = c.data;
	return 0;
}

static int export_all(struct export *x)
{
	const apf_score_result *r = x->r;
	size_t nc = r->nbase + r->nvar;
	x->tg = apf_calloc(nc ? nc : 1, sizeof *x->tg);
	x->metric = apf_calloc(nc ? nc : 1, sizeof *x->metric);
	if (!x->tg || !x->metric)
		return NOMEM("--export-algoperf");
	int rc = 0;
	for (size_t c = 0; !rc && c < nc; c++) {
		rc = apf_score_targets_find(&x->tg[c], NULL, x->targets,
					    r->rules, r->workloads[c]);
		if (!rc && x->tg[c].step_hint <= 0)
			rc = apf_error(APF_EINPUT, "--export-algoperf",
				       "%s: the targets (%s) give no step_hint, "
				       "which AlgoPerf's targets file needs",
				       r->workloads[c],
				       apf_score_targets_source(x->targets));
		if (!rc)
			rc = choose_metric(x, c);
	}
	char *subs = rc ? NULL : apf_path_join(x->tmp, "submissions");
	if (!rc && !subs)
		rc = NOMEM("--export-algoperf");
	if (!rc && mkdir(subs, 0755) != 0)
		rc = apf_error_errno(APF_EIO, errno, subs, "mkdir");
	for (size_t i = 0; !rc && i < r->nsub; i++)
		rc = export_submission(x, r->sub[i], subs);
	free(subs);
	apf_buf t = {0};
	if (!rc)
		rc = targets_json(x, &t);
	char *path = rc ? NULL : apf_path_join(x->tmp, "workload_targets.json");
	if (!rc)
		rc = path ? apf_file_write(path, t.data, t.len, 0644, 0)
			  : NOMEM("--export-algoperf");
	free(path);
	apf_buf_free(&t);
	if (!rc)
		rc = ties_warning(x);
	if (!rc)
		rc = provenance(x, x->tmp);
	return rc;
}

int apf_score_export_algoperf(char ***warnings, size_t *nwarnings,
			      char **command, const apf_score_result *r,
			      apf_score_targets *targets, const char *dir)
{
	*warnings = NULL;
	*nwarnings = 0;
	*command = NULL;
	if (r->rules->best != APF_SCORE_BEST_FIRST_EVAL)
		return apf_error(APF_EUSAGE, "--export-algoperf",
				 "scored by the %s rules (each study's fastest "
				 "trial); AlgoPerf's scorer takes the trial "
				 "that met the target at the earliest eval: "
				 "score with --rules algoperf-0.6 (or "
				 "algoperf-0.5) to export",
				 r->rules->name);
	struct stat st;
	if (lstat(dir, &st) == 0 &&
	    !(S_ISDIR(st.st_mode) && apf_dir_is_empty(dir) == 1))
		return apf_error(APF_EUSAGE, dir,
				 "exists and is not an empty directory; "
				 "remove it or export elsewhere");
	/* "out/" names out: the temporary goes beside it, not inside. */
	size_t dlen = strlen(dir);
	while (dlen > 1 && dir[dlen - 1] == '/')
		dlen--;
	struct export x = {.r = r, .targets = targets, .dir = dir,
			   .ties = json_array()};
	apf_buf tmp = {0};
	if (!x.ties || apf_buf_printf(&tmp, "%.*s.tmp-XXXXXX", (int)dlen, dir)) {
		json_decref(x.ties);
		return NOMEM(dir);
	}
	int rc = 0;
	if (!mkdtemp(tmp.data))
		rc = apf_error_errno(APF_EIO, errno, tmp.data, "mkdtemp");
	else
		x.tmp = tmp.data;
	if (!rc && chmod(x.tmp, 0755) != 0)
		rc = apf_error_errno(APF_EIO, errno, x.tmp, "chmod");
	if (!rc)
		rc = scorer_command(&x, dlen);
	if (!rc)
		rc = export_all(&x);
	if (!rc && rename(x.tmp, dir) != 0)
		rc = apf_error_errno(APF_EIO, errno, dir,
				     errno == ENOTEMPTY || errno == EEXIST
					     ? "rename (something appeared "
					       "there meanwhile)"
					     : "rename");
	if (!rc) {
		char *parent = strndup(dir, dlen);
		char *slash = parent ? strrchr(parent, '/') : NULL;
		if (slash && slash != parent)
			*slash = '\0';
		rc = !parent ? NOMEM(dir)
		     : apf_fsync_dir(slash ? (slash == parent ? "/" : parent)
					   : ".");
		free(parent);
	} else if (x.tmp) {
		apf_remove_tree(x.tmp);
	}
	apf_buf_free(&tmp);
	json_decref(x.ties);
	free(x.tg);
	free(x.metric);
	if (rc) {
		for (size_t i = 0; i < x.nwarnings; i++)
			free(x.warnings[i]);
		free(x.warnings);
		free(x.command);
		return rc;
	}
	*command = x.command;
	*warnings = x.warnings;
	*nwarnings = x.nwarnings;
	return 0;
}
