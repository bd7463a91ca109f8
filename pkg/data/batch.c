/*
 * batch.c: per-epoch shuffled order and the batcher (see data.h). The order
 * is recomputed from (key, epoch) whenever the epoch changes, so a batcher
 * holds no state that a checkpoint would need.
 */
#include "data/data.h"

#include <stdlib.h>

void apf_data_permutation(uint32_t *perm, size_t n, const apf_rng_key *key,
			  uint64_t epoch)
{
	apf_rng r;
	apf_rng_init(&r, key, epoch);
	for (size_t i = 0; i < n; i++)
		perm[i] = (uint32_t)i;
	for (size_t i = n; i > 1; i--) {
		uint32_t j = apf_rng_below(&r, (uint32_t)i);
		uint32_t t = perm[i - 1];
		perm[i - 1] = perm[j];
		perm[j] = t;
	}
}

struct apf_batcher {
	const apf_image_dataset *ds;
	int split;
	apf_rng_key key;
	uint32_t *perm;
	uint64_t perm_epoch;
	int have_perm;
};

int apf_batcher_new(apf_batcher **out, const apf_image_dataset *ds, int split,
		    const apf_rng_key *key)
{
	*out = NULL;
	apf_batcher *b = apf_calloc(1, sizeof *b);
	if (!b || !(b->perm = apf_calloc(ds->split[split].n, sizeof *b->perm))) {
		free(b);
		return apf_error(APF_ENOMEM, "batcher", "out of memory");
	}
	b->ds = ds;
	b->split = split;
	b->key = *key;
	*out = b;
	return 0;
}

void apf_batcher_free(apf_batcher *b)
{
	if (!b)
		return;
	free(b->perm);
	free(b);
}

int apf_batcher_next(apf_batcher *b, apf_data_pos *pos, size_t B, float *x,
		     int32_t *y)
{
	size_t n = b->ds->split[b->split].n;
	if (B == 0 || B > n)
		return apf_error(APF_EINPUT, "batcher",
				 "batch size %zu for a split of %zu examples", B,
				 n);
	if (pos->index > n)
		return apf_error(APF_EINPUT, "batcher",
				 "data position %llu past the split's %zu "
				 "examples",
				 (unsigned long long)pos->index, n);
	if (pos->index + B > n) {
		pos->epoch++;
		pos->index = 0;
	}
	if (!b->have_perm || b->perm_epoch != pos->epoch) {
		apf_data_permutation(b->perm, n, &b->key, pos->epoch);
		b->perm_epoch = pos->epoch;
		b->have_perm = 1;
	}
	apf_image_gather(b->ds, b->split, b->perm + pos->index, 0, B, x, y);
	pos->index += B;
	return 0;
}
