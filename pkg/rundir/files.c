/*
 * files.c: the run directory's names and derived files: unit directory
 * and checkpoint names, the signed head of the log (log.dsse.json) and each unit's
 * eval_measurements.csv. Both files are rewritten atomically at every
 * eval, so a crash leaves the previous version.
 */
#include "rundir/rundir.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "heldout/heldout.h"
#include "manifest/manifest.h"
#include "runlog/runlog.h"
#include "sign/sign.h"
#include "tuning/tuning.h"
#include "workload/workload.h"

int apf_rundir_ckpt_name(char *out, size_t size, const char *unit,
			 uint64_t index)
{
	return snprintf(out, size, "%s%sckpt/%" PRIu64 ".bin", unit ? unit : "",
			unit ? "/" : "", index);
}

int apf_rundir_ckpt_named(const char *text, size_t len, const char *unit,
			  size_t unit_len, uint64_t index)
{
	const char *p = text, *end = text + len;
	if (len > unit_len && !memcmp(p, unit, unit_len) && p[unit_len] == '/')
		p += unit_len + 1;
	if (end - p < 5 || memcmp(p, "ckpt/", 5))
		return 0;
	p += 5;
	char digits[24];
	int n = 0;
	do {
		digits[n++] = (char)('0' + index % 10);
		index /= 10;
	} while (index);
	if (end - p != n + 4)
		return 0;
	while (n)
		if (*p++ != digits[--n])
			return 0;
	return !memcmp(p, ".bin", 4);
}

int apf_rundir_unit_name(char *out, size_t size, long study,
			 const char *workload, const char *variant, long trial)
{
	if (variant && strcmp(variant, "base"))
		return snprintf(out, size, "study_%ld/%s_%s/trial_%ld", study,
				workload, variant, trial);
	return snprintf(out, size, "study_%ld/%s/trial_%ld", study, workload,
			trial);
}

