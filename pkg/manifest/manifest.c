/*
 * manifest.c: writing and strictly parsing the entry statement.
 *
 * The parser is the gate every signed manifest passes before apf acts on it,
 * so it accepts exactly what apf_manifest_to_json writes and nothing more:
 * an unexpected field, a digest in the wrong form or a subject that does not
 * match the predicate is an error naming the field.
 */
#include "manifest/manifest.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/json.h"
#include "hash/hash.h"
#include "sysinfo/sysinfo.h"

/* ---- writing --------------------------------------------------------------- */

static json_t *digest_obj(const char *hex)
{
	return json_pack("{s:s}", "sha256", hex);
}

/* The name is built whole, however long: the parser compares it with the
 * predicate's name in full, so a cut name would not read back. */
static json_t *subject(const char *prefix, const char *name, const char *hex)
{
	apf_buf full = {0};
	json_t *s = apf_buf_printf(&full, "%s%s", prefix, name)
			    ? NULL
			    : json_pack("{s:s, s:o}", "name", full.data,
					"digest", digest_obj(hex));
	apf_buf_free(&full);
	return s;
}

/* Appends v to a; a failure (v NULL: it could not be built) is counted in
 * *lost, so that no element goes missing from a signed statement unseen. */
static void append(json_t *a, json_t *v, int *lost)
{
	if (json_array_append_new(a, v) != 0)
		(*lost)++;
}

static const char *mode_str(int mode)
{
	return mode == 755 ? "755" : mode == 777 ? "777" : "644";
}

int apf_manifest_to_json(char **out, const apf_manifest *m)
{
	*out = NULL;
	int lost = 0;
	json_t *subjects = json_array();
	append(subjects, subject("", "submission", m->submission.tree_digest),
	       &lost);
	for (size_t i = 0; i < m->ndatasets; i++)
		append(subjects,
		       subject("dataset:", m->datasets[i].name,
			       m->datasets[i].tree_digest),
		       &lost);
	for (size_t i = 0; i < m->nworkloads; i++)
		append(subjects,
		       subject("workload:", m->workloads[i].name,
			       m->workloads[i].spec_digest),
		       &lost);
	json_t *authors = json_array();
	for (size_t i = 0; i < m->submission.nauthors; i++)
		append(authors, json_string(m->submission.authors[i]), &lost);
	json_t *files = json_array();
	for (size_t i = 0; i < m->submission.nfiles; i++) {
		const struct apf_manifest_file *f = &m->submission.files[i];
		char type[2] = {f->type, 0};
		append(files,
		       json_pack("{s:s, s:s, s:s, s:I, s:s}", "path", f->path,
				 "type", type, "mode", mode_str(f->mode),
				 "size", (json_int_t)f->size, "sha256",
				 f->sha256),
		       &lost);
	}
	json_t *workloads = json_array();
	for (size_t i = 0; i < m->nworkloads; i++) {
		const struct apf_manifest_workload *w = &m->workloads[i];
		append(workloads,
		       json_pack("{s:s, s:s, s:s, s:s}", "name", w->name,
				 "variant", w->variant, "spec_digest",
				 w->spec_digest, "dataset", w->dataset),
		       &lost);
	}
	json_t *datasets = json_array();
	for (size_t i = 0; i < m->ndatasets; i++) {
		const struct apf_manifest_dataset *d = &m->datasets[i];
		append(datasets,
		       json_pack("{s:s, s:s, s:I, s:I}", "name", d->name,
				 "tree_digest", d->tree_digest, "files",
				 (json_int_t)d->files, "bytes",
				 (json_int_t)d->bytes),
		       &lost);
	}
	json_t *tuning = json_pack(
		"{s:s, s:s, s:I, s:I, s:f, s:o, s:I}", "ruleset",
		m->tuning.ruleset, "rules", m->tuning.rules, "studies",
		(json_int_t)m->tuning.studies, "trials",
		(json_int_t)m->tuning.trials, "budget_multiplier",
		m->tuning.budget_multiplier, "search_space_digest",
		m->tuning.search_space_digest[0]
			? json_string(m->tuning.search_space_digest)
			: json_null(),
		"seed", (json_int_t)m->tuning.seed);
	json_t *submission = json_pack(
		"{s:s, s:o, s:s, s:s, s:o, s:O}", "name", m->submission.name,
		"authors", authors, "ruleset", m->submission.ruleset,
		"tree_digest", m->submission.tree_digest, "files", files, "git",
		m->submission.git);
	json_t *predicate = json_pack(
		"{s:s, s:s, s:o, s:o, s:o, s:o, s:O}", "apf_version",
		m->apf_version, "created", m->created, "submission", submission,
		"workloads", workloads, "datasets", datasets, "tuning", tuning,
		"environment", m->environment);
	json_t *st = json_pack("{s:s, s:o, s:s, s:o}", "_type",
			       APF_STATEMENT_TYPE, "subject", subjects,
			       "predicateType", APF_PREDICATE_TYPE, "predicate",
			       predicate);
	char *s = st && !lost ? json_dumps(st, JSON_INDENT(2)) : NULL;
	json_decref(st);
	if (!s && lost)
		return apf_error(APF_ENOMEM, "manifest",
				 "cannot encode %d list entries (out of memory "
				 "or a field is missing)",
				 lost);
	if (!s)
		return apf_error(APF_EINTERNAL, "manifest",
				 "cannot encode (a field is missing)");
	*out = s;
	return 0;
}

