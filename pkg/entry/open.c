/*
 * open.c: reading an entry back: full verification, extraction, and
 * inspection without trust.
 *
 * Verification streams the archive once: the first member must be the
 * signed manifest, which is verified and parsed before any other member is
 * looked at; each later member is then hashed and compared with its manifest
 * record. Once the archive opened (its integrity trailer checked out), every
 * later failure is a verification failure (exit 1): the file is a
 * well-formed entry whose contents are not what was signed.
 */
#include "entry/entry.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "archive/archive.h"
#include "tuning/tuning.h"

#define MAX_ENVELOPE (16u << 20)

void apf_entry_free(apf_entry *e)
{
	if (!e)
		return;
	apf_manifest_free(e->manifest);
	free(e->statement);
	free(e->signer_source);
	free(e->path);
	free(e);
}

/* The entry file's digest and size. The file is opened the way every file
 * from someone else is (a regular file, without blocking) and capped, so
 * an entry.apf that is a FIFO, /dev/zero or a sparse giant is refused
 * before it is read. */
static int hash_entry_file(const char *path, char hex[65], uint64_t *bytes)
{
	int fd;
	struct stat st;
	int rc = apf_file_open_regular(&fd, &st, path, APF_FILE_FOLLOW);
	if (rc)
		return rc;
	if ((uint64_t)st.st_size > APF_MAX_ENTRY_BYTES) {
		close(fd);
		return apf_error(APF_EINPUT, path,
				 "%llu bytes, larger than the %llu-byte limit "
				 "of an entry",
				 (unsigned long long)st.st_size,
				 (unsigned long long)APF_MAX_ENTRY_BYTES);
	}
	uint8_t d[APF_SHA256_LEN];
	uint64_t total = 0;
	rc = apf_sha256_fd(d, &total, fd, APF_MAX_ENTRY_BYTES, path);
	if (!rc) {
		apf_hex(hex, d, sizeof d);
		*bytes = total;
	}
	close(fd);
	return rc;
}

/* Failures after the archive opened mean the contents are not what was
 * signed; report them as verification failures. */
static int as_verify(int rc)
{
	return rc == APF_EINPUT ? APF_EVERIFY : rc;
}

static int read_member(apf_archive_reader *r, size_t max, apf_buf *out)
{
	char buf[65536];
	for (;;) {
		long n = apf_archive_read(r, buf, sizeof buf);
		if (n < 0)
			return (int)n;
		if (n == 0)
			return 0;
		if (out->len + (size_t)n > max)
			return apf_error(APF_EVERIFY, APF_MANIFEST_MEMBER,
					 "larger than %zu bytes", max);
		if (apf_buf_append(out, buf, (size_t)n))
			return apf_error(APF_ENOMEM, "entry", "out of memory");
	}
}

static int hash_member(apf_archive_reader *r,
		       const struct apf_archive_member *m,
		       uint8_t d[APF_SHA256_LEN])
{
	if (m->type == APF_MEMBER_SYMLINK)
		return apf_sha256_buf(d, m->link, strlen(m->link));
	apf_sha256 *h;
	int rc = apf_sha256_new(&h);
	char buf[65536];
	while (!rc) {
		long n = apf_archive_read(r, buf, sizeof buf);
		if (n < 0)
			rc = (int)n;
		else if (n == 0)
			break;
		else
			rc = apf_sha256_update(h, buf, (size_t)n);
	}
	if (!rc)
		rc = apf_sha256_final(h, d);
	apf_sha256_free(h);
	return rc;
}

