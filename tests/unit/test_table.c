/*
 * test_table.c: table files (dense + categorical features + 0/1 label) and
 * every way one can be wrong, the sealed hand-over of a table's train
 * split, the exact AUC against a pairwise count, and a table workload end
 * to end: spec checks (loss, metrics, columns against the files), its
 * metrics, a short run that learns, and evaluation's refusal in a trial.
 */
#include "testlib.h"

#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "data/data.h"
#include "workload/workload.h"

/* A table of n rows, 2 dense and 2 categorical columns (rows 5 and 3):
 * label 1 exactly when id 0 is 1 or 2 (a signal a model can learn). */
static size_t make_table(unsigned char **out, size_t n, uint64_t seed)
{
	const int nd = 2, nc = 2;
	const uint32_t rows[2] = {5, 3};
	size_t len = 32 + 4 * nc + n * (4 * nd + 4 * nc + 1);
	unsigned char *b = calloc(1, len);
	memcpy(b, "APFTAB01", 8);
	uint32_t cols[2] = {nd, nc};
	uint64_t nn = n;
	memcpy(b + 8, cols, 8);
	memcpy(b + 16, &nn, 8);
	memcpy(b + 32, rows, 8);
	float *d = (float *)(b + 40);
	int32_t *c = (int32_t *)(b + 40 + n * nd * 4);
	unsigned char *y = b + 40 + n * (nd + nc) * 4;
	apf_rng_key k = {seed, 0, 0, APF_RNG_TEST};
	apf_rng r;
	apf_rng_init(&r, &k, 0);
	for (size_t i = 0; i < n; i++) {
		d[i * 2] = apf_rng_normal(&r);
		d[i * 2 + 1] = apf_rng_uniform(&r);
		c[i * 2] = (int32_t)apf_rng_below(&r, 5);
		c[i * 2 + 1] = (int32_t)apf_rng_below(&r, 3);
		y[i] = c[i * 2] == 1 || c[i * 2] == 2;
	}
	*out = b;
	return len;
}

static int parse_bytes(unsigned char *b, size_t len)
{
	apf_table t;
	return apf_table_parse(&t, b, len, "t");
}

static void table_files_are_checked_whole(void **state)
{
	(void)state;
	unsigned char *b;
	size_t len = make_table(&b, 10, 1);
	apf_table t;
	assert_apf_ok(apf_table_parse(&t, b, len, "t"));
	assert_int_equal(t.n, 10);
	assert_int_equal(t.n_dense, 2);
	assert_int_equal(t.n_cat, 2);
	assert_int_equal(t.rows[0], 5);
	size_t head = 40, cat = head + 10 * 8, lab = cat + 10 * 8;
	/* each way a table can be wrong, named */
	struct {
		size_t off;
		unsigned char v;
		const char *msg;
	} bad[] = {
		{0, 'X', "bad magic"},
		{cat + 4, 7, "outside its 3 rows"},    /* row 0, id 1 = 7 */
		{cat + 3, 0x80, "outside its 5 rows"}, /* a negative id */
		{lab + 9, 2, "label 2 is not 0 or 1"},
		{head + 3, 0x7f, NULL},                /* patched below: NaN */
	};
	for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
		unsigned char *c = malloc(len);
		memcpy(c, b, len);
		if (bad[i].msg) {
			c[bad[i].off] = bad[i].v;
		} else {
			float nan = NAN;
			memcpy(c + head, &nan, 4);
		}
		assert_int_equal(parse_bytes(c, len), APF_EINPUT);
		assert_non_null(strstr(apf_error_message(),
				       bad[i].msg ? bad[i].msg : "not finite"));
		free(c);
	}
	assert_int_equal(parse_bytes(b, len - 1), APF_EINPUT);
	assert_non_null(strstr(apf_error_message(), "the header says"));
	assert_int_equal(parse_bytes(b, 20), APF_EINPUT);
	/* a header claiming more rows than the bytes hold */
	uint64_t huge = (uint64_t)1 << 31;
	memcpy(b + 16, &huge, 8);
	assert_int_equal(parse_bytes(b, len), APF_EINPUT);
	free(b);
}

