/*
 * clock.c: the clock a run's submission time is measured by (rundir.h,
 * "the clock"): its names, its rule for a step block, and the share of
 * run-queue wait that says a block did not get its cores.
 */
#include "rundir/rundir.h"

#include <math.h>
#include <string.h>

const char *apf_clock_name(int clock)
{
	return clock == APF_CLOCK_CPU ? "cpu" : "wall";
}

int apf_clock_parse(const char *name)
{
	if (!name)
		return -1;
	if (!strcmp(name, "wall"))
		return APF_CLOCK_WALL;
	if (!strcmp(name, "cpu"))
		return APF_CLOCK_CPU;
	return -1;
}

int apf_clock_of_run(const json_t *run_json)
{
	const json_t *c = json_object_get(json_object_get(run_json, "plan"),
					  "clock");
	if (!c)
		return APF_CLOCK_WALL;
	return json_is_string(c) ? apf_clock_parse(json_string_value(c)) : -1;
}

uint64_t apf_clock_block_ns(int clock, uint64_t wall_ns, uint64_t cpu_ns)
{
	return clock == APF_CLOCK_CPU ? cpu_ns / APF_CLOCK_CPU_CORES : wall_ns;
}

int apf_clock_short(uint64_t wall_ns, uint64_t wait_ns, long threads)
{
	if (threads < 1)
		threads = 1;
	return (double)wait_ns >
		       APF_CLOCK_SHORT_SHARE * (double)wall_ns * (double)threads &&
	       wait_ns > APF_CLOCK_SHORT_MIN_NS * (uint64_t)threads;
}

double apf_budget_scale_of_run(const json_t *run_json)
{
	const json_t *s = json_object_get(json_object_get(run_json, "plan"),
					  "budget_scale");
	if (!s)
		return 1.0;
	double x = json_is_number(s) ? json_number_value(s) : NAN;
	return x > 0 && x <= 1 ? x : 0;
}

int apf_numerics_of_run(const json_t *run_json)
{
	const json_t *n = json_object_get(run_json, "numerics");
	if (!n)
		return 1;
	json_int_t v = json_is_integer(n) ? json_integer_value(n) : -1;
	return v >= 1 && v <= 1000 ? (int)v : -1;
}
