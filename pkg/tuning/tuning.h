/*
 * tuning: search spaces (tuning_search_space.ini), the quasi-random draws
 * of hyperparameters, and the plan of trials a run executes (DESIGN.md
 * section 4).
 *
 * tuning_search_space.ini has one section per hyperparameter:
 *
 *     [learning_rate]            [beta1]                 [warmup_factor]
 *     min = 1e-4                 feasible_points = 0.9,   feasible_points = 0.05
 *     max = 1e-2                                   0.95
 *     scaling = log
 *
 * A range is drawn on a log or linear scale; feasible points are picked
 * uniformly (numbers, or words such as `nesterov = true, false`).
 *
 * Draws are Halton points: dimension d of trial t of study s is
 * frac(radical_inverse(t + 1 + skip, prime_d) + shift_{s,d}), with the skip
 * and the per-study rotation shifts taken from SHA-256 of (plan seed,
 * study, dimension). A plan's seed therefore fixes every draw everywhere;
 * different trials of a study are spread over the space, and different
 * studies draw different points.
 */
#ifndef APF_TUNING_H
#define APF_TUNING_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "base/base.h"

enum apf_hp_kind { APF_HP_RANGE = 1, APF_HP_CHOICE };

struct apf_hp_dim {
	char *name;
	int kind;
	int log_scale;    /* ranges */
	double min, max;  /* ranges */
	char **choices;   /* feasible points, as written */
	double *values;   /* their numeric values, or NAN for words */
	size_t nchoices;
};

typedef struct apf_search_space {
	struct apf_hp_dim *dims; /* in file order */
	size_t ndims;
} apf_search_space;

int apf_search_space_load(apf_search_space **out, const char *path);
int apf_search_space_parse(apf_search_space **out, const char *text,
			   const char *name);
void apf_search_space_free(apf_search_space *s);

/* One trial's hyperparameters: name -> number or string, in the search
 * space's order. */
typedef struct apf_hparams {
	size_t n;
	char **names;
	double *values;   /* NAN for words */
	char **words;     /* the chosen word, or NULL for numbers */
} apf_hparams;

/* The draw for (seed, study, trial), 0-based. */
int apf_tuning_draw(const apf_search_space *s, uint32_t seed, long study,
		    long trial, apf_hparams *out);
void apf_hparams_free(apf_hparams *h);
int apf_hparams_copy(apf_hparams *out, const apf_hparams *h);
/* {"name": value, ...} with numbers written to round-trip exactly. */
json_t *apf_hparams_to_json(const apf_hparams *h);
int apf_hparams_from_json(apf_hparams *out, const json_t *j);

/* The trials a run executes: every workload x study x trial, in that
 * order, each with its draw (no hyperparameters when space is NULL, as in
 * self-tuning, where the submission uses its own defaults). */
struct apf_plan_unit {
	const char *workload; /* borrowed from the caller's names */
	const char *variant;  /* "base", or a held-out variant's name */
	long study, trial;    /* 0-based */
	apf_hparams hp;
};

typedef struct apf_plan {
	struct apf_plan_unit *units;
	size_t n;
} apf_plan;

int apf_plan_build(apf_plan **out, char *const *workloads, size_t nworkloads,
		   long studies, long trials, uint32_t seed,
		   const apf_search_space *space);
void apf_plan_free(apf_plan *p);
/* Adds, for a workload already in the plan, a unit of `variant` beside each
 * of its base units (same study, trial and hyperparameters): what a
 * held-out draw asks a run to execute. variant is borrowed. */
int apf_plan_add_variant(apf_plan *p, const char *workload,
			 const char *variant);

/* The Halton radical inverse of index in a prime base (exposed for tests). */
double apf_halton(uint64_t index, unsigned base);

#endif
