/*
 * error.c: the one place that formats error messages, and the map from status
 * codes to the process exit codes (0 ok, 1 verification failed, 2 usage or
 * input error, 3 run stopped abnormally).
 *
 * A message can carry text apf does not control (a compiler's output, a
 * trial's message, a file name from an archive), and the CLI prints it to a
 * terminal: every message is stored escaped (apf_text_escape), so no escape
 * sequence or control byte of it ever reaches the terminal, whichever code
 * prints it.
 */
#include "base/base.h"

#include <stdio.h>
#include <string.h>

#define MSG_MAX 1024

static _Thread_local char msg[MSG_MAX];

/* Errors are one line: a newline or carriage return a cause brought in
 * becomes a space (a compiler's lines read better so than as \x0a), and
 * every other control byte is escaped. dst holds MSG_MAX bytes. */
static void store(char *dst, const char *raw)
{
	char flat[MSG_MAX];
	snprintf(flat, sizeof flat, "%s", raw);
	for (char *s = flat; *s; s++)
		if (*s == '\n' || *s == '\r')
			*s = ' ';
	apf_text_escape(dst, MSG_MAX, flat);
}

/* Bounded concatenation: messages longer than MSG_MAX are cut, by design. */
static void join(char *dst, const char *const *parts, int n)
{
	size_t len = 0;
	for (int i = 0; i < n; i++) {
		const char *p = i > 0 ? ": " : "";
		for (int pass = 0; pass < 2; pass++, p = parts[i])
			for (; p && *p && len + 1 < MSG_MAX; p++)
				dst[len++] = *p;
	}
	dst[len] = 0;
}

static int vset(int code, int errnum, const char *what, const char *fmt,
		va_list ap)
{
	char why[MSG_MAX], raw[MSG_MAX];
	vsnprintf(why, sizeof why, fmt, ap);
	const char *parts[] = {what, why, errnum ? strerror(errnum) : NULL};
	join(raw, parts, errnum ? 3 : 2);
	store(msg, raw);
	return code;
}

int apf_error(int code, const char *what, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vset(code, 0, what, fmt, ap);
	va_end(ap);
	return code;
}

int apf_error_errno(int code, int errnum, const char *what, const char *fmt,
		    ...)
{
	va_list ap;
	va_start(ap, fmt);
	vset(code, errnum, what, fmt, ap);
	va_end(ap);
	return code;
}

/* Whether the stored message already starts with the component what (as
 * stored: flattened and escaped), whole: "what" or "what: ...". */
static int starts_with_component(const char *message, const char *what)
{
	char w[MSG_MAX];
	store(w, what);
	size_t n = strlen(w);
	return n && !strncmp(message, w, n) &&
	       (message[n] == 0 || !strncmp(message + n, ": ", 2));
}

int apf_error_prefix(int code, const char *what)
{
	/* A reader that names its file in its own message ("x.apf: open: ...")
	 * and a caller that adds the same name for context would print it
	 * twice; the name is said once. */
	if (what && msg[0] && starts_with_component(msg, what))
		return code;
	char old[MSG_MAX];
	memcpy(old, msg, sizeof old);
	const char *parts[] = {what, old[0] ? old : apf_status_name(code)};
	char raw[MSG_MAX];
	join(raw, parts, 2);
	store(msg, raw);
	return code;
}

const char *apf_error_message(void)
{
	return msg[0] ? msg : "unknown error";
}

void apf_error_clear(void)
{
	msg[0] = 0;
}

void apf_error_take(char *buf, size_t size)
{
	snprintf(buf, size, "%s", msg);
	msg[0] = 0;
}

void apf_error_restore(int code, const char *message)
{
	(void)code;
	/* It may come from another process (a trial's report). */
	store(msg, message ? message : "");
}

int apf_exit_code(int status)
{
	switch (status) {
	case APF_OK:
		return 0;
	case APF_EVERIFY:
		return 1;
	case APF_EUSAGE:
	case APF_EINPUT:
	case APF_EIO:
	case APF_ENOMEM:
		return 2;
	default:
		return 3;
	}
}

const char *apf_status_name(int status)
{
	switch (status) {
	case APF_OK:
		return "ok";
	case APF_EVERIFY:
		return "verification failed";
	case APF_EUSAGE:
		return "usage error";
	case APF_EINPUT:
		return "bad input";
	case APF_EIO:
		return "I/O error";
	case APF_ENOMEM:
		return "out of memory";
	case APF_EABORT:
		return "stopped abnormally";
	default:
		return "internal error";
	}
}