/* Compares one member with its manifest record. */
static int check_member(const apf_manifest *man,
			const struct apf_archive_member *m,
			const uint8_t d[APF_SHA256_LEN])
{
	size_t plen = strlen(APF_SUBMISSION_PREFIX);
	if (strncmp(m->name, APF_SUBMISSION_PREFIX, plen))
		return apf_error(APF_EVERIFY, m->name,
				 "unexpected member (not under submission/)");
	const struct apf_manifest_file *f =
		apf_manifest_find_file(man, m->name + plen);
	if (!f)
		return apf_error(APF_EVERIFY, m->name, "not in the manifest");
	int mode = m->type == APF_MEMBER_SYMLINK ? 777
		   : (m->mode & 0111)		 ? 755
						 : 644;
	char type = m->type == APF_MEMBER_SYMLINK ? 'l' : 'f';
	if (type != f->type || mode != f->mode)
		return apf_error(APF_EVERIFY, m->name,
				 "type or mode %c %d, the manifest says %c %d",
				 type, mode, f->type, f->mode);
	if (m->size != f->size)
		return apf_error(APF_EVERIFY, m->name,
				 "%llu bytes, the manifest says %llu",
				 (unsigned long long)m->size,
				 (unsigned long long)f->size);
	char hex[65];
	apf_hex(hex, d, APF_SHA256_LEN);
	if (strcmp(hex, f->sha256))
		return apf_error(APF_EVERIFY, m->name,
				 "content differs from the manifest (sha256 "
				 "%.16s..., expected %.16s...)",
				 hex, f->sha256);
	return 0;
}

/* Reads the first member, the envelope, and verifies or inspects it. */
static int read_manifest(apf_archive_reader *r, apf_entry *e,
			 const apf_keyring *kr, int require_trust)
{
	struct apf_archive_member m;
	int rc = apf_archive_next(r, &m);
	if (rc == 0)
		return apf_error(APF_EVERIFY, "archive", "empty: no manifest");
	if (rc < 0)
		return as_verify(rc);
	if (strcmp(m.name, APF_MANIFEST_MEMBER) || m.type != APF_MEMBER_FILE)
		return apf_error(APF_EVERIFY, "archive",
				 "first member is '%s', not " APF_MANIFEST_MEMBER,
				 m.name);
	apf_buf env = {0};
	rc = as_verify(read_member(r, MAX_ENVELOPE, &env));
	struct apf_dsse d = {0};
	if (!rc)
		rc = apf_sha256_hex(e->envelope_digest,
				    env.data ? env.data : "", env.len);
	if (!rc) {
		rc = apf_dsse_verify(&d, env.data ? env.data : "", env.len, kr);
		if (rc == APF_EVERIFY && !require_trust) {
			e->signature_trusted = 0;
			rc = apf_dsse_parse(&d, env.data, env.len);
			if (!rc)
				snprintf(e->signer, sizeof e->signer, "%s",
					 d.keyids[0]);
		} else if (!rc) {
			e->signature_trusted = 1;
			memcpy(e->signer, d.signer, sizeof e->signer);
			e->signer_source = apf_strdup(d.signer_source);
		}
		if (rc)
			rc = as_verify(apf_error_prefix(rc, APF_MANIFEST_MEMBER));
	}
	apf_buf_free(&env);
	if (!rc && strcmp(d.payload_type, APF_PAYLOAD_TYPE))
		rc = apf_error(APF_EVERIFY, APF_MANIFEST_MEMBER,
			       "payload type '%s', expected " APF_PAYLOAD_TYPE,
			       d.payload_type);
	if (!rc) {
		rc = apf_manifest_parse(&e->manifest, (char *)d.payload,
					d.payload_len);
		if (rc)
			rc = as_verify(rc);
	}
	if (!rc) {
		e->statement = (char *)d.payload; /* NUL-terminated */
		e->statement_len = d.payload_len;
		d.payload = NULL;
		rc = apf_sha256_hex(e->manifest_digest, e->statement,
				    e->statement_len);
	}
	apf_dsse_free(&d);
	return rc;
}

