/*
 * sandbox: the cell the sealed runner runs untrusted code in (docs/design.md 3.7).
 *
 * A sandbox is one program, started with apf_sandbox_spawn and watched by
 * the calling process, the supervisor, until apf_sandbox_reap says how it
 * ended. Two layers keep it in:
 *
 * Namespaces (sealed mode). The process runs in new mount, pid, ipc, uts,
 * network and cgroup namespaces, and, when the supervisor is not root, a new
 * user namespace; a root made of the caller's bind mounts (read-only or
 * writable) and copies, a size-limited tmpfs scratch, a fresh /proc (its
 * machine-wide parts - sys, sysrq-trigger, irq, bus, fs - read-only; other
 * users' processes hidden) and a /dev with only null, zero, full, random and
 * urandom, bound read-only (writing to them works, changing them does not);
 * the host's root is detached, so the keys, the run directory and $HOME are
 * simply not there. The root itself is read-only. The network namespace has
 * only a loopback, left down. There is no /dev/shm: share memory with the
 * program by passing a memfd.
 * The program never runs as root: it is APF_SANDBOX_UID/GID with no
 * capability, on the host when the supervisor is root with CAP_SYS_ADMIN
 * (whose mounts it then cannot change at all), or inside the user
 * namespace, mapped to the invoking user, when it is not (nested user
 * namespaces are disabled there: max_user_namespaces = 0). Root in a
 * container has no CAP_SYS_ADMIN: its program is 65534 inside and the
 * container's root outside, which owns the container's files; there the
 * read-only binds and the filter are what stand. So a call the filter misses meets the kernel's
 * own checks as a user that owns nothing but the scratch. (An unprivileged
 * supervisor's supplementary groups stay with the program: a user namespace
 * cannot drop them.) A writable bind mount must be writable by that user;
 * prefer passing a descriptor.
 * The first process in the pid namespace is a small init of ours (pid 1): it
 * forks the program (pid 2), reaps orphans, and reports the program's wait
 * status and resource usage to the supervisor before it exits, which takes
 * every process left in the namespace with it.
 *
 * The filter. Before execve the program drops every capability, sets
 * no_new_privs and its rlimits, keeps only the descriptors the caller passed
 * (at fixed numbers; 0-2 default to /dev/null), and installs a seccomp filter
 * whose interesting syscalls return SECCOMP_RET_USER_NOTIF. The listener
 * descriptor comes to the supervisor over a socketpair, so the supervisor -
 * never the untrusted process - decides each such call and names every
 * violation. A fault kills the whole sandbox at once and is remembered; the
 * call itself fails with EPERM and never runs.
 *   - always a fault: sockets other than AF_UNIX, ptrace, process_vm_*,
 *     mount and the new mount API, pivot_root, chroot, setns, unshare, bpf,
 *     perf_event_open, kexec, module loading, key management, reboot, swap,
 *     acct, clock setting, userfaultfd, io_uring, personality, handle-based
 *     opens, pidfd_getfd, kcmp, fanotify, iopl/ioperm, syslog, quotactl,
 *     seccomp (a nested filter), TIOCSTI/TIOCLINUX, memfd_secret, and the
 *     rest of the list in filter.c;
 *   - phase-dependent: creating a process or a thread, and execve, are
 *     allowed in the setup phase (a compiler needs them) and faults once the
 *     caller locks the sandbox - except the program's own first execve;
 *     namespace flags on clone are a fault in any phase; clone3 is answered
 *     ENOSYS in setup (its flags live in memory the caller could change
 *     after the check; glibc falls back to clone, whose flags are registers);
 *     memfd_create, too, is a fault once locked, whatever counts the memory
 *     limit (pass every memfd the program needs before locking);
 *   - shmget: a fault unless the sandbox is sealed (its segments die with
 *     its IPC namespace) and its memory limit, if any, is a cgroup's;
 *   - paths: open*, creat, truncate, mkdir, rmdir, unlink, rename, link,
 *     symlink, chmod, chown, mknod, utimes, *xattr, execve and AF_UNIX
 *     connect/bind: the supervisor reads the path from the process's memory,
 *     resolves it as the kernel would (cwd or dirfd, "..", symlinks, the
 *     /proc/self magic links) in the sandbox's own view, and checks it
 *     against the path policy: reading needs a policy prefix (or a directory
 *     above one), writing needs a writable prefix.
 * The path check detects and names; the mount namespace enforces. A thread
 * that rewrites the path between the check and the kernel's own lookup wins
 * only access to what is mounted anyway. In unsealed mode there is no mount
 * namespace behind the check, so that race is real: unsealed runs are
 * marked so in the log for that reason.
 *
 * Passed descriptors are pipes, sockets and memfds only (apf_sandbox_spawn
 * refuses a file or device of the host's): a host file's descriptor could be
 * reopened through /proc/self/fd past the mount namespace, changed through
 * its descriptor forms, and its link names the host path. The program's
 * output reaches a host file through a pipe the supervisor drains.
 *
 * Unsealed mode (--unsealed): no namespaces and no mounts - the program sees
 * the host - but rlimits, no_new_privs, the dropped capabilities and the
 * filter with its supervisor are the same; the policy then speaks of host
 * paths (a mount entry stands for its source, the scratch must exist).
 * Signals and the like to processes outside the program's process group are
 * faults. It is not isolation: beyond the race above, datagrams sent to an
 * address (sendto, sendmsg) and processes that leave the process group in the
 * setup phase are not policed, and a supervisor running as root leaves the
 * program root (without capabilities) on the host.
 *
 * Freezing: apf_sandbox_stop sends SIGSTOP to the program and returns once
 * every one of its threads is stopped; apf_sandbox_cont resumes them. In the
 * locked phase the program cannot create processes or threads, and locking
 * fails (as a fault) while any other process is alive in the sandbox, so the
 * program's thread group is the whole trial. Lock when the program is
 * waiting for the runner's go, after anything that starts threads lazily (a
 * BLAS or OpenMP pool: make one call first) has started them.
 *
 * The memory limit (limits.memory) counts everything the program can hold,
 * by the first of these the kernel offers (apf_sandbox_memory_mechanism):
 *   - "cgroup2", where /sys/fs/cgroup is cgroup2 and our own cgroup hands
 *     the memory controller down; "cgroup1", where the memory controller has
 *     a v1 hierarchy and we may make a child of our own memory cgroup (root,
 *     in practice). A cgroup of the sandbox's own, made before the clone,
 *     that the program enters before its own execve runs (init, ours, stays
 *     out): memory.max / memory.limit_in_bytes, swap held to nothing
 *     (memory.swap.max 0, memory.memsw.limit_in_bytes). It counts every
 *     page the program and its children fault - anonymous memory, page
 *     tables, memfds (its own and the passed ones it fills), SysV shm, the
 *     scratch tmpfs, the page cache of the files it reads and writes - and
 *     kernel memory charged to it (pipe buffers and the like). The kernel's
 *     OOM killer ends the program when a charge cannot be met. The cgroup
 *     is removed when the sandbox ends (what is left in it killed first).
 *   - "rlimit", where no cgroup is to be had (not root and nothing
 *     delegated, no memory controller): RLIMIT_AS, lowered so that it and
 *     the scratch fit the limit together - the sealed scratch counts at its
 *     full size, cut to half the limit when it is larger, and RLIMIT_AS is
 *     at most the limit less the scratch. That counts what is mapped; what
 *     is not mapped is refused instead: memfd_create once locked (always),
 *     shmget (always). Not counted: a memfd passed by the caller that the
 *     program grows (seal it, F_SEAL_GROW), memfds the program made in
 *     the setup phase, the unsealed scratch (the caller's directory), and,
 *     with address_space 0 (unlimited), all of its anonymous memory;
 *     RLIMIT_FSIZE still bounds each file.
 * A step that fails once a cgroup looked usable is an APF_EABORT naming the
 * step, never a silent fallback.
 *
 * How it ended (apf_sandbox_end): exit code; crash with its signal; the
 * sandbox fault that killed it; killed by the runner; memory limit (the
 * cgroup's OOM killer ended it: memory.oom_control's or memory.events'
 * oom_kill counter rose - before Linux 4.13, which has none, the limit was
 * hit and the program died of SIGKILL; or an allocation failed under RLIMIT_AS: a failure or crash whose
 * peak memory - the larger of peak RSS and peak virtual size seen at exit,
 * abort, or a stop - is within 1/8 of RLIMIT_AS); CPU or file-size limit
 * (SIGXCPU, SIGXFSZ); setup failure.
 *
 * Serving notifications: a notified call blocks the calling thread until the
 * supervisor answers, so the supervisor must poll apf_sandbox_notify_fd and
 * call apf_sandbox_notify_handle when it is readable (apf_sandbox_wait does
 * both). One apf_sandbox is used by one supervisor thread; that thread is the
 * spawned process's parent, and the sandbox is killed if it exits
 * (PR_SET_PDEATHSIG). The sandbox reaps its own children by pidfd; a
 * supervisor must not wait for "any child" (waitpid(-1, ...)).
 *
 * Needs Linux 5.12 or newer (clone3 or clone with pidfds, seccomp user
 * notification with CONTINUE, close_range, mount_setattr); apf_sandbox_probe
 * names the step a kernel refuses.
 */