/* ---- parsing ----------------------------------------------------------------- */

static int bad(const char *where, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
static int bad(const char *where, const char *fmt, ...)
{
	char why[256];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(why, sizeof why, fmt, ap);
	va_end(ap);
	return apf_error(APF_EINPUT, "manifest", "%s: %s", where, why);
}

static int check_object(const json_t *o, const char *where,
			const struct apf_json_field *fields)
{
	return apf_json_check_fields(o, "manifest", where, fields);
}

static const char *str(const json_t *o, const char *k)
{
	return json_string_value(json_object_get(o, k));
}

static char *dup(const json_t *o, const char *k)
{
	return apf_strdup(str(o, k));
}

static int valid_rel_path(const char *p)
{
	if (!*p || *p == '/' || !apf_utf8_path_ok(p))
		return 0;
	for (const char *c = p; c;) {
		const char *slash = strchr(c, '/');
		size_t n = slash ? (size_t)(slash - c) : strlen(c);
		if (n == 0 || (n == 1 && c[0] == '.') ||
		    (n == 2 && c[0] == '.' && c[1] == '.'))
			return 0;
		c = slash ? slash + 1 : NULL;
	}
	return 1;
}

static int valid_created(const char *s)
{
	/* YYYY-MM-DDTHH:MM:SSZ */
	static const char shape[] = "dddd-dd-ddTdd:dd:ddZ";
	if (strlen(s) != sizeof shape - 1)
		return 0;
	for (size_t i = 0; shape[i]; i++)
		if (shape[i] == 'd' ? !isdigit((unsigned char)s[i])
				    : s[i] != shape[i])
			return 0;
	return 1;
}

static int parse_files(apf_manifest *m, const json_t *files)
{
	static const struct apf_json_field ff[] = {
		{"path", APF_JSON_TEXT}, {"type", APF_JSON_TEXT},
		{"mode", APF_JSON_TEXT}, {"size", APF_JSON_COUNT},
		{"sha256", APF_JSON_SHA256}, {NULL, 0}};
	size_t n = json_array_size(files);
	m->submission.files = apf_calloc(n, sizeof *m->submission.files);
	if (!m->submission.files)
		return apf_error(APF_ENOMEM, "manifest", "out of memory");
	size_t i;
	json_t *f;
	json_array_foreach(files, i, f)
	{
		char where[64];
		snprintf(where, sizeof where, "submission.files[%zu]", i);
		int rc = check_object(f, where, ff);
		if (rc)
			return rc;
		struct apf_manifest_file *mf = &m->submission.files[i];
		mf->path = dup(f, "path");
		m->submission.nfiles = i + 1;
		if (!mf->path)
			return apf_error(APF_ENOMEM, "manifest", "out of memory");
		if (!valid_rel_path(mf->path))
			return bad(where, "path '%s' is not a clean relative "
					  "UTF-8 path",
				   mf->path);
		if (i > 0 && strcmp(m->submission.files[i - 1].path, mf->path) >= 0)
			return bad(where, "'%s' is out of order or listed twice",
				   mf->path);
		const char *type = str(f, "type"), *mode = str(f, "mode");
		if (!strcmp(type, "f") &&
		    (!strcmp(mode, "644") || !strcmp(mode, "755"))) {
			mf->type = 'f';
			mf->mode = atoi(mode);
		} else if (!strcmp(type, "l") && !strcmp(mode, "777")) {
			mf->type = 'l';
			mf->mode = 777;
		} else {
			return bad(where, "type/mode must be f 644, f 755 or l "
					  "777 (got mode %s)",
				   mode);
		}
		mf->size = (uint64_t)json_integer_value(json_object_get(f, "size"));
		strcpy(mf->sha256, str(f, "sha256"));
	}
	return 0;
}

static int parse_submission(apf_manifest *m, const json_t *s)
{
	static const struct apf_json_field sf[] = {
		{"name", APF_JSON_TEXT}, {"authors", APF_JSON_ARRAY},
		{"ruleset", APF_JSON_TEXT}, {"tree_digest", APF_JSON_SHA256},
		{"files", APF_JSON_ARRAY}, {"git", APF_JSON_OBJECT}, {NULL, 0}};
	int rc = check_object(s, "submission", sf);
	if (rc)
		return rc;
	m->submission.name = dup(s, "name");
	m->submission.ruleset = dup(s, "ruleset");
	if (!m->submission.name || !m->submission.ruleset)
		return apf_error(APF_ENOMEM, "manifest", "out of memory");
	strcpy(m->submission.tree_digest, str(s, "tree_digest"));
	if (strcmp(m->submission.ruleset, "external") &&
	    strcmp(m->submission.ruleset, "self"))
		return bad("submission.ruleset", "expected external or self, "
						 "got '%s'",
			   m->submission.ruleset);
	json_t *authors = json_object_get(s, "authors");
	m->submission.authors =
		apf_calloc(json_array_size(authors), sizeof(char *));
	if (!m->submission.authors)
		return apf_error(APF_ENOMEM, "manifest", "out of memory");
	size_t i;
	json_t *a;
	json_array_foreach(authors, i, a)
	{
		if (!json_is_string(a))
			return bad("submission.authors", "not a list of "
							 "strings");
		m->submission.authors[i] = apf_strdup(json_string_value(a));
		m->submission.nauthors = i + 1;
		if (!m->submission.authors[i])
			return apf_error(APF_ENOMEM, "manifest", "out of memory");
	}
	rc = apf_git_validate(json_object_get(s, "git"));
	if (rc)
		return apf_error_prefix(rc, "manifest: submission");
	m->submission.git = json_incref(json_object_get(s, "git"));
	rc = parse_files(m, json_object_get(s, "files"));
	if (rc)
		return rc;
	char digest[65];
	rc = apf_manifest_files_digest(m, digest);
	if (rc)
		return rc;
	if (strcmp(digest, m->submission.tree_digest))
		return bad("submission.tree_digest",
			   "does not match the file list (the list digests to "
			   "%s)",
			   digest);
	return 0;
}

static int parse_lists(apf_manifest *m, const json_t *p)
{
	static const struct apf_json_field df[] = {
		{"name", APF_JSON_TEXT}, {"tree_digest", APF_JSON_SHA256},
		{"files", APF_JSON_COUNT}, {"bytes", APF_JSON_COUNT}, {NULL, 0}};
	static const struct apf_json_field wf[] = {
		{"name", APF_JSON_TEXT}, {"variant", APF_JSON_TEXT},
		{"spec_digest", APF_JSON_SHA256}, {"dataset", APF_JSON_TEXT},
		{NULL, 0}};
	json_t *ds = json_object_get(p, "datasets");
	json_t *ws = json_object_get(p, "workloads");
	m->datasets = apf_calloc(json_array_size(ds), sizeof *m->datasets);
	m->workloads = apf_calloc(json_array_size(ws), sizeof *m->workloads);
	if (!m->datasets || !m->workloads)
		return apf_error(APF_ENOMEM, "manifest", "out of memory");
	size_t i;
	json_t *x;
	json_array_foreach(ds, i, x)
	{
		char where[64];
		snprintf(where, sizeof where, "datasets[%zu]", i);
		int rc = check_object(x, where, df);
		if (rc)
			return rc;
		struct apf_manifest_dataset *d = &m->datasets[i];
		d->name = dup(x, "name");
		m->ndatasets = i + 1;
		if (!d->name)
			return apf_error(APF_ENOMEM, "manifest", "out of memory");
		strcpy(d->tree_digest, str(x, "tree_digest"));
		d->files = (uint64_t)json_integer_value(json_object_get(x, "files"));
		d->bytes = (uint64_t)json_integer_value(json_object_get(x, "bytes"));
		for (size_t k = 0; k < i; k++)
			if (!strcmp(m->datasets[k].name, d->name))
				return bad(where, "dataset '%s' listed twice",
					   d->name);
	}
	if (json_array_size(ws) == 0)
		return bad("workloads", "empty: an entry names at least one "
					"workload");
	json_array_foreach(ws, i, x)
	{
		char where[64];
		snprintf(where, sizeof where, "workloads[%zu]", i);
		int rc = check_object(x, where, wf);
		if (rc)
			return rc;
		struct apf_manifest_workload *w = &m->workloads[i];
		w->name = dup(x, "name");
		w->variant = dup(x, "variant");
		w->dataset = dup(x, "dataset");
		m->nworkloads = i + 1;
		if (!w->name || !w->variant || !w->dataset)
			return apf_error(APF_ENOMEM, "manifest", "out of memory");
		strcpy(w->spec_digest, str(x, "spec_digest"));
		if (!apf_manifest_find_dataset(m, w->dataset))
			return bad(where, "dataset '%s' is not in datasets",
				   w->dataset);
		for (size_t k = 0; k < i; k++)
			if (!strcmp(m->workloads[k].name, w->name))
				return bad(where, "workload '%s' listed twice",
					   w->name);
	}
	return 0;
}

static int parse_tuning(apf_manifest *m, const json_t *t)
{
	static const struct apf_json_field tf[] = {
		{"ruleset", APF_JSON_TEXT}, {"rules", APF_JSON_TEXT},
		{"studies", APF_JSON_COUNT}, {"trials", APF_JSON_COUNT},
		{"budget_multiplier", APF_JSON_NUMBER},
		{"search_space_digest", APF_JSON_SHA256 | APF_JSON_OR_NULL},
		{"seed", APF_JSON_COUNT}, {NULL, 0}};
	int rc = check_object(t, "tuning", tf);
	if (rc)
		return rc;
	m->tuning.ruleset = dup(t, "ruleset");
	m->tuning.rules = dup(t, "rules");
	if (!m->tuning.ruleset || !m->tuning.rules)
		return apf_error(APF_ENOMEM, "manifest", "out of memory");
	m->tuning.studies = (long)json_integer_value(json_object_get(t, "studies"));
	m->tuning.trials = (long)json_integer_value(json_object_get(t, "trials"));
	m->tuning.budget_multiplier =
		json_number_value(json_object_get(t, "budget_multiplier"));
	json_int_t seed = json_integer_value(json_object_get(t, "seed"));
	const char *ssd = str(t, "search_space_digest");
	snprintf(m->tuning.search_space_digest,
		 sizeof m->tuning.search_space_digest, "%s", ssd ? ssd : "");
	if (strcmp(m->tuning.ruleset, m->submission.ruleset))
		return bad("tuning.ruleset", "'%s' differs from the submission's",
			   m->tuning.ruleset);
	if (strcmp(m->tuning.rules, "algoperf-0.6") &&
	    strcmp(m->tuning.rules, "algoperf-0.5"))
		return bad("tuning.rules", "expected algoperf-0.6 or "
					   "algoperf-0.5, got '%s'",
			   m->tuning.rules);
	if (m->tuning.studies < 1 || m->tuning.studies > 100 ||
	    m->tuning.trials < 1 || m->tuning.trials > 1000)
		return bad("tuning", "studies must be 1-100 and trials 1-1000");
	if (!strcmp(m->tuning.ruleset, "self") && m->tuning.trials != 1)
		return bad("tuning.trials", "self-tuning runs one trial per "
					    "study");
	if (!strcmp(m->tuning.ruleset, "external") && !ssd)
		return bad("tuning.search_space_digest",
			   "external tuning needs a search space");
	if (!(m->tuning.budget_multiplier > 0 &&
	      m->tuning.budget_multiplier <= 10))
		return bad("tuning.budget_multiplier", "must be in (0, 10]");
	if (seed < 0 || seed > 0xffffffffLL)
		return bad("tuning.seed", "not a 32-bit unsigned integer");
	m->tuning.seed = (uint32_t)seed;
	return 0;
}

/* Subjects must be exactly the submission, each dataset and each workload,
 * with the predicate's digests. */
static int check_subjects(const apf_manifest *m, const json_t *subjects)
{
	static const struct apf_json_field sf[] = {
		{"name", APF_JSON_TEXT}, {"digest", APF_JSON_OBJECT}, {NULL, 0}};
	static const struct apf_json_field df[] = {
		{"sha256", APF_JSON_SHA256}, {NULL, 0}};
	size_t want = 1 + m->ndatasets + m->nworkloads;
	if (json_array_size(subjects) != want)
		return apf_error(APF_EINPUT, "manifest",
				 "subject: %zu subjects, the predicate names %zu",
				 json_array_size(subjects), want);
	size_t i;
	json_t *s;
	json_array_foreach(subjects, i, s)
	{
		char where[64];
		snprintf(where, sizeof where, "subject[%zu]", i);
		int rc = check_object(s, where, sf);
		if (!rc)
			rc = check_object(json_object_get(s, "digest"), where, df);
		if (rc)
			return rc;
		const char *name = str(s, "name");
		const char *hex = str(json_object_get(s, "digest"), "sha256");
		const char *expect = NULL;
		if (!strcmp(name, "submission")) {
			expect = m->submission.tree_digest;
		} else if (!strncmp(name, "dataset:", 8)) {
			const struct apf_manifest_dataset *d =
				apf_manifest_find_dataset(m, name + 8);
			expect = d ? d->tree_digest : NULL;
		} else if (!strncmp(name, "workload:", 9)) {
			for (size_t k = 0; k < m->nworkloads && !expect; k++)
				if (!strcmp(m->workloads[k].name, name + 9))
					expect = m->workloads[k].spec_digest;
		}
		if (!expect)
			return bad(where, "'%s' is not in the predicate", name);
		if (strcmp(expect, hex))
			return bad(where, "'%s' digest differs from the "
					  "predicate's",
				   name);
		for (size_t k = 0; k < i; k++)
			if (!strcmp(str(json_array_get(subjects, k), "name"), name))
				return bad(where, "'%s' listed twice", name);
	}
	return 0;
}

int apf_manifest_parse(apf_manifest **out, const char *json, size_t len)
{
	*out = NULL;
	json_error_t jerr;
	json_t *st = json_loadb(json, len, JSON_REJECT_DUPLICATES, &jerr);
	if (!st)
		return apf_error(APF_EINPUT, "manifest",
				 "not valid JSON (line %d: %s)", jerr.line,
				 jerr.text);
	apf_manifest *m = apf_calloc(1, sizeof *m);
	if (!m) {
		json_decref(st);
		return apf_error(APF_ENOMEM, "manifest", "out of memory");
	}
	static const struct apf_json_field top[] = {
		{"_type", APF_JSON_TEXT}, {"subject", APF_JSON_ARRAY},
		{"predicateType", APF_JSON_TEXT},
		{"predicate", APF_JSON_OBJECT}, {NULL, 0}};
	static const struct apf_json_field pf[] = {
		{"apf_version", APF_JSON_TEXT}, {"created", APF_JSON_TEXT},
		{"submission", APF_JSON_OBJECT}, {"workloads", APF_JSON_ARRAY},
		{"datasets", APF_JSON_ARRAY}, {"tuning", APF_JSON_OBJECT},
		{"environment", APF_JSON_OBJECT}, {NULL, 0}};
	int rc = check_object(st, "statement", top);
	if (!rc && strcmp(str(st, "_type"), APF_STATEMENT_TYPE))
		rc = bad("_type", "expected " APF_STATEMENT_TYPE ", got '%s'",
			 str(st, "_type"));
	if (!rc && strcmp(str(st, "predicateType"), APF_PREDICATE_TYPE))
		rc = bad("predicateType", "expected " APF_PREDICATE_TYPE
					  ", got '%s'",
			 str(st, "predicateType"));
	json_t *p = json_object_get(st, "predicate");
	if (!rc)
		rc = check_object(p, "predicate", pf);
	if (!rc) {
		m->apf_version = dup(p, "apf_version");
		m->created = dup(p, "created");
		if (!m->apf_version || !m->created)
			rc = apf_error(APF_ENOMEM, "manifest", "out of memory");
		else if (!valid_created(m->created))
			rc = bad("created", "'%s' is not YYYY-MM-DDTHH:MM:SSZ",
				 m->created);
	}
	if (!rc)
		rc = parse_submission(m, json_object_get(p, "submission"));
	if (!rc)
		rc = parse_lists(m, p);
	if (!rc)
		rc = parse_tuning(m, json_object_get(p, "tuning"));
	if (!rc) {
		rc = apf_env_validate(json_object_get(p, "environment"));
		if (rc)
			apf_error_prefix(rc, "manifest");
		else
			m->environment =
				json_incref(json_object_get(p, "environment"));
	}
	if (!rc)
		rc = check_subjects(m, json_object_get(st, "subject"));
	json_decref(st);
	if (rc) {
		apf_manifest_free(m);
		return rc;
	}
	*out = m;
	return 0;
}

void apf_manifest_free(apf_manifest *m)
{
	if (!m)
		return;
	free(m->apf_version);
	free(m->created);
	free(m->submission.name);
	for (size_t i = 0; i < m->submission.nauthors; i++)
		free(m->submission.authors[i]);
	free(m->submission.authors);
	free(m->submission.ruleset);
	for (size_t i = 0; i < m->submission.nfiles; i++)
		free(m->submission.files[i].path);
	free(m->submission.files);
	json_decref(m->submission.git);
	for (size_t i = 0; i < m->nworkloads; i++) {
		free(m->workloads[i].name);
		free(m->workloads[i].variant);
		free(m->workloads[i].dataset);
	}
	free(m->workloads);
	for (size_t i = 0; i < m->ndatasets; i++)
		free(m->datasets[i].name);
	free(m->datasets);
	free(m->tuning.ruleset);
	free(m->tuning.rules);
	json_decref(m->environment);
	free(m);
}

const struct apf_manifest_file *apf_manifest_find_file(const apf_manifest *m,
						       const char *path)
{
	size_t lo = 0, hi = m->submission.nfiles;
	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		int c = strcmp(m->submission.files[mid].path, path);
		if (c == 0)
			return &m->submission.files[mid];
		if (c < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return NULL;
}

const struct apf_manifest_dataset *
apf_manifest_find_dataset(const apf_manifest *m, const char *name)
{
	for (size_t i = 0; i < m->ndatasets; i++)
		if (m->datasets[i].name && !strcmp(m->datasets[i].name, name))
			return &m->datasets[i];
	return NULL;
}

int apf_manifest_files_digest(const apf_manifest *m, char out[65])
{
	/* The same listing apf hash computes, so one code path defines it. */
	apf_tree t = {0};
	t.entries = apf_calloc(m->submission.nfiles, sizeof *t.entries);
	if (!t.entries)
		return apf_error(APF_ENOMEM, "manifest", "out of memory");
	int rc = 0;
	for (size_t i = 0; i < m->submission.nfiles && !rc; i++) {
		const struct apf_manifest_file *f = &m->submission.files[i];
		apf_tree_entry *e = &t.entries[t.n++];
		e->path = f->path;
		e->type = f->type;
		e->mode = f->mode;
		e->size = f->size;
		if (apf_unhex(e->sha256, f->sha256, APF_SHA256_LEN))
			rc = apf_error(APF_EINPUT, "manifest", "%s: bad sha256",
				       f->path);
	}
	if (!rc)
		rc = apf_tree_finish(&t);
	if (!rc)
		apf_hex(out, t.digest, APF_SHA256_LEN);
	free(t.entries); /* paths are borrowed from m */
	return rc;
}
