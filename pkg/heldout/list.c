/*
 * list.c: reading a held-out file in each form apf takes one (heldout.h,
 * apf_heldout_list_load), so that the scorer (apf score --heldout), the
 * runner (apf run --heldout) and the verifier's check of heldout.json all
 * read one file one way:
 *
 *   - a draw file of `apf heldout draw` (an object holding "format") goes
 *     to its one strict reader, apf_heldout_parse, and nothing else here
 *     looks at it;
 *   - AlgoPerf's list (an array of variant workload names);
 *   - a draw by hand ({"seed", "draws": [{"base", "variant"}]}), which
 *     holds nothing else: a draw file with its "format" taken out is
 *     refused, not read in a looser way.
 */
#include "heldout/heldout.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int nomem(const char *path)
{
	return apf_error(APF_ENOMEM, path, "out of memory");
}

/* Appends the variant workload of base (NULL: AlgoPerf's list, where
 * variant is the workload's whole name already). bare: variant is the
 * variant's name alone, as a draw file writes it; else it may be either
 * ("gelu" of "mlp", or "mlp_gelu"). Names listed twice are found at the end
 * (check_unique), all at once. */
static int append(apf_heldout_list *l, const char *path, const char *base,
		  const char *variant, int bare)
{
	apf_buf full = {0};
	int rc;
	size_t nb = base ? strlen(base) : 0;
	if (base && (bare || strncmp(variant, base, nb) || variant[nb] != '_'))
		rc = apf_buf_printf(&full, "%s_%s", base, variant);
	else
		rc = apf_buf_puts(&full, variant);
	if (rc)
		return nomem(path);
	/* Doubling at each power of two (the struct keeps no capacity): one
	 * element more each time copies the whole list under allocators that
	 * never grow in place, such as AddressSanitizer's. */
	if ((l->n & (l->n - 1)) == 0) {
		struct apf_heldout_named *nv =
			realloc(l->v, (l->n ? 2 * l->n : 1) * sizeof *nv);
		if (!nv) {
			apf_buf_free(&full);
			return nomem(path);
		}
		l->v = nv;
	}
	struct apf_heldout_named *v = &l->v[l->n];
	v->workload = full.data;
	v->base = base ? apf_strdup(base) : NULL;
	l->n++;
	return base && !v->base ? nomem(path) : 0;
}

