/*
 * env.c: capturing, validating and comparing the environment record.
 *
 * Everything is read from the running system (uname, /proc, /etc/os-release,
 * OpenBLAS's own report, NVIDIA's management library, CUDA runtime, cuBLAS
 * and cuDNN when they are installed, opened with dlopen in a child process
 * so that apf links no CUDA and no vendor library enters its processes),
 * never from what a user claims, except the container image digest, which
 * only the container's launcher knows ($APF_IMAGE_DIGEST).
 */
#include "sysinfo/sysinfo.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <gnu/libc-version.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/json.h"
#include "nn/cpu/isa.h"

extern const char apf_build_id[];

static const char *const cpu_flags[] = {
	"avx",	    "avx2",	   "fma",	  "f16c",     "avx512f",
	"avx512bw", "avx512vl",	   "avx512_bf16", "avx512_fp16", "amx_bf16",
	"amx_tile", "sha_ni",	   NULL};

/* The value of "key : value" from the first matching line of a /proc file. */
static char *proc_field(const char *path, const char *key)
{
	FILE *f = fopen(path, "r");
	if (!f)
		return NULL;
	char line[8192];
	char *out = NULL;
	size_t klen = strlen(key);
	while (!out && fgets(line, sizeof line, f)) {
		if (strncmp(line, key, klen))
			continue;
		char *p = line + klen;
		while (*p == ' ' || *p == '\t')
			p++;
		if (*p != ':')
			continue;
		p++;
		while (*p == ' ' || *p == '\t')
			p++;
		p[strcspn(p, "\n")] = 0;
		out = apf_strdup(p);
	}
	fclose(f);
	return out;
}

static char *os_release(void)
{
	FILE *f = fopen("/etc/os-release", "r");
	if (!f)
		return apf_strdup("unknown");
	char line[1024];
	char *out = NULL;
	while (!out && fgets(line, sizeof line, f)) {
		if (strncmp(line, "PRETTY_NAME=", 12))
			continue;
		char *v = line + 12;
		v[strcspn(v, "\n")] = 0;
		size_t n = strlen(v);
		if (n >= 2 && (v[0] == '"' || v[0] == '\'') && v[n - 1] == v[0]) {
			v[n - 1] = 0;
			v++;
		}
		out = apf_strdup(v);
	}
	fclose(f);
	return out ? out : apf_strdup("unknown");
}

static json_t *cpu_record(void)
{
	char *model = proc_field("/proc/cpuinfo", "model name");
	char *flags = proc_field("/proc/cpuinfo", "flags");
	json_t *fl = json_array();
	for (const char *const *want = cpu_flags; *want && flags; want++) {
		size_t n = strlen(*want);
		for (const char *p = flags; (p = strstr(p, *want)); p += n)
			if ((p == flags || p[-1] == ' ') &&
			    (p[n] == ' ' || p[n] == 0)) {
				json_array_append_new(fl, json_string(*want));
				break;
			}
	}
	json_t *cpu = json_pack("{s:s, s:i, s:o}", "model",
				model ? model : "unknown", "cores",
				(json_int_t)apf_cpu_count(), "flags", fl);
	free(model);
	free(flags);
	return cpu;
}

/* The CPU kernels' instruction-set path in force here (nn/cpu/isa.h): the
 * one a trial started from this process computes with, since the runner
 * hands its decision to the trial. */
static int cpu_isa(json_t *cpu)
{
	int isa;
	int rc = apf_cpu_isa(&isa);
	if (!rc && json_object_set_new(cpu, "isa",
				       json_string(apf_cpu_isa_name(isa))))
		rc = apf_error(APF_ENOMEM, "environment", "out of memory");
	return rc;
}

static json_int_t memory_bytes(void)
{
	char *v = proc_field("/proc/meminfo", "MemTotal");
	json_int_t kb = v ? strtoll(v, NULL, 10) : 0;
	free(v);
	return kb * 1024;
}

