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

static void fmt_time(char *out, size_t size, double t, double raw)
{
	if (isnan(t))
		snprintf(out, size, "-");
	else if (isinf(t))
		snprintf(out, size, isfinite(raw) ? "inf*" : "inf");
	else
		snprintf(out, size, "%.1f", t);
}

/* Equal scores share a rank. */
static size_t rank_of(const apf_score_result *r, size_t i)
{
	size_t k = i;
	while (k > 0 && r->score[k - 1] == r->score[i])
		k--;
	return k + 1;
}

/* One table: rank, submission, score, then the times of columns
 * [from, to); variants go in a second table of their own. */
static int table(const apf_score_result *r, apf_buf *out, size_t from,
		 size_t to, int with_score)
{
	size_t nc = ncols(r), namew = strlen("submission");
	for (size_t s = 0; s < r->nsub; s++)
		if (strlen(r->sub[s]->name) > namew)
			namew = strlen(r->sub[s]->name);
	size_t *w = apf_calloc(nc, sizeof *w);
	if (!w)
		return APF_ENOMEM;
	char cell[64];
	for (size_t c = from; c < to; c++) {
		w[c] = strlen(r->workloads[c]);
		for (size_t s = 0; s < r->nsub; s++) {
			fmt_time(cell, sizeof cell, r->final[s * nc + c],
				 r->raw[s * nc + c]);
			if (strlen(cell) > w[c])
				w[c] = strlen(cell);
		}
	}
	int rc = with_score ? apf_buf_printf(out, "rank  %-*s   score",
					     (int)namew, "submission")
			    : apf_buf_printf(out, "%-*s", (int)namew,
					     "submission");
	for (size_t c = from; !rc && c < to; c++)
		rc = apf_buf_printf(out, "  %*s", (int)w[c], r->workloads[c]);
	if (!rc)
		rc = apf_buf_puts(out, "\n");
	for (size_t s = 0; !rc && s < r->nsub; s++) {
		rc = with_score ? apf_buf_printf(out, "%4zu  %-*s  %.4f",
						 rank_of(r, s), (int)namew,
						 r->sub[s]->name, r->score[s])
				: apf_buf_printf(out, "%-*s", (int)namew,
						 r->sub[s]->name);
		for (size_t c = from; !rc && c < to; c++) {
			fmt_time(cell, sizeof cell, r->final[s * nc + c],
				 r->raw[s * nc + c]);
			rc = apf_buf_printf(out, "  %*s", (int)w[c], cell);
		}
		if (!rc)
			rc = apf_buf_puts(out, "\n");
	}
	free(w);
	return rc;
}

