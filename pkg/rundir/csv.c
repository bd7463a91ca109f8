/*
 * csv.c: the one reader of a unit's eval_measurements.csv (RFC 4180: quoted
 * fields, "" escapes, newlines inside quotes, CRLF, a UTF-8 byte-order
 * mark), for the verifier and the scorer alike, so that the two can never
 * read one file two ways.
 *
 * It turns the text into a table of strings and nothing more: what the
 * cells mean (numbers, clocks, metrics) and how wide a row must be are the
 * callers' rules. Blank lines (spaces, tabs and CRs only) are skipped, as
 * pandas, which AlgoPerf's scorer reads these files with, skips them.
 *
 * The parser is our own rather than libcsv's because errors must name the
 * physical line, and malformed quoting must be an error, not a guess.
 *
 * Memory: the cells live in one buffer of len + 1 bytes (a cell is never
 * longer than its text, and every cell but the last of the text ends at a
 * delimiter its NUL can take the place of), their pointers in one array.
 */
#include "rundir/rundir.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The public table first, so that free can find the rest. */
struct table {
	apf_rundir_csv t;
	char *store;
	char **cells;
};

struct reader {
	const char *p, *end;
	const char *name;
	long line;  /* physical line of p */
	char *w;    /* where the next cell's text goes */
	char **cells;
	size_t ncells, cap;
	struct apf_rundir_csv_fault *fault;
};

/* The text is no CSV. line 0: the whole file. */
static int fault_at(struct reader *r, int kind, long line, const char *fmt,
		    ...) __attribute__((format(printf, 4, 5)));

