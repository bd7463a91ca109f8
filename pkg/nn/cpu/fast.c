/*
 * fast.c: the CPU backend's fast kernels (see fast.h): direct NHWC and
 * Winograd convolutions for small channel counts and batch norm fused with
 * ReLU, on the job's instruction-set path.
 *
 * Why not im2col + GEMM for these layers: with 16 to 64 channels the GEMMs
 * are skinny (N = 16..64, K = 9 C), packing costs much of their time, and
 * im2col writes nine copies of the input. Here a zero-padded copy of a few
 * images (one copy, cache-resident) feeds a register tile.
 *
 * This file decides every order: the shares, the chunks of images, the
 * pixels in tiles of 6, the batch-norm rows in blocks of 16; the inner
 * kernels are the path's (fast_ops.h: fast_scalar.c, fast_avx2.c,
 * fast_avx512.c), and each computes every element with the same float
 * operations, so the path never changes a bit. Nothing here depends on the
 * path but the table of kernels. The code outside the kernels (padding,
 * the Winograd weight transforms) is plain C with contraction off, the same
 * on any CPU.
 *
 * Invariants: every function is one thread's share (t of nt) of a layer;
 * shares are whole images (convolutions) or whole rows (batch norm) from a
 * static split; every accumulation runs in a fixed order. Only unaligned
 * vector loads and stores are used, and no load reads outside the buffers.
 */
#pragma GCC optimize("O3", "fp-contract=off")
#ifdef __clang__
#pragma clang fp contract(off)
#endif

#include "nn/cpu/fast.h"

#include <string.h>

#include "nn/cpu/fast_ops.h"
#include "nn/cpu/isa.h"

/* The kernels of a job's path (isa.h); anything else is the scalar one,
 * which computes the same bits on any CPU. */
static const struct apf_fast_ops *ops(int isa)
{
	switch (isa) {
	case APF_CPU_ISA_AVX512:
		return &apf_fast_avx512_ops;
	case APF_CPU_ISA_AVX2:
		return &apf_fast_avx2_ops;
	default:
		return &apf_fast_scalar_ops;
	}
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
#define MAX_TAPS APF_FAST_MAX_TAPS

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
	if (K < 1 || C < 1)
		return 0;
	/* fewer channels than a vector (the stem's one): lanes over output
	 * channels, the GEMM route's sums (fast.h) */
	return C % 8 == 0 ? OC % 4 == 0 : OC % 8 == 0;
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
	size_t acc_floats;     /* C % 8 != 0: one chunk's weight-gradient sums */
	size_t thread_floats, wt_floats;
};

/* Winograd tiles per group, a multiple of the kernels' row blocks (6 and
 * 12). With 16 channels each side a group of 12 keeps V and M (or Z) in
 * 24 KiB, within L1; wider channels cannot fit there, and 60 tiles spread
 * the weight gradient's loads and stores of dU over more sums. Measured on
 * a 2-core Xeon (AVX-512), batch 128: against groups of 48 and 24, the
 * 28x28 16->16 layer's forward 1.8 ms (2.2), backward 4.1 (4.8); the 7x7
 * 64->64 one's backward 3.3 ms (4.0), the 14x14 32->32 one's 3.2 (3.6). A
 * group's size changes no sum's order (fast.h). */
static int wino_group(int C, int OC)
{
	return C + OC <= 32 ? 12 : 60;
}

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
		g->TG = wino_group(C, OC);
		g->v_floats = round16(16 * (size_t)g->TG * CM);
		g->du_floats = round16(16 * (size_t)C * OC);
		size_t u = round16(16 * (size_t)C * OC);
		g->wt_floats = g->wt_floats > u ? g->wt_floats : u;
	}
	g->pad_floats = round16(g->pad_floats);
	g->acc_floats = C % 8 ? g->part_floats : 0;
	g->thread_floats = g->pad_floats + g->part_floats + 2 * g->v_floats +
			   g->du_floats + g->acc_floats;
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
			 int flip, int o0, int o1);
static void wino_conv(const struct apf_fast_ops *k, const struct geo *g,
		      const float *in, float *out, const float *U, int H, int W,
		      int cin, int cout, int b0, int b1, float *pad, float *V,
		      float *M, const float *bias, int accum);
static void wino_dweight(struct apf_conv_job *j, const struct geo *g, int t,
			 int nt);
static float *thread_v(const struct apf_conv_job *j, const struct geo *g,
		       int t);

int apf_cpu_conv_fast_prepare_backward(struct apf_conv_job *j, int t,
				       int nt)
{
	if (!j->dinp || !apf_cpu_conv_wino_ok(j->C, j->OC, j->K, j->S, j->P))
		return 0;
	int o0, o1;
	share(j->OC, t, nt, &o0, &o1);
	wino_weights(j->wt, j->weight, j->C, j->OC, 1, o0, o1);
	return 1;
}

