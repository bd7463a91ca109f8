/*
 * test_sandbox.c: the sandbox with real processes. The program inside is
 * tests/helpers/sandboxee (built unsanitized), which reports what it sees as
 * "key value" lines on a pipe; its "wait" mode lets a test lock the sandbox
 * before the action. Sealed tests skip, with the probe's reason, where the
 * kernel refuses namespaces. The memory-limit tests run tests/helpers/memhog
 * and check whichever mechanism the sandbox reports: a cgroup (as root) or
 * the rlimit fallback (elsewhere); no test may leave a cgroup behind.
 */
#include "testlib.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/base.h"
#include "sandbox/sandbox.h"

#define SEALED APF_SANDBOX_SEALED
#define UNSEALED APF_SANDBOX_UNSEALED
#define MAX_MOUNTS 16

struct run {
	enum apf_sandbox_mode mode;
	char *tmp;        /* a host directory the program never sees */
	char helpers[PATH_MAX];
	char prog[PATH_MAX];
	char scratch[PATH_MAX];
	struct apf_sandbox_mount mounts[MAX_MOUNTS];
	size_t nmounts;
	struct apf_sandbox_path paths[8];
	size_t npaths;
	struct apf_sandbox_limits limits;
	uint64_t scratch_bytes; /* 0: 32 MiB */
	const char *argv[16];
	apf_sandbox *sb;
	int in_w, out_r;
	char out[1 << 16];
	size_t outlen;
	apf_sandbox_end end;
	int ended;
	char mechanism[16];    /* apf_sandbox_memory_mechanism */
	char cgroup[PATH_MAX]; /* the sandbox's cgroup, "" when none */
};

/* ---- running the helper ------------------------------------------------- */

/* Where this process's sandboxes make their cgroups, once one has. */
static char cgroup_parent[PATH_MAX];

static void note_cgroup_parent(const char *cg)
{
	const char *slash = strrchr(cg, '/');
	assert_non_null(slash);
	size_t n = (size_t)(slash - cg);
	assert_true(n < sizeof cgroup_parent);
	memcpy(cgroup_parent, cg, n);
	cgroup_parent[n] = 0;
}

/* The cgroups this process's sandboxes left in their parent directory. */
static int our_cgroups_left(void)
{
	if (!cgroup_parent[0])
		return 0;
	char mine[64];
	snprintf(mine, sizeof mine, "apf-sandbox-%d-", (int)getpid());
	DIR *d = opendir(cgroup_parent);
	assert_non_null(d);
	int n = 0;
	struct dirent *de;
	while ((de = readdir(d)))
		if (!strncmp(de->d_name, mine, strlen(mine))) {
			print_message("left behind: %s/%s\n", cgroup_parent,
				      de->d_name);
			n++;
		}
	closedir(d);
	return n;
}

/* snprintf that fails the test instead of cutting a path short. */
static void fmt(char *buf, size_t size, const char *f, ...)
	__attribute__((format(printf, 3, 4)));

static void fmt(char *buf, size_t size, const char *f, ...)
{
	va_list ap;
	va_start(ap, f);
	int n = vsnprintf(buf, size, f, ap);
	va_end(ap);
	assert_true(n >= 0 && (size_t)n < size);
}

static void require_sealed(void)
{
	static int state; /* 0 unknown, 1 yes, -1 no */
	static char why[512];
	if (!state) {
		state = apf_sandbox_probe(SEALED) == 0 ? 1 : -1;
		fmt(why, sizeof why, "%s", apf_error_message());
	}
	if (state < 0)
		SKIP_BECAUSE("the kernel refuses a sealed sandbox here: %s", why);
}

static void require_unsealed(void)
{
	static int state;
	static char why[512];
	if (!state) {
		state = apf_sandbox_probe(UNSEALED) == 0 ? 1 : -1;
		snprintf(why, sizeof why, "%s", apf_error_message());
	}
	if (state < 0)
		SKIP_BECAUSE("the kernel refuses the sandbox's filter here: %s", why);
}

static void add_mount(struct run *r, const char *src, const char *dst,
		      int access, int optional)
{
	assert_true(r->nmounts < MAX_MOUNTS);
	r->mounts[r->nmounts++] = (struct apf_sandbox_mount){
		.source = src, .target = dst, .access = access,
		.optional = optional};
}

static void add_path(struct run *r, const char *prefix, int access)
{
	r->paths[r->npaths++] = (struct apf_sandbox_path){prefix, access};
}

/* The system a dynamically linked program and the compiler need, read-only,
 * and the helpers' directory. */
