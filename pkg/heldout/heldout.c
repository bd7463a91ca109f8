/*
 * heldout.c: the held-out draw (seed, choice, the draw from entries), the
 * draw file written and parsed back, and the comparison `apf heldout verify`
 * reports. heldout.h defines the method exactly; this file only implements
 * it.
 *
 * Invariant: an apf_heldout's picks are sorted bytewise by base with no base
 * twice, whether it was drawn or parsed, so two of them compare pick by pick.
 */
#include "heldout/heldout.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hash/hash.h"
#include "workload/workload.h"

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static void free_strings(char **v, size_t n)
{
	for (size_t i = 0; v && i < n; i++)
		free(v[i]);
	free(v);
}

static void pick_clear(struct apf_heldout_pick *p)
{
	free(p->base);
	free_strings(p->variants, p->nvariants);
	free(p->variant);
}

void apf_heldout_free(apf_heldout *h)
{
	if (!h)
		return;
	for (size_t i = 0; i < h->nentries; i++) {
		free(h->entries[i].submission);
		free_strings(h->entries[i].workloads, h->entries[i].nworkloads);
	}
	free(h->entries);
	for (size_t i = 0; i < h->npicks; i++)
		pick_clear(&h->picks[i]);
	free(h->picks);
	free(h);
}

/* ---- seed and choice -------------------------------------------------- */

int apf_heldout_seed_from_digests(char out[APF_HELDOUT_SEED_MAX],
				  const char *const *digests, size_t n)
{
	out[0] = 0;
	if (n == 0)
		return apf_error(APF_EINPUT, "heldout",
				 "no entries: the seed is derived from at least "
				 "one manifest digest");
	for (size_t i = 0; i < n; i++)
		if (!apf_is_hex_digest(digests[i]))
			return apf_error(APF_EINPUT, "heldout",
					 "manifest digest '%.70s' is not 64 "
					 "lowercase hex digits",
					 digests[i]);
	const char **sorted = apf_calloc(n, sizeof *sorted);
	if (!sorted)
		return apf_error(APF_ENOMEM, "heldout", "out of memory");
	memcpy(sorted, digests, n * sizeof *sorted);
	qsort(sorted, n, sizeof *sorted, cmp_str);
	int rc = 0;
	for (size_t i = 1; !rc && i < n; i++)
		if (!strcmp(sorted[i - 1], sorted[i]))
			rc = apf_error(APF_EINPUT, "heldout",
				       "manifest sha256:%s is given twice; the "
				       "seed is over distinct entries",
				       sorted[i]);
	apf_sha256 *s = NULL;
	if (!rc)
		rc = apf_sha256_new(&s);
	if (!rc)
		rc = apf_sha256_update(s, APF_HELDOUT_FORMAT,
				       strlen(APF_HELDOUT_FORMAT));
	for (size_t i = 0; !rc && i < n; i++)
		rc = apf_sha256_update(s, sorted[i], 64);
	uint8_t d[APF_SHA256_LEN];
	if (!rc)
		rc = apf_sha256_final(s, d);
	if (!rc)
		apf_hex(out, d, sizeof d);
	apf_sha256_free(s);
	free(sorted);
	return rc;
}

int apf_heldout_seed_from_number(char out[APF_HELDOUT_SEED_MAX],
				 const char *text)
{
	out[0] = 0;
	size_t len = strlen(text);
	int ok = len > 0 && len <= 20 && (text[0] != '0' || len == 1);
	for (size_t i = 0; ok && i < len; i++)
		ok = text[i] >= '0' && text[i] <= '9';
	unsigned long long v = 0;
	if (ok) {
		errno = 0;
		v = strtoull(text, NULL, 10);
		ok = errno == 0;
	}
	if (!ok)
		return apf_error(APF_EINPUT, "heldout",
				 "seed '%.40s': expected a whole number from 0 "
				 "to 18446744073709551615, in decimal without "
				 "sign or leading zeros",
				 text);
	snprintf(out, APF_HELDOUT_SEED_MAX, "%llu", v);
	return 0;
}

