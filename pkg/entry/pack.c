/*
 * pack.c: `apf pack`: from a submission directory and workload names to a
 * signed, deterministic entry.
 *
 * submission.ini:
 *     [submission]  name, authors (comma-separated), ruleset (external|self),
 *                   description
 *     [tuning]      rules (algoperf-0.6 | algoperf-0.5), studies, trials,
 *                   seed
 * External tuning needs tuning_search_space.ini or tuning_search_space.json
 * (not both) beside it, which must parse (pkg/tuning) and, as a list of
 * points, hold a point for every trial of a study; its SHA-256 is the
 * manifest's search-space digest. Self-tuning ignores any search space.
 *
 * Every file is read into memory and hashed again as it is archived, so a
 * file that changes between the tree hash and the archive write makes the
 * pack fail instead of producing an entry whose manifest lies.
 */
#include "entry/entry.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "archive/archive.h"
#include "config/config.h"
#include "sysinfo/sysinfo.h"
#include "tuning/tuning.h"
#include "workload/workload.h"

#define MAX_SUBMISSION_FILE (256u << 20)

static int read_submission_ini(const char *dir, apf_manifest *m,
			       int *seed_given)
{
	char *path = apf_path_join(dir, "submission.ini");
	if (!path)
		return apf_error(APF_ENOMEM, dir, "out of memory");
	apf_config *c = NULL;
	int rc = apf_config_load(&c, path);
	free(path);
	if (rc)
		return rc;
	static const char *const skeys[] = {"name", "authors", "ruleset",
					    "description", NULL};
	static const char *const tkeys[] = {"rules", "studies", "trials", "seed",
					    NULL};
	const char *name, *ruleset, *rules = "algoperf-0.6";
	rc = apf_config_check_keys(c, "submission", skeys);
	if (!rc)
		rc = apf_config_check_keys(c, "tuning", tkeys);
	for (size_t i = 0; !rc && i < apf_config_nsections(c); i++) {
		const char *s = apf_config_section(c, i);
		if (strcmp(s, "submission") && strcmp(s, "tuning") &&
		    strcmp(s, "build"))
			rc = apf_error(APF_EINPUT, apf_config_name(c),
				       "line %d: [%s]: unknown section",
				       apf_config_line(c, s, NULL), s);
	}
	if (!rc)
		rc = apf_config_string(&name, c, "submission", "name");
	if (!rc)
		rc = apf_config_string(&ruleset, c, "submission", "ruleset");
	if (!rc && strcmp(ruleset, "external") && strcmp(ruleset, "self"))
		rc = apf_config_error(c, "submission", "ruleset",
				      "expected external or self, got '%s'",
				      ruleset);
	if (!rc)
		rc = apf_config_opt_string(&rules, c, "tuning", "rules");
	if (!rc && strcmp(rules, "algoperf-0.6") && strcmp(rules, "algoperf-0.5"))
		rc = apf_config_error(c, "tuning", "rules",
				      "expected algoperf-0.6 or algoperf-0.5");
	/* Shown on every terminal that inspects, verifies or scores the
	 * entry: apf escapes them wherever it prints them, but an honest
	 * submitter learns here that a stray control character (a pasted
	 * escape sequence, a bidi override) would show as \xNN. */
	static const char *const shown[] = {"name", "authors", "description"};
	for (size_t i = 0; !rc && i < sizeof shown / sizeof *shown; i++) {
		const char *v = apf_config_get(c, "submission", shown[i]);
		/* The message quotes it: apf_error escapes what it stores. */
		if (!apf_text_printable(v))
			rc = apf_config_error(c, "submission", shown[i],
					      "holds a control character, a "
					      "bidirectional override or bytes "
					      "that are not UTF-8: '%.200s'",
					      v);
	}
	if (!rc && apf_config_get(c, "submission", "authors"))
		rc = apf_config_list(c, "submission", "authors",
				     &m->submission.authors,
				     &m->submission.nauthors);
	if (rc) {
		apf_config_free(c);
		return rc;
	}
	int v05 = !strcmp(rules, "algoperf-0.5");
	int self = !strcmp(ruleset, "self");
	m->submission.name = apf_strdup(name);
	m->submission.ruleset = apf_strdup(ruleset);
	m->tuning.ruleset = apf_strdup(ruleset);
	m->tuning.rules = apf_strdup(rules);
	/* AlgoPerf: v0.5 ran 5 studies, v0.6 runs 3; external tuning has 5
	 * trials a study, self-tuning one, with 3x (v0.5) or 1.5x (v0.6) the
	 * budget. */
	m->tuning.studies = v05 ? 5 : 3;
	m->tuning.trials = self ? 1 : 5;
	m->tuning.budget_multiplier = self ? (v05 ? 3.0 : 1.5) : 1.0;
	long seed = -1;
	rc = apf_config_opt_long(&m->tuning.studies, c, "tuning", "studies");
	if (!rc)
		rc = apf_config_opt_long(&m->tuning.trials, c, "tuning", "trials");
	if (!rc)
		rc = apf_config_opt_long(&seed, c, "tuning", "seed");
	if (!rc && (m->tuning.studies < 1 || m->tuning.studies > 100))
		rc = apf_config_error(c, "tuning", "studies", "must be 1 to 100");
	if (!rc && (m->tuning.trials < 1 || m->tuning.trials > 1000))
		rc = apf_config_error(c, "tuning", "trials", "must be 1 to 1000");
	if (!rc && self && m->tuning.trials != 1)
		rc = apf_config_error(c, "tuning", "trials",
				      "self-tuning runs one trial per study");
	if (!rc && apf_config_get(c, "tuning", "seed") &&
	    (seed < 0 || seed > 0xffffffffL))
		rc = apf_config_error(c, "tuning", "seed",
				      "must be 0 to 4294967295");
	if (!rc && seed >= 0) {
		m->tuning.seed = (uint32_t)seed;
		*seed_given = 1;
	}
	apf_config_free(c);
	if (rc)
		return rc;
	if (!m->submission.name || !m->submission.ruleset || !m->tuning.ruleset ||
	    !m->tuning.rules)
		return apf_error(APF_ENOMEM, dir, "out of memory");
	return 0;
}