/* The report of a machine without OpenBLAS. */
static json_t *blas_none(void)
{
	return json_pack("{s:s, s:s, s:s, s:s, s:i}", "name", "none", "version",
			 "", "config", "", "core", "", "threads", 0);
}

/* OpenBLAS's report, made in this process: {name, version, config, core,
 * threads}, blas_none() where it is not installed. */
static json_t *blas_here(void)
{
	void *h = dlopen("libopenblas.so.0", RTLD_NOW | RTLD_LOCAL);
	char *(*config)(void) = NULL, *(*core)(void) = NULL;
	int (*threads)(void) = NULL;
	if (h) {
		*(void **)&config = dlsym(h, "openblas_get_config");
		*(void **)&core = dlsym(h, "openblas_get_corename");
		*(void **)&threads = dlsym(h, "openblas_get_num_threads");
	}
	if (!config || !core || !threads)
		return blas_none();
	const char *c = config(), *k = core();
	char version[64] = "unknown";
	if (c && !strncmp(c, "OpenBLAS ", 9))
		sscanf(c + 9, "%63s", version);
	return json_pack("{s:s, s:s, s:s, s:s, s:i}", "name", "OpenBLAS",
			 "version", version, "config", c ? c : "", "core",
			 k ? k : "", "threads", threads());
}

static json_t *json_apart(json_t *(*make)(void));

static const struct apf_json_field blas_fields[] = {
	{"name", APF_JSON_STRING}, {"version", APF_JSON_STRING},
	{"config", APF_JSON_STRING}, {"core", APF_JSON_STRING},
	{"threads", APF_JSON_COUNT}, {NULL, 0}};

/* OpenBLAS: apf computes nothing with it and does not link it. Its report
 * (the environment record's blas, the core type a trial is pinned to) is
 * made once, in a child process, as the GPU records are: OpenBLAS starts a
 * thread per core as it loads, each spinning on sched_yield for its first
 * tenth of a second, which took a core from every apf process while it was
 * linked (apf verify, apf score), and threads started just before a
 * supervisor forks its sandbox are threads in the middle of starting. */
static pthread_once_t blas_once = PTHREAD_ONCE_INIT;
static json_t *blas_report;

static void blas_probe(void)
{
	json_t *j = json_apart(blas_here);
	if (!json_is_object(j) ||
	    apf_json_check_fields(j, "environment", "blas", blas_fields)) {
		apf_error_clear();
		json_decref(j);
		j = blas_none();
	}
	blas_report = j;
}

int apf_blas_threads(void)
{
	pthread_once(&blas_once, blas_probe);
	return (int)json_integer_value(json_object_get(blas_report, "threads"));
}

const char *apf_blas_core(void)
{
	pthread_once(&blas_once, blas_probe);
	const char *c = json_string_value(json_object_get(blas_report, "core"));
	return c && *c ? c : NULL;
}

static json_t *blas_record(void)
{
	pthread_once(&blas_once, blas_probe);
	return json_deep_copy(blas_report);
}

/* NVIDIA's management library, when a driver is installed. Loaded at run
 * time so apf runs (and records "no GPU") on machines without one. */
typedef struct {
	unsigned long long total, free, used;
} nvml_memory;

/* The first of these sonames that loads, or NULL. RTLD_NODELETE: the
 * CUDA libraries allocate in their constructors, and once unloaded that
 * memory is reachable from nothing LeakSanitizer can see (make check);
 * kept mapped, it is theirs, as in any process that uses them. */
static void *dlopen_any(const char *const *names)
{
	for (size_t i = 0; names[i]; i++) {
		void *h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
		if (h)
			return h;
	}
	return NULL;
}

/* cudaRuntimeGetVersion of the installed runtime, "13.0"; null without one. */
static json_t *cuda_runtime_version(void)
{
	static const char *const names[] = {"libcudart.so", "libcudart.so.13",
					    "libcudart.so.12", NULL};
	void *h = dlopen_any(names);
	if (!h)
		return json_null();
	int (*get)(int *) = (int (*)(int *))dlsym(h, "cudaRuntimeGetVersion");
	int rv = 0;
	json_t *j = json_null();
	if (get && get(&rv) == 0 && rv > 0) {
		char s[32];
		snprintf(s, sizeof s, "%d.%d", rv / 1000, (rv % 1000) / 10);
		j = json_string(s);
	}
	dlclose(h);
	return j;
}

