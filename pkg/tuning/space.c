/*
 * space.c: reading search spaces - tuning_search_space.ini and AlgoPerf's
 * tuning_search_space.json, each either as hyperparameter dimensions
 * (ranges and feasible points) or as a list of points - into one
 * apf_search_space (tuning.h says how each form is represented).
 *
 * Every refusal is one APF_EINPUT line naming the file and the line (INI)
 * or the key (JSON): pack time is where a submitter learns that `max` is
 * below `min`, not the first trial of a run.
 */
#include "tuning/tuning.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/config.h"

/* Continuous dimensions take the primes in order (tuning.c). */
#define MAX_RANGES 32
#define MAX_POINTS 100000

void apf_search_space_free(apf_search_space *s)
{
	if (!s)
		return;
	for (size_t i = 0; i < s->ndims; i++) {
		struct apf_hp_dim *d = &s->dims[i];
		free(d->name);
		for (size_t k = 0; k < d->nchoices; k++)
			free(d->choices[k]);
		free(d->choices);
		free(d->values);
	}
	free(s->dims);
	free(s->source);
	free(s);
}

int apf_hp_word_ok(const char *w)
{
	if (!*w)
		return 0;
	for (; *w; w++)
		if (!isalnum((unsigned char)*w) && *w != '_' && *w != '-' &&
		    *w != '.')
			return 0;
	return 1;
}

/* A value as written: a finite number, or a word (NAN). */
static int value_of(const char *text, double *v)
{
	char *end;
	errno = 0;
	double x = strtod(text, &end);
	if (!errno && end != text && *end == 0 && isfinite(x)) {
		*v = x;
		return 0;
	}
	if (!apf_hp_word_ok(text))
		return -1;
	*v = NAN;
	return 0;
}

static apf_search_space *space_new(size_t ndims, const char *name)
{
	apf_search_space *s = apf_calloc(1, sizeof *s);
	if (!s)
		return NULL;
	s->dims = apf_calloc(ndims ? ndims : 1, sizeof *s->dims);
	s->source = apf_strdup(name);
	if (!s->dims || !s->source) {
		apf_search_space_free(s);
		return NULL;
	}
	return s;
}

/* Why a range is unusable, and which of its keys to blame; NULL if fine. */
static const char *range_problem(const struct apf_hp_dim *d, const char **key)
{
	*key = "max";
	if (!(d->min < d->max))
		return "must be above min";
	*key = "min";
	if (d->log_scale && d->min <= 0)
		return "a log scale needs min > 0";
	return NULL;
}

static int count_ranges(const apf_search_space *s, const char *name)
{
	size_t n = 0;
	for (size_t i = 0; i < s->ndims; i++)
		n += s->dims[i].kind == APF_HP_RANGE;
	if (n > MAX_RANGES)
		return apf_error(APF_EINPUT, name,
				 "%zu ranges; at most %d are supported", n,
				 MAX_RANGES);
	return 0;
}

/* Gives dimension d room for n choices (or n points' values). */
static int choices_alloc(struct apf_hp_dim *d, size_t n, const char *name)
{
	d->choices = apf_calloc(n ? n : 1, sizeof *d->choices);
	d->values = apf_calloc(n ? n : 1, sizeof *d->values);
	if (!d->choices || !d->values)
		return apf_error(APF_ENOMEM, name, "out of memory");
	return 0;
}

/* ---- INI ------------------------------------------------------------------ */

static int is_point_section(const char *sec)
{
	return !strncmp(sec, "point ", 6);
}

