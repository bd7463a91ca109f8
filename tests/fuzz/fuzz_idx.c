/*
 * fuzz_idx.c: libFuzzer target for the IDX reader (pkg/data/idx.c), which
 * reads the image datasets' files, gzip'd or plain, under a size cap. Any
 * input must give 0 or a refusal with a message; a file that reads whole
 * must agree with what its header alone says (dimensions, count, item
 * size) and hold count x item size bytes within the cap; a header refused
 * alone must refuse the whole file too.
 */
#include "fuzzlib.h"

#include "data/data.h"

#define CAP (1u << 16)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *dir = fuzz_tmpdir("fuzz_idx");
	char *path = apf_path_join(dir, "x.idx");
	if (!path)
		abort();
	fuzz_put(path, data, size);
	apf_idx head;
	apf_error_clear();
	int hrc = apf_idx_read_header(&head, path, CAP);
	fuzz_expect(hrc, "apf_idx_read_header");
	apf_idx *idx = NULL;
	apf_error_clear();
	int rc = apf_idx_read(&idx, path, CAP);
	fuzz_expect(rc, "apf_idx_read");
	free(path);
	if (rc) {
		if (idx)
			abort();
		return 0;
	}
	if (hrc) {
		fprintf(stderr, "the file read, its header alone was refused\n");
		abort();
	}
	if (!idx || !idx->data || idx->ndim < 1 || idx->ndim > 4 ||
	    idx->ndim != head.ndim || idx->count != head.count ||
	    idx->item_size != head.item_size || idx->count != idx->dims[0] ||
	    idx->count * idx->item_size > CAP)
		abort();
	size_t total = 1;
	for (int i = 0; i < idx->ndim; i++) {
		if (idx->dims[i] != head.dims[i] || idx->dims[i] == 0)
			abort();
		total *= idx->dims[i];
	}
	if (total != idx->count * idx->item_size)
		abort();
	/* Every byte was read: ASan sees a short buffer here. */
	volatile uint8_t sum = 0;
	for (size_t i = 0; i < total; i++)
		sum ^= idx->data[i];
	(void)sum;
	apf_idx_free(idx);
	return 0;
}