/* cublasGetProperty's major.minor.patch, "13.1.0"; null without cuBLAS
 * (no handle needed, so no device either). */
static json_t *cublas_version(void)
{
	static const char *const names[] = {"libcublas.so", "libcublas.so.13",
					    "libcublas.so.12", NULL};
	void *h = dlopen_any(names);
	if (!h)
		return json_null();
	/* cublasGetProperty(libraryPropertyType, int *): MAJOR_VERSION 0,
	 * MINOR_VERSION 1, PATCH_LEVEL 2. */
	int (*get)(int, int *) = (int (*)(int, int *))dlsym(h, "cublasGetProperty");
	int v[3];
	json_t *j = json_null();
	if (get && !get(0, &v[0]) && !get(1, &v[1]) && !get(2, &v[2])) {
		char s[48];
		snprintf(s, sizeof s, "%d.%d.%d", v[0], v[1], v[2]);
		j = json_string(s);
	}
	dlclose(h);
	return j;
}

/* cudnnGetVersion, "9.1.0"; null without cuDNN. */
static json_t *cudnn_version(void)
{
	static const char *const names[] = {"libcudnn.so", "libcudnn.so.9",
					    "libcudnn.so.8", NULL};
	void *h = dlopen_any(names);
	if (!h)
		return json_null();
	size_t (*get)(void) = (size_t (*)(void))dlsym(h, "cudnnGetVersion");
	size_t dv = get ? get() : 0;
	json_t *j = json_null();
	if (dv) {
		char s[32];
		snprintf(s, sizeof s, "%zu.%zu.%zu", dv / 10000,
			 (dv % 10000) / 100, dv % 100);
		j = json_string(s);
	}
	dlclose(h);
	return j;
}

