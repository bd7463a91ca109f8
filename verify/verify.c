/*
 * verify.c: `apf verify RUN_DIR`: the checks of docs/design.md 3.8 in order, and
 * the report.
 *
 * Check 1 verifies the entry. Check 2 reads run.json (its form by hand,
 * after manifests/run.schema.json), binds it to the entry (file digest,
 * manifest digest, signer, submission, the tuning plan), recomputes the
 * plan's draws (apf_entry_plan) and loads the workload specs the entry was packed with
 * (their tree digests must match the manifest's), from which every unit's
 * expected targets, budget and eval period follow; it then verifies the
 * runner's signature over the log's head, walks the log (records.c) and
 * requires the signed head to be the last line. Check 3 reports the first
 * timing failure the walk held back, then compares the CSVs; check 4 the
 * checkpoints; check 6 the held-out variants.
 */
#include "verify/verifier.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "hash/hash.h"
#include "heldout/heldout.h"
#include "nn/nn.h"
#include "rundir/rundir.h"
#include "workload/workload.h"

#define HEAD_TYPE APF_RUNDIR_HEAD_TYPE
#define HEAD_FORMAT APF_RUNDIR_HEAD_FORMAT

static const char *const check_names[] = {
	NULL, "entry", "log", "timing", "checkpoints", "replay", "held-out"};

const char *apf_verify_check_name(int check)
{
	return check >= 1 && check <= APF_VERIFY_NCHECKS ? check_names[check]
							 : "?";
}

const char *apf_verify_outcome_name(int outcome)
{
	static const char *const names[] = {"not run", "passed", "failed",
					    "skipped"};
	return outcome >= 0 && outcome <= APF_VERIFY_SKIPPED ? names[outcome]
							     : "?";
}

static const char *label(int check)
{
	static const char *const labels[] = {
		NULL,		    "check 1 (entry)",	     "check 2 (log)",
		"check 3 (timing)", "check 4 (checkpoints)", "check 5 (replay)",
		"check 6 (held-out)"};
	return labels[check];
}

const char *apf_vx_label(struct vx *v, int check)
{
	v->labelled = check;
	return label(check);
}

