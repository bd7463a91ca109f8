/*
 * opts.c: the option parser every subcommand uses, so each takes options the
 * same way (--name VALUE, --name=VALUE, -n VALUE, -- ends options) and prints
 * the same kind of usage.
 */
#include "cmd.h"

#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define USAGE_WIDTH 79
#define USAGE_PREFIX "usage: apf "

/* The synopsis as one line: each run of spaces and newlines is one space,
 * none at either end. */
static void synopsis_flat(char *out, size_t size, const char *syn)
{
	size_t n = 0;
	int space = 0;
	for (const char *p = syn ? syn : ""; *p && n + 1 < size; p++) {
		if (*p == ' ' || *p == '\n' || *p == '\t') {
			space = n > 0;
			continue;
		}
		if (space && n + 2 < size)
			out[n++] = ' ';
		space = 0;
		out[n++] = *p;
	}
	out[n] = 0;
}

/* The end of the word at p: up to a space at bracket depth lim or less,
 * the depth at p being *depth (updated to the depth at the end). */
static const char *synopsis_word(const char *p, int *depth, int lim)
{
	int d = *depth;
	while (*p && !(*p == ' ' && d <= lim)) {
		d += *p == '[' ? 1 : *p == ']' ? -1 : 0;
		p++;
	}
	*depth = d;
	return p;
}

/* "usage: apf <synopsis>", wrapped at USAGE_WIDTH between words outside
 * brackets ("[--replay N|all [--seed S]]" stays whole), each continuation
 * indented under the command name. A group too long for a line of its own
 * ("[--slurm [--partition P] ... [-- SBATCH_OPTIONS...]]") breaks between
 * its own words instead, never inside a group it holds. */
static void print_synopsis(FILE *f, const char *synopsis)
{
	char flat[1024];
	synopsis_flat(flat, sizeof flat, synopsis);
	const size_t indent = strlen(USAGE_PREFIX);
	size_t col = indent;
	fputs(USAGE_PREFIX, f);
	const char *p = flat;
	int first = 1, open = 0;
	while (*p) {
		int depth = open;
		const char *end = synopsis_word(p, &depth, open);
		if (indent + (size_t)(end - p) > USAGE_WIDTH) {
			depth = open;
			end = synopsis_word(p, &depth, open + 1);
		}
		open = depth;
		size_t len = (size_t)(end - p);
		if (!first && col + 1 + len > USAGE_WIDTH) {
			fprintf(f, "\n%*s", (int)indent, "");
			col = indent;
		} else if (!first) {
			fputc(' ', f);
			col++;
		}
		fwrite(p, 1, len, f);
		col += len;
		first = 0;
		p = *end ? end + 1 : end;
	}
	fputc('\n', f);
}

/* Each line of text, indented by two spaces. */
static void print_indented(FILE *f, const char *text)
{
	for (const char *p = text; *p;) {
		const char *nl = strchr(p, '\n');
		size_t len = nl ? (size_t)(nl - p) : strlen(p);
		if (len)
			fprintf(f, "  %.*s\n", (int)len, p);
		else
			fputc('\n', f);
		p += len + (nl ? 1 : 0);
	}
}

/* "  -w, --workloads W   help text", the help wrapped at USAGE_WIDTH
 * between words, continuations under the help's first column. */
static void print_option(FILE *f, const char *left, const char *help)
{
	int col = fprintf(f, "  %-26s", left);
	const int indent = 29;
	const char *p = help ? help : "";
	while (*p) {
		while (*p == ' ')
			p++;
		size_t len = strcspn(p, " ");
		if (!len)
			break;
		if (col > indent && col + 1 + (int)len > USAGE_WIDTH) {
			col = fprintf(f, "\n%*s", indent, "") - 1;
		} else {
			fputc(' ', f);
			col++;
		}
		fwrite(p, 1, len, f);
		col += (int)len;
		p += len;
	}
	fputc('\n', f);
}

void opts_print_usage(FILE *f, const char *cmd, const struct apf_usage *usage,
		      const struct apf_opt *opts)
{
	(void)cmd;
	print_synopsis(f, usage->synopsis);
	fprintf(f, "\n%s\n", usage->summary);
	/* Every command takes -h, so there is always an options list. */
	fprintf(f, "\noptions:\n");
	for (const struct apf_opt *o = opts; o && o->name; o++) {
		char left[64];
		if (o->short_name)
			snprintf(left, sizeof left, "-%c, --%s%s%s",
				 o->short_name, o->name, o->arg ? " " : "",
				 o->arg ? o->arg : "");
		else
			snprintf(left, sizeof left, "    --%s%s%s", o->name,
				 o->arg ? " " : "", o->arg ? o->arg : "");
		print_option(f, left, o->help);
	}
	print_option(f, "-h, --help", "show this help");
	if (usage->details)
		fprintf(f, "\n%s\n", usage->details);
	if (usage->examples && *usage->examples) {
		fprintf(f, "\nexamples:\n");
		print_indented(f, usage->examples);
	}
}

static const struct apf_opt *find_long(const struct apf_opt *opts,
				       const char *name, size_t len)
{
	for (const struct apf_opt *o = opts; o && o->name; o++)
		if (strlen(o->name) == len && !strncmp(o->name, name, len))
			return o;
	return NULL;
}

static const struct apf_opt *find_short(const struct apf_opt *opts, char c)
{
	for (const struct apf_opt *o = opts; o && o->name; o++)
		if (o->short_name == c)
			return o;
	return NULL;
}

