/*
 * main.c: `apf __eval`, the evaluator. Trusted and never loads
 * submission code: it maps the trial's arena read-only (fd 3) and, on each
 * "eval" from the supervisor (fd 5) - sent while the trial is frozen -
 * checks the arena's header, evaluates the parameters and model state on
 * the train subset, the validation and the test split, and answers one JSON
 * line of metrics. The same code re-evaluates checkpoints for the verifier
 * (apf_eval_arena).
 *
 * It computes on the CPU whatever device the trial trains on: a CUDA
 * trial's parameters reach the shared arena in its copy, on the
 * submission's clock (apf_trial_snapshot), and from there on everything a result rests on -
 * the metrics, the checkpoint, the target decision - is the CPU reference
 * path, which the verifier's --reeval repeats bit for bit on any machine.
 * A GPU evaluator would be faster, and an auditor without that GPU could
 * only compare its metrics within a tolerance.
 */
#include "eval/eval.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "workload/workload.h"

int apf_eval_main(int argc, char **argv)
{
	struct apf_unit_args a;
	struct apf_chan ch = {.fd = APF_FD_CHANNEL};
	apf_backend *be = NULL;
	apf_workload_spec *spec = NULL;
	apf_workload *wl = NULL;
	int rc = apf_unit_args_parse(&a, argc, argv);
	const void *arena = MAP_FAILED;
	if (!rc) {
		arena = mmap(NULL, a.arena_bytes, PROT_READ, MAP_SHARED, APF_FD_ARENA,
			     0);
		if (arena == MAP_FAILED)
			rc = apf_error_errno(APF_EABORT, errno, "evaluator",
					     "map the arena");
	}
	/* The run's numerics (nn.h): the metrics of a run made with an
	 * older version are recomputed with it. */
	if (!rc && a.numerics)
		rc = apf_numerics_set(a.numerics);
	if (!rc)
		rc = apf_backend_cpu_new(&be, a.threads);
	if (!rc) {
		char *dir = apf_path_join(a.workloads_dir, a.workload);
		rc = apf_workload_spec_load_dir(&spec, dir);
		free(dir);
	}
	if (!rc) {
		apf_trial_key key = {a.seed, a.study, a.trial};
		rc = apf_workload_open(&wl, spec, a.variant, be, &key, 0);
	}
	char line[APF_LINE_MAX];
	while (!rc) {
		int r = apf_chan_recv(&ch, line, sizeof line, -1);
		if (r != 1 || !strcmp(line, "quit"))
			break;
		if (strcmp(line, "eval")) {
			rc = apf_error(APF_EINTERNAL, "evaluator",
				       "unexpected '%.40s'", line);
			break;
		}
		json_t *metrics = NULL;
		int er = apf_eval_arena(&metrics, wl, spec, arena,
					a.arena_bytes);
		if (er) {
			apf_chan_send(APF_FD_CHANNEL, "error %s", apf_error_message());
			continue;
		}
		char *s = json_dumps(metrics, JSON_COMPACT | JSON_REAL_PRECISION(17));
		rc = s ? apf_chan_send(APF_FD_CHANNEL, "ok %s", s)
		       : apf_error(APF_ENOMEM, "evaluator", "out of memory");
		free(s);
		json_decref(metrics);
	}
	if (rc)
		apf_chan_send(APF_FD_CHANNEL, "error %s", apf_error_message());
	if (arena != MAP_FAILED)
		munmap((void *)arena, a.arena_bytes);
	apf_workload_close(wl);
	apf_workload_spec_free(spec);
	if (be)
		apf_backend_free(be);
	return rc ? 1 : 0;
}
