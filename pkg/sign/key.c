/*
 * key.c: Ed25519 key generation, PEM files, key ids, raw signatures, the
 * default signing key and the trusted-key directory under $APF_HOME.
 */
#include "sign/sign.h"

#include <dirent.h>
#include <errno.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "hash/hash.h"

struct apf_key {
	EVP_PKEY *pkey;
	int is_private;
	char id[APF_KEYID_HEX];
};

struct apf_keyring {
	apf_key **keys;
	char **sources;
	size_t n, cap;
	/* The command's option that names keys for this ring ("--key",
	 * "--entry-key"): a refusal says which flag would fix it. */
	const char *option;
};

/* The last OpenSSL error as text, and the queue cleared. */
static const char *ossl_reason(void)
{
	static _Thread_local char buf[256];
	unsigned long e = ERR_get_error();
	if (!e)
		return "unknown OpenSSL error";
	ERR_error_string_n(e, buf, sizeof buf);
	ERR_clear_error();
	return buf;
}

static int key_wrap(apf_key **out, EVP_PKEY *pkey, int is_private)
{
	apf_key *k = apf_calloc(1, sizeof *k);
	if (!k) {
		EVP_PKEY_free(pkey);
		return apf_error(APF_ENOMEM, "key", "out of memory");
	}
	k->pkey = pkey;
	k->is_private = is_private;
	unsigned char *der = NULL;
	int n = i2d_PUBKEY(pkey, &der);
	if (n <= 0) {
		apf_key_free(k);
		return apf_error(APF_EINTERNAL, "key",
				 "cannot encode public key: %s", ossl_reason());
	}
	int rc = apf_sha256_hex(k->id, der, (size_t)n);
	OPENSSL_free(der);
	if (rc) {
		apf_key_free(k);
		return rc;
	}
	*out = k;
	return 0;
}

int apf_key_generate(apf_key **out)
{
	*out = NULL;
	EVP_PKEY *pkey = EVP_PKEY_Q_keygen(NULL, NULL, "ED25519");
	if (!pkey)
		return apf_error(APF_EINTERNAL, "keygen", "Ed25519: %s",
				 ossl_reason());
	return key_wrap(out, pkey, 1);
}

static int pem_to_buf(const apf_key *k, int priv, apf_buf *out)
{
	BIO *bio = BIO_new(BIO_s_mem());
	if (!bio)
		return apf_error(APF_ENOMEM, "key", "out of memory");
	int ok = priv ? PEM_write_bio_PKCS8PrivateKey(bio, k->pkey, NULL, NULL,
						       0, NULL, NULL)
		      : PEM_write_bio_PUBKEY(bio, k->pkey);
	int rc = 0;
	if (!ok) {
		rc = apf_error(APF_EINTERNAL, "key", "PEM encoding: %s",
			       ossl_reason());
	} else {
		char *data;
		long n = BIO_get_mem_data(bio, &data);
		if (apf_buf_append(out, data, (size_t)n) != 0)
			rc = apf_error(APF_ENOMEM, "key", "out of memory");
	}
	BIO_free(bio);
	return rc;
}

int apf_key_public_pem(apf_buf *out, const apf_key *k)
{
	return pem_to_buf(k, 0, out);
}

int apf_key_save(const apf_key *k, const char *priv_path, const char *pub_path)
{
	if (!k->is_private)
		return apf_error(APF_EINTERNAL, priv_path, "not a private key");
	struct stat st;
	if (lstat(priv_path, &st) == 0)
		return apf_error(APF_EINPUT, priv_path,
				 "already exists; refusing to overwrite a key");
	if (lstat(pub_path, &st) == 0)
		return apf_error(APF_EINPUT, pub_path,
				 "already exists; refusing to overwrite a key");
	apf_buf priv = {0}, pub = {0};
	int rc = pem_to_buf(k, 1, &priv);
	if (!rc)
		rc = pem_to_buf(k, 0, &pub);
	if (!rc)
		rc = apf_file_write(priv_path, priv.data, priv.len, 0600,
				    APF_ATOMIC_NOREPLACE);
	if (!rc) {
		rc = apf_file_write(pub_path, pub.data, pub.len, 0644,
				    APF_ATOMIC_NOREPLACE);
		if (rc)
			unlink(priv_path); /* no half a key pair */
	}
	OPENSSL_cleanse(priv.data, priv.len);
	apf_buf_free(&priv);
	apf_buf_free(&pub);
	return rc;
}

