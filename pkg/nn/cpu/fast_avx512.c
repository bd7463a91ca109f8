/*
 * fast_avx512.c: fast.c's kernels on the AVX-512 path (fast_ops.h), 16
 * lanes: the forward / input-gradient tile of 6 pixels x 32 output channels
 * (6 x 16 where 16 remain) in zmm accumulators, the weight-gradient tile of
 * 4 output channels x 3 columns of 16 channels, the Winograd transforms 16
 * channels at a time, its GEMM tile of 12 x 16 or 6 x 32 and its reduction
 * tile of 16 x 16 or 6 x 32 (or 6 x 16 for fewer than 16 rows), batch
 * norm 16 channels at a time. Where a shape leaves fewer than 16 channels
 * (a weight gradient of 8 or 24 channels, batch norm's last channels) the
 * AVX2 kernels take over; they compute the same bits, and isa.c offers this
 * path only with AVX2 and FMA present.
 *
 * Each lane runs the sequence fast_ops.h gives for its element, so these
 * compute exactly what the scalar and AVX2 paths do.
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

#define TGT __attribute__((target("avx512f,avx2,fma")))
#define INLINE static inline __attribute__((always_inline))
#define TILE_PX APF_FAST_TILE_PX

/* ---- the forward / input-gradient tile -------------------------------- */

/* For pixels i < np, out[i][o0 .. o0 + 16 NV) (=, or += when accum) sum
 * over taps t and channels c < cin of px[i][toff[t] + c] * tw[t][c * ldw +
 * o0 + ..], plus bias[o0 ..] if given. Pixels np..5 repeat pixel 0 and are
 * not stored. NV is a constant (1 or 2) in each caller, so the accumulators
 * stay in registers. The offset o0 is added here, not to copies of the
 * pointer arrays: writing those copies and reading them back as vectors
 * stalled on store forwarding, a third of the caller's own time. */
TGT INLINE void tile_body(const float *const px[TILE_PX],
			  float *const out[TILE_PX], int np,
			  const ptrdiff_t *toff, const float *const *tw,
			  int ntaps, int cin, int ldw, const float *bias,
			  int accum, int o0, const int NV)
{
	__m512 acc[TILE_PX][2];
	for (int i = 0; i < TILE_PX; i++)
		for (int v = 0; v < NV; v++)
			acc[i][v] = _mm512_setzero_ps();
	for (int t = 0; t < ntaps; t++) {
		const float *w = tw[t] + o0;
		ptrdiff_t o = toff[t];
		const float *p0 = px[0] + o, *p1 = px[1] + o, *p2 = px[2] + o;
		const float *p3 = px[3] + o, *p4 = px[4] + o, *p5 = px[5] + o;
		for (int c = 0; c < cin; c++, w += ldw) {
			__m512 w0 = _mm512_loadu_ps(w);
			__m512 w1 = NV > 1 ? _mm512_loadu_ps(w + 16) : w0;
			__m512 x[TILE_PX] = {
				_mm512_set1_ps(p0[c]), _mm512_set1_ps(p1[c]),
				_mm512_set1_ps(p2[c]), _mm512_set1_ps(p3[c]),
				_mm512_set1_ps(p4[c]), _mm512_set1_ps(p5[c])};
			for (int i = 0; i < TILE_PX; i++) {
				acc[i][0] = _mm512_fmadd_ps(x[i], w0, acc[i][0]);
				if (NV > 1)
					acc[i][1] = _mm512_fmadd_ps(x[i], w1, acc[i][1]);
			}
		}
	}
	for (int i = 0; i < np; i++)
		for (int v = 0; v < NV; v++) {
			float *d = out[i] + o0 + 16 * v;
			__m512 l = acc[i][v];
			if (accum)
				l = _mm512_add_ps(_mm512_loadu_ps(d), l);
			else if (bias)
				l = _mm512_add_ps(_mm512_loadu_ps(bias + o0 + 16 * v), l);
			_mm512_storeu_ps(d, l);
		}
}

TGT static void tile_6x32(const float *const px[TILE_PX],
			  float *const out[TILE_PX], int np,
			  const ptrdiff_t *toff, const float *const *tw,
			  int ntaps, int cin, int ldw, const float *bias,
			  int accum, int o0)
{
	tile_body(px, out, np, toff, tw, ntaps, cin, ldw, bias, accum, o0, 2);
}

TGT static void tile_6x16(const float *const px[TILE_PX],
			  float *const out[TILE_PX], int np,
			  const ptrdiff_t *toff, const float *const *tw,
			  int ntaps, int cin, int ldw, const float *bias,
			  int accum, int o0)
{
	tile_body(px, out, np, toff, tw, ntaps, cin, ldw, bias, accum, o0, 1);
}

