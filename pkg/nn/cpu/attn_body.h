/*
 * attn_body.h: causal self-attention, one (batch, head) pair, on a vector
 * path (fast_avx2.c, fast_avx512.c): cpu.c's attention_head_forward and
 * attention_head_backward, which hold the contract, with the same bits and
 * the work laid out for the path's registers. Query rows go AB_R at a time
 * (rows t0 .. t0 + AB_R - 1, row r reading keys 0 .. t0 + r), so every
 * load of a key, value or query row serves all of them, and the sums that
 * cpu.c runs one chain a row run AB_R chains side by side. A head size
 * that is a multiple of AB_FL only (apf_cpu_attn_kernels).
 *
 * Each lane still runs its sum in cpu.c's order:
 *   - a score is a double sum over d in order of q[d] k[d]: a product of
 *     two floats, exact in double, so a fused multiply-add rounds it as
 *     the multiply and the add did;
 *   - the softmax's max is taken in lanes, then across them (attn_max);
 *   - a row's softmax sum is a double chain in key order;
 *   - the weighted sums (out, dq) and dout.v are float, a multiply then an
 *     add, in key (or d) order; dk and dv add the group's rows in row
 *     order.
 *
 * Included once per path after defining:
 *
 *     AB_VD, AB_DL      a vector of AB_DL doubles
 *     AB_VF, AB_FL      a vector of AB_FL floats (AB_FL = 2 AB_DL)
 *     AB_WIDEN(p)       the AB_DL floats at p as doubles
 *     AB_LOADD(p), AB_STORED(p, v), AB_LOADF(p), AB_STOREF(p, v)
 *     AB_SETD(x), AB_SETF(x)   x in every lane
 *     AB_MADD(s, x, y)  s + x y, x y exact (a fused multiply-add)
 *     AB_MAXD(x, m)     lane by lane, x > m ? x : m
 *     AB_TGT            the path's target attribute
 *     AB_SUFFIX         the kernels' names' suffix
 *
 * The path's file has contraction off, so a float a + w * x is a multiply
 * and an add, as in cpu.c.
 */
#include "nn/cpu/transpose8.h"

#define AB_CAT2(a, b) a##_##b
#define AB_CAT(a, b) AB_CAT2(a, b)
#define AB(name) AB_CAT(name, AB_SUFFIX)
#define AB_INLINE AB_TGT static inline __attribute__((always_inline))
#define AB_R 4 /* query rows a group */

/* xT (hs, Tp) = rows x[t] (hs each, stride ld) for t < T, zeros after:
 * 8 x 8 blocks (transpose8.h: both paths have AVX2, and hs is a multiple
 * of 8), the last rows one float at a time. Moves bits only. */
AB_INLINE void AB(attn_transpose)(float *restrict xT, const float *restrict x,
				  size_t ld, int T, int Tp, int hs)
{
	int T8 = T / 8 * 8;
	for (int t = 0; t < T8; t += 8)
		for (int d = 0; d < hs; d += 8)
			apf_transpose8(xT + (size_t)d * Tp + t, (size_t)Tp,
				       x + t * ld + d, ld);
	for (int d = 0; d < hs; d++) {
		for (int t = T8; t < T; t++)
			xT[(size_t)d * Tp + t] = x[t * ld + d];
		for (int t = T; t < Tp; t++)
			xT[(size_t)d * Tp + t] = 0.0f;
	}
}

/* s[r][t2] (row stride Tp) = the double sum over d in order of y[r][d]
 * kT[d][t2], for the G rows y[r] (stride ly) and every key t2 < n, in
 * blocks of 2 AB_DL keys (the block past n too: Tp covers it). */
AB_INLINE void AB(attn_scores)(double *restrict s, int Tp,
			       const float *restrict y, size_t ly, int G,
			       const float *restrict kT, int hs, int n)
{
	for (int t0 = 0; t0 < n; t0 += 2 * AB_DL) {
		AB_VD acc[AB_R][2];
		for (int r = 0; r < AB_R; r++)
			acc[r][0] = acc[r][1] = AB_SETD(0.0);
		const float *restrict x = kT + t0;
		for (int d = 0; d < hs; d++, x += Tp) {
			AB_VD x0 = AB_WIDEN(x), x1 = AB_WIDEN(x + AB_DL);
			for (int r = 0; r < AB_R; r++) {
				/* rows past G repeat row 0, unstored */
				AB_VD u = AB_SETD(y[(r < G ? r : 0) * ly + d]);
				acc[r][0] = AB_MADD(acc[r][0], u, x0);
				acc[r][1] = AB_MADD(acc[r][1], u, x1);
			}
		}
		for (int r = 0; r < AB_R; r++) /* constant indices: acc */
			if (r < G) {           /* stays in registers */
				AB_STORED(s + (size_t)r * Tp + t0, acc[r][0]);
				AB_STORED(s + (size_t)r * Tp + t0 + AB_DL,
					  acc[r][1]);
			}
	}
}

