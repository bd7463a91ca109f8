/*
 * pack.c: `apf pack SUBMISSION_DIR -w WORKLOAD[,...] [-k KEY] [-o ENTRY.apf]`.
 */
#include "cmd.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/config.h"
#include "entry/entry.h"
#include "host/host.h"
#include "manifest/manifest.h"
#include "tuning/tuning.h"

/* What the compiler printed, on stderr as it printed it (file:line:
 * message, the source line, the caret), so that a warning is seen when
 * packing rather than in a run's build.log, and an error with its source
 * line. At most 60 lines: the first diagnostics say what is wrong. The
 * text is the compiler's, about the submitter's own files: escaped all
 * the same (a file name is the submitter's text). */
static void show_compiler(const char *dir, const apf_buf *out, int failed)
{
	if (!out->len)
		return;
	fprintf(stderr, "apf: pack: %s: the compiler %s:\n", term_text(dir),
		failed ? "refuses it" : "warns (the runner's build.log will "
					"say the same)");
	size_t lines = 0;
	for (const char *p = out->data; p < out->data + out->len;) {
		const char *nl = memchr(p, '\n', out->len - (size_t)(p - out->data));
		size_t n = nl ? (size_t)(nl - p) : out->len - (size_t)(p - out->data);
		if (++lines > 60) {
			fprintf(stderr, "    ... (the rest cut)\n");
			break;
		}
		char line[1024];
		snprintf(line, sizeof line, "%.*s", (int)(n < 1000 ? n : 1000), p);
		fprintf(stderr, "    %s\n", term_text(line));
		p += n + (nl ? 1 : 0);
	}
}

/* Compiles the submission as the runner will (same sandbox, flags and
 * export check), so that an entry that cannot build is never signed. */
static int check_build(void *user, const char *dir)
{
	const int *unsealed = user;
	char *exe = NULL, *inc = NULL;
	int rc = apf_host_find_self(&exe, &inc);
	char detail[1024] = "";
	apf_buf compiler = {0};
	if (!rc)
		rc = apf_host_check_build(exe, inc, dir, !*unsealed, detail,
					  sizeof detail, &compiler);
	free(exe);
	free(inc);
	if (!rc)
		show_compiler(dir, &compiler, detail[0] != 0);
	apf_buf_free(&compiler);
	/* The build's own prefixes say nothing the line does not. */
	static const char *const noise[] = {
		"build: the submission does not compile: ", "submission: ",
		"build: "};
	const char *why = detail;
	for (size_t i = 0; i < sizeof noise / sizeof noise[0]; i++)
		if (!strncmp(why, noise[i], strlen(noise[i])))
			why += strlen(noise[i]);
	if (!rc && detail[0])
		rc = apf_error(APF_EINPUT, dir, "does not build: %s", why);
	return rc;
}

/* ---- hyperparameter names the code reads ----------------------------------- */

static int ident_char(char c)
{
	return c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
	       (c >= '0' && c <= '9');
}

/* Past a string or character literal opened at p (its quote), escapes
 * included; at the end of the line or text when it is not closed. */
static const char *skip_literal(const char *p)
{
	char q = *p++;
	while (*p && *p != q && *p != '\n')
		p += *p == '\\' && p[1] ? 2 : 1;
	return *p == q ? p + 1 : p;
}

/* Past a comment opened at p ("//" or "/\*"), or p when there is none. */
static const char *skip_comment(const char *p)
{
	if (p[0] == '/' && p[1] == '/')
		return p + strcspn(p, "\n");
	if (p[0] == '/' && p[1] == '*') {
		const char *e = strstr(p + 2, "*/");
		return e ? e + 2 : p + strlen(p);
	}
	return p;
}

/* At a call apf_hp(c, h, "name", ...), apf_hp_word or apf_hp_has (p just
 * past the function's name): the literal third argument, copied into
 * name, or 0 when the argument is not a plain string literal. */
static int literal_third_argument(const char *p, char *name, size_t size)
{
	while (*p == ' ' || *p == '\t' || *p == '\n')
		p++;
	if (*p++ != '(')
		return 0;
	int depth = 0, commas = 0;
	while (*p && commas < 2) {
		const char *q = skip_comment(p);
		if (q != p) {
			p = q;
		} else if (*p == '"' || *p == '\'') {
			p = skip_literal(p);
		} else {
			if (*p == '(' || *p == '[' || *p == '{')
				depth++;
			else if (*p == ')' || *p == ']' || *p == '}') {
				if (--depth < 0)
					return 0;
			} else if (*p == ',' && depth == 0)
				commas++;
			p++;
		}
	}
	while (*p == ' ' || *p == '\t' || *p == '\n')
		p++;
	if (*p != '"')
		return 0;
	size_t n = strcspn(p + 1, "\"\\\n");
	if (p[1 + n] != '"' || n == 0 || n >= size)
		return 0;
	memcpy(name, p + 1, n);
	name[n] = 0;
	/* Adjacent literals ("a" "b") or a name built at run time: not
	 * this simple form, so nothing is said of it. */
	const char *after = p + 2 + n;
	while (*after == ' ' || *after == '\t' || *after == '\n')
		after++;
	return *after == ',' || *after == ')';
}

