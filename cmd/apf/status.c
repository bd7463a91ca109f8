/*
 * status.c: `apf status RUN_DIR [--json]`: where each unit of a run stands
 * (pkg/rundir's apf_rundir_status), read while the run may be under way.
 */
#include "cmd.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "rundir/rundir.h"

static void seconds(char *out, size_t size, const json_t *v)
{
	if (json_is_number(v))
		snprintf(out, size, "%.2f", json_number_value(v));
	else
		snprintf(out, size, "-");
}

int cmd_status(int argc, char **argv)
{
	int json = 0;
	const struct apf_opt opts[] = {
		{"json", 0, OPT_FLAG, &json, NULL, "print the status as JSON"},
		{0},
	};
	const struct apf_usage usage = {
		"status RUN_DIR [--json]",
		"Show where each unit of a run stands: pending, running, done, "
		"failed or\npreempted (started, stopped before its end: apf run "
		"--resume continues it),\nwith its evals and its submission time "
		"against its budget. The budget is checked\nat evals, so a "
		"trial's last steps before the eval that ends it may take its "
		"time\npast the budget.",
		"Read while the run may be under way, not verified (apf verify "
		"does that).\nExit 0, or 2 when RUN_DIR is no run directory.",
		1, 1,
		"apf status nadamw.run\napf status nadamw.run --json"};
	int nargs, rc = cmd_start("status", &usage, opts, argc, argv, &nargs);
	if (rc >= 0)
		return rc;
	json_t *st = NULL;
	if ((rc = apf_rundir_check(argv[1])))
		return cmd_fail(apf_error_prefix(rc, "status"));
	rc = apf_rundir_status(&st, argv[1]);
	if (rc)
		return cmd_fail(rc);
	if (json) {
		rc = cmd_print_json(st, JSON_REAL_PRECISION(10));
		return rc ? cmd_fail(rc) : 0;
	}
	json_t *c = json_object_get(st, "counts");
	long long planned =
		(long long)json_integer_value(json_object_get(st, "units_planned"));
	printf("%s: %lld unit%s planned: %lld done, %lld running, %lld "
	       "failed, %lld preempted, %lld pending\n",
	       term_text(argv[1]), planned, planned == 1 ? "" : "s",
	       (long long)json_integer_value(json_object_get(c, "done")),
	       (long long)json_integer_value(json_object_get(c, "running")),
	       (long long)json_integer_value(json_object_get(c, "failed")),
	       (long long)json_integer_value(json_object_get(c, "preempted")),
	       (long long)json_integer_value(json_object_get(c, "pending")));
	size_t i;
	json_t *u;
	json_array_foreach(json_object_get(st, "units"), i, u)
	{
		char sub[32], bud[32];
		seconds(sub, sizeof sub, json_object_get(u, "submission_s"));
		seconds(bud, sizeof bud, json_object_get(u, "budget_s"));
		const char *problem =
			json_string_value(json_object_get(u, "problem"));
		/* The unit's name is run.json's workload and variant: the
		 * operator's text. */
		char safe[600];
		apf_text_escape(safe, sizeof safe,
				json_string_value(json_object_get(u, "unit")));
		char times[160] = "";
		const json_t *ss = json_object_get(u, "submission_s"),
			     *bs = json_object_get(u, "budget_s");
		/* The budget is checked at evals: the last block before the
		 * eval that ends a trial may take it past the budget. */
		int over = json_is_number(ss) && json_is_number(bs) &&
			   json_number_value(ss) > json_number_value(bs);
		if (json_is_number(ss))
			snprintf(times, sizeof times, "  %8s / %s s%s", sub, bud,
				 over ? " (over: the budget is checked at "
					"evals)"
				      : "");
		json_t *sl = json_object_get(u, "slurm");
		char task[200] = "";
		if (sl) {
			char job[64], id[64];
			const char *j = json_string_value(json_object_get(sl, "job_id"));
			const char *t = json_string_value(
				json_object_get(sl, "array_task_id"));
			apf_text_escape(job, sizeof job, j ? j : "?");
			apf_text_escape(id, sizeof id, t ? t : "?");
			snprintf(task, sizeof task, "  slurm %s_%s", job, id);
		}
		printf("  %-40s %-9s %4lld evals%s%s%s%s\n", safe,
		       term_text(json_string_value(json_object_get(u, "state"))),
		       (long long)json_integer_value(json_object_get(u, "evals")),
		       times, task, problem ? "  " : "",
		       problem ? term_text(problem) : "");
	}
	json_decref(st);
	return 0;
}
