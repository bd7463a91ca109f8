/*
 * pack.c: `apf pack SUBMISSION_DIR -w WORKLOAD[,...] [-k KEY] [-o ENTRY.apf]`.
 */
#include "cmd.h"

#include <stdlib.h>
#include <string.h>

#include "config/config.h"
#include "entry/entry.h"
#include "host/host.h"

/* Compiles the submission as the runner will (same sandbox, flags and
 * export check), so that an entry that cannot build is never signed. */
static int check_build(void *user, const char *dir)
{
	const int *unsealed = user;
	char *exe = NULL, *inc = NULL;
	int rc = apf_host_find_self(&exe, &inc);
	char detail[1024] = "";
	if (!rc)
		rc = apf_host_check_build(exe, inc, dir, !*unsealed, detail,
					  sizeof detail);
	free(exe);
	free(inc);
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
		 "sign with this private key (default: $APF_HOME/keys/default)"},
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
