/*
 * fast_scalar.c: fast.c's kernels on the scalar path (fast_ops.h), for any
 * x86-64: one element at a time, every multiply-add an fmaf() (correctly
 * rounded, so equal to a hardware FMA lane). The loops mirror the vector
 * paths' tiles only where that keeps the code short; what matters is that
 * each element sees the sequence fast_ops.h gives, in the same order. The
 * vector paths also run the batch-norm kernels here for the channels their
 * width leaves over.
 */
#pragma GCC optimize("O3", "fp-contract=off")
#ifdef __clang__
#pragma clang fp contract(off)
#endif

#include "nn/cpu/fast_ops.h"

#include <math.h>
#include <string.h>

#define TILE_PX APF_FAST_TILE_PX

/* ---- the forward / input-gradient tile -------------------------------- */

/* Pixels i < np of a tile, 16 output channels from o0. */
static void tile(const float *const px[TILE_PX], float *const out[TILE_PX],
		 int np, const ptrdiff_t *toff, const float *const *tw,
		 int ntaps, int cin, int ldw, int o0, const float *bias,
		 int accum)
{
	float acc[TILE_PX][16];
	memset(acc, 0, sizeof acc);
	for (int t = 0; t < ntaps; t++) {
		const float *w = tw[t] + o0;
		for (int c = 0; c < cin; c++, w += ldw)
			for (int i = 0; i < np; i++) {
				float x = px[i][toff[t] + c];
				for (int k = 0; k < 16; k++)
					acc[i][k] = fmaf(x, w[k], acc[i][k]);
			}
	}
	for (int i = 0; i < np; i++) {
		float *d = out[i] + o0;
		for (int k = 0; k < 16; k++) {
			float v = acc[i][k];
			if (accum)
				v = d[k] + v;
			else if (bias)
				v = bias[o0 + k] + v;
			d[k] = v;
		}
	}
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
		for (int o0 = 0; o0 < cout; o0 += 16)
			tile(px, out, np, toff, tw, ntaps, cin, ldw, o0, bias,
			     accum);
	}
}

/* ---- the direct weight gradient --------------------------------------- */

/* Where the input's channels do not fill 8 lanes (fast.h): each
 * element (o, kh, kw, c) of one kernel row on its own, its sum over the
 * chunk's pixels in order. */
static void dweight_row_each(float *part, const float *dy, const float *x,
			     int kh, const struct apf_fast_dw *d)
{
	int K = d->K, C = d->C, OC = d->OC, S = d->S, OW = d->OW;
	size_t dw_ld = (size_t)K * K * C;
	for (int o = 0; o < OC; o++)
		for (int kw = 0; kw < K; kw++)
			for (int c = 0; c < C; c++) {
				float *dst = part + (size_t)o * dw_ld +
					     (size_t)(kh * K + kw) * C + c;
				float acc = *dst;
				for (int b = 0; b < d->nb; b++)
					for (int oh = 0; oh < d->OH; oh++) {
						const float *dd = dy + ((size_t)b * d->OH + oh) * OW * OC + o;
						const float *xr = x + (size_t)b * d->in_img +
								  (size_t)oh * S * d->Wp * C +
								  (size_t)kw * C + c;
						for (int ow = 0; ow < OW; ow++, dd += OC,
							 xr += (ptrdiff_t)S * C)
							acc = fmaf(*dd, *xr, acc);
					}
				*dst = acc;
			}
}

/* For each 4 output channels and 8 channels of one tap (kh, kw): the
 * element's sum over the chunk's pixels in order. */