/* Warns of each hyperparameter name that the submission's C sources pass
 * as a literal to apf_hp, apf_hp_word or apf_hp_has and that the search
 * space lacks - found at pack time rather than by every trial of a run,
 * with the space's nearest name when one is a slip away. Comments and
 * string literals are skipped; a name computed at run time is not seen
 * here (the trial still warns of it). Reading what it cannot is no error:
 * the pack itself already read every file. */
static void warn_unknown_hparams(const char *dir, const apf_manifest *m)
{
	if (strcmp(m->tuning.ruleset, "external"))
		return;
	apf_search_space *sp = NULL;
	const char *space = NULL;
	for (int i = 0; i < 2 && !sp; i++) {
		space = i ? APF_SEARCH_SPACE_JSON : APF_SEARCH_SPACE_INI;
		char *path = apf_path_join(dir, space);
		if (path && apf_search_space_load(&sp, path))
			sp = NULL;
		free(path);
	}
	apf_error_clear();
	if (!sp)
		return;
	const char **names = apf_calloc(sp->ndims + 1, sizeof *names);
	for (size_t i = 0; names && i < sp->ndims; i++)
		names[i] = sp->dims[i].name;
	char said[32][64];
	size_t nsaid = 0;
	for (size_t f = 0; names && f < m->submission.nfiles; f++) {
		const struct apf_manifest_file *mf = &m->submission.files[f];
		size_t len = strlen(mf->path);
		if (mf->type != 'f' || len < 2 ||
		    (strcmp(mf->path + len - 2, ".c") &&
		     strcmp(mf->path + len - 2, ".h")))
			continue;
		char *text = NULL;
		size_t tlen = 0;
		if (apf_file_read_beneath(&text, &tlen, dir, mf->path, 1 << 24,
					  0)) {
			apf_error_clear();
			continue;
		}
		long line = 1;
		for (const char *p = text; *p;) {
			const char *q = skip_comment(p);
			if (q != p || *p == '"' || *p == '\'') {
				q = q != p ? q : skip_literal(p);
				for (; p < q; p++)
					line += *p == '\n';
				continue;
			}
			if (*p == '\n')
				line++;
			if (strncmp(p, "apf_hp", 6) ||
			    (p > text && ident_char(p[-1]))) {
				p++;
				continue;
			}
			const char *e = p + 6;
			if (!strncmp(e, "_word", 5))
				e += 5;
			else if (!strncmp(e, "_has", 4))
				e += 4;
			char name[64];
			int known = 0;
			if (!ident_char(*e) &&
			    literal_third_argument(e, name, sizeof name)) {
				for (size_t d = 0; d < sp->ndims; d++)
					known |= !strcmp(names[d], name);
				for (size_t k = 0; k < nsaid; k++)
					known |= !strcmp(said[k], name);
				if (!known) {
					const char *near = apf_nearest_name(
						name, names, sp->ndims);
					fprintf(stderr,
						"apf: pack: warning: %s:%ld: "
						"the code reads hyperparameter "
						"'%s', which %s does not have "
						"(it gets its default)%s%s%s\n",
						term_text(mf->path), line,
						term_text(name), space,
						near ? "; did you mean '" : "",
						near ? term_text(near) : "",
						near ? "'?" : "");
					if (nsaid < 32)
						snprintf(said[nsaid++],
							 sizeof said[0], "%s",
							 name);
				}
			}
			p = e;
		}
		free(text);
	}
	free(names);
	apf_search_space_free(sp);
}

/* Splits "a,b,c" (and repeated -w options joined the same way). */
static int split_workloads(const char *arg, char ***out, size_t *n)
{
	apf_config *c;
	apf_buf ini = {0};
	apf_buf_printf(&ini, "[w]\nnames = %s\n", arg);
	int rc = apf_config_parse(&c, ini.data, "-w");
	apf_buf_free(&ini);
	if (!rc) {
		rc = apf_config_list(c, "w", "names", out, n);
		apf_config_free(c);
	}
	if (rc)
		return apf_error(APF_EUSAGE, "pack",
				 "-w: expected WORKLOAD[,WORKLOAD...], got '%s'",
				 arg);
	return 0;
}

