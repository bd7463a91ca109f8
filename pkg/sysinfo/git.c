/*
 * git.c: git provenance of a submission directory through libgit2: the HEAD
 * commit, branch, remote URL (credentials removed), the directory's path
 * inside the work tree, and whether anything under it differs from HEAD.
 */
#include "sysinfo/sysinfo.h"

#include <errno.h>
#include <git2.h>
#include <limits.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

static pthread_once_t git_once = PTHREAD_ONCE_INIT;

static int git_ready;

static void git_setup(void)
{
	git_libgit2_init();
	git_ready = 1;
	/* apf only reads objects and status; it never runs hooks or reads
	 * executable config, which is what the owner check protects. A
	 * submission checked out by another user (a CI runner, a container)
	 * must still be recorded. */
	git_libgit2_opts(GIT_OPT_SET_OWNER_VALIDATION, 0);
}

/* Releases libgit2's global state at exit, for a clean LeakSanitizer. */
__attribute__((destructor)) static void git_teardown(void)
{
	if (git_ready)
		git_libgit2_shutdown();
}

static const char *git_reason(void)
{
	const git_error *e = git_error_last();
	return e && e->message ? e->message : "unknown libgit2 error";
}

/* https://user:token@host/x -> https://host/x */
static char *strip_credentials(const char *url)
{
	const char *scheme = strstr(url, "://");
	char *out = apf_strdup(url);
	if (!out || !scheme)
		return out;
	const char *host = scheme + 3;
	const char *slash = strchr(host, '/');
	const char *at = strchr(host, '@');
	if (at && (!slash || at < slash)) {
		size_t pre = (size_t)(host - url);
		memmove(out + pre, at + 1, strlen(at + 1) + 1);
	}
	return out;
}

struct remote_pick {
	char *name, *url;
};

/* remote.*.url entries: keeps the alphabetically first remote's. */
static int first_remote(const git_config_entry *e, void *payload)
{
	struct remote_pick *p = payload;
	size_t n = strlen(e->name);
	if (strncmp(e->name, "remote.", 7) || n < 12 ||
	    strcmp(e->name + n - 4, ".url"))
		return 0;
	if (p->name && strcmp(e->name, p->name) >= 0)
		return 0;
	char *name = apf_strdup(e->name), *url = apf_strdup(e->value);
	if (!name || !url) {
		free(name);
		free(url);
		return 0;
	}
	free(p->name);
	free(p->url);
	p->name = name;
	p->url = url;
	return 0;
}

/* The configured URL of "origin", else of the alphabetically first remote.
 * Read from the config directly: libgit2 1.5's git_remote_lookup leaks in
 * its insteadOf regex matching, and the URL as configured is what we want
 * to record anyway. */
static json_t *remote_url(git_repository *repo)
{
	git_config *cfg = NULL;
	json_t *out = json_null();
	if (git_repository_config_snapshot(&cfg, repo) != 0) {
		git_error_clear();
		return out;
	}
	const char *url = NULL;
	struct remote_pick pick = {0};
	if (git_config_get_string(&url, cfg, "remote.origin.url") != 0) {
		git_config_foreach(cfg, first_remote, &pick);
		url = pick.url;
	}
	char *clean = url ? strip_credentials(url) : NULL;
	if (clean)
		out = json_string(clean);
	free(clean);
	free(pick.name);
	free(pick.url);
	git_config_free(cfg);
	git_error_clear();
	return out;
}