static void tiles(const struct apf_fast_grid *g, const ptrdiff_t *toff,
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
		for (int o0 = 0; o0 < cout;) {
			int w = cout - o0 >= 32 ? 32 : 16;
			(w == 32 ? tile_6x32 : tile_6x16)(
				px, out, np, toff, tw, ntaps, cin, ldw, bias,
				accum, o0);
			o0 += w;
		}
	}
}

/* ---- the direct weight gradient --------------------------------------- */

/* As the AVX2 tile, with columns of 16 channels: acc[r][k] (output channel
 * o0 + r, column k) += over the chunk's pixels in order dy[pixel][o0 + r]
 * * x[pixel][xoff[k] .. + 16]; columns k >= ncol repeat column 0 and are
 * not stored. */
TGT static void dweight_tile(float *part, const ptrdiff_t dwoff[3],
			     ptrdiff_t dw_ld, int ncol, const float *dy,
			     const float *x, const ptrdiff_t xoff[3],
			     const struct apf_fast_dw *g)
{
	__m512 acc[4][3];
	for (int r = 0; r < 4; r++)
		for (int k = 0; k < 3; k++)
			acc[r][k] = k < ncol ? _mm512_loadu_ps(part + r * dw_ld + dwoff[k])
					     : _mm512_setzero_ps();
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
				__m512 v[3] = {_mm512_loadu_ps(xr + x0),
					       _mm512_loadu_ps(xr + x1),
					       _mm512_loadu_ps(xr + x2)};
				for (int r = 0; r < 4; r++) {
					__m512 e = _mm512_set1_ps(d[r]);
					for (int k = 0; k < 3; k++)
						acc[r][k] = _mm512_fmadd_ps(e, v[k], acc[r][k]);
				}
			}
		}
	for (int r = 0; r < 4; r++)
		for (int k = 0; k < ncol; k++)
			_mm512_storeu_ps(part + r * dw_ld + dwoff[k], acc[r][k]);
}

/* The columns a kernel row leaves after its groups of three (one for a 1x1
 * kernel of 16 channels, two for 32): 8 output channels x ncol columns in
 * 8 or 16 accumulators, where the tile above would compute three columns
 * for one or two, in 4 or 8 dependent chains. The same sequence per
 * element: acc[r][k] = part; over the chunk's pixels in order, acc[r][k]
 * = fma(dy[pixel][o0 + r], x[pixel][xoff[k] .. + 16], acc[r][k]). */
TGT INLINE void dweight_rows8_body(float *part, const ptrdiff_t *dwoff,
				   ptrdiff_t dw_ld, const int ncol,
				   const float *dy, const float *x,
				   const ptrdiff_t *xoff,
				   const struct apf_fast_dw *g)
{
	__m512 acc[8][2];
	for (int r = 0; r < 8; r++)
		for (int k = 0; k < ncol; k++)
			acc[r][k] = _mm512_loadu_ps(part + r * dw_ld + dwoff[k]);
	int OC = g->OC, S = g->S, C = g->C, OW = g->OW;
	for (int b = 0; b < g->nb; b++)
		for (int oh = 0; oh < g->OH; oh++) {
			const float *d = dy + ((size_t)b * g->OH + oh) * OW * OC;
			const float *xr = x + (size_t)b * g->in_img +
					  (size_t)oh * S * g->Wp * C;
			for (int ow = 0; ow < OW; ow++, d += OC,
				 xr += (ptrdiff_t)S * C) {
				__m512 v[2];
				for (int k = 0; k < ncol; k++)
					v[k] = _mm512_loadu_ps(xr + xoff[k]);
				for (int r = 0; r < 8; r++) {
					__m512 e = _mm512_set1_ps(d[r]);
					for (int k = 0; k < ncol; k++)
						acc[r][k] = _mm512_fmadd_ps(e, v[k], acc[r][k]);
				}
			}
		}
	for (int r = 0; r < 8; r++)
		for (int k = 0; k < ncol; k++)
			_mm512_storeu_ps(part + r * dw_ld + dwoff[k], acc[r][k]);
}

TGT static void dweight_rows8_1(float *part, const ptrdiff_t *dwoff,
				ptrdiff_t dw_ld, const float *dy, const float *x,
				const ptrdiff_t *xoff, const struct apf_fast_dw *g)
{
	dweight_rows8_body(part, dwoff, dw_ld, 1, dy, x, xoff, g);
}

TGT static void dweight_rows8_2(float *part, const ptrdiff_t *dwoff,
				ptrdiff_t dw_ld, const float *dy, const float *x,
				const ptrdiff_t *xoff, const struct apf_fast_dw *g)
{
	dweight_rows8_body(part, dwoff, dw_ld, 2, dy, x, xoff, g);
}

