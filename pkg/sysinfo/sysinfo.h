/*
 * sysinfo: the environment record of docs/design.md section 2.3, its comparison,
 * and the git provenance of a submission directory (through libgit2).
 *
 * The record is JSON (jansson) because it travels inside the signed manifest
 * and the run log; apf_env_validate checks a parsed record strictly, and
 * apf_env_compare names every field that differs. Fields:
 *
 *   apf {version, build}, compiler, libc, kernel, os,
 *   cpu {model, cores, flags[], isa}, memory_bytes,
 *   blas {name, version, config, core, threads},
 *   gpus [{name, memory_bytes, compute_capability}],
 *   cuda {driver, runtime, cublas, cudnn} | null,
 *   image_digest | null
 *
 * Git provenance: {repository: true, commit, branch, remote, path, dirty}
 * or {repository: false}. "dirty" counts modified, staged, untracked and
 * ignored files under the submission directory: an ignored file is packed
 * but is not in the commit, so the commit alone would not reproduce the
 * entry. A remote URL loses any user:password@ part. A repository owned by
 * another user is read anyway (libgit2's owner check is for running hooks
 * and config, which apf never does).
 */
#ifndef APF_SYSINFO_H
#define APF_SYSINFO_H

#include <jansson.h>

#include "base/base.h"

/* The live environment record. */
int apf_env_capture(json_t **out);
/* Strict check of a record read from a manifest or log. */
int apf_env_validate(const json_t *env);

/* Calls diff for every field (dotted path, e.g. "cpu.model") whose value
 * differs, with both values as compact JSON; returns the count. */
typedef void (*apf_env_diff_fn)(void *user, const char *field,
				const char *expected, const char *actual);
int apf_env_compare(const json_t *expected, const json_t *actual,
		    apf_env_diff_fn diff, void *user);

/* Git provenance of dir. */
int apf_git_provenance(json_t **out, const char *dir);
int apf_git_validate(const json_t *git);

/* The number of threads apf's BLAS is configured to use. */
int apf_blas_threads(void);
/* The core type OpenBLAS runs its kernels for in this process ("Haswell",
 * "Cooperlake", ...): what the record's blas.core says, and what the
 * runner pins a trial's OpenBLAS to (OPENBLAS_CORETYPE). */
const char *apf_blas_core(void);

#endif