/* External tuning's search space: whichever of tuning_search_space.ini and
 * tuning_search_space.json the submission has, parsed and checked against
 * the trials per study here, so that a space no run could draw from is
 * refused at pack time. Its SHA-256 becomes the search-space digest. */
static int read_search_space(const char *dir, apf_manifest *m,
			     const char **which)
{
	static const char *const names[] = {APF_SEARCH_SPACE_INI,
					    APF_SEARCH_SPACE_JSON};
	char *text[2] = {NULL, NULL};
	size_t len[2] = {0, 0};
	int rc = 0;
	for (int i = 0; !rc && i < 2; i++)
		rc = apf_file_read_beneath(&text[i], &len[i], dir, names[i],
					   1 << 20, APF_FILE_MISSING_OK);
	int i = text[0] ? 0 : 1;
	if (!rc && text[0] && text[1])
		rc = apf_error(APF_EINPUT, dir,
			       "has both " APF_SEARCH_SPACE_INI " and "
			       APF_SEARCH_SPACE_JSON "; keep one");
	else if (!rc && !text[i])
		rc = apf_error(APF_EINPUT, dir,
			       "external tuning needs " APF_SEARCH_SPACE_INI
			       " or " APF_SEARCH_SPACE_JSON);
	char *path = rc ? NULL : apf_path_join(dir, names[i]);
	if (!rc && !path)
		rc = apf_error(APF_ENOMEM, dir, "out of memory");
	if (!rc && strlen(text[i]) != len[i])
		rc = apf_error(APF_EINPUT, path,
			       "holds a NUL byte; not a text file");
	apf_search_space *space = NULL;
	if (!rc)
		rc = apf_search_space_parse(&space, text[i], path);
	if (!rc)
		rc = apf_search_space_check_trials(space, m->tuning.trials);
	uint8_t d[APF_SHA256_LEN];
	if (!rc)
		rc = apf_sha256_buf(d, text[i], len[i]);
	if (!rc) {
		apf_hex(m->tuning.search_space_digest, d, sizeof d);
		*which = names[i];
	}
	apf_search_space_free(space);
	free(path);
	free(text[0]);
	free(text[1]);
	return rc;
}