int apf_heldout_choose(const char *seed, const char *workload, size_t n,
		       size_t *index)
{
	*index = 0;
	if (n == 0)
		return apf_error(APF_EINPUT, workload,
				 "declares no variant to draw from");
	static const uint8_t zero = 0;
	apf_sha256 *s;
	int rc = apf_sha256_new(&s);
	if (!rc)
		rc = apf_sha256_update(s, APF_HELDOUT_FORMAT,
				       strlen(APF_HELDOUT_FORMAT));
	if (!rc)
		rc = apf_sha256_update(s, &zero, 1);
	if (!rc)
		rc = apf_sha256_update(s, seed, strlen(seed));
	if (!rc)
		rc = apf_sha256_update(s, &zero, 1);
	if (!rc)
		rc = apf_sha256_update(s, workload, strlen(workload));
	uint8_t d[APF_SHA256_LEN];
	if (!rc)
		rc = apf_sha256_final(s, d);
	apf_sha256_free(s);
	if (rc)
		return rc;
	uint64_t v = 0;
	for (int i = 0; i < 8; i++)
		v = v << 8 | d[i];
	*index = (size_t)(v % n);
	return 0;
}

/* ---- building a draw -------------------------------------------------- */

static int nomem(void)
{
	return apf_error(APF_ENOMEM, "heldout", "out of memory");
}

/* Inserts p (taking its contents) at its sorted place; a base already
 * present is refused and p cleared. */
static int insert_pick(apf_heldout *h, struct apf_heldout_pick *p,
		       const char *source)
{
	size_t at = 0;
	while (at < h->npicks && strcmp(h->picks[at].base, p->base) < 0)
		at++;
	if (at < h->npicks && !strcmp(h->picks[at].base, p->base)) {
		int rc = apf_error(APF_EINPUT, source,
				   "workload %s is listed twice", p->base);
		pick_clear(p);
		return rc;
	}
	struct apf_heldout_pick *np =
		realloc(h->picks, (h->npicks + 1) * sizeof *np);
	if (!np) {
		pick_clear(p);
		return nomem();
	}
	h->picks = np;
	memmove(&np[at + 1], &np[at], (h->npicks - at) * sizeof *np);
	np[at] = *p;
	h->npicks++;
	return 0;
}

/* A sorted copy of n strings. */
static int copy_sorted(char ***out, char *const *v, size_t n)
{
	*out = apf_calloc(n, sizeof **out);
	if (!*out)
		return nomem();
	for (size_t i = 0; i < n; i++)
		if (!((*out)[i] = apf_strdup(v[i]))) {
			free_strings(*out, i);
			*out = NULL;
			return nomem();
		}
	qsort(*out, n, sizeof **out, cmp_str);
	return 0;
}

int apf_heldout_pick(apf_heldout *h, const char *base, const char *spec_sha256,
		     char *const *variants, size_t nvariants)
{
	if (!apf_workload_name_ok(base))
		return apf_error(APF_EINPUT, base,
				 "not a workload name (lowercase letters, "
				 "digits, _ and -)");
	if (!apf_is_hex_digest(spec_sha256))
		return apf_error(APF_EINPUT, base,
				 "spec digest is not 64 lowercase hex digits");
	struct apf_heldout_pick p = {0};
	memcpy(p.spec_sha256, spec_sha256, sizeof p.spec_sha256);
	if (!(p.base = apf_strdup(base)))
		return nomem();
	int rc = copy_sorted(&p.variants, variants, nvariants);
	if (!rc)
		p.nvariants = nvariants;
	for (size_t i = 0; !rc && i < p.nvariants; i++) {
		if (!apf_workload_name_ok(p.variants[i]))
			rc = apf_error(APF_EINPUT, base,
				       "variant '%s' is not a variant name",
				       p.variants[i]);
		else if (i && !strcmp(p.variants[i - 1], p.variants[i]))
			rc = apf_error(APF_EINPUT, base,
				       "variant %s is declared twice",
				       p.variants[i]);
	}
	if (!rc && p.nvariants) {
		size_t k;
		rc = apf_heldout_choose(h->seed, base, p.nvariants, &k);
		if (!rc && !(p.variant = apf_strdup(p.variants[k])))
			rc = nomem();
	}
	if (rc) {
		pick_clear(&p);
		return rc;
	}
	return insert_pick(h, &p, "heldout");
}

