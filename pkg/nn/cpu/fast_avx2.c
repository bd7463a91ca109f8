/*
 * fast_avx2.c: fast.c's kernels on the AVX2/FMA path (fast_ops.h), 8 lanes:
 * the forward / input-gradient tile of 6 pixels x 16 output channels in 12
 * accumulators, the weight-gradient tile of 4 output channels x 3 columns
 * of 8 channels, the Winograd transforms 8 channels at a time and the
 * reduction tile of 6 x 16, batch norm 8 channels at a time with a scalar
 * tail of the same operations. Each lane runs the sequence fast_ops.h
 * gives for its element; the AVX-512 path calls some of these for shapes
 * its 16 lanes do not divide.
 */
#pragma GCC optimize("O3", "fp-contract=off")
#ifdef __clang__
#pragma clang fp contract(off)
#endif

#include "nn/cpu/fast_ops.h"

#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "nn/mathf.h"

#define TGT __attribute__((target("avx2,fma")))
#define TILE_PX APF_FAST_TILE_PX

/* ---- the forward / input-gradient tile -------------------------------- */

/* For pixels i < np, out[i][o0 .. o0 + 15] (=, or += when accum) sum over
 * taps t and channels c < cin of px[i][toff[t] + c] * tw[t][c * ldw + o0
 * ..], plus bias[o0 ..] if given. Pixels np..5 repeat pixel 0 and are not
 * stored. The offset is added here, not to copies of the pointer arrays
 * (see fast_avx512.c's tile_body). */
TGT static void tile_6x16(const float *const px[TILE_PX],
			  float *const out[TILE_PX], int np,
			  const ptrdiff_t *toff, const float *const *tw,
			  int ntaps, int cin, int ldw, const float *bias,
			  int accum, int o0)
{
	__m256 a0 = _mm256_setzero_ps(), b0 = a0, a1 = a0, b1 = a0;
	__m256 a2 = a0, b2 = a0, a3 = a0, b3 = a0, a4 = a0, b4 = a0;
	__m256 a5 = a0, b5 = a0;
	for (int t = 0; t < ntaps; t++) {
		const float *w = tw[t] + o0;
		ptrdiff_t o = toff[t];
		const float *p0 = px[0] + o, *p1 = px[1] + o, *p2 = px[2] + o;
		const float *p3 = px[3] + o, *p4 = px[4] + o, *p5 = px[5] + o;
		for (int c = 0; c < cin; c++, w += ldw) {
			__m256 w0 = _mm256_loadu_ps(w);
			__m256 w1 = _mm256_loadu_ps(w + 8);
			__m256 x;
			x = _mm256_broadcast_ss(p0 + c);
			a0 = _mm256_fmadd_ps(x, w0, a0);
			b0 = _mm256_fmadd_ps(x, w1, b0);
			x = _mm256_broadcast_ss(p1 + c);
			a1 = _mm256_fmadd_ps(x, w0, a1);
			b1 = _mm256_fmadd_ps(x, w1, b1);
			x = _mm256_broadcast_ss(p2 + c);
			a2 = _mm256_fmadd_ps(x, w0, a2);
			b2 = _mm256_fmadd_ps(x, w1, b2);
			x = _mm256_broadcast_ss(p3 + c);
			a3 = _mm256_fmadd_ps(x, w0, a3);
			b3 = _mm256_fmadd_ps(x, w1, b3);
			x = _mm256_broadcast_ss(p4 + c);
			a4 = _mm256_fmadd_ps(x, w0, a4);
			b4 = _mm256_fmadd_ps(x, w1, b4);
			x = _mm256_broadcast_ss(p5 + c);
			a5 = _mm256_fmadd_ps(x, w0, a5);
			b5 = _mm256_fmadd_ps(x, w1, b5);
		}
	}
	__m256 lo[TILE_PX] = {a0, a1, a2, a3, a4, a5};
	__m256 hi[TILE_PX] = {b0, b1, b2, b3, b4, b5};
	__m256 blo = _mm256_setzero_ps(), bhi = blo;
	if (bias) {
		blo = _mm256_loadu_ps(bias + o0);
		bhi = _mm256_loadu_ps(bias + o0 + 8);
	}
	for (int i = 0; i < np; i++) {
		float *d = out[i] + o0;
		__m256 l = lo[i], h = hi[i];
		if (accum) {
			l = _mm256_add_ps(_mm256_loadu_ps(d), l);
			h = _mm256_add_ps(_mm256_loadu_ps(d + 8), h);
		} else if (bias) {
			l = _mm256_add_ps(blo, l);
			h = _mm256_add_ps(bhi, h);
		}
		_mm256_storeu_ps(d, l);
		_mm256_storeu_ps(d + 8, h);
	}
}

