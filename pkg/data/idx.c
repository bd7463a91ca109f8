/*
 * idx.c: the IDX reader and the labelled-image splits built on it.
 *
 * zlib's gzread reads gzip'd and plain files alike, so the .gz files Debian
 * ships and uncompressed copies both work. Every way a file can be wrong
 * (missing, not IDX, wrong type, truncated, trailing bytes, corrupt gzip,
 * images and labels that disagree) is a one-line APF_EINPUT naming the file.
 */
#include "data/data.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <zlib.h>

#define IDX_UBYTE 0x08

void apf_idx_free(apf_idx *idx)
{
	if (!idx)
		return;
	free(idx->data);
	free(idx);
}

/* Reads exactly n bytes; 0, or a status with the message set. */
static int gz_exact(gzFile f, void *buf, size_t n, const char *path,
		    const char *what)
{
	char *p = buf;
	while (n > 0) {
		unsigned chunk = n > (1u << 30) ? (1u << 30) : (unsigned)n;
		int got = gzread(f, p, chunk);
		if (got < 0) {
			int zerr;
			const char *msg = gzerror(f, &zerr);
			return apf_error(APF_EINPUT, path, "corrupt data in %s: %s",
					 what, msg);
		}
		if (got == 0)
			return apf_error(APF_EINPUT, path,
					 "truncated: the file ends inside the %s",
					 what);
		p += got;
		n -= (size_t)got;
	}
	return 0;
}

/* The header: magic, element type, dimensions; *total is the data's size. */
static int read_header(gzFile f, apf_idx *idx, const char *path,
		       size_t max_bytes, size_t *total)
{
	uint8_t head[4];
	int rc = gz_exact(f, head, 4, path, "header");
	if (!rc && (head[0] || head[1]))
		rc = apf_error(APF_EINPUT, path,
			       "not an IDX file (bad magic %02x %02x)", head[0],
			       head[1]);
	if (!rc && head[2] != IDX_UBYTE)
		rc = apf_error(APF_EINPUT, path,
			       "IDX element type 0x%02x is not supported (only "
			       "unsigned bytes, 0x08)",
			       head[2]);
	if (!rc && (head[3] < 1 || head[3] > 4))
		rc = apf_error(APF_EINPUT, path,
			       "IDX with %d dimensions (1 to 4 supported)",
			       head[3]);
	*total = 1;
	if (!rc) {
		idx->ndim = head[3];
		uint8_t d[16];
		rc = gz_exact(f, d, 4 * (size_t)idx->ndim, path, "dimensions");
		for (int i = 0; !rc && i < idx->ndim; i++) {
			idx->dims[i] = (uint32_t)d[4 * i] << 24 |
				       (uint32_t)d[4 * i + 1] << 16 |
				       (uint32_t)d[4 * i + 2] << 8 | d[4 * i + 3];
			if (idx->dims[i] == 0 || *total > max_bytes / idx->dims[i])
				rc = apf_error(APF_EINPUT, path,
					       "IDX dimensions too large or "
					       "zero (over %zu bytes)",
					       max_bytes);
			else
				*total *= idx->dims[i];
		}
	}
	if (!rc) {
		idx->count = idx->dims[0];
		idx->item_size = *total / idx->count;
	}
	return rc;
}

int apf_idx_read_header(apf_idx *out, const char *path, size_t max_bytes)
{
	memset(out, 0, sizeof *out);
	gzFile f = gzopen(path, "rb");
	if (!f)
		return apf_error_errno(APF_EINPUT, errno ? errno : ENOENT, path,
				       "cannot open");
	size_t total;
	int rc = read_header(f, out, path, max_bytes, &total);
	gzclose(f);
	return rc;
}

int apf_idx_read(apf_idx **out, const char *path, size_t max_bytes)
{
	*out = NULL;
	gzFile f = gzopen(path, "rb");
	if (!f)
		return apf_error_errno(APF_EINPUT, errno ? errno : ENOENT, path,
				       "cannot open");
	apf_idx *idx = apf_calloc(1, sizeof *idx);
	size_t total = 1;
	int rc = idx ? read_header(f, idx, path, max_bytes, &total)
		     : apf_error(APF_ENOMEM, path, "out of memory");
	if (!rc) {
		idx->data = malloc(total);
		if (!idx->data)
			rc = apf_error(APF_ENOMEM, path, "out of memory");
	}
	if (!rc)
		rc = gz_exact(f, idx->data, total, path, "data");
	if (!rc) {
		uint8_t extra;
		int got = gzread(f, &extra, 1);
		if (got != 0)
			rc = got < 0 ? gz_exact(f, &extra, 1, path, "data")
				     : apf_error(APF_EINPUT, path,
						 "trailing bytes after the "
						 "%zu declared items",
						 idx->count);
	}
	gzclose(f);
	if (rc) {
		apf_idx_free(idx);
		return rc;
	}
	*out = idx;
	return 0;
}

const char *apf_split_name(int split)
{
	switch (split) {
	case APF_SPLIT_TRAIN:
		return "train";
	case APF_SPLIT_VALIDATION:
		return "validation";
	case APF_SPLIT_TEST:
		return "test";
	}
	return "unknown";
}