#ifndef APF_SANDBOX_H
#define APF_SANDBOX_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "base/base.h"

typedef struct apf_sandbox apf_sandbox;

/* The sandboxed program's user and group (sealed): "nobody", a user that
 * owns nothing the sandbox shows. */
#define APF_SANDBOX_UID 65534u
#define APF_SANDBOX_GID 65534u

enum apf_sandbox_mode { APF_SANDBOX_SEALED = 0, APF_SANDBOX_UNSEALED = 1 };
enum apf_sandbox_phase { APF_SANDBOX_SETUP = 0, APF_SANDBOX_LOCKED = 1 };

/* Access to a path; WRITE implies READ. */
enum { APF_SANDBOX_READ = 1, APF_SANDBOX_WRITE = 3 };

/* A bind mount of a host file or directory into the new root. */
struct apf_sandbox_mount {
	const char *source; /* host path (symlinks are resolved first) */
	const char *target; /* absolute path inside; NULL: same as source */
	int access;         /* APF_SANDBOX_READ (read-only) or _WRITE */
	int optional;       /* a missing source is skipped, not an error */
	/* Sealed, READ only: copy the file (or the tree of directories and
	 * regular files, at most APF_SANDBOX_COPY_MAX bytes) into the root
	 * instead of binding it, so that the mount table, whose root column
	 * names every bind mount's source, says nothing of where it lives on
	 * the host. Unsealed it is used where it is. */
	int copy;
};
#define APF_SANDBOX_COPY_MAX (256ull << 20)

