/*
 * fast.c: the CPU backend's AVX2/FMA kernels (see fast.h): direct NHWC
 * convolutions for small channel counts and batch norm fused with ReLU.
 *
 * Why not im2col + sgemm for these layers: with 16 to 64 channels the GEMMs
 * are skinny (N = 16..64, K = 9 C), OpenBLAS spends much of its time packing,
 * and im2col writes nine copies of the input. Here a zero-padded copy of a
 * few images (one copy, cache-resident) feeds a 6 x 16 register tile.
 *
 * Invariants: every function is one thread's share (t of nt) of a layer;
 * shares are whole images (convolutions) or whole rows (batch norm) from a
 * static split; every accumulation runs in a fixed order. Only unaligned
 * vector loads and stores are used, and no load reads outside the buffers.
 */
#pragma GCC optimize("O3")

#include "nn/cpu/fast.h"

#include <immintrin.h>
#include <math.h>
#include <string.h>

#define TGT __attribute__((target("avx2,fma")))

int apf_cpu_fast_supported(void)
{
	__builtin_cpu_init();
	return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}

/* Thread t's share [*b, *e) of n items. */
static void share(int n, int t, int nt, int *b, int *e)
{
	int per = n / nt, extra = n % nt;
	*b = t * per + (t < extra ? t : extra);
	*e = *b + per + (t < extra ? 1 : 0);
}

/* ---- direct convolution ---------------------------------------------------- */

/* A padded chunk aims at this many floats: a few images, so the weight
 * gradient's repeated passes over it hit L2. */
#define CHUNK_FLOATS ((size_t)48 * 1024)
#define TILE_PX 6 /* pixels per register tile */
#define MAX_TAPS 64

int apf_cpu_conv_fast_forward_ok(int C, int OC, int K)
{
	return C >= 1 && OC % 16 == 0 && K * K <= MAX_TAPS;
}

int apf_cpu_conv_fast_dinp_ok(int C, int OC, int K)
{
	return OC >= 1 && C % 16 == 0 && K * K <= MAX_TAPS;
}

int apf_cpu_conv_fast_dweight_ok(int C, int OC, int K)
{
	return C % 8 == 0 && OC % 4 == 0 && K >= 1;
}

/* Geometry shared by the sizing and the kernels. A thread's work is
 * [padded chunk][weight-gradient partial][Winograd tiles V][M][dU], after
 * the shared transformed weights. */
struct geo {
	int Hp, Wp;     /* input padded by P on every side */
	int QL, Hq, Wq; /* output gradient padded for the input gradient */
	size_t in_img, dy_img; /* floats of one padded image of each */
	int nb_in, nb_dy;      /* images per chunk */
	int wino;              /* the Winograd path takes this shape */
	int TH, TW, Hw, Ww;    /* Winograd: 2x2 tiles per image, padded dims */
	size_t w_img;          /* floats of one padded image, either side */
	int nb_w, TG;          /* images per chunk, tiles per group */
	size_t pad_floats, part_floats, v_floats, du_floats;
	size_t thread_floats, wt_floats;
};

/* Winograd tiles of one group (V and M) aim at this many floats. */
#define WINO_FLOATS ((size_t)24 * 1024)

int apf_cpu_conv_wino_ok(int C, int OC, int K, int S, int P)
{
	return K == 3 && S == 1 && P == 1 && C % 16 == 0 && OC % 16 == 0;
}

static int chunk_images(size_t per_img, int share_max)
{
	size_t nb = CHUNK_FLOATS / (per_img ? per_img : 1);
	if (nb < 1)
		nb = 1;
	return nb > (size_t)share_max ? share_max : (int)nb;
}

static size_t round16(size_t n)
{
	return (n + 15) / 16 * 16;
}

