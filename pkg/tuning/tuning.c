/*
 * tuning.c: the seeded draws (scrambled Halton for ranges, balanced picks
 * for feasible points, or the points of a list), hyperparameter sets, and
 * the plan. tuning.h gives the draw exactly; a plan is drawn one study at a
 * time, since every trial of a study depends on all T of them.
 */
#include "tuning/tuning.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hash/hash.h"

static const unsigned primes[] = {2,  3,  5,  7,  11, 13, 17, 19, 23, 29, 31,
				  37, 41, 43, 47, 53, 59, 61, 67, 71, 73, 79,
				  83, 89, 97, 101, 103, 107, 109, 113, 127, 131};
#define NPRIMES (sizeof primes / sizeof primes[0])
#define MAX_BASE 131
/* Indices 1..SKIP of the sequence are never used (as algoperf/halton.py). */
#define SKIP 100

double apf_halton(uint64_t index, unsigned base, const unsigned *digits)
{
	double f = 1.0, r = 0.0;
	while (index > 0) {
		unsigned a = (unsigned)(index % base);
		f /= base;
		r += f * (double)(digits ? digits[a] : a);
		index /= base;
	}
	return r;
}

/* splitmix64, started from SHA-256 of the draw's name (tuning.h). */
typedef struct {
	uint64_t state;
} rng;

static void rng_init(rng *r, uint32_t seed, long study, const char *purpose,
		     long index)
{
	char msg[128];
	int n = snprintf(msg, sizeof msg, "apf-halton-v2 %u %ld %s %ld", seed,
			 study, purpose, index);
	uint8_t d[APF_SHA256_LEN];
	apf_sha256_buf(d, msg, (size_t)n);
	r->state = 0;
	for (int i = 0; i < 8; i++)
		r->state = r->state << 8 | d[i];
}

static uint64_t rng_next(rng *r)
{
	uint64_t z = (r->state += 0x9e3779b97f4a7c15u);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
	return z ^ (z >> 31);
}

static double rng_u01(rng *r)
{
	return (double)(rng_next(r) >> 11) * 0x1.0p-53;
}

/* perm[0..n) = a seeded permutation of 0..n-1. */
static void rng_permutation(rng *r, size_t *perm, size_t n)
{
	for (size_t i = 0; i < n; i++)
		perm[i] = i;
	for (size_t i = n; i-- > 1;) {
		size_t j = (size_t)(rng_next(r) % (uint64_t)(i + 1));
		size_t t = perm[i];
		perm[i] = perm[j];
		perm[j] = t;
	}
}

