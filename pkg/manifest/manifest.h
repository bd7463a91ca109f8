/*
 * manifest: the in-toto Statement v1 with the apf entry predicate
 * (docs/design.md section 2.2), built from a C struct and parsed back into one
 * with strict validation: every field's type, required fields, digest
 * formats, no unknown fields, no duplicate JSON keys, subjects that agree
 * with the predicate, a file list whose tree digest is the submission's.
 *
 *   _type          https://in-toto.io/Statement/v1
 *   subject        submission; dataset:<name> per dataset; workload:<name>
 *                  per workload; each {name, digest: {sha256}}
 *   predicateType  urn:apf:entry:v1
 *   predicate      apf_version, created (RFC 3339 UTC),
 *                  submission {name, authors[], ruleset, tree_digest,
 *                              files[{path, type, mode, size, sha256}], git},
 *                  workloads[{name, variant, spec_digest, dataset}],
 *                  datasets[{name, tree_digest, files, bytes}],
 *                  tuning {ruleset, rules, studies, trials, budget_multiplier,
 *                          search_space_digest | null, seed},
 *                  environment (sysinfo's record)
 *
 * The JSON is written deterministically (fixed key order, two-space indent),
 * so the same manifest always has the same bytes and the same signature.
 */
#ifndef APF_MANIFEST_H
#define APF_MANIFEST_H

#include <jansson.h>
#include <stdint.h>

#include "base/base.h"

#define APF_STATEMENT_TYPE "https://in-toto.io/Statement/v1"
#define APF_PAYLOAD_TYPE "application/vnd.in-toto+json"
#define APF_PREDICATE_TYPE "urn:apf:entry:v1"

struct apf_manifest_file {
	char *path;     /* relative to the submission directory */
	char type;      /* 'f' or 'l' */
	int mode;       /* 644, 755 or 777 */
	uint64_t size;
	char sha256[65];
};

struct apf_manifest_workload {
	char *name;
	char *variant;  /* "base" unless packed for a variant */
	char spec_digest[65];
	char *dataset;
};

struct apf_manifest_dataset {
	char *name;
	char tree_digest[65];
	uint64_t files;
	uint64_t bytes;
};

typedef struct apf_manifest {
	char *apf_version;
	char *created;             /* YYYY-MM-DDTHH:MM:SSZ */
	struct {
		char *name;
		char **authors;
		size_t nauthors;
		char *ruleset;     /* external | self */
		char tree_digest[65];
		struct apf_manifest_file *files;
		size_t nfiles;
		json_t *git;       /* sysinfo's git provenance */
	} submission;
	struct apf_manifest_workload *workloads;
	size_t nworkloads;
	struct apf_manifest_dataset *datasets;
	size_t ndatasets;
	struct {
		char *ruleset;     /* external | self */
		char *rules;       /* algoperf-0.6 | algoperf-0.5 */
		long studies, trials;
		double budget_multiplier;
		char search_space_digest[65]; /* "" when there is none */
		uint32_t seed;
	} tuning;
	json_t *environment;       /* sysinfo's record */
} apf_manifest;

/* The statement as JSON text (caller frees). */
int apf_manifest_to_json(char **out, const apf_manifest *m);
/* Parses and validates a statement. */
int apf_manifest_parse(apf_manifest **out, const char *json, size_t len);
void apf_manifest_free(apf_manifest *m);

const struct apf_manifest_file *apf_manifest_find_file(const apf_manifest *m,
						       const char *path);
const struct apf_manifest_dataset *
apf_manifest_find_dataset(const apf_manifest *m, const char *name);
/* Recomputes the submission tree digest from the file list (hex). */
int apf_manifest_files_digest(const apf_manifest *m, char out[65]);

#endif
