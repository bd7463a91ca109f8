/*
 * internal.h: what the files of pkg/sandbox share and nothing else includes
 * (every function here is APF_INTERNAL): the sandbox's state, the syscall
 * table (filter.c), the path policy and the fault record (policy.c), the
 * memory limit (memory.c), the output pipe (output.c), and the plan
 * (plan.c) the children (child.c) carry out.
 *
 * The files call one another in one direction only: the supervisor's two
 * sides, spawn.c (start, watch, reap) and notify.c (the filter's
 * notifications), call down to plan.c, child.c, policy.c, filter.c,
 * memory.c and output.c; plan.c calls policy.c, filter.c and output.c;
 * child.c, policy.c, filter.c, memory.c, output.c and usage.c call no
 * other file of the package. tests/layout checks it from the objects.
 */
#ifndef APF_SANDBOX_INTERNAL_H
#define APF_SANDBOX_INTERNAL_H

#include <linux/filter.h>
#include <stdint.h>
#include <sys/resource.h>
#include <sys/types.h>

#include "sandbox/sandbox.h"

/* How the supervisor treats a notified syscall. */
enum sc_class {
	SC_ALLOW,     /* newer than libseccomp, known to be harmless */
	SC_FORBIDDEN, /* always a fault */
	SC_SOCKET,    /* socket, socketpair: a fault unless AF_UNIX */
	SC_IOCTL,     /* TIOCSTI, TIOCLINUX; FS_IOC_SETFLAGS, _FSSETXATTR */
	SC_CLONE,     /* clone: flags say thread or process */
	SC_CLONE3,    /* flags in memory: ENOSYS in setup, a fault when locked */
	SC_FORK,      /* fork, vfork */
	SC_EXEC,      /* execve, execveat */
	SC_PATH,      /* a path the policy must allow */
	SC_SOCKADDR,  /* connect, bind */
	SC_PID,       /* acts on another process: checked when unsealed */
	SC_EXIT,      /* exit_group: the memory snapshot */
	SC_MEMFD,     /* memfd_create: a fault when locked */
	SC_SHM,       /* shmget: a fault unless sealed and counted */
	SC_META,      /* changes metadata: EPERM in setup, a fault when locked */
};

/* How a path argument is used (SC_PATH, SC_EXEC). */
enum sc_path_kind {
	P_OPEN,         /* access and follow from the open flags (arg flags) */
	P_OPENAT2,      /* same, flags from struct open_how at arg flags */
	P_WRITE,        /* writes, follows a final symlink */
	P_WRITE_NOFOLLOW,
	P_WRITE_AT,     /* writes; AT_SYMLINK_NOFOLLOW / AT_EMPTY_PATH in flags */
	P_LINK,         /* path: read (follow per AT_SYMLINK_FOLLOW), path2: write */
	P_RENAME,       /* both paths write, no follow */
	P_EXEC,         /* read; AT_ flags in arg flags when >= 0 */
};

struct sc_info {
	const char *name;
	enum sc_class cls;
	/* Argument indexes, -1 when absent (SC_META: dirfd is the
	 * descriptor it acts on when path is -1). */
	signed char dirfd, path, dirfd2, path2, flags;
	unsigned char kind;   /* enum sc_path_kind */
	/* SC_FORBIDDEN: how to print the arguments, one letter each: d int,
	 * x hex, s string, P ptrace request, c clone flags. SC_PID: the index
	 * of the pid argument, then that of the signal, or '!' when only a
	 * pid other than 0 is notified ("01": kill, "0!": prlimit64). */
	const char *args;
	int unified_nr;       /* the number on every architecture (>= 424) */
	int nr;               /* resolved for this architecture, -1: none */
};

/* The table, resolved once for the native architecture. */
APF_INTERNAL const struct sc_info *apf_sandbox_syscalls(size_t *n);
APF_INTERNAL const struct sc_info *apf_sandbox_syscall_lookup(int nr);
/* The BPF program (malloc'd) the sandboxed process installs. */
APF_INTERNAL
int apf_sandbox_filter_build(struct sock_filter **prog, size_t *len);

