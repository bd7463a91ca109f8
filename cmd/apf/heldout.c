/*
 * heldout.c: `apf heldout draw ENTRY.apf ... [--seed N] [--json] [-o FILE]`
 * and `apf heldout verify DRAW.json ENTRY.apf ...`: the held-out variant
 * draw, and its recomputation (as the verifier's check 6 does it for a
 * run). The method itself is defined in pkg/heldout/heldout.h and repeated
 * in the help below.
 *
 * Every entry is fully verified (signature by a trusted key, contents
 * against the manifest) before its manifest digest is used: the seed is
 * only unknowable in advance if it comes from sealed entries.
 */
#include "cmd.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "heldout/heldout.h"

static const char method_help[] =
	"Method (apf-heldout-v1). The seed is the lowercase hex SHA-256 of\n"
	"\"apf-heldout-v1\" followed by the entries' manifest digests (hex), "
	"sorted\nbytewise and concatenated; with --seed N it is N in decimal. "
	"For each base\nworkload W the entries name, with variant names V sorted "
	"bytewise (its\n[variant.<v>] sections), h = SHA-256(\"apf-heldout-v1\" "
	"0x00 seed 0x00 W) and\nthe variant drawn is V[first 8 bytes of h, "
	"big-endian, mod len(V)]. A\nworkload without variants has none drawn.\n\n"
	"Entries that cover different workloads are drawn for the union of "
	"their\nworkloads (each entry's own list is in the draw file, and each "
	"gap is\nwarned about). The workloads directory must hold the workload "
	"specs the\nentries were packed against.";

/* The entries, each verified. */
struct entries {
	apf_keyring *kr;
	apf_entry **e;
	size_t n;
};

static void entries_free(struct entries *s)
{
	for (size_t i = 0; i < s->n; i++)
		apf_entry_free(s->e[i]);
	free(s->e);
	apf_keyring_free(s->kr);
}

static int entries_load(struct entries *s, char **paths, size_t n,
			const char *key_path)
{
	*s = (struct entries){0};
	int rc = apf_keyring_default(&s->kr, key_path, "--key");
	if (!rc && !(s->e = apf_calloc(n, sizeof *s->e)))
		rc = apf_error(APF_ENOMEM, "heldout", "out of memory");
	for (size_t i = 0; !rc && i < n; i++) {
		rc = apf_entry_verify(&s->e[i], paths[i], s->kr);
		if (!rc)
			s->n++;
	}
	return rc;
}

/* Entries that lack a workload of the union, after the outputs. */
static void warn_coverage(const struct entries *s, const apf_heldout *h)
{
	for (size_t i = 0; i < s->n; i++) {
		const apf_manifest *m = s->e[i]->manifest;
		for (size_t p = 0; p < h->npicks; p++) {
			size_t k = 0;
			while (k < m->nworkloads &&
			       strcmp(m->workloads[k].name, h->picks[p].base))
				k++;
			if (k == m->nworkloads)
				fprintf(stderr,
					"apf: heldout: warning: %s (%s) does "
					"not cover %s; drawn for the union of "
					"the entries' workloads\n",
					term_text(s->e[i]->path),
					term_text(m->submission.name),
					term_text(h->picks[p].base));
		}
	}
}

static void print_table(const apf_heldout *h)
{
	if (h->method == APF_HELDOUT_FROM_SEED)
		printf("held-out draw for %zu entr%s, seed %s (given with "
		       "--seed)\n",
		       h->nentries, h->nentries == 1 ? "y" : "ies",
		       term_text(h->seed));
	else
		printf("held-out draw for %zu entr%s, seed %s (from their "
		       "manifest digests)\n",
		       h->nentries, h->nentries == 1 ? "y" : "ies",
		       term_text(h->seed));
	for (size_t i = 0; i < h->nentries; i++) {
		const struct apf_heldout_entry *e = &h->entries[i];
		printf("  entry  sha256:%s  %s:", term_text(e->manifest_sha256),
		       term_text(e->submission));
		for (size_t k = 0; k < e->nworkloads; k++)
			printf(" %s", term_text(e->workloads[k]));
		printf("\n");
	}
	printf("%-20s %-20s %s\n", "workload", "variant", "drawn from");
	for (size_t i = 0; i < h->npicks; i++) {
		const struct apf_heldout_pick *p = &h->picks[i];
		printf("%-20s %-20s ", term_text(p->base),
		       p->variant ? term_text(p->variant) : "-");
		if (!p->nvariants)
			printf("(declares no variants)");
		for (size_t k = 0; k < p->nvariants; k++)
			printf("%s%s", k ? ", " : "", term_text(p->variants[k]));
		printf("\n");
	}
}