TGT static void tiles(const struct apf_fast_grid *g, const ptrdiff_t *toff,
		      const float *const *tw, int ntaps, int cin, int ldw,
		      int cout, const float *bias, int accum)
{
	int n = g->nimg * g->rows * g->cols;
	int img = 0, r = 0, c = 0; /* the next pixel */
	for (int p = 0; p < n; p += TILE_PX) {
		const float *px[TILE_PX];
		float *out[TILE_PX];
		int np = n - p < TILE_PX ? n - p : TILE_PX;
		for (int i = 0; i < np; i++) {
			px[i] = g->in + img * g->in_img + r * g->in_row +
				c * g->in_col;
			out[i] = g->out + img * g->out_img + r * g->out_row +
				 c * g->out_col;
			if (++c == g->cols) {
				c = 0;
				if (++r == g->rows)
					r = 0, img++;
			}
		}
		for (int i = np; i < TILE_PX; i++)
			px[i] = px[0], out[i] = out[0];
		for (int o0 = 0; o0 < cout; o0 += 16)
			tile_6x16(px, out, np, toff, tw, ntaps, cin, ldw, bias,
				  accum, o0);
	}
}

/* ---- the direct weight gradient --------------------------------------- */

/* acc[r][k] (output channel o0 + r, column k) += sum over the chunk's
 * pixels of dy[pixel][o0 + r] * x[pixel][xoff[k] .. + 8]; columns k >= ncol
 * repeat column 0 and are not stored. */
TGT static void dweight_tile(float *part, const ptrdiff_t dwoff[3],
			     ptrdiff_t dw_ld, int ncol, const float *dy,
			     const float *x, const ptrdiff_t xoff[3],
			     const struct apf_fast_dw *g)
{
	__m256 acc[4][3];
	for (int r = 0; r < 4; r++)
		for (int k = 0; k < 3; k++)
			acc[r][k] = k < ncol ? _mm256_loadu_ps(part + r * dw_ld + dwoff[k])
					     : _mm256_setzero_ps();
	__m256 a00 = acc[0][0], a01 = acc[0][1], a02 = acc[0][2];
	__m256 a10 = acc[1][0], a11 = acc[1][1], a12 = acc[1][2];
	__m256 a20 = acc[2][0], a21 = acc[2][1], a22 = acc[2][2];
	__m256 a30 = acc[3][0], a31 = acc[3][1], a32 = acc[3][2];
	ptrdiff_t x0 = xoff[0], x1 = xoff[ncol > 1 ? 1 : 0],
		  x2 = xoff[ncol > 2 ? 2 : 0];
	int OC = g->OC, S = g->S, C = g->C, OW = g->OW;
	for (int b = 0; b < g->nb; b++)
		for (int oh = 0; oh < g->OH; oh++) {
			const float *d = dy + ((size_t)b * g->OH + oh) * OW * OC;
			const float *xr = x + (size_t)b * g->in_img +
					  (size_t)oh * S * g->Wp * C;
			for (int ow = 0; ow < OW; ow++, d += OC,
				 xr += (ptrdiff_t)S * C) {
				__m256 v0 = _mm256_loadu_ps(xr + x0);
				__m256 v1 = _mm256_loadu_ps(xr + x1);
				__m256 v2 = _mm256_loadu_ps(xr + x2);
				__m256 e;
				e = _mm256_broadcast_ss(d);
				a00 = _mm256_fmadd_ps(e, v0, a00);
				a01 = _mm256_fmadd_ps(e, v1, a01);
				a02 = _mm256_fmadd_ps(e, v2, a02);
				e = _mm256_broadcast_ss(d + 1);
				a10 = _mm256_fmadd_ps(e, v0, a10);
				a11 = _mm256_fmadd_ps(e, v1, a11);
				a12 = _mm256_fmadd_ps(e, v2, a12);
				e = _mm256_broadcast_ss(d + 2);
				a20 = _mm256_fmadd_ps(e, v0, a20);
				a21 = _mm256_fmadd_ps(e, v1, a21);
				a22 = _mm256_fmadd_ps(e, v2, a22);
				e = _mm256_broadcast_ss(d + 3);
				a30 = _mm256_fmadd_ps(e, v0, a30);
				a31 = _mm256_fmadd_ps(e, v1, a31);
				a32 = _mm256_fmadd_ps(e, v2, a32);
			}
		}
	__m256 res[4][3] = {{a00, a01, a02}, {a10, a11, a12},
			    {a20, a21, a22}, {a30, a31, a32}};
	for (int r = 0; r < 4; r++)
		for (int k = 0; k < ncol; k++)
			_mm256_storeu_ps(part + r * dw_ld + dwoff[k], res[r][k]);
}