static void dweight_row(float *part, const float *dy, const float *x, int kh,
			const struct apf_fast_dw *d)
{
	int K = d->K, C = d->C, OC = d->OC, S = d->S, OW = d->OW;
	size_t dw_ld = (size_t)K * K * C;
	if (C % 8) {
		dweight_row_each(part, dy, x, kh, d);
		return;
	}
	for (int o0 = 0; o0 < OC; o0 += 4)
		for (int kw = 0; kw < K; kw++)
			for (int c0 = 0; c0 < C; c0 += 8) {
				float acc[4][8];
				float *dst = part + (size_t)o0 * dw_ld +
					     (size_t)(kh * K + kw) * C + c0;
				for (int r = 0; r < 4; r++)
					memcpy(acc[r], dst + r * dw_ld, sizeof acc[r]);
				for (int b = 0; b < d->nb; b++)
					for (int oh = 0; oh < d->OH; oh++) {
						const float *dd = dy + ((size_t)b * d->OH + oh) * OW * OC + o0;
						const float *xr = x + (size_t)b * d->in_img +
								  (size_t)oh * S * d->Wp * C +
								  (size_t)kw * C + c0;
						for (int ow = 0; ow < OW; ow++, dd += OC,
							 xr += (ptrdiff_t)S * C)
							for (int r = 0; r < 4; r++)
								for (int l = 0; l < 8; l++)
									acc[r][l] = fmaf(dd[r], xr[l], acc[r][l]);
					}
				for (int r = 0; r < 4; r++)
					memcpy(dst + r * dw_ld, acc[r], sizeof acc[r]);
			}
}

/* ---- Winograd ------------------------------------------------------------ */

static void wino_in(float *V, size_t vs, const float *d, size_t row, int cin)
{
	for (int c = 0; c < cin; c++) {
		float x[4][4], t[4][4];
		for (int i = 0; i < 4; i++)
			for (int k = 0; k < 4; k++)
				x[i][k] = d[i * row + (size_t)k * cin + c];
		for (int k = 0; k < 4; k++) {
			t[0][k] = x[0][k] - x[2][k];
			t[1][k] = x[1][k] + x[2][k];
			t[2][k] = x[2][k] - x[1][k];
			t[3][k] = x[1][k] - x[3][k];
		}
		for (int i = 0; i < 4; i++) {
			float *v = V + (size_t)(4 * i) * vs + c;
			v[0] = t[i][0] - t[i][2];
			v[vs] = t[i][1] + t[i][2];
			v[2 * vs] = t[i][2] - t[i][1];
			v[3 * vs] = t[i][1] - t[i][3];
		}
	}
}

static void wino_out(float *y, size_t yrow, int nh, int nw, const float *M,
		     size_t ms, int cout, const float *bias, int accum)
{
	for (int o = 0; o < cout; o++) {
		float m[4][4], s0[4], s1[4], r[2][2];
		for (int i = 0; i < 4; i++)
			for (int k = 0; k < 4; k++)
				m[i][k] = M[(size_t)(4 * i + k) * ms + o];
		for (int k = 0; k < 4; k++) {
			s0[k] = (m[0][k] + m[1][k]) + m[2][k];
			s1[k] = (m[1][k] - m[2][k]) - m[3][k];
		}
		r[0][0] = (s0[0] + s0[1]) + s0[2];
		r[0][1] = (s0[1] - s0[2]) - s0[3];
		r[1][0] = (s1[0] + s1[1]) + s1[2];
		r[1][1] = (s1[1] - s1[2]) - s1[3];
		for (int i = 0; i < nh; i++)
			for (int k = 0; k < nw; k++) {
				float *p = y + i * yrow + (size_t)k * cout + o;
				float v = r[i][k];
				if (accum)
					v = *p + v;
				else if (bias)
					v = bias[o] + v;
				*p = v;
			}
	}
}

static void wino_dy(float *Z, size_t zs, const float *y, size_t yrow, int nh,
		    int nw, int OC)
{
	for (int o = 0; o < OC; o++) {
		float v[2][2], a[4][2];
		for (int i = 0; i < 2; i++)
			for (int k = 0; k < 2; k++)
				v[i][k] = i < nh && k < nw
					? y[i * yrow + (size_t)k * OC + o] : 0.0f;
		for (int k = 0; k < 2; k++) {
			a[0][k] = v[0][k];
			a[1][k] = v[0][k] + v[1][k];
			a[2][k] = v[0][k] - v[1][k];
			a[3][k] = 0.0f - v[1][k]; /* not -v: 0 - 0 is +0 */
		}
		for (int i = 0; i < 4; i++) {
			float *z = Z + (size_t)(4 * i) * zs + o;
			z[0] = a[i][0];
			z[zs] = a[i][0] + a[i][1];
			z[2 * zs] = a[i][0] - a[i][1];
			z[3 * zs] = 0.0f - a[i][1];
		}
	}
}