int apf_rundir_sign_head(const char *run_dir, const struct apf_key *key,
			 const char *run_json_sha256,
			 const struct apf_runlog *log)
{
	json_t *p = json_pack("{s:s, s:s, s:I, s:s}", "format",
			      APF_RUNDIR_HEAD_FORMAT, "run_json_sha256",
			      run_json_sha256, "records",
			      (json_int_t)apf_runlog_count(log), "head",
			      apf_runlog_head(log));
	char *payload = p ? json_dumps(p, JSON_COMPACT) : NULL;
	json_decref(p);
	if (!payload)
		return apf_error(APF_ENOMEM, "log.dsse.json", "out of memory");
	apf_buf env = {0};
	int rc = apf_dsse_sign(key, APF_RUNDIR_HEAD_TYPE, payload,
			       strlen(payload), &env);
	free(payload);
	char *path = apf_path_join(run_dir, "log.dsse.json");
	if (!rc)
		rc = path ? apf_file_write(path, env.data, env.len, 0644, 0)
			  : apf_error(APF_ENOMEM, "log.dsse.json", "out of memory");
	free(path);
	apf_buf_free(&env);
	return rc;
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static void put_number(apf_buf *b, double v, int is_seconds)
{
	if (isnan(v))
		apf_buf_puts(b, "nan");
	else if (is_seconds)
		apf_buf_printf(b, "%.9f", v);
	else
		apf_buf_printf(b, "%.9g", v);
}

int apf_rundir_write_csv(const char *path, const json_t *rows)
{
	/* Columns: the AlgoPerf ones, every metric the rows carry, sorted
	 * bytewise as AlgoPerf writes them. */
	static const char *const fixed[] = {
		"accumulated_eval_time", "accumulated_logging_time",
		"accumulated_submission_time", "global_step", "preemption_count",
		"score", "total_duration"};
	const char *cols[64];
	size_t n = 0;
	for (size_t i = 0; i < sizeof fixed / sizeof *fixed; i++)
		cols[n++] = fixed[i];
	json_t *first = json_array_get(rows, 0);
	const char *key;
	json_t *v;
	json_object_foreach(json_object_get(first, "metrics"), key, v)
	{
		if (n < 64)
			cols[n++] = key;
	}
	qsort(cols, n, sizeof *cols, cmp_str);
	apf_buf b = {0};
	for (size_t c = 0; c < n; c++)
		apf_buf_printf(&b, "%s%s", c ? "," : "", cols[c]);
	apf_buf_puts(&b, "\n");
	size_t i;
	json_t *row;
	json_array_foreach(rows, i, row)
	{
		json_t *m = json_object_get(row, "metrics");
#define NS(k) ((double)json_integer_value(json_object_get(row, k)) / 1e9)
		for (size_t c = 0; c < n; c++) {
			const char *col = cols[c];
			if (c)
				apf_buf_puts(&b, ",");
			if (!strcmp(col, "accumulated_eval_time"))
				put_number(&b, NS("accumulated_eval_ns"), 1);
			else if (!strcmp(col, "accumulated_logging_time"))
				put_number(&b, NS("accumulated_logging_ns"), 1);
			else if (!strcmp(col, "accumulated_submission_time") ||
				 !strcmp(col, "score"))
				put_number(&b, NS("accumulated_submission_ns"), 1);
			else if (!strcmp(col, "total_duration"))
				put_number(&b, NS("total_duration_ns"), 1);
			else if (!strcmp(col, "global_step") ||
				 !strcmp(col, "preemption_count"))
				apf_buf_printf(&b, "%lld",
					       (long long)json_integer_value(
						       json_object_get(row, col)));
			else if (json_is_integer(json_object_get(m, col)))
				apf_buf_printf(&b, "%lld",
					       (long long)json_integer_value(
						       json_object_get(m, col)));
			/* A metric the row lacks is one whose value was not
			 * finite (a diverged loss, its perplexity), which the
			 * log's JSON cannot hold: an empty cell, which the
			 * verifier expects and readers take for NaN. Never
			 * 0, which is no value the log has and would meet a
			 * minimised target. */
			else if (json_is_number(json_object_get(m, col)))
				put_number(&b, json_number_value(
						       json_object_get(m, col)),
					   0);
		}
#undef NS
		apf_buf_puts(&b, "\n");
	}
	int rc = b.data ? apf_file_write(path, b.data, b.len, 0644, 0)
			: apf_error(APF_ENOMEM, path, "out of memory");
	apf_buf_free(&b);
	return rc;
}

int apf_rundir_plan_heldout(struct apf_plan *plan,
			    const struct apf_manifest *m, const char *path,
			    char ***variants, size_t *nvariants)
{
	*variants = NULL;
	*nvariants = 0;
	apf_heldout_list *h = NULL;
	int rc = apf_heldout_list_load(&h, path);
	if (!rc && !h->seed)
		rc = apf_error(APF_EINPUT, path,
			       "not an apf held-out draw (apf heldout draw "
			       "writes one)");
	char **names = rc ? NULL : apf_calloc(h->n + 1, sizeof *names);
	if (!rc && !names)
		rc = apf_error(APF_ENOMEM, path, "out of memory");
	size_t n = 0;
	for (size_t i = 0; !rc && i < h->n; i++) {
		const struct apf_heldout_named *d = &h->v[i];
		const char *base = NULL;
		for (size_t w = 0; w < m->nworkloads && !base; w++)
			if (d->base && !strcmp(m->workloads[w].name, d->base))
				base = m->workloads[w].name;
		if (!base)
			continue; /* a workload this entry is not for */
		const char *v = d->workload + strlen(base) + 1;
		apf_workload_spec *spec = NULL;
		rc = apf_workload_spec_load(&spec, base);
		if (!rc && !apf_workload_variant(spec, v))
			rc = apf_error(APF_EINPUT, path,
				       "draws variant '%s', which workload %s does "
				       "not have",
				       v, base);
		apf_workload_spec_free(spec);
		if (!rc && !(names[n] = apf_strdup(v)))
			rc = apf_error(APF_ENOMEM, path, "out of memory");
		if (!rc)
			rc = apf_plan_add_variant(plan, base, names[n++]);
	}
	apf_heldout_list_free(h);
	*variants = names;
	*nvariants = n;
	return rc;
}