/* dots[r][t2] (row stride Tp) = the float sum over d in order of y[r][d]
 * xT[d][t2] (a multiply, then an add), G rows, keys t2 < n in blocks of 2
 * AB_FL. */
AB_INLINE void AB(attn_dots_f)(float *restrict dots, int Tp,
			       const float *restrict y, size_t ly, int G,
			       const float *restrict xT, int hs, int n)
{
	for (int t0 = 0; t0 < n; t0 += 2 * AB_FL) {
		AB_VF acc[AB_R][2];
		for (int r = 0; r < AB_R; r++)
			acc[r][0] = acc[r][1] = AB_SETF(0.0f);
		const float *restrict x = xT + t0;
		for (int d = 0; d < hs; d++, x += Tp) {
			AB_VF x0 = AB_LOADF(x), x1 = AB_LOADF(x + AB_FL);
			for (int r = 0; r < AB_R; r++) {
				AB_VF u = AB_SETF(y[(r < G ? r : 0) * ly + d]);
				acc[r][0] = acc[r][0] + u * x0;
				acc[r][1] = acc[r][1] + u * x1;
			}
		}
		for (int r = 0; r < AB_R; r++)
			if (r < G) {
				AB_STOREF(dots + (size_t)r * Tp + t0, acc[r][0]);
				AB_STOREF(dots + (size_t)r * Tp + t0 + AB_FL,
					  acc[r][1]);
			}
	}
}

/* cpu.c's m = s[t2] > m ? s[t2] : m from -inf over t2 < n, in AB_DL
 * running maxima, then theirs, then the tail. The same value, NaNs
 * skipped alike (AB_MAXD keeps m where s is NaN), but for the sign of a
 * zero maximum, which its one use cannot see: s - m is the same for every
 * s but a zero, and there a zero, whose e^x is 1 either way. */
AB_INLINE double AB(attn_max)(const double *restrict s, int n)
{
	AB_VD mv = AB_SETD(-INFINITY);
	int t2 = 0;
	for (; t2 + AB_DL <= n; t2 += AB_DL)
		mv = AB_MAXD(AB_LOADD(s + t2), mv);
	double m = -INFINITY;
	for (int l = 0; l < AB_DL; l++)
		m = mv[l] > m ? mv[l] : m;
	for (; t2 < n; t2++)
		m = s[t2] > m ? s[t2] : m;
	return m;
}

/* y[r] (stride ly) = the float sum over t2 < n + r, in order, of w[r][t2]
 * x[t2] (w rows of stride lw, x rows of stride ld), for the G rows; NV
 * (1 or 2, a constant) vectors of columns. */
AB_INLINE void AB(attn_wsum_block)(float *restrict y, size_t ly,
				   const float *restrict w, size_t lw,
				   const float *restrict x, size_t ld, int n,
				   int G, const int NV)
{
	AB_VF acc[AB_R][2];
	for (int r = 0; r < AB_R; r++)
		acc[r][0] = acc[r][1] = AB_SETF(0.0f);
	for (int t2 = 0; t2 < n; t2++) {
		const float *restrict xr = x + t2 * ld;
		AB_VF x0 = AB_LOADF(xr), x1 = x0;
		if (NV > 1)
			x1 = AB_LOADF(xr + AB_FL);
		for (int r = 0; r < AB_R; r++) {
			AB_VF wt = AB_SETF(w[(r < G ? r : 0) * lw + t2]);
			acc[r][0] = acc[r][0] + wt * x0;
			if (NV > 1)
				acc[r][1] = acc[r][1] + wt * x1;
		}
	}
	/* the keys only the later rows read (every index a constant once
	 * unrolled, so acc stays in registers) */
	for (int r = 1; r < AB_R; r++)
		for (int k = 0; k < r; k++)
			if (r < G) {
				const float *restrict xr = x + (n + k) * ld;
				AB_VF wt = AB_SETF(w[r * lw + n + k]);
				acc[r][0] = acc[r][0] + wt * AB_LOADF(xr);
				if (NV > 1)
					acc[r][1] = acc[r][1] +
						    wt * AB_LOADF(xr + AB_FL);
			}
	for (int r = 0; r < AB_R; r++)
		if (r < G) {
			AB_STOREF(y + r * ly, acc[r][0]);
			if (NV > 1)
				AB_STOREF(y + r * ly + AB_FL, acc[r][1]);
		}
}