/* A policy entry beyond what the mounts and the scratch imply. */
struct apf_sandbox_path {
	const char *prefix; /* absolute; matches itself and what lies below */
	int access;
};

/* A descriptor of the caller's that the program gets as number target:
 * a pipe, a socket or a memfd, never a file or device of the host's (a
 * descriptor of a host file could be reopened through /proc/self/fd past
 * the mount namespace, have its mode changed, and names its host path);
 * the program's output goes through apf_sandbox_config.output. */
struct apf_sandbox_fd {
	int fd;
	int target;
};

struct apf_sandbox_limits {
	/* RLIMIT_AS bytes; 0: unlimited. CUDA reserves far more address space
	 * than it uses, so a GPU trial needs 0 here. */
	uint64_t address_space;
	/* Bytes of everything the program can hold, counted by a cgroup where
	 * the kernel offers one, else by RLIMIT_AS and refusals (see above);
	 * 0: none. Set address_space too: it still binds with a cgroup. */
	uint64_t memory;
	uint64_t open_files;    /* RLIMIT_NOFILE; 0: 256 */
	/* RLIMIT_NPROC, processes and threads (a BLAS thread pool counts);
	 * 0: 1024. Sealed only: unsealed, it would count the user's every
	 * process on the host. */
	uint64_t processes;
	uint64_t file_size;     /* RLIMIT_FSIZE bytes; 0: unlimited */
	uint64_t cpu_seconds;   /* RLIMIT_CPU; 0: unlimited */
	/* Processes and threads the supervisor lets the sandbox create in the
	 * setup phase, in total; 0: 1024. (RLIMIT_NPROC does not bind a
	 * sandbox whose outside user is root, so this is the one that does.) */
	uint64_t spawns;
};

