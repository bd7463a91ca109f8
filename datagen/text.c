/*
 * datagen/text.c: the byte-level text corpus of workloads/text_lm, built by
 * `make` from Debian's fortunes package (/usr/share/games/fortunes, never
 * downloaded) into datasets/fortunes/ as three token tables
 * (pkg/data/data.h, format "tokens" in workload.h): train.tab,
 * validation.tab, test.tab.
 *
 * Documents. Every regular file of the directory whose name has no dot
 * (the .dat indexes and the .u8 links are skipped), in name order, is cut
 * into documents at lines that hold a single "%", fortune(6)'s separator;
 * empty documents are dropped.
 *
 * The split rule. A document goes to the test split when the first byte of
 * the SHA-256 of its bytes is below 8, to validation when it is below 16,
 * else to train (each held-out split about 3% of the documents). The rule
 * depends on a document's text alone, so a fortune that appears in two
 * files lands in one split, and a package update that adds documents moves
 * none of the others.
 *
 * Windows. A split's stream is its documents in order, each followed by
 * "%\n", as the files have them. Example i is bytes [i T, i T + T + 1) of
 * the stream (T the context): a model reads the first T and predicts the
 * next byte at each of them, so every byte after the first is a label
 * exactly once. Tokens are bytes (vocabulary 256); a row of the table is
 * the T + 1 tokens as categorical columns of 256 rows, no dense features,
 * label 0.
 *
 * The bytes depend only on the package's files: workload.ini pins the tree
 * digest of the output (`apf hash datasets/fortunes`), and another version
 * of the package gives another digest, which apf run refuses.
 *
 *   text [--source DIR] [--context T] [--report] OUT_DIR
 */
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/base.h"
#include "hash/hash.h"

#define DEFAULT_SOURCE "/usr/share/games/fortunes"
#define DEFAULT_CONTEXT 64
#define VOCAB 256
#define MAX_FILES 1024

struct stream {
	unsigned char *b;
	size_t n, cap;
	long docs;
};

static int append(struct stream *s, const void *p, size_t n)
{
	if (s->n + n > s->cap) {
		size_t cap = s->cap ? s->cap : 1 << 16;
		while (cap < s->n + n)
			cap *= 2;
		unsigned char *b = realloc(s->b, cap);
		if (!b)
			return -1;
		s->b = b;
		s->cap = cap;
	}
	memcpy(s->b + s->n, p, n);
	s->n += n;
	return 0;
}

