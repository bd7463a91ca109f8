/*
 * verify.c: `apf verify ENTRY.apf [--key PUB.pem] [--json]`: the entry's
 * integrity, its signature by a trusted key, the manifest's schema, and every
 * file against the manifest. Exit 0 verified, 1 a check failed (the message
 * names it), 2 not an entry / truncated / unreadable.
 */
#include "cmd.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "entry/entry.h"

static void print_entry(const apf_entry *e)
{
	const apf_manifest *m = e->manifest;
	char sz[32];
	printf("verified %s\n", e->path);
	printf("  entry       sha256:%s (%s)\n", e->file_digest,
	       human_bytes(e->file_bytes, sz));
	printf("  manifest    sha256:%s\n", e->manifest_digest);
	printf("  signed by   %s\n              (trusted key %s)\n", e->signer,
	       e->signer_source ? e->signer_source : "?");
	printf("  submission  %s, %s tuning, %zu files, tree sha256:%s\n",
	       m->submission.name, m->submission.ruleset, m->submission.nfiles,
	       m->submission.tree_digest);
	for (size_t i = 0; i < m->nworkloads; i++)
		printf("  workload    %s (%s), spec sha256:%s\n",
		       m->workloads[i].name, m->workloads[i].variant,
		       m->workloads[i].spec_digest);
	for (size_t i = 0; i < m->ndatasets; i++)
		printf("  dataset     %s, %llu files, tree sha256:%s\n",
		       m->datasets[i].name,
		       (unsigned long long)m->datasets[i].files,
		       m->datasets[i].tree_digest);
}

static void print_json(const char *path, const apf_entry *e, int rc)
{
	json_t *o;
	if (e) {
		o = json_pack("{s:b, s:s, s:s, s:s, s:s, s:s, s:s, s:s, s:I}",
			      "verified", 1, "entry", path, "entry_sha256",
			      e->file_digest, "manifest_sha256",
			      e->manifest_digest, "signer", e->signer,
			      "trusted_key",
			      e->signer_source ? e->signer_source : "",
			      "submission", e->manifest->submission.name,
			      "submission_tree_sha256",
			      e->manifest->submission.tree_digest, "files",
			      (json_int_t)e->manifest->submission.nfiles);
	} else {
		o = json_pack("{s:b, s:s, s:s, s:i}", "verified", 0, "entry", path,
			      "error", apf_error_message(), "exit_code",
			      apf_exit_code(rc));
	}
	char *s = o ? json_dumps(o, JSON_INDENT(2)) : NULL;
	if (s)
		printf("%s\n", s);
	free(s);
	json_decref(o);
}

int cmd_verify(int argc, char **argv)
{
	const char *key_path = NULL;
	int as_json = 0;
	const struct apf_opt opts[] = {
		{"key", 0, OPT_STRING, &key_path, "PUB.pem",
		 "trust only this public key (default: $APF_HOME/trusted/)"},
		{"json", 0, OPT_FLAG, &as_json, NULL,
		 "print the verdict as JSON on stdout"},
		{0},
	};
	const struct apf_usage usage = {
		"verify ENTRY.apf [--key PUB.pem] [--json]",
		"Verify an entry: the archive's integrity, the manifest's "
		"signature by a trusted\nkey, the manifest's schema, and every "
		"file against the manifest (type, mode,\nsize, SHA-256; nothing "
		"extra, nothing missing).",
		"Exit 0: verified. 1: a check failed; the message names it. "
		"2: not an entry,\ntruncated, or unreadable.",
		1, 1};
	int nargs, rc = cmd_start("verify", &usage, opts, argc, argv, &nargs);
	if (rc >= 0)
		return rc;
	const char *path = argv[1];
	apf_keyring *kr = NULL;
	apf_entry *e = NULL;
	rc = apf_keyring_default(&kr, key_path);
	if (!rc)
		rc = apf_entry_verify(&e, path, kr);
	if (as_json)
		print_json(path, rc ? NULL : e, rc);
	else if (!rc)
		print_entry(e);
	apf_entry_free(e);
	apf_keyring_free(kr);
	return rc ? cmd_fail(rc) : 0;
}