static void set_detail(struct vx *v, int check, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static void set_detail(struct vx *v, int check, const char *fmt, ...)
{
	char buf[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(buf, sizeof buf, fmt, ap);
	va_end(ap);
	free(v->rep->check[check].detail);
	v->rep->check[check].detail = apf_strdup(buf);
}

static char *in_run(const struct vx *v, const char *rel)
{
	return apf_path_join(v->dir, rel);
}

/* ---- check 1: the entry ---------------------------------------------------- */

static int check_entry(struct vx *v)
{
	/* The entry reader follows a symlink (an entry the user names may be
	 * one); the run's own must be a regular file inside the run. */
	int fd;
	int rc = apf_file_open_beneath(&fd, NULL, v->dir, "entry.apf", 0);
	if (rc)
		return rc;
	close(fd);
	char *path = in_run(v, "entry.apf");
	if (!path)
		return apf_error(APF_ENOMEM, v->dir, "out of memory");
	rc = apf_entry_verify(&v->entry, path, v->o->entry_keys);
	free(path);
	if (rc)
		return rc;
	const apf_entry *e = v->entry;
	memcpy(v->rep->entry_sha256, e->file_digest, 65);
	memcpy(v->rep->manifest_sha256, e->manifest_digest, 65);
	memcpy(v->rep->entry_signer, e->signer, 65);
	v->rep->submission = apf_strdup(e->manifest->submission.name);
	set_detail(v, APF_VERIFY_ENTRY,
		   "entry.apf sha256:%.16s..., signed by trusted key "
		   "%.16s..., %zu files as its manifest lists them",
		   e->file_digest, e->signer, e->manifest->submission.nfiles);
	return 0;
}

/* ---- check 2: run.json ----------------------------------------------------- */

enum { K_STR = 1, K_NAME, K_SHA, K_BOOL, K_INT, K_NUM, K_OBJ, K_ARR, K_TIME };
/* Or'ed into a key's type: the field may be absent. */
#define K_OPTIONAL 0x100

struct key {
	const char *name;
	int type;
};

static int time_ok(const char *s)
{
	static const char form[] = "dddd-dd-ddTdd:dd:ddZ";
	if (strlen(s) != sizeof form - 1)
		return 0;
	for (size_t i = 0; form[i]; i++)
		if (form[i] == 'd' ? !(s[i] >= '0' && s[i] <= '9') : s[i] != form[i])
			return 0;
	return 1;
}

static int type_ok(json_t *x, int type)
{
	switch (type) {
	case K_STR:
		return json_is_string(x);
	case K_NAME:
		return json_is_string(x) && apf_workload_name_ok(json_string_value(x));
	case K_SHA:
		return json_is_string(x) && apf_is_hex_digest(json_string_value(x));
	case K_BOOL:
		return json_is_boolean(x);
	case K_INT:
		return json_is_integer(x) && json_integer_value(x) >= 0;
	case K_NUM:
		return json_is_number(x);
	case K_OBJ:
		return json_is_object(x);
	case K_ARR:
		return json_is_array(x);
	case K_TIME:
		return json_is_string(x) && time_ok(json_string_value(x));
	}
	return 0;
}

static const char *key_type_name(int type)
{
	static const char *const names[] = {
		NULL,	     "a string", "a name of [a-z0-9_-]",
		"a SHA-256 in lowercase hex", "true or false",
		"an integer >= 0", "a number", "an object", "an array",
		"a UTC time YYYY-MM-DDTHH:MM:SSZ"};
	return names[type];
}

/* An object with exactly these keys, each of its type. */
static int check_object(json_t *o, const struct key *keys, const char *file,
			const char *where)
{
	if (!json_is_object(o))
		return apf_error(APF_EINPUT, file, "%s: expected an object", where);
	const char *k;
	json_t *x;
	json_object_foreach(o, k, x)
	{
		size_t i;
		for (i = 0; keys[i].name && strcmp(keys[i].name, k); i++)
			;
		if (!keys[i].name)
			return apf_error(APF_EINPUT, file, "%s: unknown field '%s'",
					 where, k);
		int type = keys[i].type & ~K_OPTIONAL;
		if (!type_ok(x, type))
			return apf_error(APF_EINPUT, file, "%s.%s: expected %s",
					 where, k, key_type_name(type));
	}
	for (size_t i = 0; keys[i].name; i++)
		if (!(keys[i].type & K_OPTIONAL) &&
		    !json_object_get(o, keys[i].name))
			return apf_error(APF_EINPUT, file, "%s: %s is missing",
					 where, keys[i].name);
	return 0;
}

static const char *jstr(json_t *o, const char *path1, const char *path2)
{
	json_t *x = json_object_get(o, path1);
	if (path2)
		x = json_object_get(x, path2);
	return json_string_value(x);
}

/* manifests/run.schema.json, by hand. */
static int run_json_form(json_t *rj, const char *file)
{
	static const struct key top[] = {
		{"format", K_STR},	{"submission", K_STR}, {"entry", K_OBJ},
		{"runner", K_OBJ},	{"device", K_STR},     {"sealed", K_BOOL},
		{"threads", K_INT},	{"plan", K_OBJ},       {"environment", K_OBJ},
		{"created", K_TIME},	{"numerics", K_INT | K_OPTIONAL},
		{NULL, 0}};
	static const struct key entry[] = {{"file", K_STR},
					   {"sha256", K_SHA},
					   {"manifest_sha256", K_SHA},
					   {"signer", K_SHA},
					   {NULL, 0}};
	static const struct key runner[] = {{"keyid", K_SHA},
					    {"host", K_STR},
					    {"apf_version", K_STR},
					    {"build", K_STR},
					    {NULL, 0}};
	static const struct key plan[] = {
		{"ruleset", K_STR}, {"rules", K_STR},		{"studies", K_INT},
		{"trials", K_INT},  {"seed", K_INT},		{"budget_multiplier", K_NUM},
		{"units", K_ARR},   {"clock", K_STR | K_OPTIONAL},
		{"budget_scale", K_NUM | K_OPTIONAL},
		{NULL, 0}};
	static const struct key unit[] = {{"workload", K_NAME},
					  {"variant", K_NAME},
					  {"study", K_INT},
					  {"trial", K_INT},
					  {NULL, 0}};
	int rc = check_object(rj, top, file, "run.json");
	if (!rc)
		rc = check_object(json_object_get(rj, "entry"), entry, file,
				  "entry");
	if (!rc)
		rc = check_object(json_object_get(rj, "runner"), runner, file,
				  "runner");
	json_t *p = json_object_get(rj, "plan");
	if (!rc)
		rc = check_object(p, plan, file, "plan");
	if (rc)
		return rc;
	if (strcmp(jstr(rj, "format", NULL), "apf-run-v1"))
		return apf_error(APF_EINPUT, file, "format: expected apf-run-v1");
	if (!*jstr(rj, "submission", NULL))
		return apf_error(APF_EINPUT, file, "submission: empty");
	const char *dev = jstr(rj, "device", NULL);
	if (strcmp(dev, "cpu") && strcmp(dev, "cuda"))
		return apf_error(APF_EINPUT, file, "device: expected cpu or cuda");
	if (json_integer_value(json_object_get(rj, "threads")) < 1)
		return apf_error(APF_EINPUT, file, "threads: expected >= 1");
	const char *rs = jstr(p, "ruleset", NULL), *rules = jstr(p, "rules", NULL);
	if (strcmp(rs, "external") && strcmp(rs, "self"))
		return apf_error(APF_EINPUT, file,
				 "plan.ruleset: expected external or self");
	if (strcmp(rules, "algoperf-0.6") && strcmp(rules, "algoperf-0.5"))
		return apf_error(APF_EINPUT, file,
				 "plan.rules: expected algoperf-0.6 or "
				 "algoperf-0.5");
	if (json_integer_value(json_object_get(p, "studies")) < 1 ||
	    json_integer_value(json_object_get(p, "trials")) < 1)
		return apf_error(APF_EINPUT, file,
				 "plan: studies and trials must be >= 1");
	if (json_integer_value(json_object_get(p, "seed")) > 0xffffffffLL)
		return apf_error(APF_EINPUT, file,
				 "plan.seed: expected 0 to 4294967295");
	if (!(json_number_value(json_object_get(p, "budget_multiplier")) > 0))
		return apf_error(APF_EINPUT, file,
				 "plan.budget_multiplier: expected > 0");
	if (apf_clock_of_run(rj) < 0)
		return apf_error(APF_EINPUT, file,
				 "plan.clock: expected wall or cpu");
	if (!(apf_budget_scale_of_run(rj) > 0))
		return apf_error(APF_EINPUT, file,
				 "plan.budget_scale: expected a number in (0, 1]");
	int nx = apf_numerics_of_run(rj);
	if (nx < 0)
		return apf_error(APF_EINPUT, file,
				 "numerics: expected a version number");
	if (nx < APF_NUMERICS_OLDEST || nx > APF_NUMERICS_LATEST)
		return apf_error(APF_EINPUT, file,
				 "numerics %d: this apf computes numerics %d "
				 "to %d (a later apf made the run?)",
				 nx, APF_NUMERICS_OLDEST, APF_NUMERICS_LATEST);
	if (apf_clock_of_run(rj) == APF_CLOCK_CPU &&
	    strcmp(jstr(rj, "device", NULL), "cpu"))
		return apf_error(APF_EINPUT, file,
				 "plan.clock cpu on device %s: the cpu clock "
				 "is for device cpu",
				 jstr(rj, "device", NULL));
	json_t *units = json_object_get(p, "units");
	if (json_array_size(units) == 0)
		return apf_error(APF_EINPUT, file, "plan.units: empty");
	size_t i;
	json_t *u;
	json_array_foreach(units, i, u)
	{
		char where[48];
		snprintf(where, sizeof where, "plan.units[%zu]", i);
		rc = check_object(u, unit, file, where);
		if (rc)
			return rc;
	}
	return 0;
}

/* ---- check 2: the plan and the workloads ----------------------------------- */

/* The workload specs the entry was packed with: the auditor's copies must
 * have the manifest's tree digests. */
static int load_specs(struct vx *v)
{
	const apf_manifest *m = v->entry->manifest;
	v->specs = apf_calloc(m->nworkloads, sizeof *v->specs);
	if (!v->specs)
		return apf_error(APF_ENOMEM, "workloads", "out of memory");
	for (size_t i = 0; i < m->nworkloads; i++) {
		const struct apf_manifest_workload *mw = &m->workloads[i];
		int rc = apf_workload_spec_load(&v->specs[i], mw->name);
		v->nspecs = i + 1;
		if (rc)
			return apf_error_prefix(rc, "workload spec (its targets "
						    "and budget are needed; "
						    "set APF_WORKLOADS_DIR)");
		apf_tree *t;
		rc = apf_tree_hash(&t, v->specs[i]->dir, NULL);
		if (rc)
			return rc;
		char hex[65];
		apf_hex(hex, t->digest, APF_SHA256_LEN);
		apf_tree_free(t);
		if (strcmp(hex, mw->spec_digest))
			return apf_error(APF_EINPUT, v->specs[i]->dir,
					 "tree sha256 %.16s..., but the entry "
					 "was packed with spec %.16s...: the "
					 "targets and budgets here are not the "
					 "run's",
					 hex, mw->spec_digest);
	}
	return 0;
}

static int by_name_cmp(const void *a, const void *b, void *arg)
{
	const struct vx *v = arg;
	return strcmp(v->units[*(const size_t *)a].name,
		      v->units[*(const size_t *)b].name);
}

/* run.json's units: each in the entry's plan, with what its trial_start
 * must say. */
static int build_units(struct vx *v, const char *file)
{
	const apf_manifest *m = v->entry->manifest;
	json_t *plan = json_object_get(v->run_json, "plan");
	json_t *units = json_object_get(plan, "units");
	double mult = json_number_value(json_object_get(plan, "budget_multiplier"));
	v->units = apf_calloc(json_array_size(units), sizeof *v->units);
	v->by_name = apf_calloc(json_array_size(units), sizeof *v->by_name);
	if (!v->units || !v->by_name)
		return apf_error(APF_ENOMEM, file, "out of memory");
	size_t i;
	json_t *j;
	json_array_foreach(units, i, j)
	{
		const char *w = jstr(j, "workload", NULL);
		const char *var = jstr(j, "variant", NULL);
		/* Trials count from 1, as in the unit names and the log. */
		long study = (long)json_integer_value(json_object_get(j, "study"));
		long trial = (long)json_integer_value(json_object_get(j, "trial")) - 1;
		size_t wi;
		for (wi = 0; wi < m->nworkloads && strcmp(m->workloads[wi].name, w);
		     wi++)
			;
		if (wi == m->nworkloads)
			return apf_error(APF_EVERIFY, file,
					 "plan.units[%zu]: workload %s is not "
					 "in the entry",
					 i, w);
		if (study >= m->tuning.studies || trial < 0 ||
		    trial >= m->tuning.trials)
			return apf_error(APF_EVERIFY, file,
					 "plan.units[%zu]: study %ld, trial %ld "
					 "is outside the entry's plan of %ld "
					 "studies (from 0) x %ld trials (from 1)",
					 i, study, trial + 1, m->tuning.studies,
					 m->tuning.trials);
		const apf_workload_spec *spec = v->specs[wi];
		const struct apf_workload_variant *wv =
			apf_workload_variant(spec, var);
		if (!wv)
			return apf_error(APF_EVERIFY, file,
					 "plan.units[%zu]: workload %s has no "
					 "variant %s",
					 i, w, var);
		const struct apf_budget *b = apf_workload_budget(spec, v->device);
		if (!b)
			return apf_error(APF_EVERIFY, file,
					 "workload %s has no budget for %s", w,
					 v->device);
		struct vx_unit *u = &v->units[v->nunits++];
		u->ttt = VX_NONE;
		u->study = study;
		u->trial0 = trial;
		u->spec = spec;
		u->workload = apf_strdup(w);
		u->variant = apf_strdup(var);
		apf_buf dir = {0}, name = {0}, vk = {0}, tk = {0};
		char unit[1024];
		int len = apf_rundir_unit_name(unit, sizeof unit, study, w, var,
					       trial + 1);
		/* The workload's directory is the name's middle part. */
		const char *d0 = strchr(unit, '/'), *d1 = strrchr(unit, '/');
		int rc = len < 0 || (size_t)len >= sizeof unit || !d0 || d1 <= d0 ||
			 apf_buf_printf(&dir, "%.*s", (int)(d1 - d0 - 1), d0 + 1);
		rc = rc || apf_buf_puts(&name, unit) ||
		     apf_buf_printf(&vk, "validation/%s", spec->metric) ||
		     apf_buf_printf(&tk, "test/%s", spec->metric);
		u->dir_name = dir.data;
		u->name = name.data;
		u->name_len = name.len;
		u->vkey = vk.data;
		u->tkey = tk.data;
		if (rc || !u->workload || !u->variant)
			return apf_error(APF_ENOMEM, file, "out of memory");
		u->budget_ns = apf_workload_budget_ns(b, mult, v->budget_scale);
		u->period_ns = apf_workload_eval_period_ns(b, v->budget_scale);
		u->max_steps = spec->max_steps > 0 ? (uint64_t)spec->max_steps : 0;
		u->vtarget = wv->validation_target;
		u->ttarget = wv->test_target;
		u->direction = spec->direction;
		for (size_t p = 0; p < v->plan->n; p++) {
			const struct apf_plan_unit *pu = &v->plan->units[p];
			if (!strcmp(pu->workload, w) && pu->study == study &&
			    pu->trial == trial)
				u->hp = &pu->hp;
		}
		v->by_name[i] = i;
	}
	qsort_r(v->by_name, v->nunits, sizeof *v->by_name, by_name_cmp, v);
	for (i = 1; i < v->nunits; i++)
		if (!strcmp(v->units[v->by_name[i]].name,
			    v->units[v->by_name[i - 1]].name))
			return apf_error(APF_EVERIFY, file,
					 "plan.units: %s is listed twice",
					 v->units[v->by_name[i]].name);
	return 0;
}

/* run.json bound to the entry: digests, signer, submission, the plan. */
static int bind_run_json(struct vx *v, const char *file)
{
	const apf_entry *e = v->entry;
	const apf_manifest *m = e->manifest;
	json_t *rj = v->run_json;
	json_t *p = json_object_get(rj, "plan");
	if (strcmp(jstr(rj, "entry", "sha256"), e->file_digest))
		return apf_error(APF_EVERIFY, file,
				 "entry.sha256 is not the digest of entry.apf "
				 "(%.16s...): the run was made from another "
				 "entry",
				 e->file_digest);
	if (strcmp(jstr(rj, "entry", "manifest_sha256"), e->manifest_digest))
		return apf_error(APF_EVERIFY, file,
				 "entry.manifest_sha256 is not the entry's "
				 "manifest digest %.16s...",
				 e->manifest_digest);
	if (strcmp(jstr(rj, "entry", "signer"), e->signer))
		return apf_error(APF_EVERIFY, file,
				 "entry.signer is not the key that signed the "
				 "entry (%.16s...)",
				 e->signer);
	if (strcmp(jstr(rj, "submission", NULL), m->submission.name))
		return apf_error(APF_EVERIFY, file,
				 "submission '%s', the entry's is '%s'",
				 jstr(rj, "submission", NULL), m->submission.name);
	if (strcmp(jstr(p, "ruleset", NULL), m->tuning.ruleset) ||
	    strcmp(jstr(p, "rules", NULL), m->tuning.rules) ||
	    json_integer_value(json_object_get(p, "studies")) != m->tuning.studies ||
	    json_integer_value(json_object_get(p, "trials")) != m->tuning.trials ||
	    json_integer_value(json_object_get(p, "seed")) != m->tuning.seed ||
	    json_number_value(json_object_get(p, "budget_multiplier")) !=
		    m->tuning.budget_multiplier)
		return apf_error(APF_EVERIFY, file,
				 "plan differs from the entry's tuning plan "
				 "(%s, %s, %ld x %ld, seed %u, budget x%g)",
				 m->tuning.ruleset, m->tuning.rules,
				 m->tuning.studies, m->tuning.trials,
				 m->tuning.seed, m->tuning.budget_multiplier);
	return 0;
}

static const struct vx_unit *find_unit(const struct vx *v, const char *workload,
				       const char *variant, long study,
				       long trial0)
{
	for (size_t i = 0; i < v->nunits; i++) {
		const struct vx_unit *u = &v->units[i];
		if (u->study == study && u->trial0 == trial0 &&
		    !strcmp(u->workload, workload) &&
		    !strcmp(u->variant, variant))
			return u;
	}
	return NULL;
}

/* run.json's plan lists every unit of the entry's plan. Every unit it lists
 * must be one of the entry's (build_units), and so must every unit of the
 * entry be listed: a runner holding the key could otherwise leave out a
 * study that went badly (the median then taken over the others) or a trial,
 * and its run would verify complete, every record chained and signed. The
 * held-out variants' copies are checked against the draw in check 6. */
static int plan_complete(const struct vx *v, const char *file)
{
	for (size_t p = 0; p < v->plan->n; p++) {
		const struct apf_plan_unit *pu = &v->plan->units[p];
		if (find_unit(v, pu->workload, "base", pu->study, pu->trial))
			continue;
		char unit[1024];
		int len = apf_rundir_unit_name(unit, sizeof unit, pu->study,
					       pu->workload, "base",
					       pu->trial + 1);
		return apf_error(APF_EVERIFY, file,
				 "plan.units: %s is missing: the entry's plan "
				 "has %zu units (%ld studies x %ld trials of "
				 "each workload) and a run lists them all",
				 len > 0 && (size_t)len < sizeof unit ? unit
								       : "a unit",
				 v->plan->n, v->entry->manifest->tuning.studies,
				 v->entry->manifest->tuning.trials);
	}
	return 0;
}

static int load_run_json(struct vx *v)
{
	char *file = in_run(v, "run.json");
	if (!file)
		return apf_error(APF_ENOMEM, v->dir, "out of memory");
	char *text = NULL;
	size_t len = 0;
	int rc = apf_file_read_beneath(&text, &len, v->dir, "run.json",
				       APF_MAX_RUN_JSON_BYTES, 0);
	if (!rc)
		rc = apf_sha256_hex(v->run_json_sha, text, len);
	if (!rc) {
		json_error_t je;
		v->run_json = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
		if (!v->run_json)
			rc = apf_error(APF_EINPUT, file, "line %d: %s", je.line,
				       je.text);
	}
	free(text);
	if (!rc)
		rc = run_json_form(v->run_json, file);
	if (!rc) {
		snprintf(v->device, sizeof v->device, "%s",
			 jstr(v->run_json, "device", NULL));
		v->sealed = json_is_true(json_object_get(v->run_json, "sealed"));
		v->rep->sealed = v->sealed;
		v->threads = (uint64_t)json_integer_value(
			json_object_get(v->run_json, "threads"));
		v->clock = apf_clock_of_run(v->run_json);
		v->budget_scale = apf_budget_scale_of_run(v->run_json);
		v->rep->clock = v->clock;
		v->rep->budget_scale = v->budget_scale;
		v->rep->numerics = apf_numerics_of_run(v->run_json);
		rc = bind_run_json(v, file);
	}
	if (!rc)
		rc = apf_entry_plan(&v->plan, v->entry);
	if (!rc)
		rc = load_specs(v);
	if (!rc)
		rc = build_units(v, file);
	if (!rc)
		rc = plan_complete(v, file);
	free(file);
	return rc;
}

/* ---- check 2: the signed head ---------------------------------------------- */

/* rel: log.dsse.json, or <unit>/log.dsse.json. */
static int load_head(struct vx *v, const char *rel)
{
	char *file = in_run(v, rel);
	if (!file)
		return apf_error(APF_ENOMEM, v->dir, "out of memory");
	char *text = NULL;
	size_t len = 0;
	struct apf_dsse d = {0};
	json_t *pl = NULL;
	v->no_head = 0;
	v->head_records = 0;
	v->head[0] = 0;
	int rc = apf_file_read_beneath(&text, &len, v->dir, rel,
				       APF_MAX_SMALL_JSON_BYTES,
				       APF_FILE_MISSING_OK);
	if (!rc && !text) {
		/* The runner signs at the first eval: a run that stopped
		 * before it has no signature yet. */
		v->no_head = 1;
		free(file);
		return 0;
	}
	if (!rc) {
		rc = apf_dsse_verify(&d, text, len, v->o->runner_keys);
		if (rc)
			apf_error_prefix(rc, file);
	}
	if (!rc && strcmp(d.payload_type, HEAD_TYPE))
		rc = apf_error(APF_EVERIFY, file,
			       "payload type '%s', expected " HEAD_TYPE,
			       d.payload_type);
	if (!rc) {
		json_error_t je;
		pl = json_loadb((const char *)d.payload, d.payload_len,
				JSON_REJECT_DUPLICATES, &je);
		static const struct key head[] = {{"format", K_STR},
						  {"run_json_sha256", K_SHA},
						  {"records", K_INT},
						  {"head", K_SHA},
						  {NULL, 0}};
		rc = pl ? check_object(pl, head, file, "payload")
			: apf_error(APF_EVERIFY, file, "payload: %s", je.text);
		if (rc)
			rc = APF_EVERIFY; /* it is signed: a runner bug */
	}
	if (!rc && strcmp(jstr(pl, "format", NULL), HEAD_FORMAT))
		rc = apf_error(APF_EVERIFY, file, "payload format is not " HEAD_FORMAT);
	if (!rc && strcmp(jstr(pl, "run_json_sha256", NULL), v->run_json_sha))
		rc = apf_error(APF_EVERIFY, file,
			       "the signed run_json_sha256 is not the SHA-256 "
			       "of run.json (%.16s...): run.json was changed",
			       v->run_json_sha);
	if (!rc && strcmp(d.signer, jstr(v->run_json, "runner", "keyid")))
		rc = apf_error(APF_EVERIFY, file,
			       "signed by key %.16s..., but run.json names "
			       "the runner key %.16s...",
			       d.signer, jstr(v->run_json, "runner", "keyid"));
	if (!rc) {
		v->head_records = (uint64_t)json_integer_value(
			json_object_get(pl, "records"));
		memcpy(v->head, jstr(pl, "head", NULL), 65);
		memcpy(v->rep->runner_signer, d.signer, 65);
	}
	json_decref(pl);
	apf_dsse_free(&d);
	free(text);
	free(file);
	return rc;
}

/* The signature covers the whole log; only a run that stopped abnormally
 * may have records after its last signed head (written after the last
 * eval, before the crash), and they must follow the signed line. */
static int compare_head(struct vx *v, const struct apf_runlog_summary *sum)
{
	const char *file = "log.dsse.json";
	if (v->no_head) {
		if (v->last_ev == APF_EV_RUN_END)
			return apf_error(APF_EVERIFY, v->log_path,
					 "%s is missing, yet the log ends with "
					 "run_end: nothing of it is signed",
					 file);
		v->rep_unsigned = sum->records;
		return 0;
	}
	if (sum->records < v->head_records)
		return apf_error(APF_EVERIFY, v->log_path,
				 "%" PRIu64 " records, but the runner signed "
				 "%" PRIu64 " (%s): records were removed from "
				 "the end",
				 sum->records, v->head_records, file);
	if (sum->records > v->head_records && v->last_ev == APF_EV_RUN_END)
		return apf_error(APF_EVERIFY, v->log_path,
				 "line %" PRIu64 " and after are not covered "
				 "by the runner's signature, which ends at "
				 "line %" PRIu64 " (%s), yet the log ends with "
				 "run_end: records were appended",
				 v->head_records + 1, v->head_records, file);
	const char *at = sum->records == v->head_records ? sum->head
							 : v->signed_hash;
	if (strcmp(at, v->head))
		return apf_error(APF_EVERIFY, v->log_path,
				 "line %" PRIu64 "'s SHA-256 %.16s... is not the "
				 "signed head %.16s... (%s): the log was "
				 "rewritten",
				 v->head_records, at, v->head, file);
	v->rep_unsigned = sum->records - v->head_records;
	return 0;
}

/* A crash can leave the last line torn (no newline): the walk stops there
 * with an error. When every line before it was read, the log is that
 * prefix and the run stopped abnormally. */
static int torn_tail(struct vx *v, struct apf_runlog_summary *sum)
{
	int fd;
	struct stat st;
	if (apf_file_open_regular(&fd, NULL, v->log_path, 0)) {
		apf_error_clear();
		return 0;
	}
	int torn = 0;
	if (fstat(fd, &st) == 0 && (uint64_t)st.st_size > v->bytes_seen &&
	    (uint64_t)st.st_size - v->bytes_seen < (1u << 20)) {
		size_t n = (size_t)((uint64_t)st.st_size - v->bytes_seen);
		char *tail = malloc(n);
		torn = tail && pread(fd, tail, n, (off_t)v->bytes_seen) == (ssize_t)n &&
		       !memchr(tail, '\n', n);
		free(tail);
		if (torn)
			v->rep->torn_bytes = n;
	}
	close(fd);
	if (!torn || !v->records)
		return 0;
	sum->records = v->records;
	memcpy(sum->head, v->last_hash, 65);
	return 1;
}

/* Walks v->log_path (its signed head loaded): the chain, each record, the
 * head. */
static int walk_log(struct vx *v, struct apf_runlog_summary *out)
{
	struct stat st;
	if (lstat(v->log_path, &st) == 0)
		v->rep->log_bytes += (uint64_t)st.st_size;
	v->records = v->bytes_seen = 0;
	v->last_ev = 0;
	v->signed_hash[0] = v->index_hash[0] = 0;
	const struct apf_runlog_read_opts ro = {
		.fn = apf_vx_record,
		.user = v,
		.prepare = apf_vx_prepare,
		.slot_size = apf_vx_slot_size(),
	};
	struct apf_runlog_summary sum = {0};
	int rc = apf_runlog_walk(&sum, v->log_path, &ro);
	if (rc == APF_EVERIFY && sum.torn_bytes && torn_tail(v, &sum)) {
		apf_error_clear();
		rc = 0;
	}
	if (!rc && sum.records == 0)
		rc = apf_error(APF_EVERIFY, v->log_path, "empty");
	if (!rc)
		rc = compare_head(v, &sum);
	*out = sum;
	return rc;
}

/* The signed index of the per-unit layout: its units, each in run.json's
 * plan. */
static int load_index(struct vx *v, json_t **units)
{
	*units = NULL;
	const char *rel = APF_RUNDIR_INDEX_FILE;
	char *file = in_run(v, rel);
	if (!file)
		return apf_error(APF_ENOMEM, v->dir, "out of memory");
	char *text = NULL;
	size_t len = 0;
	struct apf_dsse d = {0};
	int rc = apf_file_read_beneath(&text, &len, v->dir, rel,
				       APF_MAX_RUN_JSON_BYTES, 0);
	if (!rc) {
		rc = apf_dsse_verify(&d, text, len, v->o->runner_keys);
		if (rc)
			apf_error_prefix(rc, file);
	}
	if (!rc && strcmp(d.signer, jstr(v->run_json, "runner", "keyid")))
		rc = apf_error(APF_EVERIFY, file,
			       "signed by key %.16s..., but run.json names "
			       "the runner key %.16s...",
			       d.signer, jstr(v->run_json, "runner", "keyid"));
	if (!rc)
		rc = apf_rundir_index_decode(units, &d, v->run_json_sha, file);
	const char *name;
	json_t *e;
	json_object_foreach(rc ? NULL : *units, name, e)
	{
		size_t i;
		for (i = 0; i < v->nunits && strcmp(v->units[i].name, name); i++)
			;
		if (i == v->nunits) {
			rc = apf_error(APF_EVERIFY, file,
				       "names unit %.200s, which is not in "
				       "run.json's plan",
				       name);
			break;
		}
	}
	if (!rc)
		memcpy(v->rep->runner_signer, d.signer, 65);
	apf_dsse_free(&d);
	free(text);
	free(file);
	return rc;
}

/* The index's word on one unit's log, read whole as sum: a log that ended
 * its last session must be named with its last line; one still open (a
 * crash, or a unit still running) may be named at an earlier line of it. */
static int check_index_entry(struct vx *v, const struct vx_unit *u,
			     const struct apf_runlog_summary *sum)
{
	int open = v->last_ev != APF_EV_RUN_END;
	if (!v->index_records && !open)
		return apf_error(APF_EVERIFY, v->log_path,
				 "%s has a log whose last session ended, but "
				 "no entry in " APF_RUNDIR_INDEX_FILE,
				 u->name);
	if (!v->index_records)
		return 0;
	if (v->index_records > sum->records)
		return apf_error(APF_EVERIFY, v->log_path,
				 "%s: " APF_RUNDIR_INDEX_FILE " names line %"
				 PRIu64 ", but its log has %" PRIu64
				 " records: records were removed from the end",
				 u->name, v->index_records, sum->records);
	if (!open && v->index_records != sum->records)
		return apf_error(APF_EVERIFY, v->log_path,
				 "%s: " APF_RUNDIR_INDEX_FILE " names line %"
				 PRIu64 " as its head, but its log ends at line "
				 "%" PRIu64 " (an older index?)",
				 u->name, v->index_records, sum->records);
	if (strcmp(v->index_hash, v->index_head))
		return apf_error(APF_EVERIFY, v->log_path,
				 "%s: line %" PRIu64 "'s SHA-256 %.16s... is not "
				 "the head %.16s... that " APF_RUNDIR_INDEX_FILE
				 " names: the log was rewritten or is another "
				 "unit's",
				 u->name, v->index_records, v->index_hash,
				 v->index_head);
	return 0;
}

/* The per-unit layout: every unit's own log and signed head, and the
 * index. */
static int check_unit_logs(struct vx *v)
{
	json_t *index = NULL;
	int rc = load_index(v, &index);
	for (size_t i = 0; !rc && i < v->nunits; i++) {
		struct vx_unit *u = &v->units[i];
		json_t *e = json_object_get(index, u->name);
		apf_buf rel = {0};
		apf_buf_printf(&rel, "%s/log.jsonl", u->name);
		if (!rel.data) {
			rc = apf_error(APF_ENOMEM, v->dir, "out of memory");
			break;
		}
		int fd;
		rc = apf_file_open_beneath(&fd, NULL, v->dir, rel.data,
					   APF_FILE_MISSING_OK);
		if (fd >= 0)
			close(fd);
		if (!rc && fd < 0 && e)
			rc = apf_error(APF_EVERIFY,
				       apf_vx_label(v, APF_VERIFY_LOG),
				       "%s/" APF_RUNDIR_INDEX_FILE ": names "
				       "unit %s, which has no log (%s)",
				       v->dir, u->name, rel.data);
		if (rc || fd < 0) {
			apf_buf_free(&rel);
			continue;
		}
		free(v->log_path);
		v->log_path = in_run(v, rel.data);
		u->log_path = apf_strdup(v->log_path ? v->log_path : "");
		v->cur_unit = (long)i;
		v->index_records =
			e ? (uint64_t)json_integer_value(
				    json_object_get(e, "records"))
			  : 0;
		snprintf(v->index_head, sizeof v->index_head, "%s",
			 e ? json_string_value(json_object_get(e, "head")) : "");
		/* <unit>/log.jsonl -> <unit>/log.dsse.json */
		rel.len -= strlen("log.jsonl");
		rel.data[rel.len] = 0;
		apf_buf_puts(&rel, "log.dsse.json");
		rc = v->log_path && u->log_path && rel.data
			     ? load_head(v, rel.data)
			     : apf_error(APF_ENOMEM, v->dir, "out of memory");
		apf_buf_free(&rel);
		struct apf_runlog_summary sum = {0};
		if (!rc)
			rc = walk_log(v, &sum);
		if (!rc && v->session_open)
			rc = apf_vx_session_check(v);
		if (!rc)
			rc = check_index_entry(v, u, &sum);
		if (rc)
			break;
		v->session_open = 0;
		if (v->last_ev != APF_EV_RUN_END && !v->open_logs++)
			v->first_open = u->name;
		v->nlogs++;
		v->rep->records += sum.records;
		v->rep->unsigned_records += v->rep_unsigned;
		memcpy(v->rep->head, sum.head, 65);
	}
	json_decref(index);
	return rc;
}

static int check_log(struct vx *v)
{
	int rc = load_run_json(v);
	if (!rc && v->per_unit)
		rc = check_unit_logs(v);
	if (!rc && !v->per_unit)
		rc = load_head(v, "log.dsse.json");
	struct apf_runlog_summary sum = {0};
	if (!rc && !v->per_unit)
		rc = walk_log(v, &sum);
	if (rc)
		return rc;
	if (!v->per_unit) {
		v->rep->records = sum.records;
		v->rep->unsigned_records = v->rep_unsigned;
		memcpy(v->rep->head, sum.head, 65);
	}
	rc = apf_vx_walk_end(v);
	if (!rc && !v->o->log_only)
		rc = apf_vx_hparams_files(v);
	if (rc)
		return rc;
	if (v->per_unit)
		set_detail(v, APF_VERIFY_LOG,
			   "%" PRIu64 " records chained in %zu unit log%s, each "
			   "head signed, and the index of their heads signed, "
			   "by runner key %.16s...; run.json bound to the "
			   "entry, its plan the entry's whole plan; the "
			   "trials' parameters are the plan's and the workload "
			   "specs'",
			   v->rep->records, v->nlogs, v->nlogs == 1 ? "" : "s",
			   v->rep->runner_signer);
	else if (v->no_head)
		set_detail(v, APF_VERIFY_LOG,
			   "%" PRIu64 " records chained, none signed yet; "
			   "run.json bound to the entry, its plan the entry's "
			   "whole plan; the trials' parameters are the plan's "
			   "and the workload specs'",
			   sum.records);
	else
		set_detail(v, APF_VERIFY_LOG,
			   "%" PRIu64 " records chained, head %.16s... signed by "
			   "runner key %.16s...; run.json bound to the entry, "
			   "its plan the entry's whole plan; the trials' "
			   "parameters are the plan's and the workload specs'",
			   sum.records, sum.head, v->rep->runner_signer);
	return 0;
}

/* ---- checks 3, 4, 6 --------------------------------------------------------- */

static int check_timing(struct vx *v)
{
	int rc = apf_vx_timing_result(v);
	if (!rc && !v->o->log_only)
		rc = apf_vx_csvs(v);
	if (rc)
		return rc;
	set_detail(v, APF_VERIFY_TIMING,
		   "%zu eval%s of %zu unit%s: accumulated times, cadence, "
		   "budget, target flags, stops and time-to-target recomputed "
		   "from the supervisor's timestamps%s",
		   v->rep->evals, v->rep->evals == 1 ? "" : "s",
		   v->rep->units_started, v->rep->units_started == 1 ? "" : "s",
		   v->o->log_only ? "" : "; the CSVs equal the log");
	return 0;
}

static int check_checkpoints(struct vx *v)
{
	int rc = apf_vx_checkpoints(v);
	if (rc)
		return rc;
	char sz[32];
	double b = (double)v->rep->checkpoint_bytes;
	if (b >= 1 << 20)
		snprintf(sz, sizeof sz, "%.1f MiB", b / (1 << 20));
	else
		snprintf(sz, sizeof sz, "%.0f bytes", b);
	char pruned[160] = "";
	if (v->rep->npruned)
		snprintf(pruned, sizeof pruned,
			 "; %zu unit%s pruned (--pruned: none of %s checkpoint "
			 "files here, none read, re-evaluated or replayed)",
			 v->rep->npruned, v->rep->npruned == 1 ? "" : "s",
			 v->rep->npruned == 1 ? "its" : "their");
	set_detail(v, APF_VERIFY_CHECKPOINTS,
		   "%zu file%s (%s) of the logged sizes and SHA-256 digests; "
		   "re-evaluating them is --reeval%s",
		   v->rep->checkpoints, v->rep->checkpoints == 1 ? "" : "s", sz,
		   pruned);
	return 0;
}

static int by_name(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Recomputes draw i from the seed and the workload's variants (the spec the
 * entry was packed with, checked in check 2), as apf heldout draw makes it:
 * a runner that edits a draw and keeps the seed is caught here. */
static int recompute_pick(const char *file, const char *seed, size_t i,
			  const apf_workload_spec *spec, const char *drawn)
{
	size_t n = spec->nvariants;
	const char **names = apf_calloc(n ? n : 1, sizeof *names);
	if (!names)
		return apf_error(APF_ENOMEM, file, "out of memory");
	for (size_t k = 0; k < n; k++)
		names[k] = spec->variants[k].name;
	qsort(names, n, sizeof *names, by_name);
	size_t idx = 0;
	int rc = n ? apf_heldout_choose(seed, spec->name, n, &idx)
		   : apf_error(APF_EVERIFY, file, "%s declares no variant",
			       spec->name);
	if (!rc && strcmp(names[idx], drawn))
		rc = apf_error(APF_EVERIFY, file,
			       "draws[%zu] (%s): variant '%s'; the seed and the "
			       "workload's %zu variants give '%s'",
			       i, spec->name, drawn, n, names[idx]);
	else if (rc && rc != APF_EVERIFY && rc != APF_ENOMEM)
		rc = APF_EVERIFY;
	free(names);
	return rc;
}

/* Whether the draw's seed is bound to the entries: a draw file made from
 * entries (`apf heldout draw`, method "entries") must hold the seed its
 * entries' digests give and list this run's entry among them, so that the
 * seed could not be known before the entries were sealed. Any other form
 * (a number given with --seed, a draw by hand) passes with *by_hand set:
 * whoever chose that seed chose the variants, and the report says so. */
static int check_seed(struct vx *v, const char *file, size_t *nentries,
		      int *by_hand)
{
	*by_hand = 1;
	*nentries = 0;
	json_error_t je;
	json_t *j = json_load_file(file, JSON_REJECT_DUPLICATES, &je);
	int is_draw = json_is_object(j) && json_object_get(j, "format");
	json_decref(j);
	if (!is_draw)
		return 0;
	apf_heldout *d = NULL;
	int rc = apf_heldout_load(&d, file);
	if (rc)
		return APF_EVERIFY;
	if (d->method == APF_HELDOUT_FROM_ENTRIES) {
		*by_hand = 0;
		*nentries = d->nentries;
		const char **ds = apf_calloc(d->nentries + 1, sizeof *ds);
		int mine = 0;
		for (size_t i = 0; ds && i < d->nentries; i++) {
			ds[i] = d->entries[i].manifest_sha256;
			mine |= !strcmp(ds[i], v->entry->manifest_digest);
		}
		char seed[APF_HELDOUT_SEED_MAX];
		rc = !ds ? apf_error(APF_ENOMEM, file, "out of memory")
			 : apf_heldout_seed_from_digests(
				   seed, (const char *const *)ds, d->nentries);
		if (rc && rc != APF_ENOMEM)
			rc = APF_EVERIFY;
		if (!rc && strcmp(seed, d->seed))
			rc = apf_error(APF_EVERIFY, file,
				       "seed %.16s... is not the one the "
				       "draw's entries give (%.16s...): a draw "
				       "from entries cannot choose its seed",
				       d->seed, seed);
		if (!rc && !mine)
			rc = apf_error(APF_EVERIFY, file,
				       "made from %zu entr%s without this "
				       "run's (%.16s...): its seed is not bound "
				       "to this entry",
				       d->nentries, d->nentries == 1 ? "y" : "ies",
				       v->entry->manifest_digest);
		free(ds);
	}
	apf_heldout_free(d);
	return rc;
}

static int check_heldout(struct vx *v)
{
	size_t nvar = 0, ran = 0; /* in run.json's plan; started in the log */
	const struct vx_unit *first = NULL;
	for (size_t i = 0; i < v->nunits; i++)
		if (strcmp(v->units[i].variant, "base")) {
			nvar++;
			ran += v->units[i].ever_started != 0;
			if (!first)
				first = &v->units[i];
		}
	char *file = in_run(v, "heldout.json");
	if (!file)
		return apf_error(APF_ENOMEM, v->dir, "out of memory");
	/* The reader (pkg/heldout) takes a path: the file is checked here to be
	 * a regular file inside the run, of a sane size, first. */
	int fd;
	struct stat st;
	int rc = apf_file_open_beneath(&fd, &st, v->dir, "heldout.json",
				       APF_FILE_MISSING_OK);
	int exists = fd >= 0;
	if (exists)
		close(fd);
	if (!rc && exists && (uint64_t)st.st_size > APF_MAX_SMALL_JSON_BYTES)
		rc = apf_error(APF_EINPUT, file,
			       "%llu bytes, larger than the %zu-byte limit",
			       (unsigned long long)st.st_size,
			       APF_MAX_SMALL_JSON_BYTES);
	if (rc)
		rc = APF_EVERIFY;
	apf_heldout_list *h = NULL;
	if (!rc && !exists && nvar)
		rc = apf_error(APF_EVERIFY, file,
			       "missing: run.json runs held-out variant units "
			       "(%s first), which must come from a held-out "
			       "draw",
			       first->name);
	if (!rc && exists) {
		rc = apf_heldout_list_load(&h, file);
		if (rc)
			rc = APF_EVERIFY;
	}
	if (!rc && exists && !h->seed)
		rc = apf_error(APF_EVERIFY, file,
			       "not an apf draw {\"seed\": ..., \"draws\": "
			       "[...]}");
	size_t nentries = 0;
	int by_hand = 0;
	if (!rc && exists)
		rc = check_seed(v, file, &nentries, &by_hand);
	const apf_manifest *m = v->entry->manifest;
	for (size_t i = 0; !rc && h && i < h->n; i++) {
		const struct apf_heldout_named *d = &h->v[i];
		for (size_t k = 0; k < i; k++)
			if (!strcmp(h->v[k].base, d->base))
				rc = apf_error(APF_EVERIFY, file,
					       "base workload %s is drawn twice",
					       d->base);
		for (size_t w = 0; !rc && w < m->nworkloads; w++) {
			if (strcmp(m->workloads[w].name, d->base))
				continue;
			const char *vn = d->workload + strlen(d->base) + 1;
			if (!apf_workload_variant(v->specs[w], vn))
				rc = apf_error(APF_EVERIFY, file,
					       "draws variant %s, which workload "
					       "%s does not have",
					       vn, d->base);
			else
				rc = recompute_pick(file, h->seed, i, v->specs[w],
						    vn);
		}
	}
	/* Every unit of a drawn workload runs its variant too (as
	 * apf_plan_add_variant copies them): a run without the copies of a
	 * variant that went badly would escape the held-out rules. */
	for (size_t i = 0; !rc && h && i < h->n; i++) {
		const struct apf_heldout_named *d = &h->v[i];
		const char *vn = d->workload + strlen(d->base) + 1;
		for (size_t p = 0; !rc && p < v->plan->n; p++) {
			const struct apf_plan_unit *pu = &v->plan->units[p];
			if (strcmp(pu->workload, d->base) ||
			    find_unit(v, pu->workload, vn, pu->study, pu->trial))
				continue;
			char unit[1024];
			int len = apf_rundir_unit_name(unit, sizeof unit,
						       pu->study, pu->workload,
						       vn, pu->trial + 1);
			rc = apf_error(APF_EVERIFY, file,
				       "draws %s, but run.json does not run %s: "
				       "every unit of a drawn workload runs its "
				       "variant too",
				       d->workload,
				       len > 0 && (size_t)len < sizeof unit
					       ? unit
					       : "one of its units");
		}
	}
	for (size_t i = 0; !rc && i < v->nunits; i++) {
		const struct vx_unit *u = &v->units[i];
		if (!strcmp(u->variant, "base"))
			continue;
		const struct apf_heldout_named *d = NULL;
		for (size_t k = 0; k < h->n; k++)
			if (!strcmp(h->v[k].base, u->workload))
				d = &h->v[k];
		if (!d)
			rc = apf_error(APF_EVERIFY, file,
				       "draws no variant of %s, yet run.json "
				       "runs %s",
				       u->workload, u->name);
		else if (strcmp(d->workload, u->dir_name))
			rc = apf_error(APF_EVERIFY, file,
				       "draws %s for %s, but run.json runs "
				       "variant %s (%s)",
				       d->workload, u->workload, u->variant,
				       u->name);
	}
	if (!rc && !exists)
		set_detail(v, APF_VERIFY_HELDOUT, "no held-out variants in this run");
	/* One run cannot show that the draw's other entries were real
	 * competitors (digests anyone can list, to choose the seed): apf
	 * score holds them to the runs scored with the draw. */
	char bound[192];
	if (nentries > 1)
		snprintf(bound, sizeof bound,
			 "the seed recomputed from the draw's %zu entries, "
			 "this run's among them (the other %zu are the draw's "
			 "word: apf score holds them to the runs scored with "
			 "it)",
			 nentries, nentries - 1);
	else
		snprintf(bound, sizeof bound,
			 "the seed recomputed from the draw's one entry, this "
			 "run's");
	if (!rc && exists)
		set_detail(v, APF_VERIFY_HELDOUT,
			   "%zu held-out variant unit%s in the plan (%zu run) of "
			   "%zu drawn workload%s, each draw recomputed from the "
			   "seed (%.16s%s) and the workload's variants; %s",
			   nvar, nvar == 1 ? "" : "s", ran, h->n,
			   h->n == 1 ? "" : "s",
			   h->seed, strlen(h->seed) > 16 ? "..." : "",
			   by_hand ? "the seed was given by hand, not derived "
				     "from the entries: whoever chose it chose "
				     "the variants"
				   : bound);
	apf_heldout_list_free(h);
	free(file);
	return rc;
}

/* ---- the run ---------------------------------------------------------------- */

typedef int (*check_fn)(struct vx *v);

static int run_check(struct vx *v, int check, check_fn fn)
{
	struct apf_verify_result *res = &v->rep->check[check];
	uint64_t t0 = apf_now_ns();
	v->labelled = 0;
	int rc = fn(v);
	res->seconds = (double)(apf_now_ns() - t0) / 1e9;
	if (!rc) {
		res->outcome = APF_VERIFY_PASSED;
		return 0;
	}
	/* Every failure names its check: the one that found it, where that
	 * is not the one running (a timing failure found while the log is
	 * read), else this one. */
	if (!v->labelled)
		apf_error_prefix(rc, label(check));
	res->outcome = APF_VERIFY_FAILED;
	free(res->detail);
	res->detail = apf_strdup(apf_error_message());
	return rc;
}

/* The report's list of the checkpoints the walk keeps, for the audits. */
static int keep_checkpoints(struct vx *v)
{
	apf_verify_report *rep = v->rep;
	rep->kept = apf_calloc(v->nunits + 1, sizeof *rep->kept);
	if (!rep->kept)
		return apf_error(APF_ENOMEM, v->dir, "out of memory");
	for (size_t i = 0; i < v->nunits; i++) {
		const struct vx_unit *u = &v->units[i];
		size_t n = u->nevals + (size_t)u->has_init;
		if (!n || u->pruned)
			continue;
		struct apf_verify_kept *k = &rep->kept[rep->nkept++];
		k->unit = apf_strdup(u->name);
		k->workload = apf_strdup(u->workload);
		k->variant = apf_strdup(u->variant);
		k->study = u->study;
		k->trial = u->trial0 + 1;
		k->ckpt = apf_calloc(n, sizeof *k->ckpt);
		if (!k->unit || !k->workload || !k->variant || !k->ckpt)
			return apf_error(APF_ENOMEM, v->dir, "out of memory");
		if (u->has_init) {
			k->ckpt[k->n] = (struct apf_verify_ckpt){0, 0, 0, {0}, NULL,
								 0, 0};
			memcpy(k->ckpt[k->n++].sha256, u->init.sha, 32);
		}
		for (size_t e = 0; e < u->nevals; e++) {
			const struct vx_eval *x = &u->evals[e];
			json_t *m = x->nm ? json_object() : NULL;
			for (uint32_t j = 0; m && j < x->nm; j++)
				json_object_set_new(m, u->mnames[x->mname[j]],
						    json_real(x->mval[j]));
			k->ckpt[k->n] = (struct apf_verify_ckpt){
				x->index, x->global_step, x->sub, {0}, m, x->why,
				x->asked_after};
			memcpy(k->ckpt[k->n++].sha256, x->sha, 32);
		}
	}
	return 0;
}

/* The report's statement of the hardware run.json claims, once check 2
 * has bound run.json to the log and the signed heads: what the audits
 * read of it (and print as claims: the runner's word, not a fact). */
static int keep_claims(struct vx *v)
{
	apf_verify_report *rep = v->rep;
	json_t *env = json_object_get(v->run_json, "environment");
	rep->threads = v->threads;
	const char *model = json_string_value(
		json_object_get(json_object_get(env, "cpu"), "model"));
	if (model && !(rep->cpu_model = apf_strdup(model)))
		return apf_error(APF_ENOMEM, v->dir, "out of memory");
	snprintf(rep->device, sizeof rep->device, "%s", v->device);
	const char *gpu = json_string_value(json_object_get(
		json_array_get(json_object_get(env, "gpus"), 0), "name"));
	if (gpu && !(rep->gpu_model = apf_strdup(gpu)))
		return apf_error(APF_ENOMEM, v->dir, "out of memory");
	/* load_head sets the signer only after the head's run_json_sha256
	 * matched run.json's digest. */
	rep->claims_signed = rep->runner_signer[0] != 0;
	rep->claims_known = 1;
	return 0;
}

static void vx_free(struct vx *v)
{
	for (size_t i = 0; i < v->nunits; i++)
		apf_vx_unit_free(&v->units[i]);
	free(v->units);
	free(v->by_name);
	for (size_t i = 0; i < v->nspecs; i++)
		apf_workload_spec_free(v->specs[i]);
	free(v->specs);
	apf_plan_free(v->plan);
	json_decref(v->run_json);
	apf_entry_free(v->entry);
	free(v->log_path);
}

int apf_verify_run(apf_verify_report **out, const char *dir,
		   const struct apf_verify_opts *o)
{
	*out = NULL;
	apf_verify_report *rep = apf_calloc(1, sizeof *rep);
	if (!rep || !(rep->run_dir = apf_strdup(dir))) {
		free(rep);
		return apf_error(APF_ENOMEM, dir, "out of memory");
	}
	*out = rep;
	struct vx v = {.dir = dir, .o = o, .rep = rep, .cur_unit = -1};
	v.log_path = in_run(&v, "log.jsonl");
	int rc = v.log_path ? 0 : apf_error(APF_ENOMEM, dir, "out of memory");
	struct stat st;
	if (!rc && (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)))
		rc = apf_error_errno(APF_EINPUT, errno, dir,
				     "not a run directory");
	/* The single-log layout has RUN/log.jsonl; the per-unit layout never
	 * has one, and a run directory with both kinds is neither. */
	struct stat lst, ist;
	char *index = rc ? NULL : in_run(&v, APF_RUNDIR_INDEX_FILE);
	int has_log = !rc && lstat(v.log_path, &lst) == 0;
	int has_index = index && lstat(index, &ist) == 0;
	free(index);
	if (!rc && has_log && has_index)
		rc = apf_error(APF_EINPUT, dir,
			       "both a run-level log.jsonl (the single-log "
			       "layout) and " APF_RUNDIR_INDEX_FILE " (per-unit "
			       "logs): not a run directory apf wrote");
	v.per_unit = !has_log;
	if (!rc)
		rc = run_check(&v, APF_VERIFY_ENTRY, check_entry);
	if (!rc)
		rc = run_check(&v, APF_VERIFY_LOG, check_log);
	if (!rc && v.per_unit)
		rep->units = v.nunits;
	if (!rc)
		rc = keep_claims(&v);
	if (!rc)
		rc = run_check(&v, APF_VERIFY_TIMING, check_timing);
	if (!rc && o->log_only) {
		rep->check[APF_VERIFY_CHECKPOINTS].outcome = APF_VERIFY_SKIPPED;
		rep->check[APF_VERIFY_CHECKPOINTS].detail =
			apf_strdup("log only: checkpoint files not read");
	} else if (!rc) {
		rc = run_check(&v, APF_VERIFY_CHECKPOINTS, check_checkpoints);
	}
	if (!rc) {
		rep->check[APF_VERIFY_REPLAY].outcome = APF_VERIFY_SKIPPED;
		rep->check[APF_VERIFY_REPLAY].detail =
			apf_strdup("not asked for (--replay)");
		rc = run_check(&v, APF_VERIFY_HELDOUT, check_heldout);
	}
	if (!rc && !rep->complete) {
		char extra[160] = "";
		if (rep->unsigned_records)
			snprintf(extra, sizeof extra,
				 "; its last %" PRIu64 " records are not "
				 "signed yet",
				 rep->unsigned_records);
		if (rep->torn_bytes)
			snprintf(extra + strlen(extra),
				 sizeof extra - strlen(extra),
				 "; a torn line of %zu bytes ends it",
				 rep->torn_bytes);
		rc = apf_error(APF_EABORT, v.per_unit ? dir : v.log_path,
			       "verified as far as it goes, but %s%s: the run "
			       "stopped abnormally or is still running (apf "
			       "run --resume continues it)",
			       v.incomplete, extra);
	}
	if (rep->check[APF_VERIFY_TIMING].outcome == APF_VERIFY_PASSED) {
		int krc = keep_checkpoints(&v);
		if (krc)
			rc = krc;
	}
	if (rep->check[APF_VERIFY_TIMING].outcome == APF_VERIFY_PASSED &&
	    !o->log_only) {
		/* A flag is no failure, and the verdict so far outlives the
		 * backstop (which fails only when out of memory). */
		char verdict[1024];
		apf_error_take(verdict, sizeof verdict);
		int prc = apf_vx_plausibility(&v);
		if (prc && (rc == 0 || rc == APF_EABORT))
			rc = prc;
		else
			apf_error_restore(rc, verdict);
	}
	rep->status = rc;
	vx_free(&v);
	return rc;
}

void apf_verify_report_free(apf_verify_report *r)
{
	if (!r)
		return;
	for (int i = 0; i <= APF_VERIFY_NCHECKS; i++)
		free(r->check[i].detail);
	for (size_t i = 0; i < r->nkept; i++) {
		for (size_t c = 0; c < r->kept[i].n; c++)
			json_decref(r->kept[i].ckpt[c].metrics);
		free(r->kept[i].unit);
		free(r->kept[i].workload);
		free(r->kept[i].variant);
		free(r->kept[i].ckpt);
	}
	apf_vx_plausibility_free(r->plausibility);
	free(r->cpu_model);
	free(r->gpu_model);
	free(r->replay_how.compare_why);
	free(r->replay_how.timing_why);
	free(r->kept);
	for (size_t i = 0; i < r->npruned; i++)
		free(r->pruned[i]);
	free(r->pruned);
	free(r->submission);
	free(r->run_dir);
	free(r);
}
