/*
 * tuning.c: search-space parsing and seeded Halton draws.
 */
#include "tuning/tuning.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/config.h"
#include "hash/hash.h"

static const unsigned primes[] = {2,  3,  5,  7,  11, 13, 17, 19, 23, 29, 31,
				  37, 41, 43, 47, 53, 59, 61, 67, 71, 73, 79,
				  83, 89, 97, 101, 103, 107, 109, 113, 127, 131};
#define MAX_DIMS (sizeof primes / sizeof primes[0])

double apf_halton(uint64_t index, unsigned base)
{
	double f = 1.0, r = 0.0;
	while (index > 0) {
		f /= base;
		r += f * (double)(index % base);
		index /= base;
	}
	return r;
}

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
	free(s);
}

static int word_ok(const char *w)
{
	if (!*w)
		return 0;
	for (; *w; w++)
		if (!isalnum((unsigned char)*w) && *w != '_' && *w != '-' &&
		    *w != '.')
			return 0;
	return 1;
}

static int parse_dim(const apf_config *c, const char *sec, struct apf_hp_dim *d)
{
	static const char *const keys[] = {"min", "max", "scaling",
					   "feasible_points", NULL};
	int rc = apf_config_check_keys(c, sec, keys);
	if (rc)
		return rc;
	if (!word_ok(sec))
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
		for (size_t k = 0; k < d->nchoices; k++) {
			char *end;
			errno = 0;
			double v = strtod(d->choices[k], &end);
			if (!errno && *end == 0 && isfinite(v))
				d->values[k] = v;
			else if (word_ok(d->choices[k]))
				d->values[k] = NAN;
			else
				return apf_config_error(
					c, sec, "feasible_points",
					"'%s' is neither a number nor a word",
					d->choices[k]);
		}
		return 0;
	}
	d->kind = APF_HP_RANGE;
	const char *scaling;
	rc = apf_config_double(c, sec, "min", &d->min);
	if (!rc)
		rc = apf_config_double(c, sec, "max", &d->max);
	if (!rc)
		rc = apf_config_string(c, sec, "scaling", &scaling);
	if (rc)
		return rc;
	if (!strcmp(scaling, "log"))
		d->log_scale = 1;
	else if (strcmp(scaling, "linear"))
		return apf_config_error(c, sec, "scaling",
					"expected log or linear, got '%s'",
					scaling);
	if (!(d->min < d->max))
		return apf_config_error(c, sec, "max", "must be above min");
	if (d->log_scale && d->min <= 0)
		return apf_config_error(c, sec, "min",
					"a log scale needs min > 0");
	return 0;
}

int apf_search_space_parse(apf_search_space **out, const char *text,
			   const char *name)
{
	*out = NULL;
	apf_config *c;
	int rc = apf_config_parse(&c, text, name);
	if (rc)
		return rc;
	apf_search_space *s = apf_calloc(1, sizeof *s);
	size_t n = apf_config_nsections(c);
	if (s)
		s->dims = apf_calloc(n, sizeof *s->dims);
	if (!s || !s->dims) {
		free(s);
		apf_config_free(c);
		return apf_error(APF_ENOMEM, name, "out of memory");
	}
	if (n > MAX_DIMS)
		rc = apf_error(APF_EINPUT, name,
			       "%zu hyperparameters; at most %zu are supported",
			       n, MAX_DIMS);
	for (size_t i = 0; !rc && i < n; i++) {
		s->ndims = i + 1;
		rc = parse_dim(c, apf_config_section(c, i), &s->dims[i]);
	}
	apf_config_free(c);
	if (rc) {
		apf_search_space_free(s);
		return rc;
	}
	*out = s;
	return 0;
}

int apf_search_space_load(apf_search_space **out, const char *path)
{
	*out = NULL;
	char *text;
	int rc = apf_file_read(&text, NULL, path, 1 << 20);
	if (rc)
		return rc;
	rc = apf_search_space_parse(out, text, path);
	free(text);
	return rc;
}