/* dir/{train,validation,test}.tab of n, 200 and 200 rows. */
static void write_tables(const char *dir, size_t n)
{
	const char *names[3] = {"train.tab", "validation.tab", "test.tab"};
	size_t rows[3] = {n, 200, 200};
	for (int s = 0; s < 3; s++) {
		unsigned char *b;
		size_t len = make_table(&b, rows[s], 10 + (uint64_t)s);
		testlib_write(dir, names[s], b, len, 0644);
		free(b);
	}
}

static void table_train_split_is_handed_over_sealed(void **state)
{
	(void)state;
	char *dir = testlib_tmpdir();
	write_tables(dir, 300);
	const char *names[3] = {"train.tab", "validation.tab", "test.tab"};
	apf_dataset *ds;
	assert_apf_ok(apf_dataset_load_tables(&ds, dir, names));
	assert_int_equal(apf_dataset_size(ds, APF_SPLIT_TRAIN), 300);
	assert_int_equal(apf_dataset_size(ds, APF_SPLIT_TEST), 200);
	assert_true(ds->holds_eval);
	int fd;
	assert_apf_ok(apf_dataset_export_train(&fd, ds));
	/* the memfd cannot be written or resized by whoever holds it */
	assert_true(write(fd, "x", 1) < 0);
	assert_true(ftruncate(fd, 10) < 0);
	apf_dataset *in;
	assert_apf_ok(apf_dataset_import_train(&in, fd, APF_DATA_TABLE, 0, 1));
	assert_false(in->holds_eval);
	assert_int_equal(apf_dataset_size(in, APF_SPLIT_TRAIN), 300);
	assert_int_equal(apf_dataset_size(in, APF_SPLIT_VALIDATION), 0);
	assert_int_equal(apf_dataset_size(in, APF_SPLIT_TEST), 0);
	float x1[4], x2[4];
	int32_t c1[4], c2[4], y1[2], y2[2];
	uint32_t idx[2] = {299, 7};
	apf_dataset_gather(ds, APF_SPLIT_TRAIN, idx, 0, 2, x1, c1, y1);
	apf_dataset_gather(in, APF_SPLIT_TRAIN, idx, 0, 2, x2, c2, y2);
	assert_memory_equal(x1, x2, sizeof x1);
	assert_memory_equal(c1, c2, sizeof c1);
	assert_memory_equal(y1, y2, sizeof y1);
	/* the table's memfd is no image hand-over, and the other way round */
	apf_dataset *wrong;
	assert_int_equal(apf_dataset_import_train(&wrong, fd, APF_DATA_IMAGES,
						  0, 1),
			 APF_EINPUT);
	apf_dataset_free(in);
	close(fd);
	/* an unsealed memfd with a valid table is refused */
	int raw = memfd_create("t", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	const apf_table *t = ds->table[APF_SPLIT_TRAIN];
	assert_true(write(raw, t->buf, t->len) == (ssize_t)t->len);
	assert_int_equal(apf_dataset_import_train(&wrong, raw, APF_DATA_TABLE,
						  0, 1),
			 APF_EINPUT);
	assert_non_null(strstr(apf_error_message(), "not a sealed memfd"));
	close(raw);
	apf_dataset_free(ds);
	testlib_tmpdir_free(dir);
}

/* Pairwise: P(score of a positive > score of a negative), ties 1/2. */
static double auc_pairs(const float *s, const int32_t *y, size_t n)
{
	double num = 0, den = 0;
	for (size_t i = 0; i < n; i++)
		for (size_t j = 0; j < n; j++)
			if (y[i] && !y[j]) {
				den += 1;
				num += s[i] > s[j] ? 1 : s[i] == s[j] ? 0.5 : 0;
			}
	return num / den;
}

static void auc_is_exact_with_ties(void **state)
{
	(void)state;
	double a;
	const float s1[4] = {0.1f, 0.4f, 0.35f, 0.8f};
	const int32_t y1[4] = {0, 0, 1, 1};
	assert_apf_ok(apf_auc(&a, s1, y1, 4));
	assert_true(a == 0.75);
	const float s2[4] = {1, 1, 1, 1};
	assert_apf_ok(apf_auc(&a, s2, y1, 4));
	assert_true(a == 0.5);
	const int32_t one[4] = {1, 1, 1, 1};
	assert_apf_ok(apf_auc(&a, s1, one, 4));
	assert_true(isnan(a));
	const float s3[4] = {0.1f, NAN, 0.2f, 0.3f};
	assert_apf_ok(apf_auc(&a, s3, y1, 4));
	assert_true(isnan(a));
	/* many ties across both classes, against the pairwise count */
	enum { N = 501 };
	float s[N];
	int32_t y[N];
	apf_rng_key k = {3, 0, 0, APF_RNG_TEST};
	apf_rng r;
	apf_rng_init(&r, &k, 0);
	for (int i = 0; i < N; i++) {
		s[i] = (float)apf_rng_below(&r, 17) / 4.0f;
		y[i] = apf_rng_uniform(&r) < 0.1f + 0.04f * s[i];
	}
	assert_apf_ok(apf_auc(&a, s, y, N));
	assert_true(fabs(a - auc_pairs(s, y, N)) < 1e-12);
	assert_true(a > 0.5);
}

static const char *tiny_ini =
	"[workload]\nname = tinyclicks\nmodel = dlrm\nloss = sigmoid_xent\n"
	"metric = log_loss\nmetrics = log_loss, auc\ndirection = min\n"
	"validation_target = 0.3\ntest_target = 0.3\n"
	"[dataset]\nname = tc\npath = data\nformat = table\n"
	"train = train.tab\nvalidation = validation.tab\ntest = test.tab\n"
	"dense_features = 2\ncategorical_rows = 5, 3\n"
	"[model]\nembedding_dim = 4\nbottom = 8, 4\ntop = 16\n"
	"norm = none\nembedding_init = 0.1\n"
	"[budget.cpu]\nmax_runtime_s = 60\neval_period_s = 5\n"
	"[variant.ln]\nnorm = layernorm\n";

static apf_workload_spec *tiny_spec(char *root, const char *ini)
{
	testlib_write_str(root, "tinyclicks/workload.ini", ini);
	char *wdir = apf_path_join(root, "tinyclicks");
	char *ddir = apf_path_join(wdir, "data");
	write_tables(ddir, 2000);
	apf_workload_spec *w = NULL;
	int rc = apf_workload_spec_load_dir(&w, wdir);
	free(ddir);
	free(wdir);
	return rc ? NULL : w;
}

static char *replace(const char *s, const char *from, const char *to)
{
	const char *p = strstr(s, from);
	assert_non_null(p);
	char *o = malloc(strlen(s) + strlen(to) + 1);
	memcpy(o, s, (size_t)(p - s));
	strcpy(o + (p - s), to);
	strcat(o, p + strlen(from));
	return o;
}

static void table_workload_checks_its_spec_against_the_files(void **state)
{
	(void)state;
	apf_backend *be;
	assert_apf_ok(apf_backend_cpu_new(&be, 1));
	struct {
		const char *from, *to, *msg;
		int at_load;
	} bad[] = {
		{"loss = sigmoid_xent", "loss = cross_entropy",
		 "cross_entropy reports accuracy, cross_entropy and perplexity, not 'log_loss'", 0},
		{"direction = min", "direction = max", "falls (min)", 0},
		{"metrics = log_loss, auc", "metrics = auc",
		 "must include the metric 'log_loss'", 1},
		{"metrics = log_loss, auc", "metrics = log_loss, accuracy",
		 "not 'accuracy'", 0},
		{"metrics = log_loss, auc", "metrics = log_loss, auc, log_loss",
		 "'log_loss' twice", 1},
		{"metrics = log_loss, auc", "metrics = log_loss, loss",
		 "'loss' is not a metric name", 1},
		{"format = table", "format = csv", "unknown format 'csv'", 0},
		{"categorical_rows = 5, 3", "categorical_rows = 5, 4",
		 "feature 1 has 3 rows in the tables, 4 in the spec", 0},
		{"dense_features = 2", "dense_features = 3",
		 "the spec says 3 and 2", 0},
		{"bottom = 8, 4", "bottom = 8, 5", "embedding_dim", 0},
	};
	for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
		char *root = testlib_tmpdir();
		char *ini = replace(tiny_ini, bad[i].from, bad[i].to);
		apf_workload_spec *w = tiny_spec(root, ini);
		if (bad[i].at_load) {
			assert_null(w);
		} else {
			assert_non_null(w);
			apf_workload *wl = NULL;
			assert_int_equal(apf_workload_open(&wl, w, "base", be,
							   NULL, 0),
					 APF_EINPUT);
			assert_null(wl);
		}
		if (!strstr(apf_error_message(), bad[i].msg))
			fail_msg("case %zu: '%s' lacks '%s'", i,
				 apf_error_message(), bad[i].msg);
		apf_workload_spec_free(w);
		free(ini);
		testlib_tmpdir_free(root);
	}
	apf_backend_free(be);
}

