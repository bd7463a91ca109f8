/*
 * csv.c: reading one eval_measurements.csv (RFC 4180: quoted fields, ""
 * escapes, newlines inside quotes, CRLF, a UTF-8 byte-order mark) and finding
 * the first eval that meets the target.
 *
 * Only two columns matter: validation/<metric> and the time column (score,
 * else accumulated_submission_time). Both are checked on every row, so a
 * malformed file fails whole, with its name and line, instead of scoring
 * what happened to parse. As in pandas, which AlgoPerf's scorer reads these
 * files with: blank lines are skipped, a short row is padded with empty
 * values, a long row is an error, and an empty value or a NaN token is NaN.
 * A NaN metric never meets a target.
 *
 * The parser is our own rather than libcsv's because errors must name the
 * physical line, and malformed quoting must be an error, not a guess.
 */
#include "score/score.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_CSV_BYTES (1u << 30)

struct csv {
	const char *p, *end;
	const char *name;
	long line;      /* physical line of p */
	long rec_line;  /* line the current record starts on */
};

/* Reads one field. When keep is set its text goes to f, unquoted. *eor is
 * set when the field ends its record (newline or end of text). */
static int next_field(struct csv *c, apf_buf *f, int keep, int *eor)
{
	const char *p = c->p;
	f->len = 0;
	if (f->data)
		f->data[0] = 0;
	if (p < c->end && *p == '"') {
		long start = c->line;
		p++;
		for (;;) {
			if (p >= c->end)
				return apf_error(APF_EINPUT, c->name,
						 "line %ld: quoted field never "
						 "closed",
						 start);
			if (*p == '"') {
				if (p + 1 < c->end && p[1] == '"') {
					if (keep && apf_buf_append(f, "\"", 1))
						return APF_ENOMEM;
					p += 2;
					continue;
				}
				p++;
				break;
			}
			if (*p == '\n')
				c->line++;
			if (keep && apf_buf_append(f, p, 1))
				return APF_ENOMEM;
			p++;
		}
		if (p < c->end && *p != ',' && *p != '\n' &&
		    !(*p == '\r' && (p + 1 == c->end || p[1] == '\n')))
			return apf_error(APF_EINPUT, c->name,
					 "line %ld: text after a closing quote",
					 c->line);
	} else {
		const char *s = p;
		while (p < c->end && *p != ',' && *p != '\n') {
			if (*p == '"')
				return apf_error(APF_EINPUT, c->name,
						 "line %ld: quote inside an "
						 "unquoted field",
						 c->line);
			p++;
		}
		size_t n = (size_t)(p - s);
		if (n && s[n - 1] == '\r')
			n--;
		if (keep && apf_buf_append(f, s, n))
			return APF_ENOMEM;
	}
	if (p < c->end && *p == ',') {
		p++;
		*eor = 0;
	} else {
		if (p < c->end && *p == '\r')
			p++;
		if (p < c->end && *p == '\n') {
			p++;
			c->line++;
		}
		*eor = 1;
	}
	c->p = p;
	return 0;
}

/* pandas' default NA tokens (read_csv na_values). */
static int is_na_token(const char *s)
{
	static const char *const na[] = {
		"#N/A", "#N/A N/A", "#NA", "-1.#IND", "-1.#QNAN", "-NaN",
		"-nan", "1.#IND", "1.#QNAN", "<NA>", "N/A", "NA", "NULL",
		"NaN", "None", "n/a", "nan", "null", NULL};
	for (const char *const *t = na; *t; t++)
		if (!strcmp(s, *t))
			return 1;
	return 0;
}

static int parse_value(struct csv *c, const char *col, apf_buf *f, double *out)
{
	char *s = f->data ? f->data : "";
	while (*s == ' ' || *s == '\t')
		s++;
	size_t n = strlen(s);
	while (n && (s[n - 1] == ' ' || s[n - 1] == '\t'))
		s[--n] = 0;
	if (!n || is_na_token(s)) {
		*out = NAN;
		return 0;
	}
	char *end;
	errno = 0;
	double v = strtod(s, &end);
	/* ERANGE on underflow still gives the nearest value; overflow gives
	 * inf, which is what the text says. */
	if (end == s || *end)
		return apf_error(APF_EINPUT, c->name,
				 "line %ld: column '%s': '%s' is not a number",
				 c->rec_line, col, s);
	*out = v;
	return 0;
}