static int heldout_draw(int argc, char **argv)
{
	const char *key_path = NULL, *seed = NULL, *output = NULL;
	int as_json = 0;
	const struct apf_opt opts[] = {
		{"seed", 0, OPT_STRING, &seed, "N",
		 "draw with this seed instead of the entries' (0 <= N < 2^64)"},
		{"output", 'o', OPT_STRING, &output, "FILE",
		 "also write the draw file (JSON) here, atomically"},
		{"json", 0, OPT_FLAG, &as_json, NULL,
		 "print the draw file on stdout instead of the table"},
		{"key", 0, OPT_STRING, &key_path, "PUB.pem",
		 "trust only this public key (default: $APF_HOME/trusted/)"},
		{0},
	};
	const struct apf_usage usage = {
		"heldout draw ENTRY.apf... [--seed N] [--json] [-o FILE]",
		"Draw one held-out variant per base workload that the entries "
		"cover, seeded by\nthe entries' signed manifests, so nobody "
		"knows the draw before the entries\nare sealed and anyone can "
		"recompute it (`apf heldout verify`). The draw\nfile is what "
		"`apf score --heldout` reads.",
		method_help, 1, -1,
		"apf heldout draw nadamw.apf\n"
		"apf heldout draw nadamw.apf -o draw.json\n"
		"apf heldout draw nadamw.apf --seed 7 --json"};
	int nargs, rc = cmd_start("heldout draw", &usage, opts, argc, argv,
				  &nargs);
	if (rc >= 0)
		return rc;
	struct entries s;
	apf_heldout *h = NULL;
	char *text = NULL;
	rc = entries_load(&s, argv + 1, (size_t)nargs, key_path);
	if (!rc)
		rc = apf_heldout_draw(&h, s.e, s.n, seed);
	if (!rc)
		rc = apf_heldout_to_json(&text, h);
	if (!rc && output)
		rc = apf_file_write(output, text, strlen(text), 0644, 0);
	if (!rc) {
		if (as_json)
			fputs(text, stdout);
		else
			print_table(h);
		fflush(stdout);
		warn_coverage(&s, h);
	}
	free(text);
	apf_heldout_free(h);
	entries_free(&s);
	return rc ? cmd_fail(rc) : 0;
}

static int print_verdict_json(const char *path, const apf_heldout *h, int rc)
{
	json_t *o;
	if (!rc)
		o = json_pack("{s:b, s:s, s:s, s:s, s:I, s:I}", "verified", 1,
			      "draw", utf8_text(path), "method",
			      h->method == APF_HELDOUT_FROM_SEED ? "seed"
								  : "entries",
			      "seed", utf8_text(h->seed), "entries",
			      (json_int_t)h->nentries, "workloads",
			      (json_int_t)h->npicks);
	else
		o = json_pack("{s:b, s:s, s:s, s:i}", "verified", 0, "draw",
			      utf8_text(path), "error", apf_error_message(),
			      "exit_code", apf_exit_code(rc));
	return cmd_print_json(o, 0);
}