static int add_entry(apf_heldout *h, const apf_entry *e)
{
	const apf_manifest *m = e->manifest;
	struct apf_heldout_entry *he = &h->entries[h->nentries];
	memcpy(he->manifest_sha256, e->manifest_digest,
	       sizeof he->manifest_sha256);
	if (!(he->submission = apf_strdup(m->submission.name)))
		return nomem();
	he->workloads = apf_calloc(m->nworkloads, sizeof *he->workloads);
	if (!he->workloads) {
		free(he->submission);
		return nomem();
	}
	h->nentries++;
	for (size_t i = 0; i < m->nworkloads; i++) {
		if (!(he->workloads[i] = apf_strdup(m->workloads[i].name)))
			return nomem();
		he->nworkloads++;
	}
	qsort(he->workloads, he->nworkloads, sizeof *he->workloads, cmp_str);
	return 0;
}

static int cmp_entry(const void *a, const void *b)
{
	return strcmp(((const struct apf_heldout_entry *)a)->manifest_sha256,
		      ((const struct apf_heldout_entry *)b)->manifest_sha256);
}

/* One workload of the union, with the entry that first named it. */
struct covered {
	const char *name, *spec, *path;
};

static int cmp_covered(const void *a, const void *b)
{
	return strcmp(((const struct covered *)a)->name,
		      ((const struct covered *)b)->name);
}

static int collect_union(apf_entry *const *entries, size_t n,
			 struct covered **out, size_t *nout)
{
	size_t cap = 0;
	for (size_t i = 0; i < n; i++)
		cap += entries[i]->manifest->nworkloads;
	struct covered *u = apf_calloc(cap, sizeof *u);
	if (!u)
		return nomem();
	size_t k = 0;
	for (size_t i = 0; i < n; i++) {
		const apf_manifest *m = entries[i]->manifest;
		for (size_t j = 0; j < m->nworkloads; j++) {
			const struct apf_manifest_workload *w = &m->workloads[j];
			size_t f = 0;
			while (f < k && strcmp(u[f].name, w->name))
				f++;
			if (f == k) {
				u[k++] = (struct covered){w->name, w->spec_digest,
							  entries[i]->path};
			} else if (strcmp(u[f].spec, w->spec_digest)) {
				int rc = apf_error(
					APF_EINPUT, w->name,
					"%s was packed against workload spec "
					"sha256:%.16s..., %s against "
					"sha256:%.16s...; one draw needs one "
					"spec per workload",
					u[f].path, u[f].spec, entries[i]->path,
					w->spec_digest);
				free(u);
				return rc;
			}
		}
	}
	qsort(u, k, sizeof *u, cmp_covered);
	*out = u;
	*nout = k;
	return 0;
}

/* The variant names of the local workload, after checking that it is the
 * spec the entries were sealed with. */