/* The search space the tree packs is the one that was checked. */
static int search_space_packed(const apf_manifest *m, const char *which)
{
	for (size_t i = 0; i < m->submission.nfiles; i++) {
		const struct apf_manifest_file *f = &m->submission.files[i];
		if (strcmp(f->path, which))
			continue;
		if (f->type == 'f' && !strcmp(f->sha256,
					      m->tuning.search_space_digest))
			return 0;
		break;
	}
	return apf_error(APF_EINPUT, which,
			 "changed while the entry was being packed");
}

static int add_dataset(apf_manifest *m, const apf_workload_spec *w,
		       const struct apf_pack_opts *o)
{
	if (apf_manifest_find_dataset(m, w->dataset_name))
		return 0;
	apf_tree *t;
	struct apf_tree_opts topts = {.progress = o->progress, .user = o->user};
	int rc = apf_tree_hash(&t, w->dataset_path, &topts);
	if (rc)
		return apf_error_prefix(rc, "dataset");
	char hex[65];
	apf_hex(hex, t->digest, APF_SHA256_LEN);
	if (w->dataset_digest && strcmp(hex, w->dataset_digest)) {
		rc = apf_error(APF_EINPUT, w->dataset_path,
			       "dataset '%s' has digest %.16s..., workload "
			       "'%s' declares %.16s... (wrong or modified data)",
			       w->dataset_name, hex, w->name, w->dataset_digest);
		apf_tree_free(t);
		return rc;
	}
	struct apf_manifest_dataset *d = &m->datasets[m->ndatasets++];
	d->name = apf_strdup(w->dataset_name);
	memcpy(d->tree_digest, hex, sizeof hex);
	d->files = t->n;
	d->bytes = t->bytes;
	apf_tree_free(t);
	return d->name ? 0 : apf_error(APF_ENOMEM, "dataset", "out of memory");
}

static int add_workloads(apf_manifest *m, const struct apf_pack_opts *o)
{
	if (o->nworkloads == 0)
		return apf_error(APF_EUSAGE, "pack",
				 "name at least one workload with -w");
	m->workloads = apf_calloc(o->nworkloads, sizeof *m->workloads);
	m->datasets = apf_calloc(o->nworkloads, sizeof *m->datasets);
	if (!m->workloads || !m->datasets)
		return apf_error(APF_ENOMEM, "pack", "out of memory");
	for (size_t i = 0; i < o->nworkloads; i++) {
		for (size_t k = 0; k < i; k++)
			if (!strcmp(o->workloads[k], o->workloads[i]))
				return apf_error(APF_EUSAGE, o->workloads[i],
						 "workload named twice");
		apf_workload_spec *w;
		int rc = apf_workload_spec_load(&w, o->workloads[i]);
		if (rc)
			return apf_error_prefix(rc, "workload");
		apf_tree *t = NULL;
		rc = apf_tree_hash(&t, w->dir, NULL);
		if (!rc)
			rc = add_dataset(m, w, o);
		if (!rc) {
			struct apf_manifest_workload *mw =
				&m->workloads[m->nworkloads++];
			mw->name = apf_strdup(w->name);
			mw->variant = apf_strdup("base");
			mw->dataset = apf_strdup(w->dataset_name);
			apf_hex(mw->spec_digest, t->digest, APF_SHA256_LEN);
			if (!mw->name || !mw->variant || !mw->dataset)
				rc = apf_error(APF_ENOMEM, "pack", "out of memory");
		}
		apf_tree_free(t);
		apf_workload_spec_free(w);
		if (rc)
			return rc;
	}
	return 0;
}

