/*
 * test_sign.c: Ed25519 keys, key ids, file permissions, DSSE PAE, envelope
 * signing, strict parsing and verification against a keyring, base64.
 */
#include "testlib.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "hash/hash.h"
#include "sign/sign.h"

struct keys {
	char *dir, *priv, *pub;
	apf_key *k;
};

static int setup(void **state)
{
	struct keys *s = calloc(1, sizeof *s);
	s->dir = testlib_tmpdir();
	s->priv = apf_path_join(s->dir, "k.key.pem");
	s->pub = apf_path_join(s->dir, "k.pub.pem");
	assert_apf_ok(apf_key_generate(&s->k));
	assert_apf_ok(apf_key_save(s->k, s->priv, s->pub));
	*state = s;
	return 0;
}

static int teardown(void **state)
{
	struct keys *s = *state;
	apf_key_free(s->k);
	free(s->priv);
	free(s->pub);
	testlib_tmpdir_free(s->dir);
	free(s);
	return 0;
}

static void saved_keys_have_modes_and_round_trip(void **state)
{
	struct keys *s = *state;
	struct stat st;
	assert_int_equal(stat(s->priv, &st), 0);
	assert_int_equal(st.st_mode & 0777, 0600);
	assert_int_equal(stat(s->pub, &st), 0);
	assert_int_equal(st.st_mode & 0777, 0644);
	apf_key *priv, *pub;
	assert_apf_ok(apf_key_load_private(&priv, s->priv));
	assert_apf_ok(apf_key_load_public(&pub, s->pub));
	char a[APF_KEYID_HEX], b[APF_KEYID_HEX], c[APF_KEYID_HEX];
	apf_key_id(s->k, a);
	apf_key_id(priv, b);
	apf_key_id(pub, c);
	assert_string_equal(a, b);
	assert_string_equal(a, c);
	assert_true(apf_is_hex_digest(a));
	assert_true(apf_key_is_private(priv));
	assert_false(apf_key_is_private(pub));
	uint8_t sig[64];
	assert_apf_ok(apf_key_sign(priv, "msg", 3, sig));
	assert_apf_ok(apf_key_verify(pub, "msg", 3, sig, 64));
	assert_int_equal(apf_key_verify(pub, "msh", 3, sig, 64), APF_EVERIFY);
	assert_int_not_equal(apf_key_sign(pub, "msg", 3, sig), 0);
	apf_key_free(priv);
	apf_key_free(pub);
}

static void refuses_overwrite_and_open_private_keys(void **state)
{
	struct keys *s = *state;
	assert_int_equal(apf_key_save(s->k, s->priv, s->pub), APF_EINPUT);
	assert_non_null(strstr(apf_error_message(), "refusing to overwrite"));
	assert_int_equal(chmod(s->priv, 0644), 0);
	apf_key *k;
	assert_int_equal(apf_key_load_private(&k, s->priv), APF_EINPUT);
	assert_non_null(strstr(apf_error_message(), "too open"));
	assert_int_equal(chmod(s->priv, 0600), 0);
	testlib_write_str(s->dir, "junk.pem", "-----BEGIN PUBLIC KEY-----\nxx\n");
	char *junk = apf_path_join(s->dir, "junk.pem");
	assert_int_equal(apf_key_load_public(&k, junk), APF_EINPUT);
	free(junk);
}

static void pae_is_the_dsse_encoding(void **state)
{
	(void)state;
	apf_buf b = {0};
	assert_apf_ok(apf_dsse_pae(&b, "http://example.com/HelloWorld",
				   "hello world", 11));
	/* The example from the DSSE specification. */
	assert_string_equal(b.data, "DSSEv1 29 http://example.com/HelloWorld 11 "
				    "hello world");
	apf_buf_free(&b);
}

static void envelope_verifies_only_with_trusted_key(void **state)
{
	struct keys *s = *state;
	apf_buf env = {0};
	const char *body = "{\"a\": 1}";
	assert_apf_ok(apf_dsse_sign(s->k, "application/x-test", body,
				    strlen(body), &env));
	apf_keyring *kr;
	assert_apf_ok(apf_keyring_new(&kr));
	struct apf_dsse d;
	assert_int_equal(apf_dsse_verify(&d, env.data, env.len, kr), APF_EVERIFY);
	assert_non_null(strstr(apf_error_message(), "no trusted keys: signed by key id "));
	/* With no option named, the hint is --key's. */
	assert_non_null(strstr(apf_error_message(), "give its public key with --key PUB.pem"));
	/* A different key is not trusted. */
	apf_key *other;
	assert_apf_ok(apf_key_generate(&other));
	char *opriv = apf_path_join(s->dir, "o.key.pem");
	char *opub = apf_path_join(s->dir, "o.pub.pem");
	assert_apf_ok(apf_key_save(other, opriv, opub));
	assert_apf_ok(apf_keyring_add(kr, opub));
	assert_int_equal(apf_dsse_verify(&d, env.data, env.len, kr), APF_EVERIFY);
	assert_non_null(strstr(apf_error_message(), "no trusted key verifies"));
	assert_apf_ok(apf_keyring_add(kr, s->pub));
	assert_apf_ok(apf_dsse_verify(&d, env.data, env.len, kr));
	assert_string_equal(d.payload_type, "application/x-test");
	assert_int_equal(d.payload_len, strlen(body));
	assert_memory_equal(d.payload, body, strlen(body));
	assert_string_equal(d.signer_source, s->pub);
	apf_dsse_free(&d);
	/* Signing is deterministic. */
	apf_buf again = {0};
	assert_apf_ok(apf_dsse_sign(s->k, "application/x-test", body,
				    strlen(body), &again));
	assert_string_equal(env.data, again.data);
	apf_buf_free(&again);
	apf_key_free(other);
	free(opriv);
	free(opub);
	apf_keyring_free(kr);
	apf_buf_free(&env);
}