void apf_cpu_conv_fast_prepare(struct apf_conv_job *j, int t, int nt)
{
	int o0, o1;
	share(j->OC, t, nt, &o0, &o1);
	if (apf_cpu_conv_wino_ok(j->C, j->OC, j->K, j->S, j->P)) {
		wino_weights(j->wt, j->weight, j->C, j->OC, 0, o0, o1);
		return;
	}
	/* wt[kh][kw][c][o] = weight[o][kh][kw][c]: the forward tile loads 16
	 * output channels of one input channel as two vectors */
	int KK = j->K * j->K, C = j->C, OC = j->OC;
	for (int o = o0; o < o1; o++)
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
		wino_conv(ops(j->isa), &g, j->inp, j->out, j->wt, j->H, j->W, C,
			  OC, b0, b1, pad, V, V + g.v_floats, j->bias, 0);
		return;
	}
	ptrdiff_t toff[MAX_TAPS];
	const float *tw[MAX_TAPS];
	for (int kh = 0; kh < K; kh++)
		for (int kw = 0; kw < K; kw++) {
			toff[kh * K + kw] = ((ptrdiff_t)kh * g.Wp + kw) * C;
			tw[kh * K + kw] = j->wt + (size_t)(kh * K + kw) * C * OC;
		}
	for (int b = b0; b < b1; b += g.nb_in) {
		int nb = b1 - b < g.nb_in ? b1 - b : g.nb_in;
		pad_images(pad, j->inp + (size_t)b * j->H * j->W * C, nb, j->H,
			   j->W, C, j->P, j->P, j->P);
		struct apf_fast_grid gr = {
			.in = pad, .in_img = (ptrdiff_t)g.in_img,
			.in_row = (ptrdiff_t)j->S * g.Wp * C,
			.in_col = (ptrdiff_t)j->S * C,
			.out = j->out + (size_t)b * j->OH * j->OW * OC,
			.out_img = (ptrdiff_t)j->OH * j->OW * OC,
			.out_row = (ptrdiff_t)j->OW * OC, .out_col = OC,
			.rows = j->OH, .cols = j->OW, .nimg = nb};
		ops(j->isa)->tiles(&gr, toff, tw, K * K, C, OC, OC, j->bias, 0);
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
		wino_conv(ops(j->isa), &g, j->dout, j->dinp, j->wt, j->H, j->W,
			  OC, C, b0, b1, pad, V, V + g.v_floats, NULL,
			  j->accum);
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
				struct apf_fast_grid gr = {
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
				ops(j->isa)->tiles(&gr, toff, tw, ntaps, OC,
						   K * K * C, C, NULL, j->accum);
			}
	}
}

/* The weight gradient of an input whose channels 8 does not divide, as
 * the im2col + GEMM route sums it (fast.h): thread t's chunks of the
 * route, t, t + nt, ..., each summed from zero over its pixels in order (in
 * padded sub-chunks that fit the thread's buffer, the sums carried from
 * one to the next), then added to the partial as the GEMM's epilogue adds
 * with beta 1 (acc + partial; the first written). */
static void dweight_gemm_chunks(struct apf_conv_job *j, const struct geo *g,
				int t, int nt)
{
	int K = j->K, C = j->C, OC = j->OC, cb = j->gemm_chunk;
	int nchunks = (j->B + cb - 1) / cb;
	size_t nw = (size_t)OC * K * K * C;
	float *pad = thread_pad(j, g, t);
	float *part = pad + g->pad_floats;
	float *acc = part + g->part_floats + 2 * g->v_floats + g->du_floats;
	for (int ch = t; ch < nchunks; ch += nt) {
		int c0 = ch * cb, c1 = c0 + cb < j->B ? c0 + cb : j->B;
		memset(acc, 0, nw * sizeof *acc);
		for (int b = c0; b < c1; b += g->nb_in) {
			int nb = c1 - b < g->nb_in ? c1 - b : g->nb_in;
			pad_images(pad, j->inp + (size_t)b * j->H * j->W * C, nb,
				   j->H, j->W, C, j->P, j->P, j->P);
			const float *dy = j->dout + (size_t)b * j->OH * j->OW * OC;
			struct apf_fast_dw d = {.K = K, .C = C, .OC = OC,
						.S = j->S, .OH = j->OH,
						.OW = j->OW, .Wp = g->Wp,
						.nb = nb, .in_img = g->in_img};
			for (int kh = 0; kh < K; kh++)
				ops(j->isa)->dweight_row(acc, dy,
							 pad + (size_t)kh * g->Wp * C,
							 kh, &d);
		}
		if (ch == t)
			memcpy(part, acc, nw * sizeof *part);
		else
			for (size_t i = 0; i < nw; i++)
				part[i] = acc[i] + part[i];
	}
}

