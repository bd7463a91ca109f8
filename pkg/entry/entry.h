/*
 * entry: a submission packed into a signed entry (.apf) and read back.
 *
 * Packing hashes the submission tree, each workload's spec directory and
 * each dataset, records git provenance and the environment, writes the
 * in-toto statement, signs it (DSSE) and writes the deterministic archive:
 * manifest.dsse.json first, then submission/<path> for every file in
 * bytewise order. The same inputs give the same bytes: file times, owners,
 * umask and directory order never reach the archive, and the creation time is
 * SOURCE_DATE_EPOCH when set.
 *
 * Reading verifies before anything is trusted: the archive's integrity, the
 * signature by a trusted key, the statement's strict schema, and every member
 * against the manifest (type, mode, size, SHA-256; nothing extra, nothing
 * missing). Extraction verifies first, then extracts into a fresh directory
 * checking each member again, so a file swapped between the two passes is
 * caught too.
 */
#ifndef APF_ENTRY_H
#define APF_ENTRY_H

#include <stdint.h>

#include "hash/hash.h"
#include "manifest/manifest.h"
#include "sign/sign.h"

#define APF_MANIFEST_MEMBER "manifest.dsse.json"
#define APF_SUBMISSION_PREFIX "submission/"

struct apf_pack_opts {
	const char *submission_dir;
	char *const *workloads; /* names under the workloads directory */
	size_t nworkloads;
	const apf_key *key;
	const char *output;     /* NULL: <submission name>.apf */
	int seed_set;
	uint32_t seed;
	apf_hash_progress_fn progress; /* while hashing; may be NULL */
	void *user;
	/* Called once the submission.ini, the search space and the workloads
	 * are read, before anything is signed or written (apf pack builds the
	 * submission here); nonzero refuses the pack. May be NULL. */
	int (*check)(void *user, const char *submission_dir);
	void *check_user;
};

typedef struct apf_entry {
	apf_manifest *manifest;
	char *statement;          /* the signed payload (JSON text) */
	size_t statement_len;
	char manifest_digest[65]; /* SHA-256 of the payload */
	char envelope_digest[65]; /* SHA-256 of manifest.dsse.json */
	char file_digest[65];     /* SHA-256 of the .apf file */
	uint64_t file_bytes;
	int signature_trusted;    /* 0 only from apf_entry_inspect */
	char signer[APF_KEYID_HEX];   /* verified signer, or the claimed key id */
	char *signer_source;      /* the trusted key file, when verified */
	char *path;               /* where the entry was read from */
} apf_entry;

/* Packs; on success *out describes the written entry. */
int apf_entry_pack(apf_entry **out, const struct apf_pack_opts *o);
/* Full verification of an entry file. */
int apf_entry_verify(apf_entry **out, const char *path, const apf_keyring *kr);
/* Verifies, then extracts the submission into dest (must not exist). */
int apf_entry_extract(apf_entry **out, const char *path, const char *dest,
		      const apf_keyring *kr);
/* Reads the manifest without requiring a trusted signature (it must still
 * parse); signature_trusted says whether kr verified it. */
int apf_entry_inspect(apf_entry **out, const char *path, const apf_keyring *kr);
/* Reads one submission file (path relative to the submission) from a
 * verified entry, checking it against the manifest again. */
int apf_entry_read_file(char **out, size_t *len, const apf_entry *e,
			const char *rel, size_t max);
/* The entry's plan of trials (pkg/tuning): its search space
 * (tuning_search_space.ini or .json, whichever it packs), read from the
 * verified entry and checked against the manifest's digest, drawn for every
 * workload x study x trial. */
struct apf_plan;
int apf_entry_plan(struct apf_plan **out, const apf_entry *e);
void apf_entry_free(apf_entry *e);

#endif