/* Where the input's channels do not fill 8 lanes (the stem's one channel;
 * fast.h), the lanes run over output channels instead: acc[k] (output
 * channels o0 .. + 8, column k: one tap and one input channel) += over the
 * chunk's pixels in order dy[pixel][o0 ..] * x[pixel][xoff[k]]; columns
 * k >= ncol repeat column 0 and are not stored. The same sequence per
 * element as the tile above. */
TGT static void dweight_tile_oc(float *part, const ptrdiff_t dwoff[4],
				ptrdiff_t dw_ld, int ncol, const float *dy,
				const float *x, const ptrdiff_t xoff[4],
				const struct apf_fast_dw *g)
{
	float t[4][8];
	for (int k = 0; k < 4; k++)
		for (int l = 0; l < 8; l++)
			t[k][l] = k < ncol ? part[l * dw_ld + dwoff[k]] : 0.0f;
	__m256 a0 = _mm256_loadu_ps(t[0]), a1 = _mm256_loadu_ps(t[1]);
	__m256 a2 = _mm256_loadu_ps(t[2]), a3 = _mm256_loadu_ps(t[3]);
	ptrdiff_t x0 = xoff[0], x1 = xoff[ncol > 1 ? 1 : 0],
		  x2 = xoff[ncol > 2 ? 2 : 0], x3 = xoff[ncol > 3 ? 3 : 0];
	int OC = g->OC, S = g->S, C = g->C, OW = g->OW;
	for (int b = 0; b < g->nb; b++)
		for (int oh = 0; oh < g->OH; oh++) {
			const float *d = dy + ((size_t)b * g->OH + oh) * OW * OC;
			const float *xr = x + (size_t)b * g->in_img +
					  (size_t)oh * S * g->Wp * C;
			for (int ow = 0; ow < OW; ow++, d += OC,
				 xr += (ptrdiff_t)S * C) {
				__m256 e = _mm256_loadu_ps(d);
				a0 = _mm256_fmadd_ps(e, _mm256_broadcast_ss(xr + x0), a0);
				a1 = _mm256_fmadd_ps(e, _mm256_broadcast_ss(xr + x1), a1);
				a2 = _mm256_fmadd_ps(e, _mm256_broadcast_ss(xr + x2), a2);
				a3 = _mm256_fmadd_ps(e, _mm256_broadcast_ss(xr + x3), a3);
			}
		}
	_mm256_storeu_ps(t[0], a0), _mm256_storeu_ps(t[1], a1);
	_mm256_storeu_ps(t[2], a2), _mm256_storeu_ps(t[3], a3);
	for (int k = 0; k < ncol; k++)
		for (int l = 0; l < 8; l++)
			part[l * dw_ld + dwoff[k]] = t[k][l];
}

/* One kernel row's columns four at a time, 8 output channels at a time
 * (fast.c takes this only with OC % 8 == 0). */
static void dweight_row_oc(float *part, const float *dy, const float *x,
			   int kh, const struct apf_fast_dw *d)
{
	ptrdiff_t dw_ld = (ptrdiff_t)d->K * d->K * d->C, xoff[4], dwoff[4];
	for (int o0 = 0; o0 + 8 <= d->OC; o0 += 8)
		for (int c0 = 0; c0 < d->K * d->C; c0 += 4) {
			int n = apf_fast_dw_columns(kh, d->K, d->C, c0, xoff,
						    dwoff);
			dweight_tile_oc(part + o0 * dw_ld, dwoff, dw_ld, n,
					dy + o0, x, xoff, d);
		}
}