static void gpu_records(json_t **gpus, json_t **cuda)
{
	*gpus = json_array();
	*cuda = json_null();
	char driver[96] = "";
	void *h = dlopen("libnvidia-ml.so.1",
			 RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
	if (h) {
		int (*init)(void) = (int (*)(void))dlsym(h, "nvmlInit_v2");
		int (*shutdown)(void) = (int (*)(void))dlsym(h, "nvmlShutdown");
		int (*drv)(char *, unsigned) =
			(int (*)(char *, unsigned))dlsym(h,
				"nvmlSystemGetDriverVersion");
		int (*count)(unsigned *) =
			(int (*)(unsigned *))dlsym(h, "nvmlDeviceGetCount_v2");
		int (*handle)(unsigned, void **) = (int (*)(unsigned, void **))
			dlsym(h, "nvmlDeviceGetHandleByIndex_v2");
		int (*name)(void *, char *, unsigned) =
			(int (*)(void *, char *, unsigned))dlsym(
				h, "nvmlDeviceGetName");
		int (*mem)(void *, nvml_memory *) =
			(int (*)(void *, nvml_memory *))dlsym(
				h, "nvmlDeviceGetMemoryInfo");
		int (*cc)(void *, int *, int *) =
			(int (*)(void *, int *, int *))dlsym(
				h, "nvmlDeviceGetCudaComputeCapability");
		if (init && shutdown && drv && count && handle && name && mem &&
		    init() == 0) {
			unsigned n = 0;
			if (drv(driver, sizeof driver) != 0)
				driver[0] = 0;
			if (count(&n) != 0)
				n = 0;
			for (unsigned i = 0; i < n; i++) {
				void *dev;
				char nm[256] = "unknown";
				nvml_memory m = {0};
				if (handle(i, &dev) != 0)
					continue;
				name(dev, nm, sizeof nm);
				mem(dev, &m);
				int major = 0, minor = 0;
				char cap[32] = "";
				if (cc && cc(dev, &major, &minor) == 0)
					snprintf(cap, sizeof cap, "%d.%d", major,
						 minor);
				json_array_append_new(
					*gpus,
					json_pack("{s:s, s:I, s:o}", "name", nm,
						  "memory_bytes", (json_int_t)m.total,
						  "compute_capability",
						  cap[0] ? json_string(cap)
							 : json_null()));
			}
			shutdown();
		}
		dlclose(h);
	}
	json_t *runtime = cuda_runtime_version(), *cudnn = cudnn_version(),
	       *cublas = cublas_version();
	if (driver[0] || !json_is_null(runtime) || !json_is_null(cudnn) ||
	    !json_is_null(cublas)) {
		json_decref(*cuda);
		*cuda = json_pack("{s:o, s:o, s:o, s:o}", "driver",
				  driver[0] ? json_string(driver) : json_null(),
				  "runtime", runtime, "cublas", cublas, "cudnn",
				  cudnn);
	} else {
		json_decref(runtime);
		json_decref(cudnn);
		json_decref(cublas);
	}
}

/* make() in a child process, as apf_cuda_probe probes: NVIDIA's
 * management library, the CUDA runtime, cuBLAS, cuDNN and OpenBLAS are
 * loaded there and never into the process that asked (apf pack, a run's
 * supervisor, apf verify: trusted processes, and their sanitized builds
 * would count the vendors' pools as leaks). The child sends make()'s JSON
 * back; NULL when none comes. Only where the machine cannot fork does
 * make() run here. */
static json_t *json_apart(json_t *(*make)(void))
{
	int fd[2];
	if (pipe2(fd, O_CLOEXEC))
		return make();
	pid_t pid = fork();
	if (pid < 0) {
		close(fd[0]);
		close(fd[1]);
		return make();
	}
	if (pid == 0) {
		/* Nothing of the caller's stays open here but the pipe: a
		 * descriptor the child shared would keep the caller's locks
		 * (a run's work directory, its index) held after the caller
		 * died, while the vendor libraries load. */
		if ((fd[1] > 3 && close_range(3, (unsigned)fd[1] - 1, 0) < 0) ||
		    close_range((unsigned)fd[1] + 1, ~0u, 0) < 0)
			_exit(1);
		char *text = json_dumps(make(), JSON_COMPACT);
		for (size_t len = text ? strlen(text) : 0, off = 0; off < len;) {
			ssize_t k = write(fd[1], text + off, len - off);
			if (k < 0 && errno == EINTR)
				continue;
			if (k <= 0)
				break;
			off += (size_t)k;
		}
		_exit(0);
	}
	close(fd[1]);
	apf_buf got = {0};
	char buf[4096];
	for (;;) {
		ssize_t k = read(fd[0], buf, sizeof buf);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0 || got.len > (1u << 20) ||
		    apf_buf_append(&got, buf, (size_t)k))
			break;
	}
	close(fd[0]);
	while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
		;
	json_t *j = got.len ? json_loadb(got.data, got.len, 0, NULL) : NULL;
	apf_buf_free(&got);
	return j;
}

static json_t *gpu_json(void)
{
	json_t *g, *c;
	gpu_records(&g, &c);
	return json_pack("{s:o, s:o}", "gpus", g, "cuda", c);
}

/* What does not read as {"gpus", "cuda"} is no GPU and no CUDA. */
static void gpu_records_apart(json_t **gpus, json_t **cuda)
{
	json_t *j = json_apart(gpu_json);
	json_t *g = json_object_get(j, "gpus"), *c = json_object_get(j, "cuda");
	*gpus = json_is_array(g) ? json_incref(g) : json_array();
	*cuda = json_is_object(c) ? json_incref(c) : json_null();
	json_decref(j);
}

/* APF_IMAGE_DIGEST, the one field a launcher states: a content digest,
 * optionally after the image's name, "[NAME@]ALGORITHM:HEX" as registries
 * write them (sha256:<64 hex digits>), so that a typo or a tag ("apf:latest",
 * which names no fixed image) is refused instead of recorded. */
