/*
 * base: the conventions every part of libapf shares.
 *
 * Errors. Every libapf function returns 0 or a negative APF_E* code. The
 * function that detects a failure records one message with apf_error(); callers
 * that add context wrap it with apf_error_prefix(). The message reads
 * "<what>: <why>" and the CLI prints it as "apf: <what>: <why>". The message
 * is thread-local, so worker threads report through their own return codes and
 * the caller copies the message across (apf_error_take / apf_error_restore).
 *
 * Crash-safe files. Anything that must survive a crash is written through
 * apf_atomic_*: a temporary file in the target's directory, fsync, rename,
 * fsync of the directory. A reader therefore sees the old file or the new one,
 * never a torn one. Every write, fsync and rename in here passes through one
 * fault-injection point (APF_FAULT=op:N in the environment, or
 * apf_fault_set()) so tests can fail the Nth operation and check that nothing
 * half-written is left behind.
 */
#ifndef APF_BASE_H
#define APF_BASE_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define APF_VERSION "0.1.0"

/* A function the files of one package share and nothing else may call: a
 * package's internal header declares it APF_INTERNAL. Hidden, and made
 * local when the package is linked into libapf.a (the Makefile's `ld -r`
 * and `objcopy --localize-hidden`), so another package, cmd/apf or whoever
 * links the installed library gets an undefined symbol, not a way in;
 * pkg/libapf.exports lists what the library does export. */
#define APF_INTERNAL __attribute__((visibility("hidden")))

enum apf_status {
	APF_OK = 0,
	APF_EVERIFY = -1,   /* a verification failed: exit 1 */
	APF_EUSAGE = -2,    /* bad command line: exit 2 */
	APF_EINPUT = -3,    /* missing, malformed or refused input: exit 2 */
	APF_EIO = -4,       /* the system refused an I/O operation: exit 2 */
	APF_ENOMEM = -5,    /* out of memory: exit 2 */
	APF_EABORT = -6,    /* a run stopped abnormally: exit 3 */
	APF_EINTERNAL = -7, /* a broken invariant inside apf: exit 3 */
};

/* Records "<what>: <why>" and returns code, so callers write
 * `return apf_error(APF_EINPUT, path, "not a directory");`. */
