/*
 * index.c: the run-level index of a run directory with per-unit logs
 * (rundir.h): RUN/index.dsse.json, the runner's signature over each unit's
 * log head, rewritten whenever a unit's session ends.
 *
 * Several writers may share one run directory (apf run -j, the tasks of a
 * Slurm job array on shared storage): each rewrites the index under an
 * exclusive flock of RUN/index.lock, reading the current index, changing
 * its own unit's entry and writing it back atomically, so no writer loses
 * another's entry. flock works across NFS clients on Linux (the kernel maps
 * it to a POSIX lock there).
 */
#include "rundir/rundir.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

#include "sign/sign.h"

int apf_rundir_index_decode(json_t **units, const struct apf_dsse *d,
			    const char *run_json_sha256, const char *file)
{
	*units = NULL;
	if (strcmp(d->payload_type, APF_RUNDIR_INDEX_TYPE))
		return apf_error(APF_EVERIFY, file,
				 "payload type '%s', expected "
				 APF_RUNDIR_INDEX_TYPE,
				 d->payload_type);
	json_error_t je;
	json_t *p = json_loadb((const char *)d->payload, d->payload_len,
			       JSON_REJECT_DUPLICATES, &je);
	if (!p)
		return apf_error(APF_EVERIFY, file, "payload: %s", je.text);
	int rc = 0;
	const char *format = json_string_value(json_object_get(p, "format"));
	const char *sha = json_string_value(json_object_get(p, "run_json_sha256"));
	json_t *u = json_object_get(p, "units");
	if (!json_is_object(p) || json_object_size(p) != 3 || !format ||
	    strcmp(format, APF_RUNDIR_INDEX_FORMAT) || !sha ||
	    !apf_is_hex_digest(sha) || !json_is_object(u))
		rc = apf_error(APF_EVERIFY, file,
			       "payload: expected {\"format\": \""
			       APF_RUNDIR_INDEX_FORMAT "\", "
			       "\"run_json_sha256\", \"units\"}");
	else if (strcmp(sha, run_json_sha256))
		rc = apf_error(APF_EVERIFY, file,
			       "the signed run_json_sha256 is not the SHA-256 "
			       "of run.json (%.16s...): an index of another "
			       "run, or run.json was changed",
			       run_json_sha256);
	const char *name;
	json_t *e;
	json_object_foreach(rc ? NULL : u, name, e)
	{
		json_t *n = json_object_get(e, "records");
		const char *h = json_string_value(json_object_get(e, "head"));
		if (!json_is_object(e) || json_object_size(e) != 2 ||
		    !json_is_integer(n) || json_integer_value(n) < 1 || !h ||
		    !apf_is_hex_digest(h)) {
			rc = apf_error(APF_EVERIFY, file,
				       "units: %.200s: expected {\"records\": "
				       ">= 1, \"head\": SHA-256}",
				       name);
			break;
		}
	}
	if (!rc)
		*units = json_incref(u);
	json_decref(p);
	return rc;
}

/* The index as it stands, signed by key: missing is empty. */
static int index_load(json_t **units, const char *run_dir, const char *path,
		      const apf_key *key, const char *run_json_sha256)
{
	*units = NULL;
	char *text = NULL;
	size_t len = 0;
	int rc = apf_file_read_beneath(&text, &len, run_dir,
				       APF_RUNDIR_INDEX_FILE,
				       APF_MAX_RUN_JSON_BYTES,
				       APF_FILE_MISSING_OK);
	if (!rc && !text) {
		*units = json_object();
		return *units ? 0 : apf_error(APF_ENOMEM, path, "out of memory");
	}
	struct apf_dsse d = {0};
	apf_buf pae = {0};
	if (!rc)
		rc = apf_dsse_parse(&d, text, len);
	if (!rc)
		rc = apf_dsse_pae(&pae, d.payload_type, d.payload, d.payload_len);
	int ok = 0;
	for (size_t i = 0; !rc && i < d.nsigs && !ok; i++)
		ok = apf_key_verify(key, pae.data, pae.len, d.sigs[i],
				    APF_ED25519_SIG) == 0;
	apf_error_clear();
	if (!rc && !ok)
		rc = apf_error(APF_EVERIFY, path,
			       "not signed by this runner's key: the run "
			       "directory's index was replaced");
	if (!rc)
		rc = apf_rundir_index_decode(units, &d, run_json_sha256, path);
	apf_buf_free(&pae);
	apf_dsse_free(&d);
	free(text);
	return rc;
}

int apf_rundir_index_get(json_t **units, const char *run_dir,
			 const struct apf_key *key, const char *run_json_sha256)
{
	char *path = apf_path_join(run_dir, APF_RUNDIR_INDEX_FILE);
	int rc = path ? index_load(units, run_dir, path, key, run_json_sha256)
		      : apf_error(APF_ENOMEM, run_dir, "out of memory");
	free(path);
	return rc;
}

int apf_rundir_index_update(const char *run_dir, const struct apf_key *key,
			    const char *run_json_sha256, const char *unit,
			    uint64_t records, const char *head)
{
	char *path = apf_path_join(run_dir, APF_RUNDIR_INDEX_FILE);
	char *lock = apf_path_join(run_dir, "index.lock");
	if (!path || !lock) {
		free(path);
		free(lock);
		return apf_error(APF_ENOMEM, run_dir, "out of memory");
	}
	int rc = 0;
	int fd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
	if (fd < 0)
		rc = apf_error_errno(APF_EIO, errno, lock, "open");
	while (!rc && flock(fd, LOCK_EX) != 0)
		if (errno != EINTR)
			rc = apf_error_errno(APF_EIO, errno, lock, "lock");
	json_t *units = NULL;
	if (!rc)
		rc = index_load(&units, run_dir, path, key, run_json_sha256);
	if (!rc && unit &&
	    json_object_set_new(units, unit,
				json_pack("{s:I, s:s}", "records",
					  (json_int_t)records, "head", head)))
		rc = apf_error(APF_ENOMEM, path, "out of memory");
	json_t *p = rc ? NULL
		       : json_pack("{s:s, s:s, s:O}", "format",
				   APF_RUNDIR_INDEX_FORMAT, "run_json_sha256",
				   run_json_sha256, "units", units);
	char *payload = p ? json_dumps(p, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
	if (!rc && !payload)
		rc = apf_error(APF_ENOMEM, path, "out of memory");
	apf_buf env = {0};
	if (!rc)
		rc = apf_dsse_sign(key, APF_RUNDIR_INDEX_TYPE, payload,
				   strlen(payload), &env);
	if (!rc)
		rc = apf_file_write(path, env.data, env.len, 0644, 0);
	apf_buf_free(&env);
	free(payload);
	json_decref(p);
	json_decref(units);
	if (fd >= 0)
		close(fd); /* releases the lock */
	free(path);
	free(lock);
	return rc;
}
