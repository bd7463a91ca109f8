/*
 * main.c: `apf __trial`, the trial process. Runs inside the sandbox with
 * the arena (fd 3), the control page (fd 4) and the channel to the
 * supervisor (fd 5); untrusted once the submission is loaded.
 *
 * Order matters: everything that needs a process, a thread or an exec (the
 * backend and its threads, the workload and its model without data) is set up
 * first; then the trial asks the supervisor to lock the sandbox, and only
 * then loads the submission, so not even the submission's constructors run
 * unlocked. The training split arrives with the first go, on the clock.
 */
#include "trial/trial.h"

#include <dlfcn.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "config/config.h"
#include "tuning/tuning.h"
#include "workload/workload.h"

struct tp {
	struct apf_unit_args a;
	struct apf_chan ch;
	void *arena;
	struct apf_control *ctl;
	apf_backend *be;
	apf_workload_spec *spec;
	apf_workload *wl;
	apf_hparams hp;
	apf_submission *sub;
	apf_trial *trial;
	const char *applied[2]; /* the hyperparameters the runner applied */
};

/* Applies a trial's dropout_rate / label_smoothing hyperparameters to the
 * workload's [model] values (where the model has them), as AlgoPerf hands
 * them to the workload. */

static int model_has_key(const apf_workload_spec *spec, const char *key)
{
	const struct apf_model_def *md = apf_model_find(spec->model);
	for (const char *const *k = md ? md->keys : NULL; k && *k; k++)
		if (!strcmp(*k, key))
			return 1;
	return 0;
}

static int apply_regularisation(struct apf_workload_spec *spec, const char *variant,
			 const struct apf_hparams *hp, const char *applied[2])
{
	static const char *const map[][2] = {{"dropout_rate", "dropout"},
					     {"label_smoothing",
					      "label_smoothing"}};
	for (size_t m = 0; m < 2; m++) {
		const char *name = map[m][0], *key = map[m][1];
		for (size_t i = 0; hp && i < hp->n; i++) {
			if (strcmp(hp->names[i], name) || hp->words[i] ||
			    !model_has_key(spec, key))
				continue;
			char v[64], sec[128];
			snprintf(v, sizeof v, "%.17g", hp->values[i]);
			int rc = apf_config_set(spec->ini, "model", key, v);
			snprintf(sec, sizeof sec, "variant.%s", variant);
			if (!rc && variant && strcmp(variant, "base") &&
			    apf_config_get(spec->ini, sec, key))
				rc = apf_config_set(spec->ini, sec, key, v);
			if (rc)
				return rc;
			applied[m] = name;
		}
	}
	return 0;
}

/* A warning for the submitter, to the supervisor (best effort: it is
 * advice, and a lost one changes no result). */
static void send_warning(void *user, const char *msg)
{
	(void)user;
	apf_chan_send(APF_FD_CHANNEL, "warn %s", msg);
	apf_error_clear();
}

/* Reports an error to the supervisor (best effort). */
static void report(void)
{
	char msg[600];
	snprintf(msg, sizeof msg, "%s", apf_error_message());
	for (char *p = msg; *p; p++)
		if (*p == '\n')
			*p = ' ';
	apf_chan_send(APF_FD_CHANNEL, "error %s", msg);
}

static int expect(struct tp *t, const char *word, char *line, size_t size)
{
	int r = apf_chan_recv(&t->ch, line, size, -1);
	if (r != 1)
		return apf_error(APF_EABORT, "trial", "the supervisor went away");
	if (strncmp(line, word, strlen(word)))
		return apf_error(APF_EABORT, "trial", "expected '%s' from the "
						      "supervisor, got '%.40s'",
				 word, line);
	return 0;
}

static int read_hparams(const char *path, apf_hparams *hp)
{
	char *text;
	int rc = apf_file_read(&text, NULL, path, 1 << 20);
	if (rc)
		return rc;
	json_error_t je;
	json_t *j = json_loads(text, JSON_REJECT_DUPLICATES, &je);
	free(text);
	if (!j)
		return apf_error(APF_EINPUT, path, "not JSON: %s", je.text);
	rc = apf_hparams_from_json(hp, j);
	json_decref(j);
	return rc;
}

