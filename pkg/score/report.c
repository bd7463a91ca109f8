/*
 * report.c: a score result as a text table, CSV, JSON and an SVG plot of the
 * performance profiles.
 *
 * Times are the ones the profile used (after the held-out rules); where a
 * submission met a target but the held-out rules took the credit away, the
 * table shows "inf*" and the JSON keeps both. JSON has no infinity, so a
 * missed target is the string "inf" there and a workload without logs is
 * null; the CSV writes inf and leaves the cell empty.
 */
#include "score/score.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#define NOMEM apf_error(APF_ENOMEM, "score", "out of memory")

static size_t ncols(const apf_score_result *r)
{
	return r->nbase + r->nvar;
}

void apf_score_format_seconds(char *out, size_t size, double t, int sig,
			      int min_decimals)
{
	if (!isfinite(t)) {
		snprintf(out, size, isnan(t) ? "nan" : t > 0 ? "inf" : "-inf");
		return;
	}
	int decimals = min_decimals;
	double a = fabs(t);
	if (a > 0) {
		/* Digits before the point: floor(log10(a)) + 1, checked
		 * against the value, as log10 can round across a power of 10. */
		int e = (int)floor(log10(a));
		if (pow(10.0, e) > a)
			e--;
		else if (pow(10.0, e + 1) <= a)
			e++;
		if (sig - 1 - e > decimals)
			decimals = sig - 1 - e;
	}
	if (decimals > 12)
		decimals = 12;
	snprintf(out, size, "%.*f", decimals, t);
}

/* A table cell: the time (4 significant digits), inf, or - without logs;
 * "*" where the held-out rules took the credit, "!" where a unit stopped
 * early, "?" where a unit's progress was implausible (the plausibility
 * backstop). */
static void fmt_time(char *out, size_t size, double t, double raw, int early,
		     int implausible)
{
	char num[48];
	if (isnan(t))
		snprintf(num, sizeof num, "-");
	else if (isinf(t))
		snprintf(num, sizeof num, isfinite(raw) ? "inf*" : "inf");
	else
		apf_score_format_seconds(num, sizeof num, t, 4, 0);
	snprintf(out, size, "%s%s%s", num, early ? "!" : "",
		 implausible ? "?" : "");
}

static int implausible_at(const apf_score_result *r, size_t i)
{
	return r->implausible && r->implausible[i];
}

/* Equal scores share a rank. */
static size_t rank_of(const apf_score_result *r, size_t i)
{
	size_t k = i;
	while (k > 0 && r->score[k - 1] == r->score[i])
		k--;
	return k + 1;
}

/* Text from the logs as a terminal shows it: the copy apf_buf_escape
 * makes (NULL when out of memory). Submission and workload names are
 * directory names or run.json's, chosen by whoever made the logs. */
static char *shown(const char *s)
{
	apf_buf b = {0};
	if (apf_buf_escape(&b, s)) {
		apf_buf_free(&b);
		return NULL;
	}
	return b.data;
}

static void free_shown(char **v, size_t n)
{
	for (size_t i = 0; v && i < n; i++)
		free(v[i]);
	free(v);
}

/* One table: rank, submission, score, then the times of columns
 * [from, to); variants go in a second table of their own. Names are
 * escaped before the columns are measured, so they line up as printed. */
static int table(const apf_score_result *r, apf_buf *out, size_t from,
		 size_t to, int with_score)
{
	size_t nc = ncols(r), namew = strlen("submission");
	size_t *w = apf_calloc(nc, sizeof *w);
	char **name = apf_calloc(r->nsub, sizeof *name);
	char **wl = apf_calloc(nc, sizeof *wl);
	int rc = !w || !name || !wl ? APF_ENOMEM : 0;
	for (size_t s = 0; !rc && s < r->nsub; s++)
		if (!(name[s] = shown(r->sub[s]->name)))
			rc = APF_ENOMEM;
	for (size_t c = from; !rc && c < to; c++)
		if (!(wl[c] = shown(r->workloads[c])))
			rc = APF_ENOMEM;
	for (size_t s = 0; !rc && s < r->nsub; s++)
		if (strlen(name[s]) > namew)
			namew = strlen(name[s]);
	char cell[64];
	for (size_t c = from; !rc && c < to; c++) {
		w[c] = strlen(wl[c]);
		for (size_t s = 0; s < r->nsub; s++) {
			fmt_time(cell, sizeof cell, r->final[s * nc + c],
				 r->raw[s * nc + c], r->early[s * nc + c],
				 implausible_at(r, s * nc + c));
			if (strlen(cell) > w[c])
				w[c] = strlen(cell);
		}
	}
	if (!rc)
		rc = with_score ? apf_buf_printf(out, "rank  %-*s   score",
						 (int)namew, "submission")
				: apf_buf_printf(out, "%-*s", (int)namew,
						 "submission");
	for (size_t c = from; !rc && c < to; c++)
		rc = apf_buf_printf(out, "  %*s", (int)w[c], wl[c]);
	if (!rc)
		rc = apf_buf_puts(out, "\n");
	for (size_t s = 0; !rc && s < r->nsub; s++) {
		rc = with_score ? apf_buf_printf(out, "%4zu  %-*s  %.4f",
						 rank_of(r, s), (int)namew,
						 name[s], r->score[s])
				: apf_buf_printf(out, "%-*s", (int)namew,
						 name[s]);
		for (size_t c = from; !rc && c < to; c++) {
			fmt_time(cell, sizeof cell, r->final[s * nc + c],
				 r->raw[s * nc + c], r->early[s * nc + c],
				 implausible_at(r, s * nc + c));
			rc = apf_buf_printf(out, "  %*s", (int)w[c], cell);
		}
		if (!rc)
			rc = apf_buf_puts(out, "\n");
	}
	free(w);
	free_shown(name, r->nsub);
	free_shown(wl, nc);
	return rc;
}