static void geometry(struct geo *g, int B, int H, int W, int C, int OC, int K,
		     int S, int P, int nt)
{
	int OH = (H + 2 * P - K) / S + 1, OW = (W + 2 * P - K) / S + 1;
	int share_max = (B + nt - 1) / nt;
	if (share_max < 1)
		share_max = 1;
	g->Hp = H + 2 * P, g->Wp = W + 2 * P;
	/* Rows of the output gradient an input row reaches run from
	 * -(QL) to (H-1+P)/S; pad so both ends exist. */
	g->QL = (K - 1 - P + S - 1) / S;
	int QRh = (H - 1 + P) / S - (OH - 1), QRw = (W - 1 + P) / S - (OW - 1);
	g->Hq = g->QL + OH + (QRh > 0 ? QRh : 0);
	g->Wq = g->QL + OW + (QRw > 0 ? QRw : 0);
	g->in_img = (size_t)g->Hp * g->Wp * C;
	g->dy_img = (size_t)g->Hq * g->Wq * OC;
	g->nb_in = chunk_images(g->in_img, share_max);
	g->nb_dy = chunk_images(g->dy_img, share_max);
	size_t a = g->nb_in * g->in_img, b = g->nb_dy * g->dy_img;
	g->pad_floats = a > b ? a : b;
	g->part_floats = round16((size_t)OC * K * K * C);
	g->wt_floats = round16((size_t)K * K * C * OC);
	g->wino = apf_cpu_conv_wino_ok(C, OC, K, S, P);
	g->v_floats = g->du_floats = 0;
	if (g->wino) {
		/* output H x W in 2x2 tiles from 4x4 input tiles: one row and
		 * column of zeros before, enough after to finish the last */
		int CM = C > OC ? C : OC;
		g->TH = (H + 1) / 2, g->TW = (W + 1) / 2;
		g->Hw = 2 * g->TH + 2, g->Ww = 2 * g->TW + 2;
		g->w_img = (size_t)g->Hw * g->Ww * CM;
		g->nb_w = chunk_images(g->w_img, share_max);
		size_t w = g->nb_w * g->w_img;
		g->pad_floats = g->pad_floats > w ? g->pad_floats : w;
		size_t tg = WINO_FLOATS / (16 * (size_t)(C + OC)) / 6 * 6;
		g->TG = tg < 6 ? 6 : (int)tg;
		g->v_floats = round16(16 * (size_t)g->TG * CM);
		g->du_floats = round16(16 * (size_t)C * OC);
		size_t u = round16(16 * (size_t)C * OC);
		g->wt_floats = g->wt_floats > u ? g->wt_floats : u;
	}
	g->pad_floats = round16(g->pad_floats);
	g->thread_floats = g->pad_floats + g->part_floats + 2 * g->v_floats +
			   g->du_floats;
}

size_t apf_cpu_conv_fast_work(int B, int H, int W, int C, int OC, int K,
			      int S, int P, int nt)
{
	struct geo g;
	geometry(&g, B, H, W, C, OC, K, S, P, nt);
	return g.wt_floats + (size_t)nt * g.thread_floats;
}

static void job_geometry(const struct apf_conv_job *j, struct geo *g, int nt)
{
	geometry(g, j->B, j->H, j->W, j->C, j->OC, j->K, j->S, j->P, nt);
}

static float *thread_pad(const struct apf_conv_job *j, const struct geo *g,
			 int t)
{
	return j->work + g->wt_floats + (size_t)t * g->thread_floats;
}

float *apf_cpu_conv_fast_dweight_part(const struct apf_conv_job *j, int t,
				      int nt)
{
	struct geo g;
	job_geometry(j, &g, nt);
	return thread_pad(j, &g, t) + g.pad_floats;
}

static void wino_weights(float *U, const float *weight, int C, int OC,
			 int flip);
static void wino_conv(const struct geo *g, const float *in, float *out,
		      const float *U, int H, int W, int cin, int cout, int b0,
		      int b1, float *pad, float *V, float *M, const float *bias,
		      int accum);
static void wino_dweight(struct apf_conv_job *j, const struct geo *g, int t,
			 int nt);
static float *thread_v(const struct apf_conv_job *j, const struct geo *g,
		       int t);

void apf_cpu_conv_fast_prepare_backward(struct apf_conv_job *j)
{
	j->wt = j->work;
	if (j->dinp && apf_cpu_conv_wino_ok(j->C, j->OC, j->K, j->S, j->P))
		wino_weights(j->wt, j->weight, j->C, j->OC, 1);
}

void apf_cpu_conv_fast_prepare(struct apf_conv_job *j)
{
	j->wt = j->work;
	if (apf_cpu_conv_wino_ok(j->C, j->OC, j->K, j->S, j->P)) {
		wino_weights(j->wt, j->weight, j->C, j->OC, 0);
		return;
	}
	/* wt[kh][kw][c][o] = weight[o][kh][kw][c]: the forward tile loads 16
	 * output channels of one input channel as two vectors */
	int KK = j->K * j->K, C = j->C, OC = j->OC;
	for (int o = 0; o < OC; o++)
		for (int k = 0; k < KK; k++)
			for (int c = 0; c < C; c++)
				j->wt[((size_t)k * C + c) * OC + o] =
					j->weight[((size_t)o * KK + k) * C + c];
}

/* dst (nb, h+lo+hi, w+lo+hi, ch) = src (nb, h, w, ch) with zero borders of
 * lo rows/columns before and hi after (hi_h rows, hi_w columns). */
