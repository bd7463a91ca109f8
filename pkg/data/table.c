/*
 * table.c: table files (dense features, categorical ids, 0/1 labels; the
 * format is in data.h) and the dataset type over both kinds of data.
 *
 * A table is checked once, when it is read or handed over, and never
 * again: every id lies inside its feature's rows (an embedding lookup
 * indexes memory with it), every label is 0 or 1, every dense value is
 * finite, and the length is exactly what the header implies.
 */
#include "data/data.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define TABLE_MAGIC "APFTAB01"
#define TABLE_HEADER 32
#define TABLE_MAX_COLS 4096

struct table_header {
	char magic[8];
	uint32_t n_dense, n_cat;
	uint64_t n, zero;
};

int apf_table_parse(apf_table *t, void *buf, size_t len, const char *what)
{
	memset(t, 0, sizeof *t);
	struct table_header h;
	if (len < TABLE_HEADER)
		return apf_error(APF_EINPUT, what, "not a table (%zu bytes)", len);
	memcpy(&h, buf, sizeof h);
	if (memcmp(h.magic, TABLE_MAGIC, 8))
		return apf_error(APF_EINPUT, what, "not a table (bad magic)");
	if (h.n_dense > TABLE_MAX_COLS || h.n_cat > TABLE_MAX_COLS ||
	    h.n_dense + h.n_cat == 0 || h.zero || h.n == 0 ||
	    h.n > (uint64_t)1 << 31)
		return apf_error(APF_EINPUT, what,
				 "table header: %u dense, %u categorical "
				 "columns, %llu rows",
				 h.n_dense, h.n_cat, (unsigned long long)h.n);
	uint64_t row = 4ull * h.n_dense + 4ull * h.n_cat + 1;
	uint64_t want = TABLE_HEADER + 4ull * h.n_cat + h.n * row;
	if (want != len)
		return apf_error(APF_EINPUT, what,
				 "%zu bytes, the header says %llu", len,
				 (unsigned long long)want);
	const char *p = (const char *)buf + TABLE_HEADER;
	t->n_dense = (int)h.n_dense;
	t->n_cat = (int)h.n_cat;
	t->n = h.n;
	t->rows = (const uint32_t *)p;
	p += 4 * (size_t)h.n_cat;
	t->dense = (const float *)p;
	p += 4 * (size_t)(h.n * h.n_dense);
	t->cat = (const int32_t *)p;
	p += 4 * (size_t)(h.n * h.n_cat);
	t->label = (const uint8_t *)p;
	for (int f = 0; f < t->n_cat; f++)
		if (t->rows[f] == 0 || t->rows[f] > (1u << 30))
			return apf_error(APF_EINPUT, what,
					 "categorical feature %d has %u rows",
					 f, t->rows[f]);
	for (size_t i = 0; i < t->n; i++) {
		const int32_t *c = t->cat + i * t->n_cat;
		for (int f = 0; f < t->n_cat; f++)
			if (c[f] < 0 || (uint32_t)c[f] >= t->rows[f])
				return apf_error(APF_EINPUT, what,
						 "row %zu: categorical feature "
						 "%d is %d, outside its %u rows",
						 i, f, c[f], t->rows[f]);
		const float *d = t->dense + i * t->n_dense;
		for (int f = 0; f < t->n_dense; f++)
			if (!isfinite(d[f]))
				return apf_error(APF_EINPUT, what,
						 "row %zu: dense feature %d is "
						 "not finite",
						 i, f);
		if (t->label[i] > 1)
			return apf_error(APF_EINPUT, what,
					 "row %zu: label %d is not 0 or 1", i,
					 t->label[i]);
	}
	return 0;
}

void apf_table_free(apf_table *t)
{
	if (!t)
		return;
	if (t->mapped)
		munmap(t->buf, t->len);
	else
		free(t->buf);
	free(t);
}

