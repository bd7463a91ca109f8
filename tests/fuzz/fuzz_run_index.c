/*
 * fuzz_run_index.c: libFuzzer target for the run index's payload decoder
 * (pkg/rundir's apf_rundir_index_decode), which reads RUN/index.dsse.json
 * once its signature checked out - in verify, status, score and in every
 * runner that rewrites it, so a runner with the key, or a bug, may have
 * written anything there. The input is the payload. Any input must give 0
 * or a refusal (APF_EVERIFY) with a message; units that decode are an
 * object whose every entry is {"records": >= 1, "head": SHA-256} for the
 * run.json digest given, and another digest refuses the same payload.
 */
#include "fuzzlib.h"

#include <jansson.h>

#include "rundir/rundir.h"
#include "sign/sign.h"

/* The run.json digest the seeds carry. */
#define RUN_JSON_SHA256                                                        \
	"0f343b0931126a20f133d67c2b018a3b5e6f2a5e5f1ef1c5e0c2bb0d2f1f5c11"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static char type[] = APF_RUNDIR_INDEX_TYPE;
	uint8_t *payload = malloc(size + 1);
	if (!payload)
		abort();
	memcpy(payload, data, size);
	payload[size] = 0; /* as apf_dsse_parse leaves it */
	struct apf_dsse d = {.payload_type = type,
			     .payload = payload,
			     .payload_len = size};
	json_t *units = NULL;
	apf_error_clear();
	int rc = apf_rundir_index_decode(&units, &d, RUN_JSON_SHA256,
					 "index.dsse.json");
	fuzz_expect(rc, "apf_rundir_index_decode");
	if (rc) {
		if (units)
			abort();
		free(payload);
		return 0;
	}
	if (!json_is_object(units))
		abort();
	const char *name;
	json_t *e;
	json_object_foreach(units, name, e)
	{
		json_t *n = json_object_get(e, "records");
		const char *h = json_string_value(json_object_get(e, "head"));
		if (!json_is_object(e) || json_object_size(e) != 2 ||
		    !json_is_integer(n) || json_integer_value(n) < 1 || !h ||
		    !apf_is_hex_digest(h))
			abort();
	}
	json_decref(units);
	/* Bound to its run: the same payload under another run.json. */
	json_t *other = NULL;
	apf_error_clear();
	if (apf_rundir_index_decode(&other, &d,
				    "1111111111111111111111111111111111111111"
				    "111111111111111111111111",
				    "index.dsse.json") != APF_EVERIFY ||
	    other)
		abort();
	free(payload);
	return 0;
}