static int any_early(const apf_score_result *r)
{
	for (size_t i = 0; i < r->nsub * ncols(r); i++)
		if (r->early[i])
			return 1;
	return 0;
}

static int any_implausible(const apf_score_result *r)
{
	for (size_t i = 0; i < r->nsub * ncols(r); i++)
		if (implausible_at(r, i))
			return 1;
	return 0;
}

/* The plausibility backstop: what was held against reference curves, each
 * flagged unit and each workload without a curve. */
static int plausibility_section(const apf_score_result *r, apf_buf *out)
{
	size_t met = r->plausibility_checked + r->plausibility_uncurved;
	int rc = 0;
	if (!r->nflags && !r->nplausibility_notes && !met)
		return 0;
	if (met)
		rc = apf_buf_printf(
			out,
			"\nplausibility: %zu of %zu unit%s that met %s target "
			"held against reference curves (flagged under "
			APF_REFCURVE_FACTOR_TEXT " of the fastest reference "
			"run's examples): %zu flagged\n",
			r->plausibility_checked, met, met == 1 ? "" : "s",
			met == 1 ? "its" : "their", r->nflags);
	else
		rc = apf_buf_puts(out, "\nplausibility: no unit that met its "
				       "target was held against a reference "
				       "curve\n");
	/* The lines name units and workloads from the logs: escaped. */
	for (size_t i = 0; !rc && i < r->nflags; i++) {
		rc = apf_buf_puts(out, "  WARNING: implausible progress: ");
		if (!rc)
			rc = apf_buf_escape(out, r->flags[i].text);
		if (!rc)
			rc = apf_buf_puts(out, "\n");
	}
	for (size_t i = 0; !rc && i < r->nplausibility_notes; i++) {
		rc = apf_buf_puts(out, "  ");
		if (!rc)
			rc = apf_buf_escape(out, r->plausibility_notes[i]);
		if (!rc)
			rc = apf_buf_puts(out, "\n");
	}
	return rc;
}

/* One line: what was verified. */
static int verification_line(const apf_score_result *r, apf_buf *out)
{
	size_t runs = 0, verified = 0, logs = 0;
	for (size_t s = 0; s < r->nsub; s++) {
		runs += r->sub[s]->apf_run;
		logs += !r->sub[s]->apf_run;
		verified += r->sub[s]->verified == APF_SCORE_VERIFIED;
	}
	size_t excluded = r->logs ? r->logs->nexcluded : 0;
	if (!r->verify)
		return runs ? apf_buf_printf(
				      out,
				      "verified: no - %zu apf run%s scored "
				      "unverified, as on disk (pass --verify)\n",
				      runs, runs == 1 ? "" : "s")
			    : apf_buf_puts(out, "verified: no - AlgoPerf logs "
						"hold nothing to verify\n");
	int rc = apf_buf_printf(out, "verified: %zu apf run%s (apf verify's "
				     "checks, %s%s)",
				verified, verified == 1 ? "" : "s",
				r->audit[0] ? "with " : "",
				r->audit[0] ? r->audit
					    : "no re-evaluation or replay");
	if (!rc && excluded)
		rc = apf_buf_printf(out, "; %zu failed, not ranked", excluded);
	if (!rc && logs)
		rc = apf_buf_printf(out, "; %zu AlgoPerf log director%s, not "
					 "verifiable",
				    logs, logs == 1 ? "y" : "ies");
	return rc ? rc : apf_buf_puts(out, "\n");
}

