/*
 * filter.c: which syscalls the supervisor sees, and the BPF program that
 * sends them there.
 *
 * The filter allows by default and returns SECCOMP_RET_USER_NOTIF for every
 * syscall in the table below, some only for certain arguments (a socket
 * family other than AF_UNIX, the TIOCSTI or FS_IOC_SETFLAGS ioctls, a pid
 * other than 0). The
 * supervisor then decides (notify.c). libseccomp builds the program and its
 * architecture check (a foreign ABI, such as int 0x80 on x86_64, kills the
 * process); in front of it sits one hand-written test that notifies every
 * syscall number above the highest libseccomp knows, so a syscall added to
 * the kernel after libseccomp was built is a named fault rather than a hole.
 * Those newer syscalls the table knows by their unified number (the same on
 * every architecture since 424) are judged like any other.
 *
 * The program is exported to memory here, in the supervisor, so that the
 * forked child only has to hand it to seccomp(2): no allocation after fork.
 */
#include "sandbox/internal.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <seccomp.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>
#include <linux/audit.h>
#include <linux/fs.h>
#include <linux/seccomp.h>

#define E(n, c, d, p, d2, p2, f, k, a, u) \
	{n, c, d, p, d2, p2, f, k, a, u, -1}
#define FORBID(n, a) E(n, SC_FORBIDDEN, -1, -1, -1, -1, -1, 0, a, 0)
#define FORBIDU(n, a, u) E(n, SC_FORBIDDEN, -1, -1, -1, -1, -1, 0, a, u)
#define ALLOWU(n, u) E(n, SC_ALLOW, -1, -1, -1, -1, -1, 0, NULL, u)
#define PATH(n, d, p, f, k) E(n, SC_PATH, d, p, -1, -1, f, k, NULL, 0)
#define PATHU(n, d, p, f, k, u) E(n, SC_PATH, d, p, -1, -1, f, k, NULL, u)
#define PATH2(n, d, p, d2, p2, f, k) E(n, SC_PATH, d, p, d2, p2, f, k, NULL, 0)
#define PID(n, a) E(n, SC_PID, -1, -1, -1, -1, -1, 0, a, 0)
#define META(n, d, p) E(n, SC_META, d, p, -1, -1, -1, 0, NULL, 0)
#define METAU(n, d, p, u) E(n, SC_META, d, p, -1, -1, -1, 0, NULL, u)
#define PLAIN(n, c) E(n, c, -1, -1, -1, -1, -1, 0, NULL, 0)

static struct sc_info table[] = {
	/* Always faults: escaping, spying on other processes, changing the
	 * machine, or kernel attack surface a training loop never needs. */
	FORBID("ptrace", "Pd"),
	FORBID("process_vm_readv", "d"),
	FORBID("process_vm_writev", "d"),
	FORBID("mount", "sssx"),
	FORBID("umount2", "sx"),
	FORBID("pivot_root", "ss"),
	FORBID("chroot", "s"),
	FORBID("setns", "dc"),
	FORBID("unshare", "c"),
	FORBID("open_tree", "dsx"),
	FORBID("move_mount", "dsds"),
	FORBID("fsopen", "s"),
	FORBID("fsconfig", "d"),
	FORBID("fsmount", "d"),
	FORBID("fspick", "ds"),
	FORBID("mount_setattr", "ds"),
	FORBIDU("open_tree_attr", "ds", 467),
	FORBID("bpf", "d"),
	FORBID("perf_event_open", ""),
	FORBID("kexec_load", ""),
	FORBID("kexec_file_load", ""),
	FORBID("init_module", ""),
	FORBID("finit_module", "d"),
	FORBID("delete_module", "s"),
	FORBID("create_module", ""),
	FORBID("keyctl", "d"),
	FORBID("add_key", "ss"),
	FORBID("request_key", "ss"),
	FORBID("reboot", ""),
	FORBID("swapon", "s"),
	FORBID("swapoff", "s"),
	FORBID("acct", "s"),
	FORBID("settimeofday", ""),
	FORBID("clock_settime", "d"),
	FORBID("clock_adjtime", "d"),
	FORBID("adjtimex", ""),
	FORBID("userfaultfd", ""),
	FORBID("io_uring_setup", "d"),
	FORBID("io_uring_enter", "d"),
	FORBID("io_uring_register", "d"),
	FORBID("personality", "x"),
	FORBID("name_to_handle_at", "ds"),
	FORBID("open_by_handle_at", "d"),
	FORBID("pidfd_getfd", "dd"),
	FORBID("kcmp", "dd"),
	FORBID("fanotify_init", "x"),
	FORBID("iopl", "d"),
	FORBID("ioperm", ""),
	FORBID("modify_ldt", "d"),
	FORBID("syslog", "d"),
	FORBID("quotactl", ""),
	FORBID("quotactl_fd", "d"),
	FORBID("lookup_dcookie", ""),
	FORBID("vhangup", ""),
	FORBID("uselib", "s"),
	FORBID("nfsservctl", ""),
	FORBID("sethostname", ""),
	FORBID("setdomainname", ""),
	FORBID("seccomp", "d"),
	FORBID("migrate_pages", "d"),
	FORBID("move_pages", "d"),
	FORBID("process_madvise", "d"),
	FORBID("process_mrelease", "d"),
	/* Memory no limit can count: unevictable, and out of every mapping
	 * once unmapped. */
	FORBIDU("memfd_secret", "x", 447),