/* The columns a kernel row leaves after its groups of three (one for a
 * 1x1 kernel of 8 or 32 channels, two for 16), each on its own: 8 output
 * channels x 1 column in 8 accumulators, where the tile above would
 * compute three columns for one or two. The same sequence per element:
 * acc[r] = part; over the chunk's pixels in order, acc[r] =
 * fma(dy[pixel][o0 + r], x[pixel][xoff .. + 8], acc[r]). */
TGT static void dweight_rows8(float *part, ptrdiff_t dwoff, ptrdiff_t dw_ld,
			      const float *dy, const float *x, ptrdiff_t xoff,
			      const struct apf_fast_dw *g)
{
	__m256 acc[8];
	for (int r = 0; r < 8; r++)
		acc[r] = _mm256_loadu_ps(part + r * dw_ld + dwoff);
	int OC = g->OC, S = g->S, C = g->C, OW = g->OW;
	for (int b = 0; b < g->nb; b++)
		for (int oh = 0; oh < g->OH; oh++) {
			const float *d = dy + ((size_t)b * g->OH + oh) * OW * OC;
			const float *xr = x + (size_t)b * g->in_img +
					  (size_t)oh * S * g->Wp * C + xoff;
			for (int ow = 0; ow < OW; ow++, d += OC,
				 xr += (ptrdiff_t)S * C) {
				__m256 v = _mm256_loadu_ps(xr);
				for (int r = 0; r < 8; r++)
					acc[r] = _mm256_fmadd_ps(_mm256_broadcast_ss(d + r),
								 v, acc[r]);
			}
		}
	for (int r = 0; r < 8; r++)
		_mm256_storeu_ps(part + r * dw_ld + dwoff, acc[r]);
}

/* Column col of kernel row kh, (kw, 8 channels): its offset in a pixel's
 * padded input row and in an output channel's weights. */
static void column(int kh, int K, int C, int col, ptrdiff_t *xoff,
		   ptrdiff_t *dwoff)
{
	int kw = col / (C / 8), c = col % (C / 8) * 8;
	*xoff = (ptrdiff_t)kw * C + c;
	*dwoff = (ptrdiff_t)(kh * K + kw) * C + c;
}

/* The columns of one kernel row, (kw, 8 channels), three at a time. */
static void dweight_row(float *part, const float *dy, const float *x, int kh,
			const struct apf_fast_dw *d)
{
	int K = d->K, C = d->C;
	if (C % 8) {
		dweight_row_oc(part, dy, x, kh, d);
		return;
	}
	ptrdiff_t dw_ld = (ptrdiff_t)K * K * C;
	int ncols = K * C / 8;
	/* the last one or two columns 8 output channels at a time */
	int rest = d->OC % 8 == 0 ? ncols % 3 : 0;
	for (int o0 = 0; o0 < d->OC; o0 += 4)
		for (int c0 = 0; c0 < ncols - rest; c0 += 3) {
			ptrdiff_t xoff[3], dwoff[3];
			int n = ncols - c0 < 3 ? ncols - c0 : 3;
			for (int k = 0; k < n; k++)
				column(kh, K, C, c0 + k, &xoff[k], &dwoff[k]);
			dweight_tile(part + o0 * dw_ld, dwoff, dw_ld, n, dy + o0,
				     x, xoff, d);
		}
	for (int col = ncols - rest; col < ncols; col++) {
		ptrdiff_t xoff, dwoff;
		column(kh, K, C, col, &xoff, &dwoff);
		for (int o0 = 0; o0 < d->OC; o0 += 8)
			dweight_rows8(part + o0 * dw_ld, dwoff, dw_ld, dy + o0,
				      x, xoff, d);
	}
}

/* ---- Winograd ------------------------------------------------------------ */