/* One line: the apf runs' machine, when they share one (the warnings say
 * where they differ). */
static int hardware_line(const apf_score_result *r, apf_buf *out)
{
	apf_buf first = {0}, other = {0};
	size_t runs = 0;
	int rc = 0, same = 1;
	for (size_t s = 0; !rc && s < r->nsub; s++) {
		const apf_score_run *run = r->sub[s]->run;
		if (!run)
			continue;
		apf_buf *b = runs++ ? &other : &first;
		b->len = 0;
		rc = apf_score_hardware_describe(b, &run->hw);
		if (!rc && b == &other && strcmp(first.data, other.data))
			same = 0;
	}
	/* CPU and GPU models are run.json's claims. */
	if (!rc && runs && same)
		rc = apf_buf_puts(out, "hardware: ") ||
		     apf_buf_escape(out, first.data) ||
		     apf_buf_puts(out, runs > 1 ? " (every apf run)\n" : "\n");
	apf_buf_free(&first);
	apf_buf_free(&other);
	return rc;
}

/* "<label><text, escaped>\n" */
static int escaped_line(apf_buf *out, const char *label, const char *text)
{
	return apf_buf_puts(out, label) || apf_buf_escape(out, text) ||
	       apf_buf_puts(out, "\n");
}

/* The table goes to a terminal: every name, path, reason and warning in
 * it came from the logs or the command line and is escaped as it is put
 * in (apf_buf_escape), each on its line. */
int apf_score_format_table(apf_buf *out, const apf_score_result *r)
{
	int rc = apf_buf_printf(out, "rules: %s\n  %s\n", r->rules->name,
				r->rules->summary);
	if (!rc && r->rules->self_tuning)
		rc = apf_buf_printf(out, "  self-tuning ruleset: one trial per "
					 "study, runtime budget x%g of external "
					 "tuning's\n",
				    r->rules->self_tuning_budget);
	if (!rc)
		rc = escaped_line(out, "targets: ", r->targets_source);
	if (!rc && r->nvar)
		rc = escaped_line(out, "held-out variants: ", r->heldout_source);
	if (!rc && r->nvar && r->heldout_binding[0])
		rc = escaped_line(out, "  drawn with ", r->heldout_binding);
	if (!rc)
		rc = verification_line(r, out);
	if (!rc)
		rc = hardware_line(r, out);
	if (!rc)
		rc = apf_buf_printf(out, "\nbase workloads: median time-to-"
					 "target (s)\n");
	if (!rc)
		rc = table(r, out, 0, r->nbase, 1);
	if (!rc && r->nvar) {
		rc = apf_buf_puts(out, "\nheld-out variants: median time-to-"
				       "target (s)\n");
		if (!rc)
			rc = table(r, out, r->nbase, r->nbase + r->nvar, 0);
	}
	if (!rc)
		rc = apf_buf_puts(
			out,
			"\nscore: integral of the performance profile over tau "
			"in [1, 4], divided by 3;\ninf: target missed; inf*: "
			"met, but no credit under the held-out rules; -: no "
			"logs.\n");
	if (!rc && any_early(r))
		rc = apf_buf_puts(out, "!: a unit behind it stopped early "
				       "(failed, the run was interrupted, or it "
				       "never ran)\n   before meeting its "
				       "target: the time "
				       "or miss is not one over the whole "
				       "budget; see the warnings.\n");
	if (!rc && any_implausible(r))
		rc = apf_buf_puts(out, "?: a unit behind it reached its target "
				       "in implausibly few training examples "
				       "against the\n   workload's reference "
				       "curve; the time is scored as logged "
				       "(see plausibility).\n");
	if (!rc)
		rc = plausibility_section(r, out);
	size_t nx = r->logs ? r->logs->nexcluded : 0;
	if (!rc && nx)
		rc = apf_buf_printf(out, "\nnot ranked (%zu):\n", nx);
	for (size_t i = 0; !rc && i < nx; i++)
		rc = apf_buf_puts(out, "  ") ||
		     apf_buf_escape(out, r->logs->excluded[i].name) ||
		     escaped_line(out, ": not verified: ",
				  r->logs->excluded[i].reason);
	if (!rc && r->nwarnings)
		rc = apf_buf_printf(out, "\nwarnings (%zu):\n", r->nwarnings);
	for (size_t i = 0; !rc && i < r->nwarnings; i++)
		rc = escaped_line(out, "  ", r->warnings[i]);
	return rc ? NOMEM : 0;
}