static void pad_images(float *dst, const float *src, int nb, int h, int w,
		       int ch, int lo, int hi_h, int hi_w)
{
	int hp = h + lo + hi_h, wp = w + lo + hi_w;
	size_t rowp = (size_t)wp * ch, row = (size_t)w * ch;
	for (int b = 0; b < nb; b++)
		for (int r = 0; r < hp; r++) {
			float *d = dst + ((size_t)b * hp + r) * rowp;
			int sr = r - lo;
			if (sr < 0 || sr >= h) {
				memset(d, 0, rowp * sizeof *d);
				continue;
			}
			memset(d, 0, (size_t)lo * ch * sizeof *d);
			memcpy(d + (size_t)lo * ch,
			       src + ((size_t)b * h + sr) * row,
			       row * sizeof *d);
			memset(d + (size_t)lo * ch + row, 0,
			       (size_t)hi_w * ch * sizeof *d);
		}
}

/* The register tile: for pixels i < np, out[i][0..15] (=, or += when
 * accum) sum over taps t and channels c < cin of
 * px[i][toff[t] + c] * tw[t][c * ldw + 0..15], plus bias[0..15] if given.
 * Pixels np..5 repeat pixel 0 and are not stored. With stats, the stored
 * values' sums go to stats[0..15], their squares' to stats[nstat..]. */
TGT static void tile_6x16(const float *const px[TILE_PX],
			  float *const out[TILE_PX], int np,
			  const ptrdiff_t *toff, const float *const *tw,
			  int ntaps, int cin, int ldw, const float *bias,
			  int accum, double *stats, int nstat)
{
	__m256 a0 = _mm256_setzero_ps(), b0 = a0, a1 = a0, b1 = a0;
	__m256 a2 = a0, b2 = a0, a3 = a0, b3 = a0, a4 = a0, b4 = a0;
	__m256 a5 = a0, b5 = a0;
	for (int t = 0; t < ntaps; t++) {
		const float *w = tw[t];
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
		blo = _mm256_loadu_ps(bias);
		bhi = _mm256_loadu_ps(bias + 8);
	}
	for (int i = 0; i < np; i++) {
		float *d = out[i];
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
	if (!stats)
		return;
	/* batch-norm statistics of the stored values: float partials over
	 * the tile's pixels in order, added to the double sums
	 * (stats[0..15]) and sums of squares (stats[nstat..nstat+15]) */
	for (int half = 0; half < 2; half++) {
		__m256 s = _mm256_setzero_ps(), q = s;
		for (int i = 0; i < np; i++) {
			__m256 v = _mm256_loadu_ps(out[i] + 8 * half);
			s = _mm256_add_ps(s, v);
			q = _mm256_fmadd_ps(v, v, q);
		}
		double *ds = stats + 8 * half, *dq = ds + nstat;
		__m256d s0 = _mm256_cvtps_pd(_mm256_castps256_ps128(s));
		__m256d s1 = _mm256_cvtps_pd(_mm256_extractf128_ps(s, 1));
		__m256d q0 = _mm256_cvtps_pd(_mm256_castps256_ps128(q));
		__m256d q1 = _mm256_cvtps_pd(_mm256_extractf128_ps(q, 1));
		_mm256_storeu_pd(ds, _mm256_add_pd(_mm256_loadu_pd(ds), s0));
		_mm256_storeu_pd(ds + 4,
				 _mm256_add_pd(_mm256_loadu_pd(ds + 4), s1));
		_mm256_storeu_pd(dq, _mm256_add_pd(_mm256_loadu_pd(dq), q0));
		_mm256_storeu_pd(dq + 4,
				 _mm256_add_pd(_mm256_loadu_pd(dq + 4), q1));
	}
}

/* Output pixels (img, row, col) of a chunk, in that order, with the strides
 * that place each pixel's input base and output. */
struct grid {
	const float *in;   /* padded chunk */
	ptrdiff_t in_img, in_row, in_col; /* input strides of img, row, col */
	float *out;
	ptrdiff_t out_img, out_row, out_col;
	int rows, cols, nimg;
};

TGT static void run_tiles(const struct grid *g, const ptrdiff_t *toff,
			  const float *const *tw, int ntaps, int cin, int ldw,
			  int cout, const float *bias, int accum,
			  double *stats)
{
	int n = g->nimg * g->rows * g->cols;
	const float *twc[MAX_TAPS];
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
		for (int o0 = 0; o0 < cout; o0 += 16) {
			float *oo[TILE_PX];
			for (int i = 0; i < TILE_PX; i++)
				oo[i] = out[i] + o0;
			for (int t = 0; t < ntaps; t++)
				twc[t] = tw[t] + o0;
			tile_6x16(px, oo, np, toff, twc, ntaps, cin, ldw,
				  bias ? bias + o0 : NULL, accum,
				  stats ? stats + o0 : NULL, cout);
		}
	}
}

