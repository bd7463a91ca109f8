/*
 * fuzz_unit_args.c: libFuzzer target for the unit-argument parser
 * (pkg/wire's apf_unit_args_parse), which the trial and the evaluator run
 * on the arguments the supervisor gives them. The input is an argument
 * vector, its words separated by NUL bytes. Any input must give 0 or a
 * usage error with a message; arguments that parse must write back
 * (apf_unit_args_to_argv, what the supervisor does) to a vector that
 * parses to the same values.
 */
#include "fuzzlib.h"

#include <math.h>

#include "wire/wire.h"

#define MAX_WORDS 64

static int same_text(const char *a, const char *b)
{
	return (!a && !b) || (a && b && !strcmp(a, b));
}

static void check_same(const struct apf_unit_args *a,
		       const struct apf_unit_args *b, int trial)
{
	int same = same_text(a->workloads_dir, b->workloads_dir) &&
		   same_text(a->workload, b->workload) &&
		   same_text(a->variant, b->variant) &&
		   same_text(a->device, b->device) && a->seed == b->seed &&
		   a->study == b->study && a->trial == b->trial &&
		   a->threads == b->threads && a->arena_bytes == b->arena_bytes;
	if (trial)
		same = same && same_text(a->so, b->so) &&
		       same_text(a->hparams, b->hparams) &&
		       a->max_steps == b->max_steps &&
		       a->step_hint == b->step_hint &&
		       (a->budget_s == b->budget_s ||
			(isnan(a->budget_s) && isnan(b->budget_s))) &&
		       a->train_h == b->train_h && a->train_w == b->train_w &&
		       a->train_c == b->train_c &&
		       a->train_classes == b->train_classes &&
		       a->train_n == b->train_n;
	if (!same) {
		fprintf(stderr, "written back, the arguments read otherwise\n");
		abort();
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	/* The words: argv[0] is the command, as the parser expects. */
	char *text = fuzz_text(data, size);
	static char cmd[] = "__trial";
	char *argv[MAX_WORDS + 1];
	int argc = 0;
	argv[argc++] = cmd;
	for (size_t i = 0; i < size && argc < MAX_WORDS;) {
		argv[argc++] = text + i;
		size_t n = strnlen(text + i, size - i);
		text[i + n] = 0; /* the last word ends at the input's end */
		i += n + 1;
	}
	argv[argc] = NULL;
	struct apf_unit_args a;
	apf_error_clear();
	int rc = apf_unit_args_parse(&a, argc, argv);
	if (rc && (rc != APF_EUSAGE ||
		   !strcmp(apf_error_message(), "unknown error"))) {
		fprintf(stderr, "unexpected status %d: %s\n", rc,
			apf_error_message());
		abort();
	}
	if (!rc) {
		/* The trial's arguments only where the input gave what the
		 * trial needs (the supervisor always does). */
		int trial = a.so && a.hparams;
		char *back[MAX_WORDS + 1];
		size_t n = 0;
		apf_buf storage = {0};
		back[n++] = cmd;
		if (apf_unit_args_to_argv(&a, trial, back, &n, &storage))
			abort();
		back[n] = NULL;
		struct apf_unit_args b;
		if (apf_unit_args_parse(&b, (int)n, back)) {
			fprintf(stderr, "written back, refused: %s\n",
				apf_error_message());
			abort();
		}
		check_same(&a, &b, trial);
		apf_buf_free(&storage);
	}
	free(text);
	return 0;
}
