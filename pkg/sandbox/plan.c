/*
 * plan.c: everything the sandbox's children need (struct plan), prepared
 * by the supervisor before the clone from the caller's configuration: the
 * program's argv, environment, descriptors and rlimits, the mounts of the
 * new root (each source resolved on the host, each target checked), the
 * scratch, the user and group maps, and the filter. Each path the program
 * may reach goes into the sandbox's policy (policy.c) as it is planned.
 */
#include "sandbox/internal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/capability.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

static char *join2(const char *a, const char *b)
{
	size_t la = strlen(a), lb = strlen(b);
	char *s = malloc(la + lb + 1);
	if (s) {
		memcpy(s, a, la);
		memcpy(s + la, b, lb + 1);
	}
	return s;
}

/* Bytes of regular files in a tree (for the root's size), or -1 when it
 * holds anything else or is too deep: the caller refuses such a copy. */
static long long tree_bytes(const char *path, int depth)
{
	struct stat st;
	if (lstat(path, &st) < 0)
		return -1;
	if (S_ISREG(st.st_mode))
		return (long long)st.st_size;
	if (!S_ISDIR(st.st_mode) || depth > 16)
		return -1;
	DIR *d = opendir(path);
	if (!d)
		return -1;
	long long total = 4096;
	struct dirent *e;
	while (total >= 0 && (e = readdir(d))) {
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		char *sub = join2(path, "/");
		char *full = sub ? join2(sub, e->d_name) : NULL;
		long long b = full ? tree_bytes(full, depth + 1) : -1;
		total = b < 0 ? -1 : total + b + 4096;
		free(sub);
		free(full);
	}
	closedir(d);
	return total;
}

void apf_sandbox_plan_free(struct plan *p)
{
	if (p->out_wfd > 0)
		close(p->out_wfd);
	p->out_wfd = -1;
	for (char **a = p->argv; a && *a; a++)
		free(*a);
	free(p->argv);
	for (char **e = p->envp; e && *e; e++)
		free(*e);
	free(p->envp);
	for (size_t i = 0; i < p->nmnts; i++) {
		free(p->mnts[i].src);
		free(p->mnts[i].dst);
	}
	free(p->mnts);
	free(p->scratch);
	free(p->cwd);
	free(p->prog.filter);
}

static char **copy_strv(const char *const *v)
{
	size_t n = 0;
	while (v && v[n])
		n++;
	char **out = calloc(n + 1, sizeof *out);
	if (!out)
		return NULL;
	for (size_t i = 0; i < n; i++)
		if (!(out[i] = apf_strdup(v[i]))) {
			for (size_t j = 0; j < i; j++)
				free(out[j]);
			free(out);
			return NULL;
		}
	return out;
}

/* An absolute, normalised path inside the sandbox that the caller may put
 * something on: not "/", not under the /proc and /dev we build ourselves. */
static int check_target(const char *what, const char *t, char *norm,
			size_t size)
{
	if (!t || t[0] != '/')
		return apf_error(APF_EINPUT, "sandbox", "%s %s: not an absolute path",
				 what, t ? t : "(null)");
	if (apf_sandbox_normalize(norm, size, t) < 0)
		return apf_error(APF_EINPUT, "sandbox", "%s %s: path too long",
				 what, t);
	if (strcmp(norm, t) != 0)
		return apf_error(APF_EINPUT, "sandbox",
				 "%s %s: not in normal form (%s)", what, t, norm);
	if (!strcmp(norm, "/"))
		return apf_error(APF_EINPUT, "sandbox", "%s: cannot be /", what);
	static const char *const ours[] = {"/proc", "/dev"};
	for (size_t i = 0; i < 2; i++) {
		size_t l = strlen(ours[i]);
		if (!strncmp(norm, ours[i], l) && (!norm[l] || norm[l] == '/'))
			return apf_error(APF_EINPUT, "sandbox",
					 "%s %s: %s is the sandbox's own", what,
					 t, ours[i]);
	}
	return 0;
}

static rlim_t lim(uint64_t v, uint64_t dflt)
{
	if (!v)
		v = dflt;
	return v ? (rlim_t)v : RLIM_INFINITY;
}

/* Root with what building the sandbox without a user namespace takes:
 * mounts, and switching the program's user. */
static int host_privileged(void)
{
	if (geteuid() != 0)
		return 0;
	struct __user_cap_header_struct h = {_LINUX_CAPABILITY_VERSION_3, 0};
	struct __user_cap_data_struct d[2];
	memset(d, 0, sizeof d);
	if (syscall(SYS_capget, &h, d) < 0)
		return 0;
	static const int need[] = {CAP_SYS_ADMIN, CAP_SETUID, CAP_SETGID,
				   CAP_SETPCAP};
	for (size_t i = 0; i < sizeof need / sizeof need[0]; i++)
		if (!(d[need[i] / 32].effective & (1u << (need[i] % 32))))
			return 0;
	return 1;
}

