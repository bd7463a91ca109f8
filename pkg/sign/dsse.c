/*
 * dsse.c: DSSE v1 envelopes (https://github.com/secure-systems-lab/dsse):
 * the pre-authentication encoding, signing, strict parsing and verification
 * against a keyring; and base64 through OpenSSL.
 *
 * Parsing is strict: exactly the fields payloadType, payload, signatures
 * (each with sig and an optional keyid), no duplicate keys, valid base64,
 * 64-byte signatures. A verified envelope names the trusted key file that
 * verified it.
 */
#include "sign/sign.h"

#include <jansson.h>
#include <openssl/evp.h>
#include <stdlib.h>
#include <string.h>

#define MAX_SIGS 16

int apf_base64_encode(apf_buf *out, const void *in, size_t len)
{
	size_t need = 4 * ((len + 2) / 3) + 1;
	char *tmp = malloc(need);
	if (!tmp)
		return apf_error(APF_ENOMEM, "base64", "out of memory");
	/* EVP_EncodeBlock takes an int length; payloads stay far below. */
	if (len > 0x3fffffff) {
		free(tmp);
		return apf_error(APF_EINPUT, "base64", "input too large");
	}
	int n = EVP_EncodeBlock((unsigned char *)tmp, in, (int)len);
	int rc = apf_buf_append(out, tmp, (size_t)n) ? APF_ENOMEM : 0;
	free(tmp);
	return rc ? apf_error(rc, "base64", "out of memory") : 0;
}

int apf_base64_decode(uint8_t **out, size_t *outlen, const char *in, size_t len)
{
	*out = NULL;
	*outlen = 0;
	if (len > 0x3ffffff0)
		return apf_error(APF_EINPUT, "base64", "input too large");
	/* Normalise the URL-safe alphabet and missing padding, refusing any
	 * other character and '=' anywhere but at the end. */
	size_t padded = (len + 3) / 4 * 4;
	char *norm = malloc(padded + 1);
	if (!norm)
		return apf_error(APF_ENOMEM, "base64", "out of memory");
	size_t pad = 0;
	for (size_t i = 0; i < len; i++) {
		char c = in[i];
		if (c == '-')
			c = '+';
		else if (c == '_')
			c = '/';
		int ok = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
			 (c >= '0' && c <= '9') || c == '+' || c == '/';
		if (c == '=') {
			pad++;
		} else if (!ok || pad) {
			free(norm);
			return apf_error(APF_EINPUT, "base64",
					 "invalid character at offset %zu", i);
		}
		norm[i] = c;
	}
	if (pad > 2 || (pad && len % 4)) {
		free(norm);
		return apf_error(APF_EINPUT, "base64", "bad padding");
	}
	for (size_t i = len; i < padded; i++, pad++)
		norm[i] = '=';
	if (pad > 2) {
		free(norm);
		return apf_error(APF_EINPUT, "base64", "bad length");
	}
	norm[padded] = 0;
	uint8_t *buf = malloc(padded / 4 * 3 + 1);
	if (!buf) {
		free(norm);
		return apf_error(APF_ENOMEM, "base64", "out of memory");
	}
	int n = padded ? EVP_DecodeBlock(buf, (unsigned char *)norm,
					 (int)padded)
		       : 0;
	int canonical = 0;
	if (n >= 0 && (size_t)n >= pad) {
		/* Refuse non-zero padding bits: one byte string, one encoding. */
		apf_buf again = {0};
		canonical = apf_base64_encode(&again, buf, (size_t)n - pad) == 0 &&
			    again.len == padded &&
			    memcmp(again.data, norm, padded) == 0;
		apf_buf_free(&again);
	}
	free(norm);
	if (!canonical) {
		free(buf);
		return apf_error(APF_EINPUT, "base64", "malformed");
	}
	*outlen = (size_t)n - pad;
	buf[*outlen] = 0;
	*out = buf;
	return 0;
}

