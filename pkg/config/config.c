/*
 * config.c: INI parsing through libinih, keeping line numbers.
 *
 * Debian's libinih calls its handler without a line number, so the text is
 * fed through our own fgets-style reader that counts the lines it hands out;
 * when the handler runs, the reader's count is the line being parsed.
 */
#include "config/config.h"

#include <ctype.h>
#include <errno.h>
#include <ini.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_FILE (16u << 20)
#define MAX_LINE (1 << 20)

struct entry {
	char *section, *key, *value;
	int line;
};

struct section {
	char *name;
	int line;
};

struct apf_config {
	char *name;
	struct entry *e;
	size_t n, cap;
	struct section *s;
	size_t ns, scap;
};

struct reader {
	const char *p, *end;
	int line;        /* line the parser is on */
	int at_start;    /* the next chunk starts a new line */
};

struct parse {
	apf_config *c;
	struct reader *r;
	int rc;
};

static pthread_once_t ini_once = PTHREAD_ONCE_INIT;

static void ini_setup(void)
{
	/* Heap line buffer that grows, so long lines are not cut at 200. */
	ini_use_stack = false;
	ini_allow_realloc = true;
	ini_initial_alloc = 256;
	ini_max_line = MAX_LINE;
	ini_stop_on_first_error = true;
	/* An indented line is its own line, never a silent continuation. */
	ini_allow_multiline = false;
	ini_allow_no_value = false;
}

static char *reader_fn(char *str, int num, void *stream)
{
	struct reader *r = stream;
	if (r->p >= r->end || num < 2)
		return NULL;
	if (r->at_start)
		r->line++;
	int n = 0;
	while (r->p < r->end && n < num - 1) {
		char ch = *r->p++;
		str[n++] = ch;
		if (ch == '\n')
			break;
	}
	str[n] = 0;
	r->at_start = n > 0 && str[n - 1] == '\n';
	return str;
}

static int add_section(apf_config *c, const char *name, int line)
{
	for (size_t i = 0; i < c->ns; i++)
		if (!strcmp(c->s[i].name, name))
			return 0;
	if (c->ns == c->scap) {
		size_t cap = c->scap ? 2 * c->scap : 8;
		struct section *s = realloc(c->s, cap * sizeof *s);
		if (!s)
			return apf_error(APF_ENOMEM, c->name, "out of memory");
		c->s = s;
		c->scap = cap;
	}
	c->s[c->ns].name = apf_strdup(name);
	if (!c->s[c->ns].name)
		return apf_error(APF_ENOMEM, c->name, "out of memory");
	c->s[c->ns++].line = line;
	return 0;
}

static int handler(void *user, const char *section, const char *name,
		   const char *value)
{
	struct parse *p = user;
	apf_config *c = p->c;
	int line = p->r->line;
	if (!section[0]) {
		p->rc = apf_error(APF_EINPUT, c->name,
				  "line %d: '%s' outside any [section]", line,
				  name);
		return 0;
	}
	for (size_t i = 0; i < c->n; i++)
		if (!strcmp(c->e[i].section, section) &&
		    !strcmp(c->e[i].key, name)) {
			p->rc = apf_error(APF_EINPUT, c->name,
					  "line %d: [%s] %s: set twice (first "
					  "on line %d)",
					  line, section, name, c->e[i].line);
			return 0;
		}
	if (add_section(c, section, line) != 0)
		goto nomem;
	if (c->n == c->cap) {
		size_t cap = c->cap ? 2 * c->cap : 32;
		struct entry *e = realloc(c->e, cap * sizeof *e);
		if (!e)
			goto nomem;
		c->e = e;
		c->cap = cap;
	}
	struct entry *e = &c->e[c->n];
	e->section = apf_strdup(section);
	e->key = apf_strdup(name);
	e->value = apf_strdup(value);
	e->line = line;
	if (!e->section || !e->key || !e->value) {
		free(e->section);
		free(e->key);
		free(e->value);
		goto nomem;
	}
	c->n++;
	return 1;
nomem:
	p->rc = apf_error(APF_ENOMEM, c->name, "out of memory");
	return 0;
}

/* Sections with no keys never reach the handler; find their headers. */
static int scan_sections(apf_config *c, const char *text)
{
	int line = 0;
	for (const char *p = text; *p;) {
		line++;
		const char *eol = strchr(p, '\n');
		size_t len = eol ? (size_t)(eol - p) : strlen(p);
		const char *q = p;
		while (q < p + len && isspace((unsigned char)*q))
			q++;
		if (q < p + len && *q == '[') {
			const char *close = memchr(q, ']', (size_t)(p + len - q));
			if (close) {
				char *name = strndup(q + 1, (size_t)(close - q - 1));
				if (!name)
					return apf_error(APF_ENOMEM, c->name,
							 "out of memory");
				/* inih strips spaces inside the brackets too. */
				char *s = name, *t = name + strlen(name);
				while (*s && isspace((unsigned char)*s))
					s++;
				while (t > s && isspace((unsigned char)t[-1]))
					*--t = 0;
				int rc = add_section(c, s, line);
				free(name);
				if (rc)
					return rc;
			}
		}
		p = eol ? eol + 1 : p + len;
	}
	return 0;
}

