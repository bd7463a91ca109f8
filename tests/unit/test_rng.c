/*
 * test_rng.c: Philox 4x32-10 against Random123's known-answer vectors, the
 * stream addressing a parallel kernel relies on, and the distributions.
 */
#include "testlib.h"

#include <math.h>
#include <string.h>

#include "rng/rng.h"

static void philox_matches_random123_known_answers(void **state)
{
	(void)state;
	static const uint32_t ctr[3][4] = {
		{0, 0, 0, 0},
		{0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu},
		{0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}};
	static const uint32_t key[3][2] = {
		{0, 0}, {0xffffffffu, 0xffffffffu}, {0xa4093822u, 0x299f31d0u}};
	static const uint32_t want[3][4] = {
		{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u},
		{0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu},
		{0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}};
	for (int i = 0; i < 3; i++) {
		uint32_t out[4];
		apf_philox4x32_10(ctr[i], key[i], out);
		assert_memory_equal(out, want[i], sizeof out);
	}
}

static void cursor_seek_and_word_agree(void **state)
{
	(void)state;
	apf_rng_key k = {42, 1, 2, APF_RNG_TEST};
	apf_rng r;
	apf_rng_init(&r, &k, 7);
	uint32_t seq[37];
	for (int i = 0; i < 37; i++)
		seq[i] = apf_rng_u32(&r);
	for (int i = 0; i < 37; i++)
		assert_int_equal(seq[i], apf_rng_word(r.key, 7, (uint64_t)i));
	for (int start = 0; start < 9; start++) {
		apf_rng s;
		apf_rng_init(&s, &k, 7);
		apf_rng_seek(&s, (uint64_t)start);
		for (int i = start; i < 37; i++)
			assert_int_equal(apf_rng_u32(&s), seq[i]);
	}
}

static void every_key_field_changes_the_stream(void **state)
{
	(void)state;
	apf_rng_key base = {42, 1, 2, APF_RNG_INIT};
	apf_rng_key alt[4] = {base, base, base, base};
	alt[0].seed = 43;
	alt[1].study = 2;
	alt[2].trial = 3;
	alt[3].purpose = APF_RNG_DROPOUT;
	uint64_t k0 = apf_rng_philox_key(&base);
	for (int i = 0; i < 4; i++)
		assert_true(apf_rng_philox_key(&alt[i]) != k0);
	apf_rng a, b;
	apf_rng_init(&a, &base, 0);
	apf_rng_init(&b, &base, 1);
	assert_true(apf_rng_u32(&a) != apf_rng_u32(&b));
	assert_int_equal(apf_rng_philox_key(&base), k0); /* pure */
}

static void distributions_have_their_moments(void **state)
{
	(void)state;
	apf_rng_key k = {1, 0, 0, APF_RNG_TEST};
	apf_rng r;
	apf_rng_init(&r, &k, 0);
	const int n = 200000;
	double su = 0, sn = 0, sn2 = 0;
	long counts[7] = {0};
	for (int i = 0; i < n; i++) {
		float u = apf_rng_uniform(&r);
		assert_true(u >= 0.0f && u < 1.0f);
		su += u;
		double z = apf_rng_normal(&r);
		assert_true(isfinite(z));
		sn += z;
		sn2 += z * z;
		uint32_t j = apf_rng_below(&r, 7);
		assert_true(j < 7);
		counts[j]++;
	}
	assert_true(fabs(su / n - 0.5) < 0.005);
	assert_true(fabs(sn / n) < 0.01);
	assert_true(fabs(sn2 / n - 1.0) < 0.02);
	for (int j = 0; j < 7; j++)
		assert_true(fabs(counts[j] / (double)n - 1.0 / 7) < 0.005);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(philox_matches_random123_known_answers),
		cmocka_unit_test(cursor_seek_and_word_agree),
		cmocka_unit_test(every_key_field_changes_the_stream),
		cmocka_unit_test(distributions_have_their_moments),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
