/*
 * apf/schedule.h: learning-rate schedules for submissions, header-only.
 *
 * The baselines use linear warmup then cosine decay, as AlgoPerf's do:
 * warmup over floor(warmup_fraction * total) steps from 0 to the peak, then
 * a cosine from the peak to 0 over the remaining steps, and 0 after them.
 * `step` counts updates from 0.
 */
#ifndef APF_SCHEDULE_H
#define APF_SCHEDULE_H

#include <math.h>
#include <stdint.h>

static inline double apf_warmup_cosine(double peak, int64_t step, double total,
				       double warmup_fraction)
{
	double warm = floor(warmup_fraction * total);
	double s = (double)step;
	if (s < warm)
		return peak * s / warm;
	double decay = total - warm;
	if (decay < 1.0)
		decay = 1.0;
	double t = (s - warm) / decay;
	if (t > 1.0)
		t = 1.0;
	return peak * 0.5 * (1.0 + cos(3.14159265358979323846 * t));
}

/* Linear warmup to the peak, then constant (Schedule-Free's schedule). */
static inline double apf_warmup_constant(double peak, int64_t step,
					 double warmup_steps)
{
	double s = (double)step + 1.0;
	return warmup_steps > 0.0 && s < warmup_steps ? peak * s / warmup_steps
						       : peak;
}

#endif