/* The program's RLIMIT_NOFILE: the descriptors it may hold, and so the
 * numbers the caller's descriptors may take. */
static uint64_t open_files_limit(const struct apf_sandbox_config *cfg)
{
	return cfg->limits.open_files ? cfg->limits.open_files : 256;
}

/* The descriptors the program gets (the caller's, and the output pipe as
 * its 1 and 2): each open, a pipe, socket or memfd, numbered once and below
 * the open-files limit. */
static int plan_fds(struct plan *p, const struct apf_sandbox_config *cfg,
		    apf_sandbox *sb)
{
	uint64_t nofile = open_files_limit(cfg);
	if (cfg->nfds + (cfg->output ? 2 : 0) > MAX_FDS)
		return apf_error(APF_EINPUT, "sandbox", "more than %d descriptors",
				 MAX_FDS);
	for (size_t i = 0; i < cfg->nfds; i++) {
		const struct apf_sandbox_fd *f = &cfg->fds[i];
		struct stat st;
		if (fcntl(f->fd, F_GETFD) < 0 || fstat(f->fd, &st) < 0)
			return apf_error(APF_EINPUT, "sandbox",
					 "descriptor %d is not open", f->fd);
		/* A memfd answers F_GET_SEALS; a file on a disk or a tmpfs,
		 * or a device, does not. */
		if (!S_ISFIFO(st.st_mode) && !S_ISSOCK(st.st_mode) &&
		    fcntl(f->fd, F_GET_SEALS) < 0)
			return apf_error(APF_EINPUT, "sandbox",
					 "descriptor %d is a file or device of "
					 "the host's: pass a pipe, a socket or a "
					 "memfd (the program's output: "
					 "config.output)",
					 f->fd);
		if (cfg->output && f->target <= 2 && f->target >= 1)
			return apf_error(APF_EINPUT, "sandbox",
					 "descriptor number %d given twice (the "
					 "output is 1 and 2)",
					 f->target);
		if (f->target < 0 || (uint64_t)f->target >= nofile)
			return apf_error(APF_EINPUT, "sandbox",
					 "descriptor number %d is outside 0..%llu",
					 f->target, (unsigned long long)nofile - 1);
		for (size_t j = 0; j < i; j++)
			if (cfg->fds[j].target == f->target)
				return apf_error(APF_EINPUT, "sandbox",
						 "descriptor number %d given twice",
						 f->target);
		p->fds[i] = *f;
	}
	p->nfds = cfg->nfds;
	p->out_wfd = -1;
	if (cfg->output) {
		int rc2 = apf_sandbox_output_open(sb, cfg->output,
						  cfg->output_max, &p->out_wfd);
		if (rc2)
			return rc2;
		p->fds[p->nfds++] = (struct apf_sandbox_fd){p->out_wfd, 1};
		p->fds[p->nfds++] = (struct apf_sandbox_fd){p->out_wfd, 2};
	}
	return 0;
}

/* The rlimits, the scratch's size (*scratch_bytes), the hostname and the
 * user namespace with its maps. */
