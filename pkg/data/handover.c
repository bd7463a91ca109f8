/*
 * handover.c: the training split as the supervisor hands it to a trial.
 *
 * A trial must hold only the training examples (docs/design.md section 1.1): what
 * is not in its process cannot be read, whatever the submission does to the
 * harness's memory. So the trial never opens the dataset. The supervisor,
 * which has loaded all of it, copies the train split into a memfd, seals it
 * (no write, no shrink, no grow, no further seals) and passes the descriptor;
 * the trial maps it read-only. Validation and test stay with the supervisor
 * and the evaluator.
 *
 * Layout: a 64-byte header, then n images of H*W*C bytes, then n labels.
 *
 *     magic "APFTRN01" | u32 H, W, C, classes | u64 n | zero padding
 */
#include "data/data.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define HANDOVER_MAGIC "APFTRN01"
#define HANDOVER_HEADER 64
#define HANDOVER_SEALS (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL)

struct handover_header {
	char magic[8];
	uint32_t H, W, C, classes;
	uint64_t n;
};

static int write_all(int fd, const void *p, size_t n, off_t off)
{
	const char *b = p;
	while (n > 0) {
		ssize_t w = pwrite(fd, b, n, off);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0) /* a write of nothing leaves errno as it was */
			return apf_error_errno(APF_EIO, w < 0 ? errno : EIO,
					       "train split", "write the memfd");
		b += w;
		n -= (size_t)w;
		off += w;
	}
	return 0;
}