static int fill_files(apf_manifest *m, const apf_tree *t)
{
	m->submission.files = apf_calloc(t->n, sizeof *m->submission.files);
	if (!m->submission.files)
		return apf_error(APF_ENOMEM, "pack", "out of memory");
	for (size_t i = 0; i < t->n; i++) {
		const apf_tree_entry *e = &t->entries[i];
		struct apf_manifest_file *f = &m->submission.files[i];
		if (!(f->path = apf_strdup(e->path)))
			return apf_error(APF_ENOMEM, "pack", "out of memory");
		m->submission.nfiles = i + 1;
		f->type = e->type;
		f->mode = e->mode;
		f->size = e->size;
		apf_hex(f->sha256, e->sha256, APF_SHA256_LEN);
	}
	apf_hex(m->submission.tree_digest, t->digest, APF_SHA256_LEN);
	return 0;
}

static int creation_time(char out[32], int64_t *epoch)
{
	const char *sde = getenv("SOURCE_DATE_EPOCH");
	time_t t;
	if (sde && *sde) {
		char *end;
		errno = 0;
		long long v = strtoll(sde, &end, 10);
		if (errno || *end || v < 0 || v > 253402300799LL)
			return apf_error(APF_EINPUT, "SOURCE_DATE_EPOCH",
					 "'%s' is not a Unix time", sde);
		t = (time_t)v;
		*epoch = v;
	} else {
		t = time(NULL);
		*epoch = 0;
	}
	struct tm tm;
	gmtime_r(&t, &tm);
	strftime(out, 32, "%Y-%m-%dT%H:%M:%SZ", &tm);
	return 0;
}

/* Reads one submission file and checks it still hashes as the tree said. */
static int read_checked(const char *root, const apf_tree_entry *e, char **data)
{
	char *path = apf_path_join(root, e->path);
	size_t len;
	int rc = path ? apf_file_read(data, &len, path, MAX_SUBMISSION_FILE)
		      : apf_error(APF_ENOMEM, root, "out of memory");
	free(path);
	if (rc)
		return rc;
	uint8_t d[APF_SHA256_LEN];
	rc = apf_sha256_buf(d, *data, len);
	if (!rc && (len != e->size || memcmp(d, e->sha256, sizeof d)))
		rc = apf_error(APF_EINPUT, e->path,
			       "changed while the entry was being packed");
	if (rc) {
		free(*data);
		*data = NULL;
	}
	return rc;
}

static int write_archive(const char *out, int64_t mtime, const apf_buf *env,
			 const char *root, const apf_tree *t)
{
	apf_archive_writer *w;
	int rc = apf_archive_writer_open(&w, out, mtime);
	if (rc)
		return rc;
	rc = apf_archive_add_file(w, APF_MANIFEST_MEMBER, 0644, env->data,
				  env->len);
	for (size_t i = 0; !rc && i < t->n; i++) {
		const apf_tree_entry *e = &t->entries[i];
		apf_buf name = {0};
		if (apf_buf_printf(&name, APF_SUBMISSION_PREFIX "%s", e->path)) {
			rc = apf_error(APF_ENOMEM, out, "out of memory");
			break;
		}
		if (e->type == 'l') {
			rc = apf_archive_add_symlink(w, name.data, e->link);
		} else {
			char *data;
			rc = read_checked(root, e, &data);
			if (!rc)
				rc = apf_archive_add_file(w, name.data,
							  e->mode == 755 ? 0755
									 : 0644,
							  data, e->size);
			free(data);
		}
		apf_buf_free(&name);
	}
	if (rc) {
		apf_archive_writer_abort(w);
		return rc;
	}
	return apf_archive_writer_commit(w);
}

/* The output's directory, checked before anything is read or built: a
 * mistyped -o fails at once, not after the build check. */
static int output_dir_ok(const char *output)
{
	if (!output)
		return 0;
	char *dir = apf_strdup(output);
	if (!dir)
		return apf_error(APF_ENOMEM, "pack", "out of memory");
	char *slash = strrchr(dir, '/');
	if (!slash) {
		free(dir);
		return 0;
	}
	if (slash == dir)
		slash[1] = 0;
	else
		*slash = 0;
	struct stat st;
	int rc = 0;
	if (stat(dir, &st) < 0)
		rc = apf_error(APF_EINPUT, output, "its directory %s: %s", dir,
			       strerror(errno));
	else if (!S_ISDIR(st.st_mode))
		rc = apf_error(APF_EINPUT, output,
			       "%s is not a directory", dir);
	free(dir);
	return rc;
}