	PLAIN("socket", SC_SOCKET),
	PLAIN("socketpair", SC_SOCKET),
	PLAIN("ioctl", SC_IOCTL),
	PLAIN("clone", SC_CLONE),
	PLAIN("clone3", SC_CLONE3),
	PLAIN("fork", SC_FORK),
	PLAIN("vfork", SC_FORK),
	PLAIN("connect", SC_SOCKADDR),
	PLAIN("bind", SC_SOCKADDR),
	PLAIN("exit_group", SC_EXIT),
	/* Memory held by a descriptor or a key, not by a mapping, so that
	 * RLIMIT_AS does not see it (memory.c, notify.c). */
	PLAIN("memfd_create", SC_MEMFD),
	PLAIN("shmget", SC_SHM),
	E("execve", SC_EXEC, -1, 0, -1, -1, -1, P_EXEC, NULL, 0),
	E("execveat", SC_EXEC, 0, 1, -1, -1, 4, P_EXEC, NULL, 0),

	PATH("open", -1, 0, 1, P_OPEN),
	PATH("openat", 0, 1, 2, P_OPEN),
	PATH("openat2", 0, 1, 2, P_OPENAT2),
	PATH("creat", -1, 0, -1, P_WRITE),
	PATH("truncate", -1, 0, -1, P_WRITE),
	PATH("mkdir", -1, 0, -1, P_WRITE_NOFOLLOW),
	PATH("mkdirat", 0, 1, -1, P_WRITE_NOFOLLOW),
	PATH("rmdir", -1, 0, -1, P_WRITE_NOFOLLOW),
	PATH("unlink", -1, 0, -1, P_WRITE_NOFOLLOW),
	PATH("unlinkat", 0, 1, -1, P_WRITE_NOFOLLOW),
	PATH2("rename", -1, 0, -1, 1, -1, P_RENAME),
	PATH2("renameat", 0, 1, 2, 3, -1, P_RENAME),
	PATH2("renameat2", 0, 1, 2, 3, -1, P_RENAME),
	PATH2("link", -1, 0, -1, 1, -1, P_LINK),
	PATH2("linkat", 0, 1, 2, 3, 4, P_LINK),
	PATH("symlink", -1, 1, -1, P_WRITE_NOFOLLOW),
	PATH("symlinkat", 1, 2, -1, P_WRITE_NOFOLLOW),

	/* Changing a file's metadata - mode, owner, times, extended
	 * attributes, inode flags, a device node - in any form, by path or
	 * by descriptor: neither a compiler nor a training loop needs it, and
	 * a descriptor can name a host file the path check never sees. Never
	 * run: refused (EPERM) in the set-up phase, where the linker tries to
	 * set its output's mode and copes, and a fault once locked. */
	META("chmod", -1, 0),
	META("fchmod", 0, -1),
	META("fchmodat", 0, 1),
	METAU("fchmodat2", 0, 1, 452),
	META("chown", -1, 0),
	META("fchown", 0, -1),
	META("lchown", -1, 0),
	META("fchownat", 0, 1),
	META("mknod", -1, 0),
	META("mknodat", 0, 1),
	META("utime", -1, 0),
	META("utimes", -1, 0),
	META("futimesat", 0, 1),
	META("utimensat", 0, 1),
	META("setxattr", -1, 0),
	META("lsetxattr", -1, 0),
	META("fsetxattr", 0, -1),
	META("removexattr", -1, 0),
	META("lremovexattr", -1, 0),
	META("fremovexattr", 0, -1),
	METAU("setxattrat", 0, 1, 463),
	METAU("removexattrat", 0, 1, 466),
	METAU("file_setattr", 0, 1, 469),