static void metrics_default_to_the_metric_alone(void **state)
{
	(void)state;
	char *root = testlib_tmpdir();
	char *ini = replace(tiny_ini, "metrics = log_loss, auc\n", "");
	apf_workload_spec *w = tiny_spec(root, ini);
	assert_non_null(w);
	assert_int_equal(w->nmetrics, 1);
	assert_string_equal(w->metrics[0], "log_loss");
	apf_workload_spec_free(w);
	free(ini);
	w = tiny_spec(root, tiny_ini);
	assert_int_equal(w->nmetrics, 2);
	assert_string_equal(w->metrics[1], "auc");
	apf_workload_spec_free(w);
	testlib_tmpdir_free(root);
}

static void table_workload_learns_and_reports_log_loss_and_auc(void **state)
{
	(void)state;
	char *root = testlib_tmpdir();
	apf_workload_spec *w = tiny_spec(root, tiny_ini);
	assert_non_null(w);
	apf_backend *be;
	assert_apf_ok(apf_backend_cpu_new(&be, 2));
	apf_trial_key key = {7, 0, 1};
	for (int v = 0; v < 2; v++) {
		apf_workload *wl;
		assert_apf_ok(apf_workload_open(&wl, w, v ? "ln" : "base", be,
						&key, 0));
		assert_int_equal(apf_net_out_features(apf_workload_net(wl)), 1);
		struct apf_fit_opts o = {
			.steps = 300, .batch = 32,
			.adamw = {.lr = 1e-2, .b1 = 0.9, .b2 = 0.999,
				  .eps = 1e-8, .warmup_frac = 0.05},
			.eval_splits = 7};
		struct apf_fit_result r;
		assert_apf_ok(apf_workload_fit(&r, wl, &o));
		const struct apf_split_metrics *va =
			&r.last.split[APF_SPLIT_VALIDATION];
		/* The label is a function of one id: a model that learns it
		 * is far below the click rate's entropy (0.67 here) and
		 * ranks almost perfectly. */
		printf("    %s: validation log loss %.4f, AUC %.4f\n",
		       v ? "ln" : "base", va->log_loss, va->auc);
		assert_true(va->log_loss == va->loss);
		assert_true(va->log_loss < 0.1);
		assert_true(va->auc > 0.99 && va->auc <= 1.0);
		assert_true(isnan(va->accuracy));
		assert_int_equal(va->n, 200);
		assert_true(apf_workload_metric(wl, va) == va->log_loss);
		assert_true(r.best_validation <= va->log_loss);
		apf_workload_close(wl);
	}
	apf_backend_free(be);
	apf_workload_spec_free(w);
	testlib_tmpdir_free(root);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(table_files_are_checked_whole),
		cmocka_unit_test(table_train_split_is_handed_over_sealed),
		cmocka_unit_test(auc_is_exact_with_ties),
		cmocka_unit_test(table_workload_checks_its_spec_against_the_files),
		cmocka_unit_test(metrics_default_to_the_metric_alone),
		cmocka_unit_test(table_workload_learns_and_reports_log_loss_and_auc),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