int apf_config_parse(apf_config **out, const char *text, const char *name)
{
	*out = NULL;
	pthread_once(&ini_once, ini_setup);
	apf_config *c = apf_calloc(1, sizeof *c);
	if (!c || !(c->name = apf_strdup(name))) {
		free(c);
		return apf_error(APF_ENOMEM, name, "out of memory");
	}
	struct reader r = {text, text + strlen(text), 0, 1};
	struct parse p = {c, &r, 0};
	int rc = scan_sections(c, text);
	if (rc) {
		apf_config_free(c);
		return rc;
	}
	int ini = ini_parse_stream(reader_fn, &r, handler, &p);
	if (p.rc) {
		apf_config_free(c);
		return p.rc;
	}
	if (ini == -2) {
		apf_config_free(c);
		return apf_error(APF_ENOMEM, name, "out of memory");
	}
	if (ini != 0) {
		apf_config_free(c);
		return apf_error(APF_EINPUT, name,
				 "line %d: syntax error (expected [section], "
				 "key = value or a comment, at most %d bytes)",
				 ini, MAX_LINE - 3);
	}
	*out = c;
	return 0;
}

int apf_config_load(apf_config **out, const char *path)
{
	*out = NULL;
	char *text;
	size_t len;
	int rc = apf_file_read(&text, &len, path, MAX_FILE);
	if (rc)
		return rc;
	if (strlen(text) != len)
		rc = apf_error(APF_EINPUT, path, "holds a NUL byte; not a text file");
	else
		rc = apf_config_parse(out, text, path);
	free(text);
	return rc;
}

void apf_config_free(apf_config *c)
{
	if (!c)
		return;
	for (size_t i = 0; i < c->n; i++) {
		free(c->e[i].section);
		free(c->e[i].key);
		free(c->e[i].value);
	}
	for (size_t i = 0; i < c->ns; i++)
		free(c->s[i].name);
	free(c->e);
	free(c->s);
	free(c->name);
	free(c);
}

const char *apf_config_name(const apf_config *c)
{
	return c->name;
}

size_t apf_config_nsections(const apf_config *c)
{
	return c->ns;
}

const char *apf_config_section(const apf_config *c, size_t i)
{
	return i < c->ns ? c->s[i].name : NULL;
}

int apf_config_has_section(const apf_config *c, const char *section)
{
	for (size_t i = 0; i < c->ns; i++)
		if (!strcmp(c->s[i].name, section))
			return 1;
	return 0;
}

const char *apf_config_key(const apf_config *c, const char *section, size_t i)
{
	for (size_t k = 0; k < c->n; k++)
		if (!strcmp(c->e[k].section, section) && i-- == 0)
			return c->e[k].key;
	return NULL;
}

static const struct entry *find(const apf_config *c, const char *section,
				const char *key)
{
	for (size_t i = 0; i < c->n; i++)
		if (!strcmp(c->e[i].section, section) &&
		    !strcmp(c->e[i].key, key))
			return &c->e[i];
	return NULL;
}

const char *apf_config_get(const apf_config *c, const char *section,
			   const char *key)
{
	const struct entry *e = find(c, section, key);
	return e ? e->value : NULL;
}

int apf_config_line(const apf_config *c, const char *section, const char *key)
{
	if (!key) {
		for (size_t i = 0; i < c->ns; i++)
			if (!strcmp(c->s[i].name, section))
				return c->s[i].line;
		return 0;
	}
	const struct entry *e = find(c, section, key);
	return e ? e->line : 0;
}