/* attn_wsum_block over the hs columns: two vectors at a time, then one. */
AB_INLINE void AB(attn_wsum)(float *restrict y, size_t ly,
			     const float *restrict w, size_t lw,
			     const float *restrict x, size_t ld, int n, int G,
			     int hs)
{
	int c = 0;
	for (; c + 2 * AB_FL <= hs; c += 2 * AB_FL)
		AB(attn_wsum_block)(y + c, ly, w, lw, x + c, ld, n, G, 2);
	if (c < hs)
		AB(attn_wsum_block)(y + c, ly, w, lw, x + c, ld, n, G, 1);
}

/* y (hs) = x, or += x when accum */
AB_INLINE void AB(attn_store)(float *restrict y, const float *restrict x,
			      int hs, int accum)
{
	for (int c = 0; c < hs; c += AB_FL) {
		AB_VF v = AB_LOADF(x + c);
		if (accum)
			v = AB_LOADF(y + c) + v;
		AB_STOREF(y + c, v);
	}
}

/* cpu.c's attention_head_forward: out (T, hs) of the head, stride C; att
 * (T, T); qkv (T, 3C) at head h. */
AB_TGT static void AB(attn_fwd_head)(float *out, float *att, const float *qkv,
				     int T, int C, int hs, float scale,
				     char *slab)
{
	size_t ld = (size_t)3 * C;
	int Tp = apf_attn_padded(T);
	double *s = (double *)slab; /* AB_R rows of Tp scores */
	float *kT = (float *)(s + (size_t)AB_R * Tp);
	float *orow = kT + (size_t)Tp * hs; /* AB_R rows of hs */
	AB(attn_transpose)(kT, qkv + C, ld, T, Tp, hs);
	for (int t0 = 0; t0 < T; t0 += AB_R) {
		int G = T - t0 < AB_R ? T - t0 : AB_R, n = t0 + 1;
		float *a0 = att + (size_t)t0 * T;
		AB(attn_scores)(s, Tp, qkv + t0 * ld, ld, G, kT, hs, n + G - 1);
		for (int r = 0; r < G; r++) {
			double *sr = s + (size_t)r * Tp;
			float *a = a0 + (size_t)r * T;
			AB_VD sc = AB_SETD(scale);
			for (int t2 = 0; t2 < n + r; t2 += AB_DL)
				AB_STORED(sr + t2, AB_LOADD(sr + t2) * sc);
			double m = AB(attn_max)(sr, n + r);
			for (int t2 = 0; t2 < n + r; t2++)
				a[t2] = apf_mf_exp_f((float)(sr[t2] - m));
		}
		/* each row's sum in key order, the rows' chains side by side */
		double sum[AB_R] = {0.0};
		if (G == AB_R)
			for (int t2 = 0; t2 < n; t2++)
				for (int r = 0; r < AB_R; r++)
					sum[r] += a0[(size_t)r * T + t2];
		else
			for (int r = 0; r < G; r++)
				for (int t2 = 0; t2 < n; t2++)
					sum[r] += a0[(size_t)r * T + t2];
		for (int r = 0; r < G; r++) {
			float *a = a0 + (size_t)r * T;
			for (int t2 = n; t2 < n + r; t2++)
				sum[r] += a[t2];
			double inv = 1.0 / sum[r];
			for (int t2 = 0; t2 < n + r; t2++)
				a[t2] = (float)(a[t2] * inv);
			for (int t2 = n + r; t2 < T; t2++)
				a[t2] = 0.0f;
		}
		AB(attn_wsum)(orow, (size_t)hs, a0, (size_t)T,
			      qkv + 2 * (size_t)C, ld, n, G, hs);
		for (int r = 0; r < G; r++)
			memcpy(out + (size_t)(t0 + r) * C, orow + (size_t)r * hs,
			       (size_t)hs * sizeof *orow);
	}
}

/* cpu.c's attn_dot_d: sum over t2 < n of a[t2] b[t2] in double, four
 * partials over t2 mod 4 (the four lanes of an AVX2 register, which both
 * paths have; each product exact, so fused), then the tail, in that
 * order. */
AB_INLINE double AB(attn_dot_d)(const float *restrict a,
				const float *restrict b, int n)
{
	__m256d pv = _mm256_setzero_pd();
	int i = 0;
	for (; i + 4 <= n; i += 4)
		pv = _mm256_fmadd_pd(_mm256_cvtps_pd(_mm_loadu_ps(a + i)),
				     _mm256_cvtps_pd(_mm_loadu_ps(b + i)), pv);
	double p[4];
	_mm256_storeu_pd(p, pv);
	double s = (p[0] + p[1]) + (p[2] + p[3]);
	for (; i < n; i++)
		s += (double)a[i] * b[i];
	return s;
}