static int local_variants(const struct covered *c, char ***names, size_t *n)
{
	*names = NULL;
	*n = 0;
	apf_workload_spec *w;
	int rc = apf_workload_spec_load(&w, c->name);
	if (rc)
		return apf_error_prefix(rc, "heldout");
	apf_tree *t = NULL;
	rc = apf_tree_hash(&t, w->dir, NULL);
	char hex[APF_SHA256_HEX];
	if (!rc) {
		apf_hex(hex, t->digest, APF_SHA256_LEN);
		if (strcmp(hex, c->spec))
			rc = apf_error(APF_EINPUT, c->name,
				       "%s has spec sha256:%.16s..., but the "
				       "entries were packed against "
				       "sha256:%.16s... (set APF_WORKLOADS_DIR "
				       "to the workloads they were packed with)",
				       w->dir, hex, c->spec);
	}
	apf_tree_free(t);
	char **v = NULL;
	if (!rc && !(v = apf_calloc(w->nvariants, sizeof *v)))
		rc = nomem();
	for (size_t i = 0; !rc && i < w->nvariants; i++)
		if (!(v[i] = apf_strdup(w->variants[i].name))) {
			free_strings(v, i);
			v = NULL;
			rc = nomem();
		}
	if (!rc) {
		*names = v;
		*n = w->nvariants;
	}
	apf_workload_spec_free(w);
	return rc;
}

int apf_heldout_draw(apf_heldout **out, apf_entry *const *entries, size_t n,
		     const char *seed)
{
	*out = NULL;
	if (n == 0)
		return apf_error(APF_EUSAGE, "heldout",
				 "name at least one entry");
	for (size_t i = 0; i < n; i++)
		for (size_t k = 0; k < i; k++)
			if (!strcmp(entries[i]->manifest_digest,
				    entries[k]->manifest_digest))
				return apf_error(APF_EINPUT, entries[i]->path,
						 "the same entry as %s "
						 "(manifest sha256:%.16s...); "
						 "name each entry once",
						 entries[k]->path,
						 entries[i]->manifest_digest);
	apf_heldout *h = apf_calloc(1, sizeof *h);
	if (!h || !(h->entries = apf_calloc(n, sizeof *h->entries))) {
		free(h);
		return nomem();
	}
	int rc;
	if (seed) {
		h->method = APF_HELDOUT_FROM_SEED;
		rc = apf_heldout_seed_from_number(h->seed, seed);
	} else {
		h->method = APF_HELDOUT_FROM_ENTRIES;
		const char **d = apf_calloc(n, sizeof *d);
		for (size_t i = 0; d && i < n; i++)
			d[i] = entries[i]->manifest_digest;
		rc = d ? apf_heldout_seed_from_digests(h->seed, d, n) : nomem();
		free(d);
	}
	for (size_t i = 0; !rc && i < n; i++)
		rc = add_entry(h, entries[i]);
	if (!rc)
		qsort(h->entries, h->nentries, sizeof *h->entries, cmp_entry);
	struct covered *u = NULL;
	size_t nu = 0;
	if (!rc)
		rc = collect_union(entries, n, &u, &nu);
	for (size_t i = 0; !rc && i < nu; i++) {
		char **v;
		size_t nv;
		rc = local_variants(&u[i], &v, &nv);
		if (!rc) {
			rc = apf_heldout_pick(h, u[i].name, u[i].spec, v, nv);
			free_strings(v, nv);
		}
	}
	free(u);
	if (rc) {
		apf_heldout_free(h);
		return rc;
	}
	*out = h;
	return 0;
}

/* ---- the draw file ---------------------------------------------------- */

static json_t *string_array(char *const *v, size_t n)
{
	json_t *a = json_array();
	for (size_t i = 0; a && i < n; i++)
		if (json_array_append_new(a, json_string(v[i]))) {
			json_decref(a);
			return NULL;
		}
	return a;
}

/* Sets key to value, taking it; a NULL value or object is an allocation
 * failure. */
static int put(json_t *o, const char *key, json_t *value)
{
	if (!o || !value) {
		json_decref(value);
		return -1;
	}
	return json_object_set_new(o, key, value);
}

/* A new object appended to array a (which owns it); NULL on failure. */
static json_t *append_object(json_t *a)
{
	json_t *o = json_object();
	return o && a && json_array_append_new(a, o) == 0 ? o : NULL;
}

static const char *method_name(int method)
{
	return method == APF_HELDOUT_FROM_SEED ? "seed" : "entries";
}

