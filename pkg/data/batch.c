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
	const apf_dataset *ds;
	apf_dataset view; /* apf_batcher_new's image dataset, not owned */
	int split;
	apf_rng_key key;
	uint32_t *perm;
	uint64_t perm_epoch;
	int have_perm;
};

int apf_dataset_batcher_new(apf_batcher **out, const apf_dataset *ds,
			    int split, const apf_rng_key *key)
{
	*out = NULL;
	size_t n = apf_dataset_size(ds, split);
	apf_batcher *b = apf_calloc(1, sizeof *b);
	if (!b || !(b->perm = apf_calloc(n ? n : 1, sizeof *b->perm))) {
		free(b);
		return apf_error(APF_ENOMEM, "batcher", "out of memory");
	}
	b->ds = ds;
	b->split = split;
	b->key = *key;
	*out = b;
	return 0;
}

int apf_batcher_new(apf_batcher **out, const apf_image_dataset *ds, int split,
		    const apf_rng_key *key)
{
	apf_dataset view = {.kind = APF_DATA_IMAGES,
			    .images = (apf_image_dataset *)ds,
			    .in_floats = ds->H * ds->W * ds->C};
	int rc = apf_dataset_batcher_new(out, &view, split, key);
	if (!rc) {
		(*out)->view = view;
		(*out)->ds = &(*out)->view;
	}
	return rc;
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
	return apf_batcher_next_ex(b, pos, B, x, NULL, y);
}

int apf_batcher_next_ex(apf_batcher *b, apf_data_pos *pos, size_t B,
			float *x, int32_t *xi, int32_t *y)
{
	size_t n = apf_dataset_size(b->ds, b->split);
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
	apf_dataset_gather(b->ds, b->split, b->perm + pos->index, 0, B, x, xi, y);
	pos->index += B;
	return 0;
}