/* RFC 4180: quote a field holding a comma, quote or line break. */
static int csv_field(apf_buf *out, const char *s)
{
	if (!strpbrk(s, ",\"\r\n"))
		return apf_buf_puts(out, s);
	int rc = apf_buf_puts(out, "\"");
	for (const char *p = s; !rc && *p; p++)
		rc = *p == '"' ? apf_buf_puts(out, "\"\"")
			       : apf_buf_append(out, p, 1);
	return rc ? rc : apf_buf_puts(out, "\"");
}

int apf_score_format_csv(apf_buf *out, const apf_score_result *r)
{
	size_t nc = ncols(r);
	int rc = apf_buf_puts(out, "submission,score");
	for (size_t c = 0; !rc && c < nc; c++) {
		rc = apf_buf_puts(out, ",");
		if (!rc)
			rc = csv_field(out, r->workloads[c]);
	}
	/* The plausibility backstop's column, only where it flagged a cell:
	 * the flagged workloads, space-separated. */
	int flags = any_implausible(r);
	if (!rc && flags)
		rc = apf_buf_puts(out, ",implausible");
	for (size_t s = 0; !rc && s < r->nsub; s++) {
		rc = apf_buf_puts(out, "\n");
		if (!rc)
			rc = csv_field(out, r->sub[s]->name);
		if (!rc)
			rc = apf_buf_printf(out, ",%.6f", r->score[s]);
		for (size_t c = 0; !rc && c < nc; c++) {
			double t = r->final[s * nc + c];
			char num[48];
			apf_score_format_seconds(num, sizeof num, t, 6, 6);
			rc = isnan(t)   ? apf_buf_puts(out, ",")
			     : isinf(t) ? apf_buf_puts(out, ",inf")
					: apf_buf_printf(out, ",%s", num);
		}
		if (!rc && flags) {
			apf_buf cell = {0};
			for (size_t c = 0; !rc && c < nc; c++)
				if (implausible_at(r, s * nc + c))
					rc = apf_buf_printf(&cell, "%s%s",
							    cell.len ? " " : "",
							    r->workloads[c]);
			if (!rc)
				rc = apf_buf_puts(out, ",");
			if (!rc && cell.data)
				rc = csv_field(out, cell.data);
			apf_buf_free(&cell);
		}
	}
	if (!rc)
		rc = apf_buf_puts(out, "\n");
	return rc ? NOMEM : 0;
}

static json_t *jtime(double t)
{
	if (isnan(t))
		return json_null();
	if (isinf(t))
		return json_string("inf");
	return json_real(t);
}

/* json_object_set_new and friends, failing on the first NULL. */
static int jset(json_t *o, const char *k, json_t *v)
{
	return !v || json_object_set_new(o, k, v) ? -1 : 0;
}

static int jpush(json_t *a, json_t *v)
{
	return !v || json_array_append_new(a, v) ? -1 : 0;
}

/* Text from the logs or the command line (names, paths, reasons,
 * warnings) as a JSON string: made valid UTF-8 first (apf_buf_utf8), as
 * jansson refuses anything else and one directory's name must not fail
 * the whole output. NULL when out of memory. */
static json_t *jtext(const char *s)
{
	apf_buf b = {0};
	json_t *j = apf_buf_utf8(&b, s) ? NULL : json_string(b.data);
	apf_buf_free(&b);
	return j;
}

/* jset with such a text as the key (a workload's name). */
static int jset_text(json_t *o, const char *k, json_t *v)
{
	apf_buf b = {0};
	int rc;
	if (apf_buf_utf8(&b, k)) {
		json_decref(v);
		rc = -1;
	} else {
		rc = jset(o, b.data, v);
	}
	apf_buf_free(&b);
	return rc;
}

static json_t *times_object(const apf_score_result *r, const double *row,
			    size_t n)
{
	json_t *o = json_object();
	for (size_t c = 0; o && c < n; c++)
		if (jset_text(o, r->workloads[c], jtime(row[c]))) {
			json_decref(o);
			return NULL;
		}
	return o;
}

static json_t *jstr_or_null(const char *s)
{
	return s ? jtext(s) : json_null();
}

static json_t *jint_or_null(long v)
{
	return v < 0 ? json_null() : json_integer((json_int_t)v);
}

