/*
 * html.c: the two ways untrusted text reaches the page (report.h): as HTML
 * text or attribute value, and as JSON inside a <script> element. Nothing
 * else in pkg/report writes input-derived bytes.
 */
#include "report/report.h"

#include <string.h>

#define NOMEM apf_error(APF_ENOMEM, "report", "out of memory")

/* Length of the valid UTF-8 sequence at s (1 to 4), or 0 when invalid. */
static size_t utf8_len(const unsigned char *s)
{
	if (s[0] < 0x80)
		return 1;
	size_t n = 0;
	if (s[0] >= 0xc2 && s[0] <= 0xdf)
		n = 2;
	else if (s[0] >= 0xe0 && s[0] <= 0xef)
		n = 3;
	else if (s[0] >= 0xf0 && s[0] <= 0xf4)
		n = 4;
	if (n == 0)
		return 0;
	for (size_t i = 1; i < n; i++)
		if ((s[i] & 0xc0) != 0x80)
			return 0;
	/* Overlong forms and surrogates. */
	if (n == 3 && s[0] == 0xe0 && s[1] < 0xa0)
		return 0;
	if (n == 3 && s[0] == 0xed && s[1] >= 0xa0)
		return 0;
	if (n == 4 && s[0] == 0xf0 && s[1] < 0x90)
		return 0;
	if (n == 4 && s[0] == 0xf4 && s[1] >= 0x90)
		return 0;
	return n;
}

int apf_report_html_text(apf_buf *out, const char *s)
{
	const unsigned char *p = (const unsigned char *)(s ? s : "");
	int bad = 0;
	while (!bad && *p) {
		const char *rep = NULL;
		switch (*p) {
		case '&':
			rep = "&amp;";
			break;
		case '<':
			rep = "&lt;";
			break;
		case '>':
			rep = "&gt;";
			break;
		case '"':
			rep = "&quot;";
			break;
		case '\'':
			rep = "&#39;";
			break;
		default:
			break;
		}
		if (rep) {
			bad = apf_buf_puts(out, rep);
			p++;
			continue;
		}
		if ((*p < 0x20 && *p != '\t' && *p != '\n') || *p == 0x7f) {
			bad = apf_buf_puts(out, "\xef\xbf\xbd");
			p++;
			continue;
		}
		size_t n = utf8_len(p);
		if (n == 0) {
			bad = apf_buf_puts(out, "\xef\xbf\xbd");
			p++;
			continue;
		}
		bad = apf_buf_append(out, p, n);
		p += n;
	}
	return bad ? NOMEM : 0;
}

int apf_report_json_script(apf_buf *out, const char *json)
{
	int bad = 0;
	for (const char *p = json; !bad && *p; p++) {
		if (*p == '<')
			bad = apf_buf_puts(out, "\\u003c");
		else if (*p == '>')
			bad = apf_buf_puts(out, "\\u003e");
		else if (*p == '&')
			bad = apf_buf_puts(out, "\\u0026");
		else if (!strncmp(p, "\xe2\x80\xa8", 3) ||
			 !strncmp(p, "\xe2\x80\xa9", 3)) {
			bad = apf_buf_puts(out, p[2] == '\xa8' ? "\\u2028"
								: "\\u2029");
			p += 2;
		} else
			bad = apf_buf_append(out, p, 1);
	}
	return bad ? NOMEM : 0;
}