struct policy_entry {
	char *prefix;
	size_t len;
	int access;
};

/* What counts limits.memory (memory.c). */
enum sb_memory {
	SB_MEM_NONE,    /* no memory limit asked for */
	SB_MEM_CGROUP2,
	SB_MEM_CGROUP1,
	SB_MEM_RLIMIT,  /* no cgroup to be had: RLIMIT_AS and refusals */
};

struct apf_sandbox {
	enum apf_sandbox_mode mode;
	enum apf_sandbox_phase phase;
	pid_t child;       /* our direct child: init (sealed) or the program */
	int child_pidfd;
	pid_t pid;         /* the program */
	int pidfd;
	int notify_fd;
	int notify_hup;
	int chan;          /* our end of the socketpair with init/program */
	int exec_done;     /* the program's own first execve was answered */
	uint64_t spawns, spawn_limit;
	uint64_t t_start;
	dev_t pidns_dev;   /* the sandbox's pid namespace (sealed) */
	ino_t pidns_ino;
	struct policy_entry *policy;
	size_t npolicy, cappolicy;
	int faulted;
	char fault[APF_SANDBOX_TEXT_MAX];
	int fault_path; /* the fault was a path (apf_sandbox_end.path_fault) */
	char refusal[APF_SANDBOX_TEXT_MAX]; /* the last REFUSED call */
	int killed;
	int stopped;       /* by apf_sandbox_stop, not yet continued */
	uint64_t memory_limit; /* RLIMIT_AS in force */
	uint64_t peak_vm;
	enum sb_memory mem;
	uint64_t mem_bytes;    /* limits.memory */
	char *cgroup;          /* the sandbox's own cgroup directory, or NULL */
	int cg_read;           /* its counters below have been read */
	uint64_t cg_oom_kills, cg_failcnt, cg_peak;
	int cg_oom_counted;    /* the kernel has an oom_kill counter */
	/* what init (or waitid) told us */
	int have_status;
	int status;        /* wait status of the program */
	struct rusage ru;
	char setup_error[APF_SANDBOX_TEXT_MAX];
	int setup_step;       /* which set-up step setup_error is (spawn.c) */
	int setup_errno;      /* and its errno */
	int ended;
	apf_sandbox_end end;
	void *req, *resp;  /* seccomp_notif buffers of the kernel's sizes */
	size_t req_size, resp_size;
	/* The program's output (output.c): the pipe's read end, the log. */
	int out_rfd, out_log;
	uint64_t out_max, out_written, out_dropped;
	int out_cut;
	unsigned char out_carry[4]; /* a UTF-8 character split by a read */
	size_t out_ncarry;
};

/* policy.c: the path policy (adds a prefix, normalised; the defaults every
 * sandbox has; the access it grants a path, *above when the path is a
 * directory above a prefix) and the first fault, which kills the sandbox. */
APF_INTERNAL
int apf_sandbox_policy_add(apf_sandbox *sb, const char *prefix, int access);
APF_INTERNAL int apf_sandbox_policy_defaults(apf_sandbox *sb);
APF_INTERNAL
int apf_sandbox_policy_access(const apf_sandbox *sb, const char *path,
			      int *above);
/* Kills everything in the sandbox now (SIGKILL), without reaping. */
APF_INTERNAL void apf_sandbox_kill_now(apf_sandbox *sb);
/* Records the first fault and kills the sandbox. */
APF_INTERNAL
void apf_sandbox_record_fault(apf_sandbox *sb, const char *text, int path);
/* memory.c: the memory limit: chooses the mechanism and makes the cgroup (before
 * the clone); moves the program into it (before its execve is answered);
 * reads its counters once the sandbox has ended; removes it. */
