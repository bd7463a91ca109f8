/*
 * cmd.h: what every subcommand file shares: the command table entry, the one
 * option parser, error reporting and the progress line.
 *
 * Each subcommand lives in cmd/apf/<name>.c as `int cmd_<name>(argc, argv)`
 * and returns the process exit code; nothing below cmd/ calls exit().
 */
#ifndef APF_CMD_H
#define APF_CMD_H

#include <jansson.h>
#include <stdint.h>
#include <stdio.h>

#include "base/base.h"

struct apf_command {
	const char *name;
	int (*run)(int argc, char **argv);
	const char *summary;
};

enum apf_opt_type { OPT_FLAG, OPT_STRING, OPT_INT };

/* One option: value is int* (FLAG, set to 1), const char** (STRING) or
 * long* (INT). The table ends with an entry whose name is NULL. */
struct apf_opt {
	const char *name;
	char short_name;
	enum apf_opt_type type;
	void *value;
	const char *arg;
	const char *help;
};

/* How a command is called: "pack SUBMISSION_DIR -w WORKLOAD[,...] ...",
 * a one-line summary, optional paragraphs printed after the options, and
 * examples: command lines, one a line, that work as written on the
 * README's demo files, printed last under "examples:".
 *
 * The synopsis is one line of words; opts.c wraps it for --help and prints
 * it whole in usage errors (a newline or a run of spaces in it is read as
 * one space, so no message shows the wrapping). */
struct apf_usage {
	const char *synopsis;
	const char *summary;
	const char *details;
	int min_args, max_args; /* positional arguments; max -1 = unbounded */
	const char *examples;   /* NULL: none */
};

/* Parses argv[1..] (argv[0] is the command name). Positional arguments are
 * compacted into argv[1..*nargs]. Returns 0 to go on, 1 when --help was
 * printed (exit 0), or APF_EUSAGE with the message set. */
int opts_parse(const char *cmd, const struct apf_usage *usage,
	       const struct apf_opt *opts, int argc, char **argv, int *nargs);
void opts_print_usage(FILE *f, const char *cmd, const struct apf_usage *usage,
		      const struct apf_opt *opts);

/* Prints "apf: <message>" for status and returns its exit code. */
int cmd_fail(int status);
/* Standard start of every command: parses, handles --help and usage errors.
 * Returns -1 to go on, else the exit code to return. */
int cmd_start(const char *cmd, const struct apf_usage *usage,
	      const struct apf_opt *opts, int argc, char **argv, int *nargs);

/* A one-line progress display on stderr, only when stdout and stderr are
 * terminals; progress_done() clears it. */
void progress_show(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void progress_done(void);
int progress_enabled(void);

/* Text the command did not write (an entry's, a run's, a log
 * directory's), as show.c says: term_text for a terminal (apf_buf_escape),
 * utf8_text for JSON (apf_buf_utf8; NULL stays NULL). The copies live
 * until cmd_text_free, which main calls after the command; term_text
 * never returns NULL ("?" for NULL or out of memory). */
const char *term_text(const char *text);
const char *utf8_text(const char *text);
void cmd_text_free(void);
/* Prints o (its reference is taken) on stdout as indented JSON in ASCII
 * alone, flags added (JSON_REAL_PRECISION); a NULL o, or one that cannot
 * be written, is an error, never an empty output. */
int cmd_print_json(json_t *o, size_t flags);
/* --budget-scale F: a number in (0, 1]; 0 when the text is not one. */
double cmd_budget_scale(const char *text);
#define CMD_BUDGET_SCALE_BAD "--budget-scale takes a number in (0, 1]"

/* "12.3 MiB" */
const char *human_bytes(uint64_t n, char buf[32]);
/* An apf_hash_progress_fn that draws the progress line. */
void hash_progress(void *user, uint64_t done, uint64_t total, size_t files,
		   size_t nfiles);

int cmd_keygen(int argc, char **argv);
int cmd_hash(int argc, char **argv);
int cmd_env(int argc, char **argv);
int cmd_pack(int argc, char **argv);
int cmd_inspect(int argc, char **argv);
int cmd_verify(int argc, char **argv);
int cmd_plan(int argc, char **argv);
int cmd_run(int argc, char **argv);
int cmd_status(int argc, char **argv);
int cmd_build_internal(int argc, char **argv);
int cmd_trial_internal(int argc, char **argv);
int cmd_eval_internal(int argc, char **argv);
int cmd_score(int argc, char **argv);
int cmd_report(int argc, char **argv);
int cmd_heldout(int argc, char **argv);
int cmd_workloads(int argc, char **argv);
int cmd_train(int argc, char **argv);

#endif