int apf_heldout_to_json(char **out, const apf_heldout *h)
{
	*out = NULL;
	json_t *root = json_object(), *entries = json_array(),
	       *draws = json_array(), *undrawn = json_array();
	int bad = put(root, "format", json_string(APF_HELDOUT_FORMAT)) ||
		  put(root, "method", json_string(method_name(h->method))) ||
		  put(root, "seed", json_string(h->seed)) ||
		  put(root, "entries", json_incref(entries)) ||
		  put(root, "draws", json_incref(draws)) ||
		  put(root, "undrawn", json_incref(undrawn));
	for (size_t i = 0; !bad && i < h->nentries; i++) {
		const struct apf_heldout_entry *e = &h->entries[i];
		json_t *o = append_object(entries);
		bad = put(o, "manifest_sha256", json_string(e->manifest_sha256)) ||
		      put(o, "submission", json_string(e->submission)) ||
		      put(o, "workloads",
			  string_array(e->workloads, e->nworkloads));
	}
	for (size_t i = 0; !bad && i < h->npicks; i++) {
		const struct apf_heldout_pick *p = &h->picks[i];
		json_t *o = append_object(p->variant ? draws : undrawn);
		bad = put(o, "base", json_string(p->base));
		if (!bad && p->variant)
			bad = put(o, "variant", json_string(p->variant)) ||
			      put(o, "variants",
				  string_array(p->variants, p->nvariants));
		bad = bad || put(o, "spec_sha256", json_string(p->spec_sha256));
	}
	/* ASCII alone (non-ASCII as \uXXXX): the file is printed by apf
	 * heldout draw --json too, and the names in it are the entries'. */
	char *s = bad ? NULL
		      : json_dumps(root, JSON_INDENT(2) | JSON_ENSURE_ASCII);
	json_decref(entries);
	json_decref(draws);
	json_decref(undrawn);
	json_decref(root);
	if (!s)
		return nomem();
	apf_buf b = {0};
	int rc = apf_buf_printf(&b, "%s\n", s);
	free(s);
	if (rc) {
		apf_buf_free(&b);
		return nomem();
	}
	*out = b.data;
	return 0;
}

/* Parsing. Every helper reports "<name>: <where>: <why>". */
struct parser {
	const char *name;
};

static int bad(const struct parser *p, const char *where, const char *why)
{
	return apf_error(APF_EINPUT, p->name, "%s: %s", where, why);
}

/* Refuses keys outside allowed and missing ones. */
static int object_keys(const struct parser *p, json_t *o, const char *where,
		       const char *const *allowed)
{
	if (!json_is_object(o))
		return bad(p, where, "expected an object");
	const char *key;
	json_t *v;
	json_object_foreach(o, key, v) {
		const char *const *a = allowed;
		while (*a && strcmp(*a, key))
			a++;
		if (!*a)
			return apf_error(APF_EINPUT, p->name,
					 "%s: unknown field \"%.64s\"", where,
					 key);
	}
	for (const char *const *a = allowed; *a; a++)
		if (!json_object_get(o, *a))
			return apf_error(APF_EINPUT, p->name,
					 "%s: missing field \"%s\"", where, *a);
	return 0;
}

static int get_digest(const struct parser *p, json_t *o, const char *key,
		      const char *where, char out[65])
{
	json_t *v = json_object_get(o, key);
	if (!json_is_string(v) || !apf_is_hex_digest(json_string_value(v)))
		return apf_error(APF_EINPUT, p->name,
				 "%s: \"%s\": expected 64 lowercase hex digits",
				 where, key);
	memcpy(out, json_string_value(v), 65);
	return 0;
}

static int get_name(const struct parser *p, json_t *v, const char *where,
		    char **out)
{
	if (!json_is_string(v) || !apf_workload_name_ok(json_string_value(v)))
		return bad(p, where,
			   "expected a name (lowercase letters, digits, _ "
			   "and -)");
	*out = apf_strdup(json_string_value(v));
	return *out ? 0 : nomem();
}

