/*
 * env.c: `apf env [--json]`: the environment record of this machine
 * (README.md, Packing), the one `apf pack` signs into a manifest and
 * `apf run` compares against it. Its strings are read from the machine
 * (a CPU's or GPU's model, a container's labels) and printed escaped.
 */
#include "cmd.h"

#include <stdlib.h>
#include <string.h>

#include "sysinfo/sysinfo.h"

static void print_value(const char *path, json_t *v)
{
	if (json_is_object(v)) {
		const char *key;
		json_t *x;
		json_object_foreach(v, key, x)
		{
			char sub[256];
			snprintf(sub, sizeof sub, "%s%s%s", path, *path ? "." : "",
				 key);
			print_value(sub, x);
		}
		return;
	}
	if (json_is_string(v)) {
		printf("%-18s %s\n", path, term_text(json_string_value(v)));
		return;
	}
	if (json_is_array(v) && json_array_size(v) > 0 &&
	    json_is_string(json_array_get(v, 0))) {
		printf("%-18s", path);
		size_t i;
		json_t *x;
		json_array_foreach(v, i, x)
			printf(" %s", term_text(json_string_value(x)));
		printf("\n");
		return;
	}
	char *s = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY |
				JSON_ENSURE_ASCII);
	printf("%-18s %s\n", path,
	       json_is_null(v) ? "none" : json_is_array(v) && !json_array_size(v)
						    ? "none"
						    : s ? s : "?");
	free(s);
}

int cmd_env(int argc, char **argv)
{
	int as_json = 0;
	const struct apf_opt opts[] = {
		{"json", 0, OPT_FLAG, &as_json, NULL, "print the record as JSON"},
		{0},
	};
	const struct apf_usage usage = {
		"env [--json]",
		"Print this machine's environment record: apf version and build, "
		"compiler, libc,\nkernel, OS, CPU model, cores and flags, memory, "
		"BLAS and its configuration,\nGPUs, driver, CUDA runtime and "
		"cuDNN, container image digest.",
		"`apf pack` signs this record into the manifest; `apf run` "
		"compares it with the\nmanifest's and refuses to run on a "
		"different machine unless --allow-env-drift.",
		0, 0,
		"apf env\n"
		"apf env --json"};
	int nargs, rc = cmd_start("env", &usage, opts, argc, argv, &nargs);
	if (rc >= 0)
		return rc;
	json_t *env;
	rc = apf_env_capture(&env);
	if (rc)
		return cmd_fail(rc);
	if (as_json)
		return (rc = cmd_print_json(env, 0)) ? cmd_fail(rc) : 0;
	print_value("", env);
	json_decref(env);
	return 0;
}