/* The header: finds the metric and time columns. */
static int read_header(struct csv *c, apf_buf *f, const char *metric_col,
		       long *ncols, long *mcol, long *tcol, const char **tname)
{
	long n = 0, score = -1, acc = -1;
	char **names = NULL;
	int rc = 0, eor = 0;
	*mcol = -1;
	c->rec_line = c->line;
	while (!eor) {
		rc = next_field(c, f, 1, &eor);
		if (rc)
			break;
		const char *name = f->data ? f->data : "";
		for (long i = 0; i < n; i++)
			if (!strcmp(names[i], name)) {
				rc = apf_error(APF_EINPUT, c->name,
					       "line %ld: column '%s' appears "
					       "twice",
					       c->rec_line, name);
				break;
			}
		if (rc)
			break;
		char **nn = realloc(names, (size_t)(n + 1) * sizeof *nn);
		if (!nn || !(nn[n] = apf_strdup(name))) {
			names = nn ? nn : names;
			rc = apf_error(APF_ENOMEM, c->name, "out of memory");
			break;
		}
		names = nn;
		if (!strcmp(name, metric_col))
			*mcol = n;
		else if (!strcmp(name, "score"))
			score = n;
		else if (!strcmp(name, "accumulated_submission_time"))
			acc = n;
		n++;
	}
	for (long i = 0; i < n; i++)
		free(names[i]);
	free(names);
	if (rc)
		return rc;
	*ncols = n;
	*tcol = score >= 0 ? score : acc;
	*tname = score >= 0 ? "score" : "accumulated_submission_time";
	if (*mcol < 0)
		return apf_error(APF_EINPUT, c->name,
				 "line %ld: no column '%s' (the target metric)",
				 c->rec_line, metric_col);
	if (*tcol < 0)
		return apf_error(APF_EINPUT, c->name,
				 "line %ld: no time column ('score' or "
				 "'accumulated_submission_time')",
				 c->rec_line);
	return 0;
}

static int blank_from(const char *p, const char *end)
{
	while (p < end && (*p == ' ' || *p == '\t' || *p == '\r'))
		p++;
	return p == end || *p == '\n';
}

int apf_score_parse_trial(const char *text, size_t len, const char *name,
			  const struct apf_score_target *target, long *evals,
			  long *hit, double *time)
{
	*evals = 0;
	*hit = -1;
	*time = INFINITY;
	struct csv c = {text, text + len, name, 1, 1};
	apf_buf col = {0}, f = {0};
	long ncols = 0, mcol, tcol;
	const char *tname = NULL;
	int rc = apf_buf_printf(&col, "validation/%s", target->metric)
			 ? apf_error(APF_ENOMEM, name, "out of memory")
			 : 0;
	if (len >= 3 && !memcmp(text, "\xef\xbb\xbf", 3))
		c.p += 3;
	/* Leading blank lines, as pandas skips them. */
	while (!rc && c.p < c.end && blank_from(c.p, c.end)) {
		const char *nl = memchr(c.p, '\n', (size_t)(c.end - c.p));
		c.p = nl ? nl + 1 : c.end;
		c.line++;
	}
	if (!rc && c.p >= c.end)
		rc = apf_error(APF_EINPUT, name, "empty file (no header line)");
	if (!rc)
		rc = read_header(&c, &f, col.data, &ncols, &mcol, &tcol,
				 &tname);
	while (!rc && c.p < c.end) {
		if (blank_from(c.p, c.end)) {
			const char *nl = memchr(c.p, '\n', (size_t)(c.end - c.p));
			c.p = nl ? nl + 1 : c.end;
			c.line++;
			continue;
		}
		c.rec_line = c.line;
		double mv = NAN, tv = NAN;
		int eor = 0;
		long i = 0;
		for (; !eor; i++) {
			if (i >= ncols) {
				rc = apf_error(APF_EINPUT, name,
					       "line %ld: more fields than the "
					       "%ld columns of the header",
					       c.rec_line, ncols);
				break;
			}
			int keep = i == mcol || i == tcol;
			rc = next_field(&c, &f, keep, &eor);
			if (!rc && i == mcol)
				rc = parse_value(&c, col.data, &f, &mv);
			if (!rc && i == tcol)
				rc = parse_value(&c, tname, &f, &tv);
			if (rc)
				break;
		}
		if (rc)
			break;
		if (!isnan(tv) && tv < 0)
			rc = apf_error(APF_EINPUT, name,
				       "line %ld: negative time %g", c.rec_line,
				       tv);
		else if (*hit < 0 &&
			 apf_score_first_hit(&mv, 1, target->direction,
					     target->validation) == 0) {
			if (isnan(tv))
				rc = apf_error(APF_EINPUT, name,
					       "line %ld: no time at the first "
					       "eval that meets the target",
					       c.rec_line);
			*hit = *evals;
			*time = tv;
		}
		(*evals)++;
	}
	if (rc) {
		*hit = -1;
		*time = INFINITY;
	}
	apf_buf_free(&col);
	apf_buf_free(&f);
	return rc;
}

int apf_score_read_trial(struct apf_score_trial *trial,
			 const struct apf_score_target *target)
{
	char *text;
	size_t len;
	int rc = apf_file_read(trial->csv, MAX_CSV_BYTES, &text, &len);
	if (rc)
		return rc;
	if (strlen(text) != len)
		rc = apf_error(APF_EINPUT, trial->csv,
			       "holds a NUL byte; not a CSV file");
	else
		rc = apf_score_parse_trial(text, len, trial->csv, target,
					   &trial->evals, &trial->hit,
					   &trial->time);
	free(text);
	return rc;
}
