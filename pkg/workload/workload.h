/*
 * workload: the workload specification (workloads/<name>/workload.ini,
 * DESIGN.md section 5) and where workloads and their datasets are found.
 *
 * workload.ini:
 *
 *     [workload]      name, description, model (the model code's name), loss,
 *                     metric (e.g. accuracy), direction (max|min),
 *                     validation_target, test_target,
 *                     targets (provisional|derived), max_steps
 *     [dataset]       name, path (absolute, or relative to the workload
 *                     directory), digest (its tree digest, `apf hash PATH`),
 *                     plus reader-specific keys (format, split sizes, ...)
 *     [model]         model-specific keys (width, activation, norm, ...)
 *     [budget.cpu]    max_runtime_s, eval_period_s (per hardware class)
 *     [budget.gpu]
 *     [variant.<v>]   overrides of [model] keys, and optionally the variant's
 *                     own validation_target / test_target
 *
 * Workloads live in $APF_WORKLOADS_DIR, else <prefix>/share/apf/workloads
 * next to an installed binary, else the source tree's workloads/. A dataset's
 * path can be redirected with $APF_DATASETS_DIR/<dataset name>.
 */
#ifndef APF_WORKLOAD_H
#define APF_WORKLOAD_H

#include "config/config.h"

struct apf_budget {
	double max_runtime_s;
	double eval_period_s;
};

struct apf_workload_variant {
	char *name;
	double validation_target; /* the base's unless the variant sets its own */
	double test_target;
};

typedef struct apf_workload_spec {
	char *name;
	char *dir;          /* the workload's directory */
	char *description;
	char *model;
	char *loss;
	char *metric;
	int direction;      /* +1: higher is better (max), -1: lower (min) */
	double validation_target, test_target;
	int targets_provisional;
	long max_steps;
	char *dataset_name;
	char *dataset_path; /* resolved */
	char *dataset_digest; /* 64 hex digits, or NULL when not declared */
	struct apf_budget cpu, gpu;
	struct apf_workload_variant *variants;
	size_t nvariants;
	apf_config *ini;    /* the parsed file, for model- and reader-specific keys */
} apf_workload_spec;

/* The directory that holds the workloads. Caller frees. */
int apf_workloads_dir(char **out);
/* Names of the workloads there (subdirectories with a workload.ini), sorted. */
int apf_workloads_list(char ***names, size_t *n);
void apf_workloads_list_free(char **names, size_t n);

/* Loads and validates workloads/<name>/workload.ini. */
int apf_workload_spec_load(apf_workload_spec **out, const char *name);
int apf_workload_spec_load_dir(apf_workload_spec **out, const char *dir);
void apf_workload_spec_free(apf_workload_spec *w);

/* A variant by name ("base" or NULL for the base workload); NULL if absent. */
const struct apf_workload_variant *
apf_workload_variant(const apf_workload_spec *w, const char *name);
/* A [model] value under a variant's overrides; NULL when neither sets it. */
const char *apf_workload_model_value(const apf_workload_spec *w,
				     const char *variant, const char *key);
const struct apf_budget *apf_workload_budget(const apf_workload_spec *w,
					     const char *device);
/* True when value meets target in the workload's direction. */
int apf_workload_meets(int direction, double value, double target);

#endif