int apf_error(int code, const char *what, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* Same, with errno's text as the reason: "<what>: <why>: <strerror>". */
int apf_error_errno(int code, int errnum, const char *what, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
/* Prepends "<what>: " to the current message, unless the message already
 * starts with that component ("<what>" or "<what>: ..."); returns code. */
int apf_error_prefix(int code, const char *what);
const char *apf_error_message(void);
void apf_error_clear(void);
/* Moves the calling thread's message into buf (for handing across threads). */
void apf_error_take(char *buf, size_t size);
void apf_error_restore(int code, const char *message);
/* The process exit code of docs/design.md section 4.2 for a status. */
int apf_exit_code(int status);
const char *apf_status_name(int status);

/* Fault injection: op is "write", "fsync" or "rename". */
void apf_fault_set(const char *op, long nth);
int apf_fault_check(const char *op);

/* Atomic file replacement. */
typedef struct apf_atomic apf_atomic;
enum { APF_ATOMIC_NOREPLACE = 1 }; /* commit fails if the target exists */
int apf_atomic_open(apf_atomic **out, const char *path, mode_t mode, int flags);
int apf_atomic_fd(const apf_atomic *af);
const char *apf_atomic_tmp_path(const apf_atomic *af);
int apf_atomic_write(apf_atomic *af, const void *buf, size_t len);
/* fsync, rename over the target, fsync the directory; frees af either way. */
int apf_atomic_commit(apf_atomic *af);
/* Removes the temporary; frees af. Safe with NULL. */
void apf_atomic_abort(apf_atomic *af);

int apf_file_write(const char *path, const void *buf, size_t len, mode_t mode,
		   int flags);
/* Reads a whole regular file, NUL-terminated; refuses anything else (a
 * FIFO, a device: opened without blocking, never read) and files over max
 * bytes. Follows a symlink: for paths the user names. */
int apf_file_read(char **out, size_t *len, const char *path, size_t max);

/* ---- files others wrote ------------------------------------------------------
 * A run directory or an entry comes from someone apf does not trust, so what
 * apf reads of it never blocks and is never unbounded (docs/design.md 3.8): a file
 * is opened O_NONBLOCK | O_NOFOLLOW, must be a regular file ("not a regular
 * file (a FIFO)"), and each kind has its cap below. Inside a run directory
 * no symlink is followed in any component, so nothing outside it is ever
 * read or measured. Every refusal is APF_EINPUT naming the file; callers
 * for whom the file is evidence (a checkpoint the log describes) turn it
 * into APF_EVERIFY. */
#define APF_MAX_ENTRY_BYTES ((uint64_t)1 << 30)      /* entry.apf */
#define APF_MAX_LOG_BYTES ((uint64_t)16 << 30)       /* log.jsonl (mapped) */
#define APF_MAX_RUN_JSON_BYTES ((size_t)64 << 20)    /* run.json */
#define APF_MAX_SMALL_JSON_BYTES ((size_t)1 << 20)   /* log.dsse.json,
						      * hparams.json,
						      * heldout.json */
#define APF_MAX_CSV_BYTES ((size_t)256 << 20)        /* eval_measurements.csv */
#define APF_MAX_CKPT_BYTES ((uint64_t)64 << 30)      /* one checkpoint */

enum {
	APF_FILE_MISSING_OK = 1, /* absent: return 0 with *fd = -1 / NULL */
	APF_FILE_FOLLOW = 2,     /* path's last component may be a symlink
				  * (a path the user named) */
};
struct stat;
/* Opens a regular file for reading (O_RDONLY | O_NOFOLLOW | O_NONBLOCK |
 * O_CLOEXEC); *st (may be NULL) receives its fstat. */
int apf_file_open_regular(int *fd, struct stat *st, const char *path, int flags);
/* Opens dir/rel the same way, following no symlink in any component of rel
 * (dir itself is the caller's): rel is relative, without empty, "." or ".."
 * components. Errors name dir/rel. */
int apf_file_open_beneath(int *fd, struct stat *st, const char *dir,
			  const char *rel, int flags);
/* Reads an open regular file whole, NUL-terminated, refusing more than max
 * bytes (checked before reading, and again as it is read); what names it
 * in errors. Leaves fd open. */
int apf_file_read_fd(char **out, size_t *len, int fd, const char *what,
		     size_t max);
int apf_file_read_regular(char **out, size_t *len, const char *path,
			  size_t max);
/* With APF_FILE_MISSING_OK an absent file gives 0 and *out = NULL. */
int apf_file_read_beneath(char **out, size_t *len, const char *dir,
			  const char *rel, size_t max, int flags);
/* write(2) until done, retrying on EINTR, through the fault point. */
int apf_write_all(int fd, const void *buf, size_t len, const char *what);
int apf_fsync_dir(const char *dir);
/* mkdir -p with the given mode for created directories. */
int apf_mkdirs(const char *path, mode_t mode);
/* rm -r that never follows symlinks; ENOENT is not an error. */
int apf_remove_tree(const char *path);
/* 1 when path is a directory (not a link to one) with no entries. */
int apf_dir_is_empty(const char *path);

/* Growable byte buffer, always NUL-terminated. */
typedef struct apf_buf {
	char *data;
	size_t len, cap;
} apf_buf;
int apf_buf_append(apf_buf *b, const void *data, size_t len);
int apf_buf_puts(apf_buf *b, const char *s);
int apf_buf_printf(apf_buf *b, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
void apf_buf_free(apf_buf *b);

void apf_hex(char *out, const uint8_t *in, size_t n); /* out gets 2n+1 */
int apf_unhex(uint8_t *out, const char *in, size_t n); /* exactly 2n hex chars */
int apf_is_hex_digest(const char *s);                   /* 64 lowercase hex */
/* Valid UTF-8 without NUL, newline or other C0 controls. */
int apf_utf8_path_ok(const char *s);
/* Copies untrusted text (a compiler's output, a trial's message) so that it
 * is safe on a terminal and one line: valid printable UTF-8 is kept; each
 * byte of a control (C0 including tab and newline, DEL, C1, the line
 * separators and bidirectional overrides) or of invalid UTF-8 becomes
 * \xNN. A backslash is kept, so escaping twice changes nothing. Always
 * NUL-terminated when size > 0; cut only between characters or escapes. */
void apf_text_escape(char *out, size_t size, const char *in);
/* The same for a stream of untrusted output kept as a log (a trial's or a
 * compiler's): lines stay lines (newline and tab kept), every other control,
 * NUL and invalid byte becomes \xNN, appended to out. Returns the bytes of
 * in it took: all of them, except at most 3 that begin a UTF-8 character
 * the next block may complete (none when final). */
size_t apf_text_escape_lines(apf_buf *out, const char *in, size_t len,
			     int final);
/* Whether apf_text_escape would leave s as it is: valid UTF-8 with no
 * control, separator or bidirectional override (NULL: yes). */
int apf_text_printable(const char *s);
/* Appends in to b escaped as apf_text_escape escapes it, whole however
 * long: for text printed where a cut would hide something (a name in a
 * table, a check's detail). NULL appends nothing. */
int apf_buf_escape(apf_buf *b, const char *in);
/* Appends in to b as valid UTF-8, for writers that escape controls
 * themselves but refuse invalid UTF-8 (jansson, the HTML and XML
 * writers): each byte of an invalid sequence becomes \xNN, as above;
 * everything else, controls included, is kept. */
int apf_buf_utf8(apf_buf *b, const char *in);

/* The name of names[0..n) that name most likely misspells, for a "did
 * you mean" - the nearest by edit distance (insertions, deletions,
 * substitutions and swaps of neighbours, each 1), when that distance is
 * at most a third of the name's length (1 at least) and no other name is
 * as near - else NULL. Names of 64 bytes or more are never near. */
const char *apf_nearest_name(const char *name, const char *const *names,
			     size_t n);

/* $APF_HOME, else ~/.config/apf. Caller frees. */
char *apf_home(void);
char *apf_path_join(const char *a, const char *b);
char *apf_strdup(const char *s);
void *apf_calloc(size_t n, size_t size);
/* n bytes (not zeroed), 64-byte aligned, for free(); NULL when out of
 * memory. From 2 MiB up, aligned to 2 MiB, and its whole 2 MiB spans
 * offered to the kernel as transparent huge pages (MADV_HUGEPAGE: Debian's
 * default is to give them only where asked), so a layer that streams over
 * the buffer, or gathers from it, takes a TLB miss a 2 MiB page instead of
 * one a 4 KiB page; in a VM each miss walks two page tables. Where the
 * kernel has none to give, the pages are ordinary ones. */
void *apf_alloc_big(size_t n);
/* Monotonic clock in nanoseconds. */
uint64_t apf_now_ns(void);
/* Online CPUs usable by this process (sched affinity). */
int apf_cpu_count(void);

#endif