/* As the AVX2 path's dweight_tile_oc, 16 output channels at a time: where
 * the input's channels do not fill the lanes (the stem's one channel;
 * fast.h), acc[k] (output channels o0 .. + 16, column k: one tap and one
 * input channel) += over the chunk's pixels in order dy[pixel][o0 ..] *
 * x[pixel][xoff[k]]; columns k >= ncol repeat column 0 and are not
 * stored. */
TGT static void dweight_tile_oc(float *part, const ptrdiff_t dwoff[4],
				ptrdiff_t dw_ld, int ncol, const float *dy,
				const float *x, const ptrdiff_t xoff[4],
				const struct apf_fast_dw *g)
{
	float t[4][16];
	for (int k = 0; k < 4; k++)
		for (int l = 0; l < 16; l++)
			t[k][l] = k < ncol ? part[l * dw_ld + dwoff[k]] : 0.0f;
	__m512 a0 = _mm512_loadu_ps(t[0]), a1 = _mm512_loadu_ps(t[1]);
	__m512 a2 = _mm512_loadu_ps(t[2]), a3 = _mm512_loadu_ps(t[3]);
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
				__m512 e = _mm512_loadu_ps(d);
				a0 = _mm512_fmadd_ps(e, _mm512_set1_ps(xr[x0]), a0);
				a1 = _mm512_fmadd_ps(e, _mm512_set1_ps(xr[x1]), a1);
				a2 = _mm512_fmadd_ps(e, _mm512_set1_ps(xr[x2]), a2);
				a3 = _mm512_fmadd_ps(e, _mm512_set1_ps(xr[x3]), a3);
			}
		}
	_mm512_storeu_ps(t[0], a0), _mm512_storeu_ps(t[1], a1);
	_mm512_storeu_ps(t[2], a2), _mm512_storeu_ps(t[3], a3);
	for (int k = 0; k < ncol; k++)
		for (int l = 0; l < 16; l++)
			part[l * dw_ld + dwoff[k]] = t[k][l];
}

/* Column col of kernel row kh, (kw, 16 channels): its offset in a pixel's
 * padded input row and in an output channel's weights. */
static void column(int kh, int K, int C, int col, ptrdiff_t *xoff,
		   ptrdiff_t *dwoff)
{
	int kw = col / (C / 16), c = col % (C / 16) * 16;
	*xoff = (ptrdiff_t)kw * C + c;
	*dwoff = (ptrdiff_t)(kh * K + kw) * C + c;
}

static void dweight_row(float *part, const float *dy, const float *x, int kh,
			const struct apf_fast_dw *d)
{
	int K = d->K, C = d->C;
	if (C % 8 && d->OC % 16 == 0) {
		/* lanes over output channels, 16 at a time */
		ptrdiff_t dw_ld = (ptrdiff_t)K * K * C, xoff[4], dwoff[4];
		for (int o0 = 0; o0 < d->OC; o0 += 16)
			for (int c0 = 0; c0 < K * C; c0 += 4) {
				int n = apf_fast_dw_columns(kh, K, C, c0, xoff,
							    dwoff);
				dweight_tile_oc(part + o0 * dw_ld, dwoff, dw_ld,
						n, dy + o0, x, xoff, d);
			}
		return;
	}
	if (C % 16) {
		apf_fast_avx2_ops.dweight_row(part, dy, x, kh, d);
		return;
	}
	ptrdiff_t dw_ld = (ptrdiff_t)K * K * C;
	int ncols = K * C / 16;
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
	if (!rest)
		return;
	ptrdiff_t xoff[2], dwoff[2];
	for (int k = 0; k < rest; k++)
		column(kh, K, C, ncols - rest + k, &xoff[k], &dwoff[k]);
	for (int o0 = 0; o0 < d->OC; o0 += 8)
		(rest == 1 ? dweight_rows8_1 : dweight_rows8_2)(
			part + o0 * dw_ld, dwoff, dw_ld, dy + o0, x, xoff, d);
}

/* ---- Winograd ------------------------------------------------------------
 *
 * The Winograd kernels take channel counts in multiples of 16 (fast.c's
 * apf_cpu_conv_wino_ok); anything else goes to the AVX2 ones.
 */