void apf_cpu_conv_fast_dweight(struct apf_conv_job *j, int t, int nt)
{
	struct geo g;
	job_geometry(j, &g, nt);
	if (g.wino) {
		wino_dweight(j, &g, t, nt);
		return;
	}
	if (j->C % 8) {
		dweight_gemm_chunks(j, &g, t, nt);
		return;
	}
	int b0, b1;
	share(j->B, t, nt, &b0, &b1);
	int K = j->K, C = j->C, OC = j->OC;
	float *pad = thread_pad(j, &g, t);
	float *part = pad + g.pad_floats;
	memset(part, 0, (size_t)OC * K * K * C * sizeof *part);
	/* every element sums over the pixels of chunk after chunk, in order */
	for (int b = b0; b < b1; b += g.nb_in) {
		int nb = b1 - b < g.nb_in ? b1 - b : g.nb_in;
		pad_images(pad, j->inp + (size_t)b * j->H * j->W * C, nb, j->H,
			   j->W, C, j->P, j->P, j->P);
		const float *dy = j->dout + (size_t)b * j->OH * j->OW * OC;
		struct apf_fast_dw d = {.K = K, .C = C, .OC = OC, .S = j->S,
					.OH = j->OH, .OW = j->OW, .Wp = g.Wp,
					.nb = nb, .in_img = g.in_img};
		for (int kh = 0; kh < K; kh++)
			ops(j->isa)->dweight_row(part, dy,
						 pad + (size_t)kh * g.Wp * C,
						 kh, &d);
	}
}

/* ---- Winograd F(2x2, 3x3) -----------------------------------------------------
 *
 * For 3x3 convolutions of stride 1 and padding 1 (Lavin and Gray, 2016): a
 * 2x2 output tile is A^T [(G g G^T) . (B^T d B)] A over its 4x4 input tile
 * d, 16 multiplies per channel pair instead of 36. Tiles go in groups of TG:
 * their inputs transformed into V (16 x TG x cin), 16 GEMMs (the path's
 * wino_gemm, or its tiles) give M (16 x TG x cout), which is transformed
 * out. The
 * input gradient is the same convolution of the output gradient with the
 * flipped, transposed kernel; the weight gradient sums (A dY A^T) . V over
 * tiles into dU (16 x OC x C) and maps that back with G^T dU G. The
 * transforms' coefficients are 0, +-1 and 1/2, so rounding stays close to
 * the direct sums' (the tests hold both to the plain path).
 */

/* U[xi][ci][co] = (G g G^T)[xi] of the 3x3 kernel g from input channel ci
 * to output channel co: forward (flip 0) ci = c, co = o, g = weight[o][.][.][c];
 * input gradient (flip 1) ci = o, co = c, g = weight[o] flipped. The
 * entries of the layer's output channels o0 .. o1-1. */
static void wino_weights(float *U, const float *weight, int C, int OC, int flip,
			 int o0, int o1)
{
	int cin = flip ? OC : C, cout = flip ? C : OC;
	for (int o = o0; o < o1; o++)
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

static float *thread_v(const struct apf_conv_job *j, const struct geo *g,
		       int t)
{
	return j->work + g->wt_floats + (size_t)t * g->thread_floats +
	       g->pad_floats + g->part_floats;
}

/* Images [b0, b1): out (H,W,cout) = or += the 3x3 stride-1 padding-1
 * convolution of in (H,W,cin) by the transformed kernel U. */
static void wino_conv(const struct apf_fast_ops *k, const struct geo *g,
		      const float *in, float *out, const float *U, int H, int W,
		      int cin, int cout, int b0, int b1, float *pad, float *V,
		      float *M, const float *bias, int accum)
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
				k->wino_in(V + (size_t)s * cin, vs,
					pad + im * img + 2 * ty * row + (size_t)2 * tx * cin,
					row, cin);
			}
			for (int xi = 0; xi < 16; xi++) {
				const float *u = U + (size_t)xi * cin * cout;
				if (k->wino_gemm) {
					k->wino_gemm(M + xi * ms, V + xi * vs, u,
						     nq, cin, cout);
					continue;
				}
				struct apf_fast_grid gr = {
					.in = V + xi * vs, .in_col = cin,
					.out = M + xi * ms, .out_col = cout,
					.rows = 1, .cols = nq, .nimg = 1};
				k->tiles(&gr, toff0, &u, 1, cin, cout, cout, NULL,
					 0);
			}
			for (int s = 0; s < nq; s++) {
				int q = q0 + s, im = q / per_img, r = q % per_img;
				int ty = r / g->TW, tx = r % g->TW;
				int nh = H - 2 * ty < 2 ? H - 2 * ty : 2;
				int nw = W - 2 * tx < 2 ? W - 2 * tx : 2;
				float *y = out + (((size_t)(b + im) * H + 2 * ty) * W + 2 * tx) * cout;
				k->wino_out(y, (size_t)W * cout, nh, nw,
					    M + (size_t)s * cout, ms, cout, bias,
					    accum);
			}
		}
	}
}

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
	const struct apf_fast_ops *k = ops(j->isa);
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
				k->wino_in(V + (size_t)s * C, vs,
					pad + im * img + 2 * ty * row + (size_t)2 * tx * C,
					row, C);
				int nh = H - 2 * ty < 2 ? H - 2 * ty : 2;
				int nw = W - 2 * tx < 2 ? W - 2 * tx : 2;
				const float *y = j->dout + (((size_t)(b + im) * H + 2 * ty) * W + 2 * tx) * OC;
				k->wino_dy(Z + (size_t)s * OC, zs, y,
					   (size_t)W * OC, nh, nw, OC);
			}
			for (int xi = 0; xi < 16; xi++)
				k->wino_reduce(dU + (size_t)xi * OC * C,
					       Z + xi * zs, V + xi * vs, OC, C,
					       nq);
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
 * while every group of channels sums over it); per block and channel the
 * sums run in float over the rows in order and are then added into the
 * double per-thread partials, whatever the number of lanes that do it.
 * Statistics sum x - shift, shift a sample of each channel (the first row),
 * so E[x^2] - E[x]^2 cancels nothing when the mean is large against the
 * spread.
 */
