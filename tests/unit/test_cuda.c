/*
 * test_cuda.c: the CUDA backend's loader (nn/cuda_loader.c) on any machine,
 * and the plugin's memory functions where a GPU is present.
 *
 * Every failure of apf_backend_cuda_new is one line saying why: an apf
 * without the plugin, a plugin that does not load, a plugin without the
 * entry point, no device. The device cases skip with the probe's reason;
 * they are never passed without a device. tests/gpu/run checks each kernel
 * against the CPU backend on a GPU machine.
 */
#include "testlib.h"

#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "nn/nn.h"

/* The plugin make builds beside this test: <build>/lib/apf-cuda.so, this
 * binary being <build>/tests/test_cuda. "" when it is not there. */
static void built_plugin(char *path, size_t n)
{
	char exe[PATH_MAX];
	ssize_t k = readlink("/proc/self/exe", exe, sizeof exe - 1);
	path[0] = 0;
	if (k <= 0)
		return;
	exe[k] = 0;
	for (int up = 0; up < 2; up++) {
		char *slash = strrchr(exe, '/');
		if (!slash)
			return;
		*slash = 0;
	}
	snprintf(path, n, "%.*s/lib/apf-cuda.so", (int)(n - 20), exe);
	if (access(path, F_OK) != 0)
		path[0] = 0;
}

/* apf_backend_cuda_new fails: its message, which must be one line. */
static const char *cuda_new_fails(void)
{
	apf_backend *be = (apf_backend *)1;
	int rc = apf_backend_cuda_new(&be, 1);
	assert_int_not_equal(rc, 0);
	assert_null(be);
	const char *m = apf_error_message();
	assert_null(strchr(m, '\n'));
	return m;
}

/* Whether this process has mapped a file whose name contains `name`. */
static int mapped(const char *name)
{
	FILE *f = fopen("/proc/self/maps", "r");
	assert_non_null(f);
	char line[4096];
	int found = 0;
	while (!found && fgets(line, sizeof line, f))
		found = strstr(line, name) != NULL;
	fclose(f);
	return found;
}

/* Runs first: the probe asks in a child, so neither the plugin nor CUDA's
 * runtime is ever loaded into the caller (a run's supervisor). */
static void the_probe_loads_nothing_into_the_caller(void **state)
{
	(void)state;
	char plugin[PATH_MAX], what[512];
	built_plugin(plugin, sizeof plugin);
	if (!plugin[0])
		SKIP_BECAUSE("this build has no CUDA plugin (no nvcc, or "
			     "APF_NO_CUDA=1)");
	assert_false(mapped("apf-cuda.so"));
	setenv("APF_CUDA_PLUGIN", plugin, 1);
	int rc = apf_cuda_probe(what, sizeof what);
	unsetenv("APF_CUDA_PLUGIN");
	/* either answer is a full sentence from the child */
	assert_true(rc == 0 ? strstr(what, "compute ") != NULL
			    : strstr(what, "no CUDA device (driver: ") != NULL);
	assert_false(mapped("apf-cuda.so"));
	assert_false(mapped("libcudart"));
}

static void without_the_plugin_it_says_apf_was_built_without_cuda(void **state)
{
	(void)state;
	/* From build/tests/ no plugin is found beside the executable. */
	unsetenv("APF_CUDA_PLUGIN");
	const char *m = cuda_new_fails();
	assert_non_null(strstr(m, "cuda backend: this apf was built without "
				  "CUDA (no "));
	assert_non_null(strstr(m, "/tests/lib/apf-cuda.so)"));
	char why[512];
	assert_int_not_equal(apf_cuda_probe(why, sizeof why), 0);
	assert_non_null(strstr(why, "this apf was built without CUDA"));
}

static void a_plugin_that_does_not_load_gives_the_dlopen_reason(void **state)
{
	(void)state;
	setenv("APF_CUDA_PLUGIN", "/nonexistent", 1);
	const char *m = cuda_new_fails();
	assert_string_equal(m, "cuda backend: cannot load the CUDA plugin: "
			       "/nonexistent: cannot open shared object file: "
			       "No such file or directory");
	unsetenv("APF_CUDA_PLUGIN");
}

