/*
 * archive: the deterministic entry archive of docs/design.md section 2.5, and its
 * safe reading and extraction.
 *
 * Layout of an .apf file:
 *
 *     zstd frame      restricted-pax tar (libarchive), compressed with libzstd
 *                     (content checksum on, one thread, fixed level)
 *     skippable frame magic 0x184D2A5A, size 36, payload "apf1" + SHA-256 of
 *                     every byte before this frame (the integrity trailer)
 *
 * The trailer is not a security measure (the signature over the manifest and
 * the member digests are): it lets a reader tell a changed file (exit 1) from
 * a truncated file or a non-archive (exit 2) before parsing anything, and
 * catches a change in any byte, including bytes zstd and tar would ignore.
 * `zstd -dc entry.apf | tar -tv` still works: zstd skips skippable frames.
 *
 * Members: regular files (mode 0644 or 0755) and symlinks (0777) only, no
 * directories; uid/gid 0, empty owner names, mtime = the writer's mtime (0,
 * or SOURCE_DATE_EPOCH), no atime/ctime. The first member may have any name;
 * every later member must sort bytewise after the previous one, which also
 * rules out duplicates. The same members in the same order always give the
 * same bytes.
 *
 * Reading refuses: absolute paths, "." / ".." / empty components, names that
 * are not UTF-8 or hold control characters, hard links, devices, fifos,
 * directories, duplicate names, members whose declared size exceeds the cap
 * (checked before any data is read), more members or bytes than the caps, and
 * symlinks that leave the tree - resolved against the other symlink members
 * too, so chains such as b -> "." and a -> "b/../x" are caught.
 */
#ifndef APF_ARCHIVE_H
#define APF_ARCHIVE_H

#include <stddef.h>
#include <stdint.h>

#include "base/base.h"

/* ---- writing ---------------------------------------------------------- */

typedef struct apf_archive_writer apf_archive_writer;

/* Starts a crash-safe write of path (temporary file, renamed on commit).
 * mtime is stored in every member. */
int apf_archive_writer_open(apf_archive_writer **out, const char *path,
			    int64_t mtime);
/* A regular file; mode must be 0644 or 0755. */
int apf_archive_add_file(apf_archive_writer *w, const char *name, int mode,
			 const void *data, size_t size);
/* A regular file streamed from fd; exactly size bytes are read (a file that
 * changed size is an error). */
int apf_archive_add_file_fd(apf_archive_writer *w, const char *name, int mode,
			    int fd, uint64_t size);
int apf_archive_add_symlink(apf_archive_writer *w, const char *name,
			    const char *target);
/* Finishes the tar, the zstd frame and the trailer, fsyncs and renames.
 * Frees w either way. */
int apf_archive_writer_commit(apf_archive_writer *w);
/* Drops the temporary file. Safe with NULL. */
void apf_archive_writer_abort(apf_archive_writer *w);

/* ---- reading ---------------------------------------------------------- */

struct apf_archive_limits {
	uint64_t max_member_bytes; /* 0: 1 GiB */
	uint64_t max_total_bytes;  /* 0: 4 GiB */
	size_t max_members;        /* 0: 100000 */
	uint64_t max_archive_bytes; /* the .apf file; 0: APF_MAX_ENTRY_BYTES */
};

enum apf_member_type { APF_MEMBER_FILE = 'f', APF_MEMBER_SYMLINK = 'l' };

struct apf_archive_member {
	const char *name;   /* valid until the next apf_archive_next */
	int type;           /* APF_MEMBER_FILE or APF_MEMBER_SYMLINK */
	int mode;           /* 0644, 0755 (files) or 0777 (symlinks) */
	uint64_t size;      /* file size, or target length */
	const char *link;   /* symlink target, else NULL */
};

typedef struct apf_archive_reader apf_archive_reader;

/* Opens path and checks the whole file's integrity trailer first:
 *   APF_EINPUT  "not an apf entry" (no zstd frame, no trailer),
 *               "truncated" (the frame or the trailer is cut short),
 *   APF_EVERIFY "changed after packing" (trailer digest differs) or
 *               "integrity trailer damaged".
 * Errors while reading members later are APF_EVERIFY (corrupted) or
 * APF_EINPUT (refused member), the message naming the member. */
int apf_archive_reader_open(apf_archive_reader **out, const char *path,
			    const struct apf_archive_limits *limits);
/* Next member: returns 1 with *m filled, 0 at the end, or an error. The
 * end is reported only after the tar end marker and the whole zstd frame
 * were read and checked, and the symlink check over all members passed. */
int apf_archive_next(apf_archive_reader *r, struct apf_archive_member *m);
/* Reads the current file member's data; returns bytes read, 0 at its end,
 * or a negative error. */
long apf_archive_read(apf_archive_reader *r, void *buf, size_t len);
void apf_archive_reader_close(apf_archive_reader *r);

/* Extracts every member into dest, which must not exist: members are written
 * under a temporary sibling directory that is renamed to dest only when the
 * whole archive checked out (check, when given, is called for each member
 * with its SHA-256 after its data was written, and can refuse it by returning
 * an error). Intermediate directories are created 0755; nothing is ever
 * written outside dest, and after a failure neither dest nor the temporary
 * exists. */
typedef int (*apf_archive_check_fn)(void *user,
				    const struct apf_archive_member *m,
				    const uint8_t sha256[32]);
int apf_archive_extract(const char *path, const char *dest,
			const struct apf_archive_limits *limits,
			apf_archive_check_fn check, void *user);

#endif