int apf_config_error(const apf_config *c, const char *section, const char *key,
		     const char *fmt, ...)
{
	char why[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(why, sizeof why, fmt, ap);
	va_end(ap);
	int line = apf_config_line(c, section, key);
	if (line)
		return apf_error(APF_EINPUT, c->name, "line %d: [%s] %s: %s",
				 line, section, key ? key : "", why);
	return apf_error(APF_EINPUT, c->name, "[%s] %s: %s", section,
			 key ? key : "", why);
}

static int missing(const apf_config *c, const char *section, const char *key)
{
	return apf_error(APF_EINPUT, c->name, "[%s] %s: missing", section, key);
}

int apf_config_opt_string(const char **out, const apf_config *c,
			  const char *section, const char *key)
{
	const struct entry *e = find(c, section, key);
	if (!e)
		return 0;
	if (!e->value[0])
		return apf_config_error(c, section, key, "empty value");
	*out = e->value;
	return 0;
}

int apf_config_string(const char **out, const apf_config *c,
		      const char *section, const char *key)
{
	if (!find(c, section, key))
		return missing(c, section, key);
	return apf_config_opt_string(out, c, section, key);
}

int apf_config_opt_double(double *out, const apf_config *c,
			  const char *section, const char *key)
{
	const struct entry *e = find(c, section, key);
	if (!e)
		return 0;
	char *end;
	errno = 0;
	double v = strtod(e->value, &end);
	if (errno || end == e->value || *end || !isfinite(v))
		return apf_config_error(c, section, key,
					"expected a finite number, got '%s'",
					e->value);
	*out = v;
	return 0;
}

int apf_config_double(double *out, const apf_config *c,
		      const char *section, const char *key)
{
	if (!find(c, section, key))
		return missing(c, section, key);
	return apf_config_opt_double(out, c, section, key);
}

int apf_config_opt_long(long *out, const apf_config *c,
			const char *section, const char *key)
{
	const struct entry *e = find(c, section, key);
	if (!e)
		return 0;
	char *end;
	errno = 0;
	long v = strtol(e->value, &end, 10);
	if (errno || end == e->value || *end)
		return apf_config_error(c, section, key,
					"expected an integer, got '%s'",
					e->value);
	*out = v;
	return 0;
}

int apf_config_long(long *out, const apf_config *c, const char *section,
		    const char *key)
{
	if (!find(c, section, key))
		return missing(c, section, key);
	return apf_config_opt_long(out, c, section, key);
}

int apf_config_opt_bool(int *out, const apf_config *c,
			const char *section, const char *key)
{
	const struct entry *e = find(c, section, key);
	if (!e)
		return 0;
	const char *v = e->value;
	if (!strcmp(v, "true") || !strcmp(v, "yes") || !strcmp(v, "1"))
		*out = 1;
	else if (!strcmp(v, "false") || !strcmp(v, "no") || !strcmp(v, "0"))
		*out = 0;
	else
		return apf_config_error(c, section, key,
					"expected true or false, got '%s'", v);
	return 0;
}

int apf_config_check_keys(const apf_config *c, const char *section,
			  const char *const *allowed)
{
	for (size_t i = 0; i < c->n; i++) {
		if (strcmp(c->e[i].section, section))
			continue;
		int ok = 0;
		for (const char *const *a = allowed; *a && !ok; a++)
			ok = !strcmp(*a, c->e[i].key);
		if (!ok)
			return apf_config_error(c, section, c->e[i].key,
						"unknown key");
	}
	return 0;
}

void apf_config_list_free(char **items, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(items[i]);
	free(items);
}

int apf_config_list(const apf_config *c, const char *section, const char *key,
		    char ***items, size_t *n)
{
	*items = NULL;
	*n = 0;
	const char *v = apf_config_get(c, section, key);
	if (!v)
		return missing(c, section, key);
	size_t cap = 1;
	for (const char *p = v; *p; p++)
		cap += *p == ',';
	char **out = apf_calloc(cap, sizeof *out);
	if (!out)
		return apf_error(APF_ENOMEM, c->name, "out of memory");
	size_t k = 0;
	const char *p = v;
	for (;;) {
		const char *comma = strchr(p, ',');
		const char *end = comma ? comma : p + strlen(p);
		while (p < end && isspace((unsigned char)*p))
			p++;
		const char *e = end;
		while (e > p && isspace((unsigned char)e[-1]))
			e--;
		if (e == p) {
			apf_config_list_free(out, k);
			return apf_config_error(c, section, key,
						"empty item in list '%s'", v);
		}
		out[k] = strndup(p, (size_t)(e - p));
		if (!out[k]) {
			apf_config_list_free(out, k);
			return apf_error(APF_ENOMEM, c->name, "out of memory");
		}
		k++;
		if (!comma)
			break;
		p = comma + 1;
	}
	*items = out;
	*n = k;
	return 0;
}

int apf_config_set(apf_config *c, const char *section, const char *key,
		   const char *value)
{
	for (size_t i = 0; i < c->n; i++)
		if (!strcmp(c->e[i].section, section) &&
		    !strcmp(c->e[i].key, key)) {
			char *v = apf_strdup(value);
			if (!v)
				return apf_error(APF_ENOMEM, c->name,
						 "out of memory");
			free(c->e[i].value);
			c->e[i].value = v;
			return 0;
		}
	struct reader r = {"", "", 0, 1};
	struct parse p = {c, &r, 0};
	if (!handler(&p, section, key, value))
		return p.rc;
	return 0;
}