TGT static void wino_in(float *V, size_t vs, const float *d, size_t row,
			int cin)
{
	for (int c = 0; c < cin; c += 8) {
		__m256 x[4][4], t[4][4];
		for (int i = 0; i < 4; i++)
			for (int k = 0; k < 4; k++)
				x[i][k] = _mm256_loadu_ps(d + i * row + (size_t)k * cin + c);
		for (int k = 0; k < 4; k++) {
			t[0][k] = _mm256_sub_ps(x[0][k], x[2][k]);
			t[1][k] = _mm256_add_ps(x[1][k], x[2][k]);
			t[2][k] = _mm256_sub_ps(x[2][k], x[1][k]);
			t[3][k] = _mm256_sub_ps(x[1][k], x[3][k]);
		}
		for (int i = 0; i < 4; i++) {
			float *v = V + (size_t)(4 * i) * vs + c;
			_mm256_storeu_ps(v, _mm256_sub_ps(t[i][0], t[i][2]));
			_mm256_storeu_ps(v + vs, _mm256_add_ps(t[i][1], t[i][2]));
			_mm256_storeu_ps(v + 2 * vs, _mm256_sub_ps(t[i][2], t[i][1]));
			_mm256_storeu_ps(v + 3 * vs, _mm256_sub_ps(t[i][1], t[i][3]));
		}
	}
}

TGT static void wino_out(float *y, size_t yrow, int nh, int nw, const float *M,
			 size_t ms, int cout, const float *bias, int accum)
{
	for (int o = 0; o < cout; o += 8) {
		__m256 m[4][4], s0[4], s1[4], r[2][2];
		for (int i = 0; i < 4; i++)
			for (int k = 0; k < 4; k++)
				m[i][k] = _mm256_loadu_ps(M + (size_t)(4 * i + k) * ms + o);
		for (int k = 0; k < 4; k++) {
			s0[k] = _mm256_add_ps(_mm256_add_ps(m[0][k], m[1][k]), m[2][k]);
			s1[k] = _mm256_sub_ps(_mm256_sub_ps(m[1][k], m[2][k]), m[3][k]);
		}
		r[0][0] = _mm256_add_ps(_mm256_add_ps(s0[0], s0[1]), s0[2]);
		r[0][1] = _mm256_sub_ps(_mm256_sub_ps(s0[1], s0[2]), s0[3]);
		r[1][0] = _mm256_add_ps(_mm256_add_ps(s1[0], s1[1]), s1[2]);
		r[1][1] = _mm256_sub_ps(_mm256_sub_ps(s1[1], s1[2]), s1[3]);
		for (int i = 0; i < nh; i++)
			for (int k = 0; k < nw; k++) {
				float *p = y + i * yrow + (size_t)k * cout + o;
				__m256 v = r[i][k];
				if (accum)
					v = _mm256_add_ps(_mm256_loadu_ps(p), v);
				else if (bias)
					v = _mm256_add_ps(_mm256_loadu_ps(bias + o), v);
				_mm256_storeu_ps(p, v);
			}
	}
}

TGT static void wino_dy(float *Z, size_t zs, const float *y, size_t yrow,
			int nh, int nw, int OC)
{
	__m256 zero = _mm256_setzero_ps();
	for (int o = 0; o < OC; o += 8) {
		__m256 v[2][2], a[4][2];
		for (int i = 0; i < 2; i++)
			for (int k = 0; k < 2; k++)
				v[i][k] = i < nh && k < nw
					? _mm256_loadu_ps(y + i * yrow + (size_t)k * OC + o)
					: zero;
		for (int k = 0; k < 2; k++) {
			a[0][k] = v[0][k];
			a[1][k] = _mm256_add_ps(v[0][k], v[1][k]);
			a[2][k] = _mm256_sub_ps(v[0][k], v[1][k]);
			a[3][k] = _mm256_sub_ps(zero, v[1][k]);
		}
		for (int i = 0; i < 4; i++) {
			float *z = Z + (size_t)(4 * i) * zs + o;
			_mm256_storeu_ps(z, a[i][0]);
			_mm256_storeu_ps(z + zs, _mm256_add_ps(a[i][0], a[i][1]));
			_mm256_storeu_ps(z + 2 * zs, _mm256_sub_ps(a[i][0], a[i][1]));
			_mm256_storeu_ps(z + 3 * zs, _mm256_sub_ps(zero, a[i][1]));
		}
	}
}

/* du rows r < nr (ldu apart), 16 columns: += sum over n slots s of
 * z[s * zs + r] * v[s * vsl + 0..15]. Rows nr..5 repeat row 0, unstored. */
