/*
 * inter_body.h: the DLRM's dot interaction over lanes of examples, written
 * once for every path that runs it: cpu.c's (GCC's generic vectors, the
 * plain backend and the scalar path), fast_avx2.c's and fast_avx512.c's.
 * fast.h has the job and the sums. Included (more than once) after
 * defining:
 *
 *     IB_V              a vector of IB_L doubles, one register of the path
 *     IB_L              examples side by side in it
 *     IB_MADD(s, x, y)  s + x y: every product here is of two floats,
 *                       exact in double, so a fused multiply-add and a
 *                       multiply then an add give the same bits
 *     IB_FN             the functions' specifiers (static, target, clones)
 *     IB_TGT            optional: the path's target attribute, for the
 *                       inlined helpers
 *     IB_SUFFIX         their names' suffix: inter_fwd_rows_SUFFIX, ...
 *     IB_LANES_IN(dst, src, n, count)  optional: dst[i][l] = src[l][i] as
 *                       a double for i < count, l < n, and 0 for l >= n
 *                       (a transpose; only moves and exact conversions)
 *     IB_LANES_OUT(dst, src, n, count, accum)  optional: dst[l][i] =
 *                       (float)src[i][l], or dst[l][i] + that when accum,
 *                       for i < count, l < n
 *
 * A lane holds an example's F vectors as P[j D + k][lane] = v_j[k] in
 * double; a short lane is padded with zeros whose results are dropped.
 * The slab (per thread, 64-byte aligned) holds 2 F D + F (F - 1) / 2
 * vectors.
 */
#define IB_CAT2(a, b) a##_##b
#define IB_CAT(a, b) IB_CAT2(a, b)
#define IB(name) IB_CAT(name, IB_SUFFIX)
#ifndef IB_TGT
#define IB_TGT
#endif
#define IB_INLINE IB_TGT static inline __attribute__((always_inline))

#ifndef IB_LANES_IN
/* dst[i][l] = src[l][i] for i < count, l < n; zeros past n. */
#define IB_LANES_IN(dst, src, n, count) IB(lanes_in)(dst, src, n, count)
IB_INLINE void
IB(lanes_in)(IB_V *restrict dst, const float *const src[IB_L], int n,
	     size_t count)
{
	memset(dst, 0, count * sizeof *dst);
	for (int l = 0; l < n; l++)
		for (size_t i = 0; i < count; i++)
			dst[i][l] = src[l][i];
}
#endif

#ifndef IB_LANES_OUT
/* dst[l][i] = (float)src[i][l] (+ dst[l][i] when accum), l < n. */
#define IB_LANES_OUT(dst, src, n, count, accum)                               \
	IB(lanes_out)(dst, src, n, count, accum)
IB_INLINE void
IB(lanes_out)(float *const dst[IB_L], const IB_V *restrict src, int n,
	      size_t count, int accum)
{
	for (int l = 0; l < n; l++)
		for (size_t i = 0; i < count; i++)
			dst[l][i] = accum ? dst[l][i] + (float)src[i][l]
					  : (float)src[i][l];
}
#endif

/* The lane of examples [b, b + n) into P. */
IB_INLINE void
IB(inter_pack)(IB_V *restrict P, const struct apf_inter_job *a, size_t b,
	       int n)
{
	int F = a->E + 1, D = a->D;
	for (int j = 0; j < F; j++) {
		const float *v[IB_L];
		for (int l = 0; l < IB_L; l++)
			v[l] = l < n ? apf_inter_vec(a, b + (size_t)l, j) : NULL;
		IB_LANES_IN(P + (size_t)j * D, v, n, (size_t)D);
	}
}

/* The dots of v_i with v_j, j < i, for a lane: four j at a time, so that
 * four sums in k order run side by side. */
IB_FN void IB(inter_fwd_rows)(const struct apf_inter_job *a, size_t b0,
			      size_t b1, void *slab)
{
	int E = a->E, D = a->D, F = E + 1;
	size_t OC = (size_t)D + (size_t)F * (F - 1) / 2;
	size_t npairs = OC - (size_t)D;
	IB_V *restrict P = (IB_V *)slab;
	IB_V *restrict S = P + (size_t)F * D;
	for (size_t b = b0; b < b1; b += IB_L) {
		int n = b1 - b < IB_L ? (int)(b1 - b) : IB_L;
		IB(inter_pack)(P, a, b, n);
		size_t p = 0;
		for (int i = 1; i < F; i++) {
			const IB_V *vi = P + (size_t)i * D;
			int j = 0;
			for (; j + 4 <= i; j += 4) {
				const IB_V *v0 = P + (size_t)j * D,
					   *v1 = v0 + D, *v2 = v1 + D,
					   *v3 = v2 + D;
				IB_V s0 = {0}, s1 = {0}, s2 = {0}, s3 = {0};
				for (int k = 0; k < D; k++) {
					IB_V x = vi[k];
					s0 = IB_MADD(s0, x, v0[k]);
					s1 = IB_MADD(s1, x, v1[k]);
					s2 = IB_MADD(s2, x, v2[k]);
					s3 = IB_MADD(s3, x, v3[k]);
				}
				S[p++] = s0;
				S[p++] = s1;
				S[p++] = s2;
				S[p++] = s3;
			}
			for (; j < i; j++) {
				const IB_V *vj = P + (size_t)j * D;
				IB_V s0 = {0};
				for (int k = 0; k < D; k++)
					s0 = IB_MADD(s0, vi[k], vj[k]);
				S[p++] = s0;
			}
		}
		float *o[IB_L];
		for (int l = 0; l < IB_L; l++) {
			if (l >= n) {
				o[l] = NULL;
				continue;
			}
			o[l] = a->out + (b + (size_t)l) * OC;
			memcpy(o[l], a->dense + (b + (size_t)l) * (size_t)D,
			       (size_t)D * sizeof *o[l]);
			o[l] += D;
		}
		IB_LANES_OUT(o, S, n, npairs, 0);
	}
}