static int heldout_verify(int argc, char **argv)
{
	const char *key_path = NULL;
	int as_json = 0;
	const struct apf_opt opts[] = {
		{"json", 0, OPT_FLAG, &as_json, NULL,
		 "print the verdict as JSON on stdout"},
		{"key", 0, OPT_STRING, &key_path, "PUB.pem",
		 "trust only this public key (default: $APF_HOME/trusted/)"},
		{0},
	};
	const struct apf_usage usage = {
		"heldout verify DRAW.json ENTRY.apf... [--json]",
		"Recompute a held-out draw from the entries and compare it with "
		"the draw file:\nthe seed (unless the file says it was given with "
		"--seed), the entries, each\nworkload's variants and the variant "
		"drawn.",
		"Exit 0: the file is the draw of these entries. 1: it is not; "
		"the message names\nthe first difference. 2: unreadable or "
		"malformed input.",
		2, -1,
		"apf heldout verify draw.json nadamw.apf"};
	int nargs, rc = cmd_start("heldout verify", &usage, opts, argc, argv,
				  &nargs);
	if (rc >= 0)
		return rc;
	const char *path = argv[1];
	apf_heldout *claimed = NULL, *expected = NULL;
	struct entries s = {0};
	rc = apf_heldout_load(&claimed, path);
	if (!rc)
		rc = entries_load(&s, argv + 2, (size_t)nargs - 1, key_path);
	if (!rc)
		rc = apf_heldout_draw(&expected, s.e, s.n,
				      claimed->method == APF_HELDOUT_FROM_SEED
					      ? claimed->seed
					      : NULL);
	if (!rc)
		rc = apf_heldout_compare(claimed, expected, path);
	if (as_json) {
		int jrc = print_verdict_json(path, claimed, rc);
		rc = rc ? rc : jrc;
	} else if (!rc) {
		printf("verified %s: the draw of %zu entr%s, seed %s (%s)\n",
		       term_text(path), claimed->nentries,
		       claimed->nentries == 1 ? "y" : "ies",
		       term_text(claimed->seed),
		       claimed->method == APF_HELDOUT_FROM_SEED
			       ? "given with --seed, not derived from the "
				 "entries"
			       : "from their manifest digests");
		for (size_t i = 0; i < claimed->npicks; i++)
			printf("  %-20s %s\n", term_text(claimed->picks[i].base),
			       claimed->picks[i].variant
				       ? term_text(claimed->picks[i].variant)
				       : "- (declares no variants)");
	}
	apf_heldout_free(claimed);
	apf_heldout_free(expected);
	entries_free(&s);
	return rc ? cmd_fail(rc) : 0;
}

static void print_help(FILE *f)
{
	fprintf(f, "usage: apf heldout draw ENTRY.apf... [--seed N] [--json] "
		   "[-o FILE]\n"
		   "       apf heldout verify DRAW.json ENTRY.apf... [--json]\n\n"
		   "The verifiable held-out variant draw: one variant per base "
		   "workload, seeded by\nthe entries' signed manifests. "
		   "'apf heldout draw --help' and 'apf heldout\nverify --help' "
		   "describe each.\n\n%s\n\n"
		   "examples:\n"
		   "  apf heldout draw nadamw.apf -o draw.json\n"
		   "  apf heldout verify draw.json nadamw.apf\n",
		method_help);
}

int cmd_heldout(int argc, char **argv)
{
	if (argc < 2) {
		apf_error(APF_EUSAGE, "heldout",
			  "missing subcommand: draw or verify (see 'apf "
			  "heldout --help')");
		return cmd_fail(APF_EUSAGE);
	}
	const char *sub = argv[1];
	if (!strcmp(sub, "-h") || !strcmp(sub, "--help")) {
		print_help(stdout);
		return 0;
	}
	if (!strcmp(sub, "draw"))
		return heldout_draw(argc - 1, argv + 1);
	if (!strcmp(sub, "verify"))
		return heldout_verify(argc - 1, argv + 1);
	apf_error(APF_EUSAGE, "heldout",
		  "unknown subcommand '%s' (draw or verify; see 'apf heldout "
		  "--help')",
		  sub);
	return cmd_fail(APF_EUSAGE);
}