static int cmp_str_ptr(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* No variant listed twice, checked on a sorted copy of the names: a
 * pairwise check is quadratic, and reading a held-out file of 40,000 draws
 * took 17 s, one of 110,000 minutes. */
static int check_unique(const apf_heldout_list *l, const char *path)
{
	if (l->n < 2)
		return 0;
	char **names = apf_calloc(l->n, sizeof *names);
	if (!names)
		return nomem(path);
	for (size_t i = 0; i < l->n; i++)
		names[i] = l->v[i].workload;
	qsort(names, l->n, sizeof *names, cmp_str_ptr);
	int rc = 0;
	for (size_t i = 1; !rc && i < l->n; i++)
		if (!strcmp(names[i - 1], names[i]))
			rc = apf_error(APF_EINPUT, path,
				       "variant %s is listed twice", names[i]);
	free(names);
	return rc;
}

/* Refuses a key of o outside allowed (NULL-terminated). */
static int only_keys(json_t *o, const char *path, const char *where,
		     const char *const *allowed, const char *expected)
{
	const char *k;
	json_t *v;
	json_object_foreach(o, k, v)
	{
		size_t i;
		for (i = 0; allowed[i] && strcmp(allowed[i], k); i++)
			;
		if (!allowed[i])
			return apf_error(APF_EINPUT, path,
					 "%s%s: unknown key (%s)", where, k,
					 expected);
	}
	return 0;
}

static int from_algoperf_list(apf_heldout_list *l, const char *path,
			      json_t *root)
{
	size_t i;
	json_t *v;
	json_array_foreach(root, i, v)
	{
		if (!json_is_string(v) || !json_string_length(v))
			return apf_error(APF_EINPUT, path,
					 "[%zu]: expected a workload name", i);
		int rc = append(l, path, NULL, json_string_value(v), 0);
		if (rc)
			return rc;
	}
	return 0;
}

static int from_hand_draw(apf_heldout_list *l, const char *path, json_t *root)
{
	static const char *const root_keys[] = {"seed", "draws", NULL};
	static const char *const draw_keys[] = {"base", "variant", NULL};
	json_t *draws = json_is_object(root) ? json_object_get(root, "draws")
					     : NULL;
	if (!json_is_array(draws))
		return apf_error(APF_EINPUT, path,
				 "expected AlgoPerf's held-out list (an array "
				 "of workload names) or an apf draw "
				 "({\"seed\": ..., \"draws\": [...]})");
	int rc = only_keys(root, path, "", root_keys,
			   "a draw by hand holds only \"seed\" and "
			   "\"draws\"; a file of apf heldout draw also holds "
			   "\"format\"");
	if (rc)
		return rc;
	json_t *seed = json_object_get(root, "seed");
	if (seed && !json_is_string(seed))
		return apf_error(APF_EINPUT, path,
				 "\"seed\": expected a string");
	if (seed && !(l->seed = apf_strdup(json_string_value(seed))))
		return nomem(path);
	size_t i;
	json_t *d;
	json_array_foreach(draws, i, d)
	{
		json_t *b = json_object_get(d, "base");
		json_t *v = json_object_get(d, "variant");
		if (!json_is_string(b) || !json_string_length(b) ||
		    !json_is_string(v) || !json_string_length(v))
			return apf_error(APF_EINPUT, path,
					 "draws[%zu]: expected {\"base\": "
					 "\"<workload>\", \"variant\": "
					 "\"<variant>\"}",
					 i);
		char where[48];
		snprintf(where, sizeof where, "draws[%zu].", i);
		rc = only_keys(d, path, where, draw_keys,
			       "expected \"base\" and \"variant\"");
		if (!rc)
			rc = append(l, path, json_string_value(b),
				    json_string_value(v), 0);
		if (rc)
			return rc;
	}
	return 0;
}

/* A workload with nothing drawn ("undrawn") names no variant. */
static int from_draw_file(apf_heldout_list *l, const char *path,
			  const char *text, size_t len)
{
	apf_heldout *d = NULL;
	int rc = apf_heldout_parse(&d, text, len, path);
	if (!rc && !(l->seed = apf_strdup(d->seed)))
		rc = nomem(path);
	for (size_t i = 0; !rc && i < d->npicks; i++)
		if (d->picks[i].variant)
			rc = append(l, path, d->picks[i].base,
				    d->picks[i].variant, 1);
	apf_heldout_free(d);
	return rc;
}

int apf_heldout_list_load(apf_heldout_list **out, const char *path)
{
	*out = NULL;
	apf_heldout_list *l = apf_calloc(1, sizeof *l);
	if (!l)
		return nomem(path);
	char *text = NULL;
	size_t len = 0;
	int rc = apf_file_read(&text, &len, path, APF_HELDOUT_MAX_BYTES);
	json_error_t err;
	json_t *root = rc ? NULL
			  : json_loadb(text, len, JSON_REJECT_DUPLICATES, &err);
	if (!rc && !root)
		rc = apf_error(APF_EINPUT, path, "line %d: %s", err.line,
			       err.text);
	else if (!rc && json_is_object(root) && json_object_get(root, "format"))
		rc = from_draw_file(l, path, text, len);
	else if (!rc && json_is_array(root))
		rc = from_algoperf_list(l, path, root);
	else if (!rc)
		rc = from_hand_draw(l, path, root);
	if (!rc)
		rc = check_unique(l, path);
	json_decref(root);
	free(text);
	if (rc) {
		apf_heldout_list_free(l);
		return rc;
	}
	*out = l;
	return 0;
}

void apf_heldout_list_free(apf_heldout_list *l)
{
	if (!l)
		return;
	for (size_t i = 0; i < l->n; i++) {
		free(l->v[i].base);
		free(l->v[i].workload);
	}
	free(l->v);
	free(l->seed);
	free(l);
}
