/*
 * fuzz_config.c: libFuzzer target for the INI reader (pkg/config, over
 * Debian's libinih). A file that parses must answer every accessor
 * consistently: each key listed under a section has a value and a line,
 * each section has a line, and the typed lookups refuse or convert without
 * reading outside the values.
 */
#include "fuzzlib.h"

#include "config/config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *text = fuzz_text(data, size);
	apf_config *c;
	apf_error_clear();
	int rc = apf_config_parse(&c, text, "fuzz.ini");
	fuzz_expect(rc, "apf_config_parse");
	free(text);
	if (rc)
		return 0;
	static const char *const none[] = {NULL};
	for (size_t i = 0; i < apf_config_nsections(c); i++) {
		const char *s = apf_config_section(c, i);
		if (!s || !apf_config_has_section(c, s) ||
		    apf_config_line(c, s, NULL) <= 0)
			abort();
		for (size_t k = 0;; k++) {
			const char *key = apf_config_key(c, s, k);
			if (!key)
				break;
			if (!apf_config_get(c, s, key) ||
			    apf_config_line(c, s, key) <= 0)
				abort();
			const char *str;
			double d;
			long l;
			int b;
			char **items;
			size_t n;
			fuzz_expect(apf_config_opt_string(&str, c, s, key), "string");
			fuzz_expect(apf_config_opt_double(&d, c, s, key), "double");
			fuzz_expect(apf_config_opt_long(&l, c, s, key), "long");
			fuzz_expect(apf_config_opt_bool(&b, c, s, key), "bool");
			rc = apf_config_list(c, s, key, &items, &n);
			fuzz_expect(rc, "list");
			for (size_t j = 0; !rc && j < n; j++)
				if (!items[j][0])
					abort();
			if (!rc)
				apf_config_list_free(items, n);
		}
		/* No key is allowed: fails exactly when the section has one. */
		rc = apf_config_check_keys(c, s, none);
		if ((rc == 0) != (apf_config_key(c, s, 0) == NULL))
			abort();
	}
	apf_config_free(c);
	return 0;
}
