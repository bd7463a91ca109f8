/*
 * heldout: the verifiable held-out variant draw (docs/design.md section 2.11).
 *
 * For every base workload the entries cover, one of the variants that its
 * workload.ini declares ([variant.<v>] sections) is drawn. The draw is a
 * pure function of a seed, the workload names and their variant lists, so
 * anyone holding the entries can recompute it; nobody can know it before
 * the entries are sealed, because the seed is derived from their signed
 * manifests.
 *
 * Seed, from entries: the lowercase hex of
 *     SHA-256("apf-heldout-v1" || d_1 || ... || d_n)
 * where d_i are the entries' manifest digests (64 lowercase hex digits
 * each, the SHA-256 of the signed statement), sorted bytewise; the same
 * entry given twice is refused. Seed, given (`--seed N`): N written in
 * decimal without sign or leading zeros, 0 <= N < 2^64.
 *
 * Choice, for base workload W whose variant names sorted bytewise are
 * V[0..n-1] (n >= 1):
 *     h     = SHA-256("apf-heldout-v1" || 0x00 || seed || 0x00 || W)
 *     index = (first 8 bytes of h, big-endian) mod n
 * and the variant drawn is V[index]. A workload that declares no variant
 * has nothing drawn (it is listed as "undrawn"). In Python:
 *     seed = sha256(b"apf-heldout-v1" + "".join(sorted(ds)).encode()).hexdigest()
 *     h = sha256(b"apf-heldout-v1\0" + seed.encode() + b"\0" + w.encode())
 *     v = sorted(variants)[int.from_bytes(h.digest()[:8], "big") % n]
 *
 * Coverage: entries need not cover the same workloads; the draw is made for
 * the union of the workloads they name, and each entry's own list is kept in
 * the draw file, so who lacks what is on record. All entries naming a
 * workload must have been packed against the same workload spec (tree
 * digest), and the local workloads directory must hold exactly that spec,
 * else the variant list could differ from the sealed one.
 *
 * The draw file (JSON, written deterministically: the same entries in any
 * order give the same bytes):
 *     {"format": "apf-heldout-v1",
 *      "method": "entries" | "seed",
 *      "seed": "<seed>",
 *      "entries": [{"manifest_sha256", "submission", "workloads": [...]}],
 *      "draws": [{"base", "variant", "variants": [...], "spec_sha256"}],
 *      "undrawn": [{"base", "spec_sha256"}]}
 * entries sorted by digest, draws and undrawn by base. apf_heldout_parse
 * is the one reader of this file: `apf heldout verify` calls it, and so
 * does apf_heldout_list_load, the reader of held-out files in every form,
 * for every file holding a "format": `apf score --heldout`, `apf run
 * --heldout` and the verifier's check of heldout.json read a draw exactly
 * as `apf heldout verify` does.
 */
#ifndef APF_HELDOUT_H
#define APF_HELDOUT_H

#include <stddef.h>

#include "base/base.h"
#include "entry/entry.h"

#define APF_HELDOUT_FORMAT "apf-heldout-v1"
/* The largest draw file read. */
#define APF_HELDOUT_MAX_BYTES ((size_t)16 << 20)
/* The longest seed: 64 hex digits, or up to 20 decimal digits. */
#define APF_HELDOUT_SEED_MAX 65

enum apf_heldout_method {
	APF_HELDOUT_FROM_ENTRIES = 1,
	APF_HELDOUT_FROM_SEED = 2,
};

struct apf_heldout_entry {
	char manifest_sha256[65];
	char *submission;
	char **workloads; /* sorted bytewise */
	size_t nworkloads;
};

struct apf_heldout_pick {
	char *base;
	char spec_sha256[65]; /* tree digest of the workload's directory */
	char **variants;      /* sorted bytewise */
	size_t nvariants;
	char *variant;        /* the one drawn; NULL when nvariants is 0 */
};

typedef struct apf_heldout {
	int method;           /* enum apf_heldout_method */
	char seed[APF_HELDOUT_SEED_MAX];
	struct apf_heldout_entry *entries; /* sorted by manifest digest */
	size_t nentries;
	struct apf_heldout_pick *picks;    /* sorted by base */
	size_t npicks;
} apf_heldout;

/* The seed of a set of manifest digests (64 lowercase hex each, in any
 * order). A digest given twice is APF_EINPUT. */
int apf_heldout_seed_from_digests(char out[APF_HELDOUT_SEED_MAX],
				  const char *const *digests, size_t n);
/* The canonical seed text of a number given on the command line; refuses
 * signs, leading zeros, spaces and values of 2^64 or more. */
int apf_heldout_seed_from_number(char out[APF_HELDOUT_SEED_MAX],
				 const char *text);
/* The index in [0, n) drawn for workload under seed; n must be >= 1. */
int apf_heldout_choose(const char *seed, const char *workload, size_t n,
		       size_t *index);

/* The draw for verified entries: their workloads' variant lists come from
 * the workloads directory (apf_workload_spec_load), checked against the
 * spec digests the entries were packed with. seed: a number's text for
 * --seed, or NULL to derive the seed from the entries. */
int apf_heldout_draw(apf_heldout **out, apf_entry *const *entries, size_t n,
		     const char *seed);
/* Adds the pick for one base workload to h (whose seed is set), keeping
 * picks sorted by base: the variants are copied and sorted, and one is
 * drawn. The part of the draw that needs no file, exposed so tests can pin
 * it down. A base added twice is APF_EINPUT. */
int apf_heldout_pick(apf_heldout *h, const char *base, const char *spec_sha256,
		     char *const *variants, size_t nvariants);

/* The draw file's text (caller frees). */
int apf_heldout_to_json(char **out, const apf_heldout *h);
/* Parses a draw file strictly (unknown or missing fields, wrong types and
 * malformed digests are APF_EINPUT); name is what errors call it. */
int apf_heldout_parse(apf_heldout **out, const char *json, size_t len,
		      const char *name);
int apf_heldout_load(apf_heldout **out, const char *path);
/* 0 when claimed equals expected; else APF_EVERIFY naming the first field
 * that differs ("<name>: draws[1] (toy): variant 'a'; the entries give
 * 'b'"). */
int apf_heldout_compare(const apf_heldout *claimed,
			const apf_heldout *expected, const char *name);
void apf_heldout_free(apf_heldout *h);

/* ---- held-out files, in every form apf takes (list.c) ---------------------- */

/* One held-out variant a file names. */
struct apf_heldout_named {
	char *base;     /* its base workload; NULL in AlgoPerf's list */
	char *workload; /* the variant's workload, <base>_<variant> */
};

typedef struct apf_heldout_list {
	char *seed;     /* the draw's seed; NULL for AlgoPerf's list */
	struct apf_heldout_named *v;
	size_t n;
} apf_heldout_list;

/* A held-out file as apf score --heldout and apf run --heldout take it
 * (and the verifier's check of heldout.json), one of:
 *   - a draw file (an object holding "format"), read by apf_heldout_parse
 *     and refused as it refuses it; a workload with nothing drawn names no
 *     variant;
 *   - AlgoPerf's held-out list: an array of variant workload names;
 *   - a draw by hand, {"seed": "...", "draws": [{"base": B, "variant": V},
 *     ...]} and no other key, V being the variant's name or the whole
 *     workload name B_<V>.
 * A variant named twice is APF_EINPUT. Messages read "<path>: <why>". */
int apf_heldout_list_load(apf_heldout_list **out, const char *path);
void apf_heldout_list_free(apf_heldout_list *l);

#endif