static int get_names(const struct parser *p, json_t *a, const char *where,
		     char ***out, size_t *n)
{
	*out = NULL;
	*n = 0;
	if (!json_is_array(a))
		return bad(p, where, "expected an array of names");
	size_t k = json_array_size(a);
	char **v = apf_calloc(k, sizeof *v);
	if (!v)
		return nomem();
	for (size_t i = 0; i < k; i++) {
		int rc = get_name(p, json_array_get(a, i), where, &v[i]);
		if (rc) {
			free_strings(v, i);
			return rc;
		}
	}
	*out = v;
	*n = k;
	return 0;
}

static int parse_entries(const struct parser *p, apf_heldout *h, json_t *a)
{
	static const char *const keys[] = {"manifest_sha256", "submission",
					   "workloads", NULL};
	if (!json_is_array(a))
		return bad(p, "entries", "expected an array");
	h->entries = apf_calloc(json_array_size(a), sizeof *h->entries);
	if (!h->entries)
		return nomem();
	for (size_t i = 0; i < json_array_size(a); i++) {
		char where[64];
		snprintf(where, sizeof where, "entries[%zu]", i);
		json_t *o = json_array_get(a, i);
		struct apf_heldout_entry *e = &h->entries[i];
		int rc = object_keys(p, o, where, keys);
		if (!rc)
			rc = get_digest(p, o, "manifest_sha256", where,
					e->manifest_sha256);
		json_t *s = json_object_get(o, "submission");
		if (!rc && (!json_is_string(s) || !json_string_length(s)))
			rc = bad(p, where, "\"submission\": expected a name");
		if (!rc && !(e->submission = apf_strdup(json_string_value(s))))
			rc = nomem();
		if (!rc)
			rc = get_names(p, json_object_get(o, "workloads"), where,
				       &e->workloads, &e->nworkloads);
		/* Counted even when half filled, so free releases it. */
		h->nentries++;
		if (rc)
			return rc;
	}
	return 0;
}

static int cmp_pick(const void *a, const void *b)
{
	return strcmp(((const struct apf_heldout_pick *)a)->base,
		      ((const struct apf_heldout_pick *)b)->base);
}

/* Appends the picks of one list; the caller sorts them once all are in
 * (inserting each at its place would be quadratic in a large file). */
static int parse_picks(const struct parser *p, apf_heldout *h, json_t *a,
		       int drawn)
{
	static const char *const draw_keys[] = {"base", "variant", "variants",
						"spec_sha256", NULL};
	static const char *const undrawn_keys[] = {"base", "spec_sha256", NULL};
	const char *list = drawn ? "draws" : "undrawn";
	if (!json_is_array(a))
		return bad(p, list, "expected an array");
	size_t n = json_array_size(a);
	struct apf_heldout_pick *np =
		realloc(h->picks, (h->npicks + n + 1) * sizeof *np);
	if (!np)
		return nomem();
	h->picks = np;
	for (size_t i = 0; i < n; i++) {
		char where[64];
		snprintf(where, sizeof where, "%s[%zu]", list, i);
		json_t *o = json_array_get(a, i);
		struct apf_heldout_pick *pk = &h->picks[h->npicks];
		memset(pk, 0, sizeof *pk);
		/* Counted before it is filled, so free releases what is. */
		h->npicks++;
		int rc = object_keys(p, o, where,
				     drawn ? draw_keys : undrawn_keys);
		if (!rc)
			rc = get_name(p, json_object_get(o, "base"), where,
				      &pk->base);
		if (!rc)
			rc = get_digest(p, o, "spec_sha256", where,
					pk->spec_sha256);
		if (!rc && drawn)
			rc = get_name(p, json_object_get(o, "variant"), where,
				      &pk->variant);
		if (!rc && drawn)
			rc = get_names(p, json_object_get(o, "variants"), where,
				       &pk->variants, &pk->nvariants);
		if (rc)
			return rc;
	}
	return 0;
}