static int read_pem(const char *path, apf_buf *out, int check_private_mode)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return apf_error_errno(APF_EINPUT, errno, path, "open key");
	struct stat st;
	if (fstat(fileno(f), &st) != 0) {
		fclose(f);
		return apf_error_errno(APF_EIO, errno, path, "stat");
	}
	if (check_private_mode && (st.st_mode & 077)) {
		fclose(f);
		return apf_error(APF_EINPUT, path,
				 "private key permissions %04o are too open "
				 "(chmod 600 it)",
				 (unsigned)(st.st_mode & 07777));
	}
	char chunk[4096];
	size_t n;
	int rc = 0;
	while ((n = fread(chunk, 1, sizeof chunk, f)) > 0 && !rc)
		if (out->len + n > 65536)
			rc = apf_error(APF_EINPUT, path, "too large for a key");
		else if (apf_buf_append(out, chunk, n))
			rc = apf_error(APF_ENOMEM, path, "out of memory");
	fclose(f);
	OPENSSL_cleanse(chunk, sizeof chunk);
	if (!rc && out->len == 0)
		rc = apf_error(APF_EINPUT, path, "empty file, not a PEM key");
	return rc;
}

int apf_key_load_private(apf_key **out, const char *path)
{
	*out = NULL;
	apf_buf pem = {0};
	int rc = read_pem(path, &pem, 1);
	if (rc)
		return rc;
	BIO *bio = BIO_new_mem_buf(pem.data, (int)pem.len);
	EVP_PKEY *pkey = bio ? PEM_read_bio_PrivateKey(bio, NULL, NULL, NULL)
			     : NULL;
	BIO_free(bio);
	OPENSSL_cleanse(pem.data, pem.len);
	apf_buf_free(&pem);
	if (!pkey)
		return apf_error(APF_EINPUT, path,
				 "not a PEM private key (%s)", ossl_reason());
	if (EVP_PKEY_get_id(pkey) != EVP_PKEY_ED25519) {
		EVP_PKEY_free(pkey);
		return apf_error(APF_EINPUT, path, "not an Ed25519 key");
	}
	return key_wrap(out, pkey, 1);
}

int apf_key_load_public(apf_key **out, const char *path)
{
	*out = NULL;
	apf_buf pem = {0};
	int rc = read_pem(path, &pem, 0);
	if (rc)
		return rc;
	int is_private = strstr(pem.data ? pem.data : "", "PRIVATE KEY") != NULL;
	if (is_private) {
		apf_buf_free(&pem);
		rc = apf_key_load_private(out, path);
		if (!rc)
			(*out)->is_private = 0;
		return rc;
	}
	BIO *bio = BIO_new_mem_buf(pem.data, (int)pem.len);
	EVP_PKEY *pkey = bio ? PEM_read_bio_PUBKEY(bio, NULL, NULL, NULL) : NULL;
	BIO_free(bio);
	apf_buf_free(&pem);
	if (!pkey)
		return apf_error(APF_EINPUT, path, "not a PEM public key (%s)",
				 ossl_reason());
	if (EVP_PKEY_get_id(pkey) != EVP_PKEY_ED25519) {
		EVP_PKEY_free(pkey);
		return apf_error(APF_EINPUT, path, "not an Ed25519 key");
	}
	return key_wrap(out, pkey, 0);
}

void apf_key_id(const apf_key *k, char out[APF_KEYID_HEX])
{
	memcpy(out, k->id, APF_KEYID_HEX);
}

int apf_key_is_private(const apf_key *k)
{
	return k->is_private;
}

