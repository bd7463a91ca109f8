/*
 * ports.c: apf's side of bench/ports. Times whole training steps of
 * submissions (next batch, forward, backward, the submission's update
 * through the harness, as a trial runs them, unsealed) on one workload,
 * the submissions in alternation round after round, so a machine whose
 * speed drifts moves them all alike.
 *
 *     ports WORKLOAD THREADS STEPS ROUNDS SUBMISSION_DIR...
 *
 * Each submission is built as the runner builds it, with its self-tuning
 * defaults (no hyperparameters), and its own batch size. Each round runs
 * every submission afresh from the workload's initialisation: init, STEPS/4
 * warm-up steps, then STEPS timed steps. Output, one line per figure:
 *     ms_per_step <submission> <median over rounds of the round's mean>
 *     spread <submission> <(max - min) / median over rounds>
 *     batch <submission> <its batch size>
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trial/trial.h"
#include "workload/workload.h"

#define SLOT_FACTOR 16 /* as the runner's (pkg/host/host.c) */

static int die(const char *what)
{
	fprintf(stderr, "ports: %s: %s\n", what, apf_error_message());
	return 2;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

static const char *base_name(const char *path)
{
	const char *s = strrchr(path, '/');
	return s && s[1] ? s + 1 : path;
}

/* One round of one submission: ms per step, or < 0 on failure. */
static double one_round(apf_workload *wl, const apf_workload_spec *spec,
			apf_backend *be, const apf_submission *sub, long steps)
{
	struct apf_objective obj;
	apf_objective_of_workload(&obj, wl);
	const struct apf_budget *bud = apf_workload_budget(spec, "base");
	struct apf_trial_info info = {
		.workload = spec->name,
		.variant = "base",
		.metric = spec->metric,
		.device = "cpu",
		.train_examples = 0,
		.max_runtime_s = bud ? bud->max_runtime_s : 600,
		.max_steps = spec->max_steps,
		.step_hint = spec->max_steps,
	};
	size_t cap = apf_arena_capacity(obj.param_floats, obj.state_floats,
					SLOT_FACTOR);
	void *arena = calloc(1, cap);
	apf_trial *t = NULL;
	double ms = -1;
	static const apf_hparams none; /* self-tuning: the defaults */
	if (!arena || apf_trial_new(&t, &obj, be, sub, &none, &info, arena, cap) ||
	    apf_trial_init(t))
		goto out;
	long warm = steps / 4 > 1 ? steps / 4 : 1;
	uint64_t t0 = 0;
	for (long s = 0; s < warm + steps; s++) {
		if (s == warm) {
			if (be->sync(be))
				goto out;
			t0 = apf_now_ns();
		}
		int complete;
		if (apf_trial_step(t, &complete))
			goto out;
	}
	if (be->sync(be))
		goto out;
	ms = (double)(apf_now_ns() - t0) / 1e6 / (double)steps;
out:
	apf_trial_free(t);
	free(arena);
	return ms;
}

int main(int argc, char **argv)
{
	if (argc < 6) {
		fprintf(stderr, "usage: ports WORKLOAD THREADS STEPS ROUNDS "
				"SUBMISSION_DIR...\n");
		return 2;
	}
	const char *name = argv[1];
	int threads = atoi(argv[2]);
	long steps = atol(argv[3]), rounds = atol(argv[4]);
	int nsub = argc - 5;
	if (threads <= 0 || steps <= 0 || rounds <= 0 || rounds > 100)
		return fprintf(stderr, "ports: bad arguments\n"), 2;
	char tmpl[] = "/tmp/apf-bench-ports-XXXXXX";
	char *dir = mkdtemp(tmpl);
	if (!dir)
		return fprintf(stderr, "ports: mkdtemp failed\n"), 2;
	apf_submission **subs = calloc((size_t)nsub, sizeof *subs);
	double *ms = calloc((size_t)(nsub * rounds), sizeof *ms);
	if (!subs || !ms)
		return 2;
	char inc[4200], so[4200], root[4096];
	if (!realpath(getenv("APF_ROOT") ? getenv("APF_ROOT") : ".", root))
		return fprintf(stderr, "ports: APF_ROOT: no such directory\n"), 2;
	snprintf(inc, sizeof inc, "%s/include", root);
	for (int i = 0; i < nsub; i++) {
		snprintf(so, sizeof so, "%s/%d.so", dir, i);
		char src[4096];
		if (!realpath(argv[5 + i], src))
			return fprintf(stderr, "ports: %s: no such directory\n",
				       argv[5 + i]),
			       2;
		if (apf_submission_build(src, inc, so, NULL) ||
		    apf_submission_load(&subs[i], so))
			return die(argv[5 + i]);
		remove(so);
	}
	remove(dir);
	apf_workload_spec *spec;
	apf_backend *be;
	if (apf_workload_spec_load(&spec, name) ||
	    apf_backend_cpu_new(&be, threads))
		return die(name);
	int *batch = calloc((size_t)nsub, sizeof *batch);
	for (int i = 0; i < nsub; i++)
		if (!batch || apf_submission_batch_size(&batch[i], subs[i], name))
			return die(argv[5 + i]);
	apf_workload *wl;
	apf_trial_key key = {1, 0, 1};
	if (apf_workload_open(&wl, spec, "base", be, &key, 0))
		return die(name);
	for (long r = 0; r < rounds; r++)
		for (int i = 0; i < nsub; i++) {
			double v = one_round(wl, spec, be, subs[i], steps);
			if (v < 0)
				return die(argv[5 + i]);
			ms[i * rounds + r] = v;
		}
	apf_workload_close(wl);
	for (int i = 0; i < nsub; i++) {
		double *m = ms + i * rounds;
		qsort(m, (size_t)rounds, sizeof *m, cmp_double);
		double med = m[rounds / 2];
		printf("ms_per_step %s %.3f\n", base_name(argv[5 + i]), med);
		printf("spread %s %.4f\n", base_name(argv[5 + i]),
		       (m[rounds - 1] - m[0]) / med);
		printf("batch %s %d\n", base_name(argv[5 + i]), batch[i]);
		apf_submission_free(subs[i]);
	}
	apf_backend_free(be);
	apf_workload_spec_free(spec);
	free(subs);
	free(ms);
	free(batch);
	return 0;
}