static int ini_dim(const apf_config *c, const char *sec, struct apf_hp_dim *d)
{
	static const char *const keys[] = {"min", "max", "scaling",
					   "feasible_points", NULL};
	int rc = apf_config_check_keys(c, sec, keys);
	if (rc)
		return rc;
	if (!apf_hp_word_ok(sec))
		return apf_error(APF_EINPUT, apf_config_name(c),
				 "line %d: [%s]: a hyperparameter name is "
				 "letters, digits, _ - and .",
				 apf_config_line(c, sec, NULL), sec);
	d->name = apf_strdup(sec);
	if (!d->name)
		return apf_error(APF_ENOMEM, sec, "out of memory");
	int has_points = apf_config_get(c, sec, "feasible_points") != NULL;
	int has_range = apf_config_get(c, sec, "min") ||
			apf_config_get(c, sec, "max") ||
			apf_config_get(c, sec, "scaling");
	if (has_points == has_range)
		return apf_error(APF_EINPUT, apf_config_name(c),
				 "line %d: [%s]: give either min, max and "
				 "scaling, or feasible_points",
				 apf_config_line(c, sec, NULL), sec);
	if (has_points) {
		d->kind = APF_HP_CHOICE;
		rc = apf_config_list(c, sec, "feasible_points", &d->choices,
				     &d->nchoices);
		if (rc)
			return rc;
		d->values = apf_calloc(d->nchoices, sizeof *d->values);
		if (!d->values)
			return apf_error(APF_ENOMEM, sec, "out of memory");
		for (size_t k = 0; k < d->nchoices; k++)
			if (value_of(d->choices[k], &d->values[k]))
				return apf_config_error(
					c, sec, "feasible_points",
					"'%s' is neither a number nor a word",
					d->choices[k]);
		return 0;
	}
	d->kind = APF_HP_RANGE;
	const char *scaling, *key, *why;
	rc = apf_config_double(&d->min, c, sec, "min");
	if (!rc)
		rc = apf_config_double(&d->max, c, sec, "max");
	if (!rc)
		rc = apf_config_string(&scaling, c, sec, "scaling");
	if (rc)
		return rc;
	if (!strcmp(scaling, "log"))
		d->log_scale = 1;
	else if (strcmp(scaling, "linear"))
		return apf_config_error(c, sec, "scaling",
					"expected log or linear, got '%s'",
					scaling);
	if ((why = range_problem(d, &key)))
		return apf_config_error(c, sec, key, "%s", why);
	return 0;
}

static int ini_dims(apf_search_space **out, const apf_config *c)
{
	const char *name = apf_config_name(c);
	size_t n = apf_config_nsections(c);
	apf_search_space *s = space_new(n, name);
	if (!s)
		return apf_error(APF_ENOMEM, name, "out of memory");
	int rc = 0;
	for (size_t i = 0; !rc && i < n; i++) {
		s->ndims = i + 1;
		rc = ini_dim(c, apf_config_section(c, i), &s->dims[i]);
	}
	if (!rc)
		rc = count_ranges(s, name);
	if (rc) {
		apf_search_space_free(s);
		return rc;
	}
	*out = s;
	return 0;
}

/* N of "[point N]": 1, 2, ... written without sign or leading zero. */
static long point_number(const char *sec)
{
	const char *p = sec + 6;
	if (*p < '1' || *p > '9' || strlen(p) > 6)
		return 0;
	for (const char *q = p; *q; q++)
		if (!isdigit((unsigned char)*q))
			return 0;
	return strtol(p, NULL, 10);
}

/* The [point N] sections in point order, checked to be 1..P. */
static int ini_point_order(const apf_config *c, const char **order, size_t np)
{
	const char *name = apf_config_name(c);
	for (size_t i = 0; i < np; i++) {
		const char *sec = apf_config_section(c, i);
		long k = point_number(sec);
		if (k < 1)
			return apf_error(APF_EINPUT, name,
					 "line %d: [%s]: a point is numbered "
					 "1, 2, ... as in [point 1]",
					 apf_config_line(c, sec, NULL), sec);
		if ((size_t)k <= np)
			order[k - 1] = sec;
	}
	for (size_t p = 0; p < np; p++) {
		if (order[p])
			continue;
		/* np distinct numbers, one missing: another is above np. */
		for (size_t i = 0; i < np; i++) {
			const char *sec = apf_config_section(c, i);
			if ((size_t)point_number(sec) > np)
				return apf_error(
					APF_EINPUT, name,
					"line %d: [%s]: points are numbered 1 "
					"to %zu with no gaps (point %zu is "
					"missing)",
					apf_config_line(c, sec, NULL), sec, np,
					p + 1);
		}
	}
	return 0;
}

/* Every point sets exactly the hyperparameters point 1 sets. */
static int ini_point_keys(const apf_config *c, const char *sec,
			  const char *first)
{
	const char *key;
	for (size_t i = 0; (key = apf_config_key(c, sec, i)); i++)
		if (!apf_config_get(c, first, key))
			return apf_config_error(c, sec, key,
						"not in [%s] (every point sets "
						"the same hyperparameters)",
						first);
	for (size_t i = 0; (key = apf_config_key(c, first, i)); i++)
		if (!apf_config_get(c, sec, key))
			return apf_error(APF_EINPUT, apf_config_name(c),
					 "line %d: [%s] %s: missing (every "
					 "point sets the same hyperparameters "
					 "as [%s])",
					 apf_config_line(c, sec, NULL), sec, key,
					 first);
	return 0;
}

