/*
 * fuzz_manifest.c: libFuzzer target for the strict manifest parser
 * (apf_manifest_parse), the gate every signed statement passes. A statement
 * it accepts must be written back by apf_manifest_to_json to text that it
 * accepts again and that is a fixed point (written again, the same bytes),
 * and its file list must reproduce the submission's tree digest.
 */
#include "fuzzlib.h"

#include "manifest/manifest.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *json = fuzz_copy(data, size);
	apf_manifest *m;
	apf_error_clear();
	int rc = apf_manifest_parse(&m, json, size);
	fuzz_expect(rc, "apf_manifest_parse");
	free(json);
	if (rc)
		return 0;
	char digest[65];
	if (apf_manifest_files_digest(m, digest) != 0 ||
	    strcmp(digest, m->submission.tree_digest))
		abort();
	for (size_t i = 0; i < m->submission.nfiles; i++)
		if (apf_manifest_find_file(m, m->submission.files[i].path) !=
		    &m->submission.files[i])
			abort();
	char *once, *twice;
	apf_manifest *back;
	if (apf_manifest_to_json(&once, m) != 0) {
		fprintf(stderr, "to_json: %s\n", apf_error_message());
		abort();
	}
	if (apf_manifest_parse(&back, once, strlen(once)) != 0) {
		fprintf(stderr, "written back, refused: %s\n",
			apf_error_message());
		abort();
	}
	if (apf_manifest_to_json(&twice, back) != 0 || strcmp(once, twice))
		abort();
	free(once);
	free(twice);
	apf_manifest_free(back);
	apf_manifest_free(m);
	return 0;
}
