/*
 * bench/verify/shalimit.c: the SHA-256 limit of a log check - the least time
 * any check of a hash-chained log can take on this machine. Each line's
 * digest is the chain's link, so a checker must hash every line on its own
 * (a digest's padding and final block per line, not one stream). This
 * hashes exactly those lines with the digest the log reader uses
 * (pkg/hash, OpenSSL), on THREADS threads (default: every core), each
 * taking an equal share of the bytes, the file already read into memory:
 * no reading, splitting, parsing or checking is timed. Prints one line:
 * lines, bytes, threads, seconds (best of REPS).
 * Usage: shalimit LOG [THREADS [REPS]]
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/base.h"
#include "hash/hash.h"

struct share {
	const char *text;
	const size_t *starts; /* line i is [starts[i], starts[i + 1] - 1) */
	size_t first, last;
	apf_sha256 *h;
	int rc;
	uint8_t fold[APF_SHA256_LEN]; /* keeps the digests from being dropped */
};

static void *hash_share(void *arg)
{
	struct share *s = arg;
	uint8_t d[APF_SHA256_LEN];
	for (size_t i = s->first; i < s->last && !s->rc; i++) {
		size_t a = s->starts[i], len = s->starts[i + 1] - 1 - a;
		s->rc = apf_sha256_update(s->h, s->text + a, len) ||
			apf_sha256_final(s->h, d);
		for (int k = 0; k < APF_SHA256_LEN; k++)
			s->fold[k] ^= d[k];
	}
	return NULL;
}

int main(int argc, char **argv)
{
	if (argc < 2 || argc > 4) {
		fprintf(stderr, "usage: %s LOG [THREADS [REPS]]\n", argv[0]);
		return 2;
	}
	long nt = argc > 2 ? atol(argv[2]) : sysconf(_SC_NPROCESSORS_ONLN);
	long reps = argc > 3 ? atol(argv[3]) : 3;
	if (nt < 1 || nt > 64 || reps < 1) {
		fprintf(stderr, "shalimit: THREADS is 1 to 64, REPS at least 1\n");
		return 2;
	}
	char *text = NULL;
	size_t size = 0;
	if (apf_file_read(&text, &size, argv[1], APF_MAX_LOG_BYTES)) {
		fprintf(stderr, "shalimit: %s\n", apf_error_message());
		return 1;
	}
	/* Line starts, and one past the last newline; a torn tail is not a
	 * line the chain links. */
	size_t n = 0, cap = 1024;
	size_t *starts = malloc(cap * sizeof *starts);
	starts[n++] = 0;
	for (const char *p = text, *e = text + size;
	     (p = memchr(p, '\n', (size_t)(e - p))) != NULL; p++) {
		if (n == cap) {
			cap *= 2;
			starts = realloc(starts, cap * sizeof *starts);
			if (!starts)
				return 1;
		}
		starts[n++] = (size_t)(p - text) + 1;
	}
	size_t lines = n - 1, bytes = starts[lines];
	struct share sh[64];
	pthread_t tid[64];
	/* Equal shares of the bytes, cut at line ends. */
	size_t cut = 0;
	for (long t = 0; t < nt; t++) {
		size_t goal = bytes / (size_t)nt * (size_t)(t + 1), i = cut;
		while (i < lines && (t == nt - 1 || starts[i + 1] <= goal))
			i++;
		sh[t] = (struct share){.text = text, .starts = starts,
				       .first = cut, .last = i};
		cut = i;
		if (apf_sha256_new(&sh[t].h)) {
			fprintf(stderr, "shalimit: %s\n", apf_error_message());
			return 1;
		}
	}
	double best = 0;
	for (long r = 0; r < reps; r++) {
		uint64_t t0 = apf_now_ns();
		for (long t = 1; t < nt; t++)
			if (pthread_create(&tid[t], NULL, hash_share, &sh[t]))
				return 1;
		hash_share(&sh[0]);
		for (long t = 1; t < nt; t++)
			pthread_join(tid[t], NULL);
		double s = (double)(apf_now_ns() - t0) / 1e9;
		if (r == 0 || s < best)
			best = s;
	}
	unsigned fold = 0;
	for (long t = 0; t < nt; t++) {
		if (sh[t].rc) {
			fprintf(stderr, "shalimit: cannot hash\n");
			return 1;
		}
		fold ^= sh[t].fold[0];
		apf_sha256_free(sh[t].h);
	}
	printf("lines %zu bytes %zu threads %ld seconds %.6f fold %02x\n", lines,
	       bytes, nt, best, fold);
	free(starts);
	free(text);
	return 0;
}