int cmd_pack(int argc, char **argv)
{
	const char *workloads = NULL, *key_path = NULL, *output = NULL;
	long seed = -1;
	int no_build = 0, unsealed = 0;
	const struct apf_opt opts[] = {
		{"workloads", 'w', OPT_STRING, &workloads, "W[,W...]",
		 "the workloads this entry is for (under workloads/)"},
		{"key", 'k', OPT_STRING, &key_path, "KEY",
		 "sign with this private key (default: "
		 "$APF_HOME/keys/default.key.pem)"},
		{"output", 'o', OPT_STRING, &output, "ENTRY.apf",
		 "where to write the entry (default: <name>.apf)"},
		{"seed", 0, OPT_INT, &seed, "N",
		 "tuning seed (default: [tuning] seed, else derived from the "
		 "code)"},
		{"no-build", 0, OPT_FLAG, &no_build, NULL,
		 "do not compile the submission first (the runner still does)"},
		{"unsealed", 0, OPT_FLAG, &unsealed, NULL,
		 "compile it outside the sandbox (where this machine refuses "
		 "user namespaces); the entry is the same"},
		{0},
	};
	const struct apf_usage usage = {
		"pack SUBMISSION_DIR -w WORKLOAD[,...] [-k KEY] [-o ENTRY.apf] "
		"[--seed N] [--no-build | --unsealed]",
		"Hash a submission, its workloads' specs and datasets, and this "
		"machine's\nenvironment into a signed manifest (DSSE over an "
		"in-toto statement), and write\nit with the submission's files "
		"into a deterministic archive.",
		"SUBMISSION_DIR holds submission.ini ([submission] name, authors, ruleset =\n"
		"external|self; [tuning] rules, studies, trials, seed), the code, and for\n"
		"external tuning tuning_search_space.ini (or AlgoPerf's\n"
		"tuning_search_space.json). The same inputs give the same bytes; set\n"
		"SOURCE_DATE_EPOCH to fix the creation time as well. The submission is\n"
		"compiled first, in the runner's sandbox with its flags, and its exports are\n"
		"checked: an entry that cannot build is not packed. docs/submitting.md is the\n"
		"submission author's guide.",
		1, 1,
		"apf pack submissions/baselines/nadamw -w fmnist_mlp,fmnist_cnn "
		"-o nadamw.apf\n"
		"SOURCE_DATE_EPOCH=1700000000 apf pack submissions/baselines/adamw -w "
		"fmnist_mlp -o adamw.apf"};
	int nargs, rc = cmd_start("pack", &usage, opts, argc, argv, &nargs);
	if (rc >= 0)
		return rc;
	if (!workloads) {
		apf_error(APF_EUSAGE, "pack", "name the workloads with -w");
		return cmd_fail(APF_EUSAGE);
	}
	if (no_build && unsealed) {
		apf_error(APF_EUSAGE, "pack",
			  "--unsealed says how to build, --no-build not to: "
			  "give one");
		return cmd_fail(APF_EUSAGE);
	}
	if (seed < -1 || seed > 0xffffffffL) {
		apf_error(APF_EUSAGE, "pack", "--seed must be 0 to 4294967295");
		return cmd_fail(APF_EUSAGE);
	}
	char **names = NULL;
	size_t n = 0;
	rc = split_workloads(workloads, &names, &n);
	if (rc)
		return cmd_fail(rc);
	apf_key *key = NULL;
	int created = 0;
	rc = apf_key_open_signing(&key, key_path, &created);
	if (!rc && created) {
		char id[APF_KEYID_HEX];
		apf_key_id(key, id);
		fprintf(stderr, "apf: pack: created signing key %.16s... in "
				"$APF_HOME/keys (trusted on this machine)\n",
			id);
	}
	apf_entry *e = NULL;
	if (!rc) {
		struct apf_pack_opts o = {.submission_dir = argv[1],
					  .workloads = names,
					  .nworkloads = n,
					  .key = key,
					  .output = output,
					  .seed_set = seed >= 0,
					  .seed = (uint32_t)(seed >= 0 ? seed : 0),
					  .progress = hash_progress,
					  .check = no_build ? NULL : check_build,
					  .check_user = &unsealed};
		rc = apf_entry_pack(&e, &o);
		progress_done();
	}
	if (!rc)
		warn_unknown_hparams(argv[1], e->manifest);
	if (!rc) {
		const apf_manifest *m = e->manifest;
		char sz[32];
		/* The default path is <submission name>.apf. */
		printf("%s\n", term_text(e->path));
		fprintf(stderr,
			"apf: pack: %s: %s, %zu files, %s tuning (%ld x %ld), "
			"seed %u, signed by %.16s...\n",
			term_text(e->path), human_bytes(e->file_bytes, sz),
			m->submission.nfiles, m->tuning.ruleset,
			m->tuning.studies, m->tuning.trials, m->tuning.seed,
			e->signer);
	}
	apf_entry_free(e);
	apf_key_free(key);
	apf_config_list_free(names, n);
	return rc ? cmd_fail(rc) : 0;
}
