/*
 * submission.c: building a submission's C sources into a shared object with
 * fixed flags, and loading it with its ABI checked.
 *
 * The flags are fixed (and recorded by the runner) so the same sources give
 * the same machine code on the same toolchain: no fast-math and no FMA
 * contraction, whose results depend on how the compiler schedules them.
 */
#include "trial/trial.h"

#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "config/config.h"
#include "trial/internal.h"

extern char **environ;

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The sources to compile: [build] sources, else every top-level *.c. */
static int list_sources(const char *dir, char ***out, size_t *n)
{
	*out = NULL;
	*n = 0;
	char *ini = apf_path_join(dir, "submission.ini");
	apf_config *c = NULL;
	struct stat st;
	int rc = 0;
	if (ini && stat(ini, &st) == 0)
		rc = apf_config_load(&c, ini);
	free(ini);
	if (rc)
		return rc;
	if (c && apf_config_get(c, "build", "sources")) {
		static const char *const keys[] = {"sources", NULL};
		rc = apf_config_check_keys(c, "build", keys);
		if (!rc)
			rc = apf_config_list(c, "build", "sources", out, n);
		for (size_t i = 0; !rc && i < *n; i++) {
			const char *s = (*out)[i];
			size_t len = strlen(s);
			if (s[0] == '/' || strstr(s, "..") || len < 3 ||
			    strcmp(s + len - 2, ".c"))
				rc = apf_config_error(c, "build", "sources",
						      "'%s' is not a .c file "
						      "inside the submission",
						      s);
		}
		apf_config_free(c);
		return rc;
	}
	apf_config_free(c);
	DIR *d = opendir(dir);
	if (!d)
		return apf_error_errno(APF_EINPUT, errno, dir, "open");
	char **v = NULL;
	size_t k = 0, cap = 0;
	struct dirent *de;
	while ((de = readdir(d))) {
		size_t len = strlen(de->d_name);
		if (len < 3 || strcmp(de->d_name + len - 2, ".c") ||
		    de->d_name[0] == '.')
			continue;
		if (k == cap) {
			cap = cap ? 2 * cap : 8;
			char **nv = realloc(v, cap * sizeof *nv);
			if (!nv) {
				rc = apf_error(APF_ENOMEM, dir, "out of memory");
				break;
			}
			v = nv;
		}
		if (!(v[k] = apf_strdup(de->d_name))) {
			rc = apf_error(APF_ENOMEM, dir, "out of memory");
			break;
		}
		k++;
	}
	closedir(d);
	if (!rc && k == 0)
		rc = apf_error(APF_EINPUT, dir, "no C sources (*.c) to build");
	if (rc) {
		apf_config_list_free(v, k);
		return rc;
	}
	qsort(v, k, sizeof *v, cmp_str);
	*out = v;
	*n = k;
	return 0;
}

/* Runs argv, collecting stdout and stderr into log; returns the exit
 * status (or -1 when it could not run). */