/* y (hs, in vectors) += w[j] x[j] for the rows j in [j0, G) (x stride lx),
 * row after row: cpu.c's attn_rank4 and attn_axpy. */
AB_INLINE void AB(attn_rows_into)(float *restrict y, const float *restrict w,
				  size_t lw, const float *restrict x,
				  size_t lx, int j0, int G, int hs)
{
	if (j0 == 0 && G == AB_R) { /* every row: unrolled */
		AB_VF w0 = AB_SETF(w[0]), w1 = AB_SETF(w[lw]);
		AB_VF w2 = AB_SETF(w[2 * lw]), w3 = AB_SETF(w[3 * lw]);
		for (int c = 0; c < hs; c += AB_FL) {
			AB_VF v = AB_LOADF(y + c);
			v = v + w0 * AB_LOADF(x + c);
			v = v + w1 * AB_LOADF(x + lx + c);
			v = v + w2 * AB_LOADF(x + 2 * lx + c);
			v = v + w3 * AB_LOADF(x + 3 * lx + c);
			AB_STOREF(y + c, v);
		}
		return;
	}
	for (int c = 0; c < hs; c += AB_FL) {
		AB_VF v = AB_LOADF(y + c);
		for (int j = j0; j < G; j++)
			v = v + AB_SETF(w[j * lw]) * AB_LOADF(x + j * lx + c);
		AB_STOREF(y + c, v);
	}
}

/* cpu.c's attention_head_backward: dqkv (T, 3C) at head h from dout (T,
 * hs) of stride C, qkv and att (T, T). */
AB_TGT static void AB(attn_bwd_head)(float *dqkv, const float *dout,
				     const float *qkv, const float *att, int T,
				     int C, int hs, float scale, int accum,
				     char *slab)
{
	size_t ld = (size_t)3 * C;
	int Tp = apf_attn_padded(T);
	float *datt = (float *)slab; /* AB_R rows of Tp */
	float *vT = datt + (size_t)AB_R * Tp;
	float *dk = vT + (size_t)Tp * hs, *dv = dk + (size_t)T * hs;
	float *dq = dv + (size_t)T * hs;     /* AB_R rows of hs */
	float *dpre = dq + (size_t)AB_R * hs; /* AB_R rows of Tp */
	AB(attn_transpose)(vT, qkv + 2 * (size_t)C, ld, T, Tp, hs);
	memset(dk, 0, (size_t)2 * T * hs * sizeof *dk);
	for (int t0 = 0; t0 < T; t0 += AB_R) {
		int G = T - t0 < AB_R ? T - t0 : AB_R, n = t0 + 1;
		const float *a0 = att + (size_t)t0 * T;
		const float *q0 = qkv + t0 * ld, *o0 = dout + (size_t)t0 * C;
		AB(attn_dots_f)(datt, Tp, o0, (size_t)C, G, vT, hs, n + G - 1);
		for (int j = 0; j < G; j++) {
			const float *a = a0 + (size_t)j * T;
			const float *da = datt + (size_t)j * Tp;
			float *dp = dpre + (size_t)j * Tp;
			double sd = AB(attn_dot_d)(a, da, n + j);
			/* the softmax's backward, the score scale folded in */
			for (int t2 = 0; t2 < n + j; t2++)
				dp[t2] = (float)((double)scale * a[t2] *
						 (da[t2] - sd));
		}
		AB(attn_wsum)(dq, (size_t)hs, dpre, (size_t)Tp, qkv + C, ld, n,
			      G, hs);
		for (int j = 0; j < G; j++)
			AB(attn_store)(dqkv + (t0 + j) * ld, dq + (size_t)j * hs,
				       hs, accum);
		/* key t2's terms from the rows that read it, in row order */
		for (int t2 = 0; t2 < t0 + G; t2++) {
			int j0 = t2 > t0 ? t2 - t0 : 0;
			AB(attn_rows_into)(dk + (size_t)t2 * hs, dpre + t2,
					   (size_t)Tp, q0, ld, j0, G, hs);
			AB(attn_rows_into)(dv + (size_t)t2 * hs, a0 + t2,
					   (size_t)T, o0, (size_t)C, j0, G, hs);
		}
	}
	for (int t2 = 0; t2 < T; t2++) {
		AB(attn_store)(dqkv + t2 * ld + C, dk + (size_t)t2 * hs, hs,
			       accum);
		AB(attn_store)(dqkv + t2 * ld + 2 * (size_t)C,
			       dv + (size_t)t2 * hs, hs, accum);
	}
}

#undef AB_R
#undef AB_INLINE
#undef AB
#undef AB_CAT
#undef AB_CAT2
