/*
 * data: datasets for the workloads. An IDX reader for the (gzip'd) files
 * Debian ships, the labelled-image splits built from them, tables (dense
 * features, categorical ids and a 0/1 label: click logs), one dataset type
 * over both kinds, and batching with seeded per-epoch shuffling.
 *
 * Images stay as bytes in memory and are normalised as batches are gathered
 * ((v / 255 - mean) / std), so a 60k-image dataset costs 47 MB, not 188.
 *
 * Data order is a pure function of (key, epoch): the epoch's permutation is
 * a Fisher-Yates shuffle driven by the Philox stream (key, step = epoch), and
 * the stream's position is the small struct apf_data_pos kept in the trial's
 * arena. Restoring the struct restores the stream; nothing else is needed.
 * A batch never straddles epochs: when fewer than B examples remain, the next
 * epoch starts (the remainder is dropped, as drop_last does).
 */
#ifndef APF_DATA_H
#define APF_DATA_H

#include <stddef.h>
#include <stdint.h>

#include "base/base.h"
#include "rng/rng.h"

/* ---- IDX files (LeCun's format: magic 0 0 type ndim, big-endian dims) ---- */

typedef struct apf_idx {
	int ndim;
	uint32_t dims[4];
	size_t count;     /* dims[0] */
	size_t item_size; /* product of the other dims */
	uint8_t *data;    /* count * item_size bytes */
} apf_idx;

/* Reads an unsigned-byte IDX file, gzip'd or plain; refuses other element
 * types, more than 4 dimensions, more than max_bytes of data, truncated
 * files and trailing bytes, each with a one-line reason naming the file. */
int apf_idx_read(apf_idx **out, const char *path, size_t max_bytes);
/* The same checks of the header alone (ndim, dims, count, item_size; data
 * stays NULL), without reading the data: what a listing needs to know a
 * dataset's shape. */
int apf_idx_read_header(apf_idx *out, const char *path, size_t max_bytes);
void apf_idx_free(apf_idx *idx);

/* ---- labelled image splits ------------------------------------------------ */

typedef struct apf_split {
	const uint8_t *x; /* n images of H*W*C bytes */
	const uint8_t *y; /* n labels */
	size_t n;
} apf_split;

enum apf_split_id { APF_SPLIT_TRAIN, APF_SPLIT_VALIDATION, APF_SPLIT_TEST };

typedef struct apf_image_dataset_opts {
	const char *dir;          /* the dataset's directory */
	const char *train_images, *train_labels; /* names inside dir */
	const char *test_images, *test_labels;
	size_t validation_size;   /* taken from the end of the training file */
	size_t train_size;        /* 0: all that precede the validation part */
	int classes;
	float mean, std;          /* of pixel / 255 */
} apf_image_dataset_opts;

typedef struct apf_image_dataset {
	int H, W, C, classes;
	float mean, std;
	apf_split split[3];       /* by enum apf_split_id */
	apf_idx *files[4];
	void *map;                /* a handed-over train split (below) */
	size_t map_len;
} apf_image_dataset;

int apf_image_dataset_load(apf_image_dataset **out,
			   const apf_image_dataset_opts *opts);
void apf_image_dataset_free(apf_image_dataset *ds);
const char *apf_split_name(int split);

/* The hand-over of the training split to a trial (handover.c): the trial
 * holds the train split only, never validation or test. Export copies the
 * train split into a memfd sealed against writing, shrinking and growing;
 * import maps such a descriptor (refusing one without those seals) as a
 * dataset whose validation and test splits are empty. */
int apf_image_dataset_export_train(int *out_fd, const apf_image_dataset *ds);
int apf_image_dataset_import_train(apf_image_dataset **out, int fd, float mean,
				   float std);

/* Gathers examples idx[0..B) of a split into x (B,H,W,C) normalised floats
 * and y (B) labels (host memory). idx NULL: examples first..first+B. */
void apf_image_gather(const apf_image_dataset *ds, int split,
		      const uint32_t *idx, size_t first, size_t B, float *x,
		      int32_t *y);

/* ---- tables ---------------------------------------------------------------
 *
 * A table file, and byte for byte the memfd a handed-over train split
 * travels in (little-endian; apf runs on x86-64):
 *
 *     magic "APFTAB01" | u32 n_dense | u32 n_cat | u64 n | u64 0  (32 bytes)
 *     u32 rows[n_cat]                  categorical feature f's ids < rows[f]
 *     f32 dense[n][n_dense] | i32 cat[n][n_cat] | u8 label[n]
 *
 * Parsing checks everything a model relies on: the exact length, every id
 * inside its feature's rows, every label 0 or 1, every dense value finite.
 */