int apf_table_read(apf_table **out, const char *path, size_t max_bytes)
{
	*out = NULL;
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return apf_error_errno(APF_EINPUT, errno, path, "cannot open");
	struct stat st;
	int rc = fstat(fd, &st) ? apf_error_errno(APF_EINPUT, errno, path, "stat")
				: 0;
	if (!rc && (!S_ISREG(st.st_mode) || (uint64_t)st.st_size > max_bytes))
		rc = apf_error(APF_EINPUT, path,
			       "not a regular file of at most %zu bytes",
			       max_bytes);
	size_t len = rc ? 0 : (size_t)st.st_size;
	void *buf = rc ? NULL : malloc(len ? len : 1);
	if (!rc && !buf)
		rc = apf_error(APF_ENOMEM, path, "out of memory");
	for (size_t got = 0; !rc && got < len;) {
		ssize_t r = read(fd, (char *)buf + got, len - got);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			rc = apf_error_errno(APF_EINPUT, r < 0 ? errno : EIO,
					     path, "read");
		else
			got += (size_t)r;
	}
	close(fd);
	apf_table *t = rc ? NULL : apf_calloc(1, sizeof *t);
	if (!rc && !t)
		rc = apf_error(APF_ENOMEM, path, "out of memory");
	if (!rc)
		rc = apf_table_parse(t, buf, len, path);
	if (rc) {
		free(buf);
		free(t);
		return rc;
	}
	t->buf = buf;
	t->len = len;
	*out = t;
	return 0;
}

/* ---- datasets of either kind ---------------------------------------------- */

int apf_dataset_of_images(apf_dataset **out, apf_image_dataset *images)
{
	*out = NULL;
	apf_dataset *ds = apf_calloc(1, sizeof *ds);
	if (!ds) {
		apf_image_dataset_free(images);
		return apf_error(APF_ENOMEM, "dataset", "out of memory");
	}
	ds->kind = APF_DATA_IMAGES;
	ds->images = images;
	ds->in_floats = images->H * images->W * images->C;
	ds->holds_eval = !images->map;
	*out = ds;
	return 0;
}

int apf_dataset_load_tables(apf_dataset **out, const char *dir,
			    const char *const names[3])
{
	*out = NULL;
	apf_dataset *ds = apf_calloc(1, sizeof *ds);
	if (!ds)
		return apf_error(APF_ENOMEM, dir, "out of memory");
	ds->kind = APF_DATA_TABLE;
	int rc = 0;
	for (int s = 0; !rc && s < 3; s++) {
		char *path = apf_path_join(dir, names[s]);
		rc = path ? apf_table_read(&ds->table[s], path, (size_t)1 << 34)
			  : apf_error(APF_ENOMEM, dir, "out of memory");
		if (!rc && s > 0 &&
		    (ds->table[s]->n_dense != ds->table[0]->n_dense ||
		     ds->table[s]->n_cat != ds->table[0]->n_cat ||
		     memcmp(ds->table[s]->rows, ds->table[0]->rows,
			    4 * (size_t)ds->table[0]->n_cat)))
			rc = apf_error(APF_EINPUT, path,
				       "its columns differ from the train "
				       "table's");
		free(path);
	}
	if (rc) {
		apf_dataset_free(ds);
		return rc;
	}
	ds->in_floats = ds->table[0]->n_dense;
	ds->in_ints = ds->table[0]->n_cat;
	ds->holds_eval = 1;
	*out = ds;
	return 0;
}

void apf_dataset_free(apf_dataset *ds)
{
	if (!ds)
		return;
	apf_image_dataset_free(ds->images);
	for (int s = 0; s < 3; s++)
		apf_table_free(ds->table[s]);
	free(ds);
}

size_t apf_dataset_size(const apf_dataset *ds, int split)
{
	if (split < 0 || split > 2)
		return 0;
	if (ds->kind == APF_DATA_IMAGES)
		return ds->images->split[split].n;
	return ds->table[split] ? ds->table[split]->n : 0;
}

void apf_dataset_gather(const apf_dataset *ds, int split, const uint32_t *idx,
			size_t first, size_t B, float *x, int32_t *xi,
			int32_t *y)
{
	if (ds->kind == APF_DATA_IMAGES) {
		apf_image_gather(ds->images, split, idx, first, B, x, y);
		return;
	}
	const apf_table *t = ds->table[split];
	size_t nd = (size_t)t->n_dense, nc = (size_t)t->n_cat;
	for (size_t b = 0; b < B; b++) {
		size_t i = idx ? idx[b] : first + b;
		memcpy(x + b * nd, t->dense + i * nd, nd * sizeof *x);
		if (xi)
			memcpy(xi + b * nc, t->cat + i * nc, nc * sizeof *xi);
		y[b] = t->label[i];
	}
}