TGT static void reduce_6x16(float *du, size_t ldu, int nr, const float *z,
			    size_t zs, const float *v, size_t vsl, int n)
{
	__m256 a[6][2];
	for (int r = 0; r < 6; r++)
		for (int k = 0; k < 2; k++)
			a[r][k] = r < nr ? _mm256_loadu_ps(du + r * ldu + 8 * k)
					 : _mm256_setzero_ps();
	__m256 a00 = a[0][0], a01 = a[0][1], a10 = a[1][0], a11 = a[1][1];
	__m256 a20 = a[2][0], a21 = a[2][1], a30 = a[3][0], a31 = a[3][1];
	__m256 a40 = a[4][0], a41 = a[4][1], a50 = a[5][0], a51 = a[5][1];
	int r1 = nr > 1, r2 = nr > 2 ? 2 : 0, r3 = nr > 3 ? 3 : 0;
	int r4 = nr > 4 ? 4 : 0, r5 = nr > 5 ? 5 : 0;
	for (int s = 0; s < n; s++, z += zs, v += vsl) {
		__m256 v0 = _mm256_loadu_ps(v), v1 = _mm256_loadu_ps(v + 8), e;
		e = _mm256_broadcast_ss(z);
		a00 = _mm256_fmadd_ps(e, v0, a00);
		a01 = _mm256_fmadd_ps(e, v1, a01);
		e = _mm256_broadcast_ss(z + r1);
		a10 = _mm256_fmadd_ps(e, v0, a10);
		a11 = _mm256_fmadd_ps(e, v1, a11);
		e = _mm256_broadcast_ss(z + r2);
		a20 = _mm256_fmadd_ps(e, v0, a20);
		a21 = _mm256_fmadd_ps(e, v1, a21);
		e = _mm256_broadcast_ss(z + r3);
		a30 = _mm256_fmadd_ps(e, v0, a30);
		a31 = _mm256_fmadd_ps(e, v1, a31);
		e = _mm256_broadcast_ss(z + r4);
		a40 = _mm256_fmadd_ps(e, v0, a40);
		a41 = _mm256_fmadd_ps(e, v1, a41);
		e = _mm256_broadcast_ss(z + r5);
		a50 = _mm256_fmadd_ps(e, v0, a50);
		a51 = _mm256_fmadd_ps(e, v1, a51);
	}
	__m256 res[6][2] = {{a00, a01}, {a10, a11}, {a20, a21},
			    {a30, a31}, {a40, a41}, {a50, a51}};
	for (int r = 0; r < nr; r++)
		for (int k = 0; k < 2; k++)
			_mm256_storeu_ps(du + r * ldu + 8 * k, res[r][k]);
}

static void wino_reduce(float *du, const float *z, const float *v, int OC,
			int C, int n)
{
	for (int o0 = 0; o0 < OC; o0 += 6)
		for (int c0 = 0; c0 < C; c0 += 16)
			reduce_6x16(du + (size_t)o0 * C + c0, (size_t)C,
				    OC - o0 < 6 ? OC - o0 : 6, z + o0,
				    (size_t)OC, v + c0, (size_t)C, n);
}

/* ---- batch norm ----------------------------------------------------------- */

TGT static void add_float8(double *d, __m256 v)
{
	__m256d lo = _mm256_cvtps_pd(_mm256_castps256_ps128(v));
	__m256d hi = _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1));
	_mm256_storeu_pd(d, _mm256_add_pd(_mm256_loadu_pd(d), lo));
	_mm256_storeu_pd(d + 4, _mm256_add_pd(_mm256_loadu_pd(d + 4), hi));
}

TGT static void bn_stats(const struct apf_bn_job *j, int r0, int r1, int c0,
			 double *s, double *q)
{
	int C = j->C, c = c0;
	for (; c + 8 <= C; c += 8) {
		__m256 sh = _mm256_loadu_ps(j->shift + c);
		__m256 fs = _mm256_setzero_ps(), fq = fs;
		for (int r = r0; r < r1; r++) {
			__m256 x = _mm256_sub_ps(
				_mm256_loadu_ps(j->inp + (size_t)r * C + c), sh);
			fs = _mm256_add_ps(fs, x);
			fq = _mm256_fmadd_ps(x, x, fq);
		}
		add_float8(s + c, fs);
		add_float8(q + c, fq);
	}
	apf_fast_scalar_ops.bn_stats(j, r0, r1, c, s, q);
}