void apf_cpu_conv_fast_forward(struct apf_conv_job *j, int t, int nt)
{
	struct geo g;
	job_geometry(j, &g, nt);
	int b0, b1;
	share(j->B, t, nt, &b0, &b1);
	int K = j->K, C = j->C, OC = j->OC;
	float *pad = thread_pad(j, &g, t);
	if (g.wino) {
		float *V = thread_v(j, &g, t);
		wino_conv(&g, j->inp, j->out, j->wt, j->H, j->W, C, OC, b0, b1,
			  pad, V, V + g.v_floats, j->bias, 0);
		return;
	}
	ptrdiff_t toff[MAX_TAPS];
	const float *tw[MAX_TAPS];
	for (int kh = 0; kh < K; kh++)
		for (int kw = 0; kw < K; kw++) {
			toff[kh * K + kw] = ((ptrdiff_t)kh * g.Wp + kw) * C;
			tw[kh * K + kw] = j->wt + (size_t)(kh * K + kw) * C * OC;
		}
	double *stats = j->stats ? j->stats + (size_t)t * 2 * OC : NULL;
	if (stats)
		memset(stats, 0, 2 * (size_t)OC * sizeof *stats);
	for (int b = b0; b < b1; b += g.nb_in) {
		int nb = b1 - b < g.nb_in ? b1 - b : g.nb_in;
		pad_images(pad, j->inp + (size_t)b * j->H * j->W * C, nb, j->H,
			   j->W, C, j->P, j->P, j->P);
		struct grid gr = {
			.in = pad, .in_img = (ptrdiff_t)g.in_img,
			.in_row = (ptrdiff_t)j->S * g.Wp * C,
			.in_col = (ptrdiff_t)j->S * C,
			.out = j->out + (size_t)b * j->OH * j->OW * OC,
			.out_img = (ptrdiff_t)j->OH * j->OW * OC,
			.out_row = (ptrdiff_t)j->OW * OC, .out_col = OC,
			.rows = j->OH, .cols = j->OW, .nimg = nb};
		run_tiles(&gr, toff, tw, K * K, C, OC, OC, j->bias, 0, stats);
	}
}

void apf_cpu_conv_fast_dinp(struct apf_conv_job *j, int t, int nt)
{
	struct geo g;
	job_geometry(j, &g, nt);
	int b0, b1;
	share(j->B, t, nt, &b0, &b1);
	int K = j->K, S = j->S, P = j->P, C = j->C, OC = j->OC;
	float *pad = thread_pad(j, &g, t);
	if (g.wino) {
		float *V = thread_v(j, &g, t);
		wino_conv(&g, j->dout, j->dinp, j->wt, j->H, j->W, OC, C, b0,
			  b1, pad, V, V + g.v_floats, NULL, j->accum);
		return;
	}
	for (int b = b0; b < b1; b += g.nb_dy) {
		int nb = b1 - b < g.nb_dy ? b1 - b : g.nb_dy;
		pad_images(pad, j->dout + (size_t)b * j->OH * j->OW * OC, nb,
			   j->OH, j->OW, OC, g.QL, g.Hq - g.QL - j->OH,
			   g.Wq - g.QL - j->OW);
		float *dx = j->dinp + (size_t)b * j->H * j->W * C;
		/* input pixels (rh + S m, rw + S n) see the same taps:
		 * kh with (rh + P - kh) divisible by S, output row
		 * m + (rh + P - kh) / S */
		for (int rh = 0; rh < S && rh < j->H; rh++)
			for (int rw = 0; rw < S && rw < j->W; rw++) {
				ptrdiff_t toff[MAX_TAPS];
				const float *tw[MAX_TAPS];
				int ntaps = 0;
				for (int kh = 0; kh < K; kh++) {
					int vh = rh + P - kh;
					if (((vh % S) + S) % S)
						continue;
					for (int kw = 0; kw < K; kw++) {
						int vw = rw + P - kw;
						if (((vw % S) + S) % S)
							continue;
						toff[ntaps] = ((ptrdiff_t)(vh / S) * g.Wq + vw / S) * OC;
						tw[ntaps] = j->weight + (size_t)(kh * K + kw) * C;
						ntaps++;
					}
				}
				struct grid gr = {
					.in = pad + ((size_t)g.QL * g.Wq + g.QL) * OC,
					.in_img = (ptrdiff_t)g.dy_img,
					.in_row = (ptrdiff_t)g.Wq * OC,
					.in_col = OC,
					.out = dx + ((size_t)rh * j->W + rw) * C,
					.out_img = (ptrdiff_t)j->H * j->W * C,
					.out_row = (ptrdiff_t)S * j->W * C,
					.out_col = (ptrdiff_t)S * C,
					.rows = (j->H - rh + S - 1) / S,
					.cols = (j->W - rw + S - 1) / S,
					.nimg = nb};
				if (ntaps == 0 && j->accum)
					continue;
				run_tiles(&gr, toff, tw, ntaps, OC, K * K * C,
					  C, NULL, j->accum, NULL);
			}
	}
}

