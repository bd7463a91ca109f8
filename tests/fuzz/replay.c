/*
 * replay.c: a main() for the libFuzzer targets without libFuzzer, so that
 * `make test` runs every target over its committed inputs - the seeds
 * (tests/fuzz/seeds/<target>/) and the reproducers of what the fuzzer
 * once found (tests/fuzz/reproducers/<target>/) - with the invariants the
 * target checks, under the sanitizers in `make check`.
 *
 *     <target> DIR|FILE...     prints "<n> inputs" and exits 0, or aborts
 */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int run_file(const char *path)
{
	FILE *f = fopen(path, "rb");
	if (!f) {
		perror(path);
		return -1;
	}
	uint8_t *buf = NULL;
	size_t len = 0, cap = 0;
	for (;;) {
		if (len == cap) {
			cap = cap ? 2 * cap : 65536;
			uint8_t *n = realloc(buf, cap);
			if (!n)
				abort();
			buf = n;
		}
		size_t got = fread(buf + len, 1, cap - len, f);
		len += got;
		if (got == 0)
			break;
	}
	fclose(f);
	/* An exact-size copy, so that a read past the input's end is seen. */
	uint8_t *exact = malloc(len ? len : 1);
	if (!exact)
		abort();
	memcpy(exact, buf, len);
	free(buf);
	LLVMFuzzerTestOneInput(exact, len);
	free(exact);
	return 0;
}

static int cmp(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

int main(int argc, char **argv)
{
	size_t n = 0;
	for (int i = 1; i < argc; i++) {
		struct stat st;
		if (stat(argv[i], &st) != 0) {
			perror(argv[i]);
			return 2;
		}
		if (!S_ISDIR(st.st_mode)) {
			if (run_file(argv[i]))
				return 2;
			n++;
			continue;
		}
		DIR *d = opendir(argv[i]);
		if (!d) {
			perror(argv[i]);
			return 2;
		}
		char **names = NULL;
		size_t k = 0;
		struct dirent *de;
		while ((de = readdir(d))) {
			if (de->d_name[0] == '.')
				continue;
			names = realloc(names, (k + 1) * sizeof *names);
			if (!names || !(names[k++] = strdup(de->d_name)))
				abort();
		}
		closedir(d);
		qsort(names, k, sizeof *names, cmp);
		for (size_t j = 0; j < k; j++) {
			char path[4096];
			snprintf(path, sizeof path, "%s/%s", argv[i], names[j]);
			fprintf(stderr, "%s\n", path);
			if (run_file(path))
				return 2;
			n++;
			free(names[j]);
		}
		free(names);
	}
	printf("%zu inputs\n", n);
	return 0;
}
