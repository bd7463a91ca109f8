/*
 * cuda_loader.c: the CUDA backend, loaded at run time.
 *
 * The kernels live in a plugin (the .cu files of pkg/nn/cuda, built into
 * build/lib/apf-cuda.so only where nvcc is found) so that one apf binary,
 * which links no CUDA, runs on every machine and takes a GPU where there
 * is one. The plugin is
 * found at $APF_CUDA_PLUGIN, else next to the executable (<dir>/lib/, the
 * build tree) or in an installed tree (<dir>/../lib/apf/). It is never
 * unloaded: CUDA's runtime does not survive being unmapped under live
 * contexts, and a process uses at most one plugin.
 *
 * cuda_plugin.h says how the plugin's failures become apf errors here.
 */
#include "nn/nn.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "nn/cuda_plugin.h"

/* The directory of the running executable, or "" when /proc cannot say. */
static void exe_dir(char *dir, size_t n)
{
	ssize_t k = readlink("/proc/self/exe", dir, n - 1);
	if (k <= 0) {
		dir[0] = 0;
		return;
	}
	dir[k] = 0;
	char *slash = strrchr(dir, '/');
	if (slash)
		*slash = 0;
}

int apf_cuda_plugin_path(char *path, size_t n, char *why, size_t wn)
{
	const char *env = getenv("APF_CUDA_PLUGIN");
	if (env && env[0]) {
		snprintf(path, n, "%s", env);
		return 0; /* dlopen says why, if it cannot */
	}
	char dir[PATH_MAX];
	exe_dir(dir, sizeof dir);
	char beside[PATH_MAX + 32], installed[PATH_MAX + 32];
	snprintf(beside, sizeof beside, "%s/lib/apf-cuda.so", dir);
	snprintf(installed, sizeof installed, "%s/../lib/apf/apf-cuda.so", dir);
	if (access(beside, F_OK) == 0) {
		snprintf(path, n, "%s", beside);
		return 0;
	}
	if (access(installed, F_OK) == 0) {
		snprintf(path, n, "%s", installed);
		return 0;
	}
	snprintf(why, wn, "this apf was built without CUDA (no %.400s)", beside);
	return -1;
}

static struct apf_cuda_head *head(apf_backend *be)
{
	return be->impl;
}

static int loader_alloc(apf_backend *be, size_t nbytes, void **out)
{
	if (head(be)->alloc(be, nbytes, out))
		return apf_error(APF_ENOMEM, "cuda backend", "%s", head(be)->err);
	return 0;
}

static int loader_sync(apf_backend *be)
{
	if (head(be)->sync(be))
		return apf_error(APF_EIO, "cuda backend", "%s", head(be)->err);
	return 0;
}

/* The backend in *out, 0; or nonzero, the one-line reason in why. */
static int load(apf_backend **out, char *why, size_t wn)
{
	*out = NULL;
	char path[PATH_MAX + 32];
	if (apf_cuda_plugin_path(path, sizeof path, why, wn))
		return -1;
	void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		const char *e = dlerror();
		snprintf(why, wn, "cannot load the CUDA plugin: %.440s",
			 e ? e : path);
		return -1;
	}
	apf_cuda_plugin_new_fn fn;
	/* POSIX's sanctioned way from dlsym's void * to a function pointer. */
	*(void **)&fn = dlsym(h, APF_CUDA_PLUGIN_SYMBOL);
	if (!fn) {
		snprintf(why, wn, "%.400s: no symbol %s", path,
			 APF_CUDA_PLUGIN_SYMBOL);
		return -1;
	}
	char err[256] = "";
	apf_backend *be = NULL;
	int rc = fn(&be, err, sizeof err);
	if (rc == APF_CUDA_NO_DEVICE) {
		snprintf(why, wn, "no CUDA device (driver: %.256s)", err);
		return -1;
	}
	if (rc || !be) {
		snprintf(why, wn, "%.256s", err[0] ? err : "the CUDA plugin failed");
		return -1;
	}
	if (head(be)->abi != APF_CUDA_PLUGIN_ABI ||
	    head(be)->table_bytes != sizeof(apf_backend)) {
		snprintf(why, wn,
			 "%.400s: plugin interface %d (a %zu-byte table), apf "
			 "expects %d (%zu): rebuild the plugin",
			 path, head(be)->abi, head(be)->table_bytes,
			 APF_CUDA_PLUGIN_ABI, sizeof(apf_backend));
		be->destroy(be);
		return -1;
	}
	head(be)->alloc = be->alloc;
	head(be)->sync = be->sync;
	be->alloc = loader_alloc;
	be->sync = loader_sync;
	*out = be;
	return 0;
}

int apf_backend_cuda_new(apf_backend **out, int threads)
{
	char why[512];
	if (load(out, why, sizeof why))
		return apf_error(APF_EINPUT, "cuda backend", "%s", why);
	(*out)->threads = threads > 0 ? threads : 1;
	return 0;
}

static int probe_here(char *what, size_t n)
{
	apf_backend *be;
	char why[512];
	if (load(&be, why, sizeof why)) {
		snprintf(what, n, "%s", why);
		return -1;
	}
	snprintf(what, n, "%s", head(be)->what);
	be->destroy(be);
	return 0;
}

/* The probe runs in a child process: CUDA's context (its device memory, its
 * threads) then never exists in the caller, the supervisor of a run whose
 * trial is to have the GPU to itself. */
int apf_cuda_probe(char *what, size_t n)
{
	int fd[2];
	if (pipe2(fd, O_CLOEXEC))
		return probe_here(what, n);
	pid_t pid = fork();
	if (pid < 0) {
		close(fd[0]);
		close(fd[1]);
		return probe_here(what, n);
	}
	if (pid == 0) {
		/* Only the pipe stays open: a descriptor shared with the
		 * caller would keep its locks held past its death. */
		if ((fd[1] > 3 && close_range(3, (unsigned)fd[1] - 1, 0) < 0) ||
		    close_range((unsigned)fd[1] + 1, ~0u, 0) < 0)
			_exit(1);
		char msg[513];
		msg[0] = probe_here(msg + 1, sizeof msg - 1) ? 'n' : 'y';
		size_t len = 1 + strlen(msg + 1), off = 0;
		while (off < len) {
			ssize_t k = write(fd[1], msg + off, len - off);
			if (k <= 0)
				break;
			off += (size_t)k;
		}
		_exit(0);
	}
	close(fd[1]);
	char msg[513];
	size_t got = 0;
	for (;;) {
		ssize_t k = read(fd[0], msg + got, sizeof msg - 1 - got);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			break;
		got += (size_t)k;
		if (got == sizeof msg - 1)
			break;
	}
	close(fd[0]);
	msg[got] = 0;
	int status;
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	if (got == 0) {
		snprintf(what, n, "the CUDA probe process died (status %d)",
			 status);
		return -1;
	}
	snprintf(what, n, "%s", msg + 1);
	return msg[0] == 'y' ? 0 : -1;
}