TGT static void wino_in(float *V, size_t vs, const float *d, size_t row,
			int cin)
{
	if (cin % 16) {
		apf_fast_avx2_ops.wino_in(V, vs, d, row, cin);
		return;
	}
	for (int c = 0; c < cin; c += 16) {
		__m512 x[4][4], t[4][4];
		for (int i = 0; i < 4; i++)
			for (int k = 0; k < 4; k++)
				x[i][k] = _mm512_loadu_ps(d + i * row + (size_t)k * cin + c);
		for (int k = 0; k < 4; k++) {
			t[0][k] = _mm512_sub_ps(x[0][k], x[2][k]);
			t[1][k] = _mm512_add_ps(x[1][k], x[2][k]);
			t[2][k] = _mm512_sub_ps(x[2][k], x[1][k]);
			t[3][k] = _mm512_sub_ps(x[1][k], x[3][k]);
		}
		for (int i = 0; i < 4; i++) {
			float *v = V + (size_t)(4 * i) * vs + c;
			_mm512_storeu_ps(v, _mm512_sub_ps(t[i][0], t[i][2]));
			_mm512_storeu_ps(v + vs, _mm512_add_ps(t[i][1], t[i][2]));
			_mm512_storeu_ps(v + 2 * vs, _mm512_sub_ps(t[i][2], t[i][1]));
			_mm512_storeu_ps(v + 3 * vs, _mm512_sub_ps(t[i][1], t[i][3]));
		}
	}
}

TGT static void wino_out(float *y, size_t yrow, int nh, int nw, const float *M,
			 size_t ms, int cout, const float *bias, int accum)
{
	if (cout % 16) {
		apf_fast_avx2_ops.wino_out(y, yrow, nh, nw, M, ms, cout, bias,
					   accum);
		return;
	}
	for (int o = 0; o < cout; o += 16) {
		__m512 m[4][4], s0[4], s1[4], r[2][2];
		for (int i = 0; i < 4; i++)
			for (int k = 0; k < 4; k++)
				m[i][k] = _mm512_loadu_ps(M + (size_t)(4 * i + k) * ms + o);
		for (int k = 0; k < 4; k++) {
			s0[k] = _mm512_add_ps(_mm512_add_ps(m[0][k], m[1][k]), m[2][k]);
			s1[k] = _mm512_sub_ps(_mm512_sub_ps(m[1][k], m[2][k]), m[3][k]);
		}
		r[0][0] = _mm512_add_ps(_mm512_add_ps(s0[0], s0[1]), s0[2]);
		r[0][1] = _mm512_sub_ps(_mm512_sub_ps(s0[1], s0[2]), s0[3]);
		r[1][0] = _mm512_add_ps(_mm512_add_ps(s1[0], s1[1]), s1[2]);
		r[1][1] = _mm512_sub_ps(_mm512_sub_ps(s1[1], s1[2]), s1[3]);
		for (int i = 0; i < nh; i++)
			for (int k = 0; k < nw; k++) {
				float *p = y + i * yrow + (size_t)k * cout + o;
				__m512 v = r[i][k];
				if (accum)
					v = _mm512_add_ps(_mm512_loadu_ps(p), v);
				else if (bias)
					v = _mm512_add_ps(_mm512_loadu_ps(bias + o), v);
				_mm512_storeu_ps(p, v);
			}
	}
}

TGT static void wino_dy(float *Z, size_t zs, const float *y, size_t yrow,
			int nh, int nw, int OC)
{
	if (OC % 16) {
		apf_fast_avx2_ops.wino_dy(Z, zs, y, yrow, nh, nw, OC);
		return;
	}
	__m512 zero = _mm512_setzero_ps();
	for (int o = 0; o < OC; o += 16) {
		__m512 v[2][2], a[4][2];
		for (int i = 0; i < 2; i++)
			for (int k = 0; k < 2; k++)
				v[i][k] = i < nh && k < nw
					? _mm512_loadu_ps(y + i * yrow + (size_t)k * OC + o)
					: zero;
		for (int k = 0; k < 2; k++) {
			a[0][k] = v[0][k];
			a[1][k] = _mm512_add_ps(v[0][k], v[1][k]);
			a[2][k] = _mm512_sub_ps(v[0][k], v[1][k]);
			a[3][k] = _mm512_sub_ps(zero, v[1][k]);
		}
		for (int i = 0; i < 4; i++) {
			float *z = Z + (size_t)(4 * i) * zs + o;
			_mm512_storeu_ps(z, a[i][0]);
			_mm512_storeu_ps(z + zs, _mm512_add_ps(a[i][0], a[i][1]));
			_mm512_storeu_ps(z + 2 * zs, _mm512_sub_ps(a[i][0], a[i][1]));
			_mm512_storeu_ps(z + 3 * zs, _mm512_sub_ps(zero, a[i][1]));
		}
	}
}

/* Rows [0, nr) of m (cout apart), columns o0 .. o0 + 16 NV: acc = 0, then
 * over c < cin in order acc = fma(v[row][c], u[c][col], acc). R and NV
 * are constants in each caller: 12 x 16 or 6 x 32, twelve accumulators
 * either way, enough to keep both FMA ports busy past their latency
 * (tiles' 6 x 16 has six). A whole block (nr == R) addresses its rows
 * from one pointer, with CIN, when not 0, the constant cin; a last,
 * partial block points rows nr .. R-1 at row 0 and does not store them. */