static int image_digest_ok(const char *v)
{
	const char *at = strrchr(v, '@');
	const char *d = at ? at + 1 : v;
	if (strlen(v) > 255 || (at && at == v))
		return 0;
	for (const char *p = v; p < d; p++)
		if (*p <= ' ' || *p > '~')
			return 0;
	const char *colon = strchr(d, ':');
	if (!colon || colon == d)
		return 0;
	for (const char *p = d; p < colon; p++)
		if (!((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9')))
			return 0;
	size_t hex = strlen(colon + 1);
	if (hex < 32 || strspn(colon + 1, "0123456789abcdef") != hex)
		return 0;
	return 1;
}

int apf_env_capture(json_t **out)
{
	*out = NULL;
	const char *image = getenv("APF_IMAGE_DIGEST");
	if (image && *image && !image_digest_ok(image)) {
		int shown = strlen(image) <= 80;
		for (const char *p = image; shown && *p; p++)
			shown = *p >= ' ' && *p <= '~';
		return apf_error(APF_EINPUT, "APF_IMAGE_DIGEST",
				 "'%s' is not an image digest (expected "
				 "[NAME@]sha256:<64 hex digits>, as `podman image "
				 "inspect --format '{{.Digest}}'` prints)",
				 shown ? image : "...");
	}
	struct utsname u;
	char kernel[512] = "unknown";
	if (uname(&u) == 0)
		snprintf(kernel, sizeof kernel, "%s %s %s", u.sysname, u.release,
			 u.machine);
	char libc[64];
	snprintf(libc, sizeof libc, "glibc %s", gnu_get_libc_version());
#ifdef __clang__
	const char *compiler = "clang " __clang_version__;
#else
	const char *compiler = "gcc " __VERSION__;
#endif
	char *os = os_release();
	json_t *gpus, *cuda;
	gpu_records_apart(&gpus, &cuda);
	json_t *env = json_pack(
		"{s:{s:s, s:s}, s:s, s:s, s:s, s:s, s:o, s:I, s:o, s:o, s:o, s:o}",
		"apf", "version", APF_VERSION, "build", apf_build_id,
		"compiler", compiler, "libc", libc, "kernel", kernel, "os",
		os ? os : "unknown", "cpu", cpu_record(), "memory_bytes",
		memory_bytes(), "blas", blas_record(), "gpus", gpus, "cuda",
		cuda, "image_digest",
		image && *image ? json_string(image) : json_null());
	free(os);
	if (!env)
		return apf_error(APF_ENOMEM, "environment", "out of memory");
	int rc = cpu_isa(json_object_get(env, "cpu"));
	if (rc) {
		json_decref(env);
		return rc;
	}
	*out = env;
	return 0;
}

/* ---- validation ------------------------------------------------------------ */

static int check_fields(const json_t *o, const char *where,
			const struct apf_json_field *fields)
{
	return apf_json_check_fields(o, "environment", where, fields);
}

/* cpu.isa (from records made since the kernels had paths; absent in older
 * ones): a name this apf knows. */
static int check_isa(const json_t *cpu)
{
	const json_t *x = json_object_get(cpu, "isa");
	int isa;
	if (!x || (json_is_string(x) &&
		   apf_cpu_isa_choose(&isa, json_string_value(x), ~0u) == 0))
		return 0;
	apf_error_clear();
	return apf_error(APF_EINPUT, "environment",
			 "cpu.isa: missing or of the wrong type");
}

int apf_env_validate(const json_t *env)
{
	static const struct apf_json_field top[] = {
		{"apf", APF_JSON_OBJECT}, {"compiler", APF_JSON_STRING},
		{"libc", APF_JSON_STRING}, {"kernel", APF_JSON_STRING},
		{"os", APF_JSON_STRING}, {"cpu", APF_JSON_OBJECT},
		{"memory_bytes", APF_JSON_COUNT}, {"blas", APF_JSON_OBJECT},
		{"gpus", APF_JSON_ARRAY},
		{"cuda", APF_JSON_OBJECT | APF_JSON_OR_NULL},
		{"image_digest", APF_JSON_STRING | APF_JSON_OR_NULL}, {NULL, 0}};
	static const struct apf_json_field apf[] = {
		{"version", APF_JSON_STRING}, {"build", APF_JSON_STRING},
		{NULL, 0}};
	/* isa: from records made since the kernels had paths (optional, so
	 * older entries still read). */
	static const struct apf_json_field cpu[] = {
		{"model", APF_JSON_STRING}, {"cores", APF_JSON_COUNT},
		{"flags", APF_JSON_ARRAY},
		{"isa", APF_JSON_STRING | APF_JSON_OPTIONAL}, {NULL, 0}};
	static const struct apf_json_field gpu[] = {
		{"name", APF_JSON_STRING}, {"memory_bytes", APF_JSON_COUNT},
		{"compute_capability",
		 APF_JSON_STRING | APF_JSON_OR_NULL | APF_JSON_OPTIONAL},
		{NULL, 0}};
	static const struct apf_json_field cuda[] = {
		{"driver", APF_JSON_STRING | APF_JSON_OR_NULL},
		{"runtime", APF_JSON_STRING | APF_JSON_OR_NULL},
		{"cublas",
		 APF_JSON_STRING | APF_JSON_OR_NULL | APF_JSON_OPTIONAL},
		{"cudnn", APF_JSON_STRING | APF_JSON_OR_NULL}, {NULL, 0}};
	int rc = check_fields(env, "environment", top);
	if (!rc)
		rc = check_fields(json_object_get(env, "apf"), "apf", apf);
	if (!rc)
		rc = check_fields(json_object_get(env, "cpu"), "cpu", cpu);
	if (!rc)
		rc = check_isa(json_object_get(env, "cpu"));
	if (!rc)
		rc = check_fields(json_object_get(env, "blas"), "blas",
				  blas_fields);
	if (!rc && !json_is_null(json_object_get(env, "cuda")))
		rc = check_fields(json_object_get(env, "cuda"), "cuda", cuda);
	size_t i;
	json_t *v;
	json_array_foreach(json_object_get(env, "gpus"), i, v)
	{
		if (!rc)
			rc = check_fields(v, "gpus[]", gpu);
	}
	json_array_foreach(json_object_get(json_object_get(env, "cpu"), "flags"),
			   i, v)
	{
		if (!rc && !json_is_string(v))
			rc = apf_error(APF_EINPUT, "environment",
				       "cpu.flags: not a list of strings");
	}
	return rc;
}

/* ---- comparison ------------------------------------------------------------ */

static int compare_at(const json_t *a, const json_t *b, const char *path,
		      apf_env_diff_fn diff, void *user)
{
	if (json_is_object(a) && json_is_object(b)) {
		int n = 0;
		const char *key;
		json_t *v;
		json_object_foreach((json_t *)a, key, v)
		{
			char sub[256];
			snprintf(sub, sizeof sub, "%s%s%s", path, *path ? "." : "",
				 key);
			const json_t *w = json_object_get(b, key);
			n += compare_at(v, w ? w : json_null(), sub, diff, user);
		}
		json_object_foreach((json_t *)b, key, v)
		{
			if (json_object_get(a, key))
				continue;
			char sub[256];
			snprintf(sub, sizeof sub, "%s%s%s", path, *path ? "." : "",
				 key);
			n += compare_at(json_null(), v, sub, diff, user);
		}
		return n;
	}
	if (json_equal((json_t *)a, (json_t *)b))
		return 0;
	if (diff) {
		char *x = json_dumps(a, JSON_COMPACT | JSON_ENCODE_ANY);
		char *y = json_dumps(b, JSON_COMPACT | JSON_ENCODE_ANY);
		diff(user, path, x ? x : "?", y ? y : "?");
		free(x);
		free(y);
	}
	return 1;
}

int apf_env_compare(const json_t *expected, const json_t *actual,
		    apf_env_diff_fn diff, void *user)
{
	return compare_at(expected, actual, "", diff, user);
}