	/* Acting on another process: the pid namespace confines these when
	 * sealed; unsealed, the target must be in the sandbox. The signals are
	 * also where an abort()ing program's peak memory is read. */
	PID("kill", "01"),
	PID("tkill", "01"),
	PID("tgkill", "02"),
	PID("rt_sigqueueinfo", "01"),
	PID("rt_tgsigqueueinfo", "02"),
	PID("pidfd_open", "0"),
	PID("prlimit64", "0!"),
	PID("sched_setaffinity", "0!"),
	PID("sched_setparam", "0!"),
	PID("sched_setscheduler", "0!"),
	PID("sched_setattr", "0!"),
	PID("setpriority", "1!"),
	PID("ioprio_set", "1!"),

	/* Newer than some libseccomp builds, and harmless. */
	ALLOWU("cachestat", 451),
	ALLOWU("map_shadow_stack", 453),
	ALLOWU("futex_wake", 454),
	ALLOWU("futex_wait", 455),
	ALLOWU("futex_requeue", 456),
	ALLOWU("statmount", 457),
	ALLOWU("listmount", 458),
	ALLOWU("lsm_get_self_attr", 459),
	ALLOWU("lsm_set_self_attr", 460),
	ALLOWU("lsm_list_modules", 461),
	ALLOWU("mseal", 462),
	ALLOWU("getxattrat", 464),
	ALLOWU("listxattrat", 465),
	ALLOWU("file_getattr", 468),
};

#define NTABLE (sizeof table / sizeof table[0])

static pthread_once_t resolve_once = PTHREAD_ONCE_INIT;
static int known_max = -1; /* the highest syscall number libseccomp knows */

static void resolve_table(void)
{
	for (int nr = 0; nr < 2048; nr++) {
		char *name = seccomp_syscall_resolve_num_arch(SCMP_ARCH_NATIVE,
							      nr);
		if (name) {
			known_max = nr;
			free(name);
		}
	}
	for (size_t i = 0; i < NTABLE; i++) {
		int nr = seccomp_syscall_resolve_name(table[i].name);
		if (nr < 0 && table[i].unified_nr > 0)
			nr = table[i].unified_nr;
		table[i].nr = nr < 0 ? -1 : nr;
	}
}

const struct sc_info *apf_sandbox_syscalls(size_t *n)
{
	pthread_once(&resolve_once, resolve_table);
	*n = NTABLE;
	return table;
}

const struct sc_info *apf_sandbox_syscall_lookup(int nr)
{
	pthread_once(&resolve_once, resolve_table);
	if (nr < 0)
		return NULL;
	for (size_t i = 0; i < NTABLE; i++)
		if (table[i].nr == nr)
			return &table[i];
	return NULL;
}

static int add_rules(scmp_filter_ctx ctx, const struct sc_info *s)
{
	const uint32_t notify = SCMP_ACT_NOTIFY;
	int nr = s->nr;
	switch (s->cls) {
	case SC_ALLOW:
		return 0;
	case SC_SOCKET:
		/* The kernel reads the family as an int; the supervisor does
		 * the same, so upper bits cannot smuggle one past. */
		return seccomp_rule_add(ctx, notify, nr, 1,
					SCMP_A0(SCMP_CMP_NE, AF_UNIX));
	case SC_IOCTL: {
		/* Terminal input, and an inode's flags or extended attributes
		 * (chattr), the descriptor form of a metadata change. */
		static const unsigned long cmds[] = {
			TIOCSTI, TIOCLINUX, FS_IOC_SETFLAGS, FS_IOC32_SETFLAGS,
			FS_IOC_FSSETXATTR};
		int rc = 0;
		for (size_t i = 0; rc == 0 && i < sizeof cmds / sizeof cmds[0]; i++)
			rc = seccomp_rule_add(ctx, notify, nr, 1,
					      SCMP_A1(SCMP_CMP_MASKED_EQ,
						      0xffffffffu,
						      (uint32_t)cmds[i]));
		return rc;
	}
	case SC_PID:
		if (s->args[1] == '!') {
			unsigned arg = (unsigned)(s->args[0] - '0');
			struct scmp_arg_cmp c = SCMP_CMP(arg, SCMP_CMP_NE, 0);
			return seccomp_rule_add_array(ctx, notify, nr, 1, &c);
		}
		return seccomp_rule_add(ctx, notify, nr, 0);
	default:
		return seccomp_rule_add(ctx, notify, nr, 0);
	}
}