static int sort_picks(const struct parser *p, apf_heldout *h)
{
	if (h->npicks)
		qsort(h->picks, h->npicks, sizeof *h->picks, cmp_pick);
	for (size_t i = 1; i < h->npicks; i++)
		if (!strcmp(h->picks[i - 1].base, h->picks[i].base))
			return apf_error(APF_EINPUT, p->name,
					 "workload %s is listed twice",
					 h->picks[i].base);
	return 0;
}

static int parse_root(const struct parser *p, apf_heldout *h, json_t *root)
{
	static const char *const keys[] = {"format", "method", "seed", "entries",
					   "draws", "undrawn", NULL};
	int rc = object_keys(p, root, "draw file", keys);
	if (rc)
		return rc;
	json_t *f = json_object_get(root, "format");
	if (!json_is_string(f) || strcmp(json_string_value(f), APF_HELDOUT_FORMAT))
		return bad(p, "format", "expected \"" APF_HELDOUT_FORMAT "\"");
	json_t *m = json_object_get(root, "method");
	const char *ms = json_is_string(m) ? json_string_value(m) : "";
	if (!strcmp(ms, "entries"))
		h->method = APF_HELDOUT_FROM_ENTRIES;
	else if (!strcmp(ms, "seed"))
		h->method = APF_HELDOUT_FROM_SEED;
	else
		return bad(p, "method", "expected \"entries\" or \"seed\"");
	json_t *s = json_object_get(root, "seed");
	if (!json_is_string(s))
		return bad(p, "seed", "expected a string");
	const char *sv = json_string_value(s);
	if (h->method == APF_HELDOUT_FROM_ENTRIES) {
		if (!apf_is_hex_digest(sv))
			return bad(p, "seed",
				   "a seed from entries is 64 lowercase hex "
				   "digits");
		memcpy(h->seed, sv, 65);
	} else if (apf_heldout_seed_from_number(h->seed, sv) != 0) {
		return apf_error_prefix(APF_EINPUT, p->name);
	}
	rc = parse_entries(p, h, json_object_get(root, "entries"));
	if (!rc)
		rc = parse_picks(p, h, json_object_get(root, "draws"), 1);
	if (!rc)
		rc = parse_picks(p, h, json_object_get(root, "undrawn"), 0);
	if (!rc)
		rc = sort_picks(p, h);
	return rc;
}

int apf_heldout_parse(apf_heldout **out, const char *json, size_t len,
		      const char *name)
{
	*out = NULL;
	struct parser p = {name};
	json_error_t err;
	json_t *root = json_loadb(json, len, JSON_REJECT_DUPLICATES, &err);
	if (!root)
		return apf_error(APF_EINPUT, name, "line %d: %s", err.line,
				 err.text);
	apf_heldout *h = apf_calloc(1, sizeof *h);
	int rc = h ? parse_root(&p, h, root) : nomem();
	json_decref(root);
	if (rc) {
		apf_heldout_free(h);
		return rc;
	}
	*out = h;
	return 0;
}

int apf_heldout_load(apf_heldout **out, const char *path)
{
	*out = NULL;
	char *text;
	size_t len;
	int rc = apf_file_read(&text, &len, path, APF_HELDOUT_MAX_BYTES);
	if (rc)
		return rc;
	rc = apf_heldout_parse(out, text, len, path);
	free(text);
	return rc;
}

/* ---- comparison ------------------------------------------------------- */