int apf_image_dataset_export_train(int *out_fd, const apf_image_dataset *ds)
{
	*out_fd = -1;
	const apf_split *s = &ds->split[APF_SPLIT_TRAIN];
	size_t isz = (size_t)ds->H * ds->W * ds->C;
	struct handover_header h = {HANDOVER_MAGIC, (uint32_t)ds->H,
				    (uint32_t)ds->W, (uint32_t)ds->C,
				    (uint32_t)ds->classes, s->n};
	size_t total = HANDOVER_HEADER + s->n * isz + s->n;
	int fd = memfd_create("apf-train", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (fd < 0)
		return apf_error_errno(APF_EIO, errno, "train split", "memfd");
	int rc = ftruncate(fd, (off_t)total) == 0
			 ? 0
			 : apf_error_errno(APF_EIO, errno, "train split",
					   "size the memfd");
	if (!rc)
		rc = write_all(fd, &h, sizeof h, 0);
	if (!rc)
		rc = write_all(fd, s->x, s->n * isz, HANDOVER_HEADER);
	if (!rc)
		rc = write_all(fd, s->y, s->n,
			       (off_t)(HANDOVER_HEADER + s->n * isz));
	if (!rc && fcntl(fd, F_ADD_SEALS, HANDOVER_SEALS) != 0)
		rc = apf_error_errno(APF_EIO, errno, "train split", "seal");
	if (rc) {
		close(fd);
		return rc;
	}
	*out_fd = fd;
	return 0;
}

int apf_image_dataset_import_train(apf_image_dataset **out, int fd, float mean,
				   float std)
{
	*out = NULL;
	struct stat st;
	if (fstat(fd, &st) != 0)
		return apf_error_errno(APF_EINPUT, errno, "train split", "fstat");
	int seals = fcntl(fd, F_GET_SEALS);
	if (seals < 0 || (seals & HANDOVER_SEALS) != HANDOVER_SEALS)
		return apf_error(APF_EINPUT, "train split",
				 "the descriptor is not a sealed memfd");
	size_t len = (size_t)st.st_size;
	if (st.st_size < HANDOVER_HEADER)
		return apf_error(APF_EINPUT, "train split", "too short");
	void *map = mmap(NULL, len, PROT_READ, MAP_SHARED, fd, 0);
	if (map == MAP_FAILED)
		return apf_error_errno(APF_EINPUT, errno, "train split", "map");
	struct handover_header h;
	memcpy(&h, map, sizeof h);
	uint64_t isz = (uint64_t)h.H * h.W * h.C;
	int rc = memcmp(h.magic, HANDOVER_MAGIC, 8) || !h.H || !h.W || !h.C ||
				 h.H > 4096 || h.W > 4096 || h.C > 64 ||
				 !h.classes || h.classes > 65536 ||
				 h.n > (len - HANDOVER_HEADER) / (isz + 1) ||
				 HANDOVER_HEADER + h.n * (isz + 1) != len
			 ? apf_error(APF_EINPUT, "train split", "malformed header")
			 : 0;
	apf_image_dataset *ds = rc ? NULL : apf_calloc(1, sizeof *ds);
	if (!rc && !ds)
		rc = apf_error(APF_ENOMEM, "train split", "out of memory");
	if (rc) {
		munmap(map, len);
		return rc;
	}
	const uint8_t *base = map;
	ds->H = (int)h.H, ds->W = (int)h.W, ds->C = (int)h.C;
	ds->classes = (int)h.classes;
	ds->mean = mean;
	ds->std = std;
	ds->split[APF_SPLIT_TRAIN] = (apf_split){base + HANDOVER_HEADER,
						 base + HANDOVER_HEADER + h.n * isz,
						 h.n};
	ds->map = map;
	ds->map_len = len;
	*out = ds;
	return 0;
}

/* ---- either kind --------------------------------------------------------------
 *
 * A table's train split travels as its own file format (data.h), sealed the
 * same way; the trial parses (and so checks) it as it would the file.
 */
int apf_dataset_export_train(int *out_fd, const apf_dataset *ds)
{
	*out_fd = -1;
	if (ds->kind == APF_DATA_IMAGES)
		return apf_image_dataset_export_train(out_fd, ds->images);
	const apf_table *t = ds->table[APF_SPLIT_TRAIN];
	if (!t)
		return apf_error(APF_EINTERNAL, "train split", "not loaded");
	int fd = memfd_create("apf-train", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (fd < 0)
		return apf_error_errno(APF_EIO, errno, "train split", "memfd");
	int rc = ftruncate(fd, (off_t)t->len) == 0
			 ? 0
			 : apf_error_errno(APF_EIO, errno, "train split",
					   "size the memfd");
	if (!rc)
		rc = write_all(fd, t->buf, t->len, 0);
	if (!rc && fcntl(fd, F_ADD_SEALS, HANDOVER_SEALS) != 0)
		rc = apf_error_errno(APF_EIO, errno, "train split", "seal");
	if (rc) {
		close(fd);
		return rc;
	}
	*out_fd = fd;
	return 0;
}

int apf_dataset_import_train(apf_dataset **out, int fd, int kind, float mean,
			     float std)
{
	*out = NULL;
	if (kind == APF_DATA_IMAGES) {
		apf_image_dataset *im;
		int rc = apf_image_dataset_import_train(&im, fd, mean, std);
		return rc ? rc : apf_dataset_of_images(out, im);
	}
	struct stat st;
	if (fstat(fd, &st) != 0)
		return apf_error_errno(APF_EINPUT, errno, "train split", "fstat");
	int seals = fcntl(fd, F_GET_SEALS);
	if (seals < 0 || (seals & HANDOVER_SEALS) != HANDOVER_SEALS)
		return apf_error(APF_EINPUT, "train split",
				 "the descriptor is not a sealed memfd");
	size_t len = (size_t)st.st_size;
	if (len == 0)
		return apf_error(APF_EINPUT, "train split", "empty");
	void *map = mmap(NULL, len, PROT_READ, MAP_SHARED, fd, 0);
	if (map == MAP_FAILED)
		return apf_error_errno(APF_EINPUT, errno, "train split", "map");
	apf_dataset *ds = apf_calloc(1, sizeof *ds);
	apf_table *t = apf_calloc(1, sizeof *t);
	int rc = ds && t ? apf_table_parse(t, map, len, "train split")
			 : apf_error(APF_ENOMEM, "train split", "out of memory");
	if (rc) {
		munmap(map, len);
		free(t);
		free(ds);
		return rc;
	}
	t->buf = map;
	t->len = len;
	t->mapped = 1;
	ds->kind = APF_DATA_TABLE;
	ds->table[APF_SPLIT_TRAIN] = t;
	ds->in_floats = t->n_dense;
	ds->in_ints = t->n_cat;
	*out = ds;
	return 0;
}
