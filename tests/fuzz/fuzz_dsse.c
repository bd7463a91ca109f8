/*
 * fuzz_dsse.c: libFuzzer target for the DSSE envelope parser
 * (apf_dsse_parse) and verification against a key generated at start-up.
 * No input the fuzzer makes can carry a valid signature by that key, so
 * verification must refuse every one of them, whatever parse says; an
 * envelope that parses has at least one signature and a NUL after its
 * payload.
 */
#include "fuzzlib.h"

#include "sign/sign.h"

static apf_keyring *ring;

static void setup(void)
{
	const char *dir = fuzz_tmpdir("fuzz_dsse");
	apf_key *k;
	char *priv = apf_path_join(dir, "k.key.pem");
	char *pub = apf_path_join(dir, "k.pub.pem");
	if (apf_key_generate(&k) || apf_key_save(k, priv, pub) ||
	    apf_keyring_new(&ring) || apf_keyring_add(ring, pub))
		abort();
	apf_key_free(k);
	free(priv);
	free(pub);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (!ring)
		setup();
	char *json = fuzz_copy(data, size);
	struct apf_dsse d;
	apf_error_clear();
	int rc = apf_dsse_parse(&d, json, size);
	fuzz_expect(rc, "apf_dsse_parse");
	if (!rc && (d.nsigs == 0 || !d.payload_type || !d.payload ||
		    d.payload[d.payload_len] != 0))
		abort();
	apf_dsse_free(&d);
	apf_error_clear();
	rc = apf_dsse_verify(&d, json, size, ring);
	if (rc == 0) {
		fprintf(stderr, "an envelope verified under a fresh key\n");
		abort();
	}
	fuzz_expect(rc, "apf_dsse_verify");
	apf_dsse_free(&d);
	free(json);
	return 0;
}
