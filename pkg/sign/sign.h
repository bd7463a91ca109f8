/*
 * sign: Ed25519 keys and DSSE v1 envelopes (docs/design.md section 2.1), through
 * OpenSSL 3's EVP interface.
 *
 * Private keys are PEM PKCS#8 files of mode 0600 (a more open key file is
 * refused, as ssh does); public keys are PEM SubjectPublicKeyInfo. A key id
 * is the lowercase hex SHA-256 of the public key's DER encoding.
 *
 * A DSSE signature is pure Ed25519 over the PAE bytes
 *     "DSSEv1" SP LEN(type) SP type SP LEN(body) SP body
 * so `openssl pkeyutl -verify -pubin -rawin` checks it with no apf code.
 * The keyid in an envelope is only a hint: verification tries every trusted
 * key, and succeeds when any signature verifies under any of them.
 */
#ifndef APF_SIGN_H
#define APF_SIGN_H

#include <stddef.h>
#include <stdint.h>

#include "base/base.h"

#define APF_KEYID_HEX 65
#define APF_ED25519_SIG 64

typedef struct apf_key apf_key;

int apf_key_generate(apf_key **out);
/* Writes priv (0600) and pub (0644); refuses to overwrite either. */
int apf_key_save(const apf_key *k, const char *priv_path, const char *pub_path);
int apf_key_load_private(apf_key **out, const char *path);
/* Loads a public key, or the public half of a private key file. */
int apf_key_load_public(apf_key **out, const char *path);
int apf_key_public_pem(apf_buf *out, const apf_key *k);
void apf_key_id(const apf_key *k, char out[APF_KEYID_HEX]);
int apf_key_is_private(const apf_key *k);
int apf_key_sign(const apf_key *k, const void *msg, size_t len,
		 uint8_t sig[APF_ED25519_SIG]);
/* 0 when sig verifies, APF_EVERIFY when not. */
int apf_key_verify(const apf_key *k, const void *msg, size_t len,
		   const uint8_t *sig, size_t siglen);
void apf_key_free(apf_key *k);

/* $APF_HOME/keys/default.key.pem and .pub.pem; caller frees. */
int apf_key_default_paths(char **priv, char **pub);
/* The key to sign with: path when given, else the default key, created
 * (and trusted) on first use; *created tells whether it was. */
int apf_key_open_signing(apf_key **out, const char *path, int *created);
/* Adds k's public half to $APF_HOME/trusted/ as <key id>.pub.pem. */
int apf_key_trust(const apf_key *k, char **written_path);

/* Trusted public keys. */
typedef struct apf_keyring apf_keyring;
int apf_keyring_new(apf_keyring **out);
int apf_keyring_add(apf_keyring *kr, const char *path);
/* Every *.pem in dir; a missing dir adds nothing. */
int apf_keyring_add_dir(apf_keyring *kr, const char *dir);
/* key_path (the command's option, e.g. "--entry-key") when given, else
 * $APF_HOME/trusted/; a refusal names option as the way to give a key. */
int apf_keyring_default(apf_keyring **out, const char *key_path,
			const char *option);
/* The option a refusal names: the one given to _default, else "--key". */
const char *apf_keyring_option(const apf_keyring *kr);
size_t apf_keyring_count(const apf_keyring *kr);
/* The i-th key and the file it came from; NULL past the end. */
const apf_key *apf_keyring_at(const apf_keyring *kr, size_t i,
			      const char **source);
void apf_keyring_free(apf_keyring *kr);

/* DSSE */
int apf_dsse_pae(apf_buf *out, const char *type, const void *body, size_t len);
/* Envelope JSON (deterministic: Ed25519 is). */
int apf_dsse_sign(const apf_key *k, const char *type, const void *body,
		  size_t len, apf_buf *envelope);

struct apf_dsse {
	char *payload_type;
	uint8_t *payload; /* NUL-terminated for convenience */
	size_t payload_len;
	size_t nsigs;
	char (*keyids)[APF_KEYID_HEX]; /* claimed key ids, unverified */
	uint8_t (*sigs)[APF_ED25519_SIG];
	/* Filled by apf_dsse_verify: */
	char signer[APF_KEYID_HEX];
	char *signer_source;            /* the trusted key file that verified */
};
/* Parses an envelope strictly, without checking any signature (inspect). */
int apf_dsse_parse(struct apf_dsse *out, const char *json, size_t len);
/* Parses and verifies: APF_EVERIFY unless a trusted key verifies a
 * signature over the PAE of the payload. */
int apf_dsse_verify(struct apf_dsse *out, const char *json, size_t len,
		    const apf_keyring *kr);
void apf_dsse_free(struct apf_dsse *d);

/* Standard base64 with padding; decoding also takes the URL-safe alphabet
 * and refuses anything else. */
int apf_base64_encode(apf_buf *out, const void *in, size_t len);
int apf_base64_decode(uint8_t **out, size_t *outlen, const char *in, size_t len);

#endif
