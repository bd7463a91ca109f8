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
 *     IB_FR, IB_FC      optional: the forward's blocks of dots, rows by
 *                       columns (2 by 4: 8 sums and 6 operands fit 16
 *                       registers)
 *     IB_BR, IB_BX      optional: the backward's blocks of gradients, rows
 *                       by elements (2 by 4)
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
#ifndef IB_FR
#define IB_FR 2
#endif
#ifndef IB_FC
#define IB_FC 4
#endif
#ifndef IB_BR
#define IB_BR 2
#endif
#ifndef IB_BX
#define IB_BX 4
#endif

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

/* The dots of v_i with v_j, j < i, for a lane, in blocks of IB_FR rows by
 * IB_FC columns: their IB_FR x IB_FC sums run side by side in registers,
 * each in k order from 0, so the bits are those of one dot at a time. A
 * block reaching past the triangle (j >= i) or past the last row works on
 * vector 0 there and drops those sums. */
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
		for (int i0 = 1; i0 < F; i0 += IB_FR) {
			const IB_V *ri[IB_FR];
			for (int r = 0; r < IB_FR; r++)
				ri[r] = P + (size_t)(i0 + r < F ? i0 + r : 0) * D;
			int jend = (i0 + IB_FR < F ? i0 + IB_FR : F) - 1;
			for (int j0 = 0; j0 < jend; j0 += IB_FC) {
				const IB_V *cj[IB_FC];
				for (int c = 0; c < IB_FC; c++)
					cj[c] = P + (size_t)(j0 + c < F ? j0 + c : 0) * D;
				IB_V s[IB_FR][IB_FC];
				for (int r = 0; r < IB_FR; r++)
					for (int c = 0; c < IB_FC; c++)
						s[r][c] = (IB_V){0};
				for (int k = 0; k < D; k++) {
					IB_V x[IB_FR], y[IB_FC];
					for (int r = 0; r < IB_FR; r++)
						x[r] = ri[r][k];
					for (int c = 0; c < IB_FC; c++)
						y[c] = cj[c][k];
					for (int r = 0; r < IB_FR; r++)
						for (int c = 0; c < IB_FC; c++)
							s[r][c] = IB_MADD(s[r][c], x[r], y[c]);
				}
				for (int r = 0; r < IB_FR; r++)
					for (int c = 0; c < IB_FC; c++) {
						int i = i0 + r, j = j0 + c;
						if (i < F && j < i)
							S[(size_t)i * (i - 1) / 2 + j] = s[r][c];
					}
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

/* The gradient of v_j for rows j0 .. j0 + IB_BR - 1 (past the last, the
 * last again, not stored), elements x0 .. x0 + IB_BX - 1: in the pairs'
 * output order v_j meets its partners m ascending, m != j (pairs (j, m)
 * for m < j come first, then pairs (m, j)), so it is G's row plus the sum
 * of w(j, m) v_m over m ascending, in registers. */
IB_INLINE void IB(inter_bwd_block)(IB_V *restrict G, const IB_V *restrict P,
				   const IB_V *restrict W, int F, int D, int j0,
				   int x0)
{
	int jr[IB_BR];
	IB_V acc[IB_BR][IB_BX];
	for (int r = 0; r < IB_BR; r++) {
		jr[r] = j0 + r < F ? j0 + r : F - 1;
		for (int x = 0; x < IB_BX; x++)
			acc[r][x] = G[(size_t)jr[r] * D + x0 + x];
	}
	size_t tm = 0; /* m (m - 1) / 2: pair (m, j) is W[tm + j] */
	for (int m = 0; m < F; tm += (size_t)m, m++) {
		const IB_V *vm = P + (size_t)m * D + x0;
		IB_V v[IB_BX];
		for (int x = 0; x < IB_BX; x++)
			v[x] = vm[x];
		for (int r = 0; r < IB_BR; r++) {
			int j = jr[r];
			if (m == j)
				continue;
			IB_V w = m < j ? W[(size_t)j * (j - 1) / 2 + (size_t)m]
				       : W[tm + (size_t)j];
			for (int x = 0; x < IB_BX; x++)
				acc[r][x] = IB_MADD(acc[r][x], w, v[x]);
		}
	}
	for (int r = 0; r < IB_BR; r++)
		if (j0 + r < F)
			for (int x = 0; x < IB_BX; x++)
				G[(size_t)(j0 + r) * D + x0 + x] = acc[r][x];
}

/* The backward sums, for each pair (i, j) in output order, dout(pair) v_j
 * into v_i's gradient and dout(pair) v_i into v_j's, in double (G, F*D
 * per example, the dense part starting from its own output gradient),
 * then writes or adds them: by rows of G in blocks (inter_bwd_block) where
 * D is whole blocks of IB_BX, else pair by pair. */
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
		if (D % IB_BX == 0) {
			for (int j0 = 0; j0 < F; j0 += IB_BR)
				for (int x0 = 0; x0 < D; x0 += IB_BX)
					IB(inter_bwd_block)(G, P, W, F, D, j0, x0);
		} else {
			size_t p = 0;
			for (int i = 1; i < F; i++) {
				const IB_V *vi = P + (size_t)i * D;
				IB_V *gi = G + (size_t)i * D;
				for (int j = 0; j < i; j++, p++) {
					const IB_V *vj = P + (size_t)j * D;
					IB_V *gj = G + (size_t)j * D;
					IB_V w = W[p];
					for (int x = 0; x < D; x++) {
						gi[x] = IB_MADD(gi[x], w, vj[x]);
						gj[x] = IB_MADD(gj[x], w, vi[x]);
					}
				}
			}
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
#undef IB_FR
#undef IB_FC
#undef IB_BR
#undef IB_BX