int apf_git_provenance(json_t **out, const char *dir)
{
	*out = NULL;
	pthread_once(&git_once, git_setup);
	char real[PATH_MAX];
	if (!realpath(dir, real))
		return apf_error_errno(APF_EINPUT, errno, dir, "cannot resolve");
	git_repository *repo = NULL;
	int e = git_repository_open_ext(&repo, real, 0, NULL);
	if (e == GIT_ENOTFOUND) {
		git_error_clear();
		*out = json_pack("{s:b}", "repository", 0);
		return *out ? 0 : apf_error(APF_ENOMEM, dir, "out of memory");
	}
	if (e != 0)
		return apf_error(APF_EINPUT, dir, "git repository: %s",
				 git_reason());
	int rc = 0;
	json_t *commit = json_null(), *branch = json_null();
	const char *workdir = git_repository_workdir(repo);
	char wreal[PATH_MAX] = "";
	if (!workdir || !realpath(workdir, wreal)) {
		git_repository_free(repo);
		return apf_error(APF_EINPUT, dir,
				 "git repository without a work tree");
	}
	/* The submission's path inside the work tree ("" at its root). */
	size_t wl = strlen(wreal);
	const char *rel = "";
	if (!strncmp(real, wreal, wl) && (real[wl] == '/' || real[wl] == 0))
		rel = real[wl] == '/' ? real + wl + 1 : "";
	git_oid oid;
	if (git_reference_name_to_id(&oid, repo, "HEAD") == 0) {
		char hex[GIT_OID_HEXSZ + 1];
		git_oid_tostr(hex, sizeof hex, &oid);
		commit = json_string(hex);
	}
	git_reference *head = NULL;
	if (git_repository_head(&head, repo) == 0) {
		if (git_reference_is_branch(head))
			branch = json_string(git_reference_shorthand(head));
		git_reference_free(head);
	}
	git_error_clear();

	git_status_options so;
	git_status_options_init(&so, GIT_STATUS_OPTIONS_VERSION);
	so.show = GIT_STATUS_SHOW_INDEX_AND_WORKDIR;
	so.flags = GIT_STATUS_OPT_INCLUDE_UNTRACKED |
		   GIT_STATUS_OPT_RECURSE_UNTRACKED_DIRS |
		   GIT_STATUS_OPT_INCLUDE_IGNORED |
		   GIT_STATUS_OPT_RECURSE_IGNORED_DIRS |
		   GIT_STATUS_OPT_EXCLUDE_SUBMODULES;
	char *spec = NULL;
	if (rel[0]) {
		apf_buf b = {0};
		rc = apf_buf_printf(&b, "%s/", rel);
		spec = b.data;
		so.pathspec.strings = &spec;
		so.pathspec.count = 1;
		so.flags |= GIT_STATUS_OPT_DISABLE_PATHSPEC_MATCH;
	}
	git_status_list *st = NULL;
	int dirty = 0;
	if (!rc && git_status_list_new(&st, repo, &so) != 0) {
		rc = apf_error(APF_EINPUT, dir, "git status: %s", git_reason());
	} else if (!rc) {
		size_t n = git_status_list_entrycount(st);
		for (size_t i = 0; i < n && !dirty; i++) {
			const git_status_entry *se = git_status_byindex(st, i);
			const char *p = se->head_to_index
						? se->head_to_index->new_file.path
						: se->index_to_workdir
							  ? se->index_to_workdir
								    ->new_file.path
							  : NULL;
			/* With DISABLE_PATHSPEC_MATCH a prefix is matched
			 * literally; check the path is really under rel. */
			if (se->status != GIT_STATUS_CURRENT &&
			    (!rel[0] || (p && !strncmp(p, spec, strlen(spec)))))
				dirty = 1;
		}
		git_status_list_free(st);
	}
	free(spec);
	if (!rc) {
		*out = json_pack("{s:b, s:o, s:o, s:o, s:s, s:b}", "repository",
				 1, "commit", commit, "branch", branch,
				 "remote", remote_url(repo), "path", rel,
				 "dirty", dirty);
		if (!*out)
			rc = apf_error(APF_ENOMEM, dir, "out of memory");
	} else {
		json_decref(commit);
		json_decref(branch);
	}
	git_repository_free(repo);
	return rc;
}

int apf_git_validate(const json_t *git)
{
	if (!json_is_object(git))
		return apf_error(APF_EINPUT, "git", "not an object");
	json_t *repo = json_object_get(git, "repository");
	if (!json_is_boolean(repo))
		return apf_error(APF_EINPUT, "git", "repository: missing or not "
						    "a boolean");
	static const char *const with[] = {"repository", "commit", "branch",
					   "remote", "path", "dirty", NULL};
	const char *key;
	json_t *v;
	json_object_foreach((json_t *)git, key, v)
	{
		int known = 0;
		for (const char *const *k = with; *k && !known; k++)
			known = !strcmp(*k, key);
		if (!known || (!json_is_true(repo) && strcmp(key, "repository")))
			return apf_error(APF_EINPUT, "git",
					 "unexpected field '%s'", key);
	}
	if (!json_is_true(repo))
		return 0;
	json_t *commit = json_object_get(git, "commit");
	if (!(json_is_null(commit) ||
	      (json_is_string(commit) && strlen(json_string_value(commit)) == 40)))
		return apf_error(APF_EINPUT, "git", "commit: not a commit id");
	json_t *branch = json_object_get(git, "branch");
	json_t *remote = json_object_get(git, "remote");
	if (!(json_is_null(branch) || json_is_string(branch)) ||
	    !(json_is_null(remote) || json_is_string(remote)) ||
	    !json_is_string(json_object_get(git, "path")) ||
	    !json_is_boolean(json_object_get(git, "dirty")))
		return apf_error(APF_EINPUT, "git",
				 "branch, remote, path or dirty: missing or of "
				 "the wrong type");
	return 0;
}