static int open_entry(apf_entry **out, const char *path, const apf_keyring *kr,
		      int full)
{
	*out = NULL;
	apf_entry *e = apf_calloc(1, sizeof *e);
	if (!e || !(e->path = apf_strdup(path))) {
		free(e);
		return apf_error(APF_ENOMEM, path, "out of memory");
	}
	int rc = hash_entry_file(path, e->file_digest, &e->file_bytes);
	apf_archive_reader *r = NULL;
	if (!rc)
		rc = apf_archive_reader_open(&r, path, NULL);
	if (!rc)
		rc = read_manifest(r, e, kr, full);
	if (!rc && full) {
		const apf_manifest *man = e->manifest;
		char *seen = apf_calloc(man->submission.nfiles, 1);
		if (!seen)
			rc = apf_error(APF_ENOMEM, path, "out of memory");
		struct apf_archive_member m;
		while (!rc) {
			int more = apf_archive_next(r, &m);
			if (more < 0)
				rc = as_verify(more);
			if (more <= 0)
				break;
			uint8_t d[APF_SHA256_LEN];
			rc = as_verify(hash_member(r, &m, d));
			if (!rc)
				rc = check_member(man, &m, d);
			if (!rc) {
				const struct apf_manifest_file *f =
					apf_manifest_find_file(
						man, m.name + strlen(
							     APF_SUBMISSION_PREFIX));
				seen[f - man->submission.files] = 1;
			}
		}
		for (size_t i = 0; !rc && i < man->submission.nfiles; i++)
			if (!seen[i])
				rc = apf_error(APF_EVERIFY,
					       man->submission.files[i].path,
					       "in the manifest but missing "
					       "from the archive");
		free(seen);
	}
	apf_archive_reader_close(r);
	if (rc) {
		apf_error_prefix(rc, path);
		apf_entry_free(e);
		return rc;
	}
	*out = e;
	return 0;
}

int apf_entry_verify(apf_entry **out, const char *path, const apf_keyring *kr)
{
	return open_entry(out, path, kr, 1);
}

int apf_entry_inspect(apf_entry **out, const char *path, const apf_keyring *kr)
{
	return open_entry(out, path, kr, 0);
}

/* The second pass must extract exactly what the first pass verified: the
 * same envelope bytes and every manifest file once. */
struct extract_check {
	const apf_entry *e;
	size_t files;
};

static int extract_check(void *user, const struct apf_archive_member *m,
			 const uint8_t sha256[32])
{
	struct extract_check *x = user;
	if (!strcmp(m->name, APF_MANIFEST_MEMBER)) {
		char hex[65];
		apf_hex(hex, sha256, APF_SHA256_LEN);
		if (strcmp(hex, x->e->envelope_digest))
			return apf_error(APF_EVERIFY, m->name,
					 "changed since it was verified");
		return 0;
	}
	x->files++;
	return check_member(x->e->manifest, m, sha256);
}

int apf_entry_extract(apf_entry **out, const char *path, const char *dest,
		      const apf_keyring *kr)
{
	int rc = apf_entry_verify(out, path, kr);
	if (rc)
		return rc;
	struct extract_check x = {*out, 0};
	rc = apf_archive_extract(path, dest, NULL, extract_check, &x);
	if (!rc && x.files != (*out)->manifest->submission.nfiles) {
		rc = apf_error(APF_EVERIFY, dest,
			       "extracted %zu files, the manifest lists %zu",
			       x.files, (*out)->manifest->submission.nfiles);
		/* The clean-up must not replace the message of the failure. */
		char why[1024];
		apf_error_take(why, sizeof why);
		apf_remove_tree(dest);
		apf_error_restore(rc, why);
	}
	if (rc) {
		apf_error_prefix(as_verify(rc), path);
		apf_entry_free(*out);
		*out = NULL;
		return as_verify(rc);
	}
	return 0;
}

