/*
 * logs.c: finding submissions, studies, workloads and trials on disk.
 *
 * Only directories are walked here; the CSVs are read later, and only for
 * the workloads the scoring needs. Everything is sorted (studies and trials
 * by number, workloads by name) so results never depend on the order a file
 * system lists entries in.
 *
 * What is skipped, as AlgoPerf's scorer skips it: entries that are not
 * study_<k> directories in a submission, trial directories without an
 * eval_measurements.csv (counted, for a warning), and directories named
 * trial_<n> sitting directly in a study (counted too). A study in which a
 * workload has no logged trial does not exist for that workload.
 */
#include "score/score.h"

#include <dirent.h>
#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static int is_dir(const char *p)
{
	struct stat st;
	return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

static int is_file(const char *p)
{
	struct stat st;
	return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

/* "<prefix><digits>" with a number that fits an int; -1 otherwise. */
static int numbered(const char *name, const char *prefix)
{
	size_t n = strlen(prefix);
	if (strncmp(name, prefix, n) || !name[n])
		return -1;
	long v = 0;
	for (const char *p = name + n; *p; p++) {
		if (*p < '0' || *p > '9' || v > INT_MAX / 10)
			return -1;
		v = v * 10 + (*p - '0');
	}
	return v > INT_MAX ? -1 : (int)v;
}

/* Sorted names of the non-hidden entries of a directory. */
static int list_dir(const char *dir, char ***out, size_t *n)
{
	*out = NULL;
	*n = 0;
	DIR *d = opendir(dir);
	if (!d)
		return apf_error_errno(APF_EINPUT, errno, dir, "cannot read");
	char **v = NULL;
	size_t k = 0, cap = 0;
	struct dirent *de;
	int rc = 0;
	errno = 0;
	while ((de = readdir(d))) {
		if (de->d_name[0] == '.')
			continue;
		if (k == cap) {
			cap = cap ? 2 * cap : 16;
			char **nv = realloc(v, cap * sizeof *nv);
			if (!nv) {
				rc = APF_ENOMEM;
				break;
			}
			v = nv;
		}
		if (!(v[k] = apf_strdup(de->d_name))) {
			rc = APF_ENOMEM;
			break;
		}
		k++;
	}
	closedir(d);
	if (rc) {
		for (size_t i = 0; i < k; i++)
			free(v[i]);
		free(v);
		return apf_error(rc, dir, "out of memory");
	}
	for (size_t i = 1; i < k; i++)
		for (size_t j = i; j > 0 && strcmp(v[j - 1], v[j]) > 0; j--) {
			char *t = v[j];
			v[j] = v[j - 1];
			v[j - 1] = t;
		}
	*out = v;
	*n = k;
	return 0;
}

static void free_list(char **v, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(v[i]);
	free(v);
}

static int is_submission(const char *dir)
{
	char *rj = apf_path_join(dir, "run.json");
	int yes = rj && is_file(rj);
	free(rj);
	if (yes)
		return 1;
	char **names;
	size_t n;
	if (list_dir(dir, &names, &n) != 0) {
		apf_error_clear();
		return 0;
	}
	for (size_t i = 0; i < n && !yes; i++) {
		if (numbered(names[i], "study_") < 0)
			continue;
		char *p = apf_path_join(dir, names[i]);
		yes = p && is_dir(p);
		free(p);
	}
	free_list(names, n);
	return yes;
}

int apf_score_logs_new(apf_score_logs **out)
{
	*out = apf_calloc(1, sizeof **out);
	return *out ? 0 : apf_error(APF_ENOMEM, "score", "out of memory");
}

static void free_workload(struct apf_score_workload *w)
{
	for (size_t i = 0; i < w->nstudies; i++) {
		struct apf_score_study *s = &w->studies[i];
		for (size_t j = 0; j < s->ntrials; j++) {
			free(s->trials[j].csv);
			free(s->trials[j].refused);
		}
		free(s->trials);
	}
	free(w->studies);
	free(w->name);
	free(w->dir_name);
}

static void free_submission(struct apf_score_submission *s)
{
	for (size_t i = 0; i < s->nw; i++)
		free_workload(&s->w[i]);
	free(s->w);
	free(s->name);
	free(s->path);
	free(s->label);
	apf_score_run_free(s->run);
}

void apf_score_logs_free(apf_score_logs *l)
{
	if (!l)
		return;
	for (size_t i = 0; i < l->n; i++)
		free_submission(&l->s[i]);
	for (size_t i = 0; i < l->nexcluded; i++) {
		free(l->excluded[i].name);
		free(l->excluded[i].path);
		free(l->excluded[i].reason);
	}
	free(l->excluded);
	free(l->s);
	free(l);
}

int apf_score_logs_exclude(apf_score_logs *l, size_t i, const char *reason)
{
	if (i >= l->n)
		return apf_error(APF_EINTERNAL, "score",
				 "no submission %zu to exclude", i);
	struct apf_score_excluded *ne =
		realloc(l->excluded, (l->nexcluded + 1) * sizeof *ne);
	if (!ne)
		return apf_error(APF_ENOMEM, "score", "out of memory");
	l->excluded = ne;
	char *why = apf_strdup(reason);
	if (!why)
		return apf_error(APF_ENOMEM, "score", "out of memory");
	struct apf_score_submission *s = &l->s[i];
	/* The name and path move to the excluded list. */
	l->excluded[l->nexcluded++] = (struct apf_score_excluded){
		.name = s->name, .path = s->path, .reason = why};
	s->name = s->path = NULL;
	free_submission(s);
	memmove(&l->s[i], &l->s[i + 1], (l->n - i - 1) * sizeof *l->s);
	l->n--;
	return 0;
}

int apf_score_logs_have_apf_run(const apf_score_logs *l)
{
	for (size_t i = 0; i < l->n; i++)
		if (l->s[i].apf_run)
			return 1;
	return 0;
}

/* The workload a directory of a study logs: AlgoPerf's names end in the
 * framework, apf's don't. */
static char *workload_name(const char *dir_name, int apf_run)
{
	size_t n = strlen(dir_name);
	if (!apf_run) {
		static const char *const fw[] = {"_jax", "_pytorch"};
		for (int i = 0; i < 2; i++) {
			size_t k = strlen(fw[i]);
			if (n > k && !strcmp(dir_name + n - k, fw[i]))
				return strndup(dir_name, n - k);
		}
	}
	return apf_strdup(dir_name);
}

static int find_workload(struct apf_score_submission *s, const char *name,
			 const char *dir_name, struct apf_score_workload **out)
{
	for (size_t i = 0; i < s->nw; i++) {
		if (strcmp(s->w[i].name, name))
			continue;
		if (strcmp(s->w[i].dir_name, dir_name))
			return apf_error(APF_EINPUT, s->path,
					 "workload %s is logged as both %s "
					 "and %s",
					 name, s->w[i].dir_name, dir_name);
		*out = &s->w[i];
		return 0;
	}
	struct apf_score_workload *nw =
		realloc(s->w, (s->nw + 1) * sizeof *nw);
	if (!nw)
		return apf_error(APF_ENOMEM, s->path, "out of memory");
	s->w = nw;
	struct apf_score_workload *w = &s->w[s->nw];
	memset(w, 0, sizeof *w);
	w->name = apf_strdup(name);
	w->dir_name = apf_strdup(dir_name);
	w->time = NAN;
	if (!w->name || !w->dir_name) {
		free(w->name);
		free(w->dir_name);
		return apf_error(APF_ENOMEM, s->path, "out of memory");
	}
	s->nw++;
	*out = w;
	return 0;
}

/* Adds study k of one workload directory: its trials that have a CSV. */
static int add_workload_study(struct apf_score_submission *s, int k,
			      const char *wdir, const char *dir_name)
{
	char **names;
	size_t n;
	int rc = list_dir(wdir, &names, &n);
	if (rc)
		return rc;
	struct apf_score_trial *trials = NULL;
	size_t nt = 0, skipped = 0, seen = 0;
	for (size_t i = 0; i < n && !rc; i++) {
		int num = numbered(names[i], "trial_");
		if (num < 0)
			continue;
		char *tdir = apf_path_join(wdir, names[i]);
		char *csv = tdir ? apf_path_join(tdir, "eval_measurements.csv")
				 : NULL;
		int isdir = tdir && is_dir(tdir);
		free(tdir);
		if (!csv) {
			rc = apf_error(APF_ENOMEM, wdir, "out of memory");
			break;
		}
		if (!isdir) {
			free(csv);
			continue;
		}
		seen++;
		if (!is_file(csv)) {
			skipped++;
			free(csv);
			continue;
		}
		struct apf_score_trial *nv =
			realloc(trials, (nt + 1) * sizeof *nv);
		if (!nv) {
			free(csv);
			rc = apf_error(APF_ENOMEM, wdir, "out of memory");
			break;
		}
		trials = nv;
		trials[nt++] = (struct apf_score_trial){
			.number = num, .csv = csv, .evals = -1, .hit = -1,
			.time = INFINITY};
	}
	free_list(names, n);
	if (!rc && seen == 0) {
		/* Not a workload's log directory (no trial_<n> inside). */
		free(trials);
		return 0;
	}
	char *name = rc ? NULL : workload_name(dir_name, s->apf_run);
	struct apf_score_workload *w = NULL;
	if (!rc && !name)
		rc = apf_error(APF_ENOMEM, wdir, "out of memory");
	if (!rc)
		rc = find_workload(s, name, dir_name, &w);
	free(name);
	if (!rc && nt > 0) {
		struct apf_score_study *ns =
			realloc(w->studies, (w->nstudies + 1) * sizeof *ns);
		if (!ns) {
			rc = apf_error(APF_ENOMEM, wdir, "out of memory");
		} else {
			w->studies = ns;
			/* Trials sorted by number: the tie rule needs it. */
			for (size_t i = 1; i < nt; i++)
				for (size_t j = i;
				     j > 0 && trials[j - 1].number > trials[j].number;
				     j--) {
					struct apf_score_trial t = trials[j];
					trials[j] = trials[j - 1];
					trials[j - 1] = t;
				}
			w->studies[w->nstudies++] = (struct apf_score_study){
				.number = k, .trials = trials, .ntrials = nt,
				.best = -1, .time = INFINITY};
			trials = NULL;
			nt = 0;
		}
	}
	if (!rc)
		w->skipped += skipped;
	for (size_t i = 0; i < nt; i++)
		free(trials[i].csv);
	free(trials);
	return rc;
}

/* Trial n of study k of w, as a trial of a planned unit that has no
 * eval_measurements.csv, unless the study holds trial n already. Studies
 * and trials stay sorted by number. */
static int add_missing_trial(struct apf_score_submission *s,
			     struct apf_score_workload *w, long k, long n)
{
	size_t i = 0;
	while (i < w->nstudies && w->studies[i].number < k)
		i++;
	if (i == w->nstudies || w->studies[i].number != k) {
		struct apf_score_study *ns =
			realloc(w->studies, (w->nstudies + 1) * sizeof *ns);
		if (!ns)
			return apf_error(APF_ENOMEM, s->path, "out of memory");
		w->studies = ns;
		memmove(&ns[i + 1], &ns[i], (w->nstudies - i) * sizeof *ns);
		ns[i] = (struct apf_score_study){.number = (int)k, .best = -1,
						 .time = INFINITY};
		w->nstudies++;
	}
	struct apf_score_study *st = &w->studies[i];
	size_t j = 0;
	while (j < st->ntrials && st->trials[j].number < n)
		j++;
	if (j < st->ntrials && st->trials[j].number == n)
		return 0;
	struct apf_score_trial *nt =
		realloc(st->trials, (st->ntrials + 1) * sizeof *nt);
	if (!nt)
		return apf_error(APF_ENOMEM, s->path, "out of memory");
	st->trials = nt;
	memmove(&nt[j + 1], &nt[j], (st->ntrials - j) * sizeof *nt);
	nt[j] = (struct apf_score_trial){.number = (int)n, .evals = -1,
					 .hit = -1, .time = INFINITY,
					 .missing = 1};
	st->ntrials++;
	return 0;
}

/* Every unit of an apf run's plan counts: one without
 * eval_measurements.csv (not run yet, failed before its first eval, or
 * deleted) is a trial that never met its target. Scored from the
 * directories alone, a run missing the study that went worst would take
 * its median over the ones that went well; run.json's plan says what the
 * run set out to do (apf verify binds it to the entry's), and the warning
 * naming these units stays. */
static int add_missing_units(struct apf_score_submission *s)
{
	const apf_score_run *run = s->run;
	if (!run || !run->plan_known)
		return 0;
	int rc = 0;
	for (size_t i = 0; !rc && i < run->nplanned; i++) {
		const struct apf_score_unit *u = &run->units[i];
		/* Numbers a directory name could not hold (numbered() reads
		 * an int) name no unit the scorer could have read. */
		if (u->has_csv || !u->dir_name || u->study < 0 ||
		    u->trial < 0 || u->study > INT_MAX || u->trial > INT_MAX)
			continue;
		char *name = workload_name(u->dir_name, 1);
		struct apf_score_workload *w = NULL;
		rc = name ? find_workload(s, name, u->dir_name, &w)
			  : apf_error(APF_ENOMEM, s->path, "out of memory");
		free(name);
		if (!rc)
			rc = add_missing_trial(s, w, u->study, u->trial);
	}
	return rc;
}

/* Trial n of study k of the workload logged as dir_name, or NULL. */
static struct apf_score_trial *
logged_trial(struct apf_score_submission *s, const char *dir_name, long k,
	     long n)
{
	for (size_t j = 0; j < s->nw; j++) {
		if (strcmp(s->w[j].dir_name, dir_name))
			continue;
		for (size_t i = 0; i < s->w[j].nstudies; i++) {
			struct apf_score_study *st = &s->w[j].studies[i];
			for (size_t t = 0; st->number == k && t < st->ntrials;
			     t++)
				if (st->trials[t].number == n)
					return &st->trials[t];
		}
	}
	return NULL;
}

/* Each trial of an apf run gets its unit's budget from the unit's log
 * (trial_start's budget_ns, which verify binds to the workload's budget,
 * the rules' multiplier and the run's scale): the scorer counts no eval at
 * or past it. */
static void set_budgets(struct apf_score_submission *s)
{
	for (size_t i = 0; s->run && i < s->run->nunits; i++) {
		const struct apf_score_unit *u = &s->run->units[i];
		struct apf_score_trial *t =
			u->budget_ns && u->dir_name
				? logged_trial(s, u->dir_name, u->study, u->trial)
				: NULL;
		if (t)
			t->budget = (double)u->budget_ns / 1e9;
	}
}

static int cmp_int(int a, int b)
{
	return (a > b) - (a < b);
}

static int add_submission(apf_score_logs *l, const char *dir,
			  const char *label)
{
	char real[PATH_MAX];
	if (!realpath(dir, real))
		return apf_error_errno(APF_EINPUT, errno, dir, "cannot read");
	struct apf_score_submission s = {0};
	char *rj = apf_path_join(real, "run.json");
	s.apf_run = rj && is_file(rj);
	free(rj);
	s.path = apf_strdup(dir);
	int rc = s.path ? 0 : apf_error(APF_ENOMEM, dir, "out of memory");
	if (!rc && label && !(s.label = apf_strdup(label)))
		rc = apf_error(APF_ENOMEM, dir, "out of memory");
	if (!rc && label && !(s.name = apf_strdup(label)))
		rc = apf_error(APF_ENOMEM, dir, "out of memory");
	if (!rc && s.apf_run)
		rc = apf_score_read_run(&s.run, real);
	if (!rc && s.apf_run && !label && s.run->submission &&
	    !(s.name = apf_strdup(s.run->submission)))
		rc = apf_error(APF_ENOMEM, dir, "out of memory");
	if (!rc && !s.name) {
		const char *base = strrchr(real, '/');
		s.name = apf_strdup(base && base[1] ? base + 1 : real);
		if (!s.name)
			rc = apf_error(APF_ENOMEM, dir, "out of memory");
	}
	for (size_t i = 0; !rc && i < l->n; i++) {
		if (strcmp(l->s[i].name, s.name))
			continue;
		if (label && l->s[i].label)
			rc = apf_error(APF_EINPUT, dir,
				       "label '%s' is also %s's; labels must "
				       "be unique",
				       label, l->s[i].path);
		else
			rc = apf_error(APF_EINPUT, dir,
				       "submission '%s' is also %s; names must "
				       "be unique (label them: DIR=LABEL)",
				       s.name, l->s[i].path);
	}
	char **studies = NULL;
	size_t ns = 0;
	if (!rc)
		rc = list_dir(dir, &studies, &ns);
	/* Studies in numeric order (study_10 after study_9). */
	for (size_t i = 1; !rc && i < ns; i++)
		for (size_t j = i; j > 0 &&
				   cmp_int(numbered(studies[j - 1], "study_"),
					   numbered(studies[j], "study_")) > 0;
		     j--) {
			char *t = studies[j];
			studies[j] = studies[j - 1];
			studies[j - 1] = t;
		}
	for (size_t i = 0; !rc && i < ns; i++) {
		int k = numbered(studies[i], "study_");
		char *sdir = apf_path_join(dir, studies[i]);
		if (!sdir) {
			rc = apf_error(APF_ENOMEM, dir, "out of memory");
			break;
		}
		if (k < 0 || !is_dir(sdir)) {
			free(sdir);
			continue;
		}
		char **wl = NULL;
		size_t nw = 0;
		rc = list_dir(sdir, &wl, &nw);
		for (size_t j = 0; !rc && j < nw; j++) {
			char *wdir = apf_path_join(sdir, wl[j]);
			if (!wdir) {
				rc = apf_error(APF_ENOMEM, sdir,
					       "out of memory");
				break;
			}
			if (is_dir(wdir)) {
				if (numbered(wl[j], "trial_") >= 0)
					s.stray++;
				else
					rc = add_workload_study(&s, k, wdir,
								wl[j]);
			}
			free(wdir);
		}
		free_list(wl, nw);
		free(sdir);
	}
	free_list(studies, ns);
	if (!rc && s.apf_run)
		rc = add_missing_units(&s);
	if (!rc && s.apf_run)
		set_budgets(&s);
	if (!rc) {
		/* Workloads by name. */
		for (size_t i = 1; i < s.nw; i++)
			for (size_t j = i;
			     j > 0 && strcmp(s.w[j - 1].name, s.w[j].name) > 0;
			     j--) {
				struct apf_score_workload t = s.w[j];
				s.w[j] = s.w[j - 1];
				s.w[j - 1] = t;
			}
		struct apf_score_submission *nv =
			realloc(l->s, (l->n + 1) * sizeof *nv);
		if (!nv)
			rc = apf_error(APF_ENOMEM, dir, "out of memory");
		else {
			l->s = nv;
			l->s[l->n++] = s;
			return 0;
		}
	}
	free_submission(&s);
	return rc;
}

int apf_score_logs_add(apf_score_logs *l, const char *path)
{
	return apf_score_logs_add_as(l, path, NULL);
}

int apf_score_logs_add_as(apf_score_logs *l, const char *path,
			  const char *label)
{
	struct stat st;
	if (stat(path, &st) != 0)
		return apf_error_errno(APF_EINPUT, errno, path, "cannot read");
	if (!S_ISDIR(st.st_mode))
		return apf_error(APF_EINPUT, path,
				 "not a directory (expected a submission's "
				 "logs or a directory of them)");
	if (label && !*label)
		return apf_error(APF_EINPUT, path, "empty label after '='");
	for (const char *p = label; p && *p; p++)
		if ((unsigned char)*p < 0x20 || *p == 0x7f)
			return apf_error(APF_EINPUT, path,
					 "label holds a control character");
	if (is_submission(path))
		return add_submission(l, path, label);
	if (label)
		return apf_error(APF_EINPUT, path,
				 "not one submission (no run.json or "
				 "study_<k>/ here) but a directory of them; a "
				 "label names one submission");
	char **names;
	size_t n;
	int rc = list_dir(path, &names, &n);
	if (rc)
		return rc;
	size_t found = 0;
	for (size_t i = 0; !rc && i < n; i++) {
		char *sub = apf_path_join(path, names[i]);
		if (!sub)
			rc = apf_error(APF_ENOMEM, path, "out of memory");
		else if (is_dir(sub) && is_submission(sub)) {
			rc = add_submission(l, sub, NULL);
			found++;
		}
		free(sub);
	}
	free_list(names, n);
	if (!rc && !found)
		rc = apf_error(APF_EINPUT, path,
			       "no submission logs here (no run.json or "
			       "study_<k>/ directory, nor subdirectories "
			       "holding them)");
	return rc;
}