static int plan_limits(struct plan *p, const struct apf_sandbox_config *cfg,
		       apf_sandbox *sb, uint64_t *scratch_bytes)
{
	int sealed = cfg->mode == APF_SANDBOX_SEALED;
	*scratch_bytes = cfg->scratch_bytes ? cfg->scratch_bytes
					    : DEFAULT_SCRATCH_BYTES;
	uint64_t as = cfg->limits.address_space;
	if (sb->mem == SB_MEM_RLIMIT) {
		/* Nothing counts the scratch's pages: they come out of the
		 * memory limit at the scratch's full size, which is at most
		 * half of it, and RLIMIT_AS gets the rest. */
		uint64_t m = cfg->limits.memory;
		if (sealed && cfg->scratch && *scratch_bytes > m / 2)
			*scratch_bytes = m / 2;
		uint64_t room = m - (sealed && cfg->scratch ? *scratch_bytes : 0);
		if (as && as > room)
			as = room;
	}
	p->rl_as.rlim_cur = p->rl_as.rlim_max = lim(as, 0);
	p->rl_nofile.rlim_cur = p->rl_nofile.rlim_max =
		(rlim_t)open_files_limit(cfg);
	p->rl_nproc.rlim_cur = p->rl_nproc.rlim_max =
		lim(cfg->limits.processes, 1024);
	p->rl_fsize.rlim_cur = p->rl_fsize.rlim_max = lim(cfg->limits.file_size, 0);
	p->rl_cpu.rlim_cur = p->rl_cpu.rlim_max = lim(cfg->limits.cpu_seconds, 0);
	sb->memory_limit = as;
	sb->spawn_limit = cfg->limits.spawns ? cfg->limits.spawns : 1024;

	const char *host = cfg->hostname ? cfg->hostname : DEFAULT_HOSTNAME;
	if (strlen(host) >= sizeof p->hostname || !host[0])
		return apf_error(APF_EINPUT, "sandbox", "bad hostname");
	strcpy(p->hostname, host);
	/* A root supervisor with the capabilities to build the sandbox
	 * needs no user namespace for the mounts, and its program is not
	 * root inside one either: it becomes APF_SANDBOX_UID on the host.
	 * Any other (an unprivileged user; root in a container, which lacks
	 * CAP_SYS_ADMIN) maps APF_SANDBOX_UID, its only mappable user, to
	 * itself. */
	p->userns = sealed && !host_privileged();
	p->cg_fd = -1;
	snprintf(p->uid_map, sizeof p->uid_map, "%u %u 1\n", APF_SANDBOX_UID,
		 (unsigned)geteuid());
	snprintf(p->gid_map, sizeof p->gid_map, "%u %u 1\n", APF_SANDBOX_GID,
		 (unsigned)getegid());
	return 0;
}

/* The mounts of the new root, each in the policy as the program will see
 * it; the root's tmpfs sized for what is copied into it. */
static int plan_mounts(struct plan *p, const struct apf_sandbox_config *cfg,
		       apf_sandbox *sb)
{
	int sealed = cfg->mode == APF_SANDBOX_SEALED;
	char norm[PATH_MAX];
	int rc;
	if (cfg->nmounts && !(p->mnts = calloc(cfg->nmounts, sizeof *p->mnts)))
		return apf_error(APF_ENOMEM, "sandbox", "out of memory");
	uint64_t copied = 0;
	for (size_t i = 0; i < cfg->nmounts; i++) {
		const struct apf_sandbox_mount *m = &cfg->mounts[i];
		if (m->access != APF_SANDBOX_READ && m->access != APF_SANDBOX_WRITE)
			return apf_error(APF_EINPUT, "sandbox",
					 "mount %s: access must be read or write",
					 m->source ? m->source : "(null)");
		if (!m->source)
			return apf_error(APF_EINPUT, "sandbox",
					 "mount without a source");
		char *real = realpath(m->source, NULL);
		if (!real) {
			if (m->optional && errno == ENOENT)
				continue;
			return apf_error_errno(APF_EINPUT, errno, "sandbox",
					       "mount source %s", m->source);
		}
		struct stat st;
		if (stat(real, &st) < 0) {
			free(real);
			return apf_error_errno(APF_EINPUT, errno, "sandbox",
					       "mount source %s", m->source);
		}
		if (!S_ISDIR(st.st_mode) && !S_ISREG(st.st_mode) &&
		    !S_ISCHR(st.st_mode)) {
			free(real);
			return apf_error(APF_EINPUT, "sandbox",
					 "mount source %s: not a directory, "
					 "regular file or character device",
					 m->source);
		}
		const char *target = m->target ? m->target : m->source;
		/* Unsealed, nothing is mounted: the program sees the source
		 * where it is, so that is what the policy must name. */
		const char *seen = sealed ? target : real;
		if (sealed && (rc = check_target("mount target", target, norm,
						 sizeof norm)) < 0) {
			free(real);
			return rc;
		}
		if ((rc = apf_sandbox_policy_add(sb, seen, m->access)) < 0) {
			free(real);
			return rc;
		}
		struct plan_mount *pm = &p->mnts[p->nmnts++];
		pm->src = join2("/oldroot", real);
		pm->dst = join2("/newroot", target);
		free(real);
		if (!pm->src || !pm->dst)
			return apf_error(APF_ENOMEM, "sandbox", "out of memory");
		pm->write = m->access == APF_SANDBOX_WRITE;
		pm->is_dir = S_ISDIR(st.st_mode);
		pm->is_dev = S_ISCHR(st.st_mode);
		pm->copy = sealed && m->copy;
		/* A copy cannot go inside a read-only bind made before it
		 * (the headers of an apf installed under the bound /usr):
		 * there it is bound too, which shows its source as a bind
		 * does. */
		for (size_t j = 0; pm->copy && j + 1 < p->nmnts; j++) {
			const struct plan_mount *o = &p->mnts[j];
			size_t l = strlen(o->dst);
			if (!o->copy && o->is_dir && !strncmp(pm->dst, o->dst, l) &&
			    pm->dst[l] == '/')
				pm->copy = 0;
		}
		if (pm->copy) {
			long long b = m->access == APF_SANDBOX_READ
					      ? tree_bytes(pm->src + 8, 0)
					      : -1;
			if (b < 0 || (uint64_t)(copied += (uint64_t)b) >
					     APF_SANDBOX_COPY_MAX)
				return apf_error(APF_EINPUT, "sandbox",
						 "mount source %s: a copy is of "
						 "directories and regular files, "
						 "read-only, at most %llu MiB",
						 m->source,
						 APF_SANDBOX_COPY_MAX >> 20);
		}
	}
	snprintf(p->root_opts, sizeof p->root_opts, "size=%llu,mode=0755",
		 (unsigned long long)((4ull << 20) + copied));
	return 0;
}