/* Weight-gradient tile: acc[r][k] (output channel o0 + r, column k) +=
 * sum over the chunk's pixels of dy[pixel][o0 + r] * x[pixel][xoff[k] ..
 * + 8]; columns k >= ncol repeat column 0 and are not stored. */
TGT static void dweight_tile(float *part, const ptrdiff_t dwoff[3],
			     ptrdiff_t dw_ld, int ncol, const float *dy,
			     const float *x, const ptrdiff_t xoff[3],
			     const struct apf_conv_job *j, const struct geo *g,
			     int nb)
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
	int OC = j->OC, S = j->S, C = j->C, OW = j->OW;
	for (int b = 0; b < nb; b++)
		for (int oh = 0; oh < j->OH; oh++) {
			const float *d = dy + ((size_t)b * j->OH + oh) * OW * OC;
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

void apf_cpu_conv_fast_dweight(struct apf_conv_job *j, int t, int nt)
{
	struct geo g;
	job_geometry(j, &g, nt);
	if (g.wino) {
		wino_dweight(j, &g, t, nt);
		return;
	}
	int b0, b1;
	share(j->B, t, nt, &b0, &b1);
	int K = j->K, C = j->C, OC = j->OC;
	float *pad = thread_pad(j, &g, t);
	float *part = pad + g.pad_floats;
	ptrdiff_t dw_ld = (ptrdiff_t)K * K * C;
	memset(part, 0, (size_t)OC * dw_ld * sizeof *part);
	/* the columns of one kernel row: (kw, 8 channels), three at a time */
	int ncols = K * C / 8;
	for (int b = b0; b < b1; b += g.nb_in) {
		int nb = b1 - b < g.nb_in ? b1 - b : g.nb_in;
		pad_images(pad, j->inp + (size_t)b * j->H * j->W * C, nb, j->H,
			   j->W, C, j->P, j->P, j->P);
		const float *dy = j->dout + (size_t)b * j->OH * j->OW * OC;
		for (int kh = 0; kh < K; kh++)
			for (int o0 = 0; o0 < OC; o0 += 4)
				for (int c0 = 0; c0 < ncols; c0 += 3) {
					ptrdiff_t xoff[3], dwoff[3];
					int n = ncols - c0 < 3 ? ncols - c0 : 3;
					for (int k = 0; k < n; k++) {
						int col = c0 + k;
						int kw = col / (C / 8);
						int c = col % (C / 8) * 8;
						xoff[k] = (ptrdiff_t)kw * C + c;
						dwoff[k] = (ptrdiff_t)(kh * K + kw) * C + c;
					}
					dweight_tile(part + o0 * dw_ld, dwoff,
						     dw_ld, n, dy + o0,
						     pad + (size_t)kh * g.Wp * C,
						     xoff, j, &g, nb);
				}
	}
}

/* ---- Winograd F(2x2, 3x3) -----------------------------------------------------
 *
 * For 3x3 convolutions of stride 1 and padding 1 (Lavin and Gray, 2016): a
 * 2x2 output tile is A^T [(G g G^T) . (B^T d B)] A over its 4x4 input tile
 * d, 16 multiplies per channel pair instead of 36. Tiles go in groups of TG:
 * their inputs transformed into V (16 x TG x cin), 16 GEMMs (the 6x16
 * register tile) give M (16 x TG x cout), which is transformed out. The
 * input gradient is the same convolution of the output gradient with the
 * flipped, transposed kernel; the weight gradient sums (A dY A^T) . V over
 * tiles into dU (16 x OC x C) and maps that back with G^T dU G. The
 * transforms' coefficients are 0, +-1 and 1/2, so rounding stays close to
 * the direct sums' (the tests hold both to the plain path).
 */

/* U[xi][ci][co] = (G g G^T)[xi] of the 3x3 kernel g from input channel ci
 * to output channel co: forward (flip 0) ci = c, co = o, g = weight[o][.][.][c];
 * input gradient (flip 1) ci = o, co = c, g = weight[o] flipped. */
static void wino_weights(float *U, const float *weight, int C, int OC, int flip)
{
	int cin = flip ? OC : C, cout = flip ? C : OC;
	for (int o = 0; o < OC; o++)
		for (int c = 0; c < C; c++) {
			float g[3][3], t[4][3];
			for (int kh = 0; kh < 3; kh++)
				for (int kw = 0; kw < 3; kw++) {
					int h = flip ? 2 - kh : kh, w = flip ? 2 - kw : kw;
					g[kh][kw] = weight[((size_t)(o * 3 + h) * 3 + w) * C + c];
				}
			for (int k = 0; k < 3; k++) {
				t[0][k] = g[0][k];
				t[1][k] = 0.5f * (g[0][k] + g[1][k] + g[2][k]);
				t[2][k] = 0.5f * (g[0][k] - g[1][k] + g[2][k]);
				t[3][k] = g[2][k];
			}
			int ci = flip ? o : c, co = flip ? c : o;
			for (int i = 0; i < 4; i++) {
				float u[4] = {t[i][0],
					      0.5f * (t[i][0] + t[i][1] + t[i][2]),
					      0.5f * (t[i][0] - t[i][1] + t[i][2]),
					      t[i][2]};
				for (int k = 0; k < 4; k++)
					U[((size_t)(4 * i + k) * cin + ci) * cout + co] = u[k];
			}
		}
}

/* V[xi * vs + 0..cin) = (B^T d B)[xi] of the 4x4 input tile at d (rows
 * `row` floats apart, pixels cin apart), 8 channels at a time. */
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

/* The tile's outputs inside the image (nh x nw of its 2x2) at y (rows yrow
 * floats apart, pixels cout apart) = (A^T m A) of M[xi * ms + 0..cout). */
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

static float *thread_v(const struct apf_conv_job *j, const struct geo *g,
		       int t)
{
	return j->work + g->wt_floats + (size_t)t * g->thread_floats +
	       g->pad_floats + g->part_floats;
}

/* Images [b0, b1): out (H,W,cout) = or += the 3x3 stride-1 padding-1
 * convolution of in (H,W,cin) by the transformed kernel U. */
static void wino_conv(const struct geo *g, const float *in, float *out,
		      const float *U, int H, int W, int cin, int cout, int b0,
		      int b1, float *pad, float *V, float *M, const float *bias,
		      int accum)
{
	size_t vs = (size_t)g->TG * cin, ms = (size_t)g->TG * cout;
	size_t row = (size_t)g->Ww * cin, img = (size_t)g->Hw * row;
	int per_img = g->TH * g->TW;
	static const ptrdiff_t toff0[1] = {0};
	for (int b = b0; b < b1; b += g->nb_w) {
		int nb = b1 - b < g->nb_w ? b1 - b : g->nb_w;
		pad_images(pad, in + (size_t)b * H * W * cin, nb, H, W, cin, 1,
			   g->Hw - H - 1, g->Ww - W - 1);
		int n = nb * per_img;
		for (int q0 = 0; q0 < n; q0 += g->TG) {
			int nq = n - q0 < g->TG ? n - q0 : g->TG;
			for (int s = 0; s < nq; s++) {
				int q = q0 + s, im = q / per_img, r = q % per_img;
				int ty = r / g->TW, tx = r % g->TW;
				wino_in(V + (size_t)s * cin, vs,
					pad + im * img + 2 * ty * row + (size_t)2 * tx * cin,
					row, cin);
			}
			for (int xi = 0; xi < 16; xi++) {
				struct grid gr = {
					.in = V + xi * vs, .in_col = cin,
					.out = M + xi * ms, .out_col = cout,
					.rows = 1, .cols = nq, .nimg = 1};
				const float *u = U + (size_t)xi * cin * cout;
				run_tiles(&gr, toff0, &u, 1, cin, cout, cout,
					  NULL, 0, NULL);
			}
			for (int s = 0; s < nq; s++) {
				int q = q0 + s, im = q / per_img, r = q % per_img;
				int ty = r / g->TW, tx = r % g->TW;
				int nh = H - 2 * ty < 2 ? H - 2 * ty : 2;
				int nw = W - 2 * tx < 2 ? W - 2 * tx : 2;
				float *y = out + (((size_t)(b + im) * H + 2 * ty) * W + 2 * tx) * cout;
				wino_out(y, (size_t)W * cout, nh, nw,
					 M + (size_t)s * cout, ms, cout, bias,
					 accum);
			}
		}
	}
}

/* Z[xi * zs + 0..OC) = (A y A^T)[xi] of the 2x2 output-gradient tile at y
 * (nh x nw of it inside the image; the rest counts as 0). */
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

/* Thread t's weight gradient by Winograd, into its partial (OC,3,3,C). */
static void wino_dweight(struct apf_conv_job *j, const struct geo *g, int t,
			 int nt)
{
	int b0, b1, H = j->H, W = j->W, C = j->C, OC = j->OC;
	share(j->B, t, nt, &b0, &b1);
	float *pad = thread_pad(j, g, t), *part = pad + g->pad_floats;
	float *V = thread_v(j, g, t), *Z = V + g->v_floats;
	float *dU = Z + g->v_floats;
	memset(dU, 0, 16 * (size_t)OC * C * sizeof *dU);
	size_t vs = (size_t)g->TG * C, zs = (size_t)g->TG * OC;
	size_t row = (size_t)g->Ww * C, img = (size_t)g->Hw * row;
	int per_img = g->TH * g->TW;
	for (int b = b0; b < b1; b += g->nb_w) {
		int nb = b1 - b < g->nb_w ? b1 - b : g->nb_w;
		pad_images(pad, j->inp + (size_t)b * H * W * C, nb, H, W, C, 1,
			   g->Hw - H - 1, g->Ww - W - 1);
		int n = nb * per_img;
		for (int q0 = 0; q0 < n; q0 += g->TG) {
			int nq = n - q0 < g->TG ? n - q0 : g->TG;
			for (int s = 0; s < nq; s++) {
				int q = q0 + s, im = q / per_img, r = q % per_img;
				int ty = r / g->TW, tx = r % g->TW;
				wino_in(V + (size_t)s * C, vs,
					pad + im * img + 2 * ty * row + (size_t)2 * tx * C,
					row, C);
				int nh = H - 2 * ty < 2 ? H - 2 * ty : 2;
				int nw = W - 2 * tx < 2 ? W - 2 * tx : 2;
				const float *y = j->dout + (((size_t)(b + im) * H + 2 * ty) * W + 2 * tx) * OC;
				wino_dy(Z + (size_t)s * OC, zs, y, (size_t)W * OC,
					nh, nw, OC);
			}
			for (int xi = 0; xi < 16; xi++)
				for (int o0 = 0; o0 < OC; o0 += 6)
					for (int c0 = 0; c0 < C; c0 += 16)
						reduce_6x16(dU + ((size_t)xi * OC + o0) * C + c0,
							    C, OC - o0 < 6 ? OC - o0 : 6,
							    Z + xi * zs + o0, OC,
							    V + xi * vs + c0, C, nq);
		}
	}
	/* part[o][kh][kw][c] = (G^T dU G)[kh][kw] */
	for (int o = 0; o < OC; o++)
		for (int c = 0; c < C; c++) {
			float u[4][4], t3[3][4];
			for (int xi = 0; xi < 16; xi++)
				u[xi / 4][xi % 4] = dU[((size_t)xi * OC + o) * C + c];
			for (int k = 0; k < 4; k++) {
				t3[0][k] = u[0][k] + 0.5f * (u[1][k] + u[2][k]);
				t3[1][k] = 0.5f * (u[1][k] - u[2][k]);
				t3[2][k] = 0.5f * (u[1][k] + u[2][k]) + u[3][k];
			}
			for (int kh = 0; kh < 3; kh++) {
				float *d = part + ((size_t)o * 9 + kh * 3) * C + c;
				d[0] = t3[kh][0] + 0.5f * (t3[kh][1] + t3[kh][2]);
				d[C] = 0.5f * (t3[kh][1] - t3[kh][2]);
				d[2 * C] = 0.5f * (t3[kh][1] + t3[kh][2]) + t3[kh][3];
			}
		}
}

/* ---- batch norm + ReLU ------------------------------------------------------
 *
 * Rows are read in blocks of BN_ROWS (a block of a few KiB stays in L1
 * while every 8-channel group sums over it); per block and group the sums
 * run in float over the rows in order and are then added into the double
 * per-thread partials. Statistics sum x - shift, shift a sample of each
 * channel (the first row), so E[x^2] - E[x]^2 cancels nothing when the mean
 * is large against the spread. Channels past the last multiple of 8 take a
 * scalar loop of the same order.
 */
#define BN_ROWS 16

static void bn_rows(const struct apf_bn_job *j, int t, int nt, int *r0, int *r1)
{
	share(j->N, t, nt, r0, r1);
}

static void add_float8(double *d, __m256 v) TGT;
static void add_float8(double *d, __m256 v)
{
	__m256d lo = _mm256_cvtps_pd(_mm256_castps256_ps128(v));
	__m256d hi = _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1));
	_mm256_storeu_pd(d, _mm256_add_pd(_mm256_loadu_pd(d), lo));
	_mm256_storeu_pd(d + 4, _mm256_add_pd(_mm256_loadu_pd(d + 4), hi));
}