TGT INLINE void wgemm_body(float *m, const float *v, const float *u, int nr,
			   int cin, int cout, int o0, const int R,
			   const int NV, const int CIN)
{
	__m512 acc[12][2];
	for (int r = 0; r < 12; r++)
		acc[r][0] = acc[r][1] = _mm512_setzero_ps();
	const float *w = u + o0;
	if (nr == R) {
		size_t ld = CIN ? (size_t)CIN : (size_t)cin;
		for (int c = 0; c < (CIN ? CIN : cin); c++, w += cout) {
			__m512 w0 = _mm512_loadu_ps(w);
			__m512 w1 = NV > 1 ? _mm512_loadu_ps(w + 16) : w0;
			for (int r = 0; r < R; r++) {
				__m512 x = _mm512_set1_ps(v[r * ld + c]);
				acc[r][0] = _mm512_fmadd_ps(x, w0, acc[r][0]);
				if (NV > 1)
					acc[r][1] = _mm512_fmadd_ps(x, w1, acc[r][1]);
			}
		}
	} else {
		const float *row[12];
		for (int r = 0; r < R; r++)
			row[r] = v + (size_t)(r < nr ? r : 0) * cin;
		for (int c = 0; c < cin; c++, w += cout) {
			__m512 w0 = _mm512_loadu_ps(w);
			__m512 w1 = NV > 1 ? _mm512_loadu_ps(w + 16) : w0;
			for (int r = 0; r < R; r++) {
				__m512 x = _mm512_set1_ps(row[r][c]);
				acc[r][0] = _mm512_fmadd_ps(x, w0, acc[r][0]);
				if (NV > 1)
					acc[r][1] = _mm512_fmadd_ps(x, w1, acc[r][1]);
			}
		}
	}
	for (int r = 0; r < nr; r++)
		for (int k = 0; k < NV; k++)
			_mm512_storeu_ps(m + (size_t)r * cout + o0 + 16 * k,
					 acc[r][k]);
}

TGT static void wgemm_12x16(float *m, const float *v, const float *u, int nr,
			    int cin, int cout, int o0)
{
	if (cin == 16)
		wgemm_body(m, v, u, nr, cin, cout, o0, 12, 1, 16);
	else
		wgemm_body(m, v, u, nr, cin, cout, o0, 12, 1, 0);
}

TGT static void wgemm_6x32(float *m, const float *v, const float *u, int nr,
			   int cin, int cout, int o0)
{
	wgemm_body(m, v, u, nr, cin, cout, o0, 6, 2, 0);
}

static void wino_gemm(float *m, const float *v, const float *u, int n,
		      int cin, int cout)
{
	for (int o0 = 0; o0 < cout;) {
		int w = cout - o0 >= 32 ? 32 : 16, R = w == 32 ? 6 : 12;
		for (int s = 0; s < n; s += R)
			(w == 32 ? wgemm_6x32 : wgemm_12x16)(
				m + (size_t)s * cout, v + (size_t)s * cin, u,
				n - s < R ? n - s : R, cin, cout, o0);
		o0 += w;
	}
}

/* du rows r < nr (ldu apart), 16 NV columns: += over n slots s in order
 * z[s * zs + r] * v[s * vsl + ..]. Rows nr..5 repeat row 0, unstored. */
TGT INLINE void reduce_body(float *du, size_t ldu, int nr, const float *z,
			    size_t zs, const float *v, size_t vsl, int n,
			    const int NV)
{
	__m512 a[6][2];
	for (int r = 0; r < 6; r++)
		for (int k = 0; k < NV; k++)
			a[r][k] = r < nr ? _mm512_loadu_ps(du + r * ldu + 16 * k)
					 : _mm512_setzero_ps();
	int rr[6];
	for (int r = 0; r < 6; r++)
		rr[r] = r < nr ? r : 0;
	for (int s = 0; s < n; s++, z += zs, v += vsl) {
		__m512 v0 = _mm512_loadu_ps(v);
		__m512 v1 = NV > 1 ? _mm512_loadu_ps(v + 16) : v0;
		for (int r = 0; r < 6; r++) {
			__m512 e = _mm512_set1_ps(z[rr[r]]);
			a[r][0] = _mm512_fmadd_ps(e, v0, a[r][0]);
			if (NV > 1)
				a[r][1] = _mm512_fmadd_ps(e, v1, a[r][1]);
		}
	}
	for (int r = 0; r < nr; r++)
		for (int k = 0; k < NV; k++)
			_mm512_storeu_ps(du + r * ldu + 16 * k, a[r][k]);
}