int apf_entry_read_file(char **out, size_t *len, const apf_entry *e,
			const char *rel, size_t max)
{
	*out = NULL;
	const struct apf_manifest_file *f = apf_manifest_find_file(e->manifest, rel);
	if (!f || f->type != 'f')
		return apf_error(APF_EINPUT, e->path, "%s: no such file in the entry",
				 rel);
	if (f->size > max)
		return apf_error(APF_EINPUT, rel, "larger than %zu bytes", max);
	apf_archive_reader *r;
	int rc = apf_archive_reader_open(&r, e->path, NULL);
	apf_buf b = {0};
	int found = 0;
	while (!rc && !found) {
		struct apf_archive_member m;
		int more = apf_archive_next(r, &m);
		if (more <= 0) {
			rc = more;
			break;
		}
		if (strncmp(m.name, APF_SUBMISSION_PREFIX,
			    strlen(APF_SUBMISSION_PREFIX)) ||
		    strcmp(m.name + strlen(APF_SUBMISSION_PREFIX), rel))
			continue;
		found = 1;
		rc = read_member(r, max, &b);
	}
	apf_archive_reader_close(r);
	if (!rc && !found)
		rc = apf_error(APF_EVERIFY, e->path, "%s: missing from the archive",
			       rel);
	char hex[65];
	if (!rc)
		rc = apf_sha256_hex(hex, b.data ? b.data : "", b.len);
	if (!rc && strcmp(hex, f->sha256))
		rc = apf_error(APF_EVERIFY, rel,
			       "changed since the entry was verified");
	if (rc) {
		apf_buf_free(&b);
		return rc;
	}
	if (!b.data && apf_buf_append(&b, "", 0))
		return apf_error(APF_ENOMEM, rel, "out of memory");
	*out = b.data;
	if (len)
		*len = b.len;
	return 0;
}

/* Which search-space file the entry packs: pack allows exactly one. */
static int entry_space_name(const apf_entry *e, const char **out)
{
	static const char *const names[] = {APF_SEARCH_SPACE_INI,
					    APF_SEARCH_SPACE_JSON};
	const apf_manifest *m = e->manifest;
	*out = NULL;
	for (size_t k = 0; k < 2; k++)
		for (size_t i = 0; i < m->submission.nfiles; i++) {
			if (strcmp(m->submission.files[i].path, names[k]))
				continue;
			if (*out)
				return apf_error(APF_EVERIFY, e->path,
						 "packs both " APF_SEARCH_SPACE_INI
						 " and " APF_SEARCH_SPACE_JSON);
			*out = names[k];
		}
	if (!*out)
		return apf_error(APF_EVERIFY, e->path,
				 "external tuning without " APF_SEARCH_SPACE_INI
				 " or " APF_SEARCH_SPACE_JSON);
	return 0;
}

int apf_entry_plan(struct apf_plan **out, const apf_entry *e)
{
	*out = NULL;
	const apf_manifest *m = e->manifest;
	apf_search_space *space = NULL;
	int rc = 0;
	if (!strcmp(m->tuning.ruleset, "external")) {
		const char *name;
		char *text = NULL;
		size_t len;
		char hex[65];
		rc = entry_space_name(e, &name);
		if (!rc)
			rc = apf_entry_read_file(&text, &len, e, name, 1 << 20);
		if (!rc)
			rc = apf_sha256_hex(hex, text, len);
		if (!rc && strcmp(hex, m->tuning.search_space_digest))
			rc = apf_error(APF_EVERIFY, e->path,
				       "%s differs from the manifest's "
				       "search-space digest",
				       name);
		if (!rc && strlen(text) != len)
			rc = apf_error(APF_EINPUT, name,
				       "holds a NUL byte; not a text file");
		if (!rc)
			rc = apf_search_space_parse(&space, text, name);
		if (!rc)
			rc = apf_search_space_check_trials(space,
							   m->tuning.trials);
		free(text);
	}
	char **names = NULL;
	if (!rc) {
		names = apf_calloc(m->nworkloads, sizeof *names);
		for (size_t i = 0; names && i < m->nworkloads; i++)
			names[i] = m->workloads[i].name;
		if (!names)
			rc = apf_error(APF_ENOMEM, "plan", "out of memory");
	}
	if (!rc)
		rc = apf_plan_build(out, names, m->nworkloads, m->tuning.studies,
				    m->tuning.trials, m->tuning.seed, space);
	free(names);
	apf_search_space_free(space);
	return rc;
}
