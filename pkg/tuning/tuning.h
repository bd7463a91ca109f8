/*
 * tuning: search spaces, the seeded draws of hyperparameters, and the plan of
 * trials a run executes (docs/design.md section 2.10).
 *
 * A submission's search space is tuning_search_space.ini or AlgoPerf's
 * tuning_search_space.json, each in one of two forms.
 *
 * Dimensions: one section (INI) or key (JSON) per hyperparameter,
 *
 *     [learning_rate]      {"learning_rate": {"min": 1e-4, "max": 1e-2,
 *     min = 1e-4                             "scaling": "log"},
 *     max = 1e-2            "beta1": {"feasible_points": [0.9, 0.95]}}
 *     scaling = log
 *     [beta1]
 *     feasible_points = 0.9, 0.95
 *
 * a range drawn on a log or linear scale, or feasible points (numbers, or
 * words such as `nesterov = true, false`; JSON true/false are the words).
 *
 * A list of points: sections [point 1], [point 2], ... [point P] (numbered
 * with no gaps; the space keeps hyperparameter names free of spaces), or a
 * JSON list of objects, each point setting the same hyperparameters. Trial t
 * (0-based) of every study takes point t + 1, so a plan may have at most P
 * trials per study. A file is all points or all dimensions.
 *
 * The draws for study s of a plan with seed S and T trials per study:
 *
 *   Randomness. rng(purpose, index) is splitmix64 started from the first 8
 *   bytes (big-endian) of SHA-256("apf-halton-v2 S s purpose index") with
 *   S, s, index in decimal; below(n) is its next output mod n (bias under
 *   n / 2^64); u01 is its next output's top 53 bits / 2^53; a permutation
 *   of n is Fisher-Yates from i = n - 1 down to 1, swapping i with
 *   below(i + 1), starting from the identity.
 *
 *   Ranges (continuous dimensions): the c-th range in file order
 *   (c = 0, 1, ...) uses the c-th prime b (2, 3, 5, ...; ranges only, so
 *   bases stay small). Its digit permutation sigma keeps sigma(0) = 0, as
 *   AlgoPerf's algoperf/halton.py does (so an index's leading zeros add
 *   nothing), and maps 1..b-1 by permutation of b - 1 from rng("digits", b)
 *   (sigma(k) = 1 + perm[k - 1]). Its shift is u01 of rng("shift", c).
 *   Point j (0 <= j < T) is frac(apf_halton(101 + j, b, sigma) + shift):
 *   the scrambled radical inverse of index 101 + j, which skips indices
 *   1..100 as halton.py does. The T points (all ranges together) are then
 *   shuffled: with perm the permutation of T from rng("trials", 0), trial t
 *   takes point perm[t]. u in [0, 1) becomes min + u (max - min), or
 *   exp(log min + u (log max - log min)) on a log scale, kept in
 *   [min, max].
 *
 *   Feasible points (discrete dimensions): dimension d (its position in the
 *   file, all dimensions counted) with k choices is balanced within the
 *   study: with T = q k + r, every choice is taken q times and the r choices
 *   first in the permutation of k from rng("extra", d) once more; the list
 *   of T picks (choice 0's, then choice 1's, ...) is dealt by the
 *   permutation of T from rng("choice", d): trial t takes pick
 *   order[t]. So with T >= k every choice appears in every study, and the
 *   order carries no trend. AlgoPerf instead maps a Halton coordinate to
 *   floor(u k), which can miss a choice in a study of 5 trials (apf's first
 *   draw did: all five trials of a study shared label_smoothing).
 *
 * A plan's seed therefore fixes every draw on every machine; different
 * studies draw different points, and a draw depends on T.
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

/* A list of points has npoints > 0 and one APF_HP_CHOICE dimension per
 * hyperparameter whose choices[p] / values[p] are point p's value (so code
 * that reads names and possible values works on either form). */
typedef struct apf_search_space {
	struct apf_hp_dim *dims; /* in file order */
	size_t ndims;
	size_t npoints;          /* 0: dimensions */
	char *source;            /* what errors call the file */
} apf_search_space;

#define APF_SEARCH_SPACE_INI "tuning_search_space.ini"
#define APF_SEARCH_SPACE_JSON "tuning_search_space.json"

int apf_search_space_load(apf_search_space **out, const char *path);
/* name is what errors call the text; a name ending in .json is read as
 * JSON, anything else as INI. */
int apf_search_space_parse(apf_search_space **out, const char *text,
			   const char *name);
/* A list of points serves at most npoints trials per study. */
int apf_search_space_check_trials(const apf_search_space *s, long trials);
void apf_search_space_free(apf_search_space *s);
/* A hyperparameter name or word value: letters, digits, _ - and . */
int apf_hp_word_ok(const char *w);

/* One trial's hyperparameters: name -> number or string, in the search
 * space's order. */
typedef struct apf_hparams {
	size_t n;
	char **names;
	double *values;   /* NAN for words */
	char **words;     /* the chosen word, or NULL for numbers */
} apf_hparams;

/* The draw of trial (0-based) of study (0-based) in a plan of `trials`
 * trials per study with this seed. */
int apf_tuning_draw(apf_hparams *out, const apf_search_space *s, uint32_t seed,
		    long study, long trial, long trials);
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

/* The radical inverse of index in base with each digit k written as
 * digits[k] (a permutation of 0..base-1; NULL: the plain one):
 * sum over index's base-b digits a_i (i = 0 least significant) of
 * digits[a_i] / b^(i+1). Exposed for tests. */
double apf_halton(uint64_t index, unsigned base, const unsigned *digits);

#endif