/* An apf run's own account: plan, completeness, failed units, machine. */
static json_t *run_object(const apf_score_run *run)
{
	if (!run)
		return json_null();
	json_t *o = json_object(), *failed = json_array(),
	       *interrupted = json_array(), *hw = json_object();
	size_t with_csv = 0;
	int bad = !o || !failed || !interrupted || !hw;
	for (size_t i = 0; !bad && i < run->nunits; i++) {
		const struct apf_score_unit *u = &run->units[i];
		with_csv += u->planned && u->has_csv;
		if (u->state == APF_SCORE_UNIT_FAILED) {
			json_t *f = json_object();
			bad = jpush(failed, f) ||
			      jset(f, "unit", jtext(u->name)) ||
			      jset(f, "reason", jtext(u->reason)) ||
			      jset(f, "fault", u->fault[0]
						       ? jtext(u->fault)
						       : json_null());
		} else if (u->state == APF_SCORE_UNIT_INTERRUPTED) {
			bad = jpush(interrupted, jtext(u->name));
		}
	}
	const struct apf_score_hardware *h = &run->hw;
	bad = bad ||
	      jset(o, "plan_units",
		   run->plan_known ? json_integer((json_int_t)run->nplanned)
				   : json_null()) ||
	      jset(o, "plan_units_with_csv", json_integer((json_int_t)with_csv)) ||
	      jset(o, "complete",
		   run->log_found && !run->log_error
			   ? json_boolean(run->ended && !json_array_size(
							       interrupted))
			   : json_null()) ||
	      jset(o, "log_error", jstr_or_null(run->log_error)) ||
	      jset(o, "failed", json_incref(failed)) ||
	      jset(o, "interrupted", json_incref(interrupted)) ||
	      jset(hw, "device", jstr_or_null(h->device)) ||
	      jset(hw, "cpu_model", jstr_or_null(h->cpu_model)) ||
	      jset(hw, "cpu_cores", jint_or_null(h->cpu_cores)) ||
	      jset(hw, "threads", jint_or_null(h->threads)) ||
	      jset(hw, "gpu_model", jstr_or_null(h->gpu_model)) ||
	      jset(hw, "gpus", jint_or_null(h->gpus)) ||
	      jset(o, "hardware", json_incref(hw));
	json_decref(failed);
	json_decref(interrupted);
	json_decref(hw);
	if (bad) {
		json_decref(o);
		return NULL;
	}
	return o;
}

/* A flagged unit, as apf verify --json writes one. */
static json_t *flag_object(const apf_score_result *r,
			   const struct apf_score_flag *f)
{
	const struct apf_refcurve_verdict *v = &f->v;
	return json_pack("{s:o*, s:o*, s:o*, s:o*, s:f, s:f, s:I, s:I, s:I, "
			 "s:I, s:o, s:f, s:o*, s:o*, s:o*}",
			 "unit", jtext(f->unit), "workload", jtext(f->workload),
			 "column",
			 f->col >= 0 ? jtext(r->workloads[f->col]) : json_null(),
			 "metric", jtext(f->metric), "level", v->level, "value", v->value,
			 "global_step", (json_int_t)v->global_step,
			 "batch_size", (json_int_t)v->batch_size, "examples",
			 (json_int_t)v->examples, "reference_examples",
			 (json_int_t)v->ref.below, "reference_first",
			 v->ref.reached ? json_integer((json_int_t)v->ref.first)
					: json_null(),
			 "ratio", v->ratio, "reference", jtext(f->reference),
			 "reference_run", jtext(f->reference_run), "text",
			 jtext(f->text));
}

static json_t *plausibility_object(const apf_score_result *r)
{
	json_t *notes = json_array();
	for (size_t i = 0; notes && i < r->nplausibility_notes; i++)
		if (jpush(notes, jtext(r->plausibility_notes[i]))) {
			json_decref(notes);
			notes = NULL;
		}
	return json_pack("{s:f, s:s?, s:I, s:I, s:I, s:o*}", "factor",
			 APF_REFCURVE_FACTOR, "references_dir", r->references_dir,
			 "checked", (json_int_t)r->plausibility_checked,
			 "met_without_curve",
			 (json_int_t)r->plausibility_uncurved, "units_flagged",
			 (json_int_t)r->nflags, "notes", notes);
}

static const char *verified_name(const struct apf_score_submission *s)
{
	return !s->apf_run			   ? "not verifiable"
	       : s->verified == APF_SCORE_VERIFIED ? "yes"
						   : "no";
}