int apf_key_sign(const apf_key *k, const void *msg, size_t len,
		 uint8_t sig[APF_ED25519_SIG])
{
	if (!k->is_private)
		return apf_error(APF_EINTERNAL, "sign", "not a private key");
	EVP_MD_CTX *ctx = EVP_MD_CTX_new();
	size_t siglen = APF_ED25519_SIG;
	int ok = ctx && EVP_DigestSignInit(ctx, NULL, NULL, NULL, k->pkey) == 1 &&
		 EVP_DigestSign(ctx, sig, &siglen, msg, len) == 1 &&
		 siglen == APF_ED25519_SIG;
	EVP_MD_CTX_free(ctx);
	if (!ok)
		return apf_error(APF_EINTERNAL, "sign", "Ed25519: %s",
				 ossl_reason());
	return 0;
}

int apf_key_verify(const apf_key *k, const void *msg, size_t len,
		   const uint8_t *sig, size_t siglen)
{
	EVP_MD_CTX *ctx = EVP_MD_CTX_new();
	if (!ctx)
		return apf_error(APF_ENOMEM, "verify", "out of memory");
	int ok = EVP_DigestVerifyInit(ctx, NULL, NULL, NULL, k->pkey) == 1 &&
		 EVP_DigestVerify(ctx, sig, siglen, msg, len) == 1;
	EVP_MD_CTX_free(ctx);
	ERR_clear_error();
	return ok ? 0
		  : apf_error(APF_EVERIFY, "verify",
			      "the Ed25519 signature does not match");
}

void apf_key_free(apf_key *k)
{
	if (!k)
		return;
	EVP_PKEY_free(k->pkey);
	free(k);
}

/* ---- $APF_HOME ----------------------------------------------------------- */

static int home_subdir(const char *sub, char **out)
{
	char *home = apf_home();
	*out = home ? apf_path_join(home, sub) : NULL;
	free(home);
	return *out ? 0 : apf_error(APF_ENOMEM, "APF_HOME", "out of memory");
}

int apf_key_default_paths(char **priv, char **pub)
{
	char *dir;
	*priv = *pub = NULL;
	int rc = home_subdir("keys", &dir);
	if (rc)
		return rc;
	*priv = apf_path_join(dir, "default.key.pem");
	*pub = apf_path_join(dir, "default.pub.pem");
	free(dir);
	if (!*priv || !*pub) {
		free(*priv);
		free(*pub);
		*priv = *pub = NULL;
		return apf_error(APF_ENOMEM, "APF_HOME", "out of memory");
	}
	return 0;
}

int apf_key_trust(const apf_key *k, char **written_path)
{
	char *dir;
	int rc = home_subdir("trusted", &dir);
	if (rc)
		return rc;
	rc = apf_mkdirs(dir, 0700);
	char name[APF_KEYID_HEX + 16];
	snprintf(name, sizeof name, "%.16s.pub.pem", k->id);
	char *path = rc ? NULL : apf_path_join(dir, name);
	free(dir);
	if (rc)
		return rc;
	if (!path)
		return apf_error(APF_ENOMEM, "trust", "out of memory");
	apf_buf pem = {0};
	rc = apf_key_public_pem(&pem, k);
	if (!rc)
		rc = apf_file_write(path, pem.data, pem.len, 0644, 0);
	apf_buf_free(&pem);
	if (!rc && written_path)
		*written_path = path;
	else
		free(path);
	return rc;
}

int apf_key_open_signing(apf_key **out, const char *path, int *created)
{
	*out = NULL;
	if (created)
		*created = 0;
	if (path)
		return apf_key_load_private(out, path);
	char *priv, *pub;
	int rc = apf_key_default_paths(&priv, &pub);
	if (rc)
		return rc;
	struct stat st;
	if (stat(priv, &st) == 0) {
		rc = apf_key_load_private(out, priv);
	} else {
		char *dir = apf_strdup(priv);
		*strrchr(dir, '/') = 0;
		rc = apf_mkdirs(dir, 0700);
		free(dir);
		if (!rc)
			rc = apf_key_generate(out);
		if (!rc)
			rc = apf_key_save(*out, priv, pub);
		if (!rc)
			rc = apf_key_trust(*out, NULL);
		if (rc) {
			apf_key_free(*out);
			*out = NULL;
		} else if (created) {
			*created = 1;
		}
	}
	free(priv);
	free(pub);
	return rc;
}