struct apf_sandbox_config {
	enum apf_sandbox_mode mode;
	const char *const *argv;  /* argv[0]: the program, as the sandbox sees it */
	const char *const *envp;  /* NULL: an empty environment */
	const char *cwd;          /* inside; NULL: the scratch, else "/" */
	const struct apf_sandbox_mount *mounts;
	size_t nmounts;
	const char *scratch;      /* the writable tmpfs, inside; NULL: none */
	uint64_t scratch_bytes;   /* 0: 64 MiB */
	const struct apf_sandbox_path *paths;
	size_t npaths;
	const struct apf_sandbox_fd *fds;
	size_t nfds;
	struct apf_sandbox_limits limits;
	const char *hostname;     /* NULL: "apf-sandbox" */
	/* The program's stdout and stderr: a pipe that the supervisor drains
	 * into this file (created 0644, appended to), escaped for a terminal
	 * (apf_text_escape_lines) and cut after output_max bytes (0: 4 MiB)
	 * with a line saying so. NULL: /dev/null, unless fds gives 1 and 2. */
	const char *output;
	uint64_t output_max;
};

#define APF_SANDBOX_TEXT_MAX 512

enum apf_sandbox_verdict {
	APF_SANDBOX_NONE = 0, /* nothing was pending */
	APF_SANDBOX_ALLOWED,  /* the call continues */
	APF_SANDBOX_REFUSED,  /* the call fails with an errno; not a fault */
	APF_SANDBOX_FAULT,    /* a sandbox fault: the sandbox has been killed */
};

/* One answered notification. */
typedef struct apf_sandbox_event {
	enum apf_sandbox_verdict verdict;
	pid_t tid;         /* the calling thread, in the supervisor's numbering */
	int nr;            /* syscall number */
	const char *name;  /* syscall name */
	/* FAULT and REFUSED: one line naming the call, its key arguments and
	 * what was wrong, e.g. `openat("/root/k.pem", O_RDONLY) outside the
	 * sandbox`. Empty for ALLOWED. */
	char text[APF_SANDBOX_TEXT_MAX];
} apf_sandbox_event;

enum apf_sandbox_outcome {
	APF_SANDBOX_EXITED = 0,   /* exit_code */
	APF_SANDBOX_CRASHED,      /* killed by signal */
	APF_SANDBOX_FAULTED,      /* killed after a sandbox fault (fault) */
	APF_SANDBOX_KILLED,       /* killed by the runner (apf_sandbox_kill) */
	APF_SANDBOX_MEMORY_LIMIT, /* an allocation failed at the memory limit */
	APF_SANDBOX_CPU_LIMIT,    /* RLIMIT_CPU (SIGXCPU) */
	APF_SANDBOX_FILE_LIMIT,   /* RLIMIT_FSIZE (SIGXFSZ) */
	APF_SANDBOX_SETUP_FAILED, /* the sandbox or the execve failed */
};

typedef struct apf_sandbox_end {
	enum apf_sandbox_outcome outcome;
	int exit_code;        /* EXITED, and MEMORY_LIMIT by exit; else -1 */
	int signal;           /* the signal that ended it, else 0 */
	uint64_t wall_ns;     /* spawn to end, supervisor's monotonic clock */
	uint64_t user_ns, system_ns; /* CPU time of the program and its children */
	uint64_t peak_rss;    /* bytes, the largest of the program and its children */
	uint64_t peak_vm;     /* bytes, peak virtual size last seen; 0: unknown */
	uint64_t memory_limit; /* RLIMIT_AS in force; 0: none */
	uint64_t memory_peak;  /* bytes, the cgroup's peak charge; 0: unknown */
	/* FAULTED: the fault was a path the policy refuses (outside the
	 * sandbox, or a write to a read-only one), an exec in the locked
	 * phase, or a target outside the sandbox (a process, an abstract
	 * socket) - the log's fault kind "path"; else 0 ("syscall"). */
	int path_fault;
	/* One line for the log: "exited with code 0", "crashed: SIGSEGV",
	 * "sandbox fault: socket(AF_INET, SOCK_STREAM, 0) ...", "memory limit
	 * exceeded: peak 250 MiB of 256 MiB (SIGABRT)", "memory limit exceeded:
	 * peak 1024 MiB of 1024 MiB (cgroup1, OOM kill)", ... */
	char reason[APF_SANDBOX_TEXT_MAX + 64];
} apf_sandbox_end;

/* 0 when this kernel allows a sandbox of this mode, else APF_EABORT with a
 * one-line reason ("sandbox: user namespaces: ...") so that apf run can
 * fail closed. It starts and reaps a real, minimal sandbox. */
int apf_sandbox_probe(enum apf_sandbox_mode mode);