json_t *apf_score_result_json(const apf_score_result *r)
{
	size_t nc = ncols(r);
	json_t *root = json_object(), *a;
	int bad = !root;
	bad = bad || jset(root, "rules", json_string(r->rules->name));
	bad = bad || jset(root, "rules_summary", json_string(r->rules->summary));
	bad = bad || jset(root, "best_trial",
			  json_string(r->rules->best == APF_SCORE_BEST_FIRST_EVAL
					      ? "first-eval"
					      : "min-time"));
	bad = bad || jset(root, "ruleset",
			  json_string(r->rules->self_tuning ? "self-tuning"
							    : "external"));
	bad = bad || jset(root, "self_tuning_budget",
			  json_real(r->rules->self_tuning_budget));
	bad = bad || jset(root, "targets", jtext(r->targets_source));
	bad = bad || jset(root, "heldout",
			  r->heldout_source ? jtext(r->heldout_source)
					    : json_null());
	bad = bad || jset(root, "heldout_binding",
			  r->heldout_source && r->heldout_binding[0]
				  ? jtext(r->heldout_binding)
				  : json_null());
	bad = bad || jset(root, "base_workloads", a = json_array());
	for (size_t c = 0; !bad && c < r->nbase; c++)
		bad = jpush(a, jtext(r->workloads[c]));
	bad = bad || jset(root, "heldout_variants", a = json_array());
	for (size_t v = 0; !bad && v < r->nvar; v++) {
		json_t *o = json_object();
		bad = jpush(a, o) ||
		      jset(o, "base", jtext(r->variant_base[v])) ||
		      jset(o, "variant", jtext(r->workloads[r->nbase + v]));
	}
	bad = bad || jset(root, "tau", a = json_array());
	for (int i = 0; !bad && i < APF_SCORE_POINTS; i++)
		bad = jpush(a, json_real(r->tau[i]));
	bad = bad || jset(root, "submissions", a = json_array());
	for (size_t s = 0; !bad && s < r->nsub; s++) {
		json_t *o = json_object(), *p;
		bad = jpush(a, o) ||
		      jset(o, "rank", json_integer((json_int_t)rank_of(r, s))) ||
		      jset(o, "name", jtext(r->sub[s]->name)) ||
		      jset(o, "path", jtext(r->sub[s]->path)) ||
		      jset(o, "kind", json_string(r->sub[s]->apf_run
							  ? "apf-run"
							  : "algoperf-logs")) ||
		      jset(o, "label", jstr_or_null(r->sub[s]->label)) ||
		      jset(o, "verified", json_string(verified_name(r->sub[s]))) ||
		      jset(o, "run", run_object(r->sub[s]->run)) ||
		      jset(o, "score", json_real(r->score[s])) ||
		      jset(o, "times", times_object(r, &r->final[s * nc], nc)) ||
		      jset(o, "raw_times", times_object(r, &r->raw[s * nc], nc)) ||
		      jset(o, "ratios",
			   times_object(r, &r->ratio[s * r->nbase], r->nbase)) ||
		      jset(o, "profile", p = json_array());
		for (int i = 0; !bad && i < APF_SCORE_POINTS; i++)
			bad = jpush(p, json_real(r->rho[s * APF_SCORE_POINTS + i]));
		bad = bad || jset(o, "stopped_early", p = json_array());
		for (size_t c = 0; !bad && c < nc; c++)
			if (r->early[s * nc + c])
				bad = jpush(p, jtext(r->workloads[c]));
		bad = bad || jset(o, "implausible", p = json_array());
		for (size_t i = 0; !bad && i < r->nflags; i++)
			if (r->flags[i].sub == s)
				bad = jpush(p, flag_object(r, &r->flags[i]));
	}
	bad = bad || jset(root, "plausibility", plausibility_object(r));
	bad = bad || jset(root, "verification",
			  json_string(r->verify ? "apf verify" : "none"));
	bad = bad || jset(root, "audit",
			  r->verify && r->audit[0] ? json_string(r->audit)
						   : json_null());
	bad = bad || jset(root, "excluded", a = json_array());
	for (size_t i = 0; !bad && r->logs && i < r->logs->nexcluded; i++) {
		const struct apf_score_excluded *x = &r->logs->excluded[i];
		json_t *o = json_object();
		bad = jpush(a, o) || jset(o, "name", jtext(x->name)) ||
		      jset(o, "path", jtext(x->path)) ||
		      jset(o, "reason", jtext(x->reason));
	}
	bad = bad || jset(root, "warnings", a = json_array());
	for (size_t i = 0; !bad && i < r->nwarnings; i++)
		bad = jpush(a, jtext(r->warnings[i]));
	if (bad) {
		json_decref(root);
		return NULL;
	}
	return root;
}

int apf_score_format_json(apf_buf *out, const apf_score_result *r)
{
	json_t *root = apf_score_result_json(r);
	/* ASCII alone (every other character as \uXXXX): the JSON goes to
	 * terminals too, and no C1 control or bidi override in a name may
	 * reach one raw. */
	char *text = root ? json_dumps(root, JSON_INDENT(2) | JSON_ENSURE_ASCII)
			  : NULL;
	json_decref(root);
	if (!text)
		return NOMEM;
	int rc = apf_buf_puts(out, text) || apf_buf_puts(out, "\n");
	free(text);
	return rc ? NOMEM : 0;
}