/* ---- keyring --------------------------------------------------------------- */

int apf_keyring_new(apf_keyring **out)
{
	*out = apf_calloc(1, sizeof **out);
	return *out ? 0 : apf_error(APF_ENOMEM, "keyring", "out of memory");
}

int apf_keyring_add(apf_keyring *kr, const char *path)
{
	apf_key *k;
	int rc = apf_key_load_public(&k, path);
	if (rc)
		return rc;
	for (size_t i = 0; i < kr->n; i++)
		if (!strcmp(kr->keys[i]->id, k->id)) {
			apf_key_free(k);
			return 0;
		}
	if (kr->n == kr->cap) {
		size_t cap = kr->cap ? 2 * kr->cap : 4;
		apf_key **keys = realloc(kr->keys, cap * sizeof *keys);
		if (keys)
			kr->keys = keys;
		char **src = keys ? realloc(kr->sources, cap * sizeof *src) : NULL;
		if (src)
			kr->sources = src;
		if (!keys || !src) {
			apf_key_free(k);
			return apf_error(APF_ENOMEM, "keyring", "out of memory");
		}
		kr->cap = cap;
	}
	kr->sources[kr->n] = apf_strdup(path);
	kr->keys[kr->n++] = k;
	return 0;
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

int apf_keyring_add_dir(apf_keyring *kr, const char *dir)
{
	DIR *d = opendir(dir);
	if (!d)
		return errno == ENOENT ? 0
				       : apf_error_errno(APF_EINPUT, errno, dir,
							 "open");
	char **names = NULL;
	size_t n = 0, cap = 0;
	int rc = 0;
	struct dirent *de;
	while (!rc && (de = readdir(d))) {
		size_t len = strlen(de->d_name);
		if (len < 5 || strcmp(de->d_name + len - 4, ".pem"))
			continue;
		if (n == cap) {
			cap = cap ? 2 * cap : 8;
			char **nn = realloc(names, cap * sizeof *nn);
			if (!nn) {
				rc = apf_error(APF_ENOMEM, dir, "out of memory");
				break;
			}
			names = nn;
		}
		names[n] = apf_path_join(dir, de->d_name);
		if (!names[n])
			rc = apf_error(APF_ENOMEM, dir, "out of memory");
		else
			n++;
	}
	closedir(d);
	if (n)
		qsort(names, n, sizeof *names, cmp_str);
	for (size_t i = 0; i < n; i++) {
		if (!rc)
			rc = apf_keyring_add(kr, names[i]);
		free(names[i]);
	}
	free(names);
	return rc;
}

int apf_keyring_default(apf_keyring **out, const char *key_path,
			const char *option)
{
	int rc = apf_keyring_new(out);
	if (rc)
		return rc;
	(*out)->option = option;
	if (key_path) {
		rc = apf_keyring_add(*out, key_path);
	} else {
		char *dir;
		rc = home_subdir("trusted", &dir);
		if (!rc) {
			rc = apf_keyring_add_dir(*out, dir);
			free(dir);
		}
	}
	if (rc) {
		apf_keyring_free(*out);
		*out = NULL;
	}
	return rc;
}

const char *apf_keyring_option(const apf_keyring *kr)
{
	return kr->option ? kr->option : "--key";
}

size_t apf_keyring_count(const apf_keyring *kr)
{
	return kr->n;
}

void apf_keyring_free(apf_keyring *kr)
{
	if (!kr)
		return;
	for (size_t i = 0; i < kr->n; i++) {
		apf_key_free(kr->keys[i]);
		free(kr->sources[i]);
	}
	free(kr->keys);
	free(kr->sources);
	free(kr);
}

const apf_key *apf_keyring_at(const apf_keyring *kr, size_t i,
			      const char **source)
{
	if (i >= kr->n)
		return NULL;
	if (source)
		*source = kr->sources[i];
	return kr->keys[i];
}
