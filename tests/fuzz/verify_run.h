/*
 * verify_run.h: what the verifier's fuzz targets share - a copy of the
 * committed run directory tests/fuzz/data/verify_run (made by
 * make_verify_run.py: entry.apf, run.json, the signed log, the runner's key
 * pair, the entry signer's public key) in the scratch directory, the keys, and the run of
 * the verifier over it, whose status must be one a hostile run directory
 * may get: verified, a failed check, unfinished, or an input error - each
 * with its message - never a broken invariant, a usage error or a crash.
 */
#ifndef APF_FUZZ_VERIFY_RUN_H
#define APF_FUZZ_VERIFY_RUN_H

#include "fuzzlib.h"

#include <unistd.h>

#include "hash/hash.h"
#include "rundir/rundir.h"
#include "runlog/runlog.h"
#include "sign/sign.h"
#include "verify/verify.h"

#define TEMPLATE APF_SOURCE_DIR "/tests/fuzz/data/verify_run"

struct verify_fixture {
	char *run;                 /* the scratch run directory */
	apf_keyring *runner_keys, *entry_keys;
	apf_key *runner;           /* signs the head as the runner does */
	char run_json_sha256[65];  /* of the template's run.json */
};

static void copy_in(const char *dir, const char *name, int mode)
{
	char *from = apf_path_join(TEMPLATE, name), *to = apf_path_join(dir, name);
	char *data = NULL;
	size_t len = 0;
	if (!from || !to || apf_file_read(&data, &len, from, 1 << 24) ||
	    apf_file_write(to, data, len, mode, 0))
		abort();
	free(data);
	free(from);
	free(to);
}

static struct verify_fixture *verify_fixture(const char *name)
{
	static struct verify_fixture f;
	if (f.run)
		return &f;
	/* The workloads the template's entry was packed for. */
	setenv("APF_WORKLOADS_DIR", APF_SOURCE_DIR "/tests/data/workloads", 0);
	f.run = apf_path_join(fuzz_tmpdir(name), "run");
	if (!f.run || apf_mkdirs(f.run, 0755))
		abort();
	copy_in(f.run, "entry.apf", 0644);
	copy_in(f.run, "run.json", 0644);
	copy_in(f.run, "log.jsonl", 0644);
	copy_in(f.run, "log.dsse.json", 0644);
	/* git keeps no file modes but the executable bit: the runner's key is
	 * loaded from a private copy, as apf insists (0600). */
	const char *keys = fuzz_tmpdir(name);
	copy_in(keys, "runner.key.pem", 0600);
	char *key = apf_path_join(keys, "runner.key.pem");
	if (!key)
		abort();
	char *text = NULL;
	size_t len = 0;
	if (apf_keyring_default(&f.runner_keys, TEMPLATE "/runner.pub.pem",
				"--key") ||
	    apf_keyring_default(&f.entry_keys, TEMPLATE "/entry.pub.pem",
				 "--entry-key") ||
	    apf_key_load_private(&f.runner, key) ||
	    apf_file_read(&text, &len, TEMPLATE "/run.json", 1 << 24) ||
	    apf_sha256_hex(f.run_json_sha256, text, len)) {
		fprintf(stderr, "%s: %s\n", TEMPLATE, apf_error_message());
		abort();
	}
	free(text);
	free(key);
	return &f;
}

/* Runs the verifier (the log's checks, or every check) and holds its
 * status to what a hostile run directory may get. */
static void verify_fixture_check(const struct verify_fixture *f, int log_only)
{
	apf_verify_report *r = NULL;
	struct apf_verify_opts o = {.runner_keys = f->runner_keys,
				    .entry_keys = f->entry_keys,
				    .log_only = log_only};
	apf_error_clear();
	int rc = apf_verify_run(&r, f->run, &o);
	if (!r)
		abort();
	if (rc != 0 && rc != APF_EVERIFY && rc != APF_EABORT &&
	    rc != APF_EINPUT) {
		fprintf(stderr, "apf_verify_run: status %d: %s\n", rc,
			apf_error_message());
		abort();
	}
	if (rc && !strcmp(apf_error_message(), "unknown error"))
		abort();
	/* The replay driver's regression run says what each input gave. */
	if (getenv("APF_FUZZ_VERBOSE"))
		fprintf(stderr, "  status %d%s%s\n", rc, rc ? ": " : "",
			rc ? apf_error_message() : "");
	/* Verified means every check that ran passed, the log's included. */
	if (rc == 0 && (r->check[APF_VERIFY_LOG].outcome != APF_VERIFY_PASSED ||
			r->check[APF_VERIFY_TIMING].outcome != APF_VERIFY_PASSED ||
			!r->complete))
		abort();
	apf_verify_report_free(r);
}

#endif