TGT static void reduce_6x32(float *du, size_t ldu, int nr, const float *z,
			    size_t zs, const float *v, size_t vsl, int n)
{
	reduce_body(du, ldu, nr, z, zs, v, vsl, n, 2);
}

TGT static void reduce_6x16(float *du, size_t ldu, int nr, const float *z,
			    size_t zs, const float *v, size_t vsl, int n)
{
	reduce_body(du, ldu, nr, z, zs, v, vsl, n, 1);
}

/* reduce_body's sums for 16 whole rows of 16 columns: sixteen
 * accumulators where a 6 x 16 tile has six, too few to cover the FMA's
 * latency, and the rows' factors at fixed offsets from z. */
TGT static void reduce_16x16(float *du, size_t ldu, const float *z, size_t zs,
			     const float *v, size_t vsl, int n)
{
	__m512 a[16];
	for (int r = 0; r < 16; r++)
		a[r] = _mm512_loadu_ps(du + r * ldu);
	for (int s = 0; s < n; s++, z += zs, v += vsl) {
		__m512 v0 = _mm512_loadu_ps(v);
		for (int r = 0; r < 16; r++)
			a[r] = _mm512_fmadd_ps(_mm512_set1_ps(z[r]), v0, a[r]);
	}
	for (int r = 0; r < 16; r++)
		_mm512_storeu_ps(du + r * ldu, a[r]);
}

static void wino_reduce(float *du, const float *z, const float *v, int OC,
			int C, int n)
{
	if (C % 16) {
		apf_fast_avx2_ops.wino_reduce(du, z, v, OC, C, n);
		return;
	}
	for (int c0 = 0; c0 < C;) {
		int w = C - c0 >= 32 ? 32 : 16, o0 = 0;
		if (w == 16)
			for (; o0 + 16 <= OC; o0 += 16)
				reduce_16x16(du + (size_t)o0 * C + c0, (size_t)C,
					     z + o0, (size_t)OC, v + c0,
					     (size_t)C, n);
		for (; o0 < OC; o0 += 6)
			(w == 32 ? reduce_6x32 : reduce_6x16)(
				du + (size_t)o0 * C + c0, (size_t)C,
				OC - o0 < 6 ? OC - o0 : 6, z + o0, (size_t)OC,
				v + c0, (size_t)C, n);
		c0 += w;
	}
}

/* ---- batch norm ----------------------------------------------------------- */