/* Changes one JSON field of an envelope and checks the verdict. */
static void expect_tampered(const char *env, const char *from, const char *to,
			    const apf_keyring *kr, int want)
{
	char *copy = malloc(strlen(env) + strlen(to) + 1);
	const char *at = strstr(env, from);
	assert_non_null(at);
	size_t pre = (size_t)(at - env);
	memcpy(copy, env, pre);
	strcpy(copy + pre, to);
	strcat(copy, at + strlen(from));
	struct apf_dsse d;
	assert_int_equal(apf_dsse_verify(&d, copy, strlen(copy), kr), want);
	free(copy);
}

static void tampered_envelopes_fail(void **state)
{
	struct keys *s = *state;
	apf_buf env = {0};
	assert_apf_ok(apf_dsse_sign(s->k, "t", "payload", 7, &env));
	apf_keyring *kr;
	assert_apf_ok(apf_keyring_new(&kr));
	assert_apf_ok(apf_keyring_add(kr, s->pub));
	/* payload "payload" is cGF5bG9hZA==; change a byte of it */
	expect_tampered(env.data, "cGF5bG9hZA==", "cGF6bG9hZA==", kr, APF_EVERIFY);
	/* Same bytes, non-canonical encoding (padding bits set). */
	expect_tampered(env.data, "cGF5bG9hZA==", "cGF5bG9hZB==", kr, APF_EINPUT);
	expect_tampered(env.data, "\"t\"", "\"u\"", kr, APF_EVERIFY);
	expect_tampered(env.data, "\"payloadType\"", "\"payloadtype\"", kr,
			APF_EINPUT);
	expect_tampered(env.data, "cGF5bG9hZA==", "cGF5bG9hZA!=", kr, APF_EINPUT);
	expect_tampered(env.data, "{", "{\"payload\": \"x\", ", kr, APF_EINPUT);
	expect_tampered(env.data, "\"keyid\"", "\"kid\"", kr, APF_EINPUT);
	expect_tampered(env.data, "{", "[", kr, APF_EINPUT);
	apf_keyring_free(kr);
	apf_buf_free(&env);
}

static void base64_strict_and_url_safe(void **state)
{
	(void)state;
	const uint8_t raw[] = {0xfb, 0xff, 0x00, 0x41};
	apf_buf b = {0};
	assert_apf_ok(apf_base64_encode(&b, raw, 4));
	assert_string_equal(b.data, "+/8AQQ==");
	uint8_t *out;
	size_t n;
	assert_apf_ok(apf_base64_decode(&out, &n, "-_8AQQ", 6));
	assert_int_equal(n, 4);
	assert_memory_equal(out, raw, 4);
	free(out);
	assert_apf_ok(apf_base64_decode(&out, &n, "", 0));
	assert_int_equal(n, 0);
	free(out);
	assert_int_not_equal(apf_base64_decode(&out, &n, "QQ=A", 4), 0);
	assert_int_not_equal(apf_base64_decode(&out, &n, "Q", 1), 0);
	assert_int_not_equal(apf_base64_decode(&out, &n, "QQ QQ", 5), 0);
	assert_int_not_equal(apf_base64_decode(&out, &n, "QQ===", 5), 0);
	apf_buf_free(&b);
}

static void default_key_is_created_once_and_trusted(void **state)
{
	struct keys *s = *state;
	char *home = apf_path_join(s->dir, "home");
	setenv("APF_HOME", home, 1);
	apf_key *a, *b;
	int created;
	assert_apf_ok(apf_key_open_signing(&a, NULL, &created));
	assert_true(created);
	assert_apf_ok(apf_key_open_signing(&b, NULL, &created));
	assert_false(created);
	char ia[APF_KEYID_HEX], ib[APF_KEYID_HEX];
	apf_key_id(a, ia);
	apf_key_id(b, ib);
	assert_string_equal(ia, ib);
	apf_keyring *kr;
	assert_apf_ok(apf_keyring_default(&kr, NULL, "--key"));
	assert_int_equal(apf_keyring_count(kr), 1);
	apf_keyring_free(kr);
	apf_key_free(a);
	apf_key_free(b);
	unsetenv("APF_HOME");
	free(home);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(saved_keys_have_modes_and_round_trip,
						setup, teardown),
		cmocka_unit_test_setup_teardown(
			refuses_overwrite_and_open_private_keys, setup, teardown),
		cmocka_unit_test(pae_is_the_dsse_encoding),
		cmocka_unit_test_setup_teardown(
			envelope_verifies_only_with_trusted_key, setup, teardown),
		cmocka_unit_test_setup_teardown(tampered_envelopes_fail, setup,
						teardown),
		cmocka_unit_test(base64_strict_and_url_safe),
		cmocka_unit_test_setup_teardown(
			default_key_is_created_once_and_trusted, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