static int differ(const char *name, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static int differ(const char *name, const char *fmt, ...)
{
	char why[768];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(why, sizeof why, fmt, ap);
	va_end(ap);
	return apf_error(APF_EVERIFY, name, "%s", why);
}

/* Index of the first difference of two string lists, or -1. */
static long first_diff(char *const *a, size_t na, char *const *b, size_t nb)
{
	size_t i = 0;
	for (; i < na && i < nb; i++)
		if (strcmp(a[i], b[i]))
			return (long)i;
	return na == nb ? -1 : (long)i;
}

static void join(char *const *v, size_t n, char *buf, size_t size)
{
	size_t len = 0;
	buf[0] = 0;
	for (size_t i = 0; i < n && len + 1 < size; i++)
		len += (size_t)snprintf(buf + len, size - len, "%s%s",
					i ? ", " : "", v[i]);
}

int apf_heldout_compare(const apf_heldout *c, const apf_heldout *x,
			const char *name)
{
	if (c->method != x->method)
		return differ(name, "method \"%s\", expected \"%s\"",
			      method_name(c->method), method_name(x->method));
	if (strcmp(c->seed, x->seed))
		return differ(name, "seed %s; the entries give %s", c->seed,
			      x->seed);
	for (size_t i = 0; i < c->nentries || i < x->nentries; i++) {
		if (i >= x->nentries)
			return differ(name,
				      "entries[%zu]: manifest sha256:%.16s... "
				      "(%s) is not among the %zu entries given",
				      i, c->entries[i].manifest_sha256,
				      c->entries[i].submission, x->nentries);
		if (i >= c->nentries)
			return differ(name,
				      "lists %zu entries; the entry with "
				      "manifest sha256:%.16s... (%s) is missing",
				      c->nentries, x->entries[i].manifest_sha256,
				      x->entries[i].submission);
		const struct apf_heldout_entry *a = &c->entries[i],
					       *b = &x->entries[i];
		if (strcmp(a->manifest_sha256, b->manifest_sha256))
			return differ(name,
				      "entries[%zu]: manifest sha256:%.16s...; "
				      "the entries given have sha256:%.16s... "
				      "there",
				      i, a->manifest_sha256, b->manifest_sha256);
		if (strcmp(a->submission, b->submission))
			return differ(name,
				      "entries[%zu]: submission '%.64s'; the "
				      "entry says '%.64s'",
				      i, a->submission, b->submission);
		long d = first_diff(a->workloads, a->nworkloads, b->workloads,
				    b->nworkloads);
		if (d >= 0)
			return differ(name,
				      "entries[%zu] (%.64s): workloads differ "
				      "from the entry's (at position %ld)",
				      i, a->submission, d);
	}
	for (size_t i = 0; i < c->npicks || i < x->npicks; i++) {
		if (i >= x->npicks)
			return differ(name,
				      "%s: the entries cover no such workload",
				      c->picks[i].base);
		if (i >= c->npicks || strcmp(c->picks[i].base, x->picks[i].base) > 0)
			return differ(name,
				      "%s: covered by the entries, but not in "
				      "the draw",
				      x->picks[i].base);
		const struct apf_heldout_pick *a = &c->picks[i], *b = &x->picks[i];
		if (strcmp(a->base, b->base))
			return differ(name,
				      "%s: the entries cover no such workload",
				      a->base);
		if (strcmp(a->spec_sha256, b->spec_sha256))
			return differ(name,
				      "%s: spec sha256:%.16s...; the entries "
				      "were packed against sha256:%.16s...",
				      a->base, a->spec_sha256, b->spec_sha256);
		if (first_diff(a->variants, a->nvariants, b->variants,
			       b->nvariants) >= 0) {
			char va[256], vb[256];
			join(a->variants, a->nvariants, va, sizeof va);
			join(b->variants, b->nvariants, vb, sizeof vb);
			return differ(name,
				      "%s: variants [%s]; the workload declares "
				      "[%s]",
				      a->base, va, vb);
		}
		if (!a->variant != !b->variant ||
		    (a->variant && strcmp(a->variant, b->variant)))
			return differ(name,
				      "%s: variant %s%s%s; the draw gives %s%s%s",
				      a->base, a->variant ? "'" : "",
				      a->variant ? a->variant : "(none)",
				      a->variant ? "'" : "", b->variant ? "'" : "",
				      b->variant ? b->variant : "(none)",
				      b->variant ? "'" : "");
	}
	return 0;
}