/* ---- SVG ------------------------------------------------------------------ */

/* Text from the logs (a submission's name) as XML text or attribute
 * value: valid UTF-8 first (apf_buf_utf8; an XML reader refuses anything
 * else), then the five markup characters as entities. */
static int xml_text(apf_buf *out, const char *text)
{
	apf_buf u = {0};
	int rc = apf_buf_utf8(&u, text);
	for (const char *s = u.data; !rc && *s; s++) {
		switch (*s) {
		case '&':
			rc = apf_buf_puts(out, "&amp;");
			break;
		case '<':
			rc = apf_buf_puts(out, "&lt;");
			break;
		case '>':
			rc = apf_buf_puts(out, "&gt;");
			break;
		case '"':
			rc = apf_buf_puts(out, "&quot;");
			break;
		case '\'':
			rc = apf_buf_puts(out, "&apos;");
			break;
		default:
			/* XML 1.0 forbids most control characters. */
			rc = (unsigned char)*s < 0x20 ? apf_buf_puts(out, "?")
						      : apf_buf_append(out, s, 1);
		}
	}
	apf_buf_free(&u);
	return rc;
}

/* Ten well-separated colours (Tableau 10); past ten, hues spaced by the
 * golden angle (each submission also has its own dash pattern). */
void apf_score_colour(char out[8], size_t i)
{
	static const char *const tab[] = {"#1f77b4", "#ff7f0e", "#2ca02c",
					  "#d62728", "#9467bd", "#8c564b",
					  "#e377c2", "#7f7f7f", "#bcbd22",
					  "#17becf"};
	if (i < 10) {
		memcpy(out, tab[i], 8);
		return;
	}
	double h = fmod((double)i * 137.508, 360.0) / 60.0, s = 0.65,
	       l = 0.45;
	double c = (1 - fabs(2 * l - 1)) * s, x = c * (1 - fabs(fmod(h, 2) - 1));
	double rgb[3] = {0};
	int k = (int)h;
	const int order[6][2] = {{0, 1}, {1, 0}, {1, 2}, {2, 1}, {2, 0}, {0, 2}};
	rgb[order[k % 6][0]] = c;
	rgb[order[k % 6][1]] = x;
	double m = l - c / 2;
	snprintf(out, 8, "#%02x%02x%02x", (int)lround((rgb[0] + m) * 255),
		 (int)lround((rgb[1] + m) * 255),
		 (int)lround((rgb[2] + m) * 255));
}

/* Dash patterns, one per submission (with its colour), so curves that lie
 * on top of each other still show each; the legend draws the same. */
static const char *dash(size_t i)
{
	static const char *const pat[] = {
		"none",	       "9 4",	  "2 3",      "12 3 3 3",
		"5 2",	       "1 4",	  "14 6",     "6 2 2 2 2 2",
		"3 5",	       "10 2 2 2", "16 4 4 4", "4 4 1 4",
	};
	return pat[i % (sizeof pat / sizeof *pat)];
}

int apf_score_format_svg(apf_buf *out, const apf_score_result *r)
{
	const double left = 80, top = 60, pw = 560, ph = 400, legend_x = 680;
	const double row = 22;
	double height = top + ph + 70;
	if (top + 30 + row * (double)r->nsub + 20 > height)
		height = top + 30 + row * (double)r->nsub + 20;
	const double width = 1000;
#define X(tau) (left + ((tau)-APF_SCORE_TAU_MIN) / \
		(APF_SCORE_TAU_MAX - APF_SCORE_TAU_MIN) * pw)
	/* rho's axis spans [RHO_LO, RHO_HI], wider than [0, 1]: a profile
	 * at 1 (the best on every workload) or 0 stays off the frame. */