static void a_library_without_the_entry_point_is_refused(void **state)
{
	(void)state;
	/* libc loads, and has no apf_cuda_plugin_new. */
	Dl_info info;
	assert_int_not_equal(dladdr((void *)&printf, &info), 0);
	setenv("APF_CUDA_PLUGIN", info.dli_fname, 1);
	const char *m = cuda_new_fails();
	assert_non_null(strstr(m, info.dli_fname));
	assert_non_null(strstr(m, ": no symbol apf_cuda_plugin_new"));
	unsetenv("APF_CUDA_PLUGIN");
}

static void the_built_plugin_without_a_device_says_no_cuda_device(void **state)
{
	(void)state;
	char plugin[PATH_MAX];
	built_plugin(plugin, sizeof plugin);
	if (!plugin[0])
		SKIP_BECAUSE("this build has no CUDA plugin (no nvcc, or "
			     "APF_NO_CUDA=1)");
	setenv("APF_CUDA_PLUGIN", plugin, 1);
	char what[512];
	if (apf_cuda_probe(what, sizeof what) == 0) {
		unsetenv("APF_CUDA_PLUGIN");
		SKIP_BECAUSE("a CUDA device is present (%s)", what);
	}
	apf_error_clear();
	const char *m = cuda_new_fails();
	assert_non_null(strstr(m, "cuda backend: no CUDA device (driver: "));
	/* the probe says the same, and records no error */
	apf_error(APF_EINPUT, "marker", "kept");
	char again[512];
	assert_int_not_equal(apf_cuda_probe(again, sizeof again), 0);
	assert_non_null(strstr(again, "no CUDA device (driver: "));
	assert_string_equal(apf_error_message(), "marker: kept");
	unsetenv("APF_CUDA_PLUGIN");
}

/* On a GPU: the backend's name, zeroed allocations, round trips, a clean
 * sync, and an error (freeing what cudaMalloc did not give) reported once,
 * at the next sync. */
static void on_a_gpu_memory_round_trips_and_errors_are_sticky(void **state)
{
	(void)state;
	char plugin[PATH_MAX], what[512];
	built_plugin(plugin, sizeof plugin);
	if (!plugin[0])
		SKIP_BECAUSE("this build has no CUDA plugin (no nvcc, or "
			     "APF_NO_CUDA=1)");
	setenv("APF_CUDA_PLUGIN", plugin, 1);
	if (apf_cuda_probe(what, sizeof what)) {
		unsetenv("APF_CUDA_PLUGIN");
		SKIP_BECAUSE("%s", what);
	}
	apf_backend *be;
	assert_apf_ok(apf_backend_cuda_new(&be, 3));
	assert_string_equal(be->name, "cuda");
	assert_int_equal(be->threads, 3);
	/* its optional entries left NULL: nets run batch norm, add and ReLU
	 * as three layers, instance norm and ReLU as two */
	assert_null(be->batchnorm_relu_forward);
	assert_null(be->instnorm_relu_forward);
	assert_non_null(be->conv2d_forward);
	enum { N = 1000 };
	float host[N], back[N];
	float *d;
	assert_apf_ok(be->alloc(be, N * sizeof(float), (void **)&d));
	be->download(be, back, d, sizeof back);
	for (int i = 0; i < N; i++)
		assert_true(back[i] == 0.0f);
	for (int i = 0; i < N; i++)
		host[i] = (float)i - 500.0f;
	be->upload(be, d, host, sizeof host);
	be->scale(be, d, 2.0f, N);
	be->download(be, back, d, sizeof back);
	for (int i = 0; i < N; i++)
		assert_true(back[i] == 2.0f * host[i]);
	assert_true(be->sum(be, d, N) == -1000.0);
	assert_apf_ok(be->sync(be));
	be->free(be, host);
	assert_int_not_equal(be->sync(be), 0);
	assert_non_null(strstr(apf_error_message(), "cuda backend: free: "));
	assert_apf_ok(be->sync(be));
	be->free(be, d);
	apf_backend_free(be);
	unsetenv("APF_CUDA_PLUGIN");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(the_probe_loads_nothing_into_the_caller),
		cmocka_unit_test(without_the_plugin_it_says_apf_was_built_without_cuda),
		cmocka_unit_test(a_plugin_that_does_not_load_gives_the_dlopen_reason),
		cmocka_unit_test(a_library_without_the_entry_point_is_refused),
		cmocka_unit_test(the_built_plugin_without_a_device_says_no_cuda_device),
		cmocka_unit_test(on_a_gpu_memory_round_trips_and_errors_are_sticky),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