TGT void apf_cpu_bn_fast_stats(struct apf_bn_job *j, int t, int nt)
{
	int r0, r1, C = j->C, C8 = C / 8 * 8;
	bn_rows(j, t, nt, &r0, &r1);
	double *s = j->part + (size_t)t * 2 * C, *q = s + C;
	memset(s, 0, 2 * (size_t)C * sizeof *s);
	for (int rb = r0; rb < r1; rb += BN_ROWS) {
		int re = r1 - rb < BN_ROWS ? r1 : rb + BN_ROWS;
		for (int c = 0; c < C8; c += 8) {
			__m256 sh = _mm256_loadu_ps(j->shift + c);
			__m256 fs = _mm256_setzero_ps(), fq = fs;
			for (int r = rb; r < re; r++) {
				__m256 x = _mm256_sub_ps(
					_mm256_loadu_ps(j->inp + (size_t)r * C + c), sh);
				fs = _mm256_add_ps(fs, x);
				fq = _mm256_fmadd_ps(x, x, fq);
			}
			add_float8(s + c, fs);
			add_float8(q + c, fq);
		}
		for (int c = C8; c < C; c++) {
			float fs = 0, fq = 0;
			for (int r = rb; r < re; r++) {
				float x = j->inp[(size_t)r * C + c] - j->shift[c];
				fs += x;
				fq = fmaf(x, x, fq);
			}
			s[c] += fs;
			q[c] += fq;
		}
	}
}

