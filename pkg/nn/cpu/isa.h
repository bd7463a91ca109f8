/*
 * isa.h: which instruction-set path the CPU backend's own kernels run
 * (nn/cpu), chosen once per backend and recorded with the results.
 *
 * The paths compute the same bits (gemm.h's and fast.h's contract): the
 * choice decides only speed. APF_CPU_ISA=scalar|avx2|avx512 forces one, so a run made on
 * one machine can be replayed on the path another machine would pick; a
 * value this CPU cannot run, or an unknown one, is refused, never silently
 * replaced. Detection is at run time (__builtin_cpu_supports); nothing is
 * compiled for the build machine's CPU.
 */
#ifndef APF_NN_CPU_ISA_H
#define APF_NN_CPU_ISA_H

enum apf_cpu_isa_path {
	APF_CPU_ISA_SCALAR = 1, /* fmaf(), any x86-64 */
	APF_CPU_ISA_AVX2,       /* AVX2 + FMA: 256-bit FMAs */
	APF_CPU_ISA_AVX512,     /* AVX-512F: 512-bit FMAs */
};

/* Bit (1 << path) for each path this CPU runs (scalar always). */
unsigned apf_cpu_isa_available(void);
/* The widest path this CPU runs. */
int apf_cpu_isa_best(void);
/* "scalar", "avx2", "avx512"; NULL for anything else. */
const char *apf_cpu_isa_name(int isa);

/* *out = the path in force: APF_CPU_ISA when set (and not empty), else the
 * best this CPU has. A value the CPU lacks or that names no path is
 * APF_EINPUT, e.g. "APF_CPU_ISA: avx512: this CPU lacks AVX-512F" or
 * "APF_CPU_ISA: unknown value 'sse9' (scalar, avx2 or avx512)". */
int apf_cpu_isa(int *out);

/* apf_cpu_isa's decision for the value `value` (NULL or "": the best of
 * `available`) on a CPU offering `available` (apf_cpu_isa_available's
 * bits): the parser, apart from the environment and this CPU, for tests. */
int apf_cpu_isa_choose(int *out, const char *value, unsigned available);

#endif