/* 64 bits from SHA-256("apf-halton-v1", seed, study, dim). */
static uint64_t seeded(uint32_t seed, long study, long dim)
{
	char msg[96];
	int n = snprintf(msg, sizeof msg, "apf-halton-v1 %u %ld %ld", seed, study,
			 dim);
	uint8_t d[APF_SHA256_LEN];
	apf_sha256_buf(d, msg, (size_t)n);
	uint64_t v = 0;
	for (int i = 0; i < 8; i++)
		v = v << 8 | d[i];
	return v;
}

void apf_hparams_free(apf_hparams *h)
{
	for (size_t i = 0; i < h->n; i++) {
		free(h->names[i]);
		free(h->words[i]);
	}
	free(h->names);
	free(h->values);
	free(h->words);
	memset(h, 0, sizeof *h);
}

int apf_tuning_draw(const apf_search_space *s, uint32_t seed, long study,
		    long trial, apf_hparams *out)
{
	memset(out, 0, sizeof *out);
	if (study < 0 || trial < 0)
		return apf_error(APF_EINTERNAL, "tuning", "negative index");
	size_t n = s->ndims;
	out->names = apf_calloc(n, sizeof *out->names);
	out->values = apf_calloc(n, sizeof *out->values);
	out->words = apf_calloc(n, sizeof *out->words);
	if (!out->names || !out->values || !out->words) {
		apf_hparams_free(out);
		return apf_error(APF_ENOMEM, "tuning", "out of memory");
	}
	/* A seed-dependent start in the sequence, shared by all studies. */
	uint64_t skip = seeded(seed, -1, -1) % 4096;
	for (size_t d = 0; d < n; d++) {
		const struct apf_hp_dim *dim = &s->dims[d];
		double u = apf_halton((uint64_t)trial + 1 + skip, primes[d]);
		double shift = (double)(seeded(seed, study, (long)d) >> 11) *
			       0x1.0p-53;
		u += shift;
		u -= floor(u);
		out->n = d + 1;
		out->names[d] = apf_strdup(dim->name);
		if (!out->names[d]) {
			apf_hparams_free(out);
			return apf_error(APF_ENOMEM, "tuning", "out of memory");
		}
		if (dim->kind == APF_HP_RANGE) {
			double v = dim->log_scale
					   ? exp(log(dim->min) +
						 u * (log(dim->max) - log(dim->min)))
					   : dim->min + u * (dim->max - dim->min);
			/* Rounding at the ends must not leave the range. */
			out->values[d] = fmin(fmax(v, dim->min), dim->max);
		} else {
			size_t k = (size_t)(u * (double)dim->nchoices);
			if (k >= dim->nchoices)
				k = dim->nchoices - 1;
			out->values[d] = dim->values[k];
			if (isnan(dim->values[k]) &&
			    !(out->words[d] = apf_strdup(dim->choices[k]))) {
				apf_hparams_free(out);
				return apf_error(APF_ENOMEM, "tuning",
						 "out of memory");
			}
		}
	}
	return 0;
}

json_t *apf_hparams_to_json(const apf_hparams *h)
{
	json_t *o = json_object();
	for (size_t i = 0; o && i < h->n; i++)
		json_object_set_new(o, h->names[i],
				    h->words[i] ? json_string(h->words[i])
						: json_real(h->values[i]));
	return o;
}

int apf_hparams_from_json(apf_hparams *out, const json_t *j)
{
	memset(out, 0, sizeof *out);
	if (!json_is_object(j))
		return apf_error(APF_EINPUT, "hparams", "not a JSON object");
	size_t n = json_object_size(j);
	out->names = apf_calloc(n, sizeof *out->names);
	out->values = apf_calloc(n, sizeof *out->values);
	out->words = apf_calloc(n, sizeof *out->words);
	if (!out->names || !out->values || !out->words) {
		apf_hparams_free(out);
		return apf_error(APF_ENOMEM, "hparams", "out of memory");
	}
	const char *key;
	json_t *v;
	json_object_foreach((json_t *)j, key, v)
	{
		size_t i = out->n++;
		out->names[i] = apf_strdup(key);
		if (!out->names[i]) {
			apf_hparams_free(out);
			return apf_error(APF_ENOMEM, "hparams", "out of memory");
		}
		if (json_is_number(v)) {
			out->values[i] = json_number_value(v);
		} else if (json_is_string(v) && word_ok(json_string_value(v))) {
			out->values[i] = NAN;
			out->words[i] = apf_strdup(json_string_value(v));
			if (!out->words[i]) {
				apf_hparams_free(out);
				return apf_error(APF_ENOMEM, "hparams",
						 "out of memory");
			}
		} else {
			apf_hparams_free(out);
			return apf_error(APF_EINPUT, "hparams",
					 "'%s': expected a number or a word", key);
		}
	}
	return 0;
}

