/*
 * sha256.c: streaming SHA-256 over OpenSSL EVP. One fetched EVP_MD is
 * shared by all threads; contexts are per caller.
 */
#include "hash/hash.h"

#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

struct apf_sha256 {
	EVP_MD_CTX *ctx;
};

static EVP_MD *md;
static pthread_once_t md_once = PTHREAD_ONCE_INIT;

static void md_fetch(void)
{
	md = EVP_MD_fetch(NULL, "SHA256", NULL);
}

/* Frees the fetched digest at exit so LeakSanitizer sees a clean heap. */
__attribute__((destructor)) static void md_release(void)
{
	EVP_MD_free(md);
	md = NULL;
}

int apf_sha256_new(apf_sha256 **out)
{
	*out = NULL;
	pthread_once(&md_once, md_fetch);
	if (!md)
		return apf_error(APF_EINTERNAL, "sha256",
				 "OpenSSL has no SHA-256 implementation");
	apf_sha256 *h = malloc(sizeof *h);
	if (!h)
		return apf_error(APF_ENOMEM, "sha256", "out of memory");
	h->ctx = EVP_MD_CTX_new();
	if (!h->ctx || !EVP_DigestInit_ex2(h->ctx, md, NULL)) {
		EVP_MD_CTX_free(h->ctx);
		free(h);
		return apf_error(APF_EINTERNAL, "sha256", "EVP init failed");
	}
	*out = h;
	return 0;
}

int apf_sha256_update(apf_sha256 *h, const void *data, size_t len)
{
	if (len && !EVP_DigestUpdate(h->ctx, data, len))
		return apf_error(APF_EINTERNAL, "sha256", "EVP update failed");
	return 0;
}

int apf_sha256_final(apf_sha256 *h, uint8_t out[APF_SHA256_LEN])
{
	unsigned int n = 0;
	if (!EVP_DigestFinal_ex(h->ctx, out, &n) || n != APF_SHA256_LEN ||
	    !EVP_DigestInit_ex2(h->ctx, md, NULL))
		return apf_error(APF_EINTERNAL, "sha256", "EVP final failed");
	return 0;
}

void apf_sha256_free(apf_sha256 *h)
{
	if (!h)
		return;
	EVP_MD_CTX_free(h->ctx);
	free(h);
}

int apf_sha256_buf(uint8_t out[APF_SHA256_LEN], const void *data, size_t len)
{
	apf_sha256 *h;
	int rc = apf_sha256_new(&h);
	if (rc)
		return rc;
	rc = apf_sha256_update(h, data, len);
	if (!rc)
		rc = apf_sha256_final(h, out);
	apf_sha256_free(h);
	return rc;
}

int apf_sha256_hex(char out[APF_SHA256_HEX], const void *data, size_t len)
{
	uint8_t d[APF_SHA256_LEN];
	int rc = apf_sha256_buf(d, data, len);
	if (rc)
		return rc;
	apf_hex(out, d, sizeof d);
	return 0;
}

int apf_sha256_fd(uint8_t out[APF_SHA256_LEN], uint64_t *size, int fd,
		  uint64_t max, const char *what)
{
	apf_sha256 *h = NULL;
	int rc = apf_sha256_new(&h);
	enum { BUF = 1 << 18 };
	char *buf = rc ? NULL : malloc(BUF);
	if (!rc && !buf)
		rc = apf_error(APF_ENOMEM, what, "out of memory");
	uint64_t total = 0;
	while (!rc) {
		ssize_t n = read(fd, buf, BUF);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			rc = apf_error_errno(APF_EIO, errno, what, "read");
		if (n <= 0)
			break;
		total += (uint64_t)n;
		rc = total > max ? apf_error(APF_EINPUT, what,
					     "grew past %llu bytes while it "
					     "was read",
					     (unsigned long long)max)
				 : apf_sha256_update(h, buf, (size_t)n);
	}
	if (!rc)
		rc = apf_sha256_final(h, out);
	if (size)
		*size = total;
	free(buf);
	if (h)
		apf_sha256_free(h);
	return rc;
}

int apf_sha256_file(uint8_t out[APF_SHA256_LEN], uint64_t *size,
		    const char *path)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return apf_error_errno(APF_EINPUT, errno, path, "open");
	uint64_t total = 0;
	int rc = apf_sha256_fd(out, &total, fd, UINT64_MAX, path);
	close(fd);
	if (!rc && size)
		*size = total;
	return rc;
}