#define BN_ROWS 16

static void bn_rows(const struct apf_bn_job *j, int t, int nt, int *r0, int *r1)
{
	share(j->N, t, nt, r0, r1);
}

/* Thread t's share of the statistics: per block of rows, the path's float
 * sums over the block's rows in order, added into its double partials. */
void apf_cpu_bn_fast_stats(struct apf_bn_job *j, int t, int nt)
{
	int r0, r1, C = j->C;
	bn_rows(j, t, nt, &r0, &r1);
	double *s = j->part + (size_t)t * 2 * C, *q = s + C;
	memset(s, 0, 2 * (size_t)C * sizeof *s);
	const struct apf_fast_ops *k = ops(j->isa);
	for (int rb = r0; rb < r1; rb += BN_ROWS)
		k->bn_stats(j, rb, r1 - rb < BN_ROWS ? r1 : rb + BN_ROWS, 0, s,
			    q);
}

/* y = relu((x - mean) a + b [+ res]), each element one fma and an add. */
void apf_cpu_bn_fast_apply(struct apf_bn_job *j, int t, int nt)
{
	int r0, r1;
	bn_rows(j, t, nt, &r0, &r1);
	ops(j->isa)->bn_apply(j, r0, r1, 0);
}

/* The sums of g and g (x - mean), g = dout masked by the ReLU, blocked as
 * the statistics are. */
void apf_cpu_bn_fast_dsums(struct apf_bn_job *j, int t, int nt)
{
	int r0, r1, C = j->C;
	bn_rows(j, t, nt, &r0, &r1);
	double *s = j->part + (size_t)t * 2 * C, *q = s + C;
	memset(s, 0, 2 * (size_t)C * sizeof *s);
	const struct apf_fast_ops *k = ops(j->isa);
	for (int rb = r0; rb < r1; rb += BN_ROWS)
		k->bn_dsums(j, rb, r1 - rb < BN_ROWS ? r1 : rb + BN_ROWS, 0, s,
			    q);
}

/* dinp = k0 (g - k1 - (x - mean) k2) (the last two one fma), dres = g. */
void apf_cpu_bn_fast_dx(struct apf_bn_job *j, int t, int nt)
{
	int r0, r1;
	bn_rows(j, t, nt, &r0, &r1);
	ops(j->isa)->bn_dx(j, r0, r1, 0);
}

int apf_cpu_inter_kernels(int isa, apf_inter_fn *fwd, apf_inter_fn *bwd)
{
	const struct apf_fast_ops *k = ops(isa);
	*fwd = k->inter_fwd;
	*bwd = k->inter_bwd;
	return k->inter_fwd ? k->inter_lanes : 0;
}

int apf_cpu_attn_kernels(int isa, int hs, apf_attn_fwd_fn *fwd,
			 apf_attn_bwd_fn *bwd)
{
	const struct apf_fast_ops *k = ops(isa);
	if (!k->attn_fwd || hs <= 0 || hs % k->attn_floats)
		return 0;
	*fwd = k->attn_fwd;
	*bwd = k->attn_bwd;
	return 1;
}