/* "go <ns> <index> <8 numbers>": what the submission sees of the clock and
 * of the last eval. */
static int parse_go(struct tp *t, const char *line)
{
	unsigned long long ns;
	int idx;
	double v[6];
	if (sscanf(line, "go %llu %d %lf %lf %lf %lf %lf %lf", &ns, &idx, &v[0],
		   &v[1], &v[2], &v[3], &v[4], &v[5]) != 8)
		return apf_error(APF_EABORT, "trial", "malformed go");
	apf_trial_set_submission_time(t->trial, (double)ns / 1e9);
	if (idx > 0) {
		apf_trial_arena(t->trial)->evals = idx;
		apf_eval_results ev = {idx,
				       apf_trial_global_step(t->trial),
				       v[0],
				       v[1],
				       v[2],
				       v[3],
				       v[4],
				       v[5],
				       t->spec->validation_target,
				       t->spec->direction};
		apf_trial_set_eval(t->trial, &ev);
	}
	return 0;
}

static int setup(struct tp *t)
{
	t->arena = mmap(NULL, t->a.arena_bytes, PROT_READ | PROT_WRITE,
			MAP_SHARED, APF_FD_ARENA, 0);
	t->ctl = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, APF_FD_CONTROL,
		      0);
	if (t->arena == MAP_FAILED || t->ctl == MAP_FAILED)
		return apf_error_errno(APF_EABORT, errno, "trial",
				       "map the arena");
	/* The run's numerics (nn.h), before the backend is made: a replay
	 * of a run made with an older version computes with it. */
	int rc = t->a.numerics ? apf_numerics_set(t->a.numerics) : 0;
	if (rc)
		return rc;
	if (!strcmp(t->a.device, "cpu"))
		rc = apf_backend_cpu_new(&t->be, t->a.threads);
	else if (!strcmp(t->a.device, "cuda"))
		rc = apf_backend_cuda_new(&t->be, t->a.threads);
	else
		return apf_error(APF_EINPUT, "trial", "device '%s' is not built in",
				 t->a.device);
	if (!rc) {
		/* Start the BLAS thread pool (cpu), or create the context and
		 * the cuBLAS handle and load the kernels (cuda), now: no thread
		 * may be created once the sandbox is locked. */
		float *m = NULL;
		rc = t->be->alloc(t->be, 3 * 64 * 64 * sizeof(float), (void **)&m);
		if (!rc)
			t->be->gemm(t->be, 0, 0, 64, 64, 64, 1.0f, m, 64,
				    m + 4096, 64, 0.0f, m + 8192, 64);
		if (m)
			t->be->free(t->be, m);
		if (!rc)
			rc = t->be->sync(t->be);
	}
	/* OpenBLAS: apf computes nothing with it and does not link it, but
	 * a submission may (built with -lopenblas, or calling cblas_* as it
	 * could when apf linked it); it starts its threads as it loads,
	 * which the locked sandbox refuses, so it is loaded now, into the
	 * global scope, where the submission finds it. Where it is not
	 * installed, nothing is loaded. */
	dlopen("libopenblas.so.0", RTLD_NOW | RTLD_GLOBAL | RTLD_NODELETE);
	if (!rc) {
		char *dir = apf_path_join(t->a.workloads_dir, t->a.workload);
		rc = dir ? apf_workload_spec_load_dir(&t->spec, dir)
			 : apf_error(APF_ENOMEM, "trial", "out of memory");
		free(dir);
	}
	if (!rc)
		rc = read_hparams(t->a.hparams, &t->hp);
	if (!rc)
		rc = apply_regularisation(t->spec, t->a.variant, &t->hp,
					  t->applied);
	/* The model, built for the training split the first go brings. */
	if (!rc) {
		apf_trial_key key = {t->a.seed, t->a.study, t->a.trial};
		struct apf_train_layout layout = {t->a.train_h, t->a.train_w,
						  t->a.train_c,
						  t->a.train_classes,
						  t->a.train_n};
		rc = apf_workload_open_deferred(&t->wl, t->spec, t->a.variant,
						t->be, &key, &layout);
	}
	return rc;
}