int apf_dsse_pae(apf_buf *out, const char *type, const void *body, size_t len)
{
	if (apf_buf_printf(out, "DSSEv1 %zu %s %zu ", strlen(type), type, len) ||
	    apf_buf_append(out, body, len))
		return apf_error(APF_ENOMEM, "dsse", "out of memory");
	return 0;
}

int apf_dsse_sign(const apf_key *k, const char *type, const void *body,
		  size_t len, apf_buf *envelope)
{
	apf_buf pae = {0}, payload = {0}, sig64 = {0};
	uint8_t sig[APF_ED25519_SIG];
	char keyid[APF_KEYID_HEX];
	int rc = apf_dsse_pae(&pae, type, body, len);
	if (!rc)
		rc = apf_key_sign(k, pae.data, pae.len, sig);
	if (!rc)
		rc = apf_base64_encode(&payload, body, len);
	if (!rc)
		rc = apf_base64_encode(&sig64, sig, sizeof sig);
	if (!rc) {
		apf_key_id(k, keyid);
		json_t *env = json_pack("{s:s, s:s, s:[{s:s, s:s}]}",
					"payloadType", type, "payload",
					payload.data, "signatures", "keyid",
					keyid, "sig", sig64.data);
		char *s = env ? json_dumps(env, JSON_INDENT(2)) : NULL;
		if (!s || apf_buf_puts(envelope, s) || apf_buf_puts(envelope, "\n"))
			rc = apf_error(APF_ENOMEM, "dsse", "out of memory");
		free(s);
		json_decref(env);
	}
	apf_buf_free(&pae);
	apf_buf_free(&payload);
	apf_buf_free(&sig64);
	return rc;
}

void apf_dsse_free(struct apf_dsse *d)
{
	if (!d)
		return;
	free(d->payload_type);
	free(d->payload);
	free(d->keyids);
	free(d->sigs);
	free(d->signer_source);
	memset(d, 0, sizeof *d);
}

static int bad(const char *why)
{
	return apf_error(APF_EINPUT, "envelope", "%s", why);
}