/* The scratch: sealed, a tmpfs of its own; unsealed, a directory that must
 * exist. Either way writable, and the program's one place to write. */
static int plan_scratch(struct plan *p, const struct apf_sandbox_config *cfg,
			apf_sandbox *sb, uint64_t scratch_bytes)
{
	int sealed = cfg->mode == APF_SANDBOX_SEALED;
	char norm[PATH_MAX];
	int rc;
	if (!cfg->scratch)
		return 0;
	if (sealed) {
		if ((rc = check_target("scratch", cfg->scratch, norm,
				       sizeof norm)) < 0)
			return rc;
		if (!(p->scratch = join2("/newroot", cfg->scratch)))
			return apf_error(APF_ENOMEM, "sandbox",
					 "out of memory");
		/* The program's own, the one place it may write. */
		snprintf(p->scratch_opts, sizeof p->scratch_opts,
			 "size=%llu,mode=0755,uid=%u,gid=%u",
			 (unsigned long long)scratch_bytes,
			 APF_SANDBOX_UID, APF_SANDBOX_GID);
	} else {
		struct stat st;
		if (stat(cfg->scratch, &st) < 0 || !S_ISDIR(st.st_mode))
			return apf_error(APF_EINPUT, "sandbox",
					 "scratch %s: not a directory "
					 "(unsealed, it must exist)",
					 cfg->scratch);
	}
	if ((rc = apf_sandbox_policy_add(sb, cfg->scratch,
					 APF_SANDBOX_WRITE)) < 0)
		return rc;
	return 0;
}

int apf_sandbox_plan_build(struct plan *p, const struct apf_sandbox_config *cfg,
			   apf_sandbox *sb)
{
	int rc;
	memset(p, 0, sizeof *p);
	p->mode = cfg->mode;
	p->chan = -1;
	p->supervisor = getpid();
	if (cfg->mode != APF_SANDBOX_SEALED && cfg->mode != APF_SANDBOX_UNSEALED)
		return apf_error(APF_EINPUT, "sandbox", "unknown mode %d",
				 (int)cfg->mode);
	if (!cfg->argv || !cfg->argv[0] || cfg->argv[0][0] != '/')
		return apf_error(APF_EINPUT, "sandbox",
				 "argv[0] must be the program's absolute path");
	static const char *const empty[] = {NULL};
	if (!(p->argv = copy_strv(cfg->argv)) ||
	    !(p->envp = copy_strv(cfg->envp ? cfg->envp : empty)))
		return apf_error(APF_ENOMEM, "sandbox", "out of memory");
	if ((rc = plan_fds(p, cfg, sb)) < 0)
		return rc;
	uint64_t scratch_bytes;
	if ((rc = plan_limits(p, cfg, sb, &scratch_bytes)) < 0 ||
	    (rc = plan_mounts(p, cfg, sb)) < 0 ||
	    (rc = plan_scratch(p, cfg, sb, scratch_bytes)) < 0)
		return rc;
	for (size_t i = 0; i < cfg->npaths; i++)
		if ((rc = apf_sandbox_policy_add(sb, cfg->paths[i].prefix,
						 cfg->paths[i].access)) < 0)
			return rc;
	const char *cwd = cfg->cwd ? cfg->cwd : cfg->scratch ? cfg->scratch : "/";
	if (cwd[0] != '/')
		return apf_error(APF_EINPUT, "sandbox", "cwd %s: not absolute", cwd);
	if (!(p->cwd = apf_strdup(cwd)))
		return apf_error(APF_ENOMEM, "sandbox", "out of memory");

	struct sock_filter *prog;
	size_t len;
	if ((rc = apf_sandbox_filter_build(&prog, &len)) < 0)
		return rc;
	p->prog.filter = prog;
	p->prog.len = (unsigned short)len;
	return 0;
}