static int fault_at(struct reader *r, int kind, long line, const char *fmt,
		    ...)
{
	char why[512], where[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(why, sizeof why, fmt, ap);
	va_end(ap);
	if (r->fault) {
		r->fault->kind = kind;
		r->fault->line = line;
	}
	if (line > 0)
		snprintf(where, sizeof where, "%s:%ld", r->name, line);
	else
		snprintf(where, sizeof where, "%s", r->name);
	return apf_error(APF_EINPUT, where, "%s", why);
}

static int nomem(const struct reader *r)
{
	return apf_error(APF_ENOMEM, r->name, "out of memory");
}

static int push_cell(struct reader *r, char *cell)
{
	if (r->ncells == r->cap) {
		size_t cap = r->cap ? 2 * r->cap : 64;
		char **nc = realloc(r->cells, cap * sizeof *nc);
		if (!nc)
			return nomem(r);
		r->cells = nc;
		r->cap = cap;
	}
	r->cells[r->ncells++] = cell;
	return 0;
}

/* Reads one field into the store. *eor is set when the field ends its
 * record (newline or end of text). */
static int next_field(struct reader *r, int *eor)
{
	const char *p = r->p;
	char *cell = r->w;
	if (p < r->end && *p == '"') {
		long start = r->line;
		p++;
		for (;;) {
			if (p >= r->end)
				return fault_at(r, APF_RUNDIR_CSV_QUOTING, start,
						"quoted field never closed");
			if (*p == '"') {
				if (p + 1 < r->end && p[1] == '"') {
					*r->w++ = '"';
					p += 2;
					continue;
				}
				p++;
				break;
			}
			if (*p == '\n')
				r->line++;
			*r->w++ = *p++;
		}
		if (p < r->end && *p != ',' && *p != '\n' &&
		    !(*p == '\r' && (p + 1 == r->end || p[1] == '\n')))
			return fault_at(r, APF_RUNDIR_CSV_QUOTING, r->line,
					"text after a closing quote");
	} else {
		const char *s = p;
		while (p < r->end && *p != ',' && *p != '\n') {
			if (*p == '"')
				return fault_at(r, APF_RUNDIR_CSV_QUOTING,
						r->line,
						"quote inside an unquoted "
						"field");
			p++;
		}
		size_t n = (size_t)(p - s);
		if (n && s[n - 1] == '\r')
			n--;
		memcpy(r->w, s, n);
		r->w += n;
	}
	*r->w++ = 0;
	if (p < r->end && *p == ',') {
		p++;
		*eor = 0;
	} else {
		if (p < r->end && *p == '\r')
			p++;
		if (p < r->end && *p == '\n') {
			p++;
			r->line++;
		}
		*eor = 1;
	}
	r->p = p;
	return push_cell(r, cell);
}

static int blank_from(const char *p, const char *end)
{
	while (p < end && (*p == ' ' || *p == '\t' || *p == '\r'))
		p++;
	return p == end || *p == '\n';
}

static void skip_line(struct reader *r)
{
	const char *nl = memchr(r->p, '\n', (size_t)(r->end - r->p));
	r->p = nl ? nl + 1 : r->end;
	r->line++;
}

struct named {
	const char *name;
	size_t index;
};

static int cmp_named(const void *a, const void *b)
{
	const struct named *x = a, *y = b;
	int c = strcmp(x->name, y->name);
	return c ? c : (x->index > y->index) - (x->index < y->index);
}

/* The first column (left to right) whose name an earlier one has; on a
 * sorted copy, as a header of a million columns is only a large file. */
static int check_header(struct reader *r, char *const *names, size_t n,
			long line)
{
	if (n < 2)
		return 0;
	struct named *v = apf_calloc(n, sizeof *v);
	if (!v)
		return nomem(r);
	for (size_t i = 0; i < n; i++)
		v[i] = (struct named){names[i], i};
	qsort(v, n, sizeof *v, cmp_named);
	size_t first = n;
	for (size_t i = 1; i < n; i++)
		if (!strcmp(v[i - 1].name, v[i].name) && v[i].index < first)
			first = v[i].index;
	free(v);
	if (first == n)
		return 0;
	if (r->fault)
		snprintf(r->fault->column, sizeof r->fault->column, "%s",
			 names[first]);
	return fault_at(r, APF_RUNDIR_CSV_TWICE, line,
			"column '%s' appears twice", names[first]);
}

static long count_lines(const char *text, size_t len)
{
	long n = 0;
	for (const char *p = text, *end = text + len;
	     p < end && (p = memchr(p, '\n', (size_t)(end - p))); p++)
		n++;
	return n + (len && text[len - 1] != '\n');
}

int apf_rundir_csv_parse(apf_rundir_csv **out,
			 struct apf_rundir_csv_fault *fault, const char *text,
			 size_t len, const char *name)
{
	*out = NULL;
	if (fault)
		memset(fault, 0, sizeof *fault);
	struct reader r = {text, text + len, name, 1, NULL, NULL, 0, 0, fault};
	const char *nul = memchr(text, 0, len);
	if (nul)
		return fault_at(&r, APF_RUNDIR_CSV_NUL, 0,
				"holds a NUL byte; not a CSV file");
	struct table *tab = apf_calloc(1, sizeof *tab);
	char *store = tab ? malloc(len + 1) : NULL;
	if (!store) {
		free(tab);
		return nomem(&r);
	}
	tab->store = store;
	r.w = store;
	apf_rundir_csv *t = &tab->t;
	/* Rows keep the index of their first cell until the array stops
	 * moving; cell is set at the end. */
	size_t *first = NULL, cap = 0, nrec = 0;
	long *lines = NULL;
	size_t *widths = NULL;
	int rc = 0;
	if (len >= 3 && !memcmp(text, "\xef\xbb\xbf", 3))
		r.p += 3;
	while (!rc && r.p < r.end) {
		if (blank_from(r.p, r.end)) {
			skip_line(&r);
			continue;
		}
		if (nrec == cap) {
			size_t nc = cap ? 2 * cap : 16;
			size_t *nf = realloc(first, nc * sizeof *nf);
			first = nf ? nf : first;
			long *nl = nf ? realloc(lines, nc * sizeof *nl) : NULL;
			lines = nl ? nl : lines;
			size_t *nw = nl ? realloc(widths, nc * sizeof *nw) : NULL;
			widths = nw ? nw : widths;
			if (!nw) {
				rc = nomem(&r);
				break;
			}
			cap = nc;
		}
		first[nrec] = r.ncells;
		lines[nrec] = r.line;
		int eor = 0;
		while (!rc && !eor)
			rc = next_field(&r, &eor);
		if (rc)
			break;
		widths[nrec] = r.ncells - first[nrec];
		if (nrec == 0)
			rc = check_header(&r, r.cells, r.ncells, lines[0]);
		nrec++;
	}
	if (!rc && nrec > 1) {
		t->rows = apf_calloc(nrec - 1, sizeof *t->rows);
		if (!t->rows)
			rc = nomem(&r);
	}
	if (!rc && nrec) {
		t->header_line = lines[0];
		t->ncols = widths[0];
		t->header = r.cells;
		for (size_t i = 1; i < nrec; i++) {
			struct apf_rundir_csv_row *row = &t->rows[i - 1];
			row->line = lines[i];
			row->n = widths[i];
			row->cell = r.cells + first[i];
		}
		t->nrows = nrec - 1;
	}
	tab->cells = r.cells;
	t->lines = count_lines(text, len);
	free(first);
	free(lines);
	free(widths);
	if (rc) {
		apf_rundir_csv_free(t);
		return rc;
	}
	*out = t;
	return 0;
}

long apf_rundir_csv_column(const apf_rundir_csv *t, const char *name)
{
	for (size_t i = 0; i < t->ncols; i++)
		if (!strcmp(t->header[i], name))
			return (long)i;
	return -1;
}

void apf_rundir_csv_free(apf_rundir_csv *t)
{
	if (!t)
		return;
	struct table *tab = (struct table *)t;
	free(tab->t.rows);
	free(tab->cells);
	free(tab->store);
	free(tab);
}