static int run_collect(char *const argv[], const char *cwd, apf_buf *log)
{
	int pipefd[2];
	if (pipe2(pipefd, O_CLOEXEC) != 0)
		return -1;
	posix_spawn_file_actions_t fa;
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_adddup2(&fa, pipefd[1], 1);
	posix_spawn_file_actions_adddup2(&fa, pipefd[1], 2);
	posix_spawn_file_actions_addchdir_np(&fa, cwd);
	pid_t pid;
	int err = posix_spawnp(&pid, argv[0], &fa, NULL, argv, environ);
	posix_spawn_file_actions_destroy(&fa);
	close(pipefd[1]);
	if (err) {
		close(pipefd[0]);
		errno = err;
		return -1;
	}
	char buf[4096];
	ssize_t n;
	while ((n = read(pipefd[0], buf, sizeof buf)) > 0 ||
	       (n < 0 && errno == EINTR))
		if (n > 0 && log && log->len < (1u << 20))
			apf_buf_append(log, buf, (size_t)n);
	close(pipefd[0]);
	int status;
	while (waitpid(pid, &status, 0) < 0)
		if (errno != EINTR)
			return -1;
	return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

int apf_submission_build(const char *src_dir, const char *include_dir,
			 const char *out_so, apf_buf *log)
{
	char **sources;
	size_t nsrc;
	int rc = list_sources(src_dir, &sources, &nsrc);
	if (rc)
		return rc;
	size_t nflags = 0;
	while (apf_submission_cflags[nflags])
		nflags++;
	char **argv = apf_calloc(nflags + nsrc + 8, sizeof *argv);
	apf_buf inc = {0};
	if (!argv || apf_buf_printf(&inc, "-I%s", include_dir)) {
		free(argv);
		apf_config_list_free(sources, nsrc);
		return apf_error(APF_ENOMEM, src_dir, "out of memory");
	}
	size_t k = 0;
	argv[k++] = "cc";
	for (size_t i = 0; i < nflags; i++)
		argv[k++] = (char *)apf_submission_cflags[i];
	argv[k++] = inc.data;
	argv[k++] = "-o";
	argv[k++] = (char *)out_so;
	for (size_t i = 0; i < nsrc; i++)
		argv[k++] = sources[i];
	argv[k++] = "-lm";
	argv[k] = NULL;
	apf_buf out = {0};
	int status = run_collect(argv, src_dir, &out);
	if (status < 0) {
		rc = apf_error_errno(APF_EINPUT, errno, "build",
				     "cannot run the compiler (cc)");
	} else if (status != 0) {
		/* The first error line says what is wrong. */
		const char *first = out.data ? strstr(out.data, "error") : NULL;
		const char *line = first;
		while (line && line > out.data && line[-1] != '\n')
			line--;
		char msg[300] = "no message";
		if (line)
			snprintf(msg, sizeof msg, "%.*s",
				 (int)strcspn(line, "\n"), line);
		rc = apf_error(APF_EINPUT, "build",
			       "the submission does not compile: %s", msg);
	}
	if (log && out.len)
		apf_buf_append(log, out.data, out.len);
	apf_buf_free(&out);
	apf_buf_free(&inc);
	free(argv);
	apf_config_list_free(sources, nsrc);
	return rc;
}

int apf_submission_load(apf_submission **out, const char *so_path)
{
	*out = NULL;
	/* dlopen resolves a name without a slash through the library path;
	 * a submission is always a file. */
	char path[4096];
	snprintf(path, sizeof path, "%s%s", strchr(so_path, '/') ? "" : "./",
		 so_path);
	void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!h)
		return apf_error(APF_EINPUT, so_path, "cannot load: %s",
				 dlerror());
	apf_submission *s = apf_calloc(1, sizeof *s);
	if (!s) {
		dlclose(h);
		return apf_error(APF_ENOMEM, so_path, "out of memory");
	}
	s->handle = h;
	const int *abi = dlsym(h, "apf_abi_version");
	int rc = 0;
	if (!abi)
		rc = apf_error(APF_EINPUT, so_path,
			       "no apf_abi_version symbol (is it built against "
			       "apf/submission.h?)");
	else if (*abi < APF_ABI_MIN_VERSION || *abi > APF_ABI_VERSION)
		rc = apf_error(APF_EINPUT, so_path,
			       "ABI version %d, this apf implements %d to %d",
			       *abi, APF_ABI_MIN_VERSION, APF_ABI_VERSION);
	/* POSIX guarantees function pointers survive the void * of dlsym. */
	*(void **)&s->batch_size = dlsym(h, "get_batch_size");
	*(void **)&s->init = dlsym(h, "init_optimizer_state");
	*(void **)&s->update = dlsym(h, "update_params");
	*(void **)&s->prepare = dlsym(h, "prepare_for_eval");
	*(void **)&s->select = dlsym(h, "data_selection");
	const char *missing = !s->batch_size ? "get_batch_size"
			      : !s->init     ? "init_optimizer_state"
			      : !s->update   ? "update_params"
					     : NULL;
	if (!rc && missing)
		rc = apf_error(APF_EINPUT, so_path,
			       "missing required function %s", missing);
	if (rc) {
		apf_submission_free(s);
		return rc;
	}
	*out = s;
	return 0;
}

void apf_submission_free(apf_submission *s)
{
	if (!s)
		return;
	if (s->handle)
		dlclose(s->handle);
	free(s);
}

int apf_submission_batch_size(int *out, const apf_submission *s,
			      const char *workload)
{
	int b = s->batch_size(workload);
	if (b <= 0 || b > 1 << 20)
		return apf_error(APF_EINPUT, "get_batch_size",
				 "returned %d for %s (must be 1 to 1048576)", b,
				 workload);
	*out = b;
	return 0;
}

