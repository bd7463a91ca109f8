/*
 * show.c: how the commands print text they did not write.
 *
 * An entry's names, authors and file paths, a run's workload and unit
 * names, a log's details, a log directory's names: whoever made the entry
 * or the run chose them, and a terminal acts on some bytes instead of
 * showing them (an escape sequence retitles the window or clears the
 * screen, a carriage return or a bidi override rewrites what the line
 * says). Every such string goes through term_text at the printf that
 * prints it, so the escaping happens at print time and no stored text, a
 * signed one included, reaches a terminal raw. JSON output is made
 * terminal-safe as a whole instead (cmd_print_json: ASCII only, every
 * control and non-ASCII character as \uXXXX), and utf8_text keeps the
 * strings put into it valid UTF-8, which jansson demands.
 *
 * The copies live until cmd_text_free, which main calls once the command
 * has returned: a command's output is bounded by its input, and so are
 * they. Code that prints for as long as a run lasts (progress, notices)
 * escapes into its own buffers instead.
 */
#include "cmd.h"

#include <stdlib.h>

static char **kept;
static size_t nkept, capkept;

/* Keeps b's text until cmd_text_free; "?" when out of memory. */
static const char *keep(apf_buf *b, int rc)
{
	if (!rc && nkept == capkept) {
		size_t cap = capkept ? 2 * capkept : 64;
		char **k = realloc(kept, cap * sizeof *k);
		if (k) {
			kept = k;
			capkept = cap;
		}
	}
	if (rc || nkept == capkept) {
		apf_buf_free(b);
		return "?";
	}
	kept[nkept++] = b->data;
	return b->data;
}

const char *term_text(const char *text)
{
	apf_buf b = {0};
	return keep(&b, apf_buf_escape(&b, text ? text : "?"));
}

const char *utf8_text(const char *text)
{
	if (!text)
		return NULL;
	apf_buf b = {0};
	return keep(&b, apf_buf_utf8(&b, text));
}

void cmd_text_free(void)
{
	for (size_t i = 0; i < nkept; i++)
		free(kept[i]);
	free(kept);
	kept = NULL;
	nkept = capkept = 0;
}

int cmd_print_json(json_t *o, size_t flags)
{
	char *s = o ? json_dumps(o, JSON_INDENT(2) | JSON_ENSURE_ASCII | flags)
		    : NULL;
	json_decref(o);
	if (!s)
		return apf_error(APF_ENOMEM, "json",
				 "cannot build the output (out of memory, or "
				 "text that is not UTF-8)");
	printf("%s\n", s);
	free(s);
	return 0;
}
