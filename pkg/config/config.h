/*
 * config: INI files (workload.ini, submission.ini, tuning_search_space.ini)
 * parsed by Debian's libinih, with the file name and line number in every
 * error ("workload.ini:12: [budget.cpu] minutes: expected a number").
 *
 * libinih is configured through process-wide globals at run time (Debian
 * builds it with a 200-byte line limit by default); apf_config sets them once
 * so lines of any length up to 1 MiB parse. Keys are unique within a section
 * (a repeated key is an error, not a silent override); a section may appear
 * more than once and its keys merge. Values keep their order.
 */
#ifndef APF_CONFIG_H
#define APF_CONFIG_H

#include <stddef.h>

#include "base/base.h"

typedef struct apf_config apf_config;

int apf_config_load(apf_config **out, const char *path);
/* name is what errors call the text (a file name). */
int apf_config_parse(apf_config **out, const char *text, const char *name);
void apf_config_free(apf_config *c);
const char *apf_config_name(const apf_config *c);

/* Sections in order of first appearance. */
size_t apf_config_nsections(const apf_config *c);
const char *apf_config_section(const apf_config *c, size_t i);
int apf_config_has_section(const apf_config *c, const char *section);
/* Keys of a section in file order; NULL past the end. */
const char *apf_config_key(const apf_config *c, const char *section, size_t i);

/* The raw value, or NULL when absent. */
const char *apf_config_get(const apf_config *c, const char *section,
			   const char *key);
/* Line of a key (or of a section header when key is NULL); 0 if absent. */
int apf_config_line(const apf_config *c, const char *section, const char *key);

/* Typed lookups. Absent keys: the required forms fail with
 * "<file>: [section] key: missing"; the opt forms return 0 and leave *out
 * as it was. Malformed values fail with file, line, section and key. */
int apf_config_string(const char **out, const apf_config *c,
		      const char *section, const char *key);
int apf_config_double(double *out, const apf_config *c,
		      const char *section, const char *key);
int apf_config_long(long *out, const apf_config *c, const char *section,
		    const char *key);
int apf_config_opt_string(const char **out, const apf_config *c,
			  const char *section, const char *key);
int apf_config_opt_double(double *out, const apf_config *c,
			  const char *section, const char *key);
int apf_config_opt_long(long *out, const apf_config *c,
			const char *section, const char *key);
int apf_config_opt_bool(int *out, const apf_config *c,
			const char *section, const char *key);

/* Fails on the first key of section not in allowed (NULL-terminated), so a
 * typo such as "minuts = 5" is an error, not a silently ignored line. */
int apf_config_check_keys(const apf_config *c, const char *section,
			  const char *const *allowed);
/* Reports an error about a key's value: "<file>:<line>: [s] k: <why>". */
int apf_config_error(const apf_config *c, const char *section, const char *key,
		     const char *fmt, ...) __attribute__((format(printf, 4, 5)));

/* Sets a value, replacing the key's value or adding it (line 0: it came
 * from no file). */
int apf_config_set(apf_config *c, const char *section, const char *key,
		   const char *value);

/* Splits "a, b, c" at commas, trimming spaces; empty items are an error.
 * Free with apf_config_list_free. */
int apf_config_list(const apf_config *c, const char *section, const char *key,
		    char ***items, size_t *n);
void apf_config_list_free(char **items, size_t n);

#endif
