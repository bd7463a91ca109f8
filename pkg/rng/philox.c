/*
 * philox.c: Philox 4x32-10 and the streams built on it (see rng.h). The
 * round constants are those of Random123 and cuRAND; tests check the
 * published known-answer vectors.
 */
#include "rng/rng.h"

#include <math.h>

#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u
#define PHILOX_W1 0xBB67AE85u

void apf_philox4x32_10(const uint32_t ctr[4], const uint32_t key[2],
		       uint32_t out[4])
{
	uint32_t c0 = ctr[0], c1 = ctr[1], c2 = ctr[2], c3 = ctr[3];
	uint32_t k0 = key[0], k1 = key[1];
	for (int round = 0; round < 10; round++) {
		uint64_t p0 = (uint64_t)PHILOX_M0 * c0;
		uint64_t p1 = (uint64_t)PHILOX_M1 * c2;
		uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0;
		uint32_t n1 = (uint32_t)p1;
		uint32_t n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
		uint32_t n3 = (uint32_t)p0;
		c0 = n0, c1 = n1, c2 = n2, c3 = n3;
		k0 += PHILOX_W0;
		k1 += PHILOX_W1;
	}
	out[0] = c0, out[1] = c1, out[2] = c2, out[3] = c3;
}

uint64_t apf_rng_philox_key(const apf_rng_key *k)
{
	uint32_t ctr[4] = {k->study, k->trial, k->purpose, 0};
	uint32_t key[2] = {(uint32_t)k->seed, (uint32_t)(k->seed >> 32)};
	uint32_t out[4];
	apf_philox4x32_10(ctr, key, out);
	return (uint64_t)out[0] | (uint64_t)out[1] << 32;
}

static void block(const uint32_t key[2], uint64_t step, uint64_t b,
		  uint32_t out[4])
{
	uint32_t ctr[4] = {(uint32_t)b, (uint32_t)(b >> 32), (uint32_t)step,
			   (uint32_t)(step >> 32)};
	apf_philox4x32_10(ctr, key, out);
}

void apf_rng_init(apf_rng *r, const apf_rng_key *k, uint64_t step)
{
	uint64_t pk = apf_rng_philox_key(k);
	r->key[0] = (uint32_t)pk;
	r->key[1] = (uint32_t)(pk >> 32);
	r->step = step;
	r->block = 0;
	r->avail = 0;
}

void apf_rng_seek(apf_rng *r, uint64_t index)
{
	r->block = index / 4;
	r->avail = 0;
	if (index % 4) {
		block(r->key, r->step, r->block++, r->buf);
		r->avail = 4 - (int)(index % 4);
	}
}

uint32_t apf_rng_u32(apf_rng *r)
{
	if (r->avail == 0) {
		block(r->key, r->step, r->block++, r->buf);
		r->avail = 4;
	}
	return r->buf[4 - r->avail--];
}

uint32_t apf_rng_word(const uint32_t key[2], uint64_t step, uint64_t index)
{
	uint32_t out[4];
	block(key, step, index / 4, out);
	return out[index % 4];
}

float apf_rng_uniform(apf_rng *r)
{
	return apf_rng_to_uniform(apf_rng_u32(r));
}

uint32_t apf_rng_below(apf_rng *r, uint32_t n)
{
	/* Lemire's multiply-shift with rejection of the biased low range. */
	uint64_t m = (uint64_t)apf_rng_u32(r) * n;
	uint32_t low = (uint32_t)m;
	if (low < n) {
		uint32_t threshold = (uint32_t)-n % n;
		while (low < threshold) {
			m = (uint64_t)apf_rng_u32(r) * n;
			low = (uint32_t)m;
		}
	}
	return (uint32_t)(m >> 32);
}

float apf_rng_normal(apf_rng *r)
{
	/* u1 in (0, 1] so the log is finite. */
	double u1 = ((apf_rng_u32(r) >> 8) + 1) * (1.0 / 16777216.0);
	double u2 = (apf_rng_u32(r) >> 8) * (1.0 / 16777216.0);
	return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}