static void run_init(struct run *r, enum apf_sandbox_mode mode)
{
	memset(r, 0, sizeof *r);
	r->mode = mode;
	r->in_w = r->out_r = -1;
	r->tmp = testlib_tmpdir();
	char exe[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
	assert_true(n > 0);
	exe[n] = 0;
	*strrchr(exe, '/') = 0;
	fmt(r->helpers, sizeof r->helpers, "%s/helpers", exe);
	const char *inside = mode == SEALED ? "/opt/helpers" : r->helpers;
	fmt(r->prog, sizeof r->prog, "%s/sandboxee", inside);
	add_mount(r, "/usr", NULL, APF_SANDBOX_READ, 0);
	add_mount(r, "/lib", NULL, APF_SANDBOX_READ, 0);
	add_mount(r, "/lib64", NULL, APF_SANDBOX_READ, 1);
	add_mount(r, "/bin", NULL, APF_SANDBOX_READ, 0);
	add_mount(r, "/etc/alternatives", NULL, APF_SANDBOX_READ, 1);
	add_mount(r, r->helpers, inside, APF_SANDBOX_READ, 0);
	if (mode == SEALED) {
		fmt(r->scratch, sizeof r->scratch, "/scratch");
	} else {
		fmt(r->scratch, sizeof r->scratch, "%s/scratch", r->tmp);
		assert_int_equal(mkdir(r->scratch, 0755), 0);
	}
	r->argv[0] = r->prog;
}

static void run_args(struct run *r, const char *a1, const char *a2,
		     const char *a3, const char *a4)
{
	const char *a[] = {a1, a2, a3, a4};
	size_t n = 1;
	for (size_t i = 0; i < 4 && a[i]; i++)
		r->argv[n++] = a[i];
	r->argv[n] = NULL;
}

static int run_spawn(struct run *r)
{
	int in[2], out[2];
	assert_int_equal(pipe2(in, O_CLOEXEC), 0);
	assert_int_equal(pipe2(out, O_CLOEXEC), 0);
	struct apf_sandbox_fd fds[] = {{in[0], 0}, {out[1], 1}, {out[1], 2}};
	char envtmp[PATH_MAX + 8];
	fmt(envtmp, sizeof envtmp, "TMPDIR=%s", r->scratch);
	const char *envp[] = {"PATH=/usr/bin:/bin", envtmp, NULL};
	struct apf_sandbox_config cfg;
	memset(&cfg, 0, sizeof cfg);
	cfg.mode = r->mode;
	cfg.argv = r->argv;
	cfg.envp = envp;
	cfg.mounts = r->mounts;
	cfg.nmounts = r->nmounts;
	cfg.scratch = r->scratch;
	cfg.scratch_bytes = r->scratch_bytes ? r->scratch_bytes : 32 << 20;
	cfg.paths = r->paths;
	cfg.npaths = r->npaths;
	cfg.fds = fds;
	cfg.nfds = 3;
	cfg.limits = r->limits;
	int rc = apf_sandbox_spawn(&r->sb, &cfg);
	if (rc == 0) {
		const char *cg = apf_sandbox_memory_cgroup(r->sb);
		fmt(r->mechanism, sizeof r->mechanism, "%s",
		    apf_sandbox_memory_mechanism(r->sb));
		fmt(r->cgroup, sizeof r->cgroup, "%s", cg ? cg : "");
		if (cg)
			note_cgroup_parent(cg);
	}
	close(in[0]);
	close(out[1]);
	r->in_w = in[1];
	r->out_r = out[0];
	fcntl(r->out_r, F_SETFL, O_NONBLOCK);
	return rc;
}

static void read_output(struct run *r)
{
	ssize_t n;
	while (r->outlen + 1 < sizeof r->out &&
	       (n = read(r->out_r, r->out + r->outlen,
			 sizeof r->out - 1 - r->outlen)) > 0)
		r->outlen += (size_t)n;
	r->out[r->outlen] = 0;
}

/* The value of the first "key value" line, or NULL. */
static const char *value(struct run *r, const char *key)
{
	static char buf[4096];
	size_t k = strlen(key);
	for (const char *p = r->out; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : p)
		if (!strncmp(p, key, k) && p[k] == ' ') {
			size_t n = strcspn(p + k + 1, "\n");
			if (n >= sizeof buf)
				n = sizeof buf - 1;
			memcpy(buf, p + k + 1, n);
			buf[n] = 0;
			return buf;
		}
	return NULL;
}

/* Serves the sandbox until the program prints key (1) or ends (0). */
static int pump_until(struct run *r, const char *key, int seconds)
{
	uint64_t deadline = apf_now_ns() + (uint64_t)seconds * 1000000000ull;
	while (apf_now_ns() < deadline) {
		read_output(r);
		if (key && value(r, key))
			return 1;
		int rc = apf_sandbox_wait(r->sb, 5, &r->end);
		if (rc < 0)
			fail_msg("apf_sandbox_wait: %s", apf_error_message());
		if (rc == 1) {
			read_output(r);
			r->ended = 1;
			return key && value(r, key) ? 1 : 0;
		}
	}
	fail_msg("the sandboxed program did not %s within %d s; output:\n%s",
		 key ? "report" : "end", seconds, r->out);
	return 0;
}

static void finish(struct run *r)
{
	if (!r->ended)
		pump_until(r, NULL, 30);
}

static void run_free(struct run *r)
{
	apf_sandbox_free(r->sb);
	struct stat st;
	if (r->cgroup[0] && stat(r->cgroup, &st) == 0)
		fail_msg("the sandbox's cgroup %s is still there", r->cgroup);
	assert_int_equal(our_cgroups_left(), 0);
	if (r->in_w >= 0)
		close(r->in_w);
	if (r->out_r >= 0)
		close(r->out_r);
	testlib_tmpdir_free(r->tmp);
}

/* Runs one action to its end. */
static void run_action(struct run *r, const char *a1, const char *a2,
		       const char *a3, const char *a4)
{
	run_args(r, a1, a2, a3, a4);
	assert_apf_ok(run_spawn(r));
	finish(r);
}

/* Starts "wait <action>", locks the sandbox once the program is ready, lets
 * it act, and runs it to its end. */
static void run_locked(struct run *r, const char *action, const char *arg)
{
	run_args(r, "wait", action, arg, NULL);
	assert_apf_ok(run_spawn(r));
	assert_true(pump_until(r, "ready", 10));
	assert_apf_ok(apf_sandbox_set_phase(r->sb, APF_SANDBOX_LOCKED));
	assert_int_equal(write(r->in_w, "g", 1), 1);
	finish(r);
}

static void assert_outcome(struct run *r, enum apf_sandbox_outcome o)
{
	if (r->end.outcome != o)
		fail_msg("outcome %s (%s), expected %s; output:\n%s",
			 apf_sandbox_outcome_name(r->end.outcome), r->end.reason,
			 apf_sandbox_outcome_name(o), r->out);
}

static void assert_fault(struct run *r, const char *needle)
{
	assert_outcome(r, APF_SANDBOX_FAULTED);
	if (!strstr(r->end.reason, needle))
		fail_msg("fault '%s' does not name '%s'", r->end.reason, needle);
	assert_non_null(apf_sandbox_fault(r->sb));
	assert_null(strchr(r->end.reason, '\n'));
	print_message("%s\n", r->end.reason);
}

static int has_word(const char *list, const char *word)
{
	size_t n = strlen(word);
	for (const char *p = list; p && *p;) {
		if (!strncmp(p, word, n) && (p[n] == ' ' || !p[n]))
			return 1;
		p = strchr(p, ' ');
		p = p ? p + 1 : NULL;
	}
	return 0;
}

/* ---- the sealed view ---------------------------------------------------- */

static void sealed_program_sees_only_its_mounts(void **state)
{
	(void)state;
	require_sealed();
	struct run r;
	run_init(&r, SEALED);
	/* Host files the policy would let it read, so that only the mount
	 * namespace stands between the program and them. */
	testlib_write_str(r.tmp, "home/notes.txt", "host secret\n");
	char home[PATH_MAX + 32], notes[PATH_MAX + 32];
	fmt(home, sizeof home, "%s/home", r.tmp);
	fmt(notes, sizeof notes, "%s/notes.txt", home);
	add_path(&r, "/etc", APF_SANDBOX_READ);
	add_path(&r, home, APF_SANDBOX_READ);
	const char *etc = access("/etc/hostname", R_OK) == 0 ? "/etc/hostname"
							     : "/etc/passwd";
	assert_int_equal(access(etc, R_OK), 0);
	run_action(&r, "view", etc, notes, "/usr/include/stdio.h");
	assert_outcome(&r, APF_SANDBOX_EXITED);
	assert_int_equal(r.end.exit_code, 0);

	char want[PATH_MAX + 64];
	fmt(want, sizeof want, "%s %s", etc, strerror(ENOENT));
	assert_string_equal(value(&r, "read"), want);
	assert_non_null(strstr(r.out, notes));
	fmt(want, sizeof want, "read %s %s", notes, strerror(ENOENT));
	assert_non_null(strstr(r.out, want));
	assert_non_null(strstr(r.out, "read /usr/include/stdio.h ok"));
	assert_string_equal(value(&r, "hostname"), "apf-sandbox");
	/* Not root, inside or out (see sealed_program_is_unprivileged...). */
	assert_string_equal(value(&r, "uid"), "65534");
	/* The root holds what was mounted and what the sandbox adds. */
	const char *root = value(&r, "root");
	static const char *const allowed[] = {"usr", "lib", "lib64", "bin", "etc",
					      "opt", "scratch", "proc", "dev"};
	char copy[4096];
	fmt(copy, sizeof copy, "%s", root);
	for (char *w = strtok(copy, " "); w; w = strtok(NULL, " ")) {
		int ok = 0;
		for (size_t i = 0; i < sizeof allowed / sizeof allowed[0]; i++)
			ok |= !strcmp(w, allowed[i]);
		if (!ok)
			fail_msg("the sandbox's / holds %s: %s", w, root);
	}
	assert_true(has_word(root, "scratch") && has_word(root, "usr"));
	assert_false(has_word(root, "home") || has_word(root, "root") ||
		     has_word(root, "tmp") || has_word(root, "work"));
	run_free(&r);
}

static void sealed_read_only_mount_refuses_writes_despite_policy(void **state)
{
	(void)state;
	require_sealed();
	struct run r;
	run_init(&r, SEALED);
	testlib_write_str(r.tmp, "data/train.idx", "data");
	char data[PATH_MAX + 8], host_file[PATH_MAX + 32];
	fmt(data, sizeof data, "%s/data", r.tmp);
	add_mount(&r, data, "/data", APF_SANDBOX_READ, 0);
	/* The policy calls /data writable: only the mount refuses. */
	add_path(&r, "/data", APF_SANDBOX_WRITE);
	run_action(&r, "write", "/data/planted", NULL, NULL);
	assert_outcome(&r, APF_SANDBOX_EXITED);
	assert_string_equal(value(&r, "write"), strerror(EROFS));
	fmt(host_file, sizeof host_file, "%s/planted", data);
	assert_int_equal(access(host_file, F_OK), -1);
	run_free(&r);
}

/* The sandbox's root and the machine-wide parts of /proc are read-only
 * mounts: with the policy out of the way, the kernel still refuses. (The
 * helper only opens, never writes, so a failure here changes nothing.) */
static void sealed_root_and_proc_sys_are_read_only(void **state)
{
	(void)state;
	require_sealed();
	static const char *const targets[] = {
		"/planted", "/proc/sys/vm/drop_caches", "/proc/sysrq-trigger",
	};
	for (size_t i = 0; i < sizeof targets / sizeof targets[0]; i++) {
		if (i > 0 && access(targets[i], F_OK) != 0)
			continue; /* this kernel has no such file */
		struct run r;
		run_init(&r, SEALED);
		add_path(&r, "/", APF_SANDBOX_WRITE);
		run_action(&r, "write", targets[i], NULL, NULL);
		assert_outcome(&r, APF_SANDBOX_EXITED);
		const char *v = value(&r, "write");
		assert_non_null(v);
		if (strcmp(v, strerror(EROFS)) != 0)
			fail_msg("opening %s for writing: %s", targets[i], v);
		run_free(&r);
	}
}

static void sealed_network_is_a_lone_loopback_that_is_down(void **state)
{
	(void)state;
	require_sealed();
	struct run r;
	run_init(&r, SEALED);
	run_action(&r, "view", NULL, NULL, NULL);
	assert_outcome(&r, APF_SANDBOX_EXITED);
	const char *iface = value(&r, "if");
	assert_non_null(iface);
	assert_string_equal(iface, "lo down");
	/* exactly one interface line */
	const char *first = strstr(r.out, "\nif ");
	assert_null(strstr(first + 1, "\nif "));
	run_free(&r);
}

/* connect() to 127.0.0.1 from inside the sandbox's network namespace fails
 * even with a listener on the host's loopback. The program itself may not
 * make an AF_INET socket at all, so a child of the test joins its namespace
 * (which needs CAP_SYS_ADMIN, as in CI) and tries. */
static void sealed_loopback_connect_fails_in_the_sandbox_netns(void **state)
{
	(void)state;
	require_sealed();
	int lsock = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_true(lsock >= 0);
	struct sockaddr_in sa = {.sin_family = AF_INET,
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	assert_int_equal(bind(lsock, (struct sockaddr *)&sa, sizeof sa), 0);
	assert_int_equal(listen(lsock, 1), 0);
	socklen_t slen = sizeof sa;
	assert_int_equal(getsockname(lsock, (struct sockaddr *)&sa, &slen), 0);

	struct run r;
	run_init(&r, SEALED);
	run_args(&r, "wait", "exit", "0", NULL);
	assert_apf_ok(run_spawn(&r));
	assert_true(pump_until(&r, "ready", 10));
	char nspath[64];
	fmt(nspath, sizeof nspath, "/proc/%d/ns/net",
		 (int)apf_sandbox_pid(r.sb));
	int nsfd = open(nspath, O_RDONLY | O_CLOEXEC);
	assert_true(nsfd >= 0);

	/* Control: the listener is reachable from the host's namespace. */
	int c = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_int_equal(connect(c, (struct sockaddr *)&sa, sizeof sa), 0);
	close(c);

	pid_t child = fork();
	assert_true(child >= 0);
	if (child == 0) {
		if (setns(nsfd, CLONE_NEWNET) < 0)
			_exit(errno == EPERM ? 10 : 11);
		int s = socket(AF_INET, SOCK_STREAM, 0);
		if (s < 0)
			_exit(12);
		int rc = connect(s, (struct sockaddr *)&sa, sizeof sa);
		_exit(rc == 0 ? 13 : 0);
	}
	int st;
	assert_int_equal(waitpid(child, &st, 0), child);
	close(nsfd);
	close(lsock);
	assert_int_equal(write(r.in_w, "g", 1), 1);
	finish(&r);
	assert_outcome(&r, APF_SANDBOX_EXITED);
	run_free(&r);
	assert_true(WIFEXITED(st));
	if (WEXITSTATUS(st) == 10)
		SKIP_BECAUSE("joining the sandbox's network namespace needs "
			     "CAP_SYS_ADMIN");
	assert_int_equal(WEXITSTATUS(st), 0);
}

static void sealed_program_is_pid_ones_child(void **state)
{
	(void)state;
	require_sealed();
	struct run r;
	run_init(&r, SEALED);
	run_action(&r, "view", NULL, NULL, NULL);
	assert_outcome(&r, APF_SANDBOX_EXITED);
	assert_string_equal(value(&r, "pid"), "2");
	assert_string_equal(value(&r, "ppid"), "1");
	/* /proc (hidepid=2) shows a process only what it may trace: not
	 * init, which is another user (a root supervisor's) or non-dumpable
	 * (an unprivileged one's). */
	assert_string_equal(value(&r, "procs"), "2");
	assert_true(apf_sandbox_pid(r.sb) != 2); /* we number it our way */
	run_free(&r);
}

static void program_has_no_privileges_and_only_its_limits_and_fds(void **state)
{
	(void)state;
	require_sealed();
	struct run r;
	run_init(&r, SEALED);
	r.limits.address_space = 512ull << 20;
	r.limits.open_files = 64;
	/* A descriptor the test did not pass must not reach the program. */
	int leaked = open("/dev/null", O_RDONLY);
	assert_true(leaked >= 3);
	run_action(&r, "view", NULL, NULL, NULL);
	close(leaked);
	assert_outcome(&r, APF_SANDBOX_EXITED);
	assert_string_equal(value(&r, "NoNewPrivs"), "1");
	assert_string_equal(value(&r, "Seccomp"), "2");
	assert_string_equal(value(&r, "CapEff"), "0000000000000000");
	assert_string_equal(value(&r, "CapBnd"), "0000000000000000");
	assert_string_equal(value(&r, "rlimit_as"), "536870912");
	assert_string_equal(value(&r, "rlimit_nofile"), "64");
	assert_string_equal(value(&r, "rlimit_core"), "0");
	/* 0-2 as passed, 3 the directory being listed */
	assert_string_equal(value(&r, "fds"), "0 1 2 3");
	run_free(&r);
}

/* ---- faults ------------------------------------------------------------- */

static void inet_socket_is_a_named_fault(void **state)
{
	(void)state;
	require_sealed();
	struct run r;
	run_init(&r, SEALED);
	run_action(&r, "inet", NULL, NULL, NULL);
	assert_fault(&r, "socket(AF_INET, SOCK_STREAM, 0)");
	assert_null(value(&r, "socket")); /* it never got an answer */
	run_free(&r);
}

static void reading_a_key_outside_the_policy_is_a_named_fault(void **state)
{
	(void)state;
	require_sealed();
	struct run r;
	run_init(&r, SEALED);
	testlib_write_str(r.tmp, "keys/default.key.pem",
			  "-----BEGIN PRIVATE KEY-----\n");
	char key[PATH_MAX + 32], want[PATH_MAX + 64];
	fmt(key, sizeof key, "%s/keys/default.key.pem", r.tmp);
	run_action(&r, "read", key, NULL, NULL);
	fmt(want, sizeof want, "openat(\"%s\", O_RDONLY) outside the sandbox",
		 key);
	assert_fault(&r, want);
	assert_null(value(&r, "read"));
	run_free(&r);
}

static void writing_into_a_read_only_mount_is_a_named_fault(void **state)
{
	(void)state;
	require_sealed();
	struct run r;
	run_init(&r, SEALED);
	testlib_write_str(r.tmp, "data/train.idx", "data");
	char data[PATH_MAX + 8];
	fmt(data, sizeof data, "%s/data", r.tmp);
	add_mount(&r, data, "/data", APF_SANDBOX_READ, 0);
	run_action(&r, "write", "/data/train.idx", NULL, NULL);
	assert_fault(&r, "openat(\"/data/train.idx\", O_WRONLY|O_CREAT|O_TRUNC) "
			 "writes to a read-only path");
	char host_file[PATH_MAX + 32], *content;
	size_t len;
	fmt(host_file, sizeof host_file, "%s/train.idx", data);
	assert_apf_ok(apf_file_read(&content, &len, host_file, 100));
	assert_string_equal(content, "data");
	free(content);
	run_free(&r);
}

/* The supervisor judges a path where it leads - through the cwd, "..",
 * symlinks and /proc's magic links - and names it as written. */
static void paths_are_judged_where_they_lead(void **state)
{
	(void)state;
	require_sealed();
	static const struct {
		const char *action, *arg, *arg2;
		const char *fault; /* NULL: allowed */
	} cases[] = {
		{"read", "../../../etc/shadow", NULL,
		 "openat(\"/etc/shadow\", O_RDONLY) outside the sandbox"},
		{"read", "/proc/self/root/etc/shadow", NULL,
		 "openat(\"/proc/self/root/etc/shadow\", O_RDONLY) outside the "
		 "sandbox (\"/etc/shadow\")"},
		{"read", "/proc/1/environ", NULL,
		 "openat(\"/proc/1/environ\", O_RDONLY) outside the sandbox"},
		{"linkwrite", "/usr/include/stdio.h", "/scratch/l",
		 "openat(\"/scratch/l\", O_WRONLY|O_CREAT|O_TRUNC) writes to a "
		 "read-only path (\"/usr/include/stdio.h\")"},
		{"linkwrite", "/proc/self/root/opt/helpers", "/scratch/up",
		 "openat(\"/scratch/up\", O_WRONLY|O_CREAT|O_TRUNC) writes to a "
		 "read-only path (\"/opt/helpers\")"},
		{"read", "/proc/self/status", NULL, NULL},
		{"read", "/proc/thread-self/comm", NULL, NULL},
		{"read", "/dev/urandom", NULL, NULL},
		{"write", "/dev/null", NULL, NULL},
		{"write", "/scratch/../scratch/./f", NULL, NULL},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		struct run r;
		run_init(&r, SEALED);
		run_action(&r, cases[i].action, cases[i].arg, cases[i].arg2, NULL);
		if (cases[i].fault) {
			assert_fault(&r, cases[i].fault);
		} else {
			assert_outcome(&r, APF_SANDBOX_EXITED);
			const char *v = value(&r, cases[i].action[0] == 'r' ? "read"
								      : "write");
			if (!v || strncmp(v, "ok", 2) != 0)
				fail_msg("%s %s: %s", cases[i].action, cases[i].arg,
					 v ? v : "(nothing)");
		}
		run_free(&r);
	}
}

static void fork_bomb_when_locked_is_a_named_fault(void **state)
{
	(void)state;
	require_sealed();
	struct run r;
	run_init(&r, SEALED);
	run_locked(&r, "fork", NULL);
	assert_fault(&r, "creates a process in the locked phase");
	assert_null(value(&r, "forked"));
	run_free(&r);
}

static void fork_bomb_in_setup_hits_the_spawn_limit(void **state)
{
	(void)state;
	require_sealed();
	struct run r;
	run_init(&r, SEALED);
	r.limits.spawns = 20;
	run_action(&r, "fork", NULL, NULL, NULL);
	assert_fault(&r, "exceeds the limit of 20 processes and threads");
	run_free(&r);
}

static void thread_when_locked_is_a_named_fault(void **state)
{
	(void)state;
	require_sealed();
	struct run r;
	run_init(&r, SEALED);
	run_locked(&r, "thread", NULL);
	assert_fault(&r, "creates a thread in the locked phase");
	assert_non_null(strstr(r.end.reason, "CLONE_THREAD"));
	assert_null(value(&r, "thread"));
	run_free(&r);
}

static void thread_in_setup_is_allowed(void **state)
{
	(void)state;
	require_sealed();
	struct run r;
	run_init(&r, SEALED);
	run_action(&r, "thread", NULL, NULL, NULL);
	assert_outcome(&r, APF_SANDBOX_EXITED);
	assert_string_equal(value(&r, "thread"), "ok");
	run_free(&r);
}

static void ptrace_is_a_named_fault(void **state)
{
	(void)state;
	require_sealed();
	struct run r;
	run_init(&r, SEALED);
	run_action(&r, "ptrace", NULL, NULL, NULL);
	assert_fault(&r, "ptrace(PTRACE_TRACEME, 0) is forbidden");
	run_free(&r);
}

static void mount_is_a_named_fault(void **state)
{
	(void)state;
	require_sealed();
	struct run r;
	run_init(&r, SEALED);
	run_action(&r, "mount", NULL, NULL, NULL);
	assert_fault(&r, "mount(\"none\", \"/mnt\", \"tmpfs\", 0x0) is forbidden");
	run_free(&r);
}

static void syscall_newer_than_the_filter_is_a_named_fault(void **state)
{
	(void)state;
	require_sealed();
	struct run r;
	run_init(&r, SEALED);
	run_action(&r, "nr", "1000", NULL, NULL);
	assert_fault(&r, "syscall 1000 is unknown to the sandbox");
	run_free(&r);
}

static void locking_with_a_process_left_over_is_a_fault(void **state)
{
	(void)state;
	require_sealed();
	struct run r;
	run_init(&r, SEALED);
	run_args(&r, "daemon", NULL, NULL, NULL);
	assert_apf_ok(run_spawn(&r));
	assert_true(pump_until(&r, "forked", 10));
	assert_int_equal(apf_sandbox_set_phase(r.sb, APF_SANDBOX_LOCKED),
			 APF_EABORT);
	finish(&r);
	assert_fault(&r, "still runs when the sandbox is locked");
	run_free(&r);
}

/* 1 if a live process remains with this pid namespace (sealed) or in this
 * process group (unsealed). Zombies are dead: who reaps them is the host's
 * init's business. */
static int sandbox_remains(enum apf_sandbox_mode mode, ino_t ns, pid_t pgrp)
{
	DIR *d = opendir("/proc");
	assert_non_null(d);
	struct dirent *de;
	int found = 0;
	while (!found && (de = readdir(d))) {
		char path[300], buf[512];
		if (de->d_name[0] < '0' || de->d_name[0] > '9')
			continue;
		fmt(path, sizeof path, "/proc/%s/stat", de->d_name);
		int fd = open(path, O_RDONLY | O_CLOEXEC);
		ssize_t n = fd >= 0 ? read(fd, buf, sizeof buf - 1) : -1;
		if (fd >= 0)
			close(fd);
		if (n <= 0)
			continue;
		buf[n] = 0;
		char state;
		int ppid, pg;
		if (sscanf(strrchr(buf, ')') + 1, " %c %d %d", &state, &ppid,
			   &pg) != 3 || state == 'Z' || state == 'X')
			continue;
		if (mode == SEALED) {
			struct stat st;
			fmt(path, sizeof path, "/proc/%s/ns/pid", de->d_name);
			found = stat(path, &st) == 0 && st.st_ino == ns;
		} else {
			found = pg == pgrp;
		}
	}
	closedir(d);
	return found;
}

/* What the program started in its setup phase ends with it. */
static void leftover_processes_end_with_the_program(void **state)
{
	(void)state;
	for (int mode = SEALED; mode <= UNSEALED; mode++) {
		if (mode == SEALED)
			require_sealed();
		else
			require_unsealed();
		struct run r;
		run_init(&r, (enum apf_sandbox_mode)mode);
		run_args(&r, "daemon", NULL, NULL, NULL);
		assert_apf_ok(run_spawn(&r));
		assert_true(pump_until(&r, "forked", 10));
		pid_t pid = apf_sandbox_pid(r.sb);
		char path[64];
		struct stat st;
		fmt(path, sizeof path, "/proc/%d/ns/pid", (int)pid);
		assert_int_equal(stat(path, &st), 0);
		assert_true(sandbox_remains((enum apf_sandbox_mode)mode, st.st_ino,
					    pid));
		assert_int_equal(write(r.in_w, "g", 1), 1);
		finish(&r);
		assert_outcome(&r, APF_SANDBOX_EXITED);
		/* Killed processes linger for a moment before they are gone. */
		uint64_t deadline = apf_now_ns() + 2000000000ull;
		while (sandbox_remains((enum apf_sandbox_mode)mode, st.st_ino, pid) &&
		       apf_now_ns() < deadline)
			usleep(1000);
		assert_false(sandbox_remains((enum apf_sandbox_mode)mode, st.st_ino,
					     pid));
		run_free(&r);
	}
}

/* ---- what setup allows -------------------------------------------------- */

static void compiler_runs_in_setup_and_its_output_runs(void **state)
{
	(void)state;
	require_sealed();
	if (access("/usr/bin/cc", X_OK) != 0)
		SKIP_BECAUSE("no /usr/bin/cc on this machine");
	struct run r;
	run_init(&r, SEALED);
	testlib_write_str(r.tmp, "src/hello.c",
			  "#include <stdio.h>\n"
			  "int main(void) {\n"
			  "\tputs(\"hello from the sandbox\");\n"
			  "\treturn 0;\n"
			  "}\n");
	char src[PATH_MAX + 8];
	fmt(src, sizeof src, "%s/src", r.tmp);
	add_mount(&r, src, "/src", APF_SANDBOX_READ, 0);
	/* Through the dynamic loader: the linker's chmod of its output is
	 * refused (a metadata change), so the program is not executable
	 * itself; a shared object, what apf builds, needs no mode. */
	char loader[64] = "/lib64/ld-linux-x86-64.so.2";
	if (access(loader, X_OK) != 0)
		SKIP_BECAUSE("no %s on this machine", loader);
	static char cmd[256];
	fmt(cmd, sizeof cmd,
	    "/usr/bin/cc -O1 -o /scratch/hello /src/hello.c && %s /scratch/hello",
	    loader);
	r.argv[0] = "/bin/sh";
	r.argv[1] = "-c";
	r.argv[2] = cmd;
	r.argv[3] = NULL;
	assert_apf_ok(run_spawn(&r));
	finish(&r);
	assert_outcome(&r, APF_SANDBOX_EXITED);
	assert_int_equal(r.end.exit_code, 0);
	assert_non_null(strstr(r.out, "hello from the sandbox\n"));
	run_free(&r);
}

/* ---- freezing ----------------------------------------------------------- */

/* The state letter of every thread of pid, as one string. */
static void thread_states(pid_t pid, char *out, size_t size)
{
	char path[64];
	size_t n = 0;
	fmt(path, sizeof path, "/proc/%d/task", (int)pid);
	DIR *d = opendir(path);
	assert_non_null(d);
	struct dirent *de;
	while ((de = readdir(d)) && n + 1 < size) {
		if (de->d_name[0] == '.')
			continue;
		char stat[PATH_MAX], *text;
		size_t len;
		fmt(stat, sizeof stat, "%s/%s/stat", path, de->d_name);
		assert_apf_ok(apf_file_read(&text, &len, stat, 4096));
		out[n++] = strrchr(text, ')')[2];
		free(text);
	}
	out[n] = 0;
	closedir(d);
}

static void stop_freezes_every_thread_and_cont_resumes_them(void **state)
{
	(void)state;
	require_sealed();
	struct run r;
	run_init(&r, SEALED);
	run_args(&r, "spin", "3", NULL, NULL);
	assert_apf_ok(run_spawn(&r));
	assert_true(pump_until(&r, "spinning", 10));
	pid_t pid = apf_sandbox_pid(r.sb);
	char states[64];

	assert_apf_ok(apf_sandbox_stop(r.sb));
	thread_states(pid, states, sizeof states);
	assert_int_equal(strlen(states), 4); /* main + 3 spinners */
	for (const char *s = states; *s; s++)
		if (*s != 'T' && *s != 't')
			fail_msg("thread states after stop: %s", states);

	assert_apf_ok(apf_sandbox_cont(r.sb));
	uint64_t deadline = apf_now_ns() + 2000000000ull;
	int running;
	do {
		thread_states(pid, states, sizeof states);
		running = 0;
		for (const char *s = states; *s; s++)
			running += *s == 'R';
	} while (running < 1 && apf_now_ns() < deadline);
	for (const char *s = states; *s; s++)
		if (*s == 'T' || *s == 't')
			fail_msg("thread states after cont: %s", states);
	assert_true(running >= 1);

	assert_int_equal(write(r.in_w, "g", 1), 1);
	finish(&r);
	assert_outcome(&r, APF_SANDBOX_EXITED);
	run_free(&r);
}

/* ---- how it ended ------------------------------------------------------- */

static void allocation_past_rlimit_as_is_memory_limit(void **state)
{
	(void)state;
	require_sealed();
	static const char *const actions[] = {"oom", "oom-exit"};
	for (size_t i = 0; i < 2; i++) {
		struct run r;
		run_init(&r, SEALED);
		r.limits.address_space = 128ull << 20;
		run_action(&r, actions[i], NULL, NULL, NULL);
		assert_outcome(&r, APF_SANDBOX_MEMORY_LIMIT);
		assert_non_null(strstr(r.end.reason, "memory limit exceeded"));
		assert_non_null(strstr(r.end.reason,
				       i == 0 ? "SIGABRT" : "exit code 3"));
		assert_int_equal(r.end.memory_limit, 128ull << 20);
		assert_true(r.end.peak_vm >= (112ull << 20));
		run_free(&r);
	}
}

static void segfault_is_a_crash(void **state)
{
	(void)state;
	require_sealed();
	struct run r;
	run_init(&r, SEALED);
	r.limits.address_space = 256ull << 20;
	run_action(&r, "segv", NULL, NULL, NULL);
	assert_outcome(&r, APF_SANDBOX_CRASHED);
	assert_int_equal(r.end.signal, SIGSEGV);
	assert_string_equal(r.end.reason, "crashed: SIGSEGV");
	run_free(&r);
}

static void writing_past_rlimit_fsize_is_file_size_limit(void **state)
{
	(void)state;
	require_sealed();
	struct run r;
	run_init(&r, SEALED);
	r.limits.file_size = 1 << 20;
	run_action(&r, "bigfile", "/scratch/big", NULL, NULL);
	assert_outcome(&r, APF_SANDBOX_FILE_LIMIT);
	assert_int_equal(r.end.signal, SIGXFSZ);
	assert_null(value(&r, "bigfile"));
	run_free(&r);
}

static void exit_code_is_reported(void **state)
{
	(void)state;
	require_sealed();
	struct run r;
	run_init(&r, SEALED);
	run_action(&r, "exit", "7", NULL, NULL);
	assert_outcome(&r, APF_SANDBOX_EXITED);
	assert_int_equal(r.end.exit_code, 7);
	assert_string_equal(r.end.reason, "exited with code 7");
	assert_true(r.end.wall_ns > 0);
	assert_true(r.end.peak_rss > 0);
	run_free(&r);
}

static void kill_by_the_runner_is_killed(void **state)
{
	(void)state;
	require_sealed();
	struct run r;
	run_init(&r, SEALED);
	run_args(&r, "wait", "exit", "0", NULL);
	assert_apf_ok(run_spawn(&r));
	assert_true(pump_until(&r, "ready", 10));
	assert_apf_ok(apf_sandbox_kill(r.sb));
	finish(&r);
	assert_outcome(&r, APF_SANDBOX_KILLED);
	assert_string_equal(r.end.reason, "killed by the runner");
	run_free(&r);
}

static void missing_program_is_a_setup_failure(void **state)
{
	(void)state;
	require_sealed();
	struct run r;
	run_init(&r, SEALED);
	r.argv[0] = "/opt/helpers/no-such-program";
	r.argv[1] = NULL;
	assert_apf_ok(run_spawn(&r));
	finish(&r);
	assert_outcome(&r, APF_SANDBOX_SETUP_FAILED);
	assert_non_null(strstr(r.end.reason, "execve /opt/helpers/no-such-program"));
	assert_non_null(strstr(r.end.reason, strerror(ENOENT)));
	run_free(&r);
}

/* ---- unsealed ----------------------------------------------------------- */

static void unsealed_runs_without_namespaces(void **state)
{
	(void)state;
	require_unsealed();
	struct run r;
	run_init(&r, UNSEALED);
	run_action(&r, "view", NULL, NULL, NULL);
	assert_outcome(&r, APF_SANDBOX_EXITED);
	char pid[32], host[256];
	fmt(pid, sizeof pid, "%d", (int)apf_sandbox_pid(r.sb));
	assert_string_equal(value(&r, "pid"), pid);
	assert_int_equal(gethostname(host, sizeof host), 0);
	assert_string_equal(value(&r, "hostname"), host);
	/* but the same filter and limits */
	assert_string_equal(value(&r, "NoNewPrivs"), "1");
	assert_string_equal(value(&r, "Seccomp"), "2");
	assert_string_equal(value(&r, "CapEff"), "0000000000000000");
	assert_string_equal(value(&r, "rlimit_core"), "0");
	run_free(&r);
}

static void unsealed_still_names_forbidden_calls(void **state)
{
	(void)state;
	require_unsealed();
	struct run r;
	run_init(&r, UNSEALED);
	run_action(&r, "inet", NULL, NULL, NULL);
	assert_fault(&r, "socket(AF_INET, SOCK_STREAM, 0)");
	run_free(&r);

	run_init(&r, UNSEALED);
	testlib_write_str(r.tmp, "keys/k.pem", "secret\n");
	char key[PATH_MAX + 16], want[PATH_MAX + 64];
	fmt(key, sizeof key, "%s/keys/k.pem", r.tmp);
	run_action(&r, "read", key, NULL, NULL);
	fmt(want, sizeof want, "openat(\"%s\", O_RDONLY) outside the sandbox",
		 key);
	assert_fault(&r, want);
	assert_null(value(&r, "read")); /* the secret was never read */
	run_free(&r);

	run_init(&r, UNSEALED);
	run_locked(&r, "fork", NULL);
	assert_fault(&r, "creates a process in the locked phase");
	run_free(&r);
}

static void unsealed_scratch_is_writable(void **state)
{
	(void)state;
	require_unsealed();
	struct run r;
	run_init(&r, UNSEALED);
	char file[PATH_MAX + 16];
	fmt(file, sizeof file, "%s/out.bin", r.scratch);
	run_action(&r, "write", file, NULL, NULL);
	assert_outcome(&r, APF_SANDBOX_EXITED);
	assert_string_equal(value(&r, "write"), "ok");
	assert_int_equal(access(file, F_OK), 0);
	run_free(&r);
}

/* ---- the memory limit --------------------------------------------------- */

#define MIB (1ull << 20)

static void use_memhog(struct run *r)
{
	*strrchr(r->prog, '/') = 0;
	size_t n = strlen(r->prog);
	fmt(r->prog + n, sizeof r->prog - n, "/memhog");
	r->argv[0] = r->prog;
}

/* As the runner sets them: the memory limit, and RLIMIT_AS at the same. */
static void set_memory(struct run *r, uint64_t bytes)
{
	r->limits.memory = bytes;
	r->limits.address_space = bytes;
}

static int counted_by_cgroup(const struct run *r)
{
	return !strncmp(r->mechanism, "cgroup", 6);
}

/* Locks the sandbox once the program is ready, lets it go, runs it out. */
static void lock_and_go(struct run *r)
{
	assert_true(pump_until(r, "ready", 10));
	assert_apf_ok(apf_sandbox_set_phase(r->sb, APF_SANDBOX_LOCKED));
	assert_int_equal(write(r->in_w, "g", 1), 1);
	finish(r);
}

static void assert_ended_within(const struct run *r, int seconds)
{
	if (r->end.wall_ns > (uint64_t)seconds * 1000000000ull)
		fail_msg("the sandbox took %.1f s to end (%s)",
			 (double)r->end.wall_ns / 1e9, r->end.reason);
}

/* A cgroup's OOM kill, named as such, with the peak it saw. */
static void assert_cgroup_memory_limit(const struct run *r, uint64_t limit)
{
	assert_outcome((struct run *)r, APF_SANDBOX_MEMORY_LIMIT);
	char want[64];
	fmt(want, sizeof want, "of %llu MiB (%s", (unsigned long long)(limit >> 20),
	    r->mechanism);
	if (!strstr(r->end.reason, "memory limit exceeded: peak ") ||
	    !strstr(r->end.reason, want))
		fail_msg("reason '%s' does not say '%s'", r->end.reason, want);
	assert_true(r->end.memory_peak >= limit - limit / 4);
	print_message("%s\n", r->end.reason);
}

/* The runner passes every memfd before it locks: one made after that is a
 * fault, whatever counts the memory (here: before the 2 GiB fallocate). */
static void memfd_made_after_lock_is_a_named_fault(void **state)
{
	(void)state;
	require_sealed();
	struct run r;
	run_init(&r, SEALED);
	use_memhog(&r);
	set_memory(&r, 256 * MIB);
	run_locked(&r, "memfd", "2048");
	assert_string_not_equal(r.mechanism, "none");
	assert_fault(&r, "memfd_create(\"memhog\", 0x1) in the locked phase");
	assert_null(value(&r, "memfd"));
	assert_ended_within(&r, 10);
	run_free(&r);
}

/* A memfd made in the setup phase and filled (fallocate, never mapped, so
 * RLIMIT_AS never sees it) after the lock: the cgroup counts its pages. */
static void memfd_filled_after_lock_is_a_memory_limit(void **state)
{
	(void)state;
	require_sealed();
	struct run r;
	run_init(&r, SEALED);
	use_memhog(&r);
	set_memory(&r, 256 * MIB);
	run_args(&r, "premade", "wait", "memfd", "2048");
	assert_apf_ok(run_spawn(&r));
	if (!counted_by_cgroup(&r)) {
		run_free(&r);
		SKIP_BECAUSE("the memory limit is counted by %s here, which does "
			     "not count a memfd made before the lock (sandbox.h)",
			     r.mechanism);
	}
	lock_and_go(&r);
	assert_cgroup_memory_limit(&r, 256 * MIB);
	assert_null(value(&r, "memfd"));
	assert_ended_within(&r, 10);
	run_free(&r);
}

/* A scratch larger than the limit, filled: the cgroup counts the tmpfs
 * pages; the fallback cuts the scratch to half the limit. Either way it is
 * contained, and run_free checks that no cgroup is left charged. */
static void scratch_filled_past_the_limit_is_contained(void **state)
{
	(void)state;
	require_sealed();
	struct run r;
	run_init(&r, SEALED);
	use_memhog(&r);
	set_memory(&r, 128 * MIB);
	r.scratch_bytes = 512 * MIB;
	run_args(&r, "wait", "scratch", "/scratch", "400");
	assert_apf_ok(run_spawn(&r));
	lock_and_go(&r);
	if (counted_by_cgroup(&r)) {
		assert_cgroup_memory_limit(&r, 128 * MIB);
		assert_null(value(&r, "scratch"));
	} else {
		assert_outcome(&r, APF_SANDBOX_EXITED);
		const char *v = value(&r, "scratch");
		assert_non_null(v);
		assert_true(strtoull(v, NULL, 10) <= 64);
		assert_non_null(strstr(v, strerror(ENOSPC)));
		/* RLIMIT_AS: the limit less the scratch's 64 MiB */
		assert_int_equal(r.end.memory_limit, 64 * MIB);
	}
	assert_ended_within(&r, 20);
	run_free(&r);
}

static void honest_program_under_the_memory_limit(enum apf_sandbox_mode mode)
{
	struct run r;
	run_init(&r, mode);
	use_memhog(&r);
	set_memory(&r, 256 * MIB);
	run_locked(&r, "anon", "64");
	assert_outcome(&r, APF_SANDBOX_EXITED);
	assert_int_equal(r.end.exit_code, 0);
	assert_string_equal(value(&r, "anon"), "ok");
	print_message("memory limit counted by %s\n", r.mechanism);
	if (counted_by_cgroup(&r)) {
		assert_true(r.cgroup[0] != 0);
		assert_true(r.end.memory_peak >= 64 * MIB);
		assert_true(r.end.memory_peak < 256 * MIB);
		assert_int_equal(r.end.memory_limit, 256 * MIB);
	} else {
		assert_string_equal(r.mechanism, "rlimit");
		assert_int_equal(r.end.memory_limit,
				 mode == SEALED ? 224 * MIB : 256 * MIB);
	}
	run_free(&r);
}

static void honest_program_under_the_memory_limit_exits_0(void **state)
{
	(void)state;
	require_sealed();
	honest_program_under_the_memory_limit(SEALED);
}

static void unsealed_honest_program_under_the_memory_limit_exits_0(void **state)
{
	(void)state;
	require_unsealed();
	honest_program_under_the_memory_limit(UNSEALED);
}

/* SysV shared memory: counted where a cgroup counts (sealed, its segments
 * die with the IPC namespace), refused where nothing would. */
static void sysv_shm_is_counted_or_refused(void **state)
{
	(void)state;
	require_sealed();
	struct run r;
	run_init(&r, SEALED);
	use_memhog(&r);
	r.limits.memory = 256 * MIB; /* no RLIMIT_AS: shmat maps it all */
	run_locked(&r, "shm", "2048");
	if (counted_by_cgroup(&r))
		assert_cgroup_memory_limit(&r, 256 * MIB);
	else
		assert_fault(&r, "shmget(0x0, 2147483648, 0x380) creates SysV "
				 "shared memory that the memory limit cannot count");
	assert_null(value(&r, "shm"));
	assert_ended_within(&r, 10);
	run_free(&r);
}

static void unsealed_shmget_is_a_named_fault(void **state)
{
	(void)state;
	require_unsealed();
	struct run r;
	run_init(&r, UNSEALED);
	use_memhog(&r);
	run_action(&r, "shm", "1", NULL, NULL);
	assert_fault(&r, "that would outlive the sandbox");
	run_free(&r);
}

/* Every test's run_free checks its own sandbox; this scans the parent once
 * more after them all. */
static void no_cgroup_is_left_behind(void **state)
{
	(void)state;
	if (!cgroup_parent[0])
		SKIP_BECAUSE("no sandbox had a cgroup here");
	print_message("scanned %s\n", cgroup_parent);
	assert_int_equal(our_cgroups_left(), 0);
}

/* ---- the interface ------------------------------------------------------ */

/* Yes, or no with one line that says why. */
/* ---- the program's user, and what it can change ---------------------------- */

static void sealed_program_is_unprivileged_with_no_capability(void **state)
{
	(void)state;
	require_sealed();
	struct run r;
	run_init(&r, SEALED);
	run_args(&r, "wait", "ids", NULL, NULL);
	assert_apf_ok(run_spawn(&r));
	assert_true(pump_until(&r, "ready", 10));
	/* init, a fork of this process, does not show our command line to
	 * anyone who reads /proc/<init>/cmdline (the program's path check
	 * and hidepid keep it from reading it; this is the third wall). */
	char path[64], stat_line[512], cmdline[4096];
	fmt(path, sizeof path, "/proc/%d/stat", (int)apf_sandbox_pid(r.sb));
	FILE *f = fopen(path, "r");
	assert_non_null(f);
	assert_non_null(fgets(stat_line, sizeof stat_line, f));
	fclose(f);
	int ppid = 0;
	assert_int_equal(sscanf(strrchr(stat_line, ')') + 1, " %*c %d", &ppid), 1);
	fmt(path, sizeof path, "/proc/%d/cmdline", ppid);
	int fd = open(path, O_RDONLY);
	assert_true(fd >= 0);
	ssize_t n = read(fd, cmdline, sizeof cmdline - 1);
	close(fd);
	assert_true(n > 0);
	for (ssize_t i = 0; i < n; i++)
		cmdline[i] = cmdline[i] ? cmdline[i] : ' ';
	cmdline[n] = 0;
	if (strstr(cmdline, "test_sandbox"))
		fail_msg("init's command line is the supervisor's: %s", cmdline);
	assert_non_null(strstr(cmdline, "apf-sandbox-init"));
	assert_int_equal(write(r.in_w, "g", 1), 1);
	finish(&r);
	assert_outcome(&r, APF_SANDBOX_EXITED);
	assert_string_equal(value(&r, "uid"), "65534");
	assert_string_equal(value(&r, "euid"), "65534");
	assert_string_equal(value(&r, "gid"), "65534");
	if (geteuid() == 0)
		assert_string_equal(value(&r, "groups"), "0");
	assert_string_equal(value(&r, "CapEff"), "0000000000000000");
	assert_string_equal(value(&r, "CapPrm"), "0000000000000000");
	assert_string_equal(value(&r, "CapAmb"), "0000000000000000");
	/* Its cgroup namespace is rooted at its own cgroup: every line of
	 * /proc/self/cgroup ends in ":/" and names nothing of the host's
	 * tree (nor the supervisor's pid, which the cgroup's name holds). */
	const char *cg = value(&r, "cgroup");
	assert_non_null(cg);
	char copy[2048];
	fmt(copy, sizeof copy, "%s", cg);
	for (char *line = strtok(copy, "|"); line; line = strtok(NULL, "|"))
		if (strlen(line) < 2 || strcmp(line + strlen(line) - 2, ":/"))
			fail_msg("/proc/self/cgroup line '%s' names a cgroup", line);
	run_free(&r);
}

/* A mode, owner, time or attribute change is never made: EPERM before the
 * sandbox is locked (a linker's chmod of its output copes), a named fault
 * after. The host's /dev nodes, bound in, keep their mode, owner and times
 * whatever the program tries. */
static void metadata_changes_are_refused_then_faults(void **state)
{
	(void)state;
	require_sealed();
	struct stat before[2], after[2];
	assert_int_equal(stat("/dev/full", &before[0]), 0);
	assert_int_equal(stat("/dev/null", &before[1]), 0);
	static const char *const setup[] = {
		"fchmod:1", "fchown:1", "fsetxattr:1", "utimensat:1",
		"chattr:1", "chmod:/dev/full", "chown:/dev/null",
		"setxattr:/dev/full", "utimes:/dev/null", "mknod:/scratch/n",
		"chmod:/scratch"};
	for (size_t i = 0; i < sizeof setup / sizeof setup[0]; i++) {
		struct run r;
		run_init(&r, SEALED);
		run_action(&r, "meta", setup[i], NULL, NULL);
		assert_outcome(&r, APF_SANDBOX_EXITED);
		const char *v = value(&r, "meta");
		if (!v || !strstr(v, " -1 ") || !strstr(v, strerror(EPERM)))
			fail_msg("%s in setup: %s", setup[i], v ? v : "(nothing)");
		run_free(&r);
	}
	static const char *const locked[][2] = {
		{"fchmod:1", "fchmod(1, 04755) changes a file's metadata in the "
			     "locked phase"},
		{"chmod:/dev/full", "chmod(\"/dev/full\", 0600) changes a file's "
				    "metadata"},
		{"chattr:1", "ioctl(1, FS_IOC_SETFLAGS) changes a file's metadata"},
		{"utimensat:1", "utimensat(1, NULL) changes"},
	};
	for (size_t i = 0; i < sizeof locked / sizeof locked[0]; i++) {
		struct run r;
		run_init(&r, SEALED);
		run_locked(&r, "meta", locked[i][0]);
		assert_fault(&r, locked[i][1]);
		run_free(&r);
	}
	assert_int_equal(stat("/dev/full", &after[0]), 0);
	assert_int_equal(stat("/dev/null", &after[1]), 0);
	for (int i = 0; i < 2; i++) {
		assert_int_equal(after[i].st_mode, before[i].st_mode);
		assert_int_equal(after[i].st_uid, before[i].st_uid);
		assert_int_equal(after[i].st_gid, before[i].st_gid);
		assert_true(after[i].st_ctim.tv_sec == before[i].st_ctim.tv_sec &&
			    after[i].st_ctim.tv_nsec == before[i].st_ctim.tv_nsec);
	}
}

/* No descriptor of a host file or device crosses into a sandbox: it could
 * be reopened through /proc/self/fd, changed through its descriptor, and
 * its link names the host path. */
static void host_file_descriptors_are_refused(void **state)
{
	(void)state;
	char *tmp = testlib_tmpdir();
	char path[PATH_MAX];
	fmt(path, sizeof path, "%s/log", tmp);
	int file = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
	int null = open("/dev/null", O_WRONLY | O_CLOEXEC);
	assert_true(file >= 0 && null >= 0);
	int fds[] = {file, null};
	for (int i = 0; i < 2; i++) {
		const char *argv[] = {"/bin/true", NULL};
		struct apf_sandbox_fd f[] = {{fds[i], 1}};
		struct apf_sandbox_config cfg;
		memset(&cfg, 0, sizeof cfg);
		cfg.mode = SEALED;
		cfg.argv = argv;
		cfg.fds = f;
		cfg.nfds = 1;
		apf_sandbox *sb = NULL;
		assert_int_equal(apf_sandbox_spawn(&sb, &cfg), APF_EINPUT);
		assert_null(sb);
		assert_non_null(strstr(apf_error_message(), "a file or device of the host's"));
		apf_error_clear();
	}
	close(file);
	close(null);
	testlib_tmpdir_free(tmp);
}

/* The program's output reaches its log through a pipe: escaped for a
 * terminal (newlines and tabs kept), cut at the limit with a line saying
 * so, and nothing of it blocks the program. */
static void output_is_escaped_and_cut(void **state)
{
	(void)state;
	require_sealed();
	char *tmp = testlib_tmpdir();
	char log[PATH_MAX];
	fmt(log, sizeof log, "%s/trial.log", tmp);
	struct run r;
	run_init(&r, SEALED);
	run_args(&r, "emit", "200000", NULL, NULL);
	const char *envp[] = {"PATH=/usr/bin:/bin", NULL};
	struct apf_sandbox_config cfg;
	memset(&cfg, 0, sizeof cfg);
	cfg.mode = SEALED;
	cfg.argv = r.argv;
	cfg.envp = envp;
	cfg.mounts = r.mounts;
	cfg.nmounts = r.nmounts;
	cfg.scratch = r.scratch;
	cfg.output = log;
	cfg.output_max = 8192;
	assert_apf_ok(apf_sandbox_spawn(&r.sb, &cfg));
	assert_int_equal(apf_sandbox_wait(r.sb, 30000, &r.end), 1);
	r.ended = 1;
	assert_outcome(&r, APF_SANDBOX_EXITED);
	assert_int_equal(r.end.exit_code, 0);
	char *text = NULL;
	size_t len = 0;
	assert_apf_ok(apf_file_read(&text, &len, log, 1 << 20));
	assert_null(memchr(text, 0x1b, len));
	assert_null(memchr(text, 0x07, len));
	assert_null(memchr(text, '\r', len));
	assert_non_null(strstr(text, "\\x1b]0;owned\\x07\\x1b[2J\\x0d"
				     "\\xc2\\x9b\\xe2\\x80\\xae"
				     "tab\there\nline two\n"));
	assert_true(len < 8192 + 200);
	assert_non_null(strstr(text, "[apf: output cut after 8192 bytes;"));
	free(text);
	run_free(&r);
	testlib_tmpdir_free(tmp);
}

static void probe_answers_with_a_reason(void **state)
{
	(void)state;
	for (int mode = SEALED; mode <= UNSEALED; mode++) {
		int rc = apf_sandbox_probe((enum apf_sandbox_mode)mode);
		if (rc != 0) {
			assert_int_equal(rc, APF_EABORT);
			assert_int_equal(
				strncmp(apf_error_message(), "sandbox: ", 9), 0);
			assert_true(strlen(apf_error_message()) > 12);
			assert_null(strchr(apf_error_message(), '\n'));
		}
	}
}

static void bad_configurations_are_refused(void **state)
{
	(void)state;
	apf_sandbox *sb = NULL;
	const char *rel[] = {"sandboxee", NULL};
	const char *abs[] = {"/bin/true", NULL};
	struct apf_sandbox_config cfg;
	memset(&cfg, 0, sizeof cfg);
	cfg.argv = rel;
	assert_int_equal(apf_sandbox_spawn(&sb, &cfg), APF_EINPUT);
	assert_non_null(strstr(apf_error_message(), "absolute"));

	cfg.argv = abs;
	struct apf_sandbox_mount over_proc = {"/usr", "/proc/x", APF_SANDBOX_READ, 0,
					      0};
	cfg.mounts = &over_proc;
	cfg.nmounts = 1;
	assert_int_equal(apf_sandbox_spawn(&sb, &cfg), APF_EINPUT);
	assert_non_null(strstr(apf_error_message(), "/proc"));

	struct apf_sandbox_mount missing = {"/no/such/dir", "/x", APF_SANDBOX_READ, 0,
					    0};
	cfg.mounts = &missing;
	assert_int_equal(apf_sandbox_spawn(&sb, &cfg), APF_EINPUT);
	cfg.mounts = NULL;
	cfg.nmounts = 0;

	struct apf_sandbox_fd twice[] = {{1, 1}, {2, 1}};
	cfg.fds = twice;
	cfg.nfds = 2;
	assert_int_equal(apf_sandbox_spawn(&sb, &cfg), APF_EINPUT);
	assert_null(sb);
}

static void outcome_names_are_stable(void **state)
{
	(void)state;
	assert_string_equal(apf_sandbox_outcome_name(APF_SANDBOX_EXITED), "exited");
	assert_string_equal(apf_sandbox_outcome_name(APF_SANDBOX_CRASHED), "crashed");
	assert_string_equal(apf_sandbox_outcome_name(APF_SANDBOX_FAULTED),
			    "sandbox_fault");
	assert_string_equal(apf_sandbox_outcome_name(APF_SANDBOX_MEMORY_LIMIT),
			    "memory_limit");
	assert_string_equal(apf_sandbox_outcome_name(APF_SANDBOX_SETUP_FAILED),
			    "setup_failed");
}

int main(void)
{
	/* The test's own SIGPIPE disposition must not leak into programs. */
	signal(SIGPIPE, SIG_IGN);
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(probe_answers_with_a_reason),
		cmocka_unit_test(bad_configurations_are_refused),
		cmocka_unit_test(outcome_names_are_stable),
		cmocka_unit_test(sealed_program_sees_only_its_mounts),
		cmocka_unit_test(sealed_read_only_mount_refuses_writes_despite_policy),
		cmocka_unit_test(sealed_root_and_proc_sys_are_read_only),
		cmocka_unit_test(sealed_network_is_a_lone_loopback_that_is_down),
		cmocka_unit_test(sealed_loopback_connect_fails_in_the_sandbox_netns),
		cmocka_unit_test(sealed_program_is_pid_ones_child),
		cmocka_unit_test(program_has_no_privileges_and_only_its_limits_and_fds),
		cmocka_unit_test(inet_socket_is_a_named_fault),
		cmocka_unit_test(reading_a_key_outside_the_policy_is_a_named_fault),
		cmocka_unit_test(writing_into_a_read_only_mount_is_a_named_fault),
		cmocka_unit_test(paths_are_judged_where_they_lead),
		cmocka_unit_test(fork_bomb_when_locked_is_a_named_fault),
		cmocka_unit_test(fork_bomb_in_setup_hits_the_spawn_limit),
		cmocka_unit_test(thread_when_locked_is_a_named_fault),
		cmocka_unit_test(thread_in_setup_is_allowed),
		cmocka_unit_test(ptrace_is_a_named_fault),
		cmocka_unit_test(mount_is_a_named_fault),
		cmocka_unit_test(syscall_newer_than_the_filter_is_a_named_fault),
		cmocka_unit_test(locking_with_a_process_left_over_is_a_fault),
		cmocka_unit_test(leftover_processes_end_with_the_program),
		cmocka_unit_test(compiler_runs_in_setup_and_its_output_runs),
		cmocka_unit_test(stop_freezes_every_thread_and_cont_resumes_them),
		cmocka_unit_test(allocation_past_rlimit_as_is_memory_limit),
		cmocka_unit_test(segfault_is_a_crash),
		cmocka_unit_test(writing_past_rlimit_fsize_is_file_size_limit),
		cmocka_unit_test(exit_code_is_reported),
		cmocka_unit_test(kill_by_the_runner_is_killed),
		cmocka_unit_test(missing_program_is_a_setup_failure),
		cmocka_unit_test(unsealed_runs_without_namespaces),
		cmocka_unit_test(unsealed_still_names_forbidden_calls),
		cmocka_unit_test(unsealed_scratch_is_writable),
		cmocka_unit_test(memfd_made_after_lock_is_a_named_fault),
		cmocka_unit_test(memfd_filled_after_lock_is_a_memory_limit),
		cmocka_unit_test(scratch_filled_past_the_limit_is_contained),
		cmocka_unit_test(honest_program_under_the_memory_limit_exits_0),
		cmocka_unit_test(unsealed_honest_program_under_the_memory_limit_exits_0),
		cmocka_unit_test(sysv_shm_is_counted_or_refused),
		cmocka_unit_test(unsealed_shmget_is_a_named_fault),
		cmocka_unit_test(no_cgroup_is_left_behind),
		cmocka_unit_test(sealed_program_is_unprivileged_with_no_capability),
		cmocka_unit_test(metadata_changes_are_refused_then_faults),
		cmocka_unit_test(host_file_descriptors_are_refused),
		cmocka_unit_test(output_is_escaped_and_cut),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