static int ini_points(apf_search_space **out, const apf_config *c)
{
	const char *name = apf_config_name(c);
	size_t np = apf_config_nsections(c);
	if (np > MAX_POINTS)
		return apf_error(APF_EINPUT, name,
				 "%zu points; at most %d are supported", np,
				 MAX_POINTS);
	const char **order = apf_calloc(np, sizeof *order);
	if (!order)
		return apf_error(APF_ENOMEM, name, "out of memory");
	int rc = ini_point_order(c, order, np);
	size_t nnames = 0;
	while (!rc && apf_config_key(c, order[0], nnames))
		nnames++;
	if (!rc && nnames == 0)
		rc = apf_error(APF_EINPUT, name,
			       "line %d: [%s]: no hyperparameters",
			       apf_config_line(c, order[0], NULL), order[0]);
	for (size_t p = 1; !rc && p < np; p++)
		rc = ini_point_keys(c, order[p], order[0]);
	apf_search_space *s = NULL;
	if (!rc && !(s = space_new(nnames, name)))
		rc = apf_error(APF_ENOMEM, name, "out of memory");
	for (size_t i = 0; !rc && i < nnames; i++) {
		const char *key = apf_config_key(c, order[0], i);
		struct apf_hp_dim *d = &s->dims[i];
		s->ndims = i + 1;
		d->kind = APF_HP_CHOICE;
		if (!apf_hp_word_ok(key)) {
			rc = apf_config_error(c, order[0], key,
					      "a hyperparameter name is "
					      "letters, digits, _ - and .");
			break;
		}
		if (!(d->name = apf_strdup(key))) {
			rc = apf_error(APF_ENOMEM, name, "out of memory");
			break;
		}
		rc = choices_alloc(d, np, name);
		for (size_t p = 0; !rc && p < np; p++) {
			const char *v = apf_config_get(c, order[p], key);
			d->nchoices = p + 1;
			if (!(d->choices[p] = apf_strdup(v)))
				rc = apf_error(APF_ENOMEM, name, "out of memory");
			else if (value_of(v, &d->values[p]))
				rc = apf_config_error(
					c, order[p], key,
					"'%s' is neither a number nor a word", v);
		}
	}
	free(order);
	if (rc) {
		apf_search_space_free(s);
		return rc;
	}
	s->npoints = np;
	*out = s;
	return 0;
}

static int parse_ini(apf_search_space **out, const char *text,
		     const char *name)
{
	apf_config *c;
	int rc = apf_config_parse(&c, text, name);
	if (rc)
		return rc;
	size_t n = apf_config_nsections(c);
	int points = n > 0 && is_point_section(apf_config_section(c, 0));
	for (size_t i = 1; !rc && i < n; i++) {
		const char *sec = apf_config_section(c, i);
		if (is_point_section(sec) != points)
			rc = apf_error(APF_EINPUT, name,
				       "line %d: [%s]: a search space is either "
				       "all [point N] sections or all "
				       "hyperparameter sections",
				       apf_config_line(c, sec, NULL), sec);
	}
	if (!rc)
		rc = points ? ini_points(out, c) : ini_dims(out, c);
	apf_config_free(c);
	return rc;
}

/* ---- JSON ----------------------------------------------------------------- */

/* A JSON value as a point or feasible point: a number (written back the
 * shortest way that reads as the same double), a word, or true/false. */
static int json_value(const json_t *v, char **text, double *value)
{
	char buf[40];
	if (json_is_number(v)) {
		double x = json_number_value(v);
		if (!isfinite(x))
			return -1;
		for (int prec = 15; prec <= 17; prec++) {
			snprintf(buf, sizeof buf, "%.*g", prec, x);
			if (strtod(buf, NULL) == x)
				break;
		}
		*value = x;
	} else if (json_is_boolean(v)) {
		snprintf(buf, sizeof buf, "%s", json_is_true(v) ? "true" : "false");
		*value = NAN;
	} else if (json_is_string(v) && apf_hp_word_ok(json_string_value(v))) {
		*value = NAN;
		*text = apf_strdup(json_string_value(v));
		return *text ? 0 : -2;
	} else {
		return -1;
	}
	*text = apf_strdup(buf);
	return *text ? 0 : -2;
}