void apf_image_dataset_free(apf_image_dataset *ds)
{
	if (!ds)
		return;
	for (int i = 0; i < 4; i++)
		apf_idx_free(ds->files[i]);
	if (ds->map)
		munmap(ds->map, ds->map_len);
	free(ds);
}

/* Images and labels of one file pair must agree with each other. */
static int check_pair(const apf_idx *im, const apf_idx *lb, const char *impath,
		      const char *lbpath, int classes)
{
	if (im->ndim != 3)
		return apf_error(APF_EINPUT, impath,
				 "expected images (N, rows, cols), got %d "
				 "dimensions",
				 im->ndim);
	if (lb->ndim != 1)
		return apf_error(APF_EINPUT, lbpath,
				 "expected labels (N), got %d dimensions",
				 lb->ndim);
	if (im->count != lb->count)
		return apf_error(APF_EINPUT, lbpath,
				 "%zu labels for %zu images in %s", lb->count,
				 im->count, impath);
	for (size_t i = 0; i < lb->count; i++)
		if (lb->data[i] >= classes)
			return apf_error(APF_EINPUT, lbpath,
					 "label %d of item %zu is not below %d",
					 lb->data[i], i, classes);
	return 0;
}

int apf_image_dataset_load(apf_image_dataset **out,
			   const apf_image_dataset_opts *o)
{
	*out = NULL;
	if (o->classes < 2 || o->classes > 256 || !(o->std > 0.0f))
		return apf_error(APF_EINPUT, o->dir,
				 "dataset needs 2 to 256 classes and std > 0");
	apf_image_dataset *ds = apf_calloc(1, sizeof *ds);
	if (!ds)
		return apf_error(APF_ENOMEM, o->dir, "out of memory");
	const char *names[4] = {o->train_images, o->train_labels,
				o->test_images, o->test_labels};
	char *paths[4] = {0};
	int rc = 0;
	for (int i = 0; !rc && i < 4; i++) {
		paths[i] = apf_path_join(o->dir, names[i]);
		rc = paths[i] ? apf_idx_read(&ds->files[i], paths[i],
					     (size_t)1 << 32)
			      : apf_error(APF_ENOMEM, o->dir, "out of memory");
	}
	if (!rc)
		rc = check_pair(ds->files[0], ds->files[1], paths[0], paths[1],
				o->classes);
	if (!rc)
		rc = check_pair(ds->files[2], ds->files[3], paths[2], paths[3],
				o->classes);
	if (!rc && (ds->files[0]->dims[1] != ds->files[2]->dims[1] ||
		    ds->files[0]->dims[2] != ds->files[2]->dims[2]))
		rc = apf_error(APF_EINPUT, paths[2],
			       "test images are %ux%u, training images %ux%u",
			       ds->files[2]->dims[1], ds->files[2]->dims[2],
			       ds->files[0]->dims[1], ds->files[0]->dims[2]);
	size_t ntrainfile = rc ? 0 : ds->files[0]->count;
	size_t nvalid = o->validation_size;
	size_t ntrain = o->train_size ? o->train_size : ntrainfile - nvalid;
	if (!rc && (nvalid >= ntrainfile || ntrain == 0 ||
		    ntrain > ntrainfile - nvalid))
		rc = apf_error(APF_EINPUT, paths[0],
			       "%zu training items cannot give %zu train + %zu "
			       "validation",
			       ntrainfile, ntrain, nvalid);
	for (int i = 0; i < 4; i++)
		free(paths[i]);
	if (rc) {
		apf_image_dataset_free(ds);
		return rc;
	}
	ds->H = (int)ds->files[0]->dims[1];
	ds->W = (int)ds->files[0]->dims[2];
	ds->C = 1;
	ds->classes = o->classes;
	ds->mean = o->mean;
	ds->std = o->std;
	size_t isz = ds->files[0]->item_size;
	/* Validation is the end of the training file, so the train split is
	 * the same whatever validation_size a variant picks. */
	ds->split[APF_SPLIT_TRAIN] = (apf_split){ds->files[0]->data,
						 ds->files[1]->data, ntrain};
	ds->split[APF_SPLIT_VALIDATION] = (apf_split){
		ds->files[0]->data + (ntrainfile - nvalid) * isz,
		ds->files[1]->data + (ntrainfile - nvalid), nvalid};
	ds->split[APF_SPLIT_TEST] = (apf_split){
		ds->files[2]->data, ds->files[3]->data, ds->files[2]->count};
	*out = ds;
	return 0;
}

void apf_image_gather(const apf_image_dataset *ds, int split,
		      const uint32_t *idx, size_t first, size_t B, float *x,
		      int32_t *y)
{
	const apf_split *s = &ds->split[split];
	size_t isz = (size_t)ds->H * ds->W * ds->C;
	/* One table of the 256 normalised values keeps gathering exact and
	 * identical on every backend (it happens on the host). */
	float lut[256];
	for (int v = 0; v < 256; v++)
		lut[v] = ((float)v / 255.0f - ds->mean) / ds->std;
	for (size_t b = 0; b < B; b++) {
		size_t i = idx ? idx[b] : first + b;
		const uint8_t *src = s->x + i * isz;
		float *dst = x + b * isz;
		for (size_t k = 0; k < isz; k++)
			dst[k] = lut[src[k]];
		y[b] = s->y[i];
	}
}