void apf_plan_free(apf_plan *p)
{
	if (!p)
		return;
	for (size_t i = 0; i < p->n; i++)
		apf_hparams_free(&p->units[i].hp);
	free(p->units);
	free(p);
}

int apf_plan_build(apf_plan **out, char *const *workloads, size_t nworkloads,
		   long studies, long trials, uint32_t seed,
		   const apf_search_space *space)
{
	*out = NULL;
	if (studies < 1 || trials < 1)
		return apf_error(APF_EINPUT, "plan", "no studies or trials");
	apf_plan *p = apf_calloc(1, sizeof *p);
	size_t n = nworkloads * (size_t)studies * (size_t)trials;
	if (p)
		p->units = apf_calloc(n, sizeof *p->units);
	if (!p || !p->units) {
		free(p);
		return apf_error(APF_ENOMEM, "plan", "out of memory");
	}
	int rc = 0;
	for (size_t w = 0; !rc && w < nworkloads; w++)
		for (long s = 0; !rc && s < studies; s++)
			for (long t = 0; !rc && t < trials; t++) {
				struct apf_plan_unit *u = &p->units[p->n++];
				u->workload = workloads[w];
				u->variant = "base";
				u->study = s;
				u->trial = t;
				/* The same draws for every workload: a study
				 * tunes the algorithm, not each workload. */
				if (space)
					rc = apf_tuning_draw(space, seed, s, t,
							     &u->hp);
			}
	if (rc) {
		apf_plan_free(p);
		return rc;
	}
	*out = p;
	return 0;
}

int apf_hparams_copy(apf_hparams *out, const apf_hparams *h)
{
	memset(out, 0, sizeof *out);
	out->names = apf_calloc(h->n, sizeof *out->names);
	out->values = apf_calloc(h->n, sizeof *out->values);
	out->words = apf_calloc(h->n, sizeof *out->words);
	if (!out->names || !out->values || !out->words) {
		apf_hparams_free(out);
		return apf_error(APF_ENOMEM, "hparams", "out of memory");
	}
	for (size_t i = 0; i < h->n; i++) {
		out->n = i + 1;
		out->names[i] = apf_strdup(h->names[i]);
		out->values[i] = h->values[i];
		out->words[i] = h->words[i] ? apf_strdup(h->words[i]) : NULL;
		if (!out->names[i] || (h->words[i] && !out->words[i])) {
			apf_hparams_free(out);
			return apf_error(APF_ENOMEM, "hparams", "out of memory");
		}
	}
	return 0;
}

int apf_plan_add_variant(apf_plan *p, const char *workload,
			 const char *variant)
{
	size_t add = 0;
	for (size_t i = 0; i < p->n; i++)
		add += !strcmp(p->units[i].workload, workload) &&
		       !strcmp(p->units[i].variant, "base");
	struct apf_plan_unit *u = realloc(p->units, (p->n + add) * sizeof *u);
	if (!u)
		return apf_error(APF_ENOMEM, "plan", "out of memory");
	p->units = u;
	size_t n = p->n;
	for (size_t i = 0; i < n; i++) {
		if (strcmp(u[i].workload, workload) || strcmp(u[i].variant, "base"))
			continue;
		struct apf_plan_unit *v = &u[p->n];
		*v = u[i];
		v->variant = variant;
		int rc = apf_hparams_copy(&v->hp, &u[i].hp);
		if (rc)
			return rc;
		p->n++;
	}
	return 0;
}