static int json_put(struct apf_hp_dim *d, size_t k, const json_t *v,
		    const char *name, const char *where)
{
	int bad = json_value(v, &d->choices[k], &d->values[k]);
	d->nchoices = k + 1;
	if (bad == -2)
		return apf_error(APF_ENOMEM, name, "out of memory");
	if (bad)
		return apf_error(APF_EINPUT, name,
				 "%s: expected a number, a word or true/false",
				 where);
	return 0;
}

static int json_number_key(const json_t *o, const char *dim, const char *key,
			   double *out, const char *name)
{
	const json_t *v = json_object_get(o, key);
	if (!v)
		return apf_error(APF_EINPUT, name, "'%s': %s: missing", dim, key);
	if (!json_is_number(v) || !isfinite(json_number_value(v)))
		return apf_error(APF_EINPUT, name, "'%s': %s: expected a number",
				 dim, key);
	*out = json_number_value(v);
	return 0;
}

static int json_dim(const char *key, const json_t *o, struct apf_hp_dim *d,
		    const char *name)
{
	if (!apf_hp_word_ok(key))
		return apf_error(APF_EINPUT, name,
				 "'%s': a hyperparameter name is letters, "
				 "digits, _ - and .",
				 key);
	if (!(d->name = apf_strdup(key)))
		return apf_error(APF_ENOMEM, name, "out of memory");
	if (!json_is_object(o))
		return apf_error(APF_EINPUT, name,
				 "'%s': expected an object with min, max and "
				 "scaling, or feasible_points",
				 key);
	const char *k;
	const json_t *v;
	json_object_foreach((json_t *)o, k, v)
	{
		if (strcmp(k, "min") && strcmp(k, "max") &&
		    strcmp(k, "scaling") && strcmp(k, "feasible_points"))
			return apf_error(APF_EINPUT, name,
					 "'%s': unknown key '%s'", key, k);
	}
	const json_t *fp = json_object_get(o, "feasible_points");
	size_t others = json_object_size(o) - (fp != NULL);
	if ((fp != NULL) == (others > 0))
		return apf_error(APF_EINPUT, name,
				 "'%s': give either min, max and scaling, or "
				 "feasible_points",
				 key);
	if (fp) {
		d->kind = APF_HP_CHOICE;
		if (!json_is_array(fp) || json_array_size(fp) == 0)
			return apf_error(APF_EINPUT, name,
					 "'%s': feasible_points: expected a "
					 "non-empty list",
					 key);
		int rc = choices_alloc(d, json_array_size(fp), name);
		char where[160];
		for (size_t i = 0; !rc && i < json_array_size(fp); i++) {
			snprintf(where, sizeof where, "'%s': feasible_points[%zu]",
				 key, i);
			rc = json_put(d, i, json_array_get(fp, i), name, where);
		}
		return rc;
	}
	d->kind = APF_HP_RANGE;
	int rc = json_number_key(o, key, "min", &d->min, name);
	if (!rc)
		rc = json_number_key(o, key, "max", &d->max, name);
	if (rc)
		return rc;
	const json_t *sc = json_object_get(o, "scaling");
	if (!sc)
		return apf_error(APF_EINPUT, name, "'%s': scaling: missing", key);
	if (json_is_string(sc) && !strcmp(json_string_value(sc), "log"))
		d->log_scale = 1;
	else if (!json_is_string(sc) || strcmp(json_string_value(sc), "linear"))
		return apf_error(APF_EINPUT, name,
				 "'%s': scaling: expected \"log\" or \"linear\"",
				 key);
	const char *bad, *why = range_problem(d, &bad);
	if (why)
		return apf_error(APF_EINPUT, name, "'%s': %s: %s", key, bad, why);
	return 0;
}

static int json_dims(apf_search_space **out, const json_t *j, const char *name)
{
	apf_search_space *s = space_new(json_object_size(j), name);
	if (!s)
		return apf_error(APF_ENOMEM, name, "out of memory");
	int rc = 0;
	const char *key;
	const json_t *v;
	json_object_foreach((json_t *)j, key, v)
	{
		rc = json_dim(key, v, &s->dims[s->ndims++], name);
		if (rc)
			break;
	}
	if (!rc)
		rc = count_ranges(s, name);
	if (rc) {
		apf_search_space_free(s);
		return rc;
	}
	*out = s;
	return 0;
}

