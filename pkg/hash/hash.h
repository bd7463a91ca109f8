/*
 * hash: SHA-256 through OpenSSL's EVP interface (which uses the CPU's SHA
 * instructions), and the tree digest of docs/design.md section 2.4.
 *
 * A tree digest is the SHA-256 of a text listing, one line per regular file
 * or symlink, sorted bytewise by relative path:
 *
 *     <f|l> <644|755|777> <size> <sha256 hex> <path>\n
 *
 * A symlink is hashed over its target string and never followed. Empty
 * directories do not appear, nor does anything named ".git" (version-control
 * metadata is recorded separately, as git provenance). Paths must be UTF-8
 * without control characters; fifos, sockets and devices are refused. Files
 * are hashed in parallel on all usable cores, each streamed through a small
 * buffer, so memory stays flat whatever the tree's size.
 */
#ifndef APF_HASH_H
#define APF_HASH_H

#include <stddef.h>
#include <stdint.h>

#include "base/base.h"

#define APF_SHA256_LEN 32
#define APF_SHA256_HEX 65 /* 64 hex digits + NUL */

typedef struct apf_sha256 apf_sha256;
int apf_sha256_new(apf_sha256 **out);
int apf_sha256_update(apf_sha256 *h, const void *data, size_t len);
/* Writes the digest and resets h for reuse. */
int apf_sha256_final(apf_sha256 *h, uint8_t out[APF_SHA256_LEN]);
void apf_sha256_free(apf_sha256 *h);

int apf_sha256_buf(uint8_t out[APF_SHA256_LEN], const void *data, size_t len);
/* Lowercase hex digest of a buffer. */
int apf_sha256_hex(char out[APF_SHA256_HEX], const void *data, size_t len);
/* Streams a file; *size receives the bytes hashed (may be NULL). */
int apf_sha256_file(uint8_t out[APF_SHA256_LEN], uint64_t *size,
		    const char *path);
/* Streams an open file from its offset to its end, leaving fd open: the
 * one streaming loop (an entry file, a checkpoint, any file). *size (may
 * be NULL) receives the bytes read, on failure too; more than max bytes
 * (a file that grows while it is read) is APF_EINPUT, and errors name
 * what. */
int apf_sha256_fd(uint8_t out[APF_SHA256_LEN], uint64_t *size, int fd,
		  uint64_t max, const char *what);

typedef struct apf_tree_entry {
	char *path;  /* relative, '/'-separated, no leading "./" */
	char type;   /* 'f' regular file, 'l' symlink */
	int mode;    /* 644, 755 or 777, written as in the listing */
	uint64_t size;
	uint8_t sha256[APF_SHA256_LEN];
	char *link;  /* symlink target, else NULL */
} apf_tree_entry;

typedef struct apf_tree {
	apf_tree_entry *entries; /* sorted bytewise by path */
	size_t n;
	uint64_t bytes;          /* sum of sizes */
	uint8_t digest[APF_SHA256_LEN];
} apf_tree;

/* Called from the hashing thread about ten times a second. */
typedef void (*apf_hash_progress_fn)(void *user, uint64_t done_bytes,
				     uint64_t total_bytes, size_t done_files,
				     size_t total_files);

struct apf_tree_opts {
	int threads;                  /* 0: all usable cores */
	apf_hash_progress_fn progress; /* may be NULL */
	void *user;
};

/* Hashes the directory root. */
int apf_tree_hash(apf_tree **out, const char *root,
		  const struct apf_tree_opts *opts);
/* Appends the section 3.3 listing to out. */
int apf_tree_listing(apf_buf *out, const apf_tree *t);
/* Recomputes digest from entries (after building a tree by hand). */
int apf_tree_finish(apf_tree *t);
const apf_tree_entry *apf_tree_find(const apf_tree *t, const char *path);
void apf_tree_free(apf_tree *t);

#endif