/* Reads the whole memfd back. */
static int read_back(int fd, struct sock_filter **prog, size_t *len)
{
	off_t size = lseek(fd, 0, SEEK_END);
	if (size <= 0 || size % (off_t)sizeof(struct sock_filter) != 0)
		return apf_error(APF_EINTERNAL, "sandbox",
				 "libseccomp exported a %lld-byte program",
				 (long long)size);
	*len = (size_t)size / sizeof(struct sock_filter);
	*prog = malloc((size_t)size);
	if (!*prog)
		return apf_error(APF_ENOMEM, "sandbox", "out of memory");
	if (pread(fd, *prog, (size_t)size, 0) != size) {
		free(*prog);
		*prog = NULL;
		return apf_error_errno(APF_EIO, errno, "sandbox",
				       "reading the filter back");
	}
	return 0;
}

int apf_sandbox_filter_build(struct sock_filter **prog, size_t *len)
{
	size_t n;
	const struct sc_info *t = apf_sandbox_syscalls(&n);
	*prog = NULL;
	*len = 0;
	if (known_max < 0)
		return apf_error(APF_EINTERNAL, "sandbox",
				 "libseccomp knows no syscalls of this machine");
	scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
	if (!ctx)
		return apf_error(APF_ENOMEM, "sandbox", "seccomp_init failed");
	const char *rule = NULL; /* NULL: setting the attributes failed */
	int rc = seccomp_attr_set(ctx, SCMP_FLTATR_ACT_BADARCH,
				  SCMP_ACT_KILL_PROCESS);
	if (rc == 0)
		rc = seccomp_attr_set(ctx, SCMP_FLTATR_CTL_OPTIMIZE, 2);
	for (size_t i = 0; rc == 0 && i < n; i++)
		if (t[i].nr >= 0 && t[i].nr <= known_max) {
			rc = add_rules(ctx, &t[i]);
			rule = t[i].name;
		}
	if (rc < 0) {
		seccomp_release(ctx);
		if (rc == -EOPNOTSUPP || rc == -EINVAL)
			return apf_error(APF_EABORT, "sandbox",
					 "libseccomp cannot build a user "
					 "notification filter here: %s",
					 strerror(-rc));
		return apf_error(APF_EINTERNAL, "sandbox", "%s%s: %s",
				 rule ? "seccomp rule for " : "seccomp filter "
							      "attributes",
				 rule ? rule : "", strerror(-rc));
	}
	int fd = memfd_create("apf-seccomp", MFD_CLOEXEC);
	if (fd < 0) {
		seccomp_release(ctx);
		return apf_error_errno(APF_EIO, errno, "sandbox", "memfd_create");
	}
	rc = seccomp_export_bpf(ctx, fd);
	seccomp_release(ctx);
	struct sock_filter *body = NULL;
	size_t nbody = 0;
	if (rc < 0)
		rc = apf_error(APF_EINTERNAL, "sandbox",
			       "seccomp_export_bpf: %s", strerror(-rc));
	else
		rc = read_back(fd, &body, &nbody);
	close(fd);
	if (rc < 0)
		return rc;

	/* The guard: on the native architecture, any number above what
	 * libseccomp knows goes to the supervisor. Everything else falls
	 * through to libseccomp's program, which checks the architecture
	 * itself. */
	const struct sock_filter guard[] = {
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS,
			 offsetof(struct seccomp_data, arch)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, seccomp_arch_native(), 0, 3),
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS,
			 offsetof(struct seccomp_data, nr)),
		BPF_JUMP(BPF_JMP | BPF_JGE | BPF_K, (uint32_t)known_max + 1, 0,
			 1),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_USER_NOTIF),
	};
	size_t nguard = sizeof guard / sizeof guard[0];
	if (nguard + nbody > BPF_MAXINSNS) {
		free(body);
		return apf_error(APF_EINTERNAL, "sandbox",
				 "the filter has %zu instructions",
				 nguard + nbody);
	}
	*prog = malloc((nguard + nbody) * sizeof **prog);
	if (!*prog) {
		free(body);
		return apf_error(APF_ENOMEM, "sandbox", "out of memory");
	}
	memcpy(*prog, guard, sizeof guard);
	memcpy(*prog + nguard, body, nbody * sizeof *body);
	free(body);
	*len = nguard + nbody;
	return 0;
}