int apf_entry_pack(apf_entry **out, const struct apf_pack_opts *o)
{
	*out = NULL;
	int rc = output_dir_ok(o->output);
	if (rc)
		return rc;
	apf_manifest *m = apf_calloc(1, sizeof *m);
	apf_entry *e = apf_calloc(1, sizeof *e);
	if (!m || !e) {
		free(m);
		free(e);
		return apf_error(APF_ENOMEM, "pack", "out of memory");
	}
	e->manifest = m;
	char created[32];
	int seed_given = 0;
	int64_t epoch = 0;
	const char *space = NULL; /* the search space's file name */
	apf_tree *t = NULL;
	apf_buf env = {0};
	rc = creation_time(created, &epoch);
	if (!rc)
		rc = read_submission_ini(o->submission_dir, m, &seed_given);
	if (!rc && !strcmp(m->tuning.ruleset, "external"))
		rc = read_search_space(o->submission_dir, m, &space);
	if (!rc) {
		m->apf_version = apf_strdup(APF_VERSION);
		m->created = apf_strdup(created);
		if (!m->apf_version || !m->created)
			rc = apf_error(APF_ENOMEM, "pack", "out of memory");
	}
	if (!rc) {
		struct apf_tree_opts topts = {.progress = o->progress,
					      .user = o->user};
		rc = apf_tree_hash(&t, o->submission_dir, &topts);
		if (rc)
			apf_error_prefix(rc, "submission");
	}
	if (!rc)
		rc = fill_files(m, t);
	if (!rc && space)
		rc = search_space_packed(m, space);
	if (!rc && !o->seed_set && !seed_given) {
		/* A seed the submitter did not choose: derived from the code. */
		uint8_t d[APF_SHA256_LEN];
		apf_buf b = {0};
		rc = apf_buf_printf(&b, "apf-plan-v1%s",
				    m->submission.tree_digest);
		if (!rc)
			rc = apf_sha256_buf(d, b.data, b.len);
		apf_buf_free(&b);
		if (!rc)
			m->tuning.seed = (uint32_t)d[0] << 24 |
					 (uint32_t)d[1] << 16 |
					 (uint32_t)d[2] << 8 | d[3];
	} else if (!rc && o->seed_set) {
		m->tuning.seed = o->seed;
	}
	if (!rc)
		rc = add_workloads(m, o);
	if (!rc && o->check)
		rc = o->check(o->check_user, o->submission_dir);
	if (!rc)
		rc = apf_git_provenance(&m->submission.git, o->submission_dir);
	if (!rc)
		rc = apf_env_capture(&m->environment);
	if (!rc)
		rc = apf_manifest_to_json(&e->statement, m);
	if (!rc) {
		e->statement_len = strlen(e->statement);
		rc = apf_sha256_hex(e->manifest_digest, e->statement,
				    e->statement_len);
	}
	if (!rc)
		rc = apf_dsse_sign(o->key, APF_PAYLOAD_TYPE, e->statement,
				   e->statement_len, &env);
	if (!rc) {
		apf_buf p = {0};
		if (o->output)
			apf_buf_puts(&p, o->output);
		else
			apf_buf_printf(&p, "%s.apf", m->submission.name);
		e->path = p.data; /* NULL when it could not be built */
		rc = e->path ? write_archive(e->path, epoch, &env,
					     o->submission_dir, t)
			     : apf_error(APF_ENOMEM, "pack", "out of memory");
	}
	if (!rc) {
		uint8_t d[APF_SHA256_LEN];
		rc = apf_sha256_file(d, &e->file_bytes, e->path);
		apf_hex(e->file_digest, d, sizeof d);
	}
	if (!rc) {
		e->signature_trusted = 1;
		apf_key_id(o->key, e->signer);
	}
	apf_buf_free(&env);
	apf_tree_free(t);
	if (rc) {
		apf_entry_free(e);
		return rc;
	}
	*out = e;
	return 0;
}