int apf_score_format_table(const apf_score_result *r, apf_buf *out)
{
	int rc = apf_buf_printf(out, "rules: %s\n  %s\n", r->rules->name,
				r->rules->summary);
	if (!rc && r->rules->self_tuning)
		rc = apf_buf_printf(out, "  self-tuning ruleset: one trial per "
					 "study, runtime budget x%g of external "
					 "tuning's\n",
				    r->rules->self_tuning_budget);
	if (!rc)
		rc = apf_buf_printf(out, "targets: %s\n", r->targets_source);
	if (!rc && r->nvar)
		rc = apf_buf_printf(out, "held-out variants: %s\n",
				    r->heldout_source);
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

int apf_score_format_csv(const apf_score_result *r, apf_buf *out)
{
	size_t nc = ncols(r);
	int rc = apf_buf_puts(out, "submission,score");
	for (size_t c = 0; !rc && c < nc; c++) {
		rc = apf_buf_puts(out, ",");
		if (!rc)
			rc = csv_field(out, r->workloads[c]);
	}
	for (size_t s = 0; !rc && s < r->nsub; s++) {
		rc = apf_buf_puts(out, "\n");
		if (!rc)
			rc = csv_field(out, r->sub[s]->name);
		if (!rc)
			rc = apf_buf_printf(out, ",%.6f", r->score[s]);
		for (size_t c = 0; !rc && c < nc; c++) {
			double t = r->final[s * nc + c];
			rc = isnan(t)   ? apf_buf_puts(out, ",")
			     : isinf(t) ? apf_buf_puts(out, ",inf")
					: apf_buf_printf(out, ",%.6f", t);
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

static json_t *times_object(const apf_score_result *r, const double *row,
			    size_t n)
{
	json_t *o = json_object();
	for (size_t c = 0; o && c < n; c++)
		if (jset(o, r->workloads[c], jtime(row[c]))) {
			json_decref(o);
			return NULL;
		}
	return o;
}

int apf_score_format_json(const apf_score_result *r, apf_buf *out)
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
	bad = bad || jset(root, "targets", json_string(r->targets_source));
	bad = bad || jset(root, "heldout",
			  r->heldout_source ? json_string(r->heldout_source)
					    : json_null());
	bad = bad || jset(root, "base_workloads", a = json_array());
	for (size_t c = 0; !bad && c < r->nbase; c++)
		bad = jpush(a, json_string(r->workloads[c]));
	bad = bad || jset(root, "heldout_variants", a = json_array());
	for (size_t v = 0; !bad && v < r->nvar; v++) {
		json_t *o = json_object();
		bad = jpush(a, o) ||
		      jset(o, "base", json_string(r->variant_base[v])) ||
		      jset(o, "variant", json_string(r->workloads[r->nbase + v]));
	}
	bad = bad || jset(root, "tau", a = json_array());
	for (int i = 0; !bad && i < APF_SCORE_POINTS; i++)
		bad = jpush(a, json_real(r->tau[i]));
	bad = bad || jset(root, "submissions", a = json_array());
	for (size_t s = 0; !bad && s < r->nsub; s++) {
		json_t *o = json_object(), *p;
		bad = jpush(a, o) ||
		      jset(o, "rank", json_integer((json_int_t)rank_of(r, s))) ||
		      jset(o, "name", json_string(r->sub[s]->name)) ||
		      jset(o, "path", json_string(r->sub[s]->path)) ||
		      jset(o, "kind", json_string(r->sub[s]->apf_run
							  ? "apf-run"
							  : "algoperf-logs")) ||
		      jset(o, "score", json_real(r->score[s])) ||
		      jset(o, "times", times_object(r, &r->final[s * nc], nc)) ||
		      jset(o, "raw_times", times_object(r, &r->raw[s * nc], nc)) ||
		      jset(o, "ratios",
			   times_object(r, &r->ratio[s * r->nbase], r->nbase)) ||
		      jset(o, "profile", p = json_array());
		for (int i = 0; !bad && i < APF_SCORE_POINTS; i++)
			bad = jpush(p, json_real(r->rho[s * APF_SCORE_POINTS + i]));
	}
	bad = bad || jset(root, "warnings", a = json_array());
	for (size_t i = 0; !bad && i < r->nwarnings; i++)
		bad = jpush(a, json_string(r->warnings[i]));
	char *text = bad ? NULL : json_dumps(root, JSON_INDENT(2));
	json_decref(root);
	if (!text)
		return NOMEM;
	int rc = apf_buf_puts(out, text) || apf_buf_puts(out, "\n");
	free(text);
	return rc ? NOMEM : 0;
}

/* ---- SVG ------------------------------------------------------------------ */

static int xml_text(apf_buf *out, const char *s)
{
	int rc = 0;
	for (; !rc && *s; s++) {
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
	return rc;
}

/* Ten well-separated colours (Tableau 10); past ten, hues spaced by the
 * golden angle, and dashes from the second round on. */
static void colour(size_t i, char out[8])
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

int apf_score_format_svg(const apf_score_result *r, apf_buf *out)
{
	const double left = 80, top = 60, pw = 560, ph = 400, legend_x = 680;
	const double row = 22;
	double height = top + ph + 70;
	if (top + 30 + row * (double)r->nsub + 20 > height)
		height = top + 30 + row * (double)r->nsub + 20;
	const double width = 1000;
#define X(tau) (left + ((tau)-APF_SCORE_TAU_MIN) / \
		(APF_SCORE_TAU_MAX - APF_SCORE_TAU_MIN) * pw)
#define Y(rho) (top + (1 - (rho)) * ph)
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
		colour(s, col);
		const double *ratio = &r->ratio[s * r->nbase];
		double at1 = 0;
		for (size_t c = 0; c < r->nbase; c++)
			at1 += ratio[c] <= APF_SCORE_TAU_MIN;
		rc = apf_buf_printf(out, "<path class=\"profile\" data-submission=\"");
		if (!rc)
			rc = xml_text(out, r->sub[s]->name);
		if (!rc)
			rc = apf_buf_printf(out, "\" fill=\"none\" stroke=\"%s\" "
						 "stroke-width=\"2.5\"%s d=\"M%.2f %.2f",
					    col,
					    s >= 20   ? " stroke-dasharray=\"2 3\""
					    : s >= 10 ? " stroke-dasharray=\"8 4\""
						      : "",
					    X(APF_SCORE_TAU_MIN),
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
				"<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" "
				"stroke=\"%s\" stroke-width=\"2.5\"%s/>\n"
				"<text x=\"%.1f\" y=\"%.1f\" font-size=\"13\">",
				legend_x, ly, legend_x + 28, ly, col,
				s >= 20   ? " stroke-dasharray=\"2 3\""
				: s >= 10 ? " stroke-dasharray=\"8 4\""
					  : "",
				legend_x + 36, ly + 4);
		if (!rc)
			rc = xml_text(out, r->sub[s]->name);
		if (!rc)
			rc = apf_buf_printf(out, " (%.4f)</text>\n", r->score[s]);
	}
	if (!rc)
		rc = apf_buf_puts(out, "</svg>\n");
#undef X
#undef Y
	return rc ? NOMEM : 0;
}