APF_INTERNAL int apf_sandbox_memory_setup(apf_sandbox *sb, uint64_t bytes);
APF_INTERNAL int apf_sandbox_memory_enter(apf_sandbox *sb, pid_t pid);
APF_INTERNAL void apf_sandbox_memory_read(apf_sandbox *sb);
APF_INTERNAL void apf_sandbox_memory_remove(apf_sandbox *sb);
/* Reads the program's peak virtual size into sb->peak_vm. */
APF_INTERNAL void apf_sandbox_snapshot_vm(apf_sandbox *sb);
/* The output pipe: opens the log and makes the pipe (*write_end is the
 * program's end, for fds 1 and 2); closing drains what is left. */
APF_INTERNAL
int apf_sandbox_output_open(apf_sandbox *sb, const char *path, uint64_t max,
			    int *write_end);
APF_INTERNAL void apf_sandbox_output_close(apf_sandbox *sb);
/* Lexical normalisation of an absolute path: "//", ".", ".." folded;
 * returns 0 or -ENAMETOOLONG / -EINVAL (not absolute). */
APF_INTERNAL
int apf_sandbox_normalize(char *out, size_t size, const char *path);

/* ---- the plan: what the children need, all of it prepared before the
 * clone (plan.c) so that they only make system calls (child.c) ---------- */

#define DEFAULT_HOSTNAME "apf-sandbox"
#define DEFAULT_SCRATCH_BYTES (64ull << 20)
#define MAX_FDS 64
/* Where the intermediate root is mounted while the new one is built; any
 * directory every system has will do, since its content is never used. */
#define STAGE "/tmp"

enum { MSG_LISTENER = 'L', MSG_ERROR = 'E', MSG_EXIT = 'X' };

/* Which set-up step failed, for the steps the supervisor's message says
 * more about: the message's text is for people, never parsed. */
enum { STEP_OTHER, STEP_MOUNT_PROC, STEP_SETHOSTNAME };

struct msg {
	int type;
	int err;
	int step;           /* MSG_ERROR: STEP_* */
	int status;
	struct rusage ru;
	char text[256];
};

struct plan_mount {
	char *src;  /* "/oldroot" + canonical host path */
	char *dst;  /* "/newroot" + target */
	int write;
	int is_dir;
	int is_dev; /* a character device: keeps device access */
	int copy;   /* copied into the root, not bound */
};

struct plan {
	enum apf_sandbox_mode mode;
	int probe;
	char **argv, **envp;
	char *cwd;
	struct plan_mount *mnts;
	size_t nmnts;
	char *scratch;      /* "/newroot" + scratch target, or NULL */
	char scratch_opts[64];
	char root_opts[64];
	struct apf_sandbox_fd fds[MAX_FDS];
	size_t nfds;
	struct rlimit rl_as, rl_nofile, rl_nproc, rl_fsize, rl_cpu;
	char hostname[65];
	char uid_map[64], gid_map[64];
	struct sock_fprog prog;
	int chan;           /* the children's end of the socketpair */
	pid_t supervisor;
	int userns;         /* sealed in a user namespace of its own */
	int out_wfd;        /* the output pipe's write end (fds 1, 2), or -1 */
	int cg_fd;          /* the sandbox cgroup's cgroup.procs, or -1 */
};

/* plan.c: builds the plan from a configuration (adding its paths to sb's
 * policy, opening the output pipe, building the filter); frees it. */
APF_INTERNAL
int apf_sandbox_plan_build(struct plan *p, const struct apf_sandbox_config *cfg,
			   apf_sandbox *sb);
APF_INTERNAL void apf_sandbox_plan_free(struct plan *p);

/* child.c: clone3() with a pidfd (*pidfd, unless NULL) and SIGCHLD; and the
 * two children, which never return: init (sealed: pid 1 of the new pid
 * namespace, which builds the root and forks the program) and the program
 * (which installs the filter and execs). */
APF_INTERNAL pid_t apf_sandbox_clone(uint64_t flags, int *pidfd);
APF_INTERNAL _Noreturn void apf_sandbox_init_main(struct plan *p);
APF_INTERNAL _Noreturn void apf_sandbox_program_main(struct plan *p);

#endif