/* The backward walks a lane's pairs in their output order: pair (i, j)
 * adds dout(pair) v_j to v_i's gradient and dout(pair) v_i to v_j's,
 * summed in double (G, F*D per example, the dense part starting from its
 * own output gradient), then written or added. */
IB_FN void IB(inter_bwd_rows)(const struct apf_inter_job *a, size_t b0,
			      size_t b1, void *slab)
{
	int E = a->E, D = a->D, F = E + 1;
	size_t OC = (size_t)D + (size_t)F * (F - 1) / 2;
	size_t npairs = OC - (size_t)D;
	IB_V *restrict P = (IB_V *)slab;
	IB_V *restrict G = P + (size_t)F * D;
	IB_V *restrict W = G + (size_t)F * D;
	for (size_t b = b0; b < b1; b += IB_L) {
		int n = b1 - b < IB_L ? (int)(b1 - b) : IB_L;
		IB(inter_pack)(P, a, b, n);
		const float *d[IB_L], *dp[IB_L];
		for (int l = 0; l < IB_L; l++) {
			d[l] = l < n ? a->dout + (b + (size_t)l) * OC : NULL;
			dp[l] = l < n ? d[l] + D : NULL;
		}
		IB_LANES_IN(G, d, n, (size_t)D);
		memset(G + D, 0, (size_t)E * (size_t)D * sizeof *G);
		IB_LANES_IN(W, dp, n, npairs);
		size_t p = 0;
		for (int i = 1; i < F; i++) {
			const IB_V *vi = P + (size_t)i * D;
			IB_V *gi = G + (size_t)i * D;
			if (D % 8) {
				for (int j = 0; j < i; j++, p++) {
					const IB_V *vj = P + (size_t)j * D;
					IB_V *gj = G + (size_t)j * D;
					IB_V w = W[p];
					for (int x = 0; x < D; x++) {
						gi[x] = IB_MADD(gi[x], w, vj[x]);
						gj[x] = IB_MADD(gj[x], w, vi[x]);
					}
				}
				continue;
			}
			/* Eight of v_i's gradients at a time held in
			 * registers over the pairs of row i (each still summed
			 * in pair order). */
			for (int x0 = 0; x0 < D; x0 += 8) {
				IB_V acc[8], wi[8];
				for (int x = 0; x < 8; x++) {
					acc[x] = gi[x0 + x];
					wi[x] = vi[x0 + x];
				}
				for (int j = 0; j < i; j++) {
					const IB_V *vj = P + (size_t)j * D + x0;
					IB_V *gj = G + (size_t)j * D + x0;
					IB_V w = W[p + (size_t)j];
					for (int x = 0; x < 8; x++) {
						acc[x] = IB_MADD(acc[x], w, vj[x]);
						gj[x] = IB_MADD(gj[x], w, wi[x]);
					}
				}
				for (int x = 0; x < 8; x++)
					gi[x0 + x] = acc[x];
			}
			p += (size_t)i;
		}
		float *dd[IB_L], *de[IB_L];
		for (int l = 0; l < IB_L; l++) {
			size_t e = b + (size_t)l;
			dd[l] = l < n && a->ddense ? a->ddense + e * (size_t)D
						   : NULL;
			de[l] = l < n && a->demb ? a->demb + e * (size_t)E * D
						 : NULL;
		}
		if (a->ddense)
			IB_LANES_OUT(dd, G, n, (size_t)D, a->accum_dense);
		if (a->demb)
			IB_LANES_OUT(de, G + D, n, (size_t)E * D, a->accum_emb);
	}
}

#undef IB
#undef IB_CAT
#undef IB_CAT2
#undef IB_V
#undef IB_L
#undef IB_MADD
#undef IB_FN
#undef IB_SUFFIX
#undef IB_LANES_IN
#undef IB_LANES_OUT
#undef IB_TGT
#undef IB_INLINE