TGT static void add_float16(double *d, __m512 v)
{
	__m512d lo = _mm512_cvtps_pd(_mm512_castps512_ps256(v));
	__m512d hi = _mm512_cvtps_pd(_mm256_castpd_ps(
		_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
	_mm512_storeu_pd(d, _mm512_add_pd(_mm512_loadu_pd(d), lo));
	_mm512_storeu_pd(d + 8, _mm512_add_pd(_mm512_loadu_pd(d + 8), hi));
}

TGT static void bn_stats(const struct apf_bn_job *j, int r0, int r1, int c0,
			 double *s, double *q)
{
	int C = j->C, c = c0;
	for (; c + 16 <= C; c += 16) {
		__m512 sh = _mm512_loadu_ps(j->shift + c);
		__m512 fs = _mm512_setzero_ps(), fq = fs;
		for (int r = r0; r < r1; r++) {
			__m512 x = _mm512_sub_ps(
				_mm512_loadu_ps(j->inp + (size_t)r * C + c), sh);
			fs = _mm512_add_ps(fs, x);
			fq = _mm512_fmadd_ps(x, x, fq);
		}
		add_float16(s + c, fs);
		add_float16(q + c, fq);
	}
	if (c < C)
		apf_fast_avx2_ops.bn_stats(j, r0, r1, c, s, q);
}

TGT static void bn_apply(const struct apf_bn_job *j, int r0, int r1, int c0)
{
	int C = j->C, C16 = c0 + (C - c0) / 16 * 16;
	__m512 zero = _mm512_setzero_ps();
	for (int r = r0; r < r1; r++) {
		const float *x = j->inp + (size_t)r * C;
		const float *res = j->res ? j->res + (size_t)r * C : NULL;
		float *y = j->y + (size_t)r * C;
		for (int c = c0; c < C16; c += 16) {
			__m512 xc = _mm512_sub_ps(_mm512_loadu_ps(x + c),
						  _mm512_loadu_ps(j->mean + c));
			__m512 v = _mm512_fmadd_ps(xc, _mm512_loadu_ps(j->a + c),
						   _mm512_loadu_ps(j->b + c));
			if (res)
				v = _mm512_add_ps(v, _mm512_loadu_ps(res + c));
			/* max(v, 0) as MAXPS: v > 0 ? v : 0, so NaN and -0
			 * give +0, as on the other paths */
			_mm512_storeu_ps(y + c, j->relu ? _mm512_max_ps(v, zero) : v);
		}
	}
	if (C16 < C)
		apf_fast_avx2_ops.bn_apply(j, r0, r1, C16);
}

/* dout at o, zero where the ReLU's output is not > 0 (when relu). */
TGT INLINE __m512 bn_grad16(const struct apf_bn_job *j, size_t o)
{
	__m512 g = _mm512_loadu_ps(j->dout + o);
	if (!j->relu)
		return g;
	__mmask16 live = _mm512_cmp_ps_mask(_mm512_loadu_ps(j->out + o),
					    _mm512_setzero_ps(), _CMP_GT_OQ);
	return _mm512_maskz_mov_ps(live, g);
}

TGT static void bn_dsums(const struct apf_bn_job *j, int r0, int r1, int c0,
			 double *s, double *q)
{
	int C = j->C, c = c0;
	for (; c + 16 <= C; c += 16) {
		__m512 m = _mm512_loadu_ps(j->mean + c);
		__m512 fs = _mm512_setzero_ps(), fq = fs;
		for (int r = r0; r < r1; r++) {
			size_t o = (size_t)r * C + c;
			__m512 g = bn_grad16(j, o);
			__m512 xc = _mm512_sub_ps(_mm512_loadu_ps(j->inp + o), m);
			fs = _mm512_add_ps(fs, g);
			fq = _mm512_fmadd_ps(g, xc, fq);
		}
		add_float16(s + c, fs);
		add_float16(q + c, fq);
	}
	if (c < C)
		apf_fast_avx2_ops.bn_dsums(j, r0, r1, c, s, q);
}

TGT static void bn_dx(const struct apf_bn_job *j, int r0, int r1, int c0)
{
	int C = j->C, C16 = c0 + (C - c0) / 16 * 16;
	for (int r = r0; r < r1; r++) {
		size_t o = (size_t)r * C;
		for (int c = c0; c < C16; c += 16) {
			__m512 g = bn_grad16(j, o + c);
			if (j->dres) {
				float *d = j->dres + o + c;
				_mm512_storeu_ps(d, j->accum_res
					? _mm512_add_ps(_mm512_loadu_ps(d), g) : g);
			}
			if (!j->dinp)
				continue;
			__m512 xc = _mm512_sub_ps(_mm512_loadu_ps(j->inp + o + c),
						  _mm512_loadu_ps(j->mean + c));
			__m512 u = _mm512_sub_ps(g, _mm512_loadu_ps(j->k1 + c));
			u = _mm512_fnmadd_ps(xc, _mm512_loadu_ps(j->k2 + c), u);
			__m512 dx = _mm512_mul_ps(_mm512_loadu_ps(j->k0 + c), u);
			float *d = j->dinp + o + c;
			_mm512_storeu_ps(d, j->accum_inp
				? _mm512_add_ps(_mm512_loadu_ps(d), dx) : dx);
		}
	}
	if (C16 < C)
		apf_fast_avx2_ops.bn_dx(j, r0, r1, C16);
}

/* ---- the dot interaction (inter_body.h): 8 examples a vector ---------- */

/* r[c][l] = r[l][c], 8 x 8 doubles in registers. */
TGT INLINE void transpose8_pd(__m512d r[8])
{
	__m512d t[8], u[8];
	for (int m = 0; m < 4; m++) {
		/* (r_2m[c], r_2m+1[c]) for even c, then for odd c */
		t[2 * m] = _mm512_unpacklo_pd(r[2 * m], r[2 * m + 1]);
		t[2 * m + 1] = _mm512_unpackhi_pd(r[2 * m], r[2 * m + 1]);
	}
	for (int h = 0; h < 2; h++) {
		/* h 0: even c, 1: odd c; 128-bit lanes 0 and 2, then 1 and
		 * 3, of row pairs (0,1) with (2,3), and (4,5) with (6,7) */
		u[4 * h] = _mm512_shuffle_f64x2(t[h], t[2 + h], 0x88);
		u[4 * h + 1] = _mm512_shuffle_f64x2(t[h], t[2 + h], 0xdd);
		u[4 * h + 2] = _mm512_shuffle_f64x2(t[4 + h], t[6 + h], 0x88);
		u[4 * h + 3] = _mm512_shuffle_f64x2(t[4 + h], t[6 + h], 0xdd);
	}
	for (int h = 0; h < 2; h++) {
		r[h] = _mm512_shuffle_f64x2(u[4 * h], u[4 * h + 2], 0x88);
		r[4 + h] = _mm512_shuffle_f64x2(u[4 * h], u[4 * h + 2], 0xdd);
		r[2 + h] = _mm512_shuffle_f64x2(u[4 * h + 1], u[4 * h + 3], 0x88);
		r[6 + h] = _mm512_shuffle_f64x2(u[4 * h + 1], u[4 * h + 3], 0xdd);
	}
}

/* dst[i][l] = src[l][i] (inter_body.h's IB_LANES_IN): 8 floats of each
 * example widened and transposed in registers, the tail one by one. */
TGT INLINE void lanes_in_avx512(__m512d *restrict dst,
				const float *const src[8], int n, size_t count)
{
	size_t i = 0;
	for (; i + 8 <= count; i += 8) {
		__m512d r[8];
		for (int l = 0; l < 8; l++)
			r[l] = l < n ? _mm512_cvtps_pd(_mm256_loadu_ps(src[l] + i))
				     : _mm512_setzero_pd();
		transpose8_pd(r);
		for (int c = 0; c < 8; c++)
			dst[i + c] = r[c];
	}
	for (; i < count; i++)
		for (int l = 0; l < 8; l++)
			dst[i][l] = l < n ? src[l][i] : 0.0;
}

/* dst[l][i] = (float)src[i][l], + dst[l][i] when accum (IB_LANES_OUT):
 * transposed back 8 x 8 and narrowed 8 at a time, the tail one by one. */
TGT INLINE void lanes_out_avx512(float *const dst[8],
				 const __m512d *restrict src, int n,
				 size_t count, int accum)
{
	size_t i = 0;
	for (; i + 8 <= count; i += 8) {
		__m512d r[8];
		for (int c = 0; c < 8; c++)
			r[c] = src[i + c];
		transpose8_pd(r);
		for (int l = 0; l < n; l++) {
			__m256 v = _mm512_cvtpd_ps(r[l]);
			if (accum)
				v = _mm256_add_ps(_mm256_loadu_ps(dst[l] + i), v);
			_mm256_storeu_ps(dst[l] + i, v);
		}
	}
	for (; i < count; i++)
		for (int l = 0; l < n; l++)
			dst[l][i] = accum ? dst[l][i] + (float)src[i][l]
					  : (float)src[i][l];
}

#define IB_V __m512d
#define IB_L 8
#define IB_MADD(s, x, y) _mm512_fmadd_pd((x), (y), (s))
#define IB_FN static TGT
#define IB_TGT TGT
#define IB_SUFFIX avx512
#define IB_FR 4 /* 16 sums, 8 operands: 24 of the 32 registers */
#define IB_FC 4
#define IB_BR 2 /* 16 sums, 8 operands and a pair's gradient */
#define IB_BX 8
#define IB_LANES_IN(dst, src, n, count) lanes_in_avx512(dst, src, n, count)
#define IB_LANES_OUT(dst, src, n, count, accum)                               \
	lanes_out_avx512(dst, src, n, count, accum)
#include "nn/cpu/inter_body.h"

/* ---- causal self-attention (attn_body.h): 8 doubles, 16 floats -------- */

#define AB_VD __m512d
#define AB_DL 8
#define AB_VF __m512
#define AB_FL 16
#define AB_WIDEN(p) _mm512_cvtps_pd(_mm256_loadu_ps(p))
#define AB_LOADD(p) _mm512_loadu_pd(p)
#define AB_STORED(p, v) _mm512_storeu_pd((p), (v))
#define AB_LOADF(p) _mm512_loadu_ps(p)
#define AB_STOREF(p, v) _mm512_storeu_ps((p), (v))
#define AB_SETD(x) _mm512_set1_pd(x)
#define AB_SETF(x) _mm512_set1_ps(x)
#define AB_MADD(s, x, y) _mm512_fmadd_pd((x), (y), (s))
#define AB_MAXD(x, m) _mm512_max_pd((x), (m))
#define AB_TGT TGT
#define AB_SUFFIX avx512
#include "nn/cpu/attn_body.h"

const struct apf_fast_ops apf_fast_avx512_ops = {
	.tiles = tiles,
	.dweight_row = dweight_row,
	.wino_gemm = wino_gemm,
	.wino_in = wino_in,
	.wino_out = wino_out,
	.wino_dy = wino_dy,
	.wino_reduce = wino_reduce,
	.bn_stats = bn_stats,
	.bn_apply = bn_apply,
	.bn_dsums = bn_dsums,
	.bn_dx = bn_dx,
	.inter_lanes = 8,
	.inter_fwd = inter_fwd_rows_avx512,
	.inter_bwd = inter_bwd_rows_avx512,
	.attn_floats = 16,
	.attn_fwd = attn_fwd_head_avx512,
	.attn_bwd = attn_bwd_head_avx512,
};