/* 0: test, 1: validation, 2: train (the rule above). */
static int split_of(const unsigned char *doc, size_t n)
{
	uint8_t h[APF_SHA256_LEN];
	if (apf_sha256_buf(h, doc, n))
		return -1;
	return h[0] < 8 ? 0 : h[0] < 16 ? 1 : 2;
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static unsigned char *read_file(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return NULL;
	unsigned char *buf = NULL;
	size_t cap = 0, n = 0;
	for (;;) {
		if (n == cap) {
			cap = cap ? 2 * cap : 1 << 16;
			unsigned char *b = realloc(buf, cap);
			if (!b) {
				free(buf);
				fclose(f);
				return NULL;
			}
			buf = b;
		}
		size_t k = fread(buf + n, 1, cap - n, f);
		n += k;
		if (k == 0)
			break;
	}
	int bad = ferror(f);
	fclose(f);
	if (bad) {
		free(buf);
		return NULL;
	}
	*len = n;
	return buf;
}

/* The document [start, end) of a file, appended to its split's stream. */
static int add_doc(const unsigned char *buf, size_t start, size_t end,
		   struct stream sp[3])
{
	if (end <= start)
		return 0; /* an empty document */
	int s = split_of(buf + start, end - start);
	if (s < 0 || append(&sp[s], buf + start, end - start) ||
	    append(&sp[s], "%\n", 2))
		return -1;
	sp[s].docs++;
	return 0;
}

/* Cuts one file into documents at its "%" lines. */
static int add_file(const char *path, struct stream sp[3])
{
	size_t len;
	unsigned char *buf = read_file(path, &len);
	if (!buf) {
		fprintf(stderr, "apf: %s: %s\n", path, strerror(errno));
		return -1;
	}
	int rc = 0;
	size_t doc = 0;
	for (size_t line = 0; !rc && line < len;) {
		const unsigned char *nl = memchr(buf + line, '\n', len - line);
		size_t end = nl ? (size_t)(nl - buf) : len;
		if (end - line == 1 && buf[line] == '%') {
			rc = add_doc(buf, doc, line, sp);
			doc = end + 1;
		}
		line = end + 1;
	}
	if (!rc && doc < len)
		rc = add_doc(buf, doc, len, sp);
	free(buf);
	if (rc)
		fprintf(stderr, "apf: %s: out of memory\n", path);
	return rc;
}

/* dir/name, atomically (a temporary file, fsync, rename). */
static int write_file(const char *dir, const char *name, const void *buf,
		      size_t len)
{
	char dst[4096];
	snprintf(dst, sizeof dst, "%s/%s", dir, name);
	if (apf_file_write(dst, buf, len, 0644, 0)) {
		fprintf(stderr, "apf: %s\n", apf_error_message());
		return -1;
	}
	return 0;
}

/* The windows of a stream as a token table. */
static int write_windows(const char *dir, const char *name,
			 const struct stream *s, int T, long *windows)
{
	size_t n = s->n > 1 ? (s->n - 1) / (size_t)T : 0;
	*windows = (long)n;
	if (n == 0) {
		fprintf(stderr, "apf: %s: no window of %d bytes\n", name, T + 1);
		return -1;
	}
	size_t nc = (size_t)T + 1;
	size_t head = 32 + 4 * nc;
	size_t len = head + n * (4 * nc + 1);
	unsigned char *buf = calloc(1, len);
	if (!buf) {
		fprintf(stderr, "apf: %s: out of memory\n", name);
		return -1;
	}
	memcpy(buf, "APFTAB01", 8);
	uint32_t u32[2] = {0, (uint32_t)nc};
	uint64_t u64 = (uint64_t)n;
	memcpy(buf + 8, u32, 8);
	memcpy(buf + 16, &u64, 8);
	for (size_t f = 0; f < nc; f++) {
		uint32_t r = VOCAB;
		memcpy(buf + 32 + 4 * f, &r, 4);
	}
	int32_t *cat = (int32_t *)(buf + head);
	for (size_t i = 0; i < n; i++)
		for (size_t t = 0; t < nc; t++)
			cat[i * nc + t] = s->b[i * (size_t)T + t];
	/* labels (the last n bytes) stay 0 */
	int rc = write_file(dir, name, buf, len);
	free(buf);
	return rc;
}

/* Cross-entropy (nats per byte) of a split's stream under the train
 * stream's byte frequencies (add-one smoothed): what a model that ignores
 * context reaches. */
static double unigram_nats(const struct stream *train, const struct stream *s)
{
	double cnt[VOCAB], tot = 0.0, ce = 0.0;
	for (int v = 0; v < VOCAB; v++)
		cnt[v] = 1.0;
	for (size_t i = 0; i < train->n; i++)
		cnt[train->b[i]] += 1.0;
	for (int v = 0; v < VOCAB; v++)
		tot += cnt[v];
	for (size_t i = 1; i < s->n; i++)
		ce -= log(cnt[s->b[i]] / tot);
	return s->n > 1 ? ce / (double)(s->n - 1) : 0.0;
}

int main(int argc, char **argv)
{
	const char *source = DEFAULT_SOURCE, *out = NULL;
	long T = DEFAULT_CONTEXT;
	int report = 0;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (!strcmp(a, "--source") && v) {
			source = v, i++;
		} else if (!strcmp(a, "--context") && v) {
			char *end;
			T = strtol(v, &end, 10);
			if (*end || T < 1 || T > 4096) {
				fprintf(stderr, "apf: text: --context %s: "
						"expected 1 to 4096\n", v);
				return 2;
			}
			i++;
		} else if (!strcmp(a, "--report")) {
			report = 1;
		} else if (a[0] != '-' && !out) {
			out = a;
		} else {
			fprintf(stderr, "usage: text [--source DIR] [--context T] "
					"[--report] OUT_DIR\n");
			return 2;
		}
	}
	if (!out) {
		fprintf(stderr, "usage: text [--source DIR] [--context T] "
				"[--report] OUT_DIR\n");
		return 2;
	}
	DIR *d = opendir(source);
	if (!d) {
		fprintf(stderr, "apf: %s: %s (Debian's fortunes package: "
				"apt-get install fortunes)\n",
			source, strerror(errno));
		return 1;
	}
	char *names[MAX_FILES];
	int nf = 0;
	struct dirent *e;
	while ((e = readdir(d)) && nf < MAX_FILES) {
		if (strchr(e->d_name, '.'))
			continue;
		char path[4096];
		struct stat st;
		snprintf(path, sizeof path, "%s/%s", source, e->d_name);
		if (lstat(path, &st) || !S_ISREG(st.st_mode))
			continue;
		names[nf++] = strdup(e->d_name);
	}
	closedir(d);
	if (nf == 0) {
		fprintf(stderr, "apf: %s: no fortune files\n", source);
		return 1;
	}
	qsort(names, (size_t)nf, sizeof *names, cmp_str);
	struct stream sp[3] = {{0}};
	int rc = 0;
	for (int i = 0; !rc && i < nf; i++) {
		char path[4096];
		snprintf(path, sizeof path, "%s/%s", source, names[i]);
		rc = add_file(path, sp);
	}
	for (int i = 0; i < nf; i++)
		free(names[i]);
	if (!rc && mkdir(out, 0755) && errno != EEXIST) {
		fprintf(stderr, "apf: %s: %s\n", out, strerror(errno));
		rc = -1;
	}
	static const char *const files[3] = {"test.tab", "validation.tab",
					     "train.tab"};
	static const char *const split[3] = {"test", "validation", "train"};
	long windows[3] = {0};
	/* train first: the held-out files are written last, so a complete
	 * test.tab (make's target) means all three are there */
	for (int s = 2; !rc && s >= 0; s--)
		rc = write_windows(out, files[s], &sp[s], (int)T, &windows[s]);
	if (!rc && report)
		for (int s = 2; s >= 0; s--)
			printf("%-10s %6ld documents %8zu bytes %6ld windows; "
			       "unigram cross-entropy %.4f nats/byte\n",
			       split[s], sp[s].docs, sp[s].n, windows[s],
			       unigram_nats(&sp[2], &sp[s]));
	for (int s = 0; s < 3; s++)
		free(sp[s].b);
	return rc ? 1 : 0;
}