static void permutation(size_t *perm, size_t n, uint32_t seed, long study,
			const char *purpose, long index)
{
	rng r;
	rng_init(&r, seed, study, purpose, index);
	rng_permutation(&r, perm, n);
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

/* One study's draws: for trial t and dimension d, u[t * ndims + d] is the
 * coordinate in [0, 1) of a range, pick[t * ndims + d] the choice (or point)
 * index of anything else. */
struct study {
	size_t trials, ndims;
	double *u;
	size_t *pick;
};

static void study_free(struct study *st)
{
	free(st->u);
	free(st->pick);
}

/* Scrambled Halton points, shuffled by one permutation of the trials. */
static int draw_ranges(struct study *st, const apf_search_space *s,
		       uint32_t seed, long study)
{
	size_t T = st->trials, nd = st->ndims;
	size_t *order = apf_calloc(T, sizeof *order);
	if (!order)
		return apf_error(APF_ENOMEM, "tuning", "out of memory");
	permutation(order, T, seed, study, "trials", 0);
	size_t c = 0;
	for (size_t d = 0; d < nd; d++) {
		if (s->dims[d].kind != APF_HP_RANGE)
			continue;
		if (c == NPRIMES) {
			free(order);
			return apf_error(APF_EINTERNAL, "tuning",
					 "more ranges than bases");
		}
		unsigned b = primes[c], sigma[MAX_BASE];
		size_t perm[MAX_BASE];
		permutation(perm, b - 1, seed, study, "digits", (long)b);
		sigma[0] = 0;
		for (unsigned k = 1; k < b; k++)
			sigma[k] = 1 + (unsigned)perm[k - 1];
		rng r;
		rng_init(&r, seed, study, "shift", (long)c);
		double shift = rng_u01(&r);
		for (size_t t = 0; t < T; t++) {
			double x = apf_halton(SKIP + 1 + order[t], b, sigma) +
				   shift;
			st->u[t * nd + d] = x - floor(x);
		}
		c++;
	}
	free(order);
	return 0;
}

/* Feasible points of dimension d: each of k taken T / k or T / k + 1 times,
 * dealt in a seeded order. */
static int draw_choices(struct study *st, const apf_search_space *s,
			uint32_t seed, long study, size_t d)
{
	size_t T = st->trials, nd = st->ndims, k = s->dims[d].nchoices;
	size_t *extra = apf_calloc(k, sizeof *extra);
	size_t *count = apf_calloc(k, sizeof *count);
	size_t *picks = apf_calloc(T, sizeof *picks);
	size_t *order = apf_calloc(T, sizeof *order);
	int rc = 0;
	if (!extra || !count || !picks || !order) {
		rc = apf_error(APF_ENOMEM, "tuning", "out of memory");
		goto out;
	}
	permutation(extra, k, seed, study, "extra", (long)d);
	for (size_t i = 0; i < k; i++)
		count[i] = T / k;
	for (size_t i = 0; i < T % k; i++)
		count[extra[i]]++;
	for (size_t i = 0, n = 0; i < k; i++)
		for (size_t j = 0; j < count[i]; j++)
			picks[n++] = i;
	permutation(order, T, seed, study, "choice", (long)d);
	for (size_t t = 0; t < T; t++)
		st->pick[t * nd + d] = picks[order[t]];
out:
	free(extra);
	free(count);
	free(picks);
	free(order);
	return rc;
}

static int draw_study(struct study *st, const apf_search_space *s,
		      uint32_t seed, long study, long trials)
{
	memset(st, 0, sizeof *st);
	if (study < 0 || trials < 1)
		return apf_error(APF_EINTERNAL, "tuning",
				 "study %ld of %ld-trial studies", study, trials);
	int rc = apf_search_space_check_trials(s, trials);
	if (rc)
		return rc;
	st->trials = (size_t)trials;
	st->ndims = s->ndims;
	size_t n = st->trials * st->ndims;
	st->u = apf_calloc(n ? n : 1, sizeof *st->u);
	st->pick = apf_calloc(n ? n : 1, sizeof *st->pick);
	if (!st->u || !st->pick) {
		study_free(st);
		return apf_error(APF_ENOMEM, "tuning", "out of memory");
	}
	if (s->npoints) {
		for (size_t t = 0; t < st->trials; t++)
			for (size_t d = 0; d < st->ndims; d++)
				st->pick[t * st->ndims + d] = t;
	} else {
		rc = draw_ranges(st, s, seed, study);
		for (size_t d = 0; !rc && d < st->ndims; d++)
			if (s->dims[d].kind == APF_HP_CHOICE)
				rc = draw_choices(st, s, seed, study, d);
	}
	if (rc)
		study_free(st);
	return rc;
}

/* Trial t's hyperparameters from its row of the study. */
static int study_hparams(apf_hparams *out, const struct study *st,
			 const apf_search_space *s, size_t t)
{
	memset(out, 0, sizeof *out);
	size_t n = s->ndims;
	out->names = apf_calloc(n ? n : 1, sizeof *out->names);
	out->values = apf_calloc(n ? n : 1, sizeof *out->values);
	out->words = apf_calloc(n ? n : 1, sizeof *out->words);
	if (!out->names || !out->values || !out->words) {
		apf_hparams_free(out);
		return apf_error(APF_ENOMEM, "tuning", "out of memory");
	}
	for (size_t d = 0; d < n; d++) {
		const struct apf_hp_dim *dim = &s->dims[d];
		out->n = d + 1;
		if (!(out->names[d] = apf_strdup(dim->name))) {
			apf_hparams_free(out);
			return apf_error(APF_ENOMEM, "tuning", "out of memory");
		}
		if (dim->kind == APF_HP_RANGE) {
			double u = st->u[t * n + d];
			double v = dim->log_scale
					   ? exp(log(dim->min) +
						 u * (log(dim->max) - log(dim->min)))
					   : dim->min + u * (dim->max - dim->min);
			/* Rounding at the ends must not leave the range. */
			out->values[d] = fmin(fmax(v, dim->min), dim->max);
			continue;
		}
		size_t k = st->pick[t * n + d];
		out->values[d] = dim->values[k];
		if (isnan(dim->values[k]) &&
		    !(out->words[d] = apf_strdup(dim->choices[k]))) {
			apf_hparams_free(out);
			return apf_error(APF_ENOMEM, "tuning", "out of memory");
		}
	}
	return 0;
}

int apf_tuning_draw(apf_hparams *out, const apf_search_space *s, uint32_t seed,
		    long study, long trial, long trials)
{
	memset(out, 0, sizeof *out);
	if (trial < 0 || trial >= trials)
		return apf_error(APF_EINTERNAL, "tuning",
				 "trial %ld of %ld", trial, trials);
	struct study st;
	int rc = draw_study(&st, s, seed, study, trials);
	if (rc)
		return rc;
	rc = study_hparams(out, &st, s, (size_t)trial);
	study_free(&st);
	return rc;
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
		} else if (json_is_string(v) && apf_hp_word_ok(json_string_value(v))) {
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
	size_t per = (size_t)studies * (size_t)trials;
	size_t n = nworkloads * per;
	if (p)
		p->units = apf_calloc(n ? n : 1, sizeof *p->units);
	if (!p || !p->units) {
		free(p);
		return apf_error(APF_ENOMEM, "plan", "out of memory");
	}
	p->n = n;
	for (size_t i = 0; i < n; i++) {
		struct apf_plan_unit *u = &p->units[i];
		u->workload = workloads[i / per];
		u->variant = "base";
		u->study = (long)(i % per) / trials;
		u->trial = (long)(i % per) % trials;
	}
	int rc = 0;
	for (long s = 0; space && !rc && s < studies; s++) {
		/* The same draws for every workload: a study tunes the
		 * algorithm, not each workload. */
		struct study st;
		if ((rc = draw_study(&st, space, seed, s, trials)))
			break;
		for (size_t w = 0; !rc && w < nworkloads; w++)
			for (long t = 0; !rc && t < trials; t++)
				rc = study_hparams(&p->units[w * per +
							     (size_t)(s * trials + t)]
							  .hp,
						   &st, space, (size_t)t);
		study_free(&st);
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