typedef struct apf_table {
	int n_dense, n_cat;
	const uint32_t *rows;  /* (n_cat) */
	const float *dense;    /* (n, n_dense) */
	const int32_t *cat;    /* (n, n_cat) */
	const uint8_t *label;  /* (n) */
	size_t n;
	void *buf;             /* the bytes: malloc'd, or a mapping */
	size_t len;
	int mapped;
} apf_table;

/* Reads and checks a table file of at most max_bytes. */
int apf_table_read(apf_table **out, const char *path, size_t max_bytes);
/* Checks len bytes as a table (`what` names them in errors) and points t's
 * arrays into them; t does not own buf. */
int apf_table_parse(apf_table *t, void *buf, size_t len, const char *what);
void apf_table_free(apf_table *t);

/* ---- datasets of either kind ------------------------------------------------
 *
 * What one example is, by kind:
 *   images  x: H*W*C floats (normalised pixels), y: a class label
 *   table   x: n_dense floats, xi: n_cat int32 ids, y: the 0/1 label
 * Further kinds fit the same shape: token sequences as xi (T tokens) with
 * y the T next tokens, image targets as extra floats.
 */
enum apf_data_kind { APF_DATA_IMAGES = 1, APF_DATA_TABLE };

typedef struct apf_dataset {
	int kind;
	apf_image_dataset *images; /* APF_DATA_IMAGES */
	apf_table *table[3];       /* APF_DATA_TABLE, by split; NULL: not held */
	int in_floats, in_ints;    /* per example */
	int holds_eval;            /* validation and test are here */
} apf_dataset;

/* Wraps an image dataset (taking it over). */
int apf_dataset_of_images(apf_dataset **out, apf_image_dataset *images);
/* Reads the train, validation and test tables dir/names[split]. */
int apf_dataset_load_tables(apf_dataset **out, const char *dir,
			    const char *const names[3]);
void apf_dataset_free(apf_dataset *ds);
size_t apf_dataset_size(const apf_dataset *ds, int split);
/* Gathers examples idx[0..B) (idx NULL: first..first+B) of a split: x
 * (B, in_floats), xi (B, in_ints; may be NULL when in_ints is 0), y (B). */
void apf_dataset_gather(const apf_dataset *ds, int split, const uint32_t *idx,
			size_t first, size_t B, float *x, int32_t *xi,
			int32_t *y);
/* The hand-over of a dataset's train split (handover.c), of either kind:
 * import expects the kind the workload declares, and for images the
 * normalisation its spec gives. */
int apf_dataset_export_train(int *out_fd, const apf_dataset *ds);
int apf_dataset_import_train(apf_dataset **out, int fd, int kind, float mean,
			     float std);

/* ---- order ----------------------------------------------------------------- */

/* Where a trial's training stream stands; lives in the arena. */
typedef struct apf_data_pos {
	uint64_t epoch;
	uint64_t index; /* examples of this epoch already served */
} apf_data_pos;

/* perm (n) = the epoch's order: Fisher-Yates over the stream (key, epoch). */
void apf_data_permutation(uint32_t *perm, size_t n, const apf_rng_key *key,
			  uint64_t epoch);

/* Serves batches of one split in the shuffled order. Caches the current
 * epoch's permutation; the position itself is the caller's. */
typedef struct apf_batcher apf_batcher;
int apf_batcher_new(apf_batcher **out, const apf_image_dataset *ds, int split,
		    const apf_rng_key *key);
/* The same over a dataset of any kind. */
int apf_dataset_batcher_new(apf_batcher **out, const apf_dataset *ds,
			    int split, const apf_rng_key *key);
void apf_batcher_free(apf_batcher *b);
/* Fills x, y with the next B examples after *pos and advances it. */
int apf_batcher_next(apf_batcher *b, apf_data_pos *pos, size_t B, float *x,
		     int32_t *y);
/* The same with the examples' int32 features (xi, as apf_dataset_gather). */
int apf_batcher_next_ex(apf_batcher *b, apf_data_pos *pos, size_t B,
			float *x, int32_t *xi, int32_t *y);

#endif