#define RHO_LO (-0.04)
#define RHO_HI 1.06
#define Y(rho) (top + (RHO_HI - (rho)) / (RHO_HI - RHO_LO) * ph)
	int rc = apf_buf_printf(
		out,
		"<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
		"<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" "
		"height=\"%.0f\" viewBox=\"0 0 %.0f %.0f\" "
		"font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\">\n"
		"<title>Performance profiles (rules %s)</title>\n"
		"<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n"
		"<text x=\"%.1f\" y=\"30\" font-size=\"20\" text-anchor=\"middle\">"
		"Performance profiles, rules %s</text>\n",
		width, height, width, height, r->rules->name,
		left + pw / 2, r->rules->name);
	/* Grid and ticks. */
	for (int i = 0; !rc && i <= 6; i++) {
		double tau = 1 + 0.5 * i, x = X(tau);
		rc = apf_buf_printf(
			out,
			"<line class=\"grid\" x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" "
			"y2=\"%.1f\" stroke=\"#dddddd\"/>\n"
			"<text x=\"%.1f\" y=\"%.1f\" font-size=\"13\" "
			"text-anchor=\"middle\">%.1f</text>\n",
			x, top, x, top + ph, x, top + ph + 20, tau);
	}
	for (int i = 0; !rc && i <= 5; i++) {
		double rho = 0.2 * i, y = Y(rho);
		rc = apf_buf_printf(
			out,
			"<line class=\"grid\" x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" "
			"y2=\"%.1f\" stroke=\"#dddddd\"/>\n"
			"<text x=\"%.1f\" y=\"%.1f\" font-size=\"13\" "
			"text-anchor=\"end\">%.1f</text>\n",
			left, y, left + pw, y, left - 8, y + 4, rho);
	}
	if (!rc)
		rc = apf_buf_printf(
			out,
			"<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" "
			"fill=\"none\" stroke=\"black\"/>\n"
			"<text x=\"%.1f\" y=\"%.1f\" font-size=\"15\" "
			"text-anchor=\"middle\">\xcf\x84: time-to-target over the "
			"fastest submission's</text>\n"
			"<text x=\"%.1f\" y=\"%.1f\" font-size=\"15\" "
			"text-anchor=\"middle\" transform=\"rotate(-90 %.1f %.1f)\">"
			"\xcf\x81(\xcf\x84): share of base workloads (%zu)</text>\n"
			"<text x=\"%.1f\" y=\"%.1f\" font-size=\"15\" "
			"font-weight=\"bold\">submission (score)</text>\n",
			left, top, pw, ph, left + pw / 2, top + ph + 50,
			left - 50, top + ph / 2, left - 50, top + ph / 2,
			r->nbase, legend_x, top + 10);
	/* One step line per submission: rho jumps at each ratio. */
	for (size_t s = 0; !rc && s < r->nsub; s++) {
		char col[8];
		apf_score_colour(col, s);
		const double *ratio = &r->ratio[s * r->nbase];
		double at1 = 0;
		for (size_t c = 0; c < r->nbase; c++)
			at1 += ratio[c] <= APF_SCORE_TAU_MIN;
		rc = apf_buf_printf(out, "<path class=\"profile\" data-submission=\"");
		if (!rc)
			rc = xml_text(out, r->sub[s]->name);
		if (!rc)
			rc = apf_buf_printf(out, "\" fill=\"none\" stroke=\"%s\" "
						 "stroke-width=\"2.5\" "
						 "stroke-dasharray=\"%s\" "
						 "d=\"M%.2f %.2f",
					    col, dash(s), X(APF_SCORE_TAU_MIN),
					    Y(at1 / (double)r->nbase));
		/* Ratios in (1, 4], in order. */
		double prev = APF_SCORE_TAU_MIN, k = at1;
		for (;;) {
			double next = INFINITY;
			for (size_t c = 0; c < r->nbase; c++)
				if (ratio[c] > prev && ratio[c] < next)
					next = ratio[c];
			if (rc || !(next <= APF_SCORE_TAU_MAX))
				break;
			for (size_t c = 0; c < r->nbase; c++)
				k += ratio[c] == next;
			rc = apf_buf_printf(out, " H%.2f V%.2f", X(next),
					    Y(k / (double)r->nbase));
			prev = next;
		}
		if (!rc)
			rc = apf_buf_printf(out, " H%.2f\"/>\n",
					    X(APF_SCORE_TAU_MAX));
		double ly = top + 30 + row * (double)s;
		if (!rc)
			rc = apf_buf_printf(
				out,
				"<line class=\"legend\" x1=\"%.1f\" y1=\"%.1f\" "
				"x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" "
				"stroke-width=\"2.5\" stroke-dasharray=\"%s\"/>\n"
				"<text x=\"%.1f\" y=\"%.1f\" font-size=\"13\">",
				legend_x, ly, legend_x + 40, ly, col, dash(s),
				legend_x + 48, ly + 4);
		if (!rc)
			rc = xml_text(out, r->sub[s]->name);
		if (!rc)
			rc = apf_buf_printf(out, " (%.4f)</text>\n", r->score[s]);
	}
	if (!rc)
		rc = apf_buf_puts(out, "</svg>\n");
#undef X
#undef Y
#undef RHO_LO
#undef RHO_HI
	return rc ? NOMEM : 0;
}