TGT static void bn_apply(const struct apf_bn_job *j, int r0, int r1, int c0)
{
	int C = j->C, C8 = c0 + (C - c0) / 8 * 8;
	__m256 zero = _mm256_setzero_ps();
	for (int r = r0; r < r1; r++) {
		const float *x = j->inp + (size_t)r * C;
		const float *res = j->res ? j->res + (size_t)r * C : NULL;
		float *y = j->y + (size_t)r * C;
		for (int c = c0; c < C8; c += 8) {
			__m256 xc = _mm256_sub_ps(_mm256_loadu_ps(x + c),
						  _mm256_loadu_ps(j->mean + c));
			__m256 v = _mm256_fmadd_ps(xc, _mm256_loadu_ps(j->a + c),
						   _mm256_loadu_ps(j->b + c));
			if (res)
				v = _mm256_add_ps(v, _mm256_loadu_ps(res + c));
			_mm256_storeu_ps(y + c, j->relu ? _mm256_max_ps(v, zero) : v);
		}
	}
	if (C8 < C)
		apf_fast_scalar_ops.bn_apply(j, r0, r1, C8);
}

/* dout at o, masked by the ReLU's output where the layer has one. */
static inline TGT __m256 bn_grad8(const struct apf_bn_job *j, size_t o)
{
	__m256 g = _mm256_loadu_ps(j->dout + o);
	if (j->relu)
		g = _mm256_and_ps(g, _mm256_cmp_ps(_mm256_loadu_ps(j->out + o),
						   _mm256_setzero_ps(), _CMP_GT_OQ));
	return g;
}

TGT static void bn_dsums(const struct apf_bn_job *j, int r0, int r1, int c0,
			 double *s, double *q)
{
	int C = j->C, c = c0;
	for (; c + 8 <= C; c += 8) {
		__m256 m = _mm256_loadu_ps(j->mean + c);
		__m256 fs = _mm256_setzero_ps(), fq = fs;
		for (int r = r0; r < r1; r++) {
			size_t o = (size_t)r * C + c;
			__m256 g = bn_grad8(j, o);
			__m256 xc = _mm256_sub_ps(_mm256_loadu_ps(j->inp + o), m);
			fs = _mm256_add_ps(fs, g);
			fq = _mm256_fmadd_ps(g, xc, fq);
		}
		add_float8(s + c, fs);
		add_float8(q + c, fq);
	}
	apf_fast_scalar_ops.bn_dsums(j, r0, r1, c, s, q);
}

TGT static void bn_dx(const struct apf_bn_job *j, int r0, int r1, int c0)
{
	int C = j->C, C8 = c0 + (C - c0) / 8 * 8;
	for (int r = r0; r < r1; r++) {
		size_t o = (size_t)r * C;
		for (int c = c0; c < C8; c += 8) {
			__m256 g = bn_grad8(j, o + c);
			if (j->dres) {
				float *d = j->dres + o + c;
				_mm256_storeu_ps(d, j->accum_res
					? _mm256_add_ps(_mm256_loadu_ps(d), g) : g);
			}
			if (!j->dinp)
				continue;
			__m256 xc = _mm256_sub_ps(_mm256_loadu_ps(j->inp + o + c),
						  _mm256_loadu_ps(j->mean + c));
			__m256 u = _mm256_sub_ps(g, _mm256_loadu_ps(j->k1 + c));
			u = _mm256_fnmadd_ps(xc, _mm256_loadu_ps(j->k2 + c), u);
			__m256 dx = _mm256_mul_ps(_mm256_loadu_ps(j->k0 + c), u);
			float *d = j->dinp + o + c;
			_mm256_storeu_ps(d, j->accum_inp
				? _mm256_add_ps(_mm256_loadu_ps(d), dx) : dx);
		}
	}
	if (C8 < C)
		apf_fast_scalar_ops.bn_dx(j, r0, r1, C8);
}

/* ---- the dot interaction (inter_body.h): 4 examples a vector ---------- */

/* r[c][l] = r[l][c], 4 x 4 doubles in registers. */
TGT static inline void transpose4_pd(__m256d r[4])
{
	__m256d t0 = _mm256_unpacklo_pd(r[0], r[1]);
	__m256d t1 = _mm256_unpackhi_pd(r[0], r[1]);
	__m256d t2 = _mm256_unpacklo_pd(r[2], r[3]);
	__m256d t3 = _mm256_unpackhi_pd(r[2], r[3]);
	r[0] = _mm256_permute2f128_pd(t0, t2, 0x20);
	r[1] = _mm256_permute2f128_pd(t1, t3, 0x20);
	r[2] = _mm256_permute2f128_pd(t0, t2, 0x31);
	r[3] = _mm256_permute2f128_pd(t1, t3, 0x31);
}