static void wino_reduce(float *du, const float *z, const float *v, int OC,
			int C, int n)
{
	for (int o = 0; o < OC; o++)
		for (int c0 = 0; c0 < C; c0 += 16) {
			int nc = C - c0 < 16 ? C - c0 : 16;
			float acc[16];
			float *d = du + (size_t)o * C + c0;
			memcpy(acc, d, (size_t)nc * sizeof *acc);
			for (int s = 0; s < n; s++) {
				float e = z[(size_t)s * OC + o];
				const float *vs = v + (size_t)s * C + c0;
				for (int k = 0; k < nc; k++)
					acc[k] = fmaf(e, vs[k], acc[k]);
			}
			memcpy(d, acc, (size_t)nc * sizeof *acc);
		}
}

/* ---- batch norm ----------------------------------------------------------- */

static void bn_stats(const struct apf_bn_job *j, int r0, int r1, int c0,
		     double *s, double *q)
{
	int C = j->C;
	for (int c = c0; c < C; c++) {
		float fs = 0, fq = 0;
		for (int r = r0; r < r1; r++) {
			float x = j->inp[(size_t)r * C + c] - j->shift[c];
			fs = fs + x;
			fq = fmaf(x, x, fq);
		}
		s[c] += fs;
		q[c] += fq;
	}
}

static void bn_apply(const struct apf_bn_job *j, int r0, int r1, int c0)
{
	int C = j->C;
	for (int r = r0; r < r1; r++) {
		const float *x = j->inp + (size_t)r * C;
		const float *res = j->res ? j->res + (size_t)r * C : NULL;
		float *y = j->y + (size_t)r * C;
		for (int c = c0; c < C; c++) {
			float v = fmaf(x[c] - j->mean[c], j->a[c], j->b[c]);
			if (res)
				v = v + res[c];
			/* as max(v, 0) in a vector: 0 for NaN and -0 too */
			y[c] = !j->relu || v > 0.0f ? v : 0.0f;
		}
	}
}

static inline float bn_grad1(const struct apf_bn_job *j, size_t o)
{
	return !j->relu || j->out[o] > 0.0f ? j->dout[o] : 0.0f;
}

static void bn_dsums(const struct apf_bn_job *j, int r0, int r1, int c0,
		     double *s, double *q)
{
	int C = j->C;
	for (int c = c0; c < C; c++) {
		float fs = 0, fq = 0;
		for (int r = r0; r < r1; r++) {
			size_t o = (size_t)r * C + c;
			float g = bn_grad1(j, o);
			fs = fs + g;
			fq = fmaf(g, j->inp[o] - j->mean[c], fq);
		}
		s[c] += fs;
		q[c] += fq;
	}
}

static void bn_dx(const struct apf_bn_job *j, int r0, int r1, int c0)
{
	int C = j->C;
	for (int r = r0; r < r1; r++) {
		size_t o = (size_t)r * C;
		for (int c = c0; c < C; c++) {
			float g = bn_grad1(j, o + c);
			if (j->dres)
				j->dres[o + c] = j->accum_res ? j->dres[o + c] + g : g;
			if (!j->dinp)
				continue;
			float u = g - j->k1[c];
			u = fmaf(-(j->inp[o + c] - j->mean[c]), j->k2[c], u);
			float dx = j->k0[c] * u;
			j->dinp[o + c] = j->accum_inp ? j->dinp[o + c] + dx : dx;
		}
	}
}

const struct apf_fast_ops apf_fast_scalar_ops = {
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
};
