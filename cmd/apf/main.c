/*
 * main.c: the apf command-line tool. A table maps each subcommand to its
 * cmd_<name> function in cmd/apf/<name>.c; this file only dispatches and
 * answers --help and --version.
 */
#include "cmd.h"

#include <limits.h>
#include <locale.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

extern const char apf_build_id[];

static const struct apf_command commands[] = {
	{"keygen", cmd_keygen, "generate an Ed25519 signing key pair"},
	{"hash", cmd_hash, "print the tree digest of a directory or file"},
	{"env", cmd_env, "print this machine's environment record"},
	{"pack", cmd_pack, "pack a submission into a signed entry (.apf)"},
	{"inspect", cmd_inspect, "show what an entry holds"},
	{"verify", cmd_verify, "check an entry, or audit a run (signatures, re-evaluation, replay)"},
	{"plan", cmd_plan, "print the trials a run will execute"},
	{"run", cmd_run, "run an entry's trials in the sealed runner"},
	{"status", cmd_status, "where each unit of a run stands"},
	{"score", cmd_score, "performance profiles and benchmark scores"},
	{"report", cmd_report, "one offline HTML page: curves, profiles, verdicts, provenance"},
	{"train", cmd_train, "train a workload with the reference AdamW (development)"},
	{"heldout", cmd_heldout, "draw or verify the held-out variants"},
	{"workloads", cmd_workloads, "list workloads, variants, targets and budgets"},
	/* started by apf run, not by people */
	{"__build", cmd_build_internal, NULL},
	{"__trial", cmd_trial_internal, NULL},
	{"__eval", cmd_eval_internal, NULL},
};

#define NCOMMANDS (sizeof commands / sizeof commands[0])

static void print_help(FILE *f)
{
	fprintf(f, "usage: apf <command> [options] [arguments]\n\n"
		   "apf packs, runs, verifies and scores training-algorithm "
		   "benchmark entries\nso that a result can be trusted without "
		   "rerunning it.\n\ncommands:\n");
	for (size_t i = 0; i < NCOMMANDS; i++)
		if (commands[i].summary)
			fprintf(f, "  %-10s %s\n", commands[i].name,
				commands[i].summary);
	fprintf(f, "\n'apf <command> --help' describes a command. "
		   "Exit codes: 0 ok, 1 verification\nfailed, 2 usage or input "
		   "error, 3 run stopped abnormally.\n");
}

/* A relative APF_WORKLOADS_DIR (the docs' "tests/data/workloads") means
 * relative to where apf was started: made absolute once, here, it means the
 * same in every process apf starts, whatever directory that runs in, and
 * an error names the directory that was looked in. */
static void absolute_workloads_dir(void)
{
	const char *d = getenv("APF_WORKLOADS_DIR");
	char cwd[PATH_MAX], abs[PATH_MAX + 4096];
	if (!d || !*d || d[0] == '/' || !getcwd(cwd, sizeof cwd))
		return;
	while (d[0] == '.' && d[1] == '/')
		d += 2;
	int n = !strcmp(d, ".") ? snprintf(abs, sizeof abs, "%s", cwd)
				: snprintf(abs, sizeof abs, "%s/%s", cwd, d);
	if (n > 0 && (size_t)n < sizeof abs)
		setenv("APF_WORKLOADS_DIR", abs, 1);
}

int main(int argc, char **argv)
{
	setlocale(LC_ALL, "C");
	absolute_workloads_dir();
	if (argc < 2) {
		print_help(stderr);
		return 2;
	}
	const char *name = argv[1];
	if (!strcmp(name, "--help") || !strcmp(name, "-h") ||
	    (!strcmp(name, "help") && argc == 2)) {
		print_help(stdout);
		return 0;
	}
	if (!strcmp(name, "--version") || !strcmp(name, "version")) {
		printf("apf %s (%s)\n", APF_VERSION, apf_build_id);
		return 0;
	}
	if (!strcmp(name, "help")) {
		/* apf help COMMAND [SUBCOMMAND]: that command's --help. */
		name = argv[2];
		char *help_argv[] = {argv[2], argc >= 4 ? argv[3] : "--help",
				     argc >= 4 ? "--help" : NULL, NULL};
		for (size_t i = 0; i < NCOMMANDS; i++)
			if (commands[i].summary && !strcmp(commands[i].name, name))
				return commands[i].run(argc >= 4 ? 3 : 2, help_argv);
		apf_error(APF_EUSAGE, "help", "no command '%s' (see 'apf --help')",
			  name);
		return cmd_fail(APF_EUSAGE);
	}
	for (size_t i = 0; i < NCOMMANDS; i++)
		if (!strcmp(commands[i].name, name)) {
			int rc = commands[i].run(argc - 1, argv + 1);
			cmd_text_free();
			return rc;
		}
	apf_error(APF_EUSAGE, name, "unknown command (see 'apf --help')");
	return cmd_fail(APF_EUSAGE);
}
