/*
 * report: one self-contained HTML page of a scoring (apf report, issue 18):
 * the summary (scores, ranks, the performance profile, what was verified),
 * per workload the curves of every trial (validation, train or test metric
 * against submission time or global step, the target, the budget, the
 * time-to-target marks, the held-out variants beside their base), and per
 * submission its provenance, environment, keys and hyperparameters.
 *
 * The page is built from an apf_score_result and nothing else decides a
 * number on it: the result's own JSON (apf_score_format_json, the text of
 * `apf score --json`) is embedded verbatim as <script type=
 * "application/json" id="apf-data">, every score and time shown is printed
 * from the same doubles with its exact value in a data-value attribute, and
 * the verifier's outcome comes in as data (the caller runs it; pkg/report
 * never links the verifier), embedded as id="apf-verify".
 *
 * Everything read from the inputs (names, paths, hyperparameters, manifest
 * fields, the verifier's messages) is untrusted: it reaches the page only
 * through apf_report_html_text (text and attribute values) or
 * apf_report_json_script (JSON inside <script>), so a name like
 * "<script>alert(1)</script>" shows as text. The page refers to nothing
 * outside itself: inline CSS, inline SVG drawn here, a little inline
 * JavaScript for the toggles, no URL.
 */
#ifndef APF_REPORT_H
#define APF_REPORT_H

#include <jansson.h>
#include <stddef.h>

#include "base/base.h"
#include "score/score.h"
#include "sign/sign.h"

/* ---- escaping ------------------------------------------------------------ */

/* s as HTML text or a double-quoted attribute value: & < > " ' escaped;
 * controls other than tab and newline and invalid UTF-8 become U+FFFD. */
int apf_report_html_text(apf_buf *out, const char *s);
/* JSON text made safe inside <script>: every <, > and & (which JSON allows
 * only inside strings) written as \u003c, \u003e, \u0026, and U+2028 and
 * U+2029 as \u2028 and \u2029; the result parses to the same value. */
int apf_report_json_script(apf_buf *out, const char *json);

/* ---- one trial's curves --------------------------------------------------- */

/* What eval_measurements.csv says over time: per eval, the global step, the
 * submission time (score, else accumulated_submission_time) and the
 * target metric on validation, train and test (NAN where a value is empty,
 * not a plain number, or the column is missing; has_* says whether the
 * column is there at all). */
struct apf_report_curve {
	size_t n;
	double *step, *time, *val, *train, *test;
	int has_step, has_train, has_test;
};

/* Reads csv_path (a regular file, at most APF_MAX_CSV_BYTES) with pkg/
 * rundir's CSV reader; metric is the target's (validation/<metric>). */
int apf_report_curve_read(struct apf_report_curve *out, const char *csv_path,
			  const char *metric);
void apf_report_curve_free(struct apf_report_curve *c);

/* A polyline through the points (x[i], y[i]) in pixels as an SVG path
 * ("M12 34l5-2..."), in whole pixels, leaving out a point closer than tol
 * pixels (in both axes) to the last one kept, except the last; non-finite
 * points break the line. Writes nothing when no point is finite. */
int apf_report_svg_path(apf_buf *out, const double *x, const double *y,
			size_t n, double tol);

/* ---- the page ------------------------------------------------------------- */

struct apf_report_opts {
	const char *title;      /* NULL: "apf report" */
	/* The verifier's outcome per submission name: an object whose
	 * values are `apf verify RUN --json`'s objects; NULL when --verify
	 * was not given. Excluded submissions are there too. */
	json_t *verdicts;
	/* Judges the entries' signatures for the provenance (NULL: the
	 * signer is shown as claimed, not trusted). */
	const apf_keyring *entry_keys;
	/* Curve simplification in pixels (0: 1). */
	double tolerance;
	/* When the page would be larger, the thin curves are drawn
	 * coarser (doubling the tolerance up to 16 pixels); 0: no limit. */
	size_t max_bytes;
	/* The inputs as given on the command line (shown, escaped). */
	char *const *inputs;
	size_t ninputs;
};

/* Writes the page for r (computed from targets under r->rules) to out. */
int apf_report_html(apf_buf *out, const apf_score_result *r,
		    apf_score_targets *targets,
		    const struct apf_report_opts *o);

#endif
