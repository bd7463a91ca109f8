/*
 * isa.c: detection of the CPU backend's instruction-set paths and the
 * APF_CPU_ISA override (isa.h).
 */
#include "nn/cpu/isa.h"

#include <stdlib.h>
#include <string.h>

#include "base/base.h"

static const struct {
	int isa;
	const char *name;
	const char *lacks; /* what a CPU without it lacks, for the refusal */
} paths[] = {
	{APF_CPU_ISA_SCALAR, "scalar", NULL},
	{APF_CPU_ISA_AVX2, "avx2", "AVX2 and FMA"},
	{APF_CPU_ISA_AVX512, "avx512", "AVX-512F"},
};
#define NPATHS (sizeof paths / sizeof paths[0])

unsigned apf_cpu_isa_available(void)
{
	unsigned have = 1u << APF_CPU_ISA_SCALAR;
	__builtin_cpu_init();
	if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
		have |= 1u << APF_CPU_ISA_AVX2;
	/* The AVX-512 path also runs the AVX2 kernel on narrow shapes
	 * (gemm.c), so it needs both. */
	if ((have & (1u << APF_CPU_ISA_AVX2)) &&
	    __builtin_cpu_supports("avx512f"))
		have |= 1u << APF_CPU_ISA_AVX512;
	return have;
}

static int best_of(unsigned available)
{
	int best = APF_CPU_ISA_SCALAR;
	for (size_t i = 0; i < NPATHS; i++)
		if (available & (1u << paths[i].isa))
			best = paths[i].isa;
	return best;
}

int apf_cpu_isa_best(void)
{
	return best_of(apf_cpu_isa_available());
}

const char *apf_cpu_isa_name(int isa)
{
	for (size_t i = 0; i < NPATHS; i++)
		if (paths[i].isa == isa)
			return paths[i].name;
	return NULL;
}

int apf_cpu_isa_choose(int *out, const char *value, unsigned available)
{
	*out = best_of(available);
	if (!value || !*value)
		return 0;
	for (size_t i = 0; i < NPATHS; i++) {
		if (strcmp(value, paths[i].name))
			continue;
		if (!(available & (1u << paths[i].isa)))
			return apf_error(APF_EINPUT, "APF_CPU_ISA",
					 "%s: this CPU lacks %s", value,
					 paths[i].lacks);
		*out = paths[i].isa;
		return 0;
	}
	return apf_error(APF_EINPUT, "APF_CPU_ISA",
			 "unknown value '%s' (scalar, avx2 or avx512)", value);
}

int apf_cpu_isa(int *out)
{
	return apf_cpu_isa_choose(out, getenv("APF_CPU_ISA"),
				  apf_cpu_isa_available());
}