/* dst[i][l] = src[l][i] (inter_body.h's IB_LANES_IN): 4 floats of each
 * example widened and transposed in registers, the tail one by one. */
TGT static inline void lanes_in_avx2(__m256d *restrict dst,
				     const float *const src[4], int n,
				     size_t count)
{
	size_t i = 0;
	for (; i + 4 <= count; i += 4) {
		__m256d r[4];
		for (int l = 0; l < 4; l++)
			r[l] = l < n ? _mm256_cvtps_pd(_mm_loadu_ps(src[l] + i))
				     : _mm256_setzero_pd();
		transpose4_pd(r);
		for (int c = 0; c < 4; c++)
			dst[i + c] = r[c];
	}
	for (; i < count; i++)
		for (int l = 0; l < 4; l++)
			dst[i][l] = l < n ? src[l][i] : 0.0;
}

/* dst[l][i] = (float)src[i][l], + dst[l][i] when accum (IB_LANES_OUT):
 * transposed back 4 x 4 and narrowed 4 at a time, the tail one by one. */
TGT static inline void lanes_out_avx2(float *const dst[4],
				      const __m256d *restrict src, int n,
				      size_t count, int accum)
{
	size_t i = 0;
	for (; i + 4 <= count; i += 4) {
		__m256d r[4];
		for (int c = 0; c < 4; c++)
			r[c] = src[i + c];
		transpose4_pd(r);
		for (int l = 0; l < n; l++) {
			__m128 v = _mm256_cvtpd_ps(r[l]);
			if (accum)
				v = _mm_add_ps(_mm_loadu_ps(dst[l] + i), v);
			_mm_storeu_ps(dst[l] + i, v);
		}
	}
	for (; i < count; i++)
		for (int l = 0; l < n; l++)
			dst[l][i] = accum ? dst[l][i] + (float)src[i][l]
					  : (float)src[i][l];
}

#define IB_V __m256d
#define IB_L 4
#define IB_MADD(s, x, y) _mm256_fmadd_pd((x), (y), (s))
#define IB_FN static TGT
#define IB_TGT TGT
#define IB_SUFFIX avx2
#define IB_LANES_IN(dst, src, n, count) lanes_in_avx2(dst, src, n, count)
#define IB_LANES_OUT(dst, src, n, count, accum)                               \
	lanes_out_avx2(dst, src, n, count, accum)
#include "nn/cpu/inter_body.h"

/* ---- causal self-attention (attn_body.h): 4 doubles, 8 floats --------- */

#define AB_VD __m256d
#define AB_DL 4
#define AB_VF __m256
#define AB_FL 8
#define AB_WIDEN(p) _mm256_cvtps_pd(_mm_loadu_ps(p))
#define AB_LOADD(p) _mm256_loadu_pd(p)
#define AB_STORED(p, v) _mm256_storeu_pd((p), (v))
#define AB_LOADF(p) _mm256_loadu_ps(p)
#define AB_STOREF(p, v) _mm256_storeu_ps((p), (v))
#define AB_SETD(x) _mm256_set1_pd(x)
#define AB_SETF(x) _mm256_set1_ps(x)
#define AB_MADD(s, x, y) _mm256_fmadd_pd((x), (y), (s))
#define AB_MAXD(x, m) _mm256_max_pd((x), (m))
#define AB_TGT TGT
#define AB_SUFFIX avx2
#include "nn/cpu/attn_body.h"

const struct apf_fast_ops apf_fast_avx2_ops = {
	.tiles = tiles,
	.dweight_row = dweight_row,
	.wino_in = wino_in,
	.wino_out = wino_out,
	.wino_dy = wino_dy,
	.wino_reduce = wino_reduce,
	.bn_stats = bn_stats,
	.bn_apply = bn_apply,
	.bn_dsums = bn_dsums,
	.bn_dx = bn_dx,
	.inter_lanes = 4,
	.inter_fwd = inter_fwd_rows_avx2,
	.inter_bwd = inter_bwd_rows_avx2,
	.attn_floats = 8,
	.attn_fwd = attn_fwd_head_avx2,
	.attn_bwd = attn_bwd_head_avx2,
};