/* Every point an object with exactly the keys of point 1. */
static int json_point_keys(const json_t *j, const char *name)
{
	const json_t *first = json_array_get(j, 0);
	for (size_t p = 0; p < json_array_size(j); p++) {
		const json_t *o = json_array_get(j, p);
		if (!json_is_object(o))
			return apf_error(APF_EINPUT, name,
					 "point %zu: expected an object of "
					 "hyperparameters",
					 p + 1);
		if (p == 0 && json_object_size(o) == 0)
			return apf_error(APF_EINPUT, name,
					 "point 1: no hyperparameters");
		const char *key;
		const json_t *v;
		json_object_foreach((json_t *)o, key, v)
		{
			if (!json_object_get(first, key))
				return apf_error(APF_EINPUT, name,
						 "point %zu: '%s': not in point 1 "
						 "(every point sets the same "
						 "hyperparameters)",
						 p + 1, key);
		}
		json_object_foreach((json_t *)first, key, v)
		{
			if (!json_object_get(o, key))
				return apf_error(APF_EINPUT, name,
						 "point %zu: '%s': missing "
						 "(every point sets the same "
						 "hyperparameters as point 1)",
						 p + 1, key);
		}
	}
	return 0;
}

static int json_points(apf_search_space **out, const json_t *j,
		       const char *name)
{
	size_t np = json_array_size(j);
	if (np == 0)
		return apf_error(APF_EINPUT, name, "an empty list of points");
	if (np > MAX_POINTS)
		return apf_error(APF_EINPUT, name,
				 "%zu points; at most %d are supported", np,
				 MAX_POINTS);
	int rc = json_point_keys(j, name);
	if (rc)
		return rc;
	const json_t *first = json_array_get(j, 0);
	apf_search_space *s = space_new(json_object_size(first), name);
	if (!s)
		return apf_error(APF_ENOMEM, name, "out of memory");
	const char *key;
	const json_t *v;
	char where[160];
	json_object_foreach((json_t *)first, key, v)
	{
		struct apf_hp_dim *d = &s->dims[s->ndims++];
		d->kind = APF_HP_CHOICE;
		if (!apf_hp_word_ok(key)) {
			rc = apf_error(APF_EINPUT, name,
				       "'%s': a hyperparameter name is "
				       "letters, digits, _ - and .",
				       key);
			break;
		}
		if (!(d->name = apf_strdup(key))) {
			rc = apf_error(APF_ENOMEM, name, "out of memory");
			break;
		}
		rc = choices_alloc(d, np, name);
		for (size_t p = 0; !rc && p < np; p++) {
			snprintf(where, sizeof where, "point %zu: '%s'", p + 1,
				 key);
			rc = json_put(d, p, json_object_get(json_array_get(j, p), key),
				      name, where);
		}
		if (rc)
			break;
	}
	if (rc) {
		apf_search_space_free(s);
		return rc;
	}
	s->npoints = np;
	*out = s;
	return 0;
}

static int parse_json(apf_search_space **out, const char *text,
		      const char *name)
{
	json_error_t err;
	json_t *j = json_loads(text, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &err);
	if (!j)
		return apf_error(APF_EINPUT, name, "line %d: %s", err.line,
				 err.text);
	int rc;
	if (json_is_array(j))
		rc = json_points(out, j, name);
	else if (json_is_object(j))
		rc = json_dims(out, j, name);
	else
		rc = apf_error(APF_EINPUT, name,
			       "expected an object of hyperparameters or a list "
			       "of points");
	json_decref(j);
	return rc;
}

/* ---- both ----------------------------------------------------------------- */

static int ends_with(const char *s, const char *tail)
{
	size_t n = strlen(s), m = strlen(tail);
	return n >= m && !strcmp(s + n - m, tail);
}

int apf_search_space_parse(apf_search_space **out, const char *text,
			   const char *name)
{
	*out = NULL;
	return ends_with(name, ".json") ? parse_json(out, text, name)
					: parse_ini(out, text, name);
}

int apf_search_space_load(apf_search_space **out, const char *path)
{
	*out = NULL;
	char *text;
	size_t len;
	int rc = apf_file_read(&text, &len, path, 1 << 20);
	if (rc)
		return rc;
	if (strlen(text) != len)
		rc = apf_error(APF_EINPUT, path, "holds a NUL byte; not a text file");
	else
		rc = apf_search_space_parse(out, text, path);
	free(text);
	return rc;
}

int apf_search_space_check_trials(const apf_search_space *s, long trials)
{
	if (s->npoints && trials > 0 && (size_t)trials > s->npoints)
		return apf_error(APF_EINPUT, s->source,
				 "%ld trials per study but %zu points", trials,
				 s->npoints);
	return 0;
}