int apf_dsse_parse(struct apf_dsse *out, const char *json, size_t len)
{
	memset(out, 0, sizeof *out);
	json_error_t jerr;
	json_t *root = json_loadb(json, len, JSON_REJECT_DUPLICATES, &jerr);
	if (!root)
		return apf_error(APF_EINPUT, "envelope",
				 "not valid JSON (line %d: %s)", jerr.line,
				 jerr.text);
	int rc = 0;
	const char *key;
	json_t *v;
	if (!json_is_object(root))
		rc = bad("not a JSON object");
	json_object_foreach(root, key, v)
	{
		if (!rc && strcmp(key, "payloadType") &&
		    strcmp(key, "payload") && strcmp(key, "signatures"))
			rc = apf_error(APF_EINPUT, "envelope",
				       "unexpected field '%s'", key);
	}
	json_t *type = json_object_get(root, "payloadType");
	json_t *payload = json_object_get(root, "payload");
	json_t *sigs = json_object_get(root, "signatures");
	if (!rc && !json_is_string(type))
		rc = bad("payloadType: missing or not a string");
	if (!rc && !json_is_string(payload))
		rc = bad("payload: missing or not a string");
	if (!rc && (!json_is_array(sigs) || json_array_size(sigs) == 0 ||
		    json_array_size(sigs) > MAX_SIGS))
		rc = bad("signatures: expected a list of 1 to 16 signatures");
	if (!rc) {
		out->payload_type = apf_strdup(json_string_value(type));
		rc = apf_base64_decode(&out->payload, &out->payload_len,
				       json_string_value(payload),
				       json_string_length(payload));
		if (rc)
			apf_error_prefix(rc, "envelope: payload");
	}
	if (!rc) {
		out->nsigs = json_array_size(sigs);
		out->keyids = apf_calloc(out->nsigs, sizeof *out->keyids);
		out->sigs = apf_calloc(out->nsigs, sizeof *out->sigs);
		if (!out->payload_type || !out->keyids || !out->sigs)
			rc = apf_error(APF_ENOMEM, "envelope", "out of memory");
	}
	for (size_t i = 0; !rc && i < out->nsigs; i++) {
		json_t *s = json_array_get(sigs, i);
		json_object_foreach(s, key, v)
		{
			if (!rc && strcmp(key, "keyid") && strcmp(key, "sig"))
				rc = apf_error(APF_EINPUT, "envelope",
					       "signature %zu: unexpected field "
					       "'%s'",
					       i, key);
		}
		json_t *kid = json_object_get(s, "keyid");
		json_t *sig = json_object_get(s, "sig");
		if (rc)
			break;
		if (!json_is_object(s) || !json_is_string(sig)) {
			rc = apf_error(APF_EINPUT, "envelope",
				       "signature %zu: sig missing", i);
			break;
		}
		if (kid && (!json_is_string(kid) ||
			    json_string_length(kid) >= APF_KEYID_HEX)) {
			rc = apf_error(APF_EINPUT, "envelope",
				       "signature %zu: malformed keyid", i);
			break;
		}
		if (kid)
			strcpy(out->keyids[i], json_string_value(kid));
		uint8_t *raw;
		size_t rawlen;
		rc = apf_base64_decode(&raw, &rawlen, json_string_value(sig),
				       json_string_length(sig));
		if (rc) {
			apf_error_prefix(rc, "envelope: sig");
			break;
		}
		if (rawlen != APF_ED25519_SIG)
			rc = apf_error(APF_EINPUT, "envelope",
				       "signature %zu: %zu bytes, an Ed25519 "
				       "signature has 64",
				       i, rawlen);
		else
			memcpy(out->sigs[i], raw, APF_ED25519_SIG);
		free(raw);
	}
	json_decref(root);
	if (rc)
		apf_dsse_free(out);
	return rc;
}

int apf_dsse_verify(struct apf_dsse *out, const char *json, size_t len,
		    const apf_keyring *kr)
{
	int rc = apf_dsse_parse(out, json, len);
	if (rc)
		return rc;
	const char *signer = out->nsigs && out->keyids[0][0] ? out->keyids[0]
							     : "unknown";
	if (apf_keyring_count(kr) == 0) {
		rc = apf_error(APF_EVERIFY, "signature",
			       "no trusted keys: signed by key id %.16s... "
			       "(give its public key with %s PUB.pem or add "
			       "it to $APF_HOME/trusted/)",
			       signer, apf_keyring_option(kr));
		apf_dsse_free(out);
		return rc;
	}
	apf_buf pae = {0};
	rc = apf_dsse_pae(&pae, out->payload_type, out->payload,
			  out->payload_len);
	int verified = 0;
	for (size_t s = 0; !rc && !verified && s < out->nsigs; s++) {
		for (size_t i = 0; !verified; i++) {
			const char *src;
			const apf_key *k = apf_keyring_at(kr, i, &src);
			if (!k)
				break;
			if (apf_key_verify(k, pae.data, pae.len, out->sigs[s],
					   APF_ED25519_SIG) == 0) {
				verified = 1;
				apf_key_id(k, out->signer);
				out->signer_source = apf_strdup(src);
			}
		}
	}
	apf_buf_free(&pae);
	if (!rc && !verified) {
		rc = apf_error(APF_EVERIFY, "signature",
			       "no trusted key verifies it (signed by key id "
			       "%.16s..., %zu trusted key%s tried; give the "
			       "signer's public key with %s PUB.pem)",
			       signer, apf_keyring_count(kr),
			       apf_keyring_count(kr) == 1 ? "" : "s",
			       apf_keyring_option(kr));
	}
	if (rc)
		apf_dsse_free(out);
	return rc;
}