/* Starts the program. Returns once the program's filter is in place and the
 * supervisor holds its listener; the program's own execve is then waiting
 * for apf_sandbox_notify_handle. Bad configuration: APF_EINPUT; the kernel
 * refusing a step: APF_EABORT naming it. */
int apf_sandbox_spawn(apf_sandbox **out, const struct apf_sandbox_config *cfg);

/* The program's pid and its pidfd, as the supervisor sees them. */
pid_t apf_sandbox_pid(const apf_sandbox *sb);
int apf_sandbox_pidfd(const apf_sandbox *sb);
/* Readable when a notification is pending (POLLHUP once nothing can send
 * more); readable when the sandbox has ended. */
int apf_sandbox_notify_fd(const apf_sandbox *sb);
int apf_sandbox_exit_fd(const apf_sandbox *sb);

/* The output pipe's read end while it is open (-1 without one, or once
 * drained to its end): a caller with its own poll loop polls it and calls
 * apf_sandbox_output_drain when it is readable (apf_sandbox_wait does
 * both). Draining never blocks; it reads a bounded amount a call. */
int apf_sandbox_output_fd(const apf_sandbox *sb);
int apf_sandbox_output_drain(apf_sandbox *sb);

/* Answers one pending notification, if any (it never blocks). Returns 0 with
 * *ev filled (verdict NONE when nothing was pending), or an APF_E* status when
 * the supervisor itself failed. */
int apf_sandbox_notify_handle(apf_sandbox *sb, apf_sandbox_event *ev);

/* Adds a policy prefix while the sandbox runs. */
int apf_sandbox_allow(apf_sandbox *sb, const char *prefix, int access);

/* SETUP -> LOCKED (there is no way back). Locking while another process is
 * alive in the sandbox is a fault: APF_EABORT, and the sandbox is killed. */
int apf_sandbox_set_phase(apf_sandbox *sb, enum apf_sandbox_phase phase);
enum apf_sandbox_phase apf_sandbox_phase(const apf_sandbox *sb);

/* Freezes every thread of the program; returns once all are stopped. */
int apf_sandbox_stop(apf_sandbox *sb);
int apf_sandbox_cont(apf_sandbox *sb);
/* Kills everything in the sandbox for good (outcome KILLED unless a fault
 * came first). */
int apf_sandbox_kill(apf_sandbox *sb);

/* What the program has used of the cores so far (usage.c): its CPU time,
 * every thread's, exited ones included; and the time its live threads
 * waited on a run queue for a core (0 where the kernel keeps no count).
 * Read while the program is frozen, the two are still. APF_EIO once the
 * program is gone. */
struct apf_sandbox_usage {
	uint64_t cpu_ns;
	uint64_t wait_ns;
};
int apf_sandbox_usage(const apf_sandbox *sb, struct apf_sandbox_usage *u);
/* The CPU time alone (cheap: one clock read, no /proc). */
int apf_sandbox_cpu_ns(const apf_sandbox *sb, uint64_t *ns);

/* What counts limits.memory: "cgroup2", "cgroup1", "rlimit", or "none"
 * (no memory limit asked for), for the log. */
const char *apf_sandbox_memory_mechanism(const apf_sandbox *sb);
/* The sandbox's cgroup directory while it exists, or NULL. */
const char *apf_sandbox_memory_cgroup(const apf_sandbox *sb);

/* The first fault's text, or NULL. */
const char *apf_sandbox_fault(const apf_sandbox *sb);

/* Non-blocking: 1 and *end filled once the sandbox has ended (again on later
 * calls), 0 while it runs, or an APF_E* status. */
int apf_sandbox_reap(apf_sandbox *sb, apf_sandbox_end *end);
/* Serves notifications until the sandbox ends (1, *end filled) or timeout_ms
 * passes (0; -1 waits for ever). Faults are recorded, not returned. */
int apf_sandbox_wait(apf_sandbox *sb, int timeout_ms, apf_sandbox_end *end);

/* Kills the sandbox if it still runs, reaps it, and frees. NULL is fine. */
void apf_sandbox_free(apf_sandbox *sb);

/* "exited", "crashed", "sandbox_fault", "killed", "memory_limit",
 * "cpu_limit", "file_size_limit", "setup_failed". */
const char *apf_sandbox_outcome_name(enum apf_sandbox_outcome o);

#endif