static int set_value(const char *cmd, const struct apf_opt *o,
		     const char *value)
{
	switch (o->type) {
	case OPT_FLAG:
		*(int *)o->value = 1;
		return 0;
	case OPT_STRING:
		*(const char **)o->value = value;
		return 0;
	case OPT_INT: {
		char *end;
		errno = 0;
		long v = strtol(value, &end, 10);
		if (errno || end == value || *end)
			return apf_error(APF_EUSAGE, cmd,
					 "--%s: expected an integer, got '%s'",
					 o->name, value);
		*(long *)o->value = v;
		return 0;
	}
	}
	return APF_EINTERNAL;
}

int opts_parse(const char *cmd, const struct apf_usage *usage,
	       const struct apf_opt *opts, int argc, char **argv, int *nargs)
{
	int npos = 0, only_pos = 0;
	for (int i = 1; i < argc; i++) {
		char *a = argv[i];
		if (only_pos || a[0] != '-' || a[1] == 0) {
			argv[1 + npos++] = a;
			continue;
		}
		if (!strcmp(a, "--")) {
			only_pos = 1;
			continue;
		}
		if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
			opts_print_usage(stdout, cmd, usage, opts);
			return 1;
		}
		const struct apf_opt *o;
		const char *inline_val = NULL;
		if (a[1] == '-') {
			const char *name = a + 2, *eq = strchr(name, '=');
			size_t len = eq ? (size_t)(eq - name) : strlen(name);
			o = find_long(opts, name, len);
			if (!o)
				return apf_error(APF_EUSAGE, cmd,
						 "unknown option '--%.*s' (see "
						 "'apf %s --help')",
						 (int)len, name, cmd);
			if (eq)
				inline_val = eq + 1;
		} else {
			o = find_short(opts, a[1]);
			if (!o)
				return apf_error(APF_EUSAGE, cmd,
						 "unknown option '-%c' (see "
						 "'apf %s --help')",
						 a[1], cmd);
			if (a[2])
				inline_val = a + 2;
		}
		if (o->type == OPT_FLAG) {
			if (inline_val)
				return apf_error(APF_EUSAGE, cmd,
						 "--%s takes no value", o->name);
			set_value(cmd, o, NULL);
			continue;
		}
		if (!inline_val) {
			if (i + 1 >= argc)
				return apf_error(APF_EUSAGE, cmd,
						 "--%s needs a value (%s)",
						 o->name, o->arg ? o->arg : "");
			inline_val = argv[++i];
		}
		int rc = set_value(cmd, o, inline_val);
		if (rc)
			return rc;
	}
	*nargs = npos;
	char flat[1024];
	synopsis_flat(flat, sizeof flat, usage->synopsis);
	if (npos < usage->min_args)
		return apf_error(APF_EUSAGE, cmd,
				 "missing argument (usage: apf %s)", flat);
	if (usage->max_args >= 0 && npos > usage->max_args)
		return apf_error(APF_EUSAGE, cmd,
				 "unexpected argument '%s' (usage: apf %s)",
				 argv[1 + usage->max_args], flat);
	return 0;
}

int cmd_fail(int status)
{
	fflush(stdout);
	progress_done();
	fprintf(stderr, "apf: %s\n", apf_error_message());
	return apf_exit_code(status);
}

int cmd_start(const char *cmd, const struct apf_usage *usage,
	      const struct apf_opt *opts, int argc, char **argv, int *nargs)
{
	int rc = opts_parse(cmd, usage, opts, argc, argv, nargs);
	if (rc == 1)
		return 0;
	if (rc)
		return cmd_fail(rc);
	return -1;
}

/* ---- progress line ------------------------------------------------------- */

static int progress_state = -1; /* -1 unknown, 0 off, 1 on */
static int progress_shown;

int progress_enabled(void)
{
	if (progress_state < 0)
		progress_state = isatty(STDOUT_FILENO) && isatty(STDERR_FILENO);
	return progress_state;
}

void progress_show(const char *fmt, ...)
{
	if (!progress_enabled())
		return;
	char line[256], safe[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(line, sizeof line, fmt, ap);
	va_end(ap);
	/* The line may name a workload or a unit from a run's log; it is
	 * one line, escaped whole. */
	apf_text_escape(safe, sizeof safe, line);
	fprintf(stderr, "\r%s\033[K", safe);
	fflush(stderr);
	progress_shown = 1;
}

void progress_done(void)
{
	if (progress_shown) {
		fprintf(stderr, "\r\033[K");
		fflush(stderr);
		progress_shown = 0;
	}
}

const char *human_bytes(uint64_t n, char buf[32])
{
	static const char *const unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
	double v = (double)n;
	int u = 0;
	while (v >= 1024 && u < 4) {
		v /= 1024;
		u++;
	}
	if (u == 0)
		snprintf(buf, 32, "%llu B", (unsigned long long)n);
	else
		snprintf(buf, 32, "%.1f %s", v, unit[u]);
	return buf;
}

void hash_progress(void *user, uint64_t done, uint64_t total, size_t files,
		   size_t nfiles)
{
	(void)user;
	char a[32], b[32];
	progress_show("hashing %s / %s, %zu / %zu files", human_bytes(done, a),
		      human_bytes(total, b), files, nfiles);
}

double cmd_budget_scale(const char *text)
{
	char *end = NULL;
	double f = strtod(text, &end);
	return end && !*end && end != text && f > 0 && f <= 1 ? f : 0;
}