TGT void apf_cpu_bn_fast_apply(struct apf_bn_job *j, int t, int nt)
{
	int r0, r1, C = j->C, C8 = C / 8 * 8;
	bn_rows(j, t, nt, &r0, &r1);
	__m256 zero = _mm256_setzero_ps();
	for (int r = r0; r < r1; r++) {
		const float *x = j->inp + (size_t)r * C;
		const float *res = j->res ? j->res + (size_t)r * C : NULL;
		float *y = j->y + (size_t)r * C;
		for (int c = 0; c < C8; c += 8) {
			__m256 xc = _mm256_sub_ps(_mm256_loadu_ps(x + c),
						  _mm256_loadu_ps(j->mean + c));
			__m256 v = _mm256_fmadd_ps(xc, _mm256_loadu_ps(j->a + c),
						   _mm256_loadu_ps(j->b + c));
			if (res)
				v = _mm256_add_ps(v, _mm256_loadu_ps(res + c));
			_mm256_storeu_ps(y + c, j->relu ? _mm256_max_ps(v, zero) : v);
		}
		for (int c = C8; c < C; c++) {
			float v = fmaf(x[c] - j->mean[c], j->a[c], j->b[c]);
			if (res)
				v += res[c];
			y[c] = !j->relu || v > 0.0f ? v : 0.0f;
		}
	}
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

static inline float bn_grad1(const struct apf_bn_job *j, size_t o)
{
	return !j->relu || j->out[o] > 0.0f ? j->dout[o] : 0.0f;
}

TGT void apf_cpu_bn_fast_dsums(struct apf_bn_job *j, int t, int nt)
{
	int r0, r1, C = j->C, C8 = C / 8 * 8;
	bn_rows(j, t, nt, &r0, &r1);
	double *s = j->part + (size_t)t * 2 * C, *q = s + C;
	memset(s, 0, 2 * (size_t)C * sizeof *s);
	for (int rb = r0; rb < r1; rb += BN_ROWS) {
		int re = r1 - rb < BN_ROWS ? r1 : rb + BN_ROWS;
		for (int c = 0; c < C8; c += 8) {
			__m256 m = _mm256_loadu_ps(j->mean + c);
			__m256 fs = _mm256_setzero_ps(), fq = fs;
			for (int r = rb; r < re; r++) {
				size_t o = (size_t)r * C + c;
				__m256 g = bn_grad8(j, o);
				__m256 xc = _mm256_sub_ps(_mm256_loadu_ps(j->inp + o), m);
				fs = _mm256_add_ps(fs, g);
				fq = _mm256_fmadd_ps(g, xc, fq);
			}
			add_float8(s + c, fs);
			add_float8(q + c, fq);
		}
		for (int c = C8; c < C; c++) {
			float fs = 0, fq = 0;
			for (int r = rb; r < re; r++) {
				size_t o = (size_t)r * C + c;
				float g = bn_grad1(j, o);
				fs += g;
				fq = fmaf(g, j->inp[o] - j->mean[c], fq);
			}
			s[c] += fs;
			q[c] += fq;
		}
	}
}

TGT void apf_cpu_bn_fast_dx(struct apf_bn_job *j, int t, int nt)
{
	int r0, r1, C = j->C, C8 = C / 8 * 8;
	bn_rows(j, t, nt, &r0, &r1);
	for (int r = r0; r < r1; r++) {
		size_t o = (size_t)r * C;
		for (int c = 0; c < C8; c += 8) {
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
		for (int c = C8; c < C; c++) {
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