static int train(struct tp *t)
{
	char line[APF_LINE_MAX];
	int rc = apf_chan_send(APF_FD_CHANNEL, "lock");
	if (!rc)
		rc = expect(t, "locked", line, sizeof line);
	if (!rc)
		rc = apf_submission_load(&t->sub, t->a.so);
	struct apf_objective obj;
	if (!rc) {
		apf_objective_of_workload(&obj, t->wl);
		struct apf_trial_info info = {
			.workload = t->a.workload,
			.variant = t->a.variant,
			.metric = t->spec->metric,
			.device = t->a.device,
			.train_examples = (int64_t)t->a.train_n,
			.max_runtime_s = t->a.budget_s,
			.max_steps = t->a.max_steps,
			.step_hint = t->a.step_hint,
			.key = {t->a.seed, t->a.study, t->a.trial}};
		rc = apf_trial_new(&t->trial, &obj, t->be, t->sub, &t->hp, &info,
				   t->arena, t->a.arena_bytes);
	}
	if (!rc) {
		for (int i = 0; i < 2; i++)
			if (t->applied[i])
				apf_trial_hp_consumed(t->trial, t->applied[i]);
		apf_trial_on_warning(t->trial, send_warning, NULL);
	}
	if (!rc)
		rc = apf_trial_init(t->trial);
	if (!rc)
		rc = apf_chan_send(APF_FD_CHANNEL, "ready %lld %d",
			       (long long)apf_trial_global_step(t->trial),
			       apf_trial_batch_size(t->trial));
	/* The first go brings the training split: attached now, on the
	 * clock. */
	int train = -1;
	if (!rc && apf_chan_recv_fd(&t->ch, line, sizeof line, &train) != 1)
		rc = apf_error(APF_EABORT, "trial", "the supervisor went away");
	if (!rc && strncmp(line, "go ", 3))
		rc = apf_error(APF_EABORT, "trial",
			       "expected 'go' from the supervisor, got '%.40s'",
			       line);
	if (!rc)
		rc = apf_workload_attach_train(t->wl, train);
	if (train >= 0)
		close(train); /* the split stays mapped */
	if (!rc)
		rc = parse_go(t, line);
	while (!rc) {
		int complete = 0;
		rc = apf_trial_step(t->trial, &complete);
		if (rc)
			break;
		int64_t step = apf_trial_global_step(t->trial);
		__atomic_store_n(&t->ctl->step, step, __ATOMIC_RELAXED);
		int64_t at = __atomic_load_n(&t->ctl->eval_at, __ATOMIC_ACQUIRE);
		const char *why = complete ? "complete"
				  : t->a.max_steps > 0 && step >= t->a.max_steps
					  ? "max_steps"
				  : at > 0 && step >= at ? "due"
							 : NULL;
		if (!why)
			continue;
		rc = apf_trial_prepare_eval(t->trial);
		if (!rc)
			rc = apf_chan_send(APF_FD_CHANNEL, "eval %lld %s", (long long)step,
				       why);
		/* On the clock: the interval ends when the supervisor has
		 * frozen the trial, after "copied". */
		if (!rc)
			rc = apf_trial_snapshot(t->trial);
		if (!rc)
			rc = apf_chan_send(APF_FD_CHANNEL, "copied");
		if (!rc) {
			int r = apf_chan_recv(&t->ch, line, sizeof line, -1);
			if (r != 1)
				rc = apf_error(APF_EABORT, "trial",
					       "the supervisor went away");
			else if (!strcmp(line, "stop"))
				break;
			else if (!strncmp(line, "go ", 3))
				rc = parse_go(t, line);
			else
				rc = apf_error(APF_EABORT, "trial",
					       "unexpected '%.40s'", line);
		}
	}
	return rc;
}

int apf_trial_main(int argc, char **argv)
{
	struct tp t = {0};
	t.ch.fd = APF_FD_CHANNEL;
	int rc = apf_unit_args_parse(&t.a, argc, argv);
	if (!rc)
		rc = setup(&t);
	if (!rc)
		rc = train(&t);
	if (rc)
		report();
	apf_trial_free(t.trial);
	apf_workload_close(t.wl);
	apf_workload_spec_free(t.spec);
	apf_hparams_free(&t.hp);
	if (t.be)
		apf_backend_free(t.be);
	return rc ? 1 : 0;
}
