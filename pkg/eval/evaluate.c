/*
 * evaluate.c: metrics of an arena, for the evaluator and the verifier.
 */
#include "eval/eval.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "wire/wire.h"
#include "workload/workload.h"

int apf_eval_arena(json_t **out, struct apf_workload *wl,
		   const struct apf_workload_spec *spec, const void *arena,
		   size_t bytes)
{
	*out = NULL;
	int rc = apf_arena_check(arena, bytes);
	if (rc)
		return rc;
	const struct apf_arena_header *h = arena;
	apf_net *net = apf_workload_net(wl);
	if (h->params_floats != apf_net_param_floats(net) ||
	    h->state_floats != apf_net_state_floats(net))
		return apf_error(APF_EVERIFY, "arena",
				 "laid out for another model (%llu parameters, "
				 "the workload has %zu)",
				 (unsigned long long)h->params_floats,
				 apf_net_param_floats(net));
	const float *params = (const float *)((const char *)arena + h->params_offset);
	const float *state = (const float *)((const char *)arena + h->state_offset);
	apf_workload_eval ev;
	unsigned splits = 1u << APF_SPLIT_TRAIN | 1u << APF_SPLIT_VALIDATION |
			  1u << APF_SPLIT_TEST;
	rc = apf_workload_evaluate(&ev, wl, params, state, splits);
	if (rc)
		return rc;
	static const char *const names[] = {"train", "validation", "test"};
	json_t *o = json_object();
	for (int s = 0; s < 3 && o; s++) {
		char key[96];
		snprintf(key, sizeof key, "%s/loss", names[s]);
		json_object_set_new(o, key, json_real(ev.split[s].loss));
		for (size_t k = 0; k < spec->nmetrics; k++) {
			snprintf(key, sizeof key, "%s/%s", names[s],
				 spec->metrics[k]);
			json_object_set_new(
				o, key,
				json_real(apf_split_metric(&ev.split[s],
							   spec->metrics[k])));
		}
		if (s > 0) {
			snprintf(key, sizeof key, "%s/num_examples", names[s]);
			json_object_set_new(o, key,
					    json_integer((json_int_t)ev.split[s].n));
		}
	}
	if (!o)
		return apf_error(APF_ENOMEM, "evaluate", "out of memory");
	*out = o;
	return 0;
}

double apf_eval_metric(const json_t *m, const char *split, const char *name)
{
	char key[128];
	snprintf(key, sizeof key, "%s/%s", split, name);
	json_t *v = json_object_get(m, key);
	return json_is_number(v) ? json_number_value(v) : NAN;
}
