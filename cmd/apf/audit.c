/*
 * audit.c: the auditor's options for re-evaluation and replay, read once
 * for verify, score and report (audit.h).
 */
#include "audit.h"

#include "cmd.h"

#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

/* A number written from its first character on (no sign, no space, no
 * "inf"), whole. */
static int number(const char *text, double *v)
{
	char *end = NULL;
	if (!isdigit((unsigned char)text[0]))
		return 0;
	errno = 0;
	*v = strtod(text, &end);
	return !*end && !errno;
}

int cmd_audit_parse(const struct cmd_audit_in *a, const char *cmd,
		    struct apf_audit_opts *o)
{
	o->reeval = a->reeval;
	o->top = a->top;
	o->accept_other_hardware = a->accept;
	o->replay = 0;
	if (a->replay && !strcmp(a->replay, "all")) {
		o->replay = APF_AUDIT_ALL;
	} else if (a->replay) {
		char *end = NULL;
		errno = 0;
		o->replay = strtol(a->replay, &end, 10);
		if (!isdigit((unsigned char)a->replay[0]) || *end || errno ||
		    o->replay < 1)
			o->replay = -1;
	}
	o->tolerance = 0;
	if (a->tolerance && (!number(a->tolerance, &o->tolerance) ||
			     !(o->tolerance >= 1.0) || o->tolerance > 1e6))
		return apf_error(APF_EUSAGE, cmd,
				 "--timing-tolerance takes a number R >= 1");
	o->compare = APF_REPLAY_EXACT;
	if (a->compare && !strcmp(a->compare, "tolerant")) {
		o->compare = APF_REPLAY_TOLERANT;
	} else if (a->compare && !strcmp(a->compare, "auto")) {
		/* auto let the run's device claim pick the tolerance: a cpu
		 * run relabelled cuda bought a forged checkpoint 1%. */
		return apf_error(APF_EUSAGE, cmd,
				 "--replay-compare auto is gone: it let the "
				 "run's claimed device choose a tolerant "
				 "comparison; give exact (the default) or "
				 "tolerant");
	} else if (a->compare && strcmp(a->compare, "exact")) {
		return apf_error(APF_EUSAGE, cmd,
				 "--replay-compare takes exact or tolerant, "
				 "not '%s'",
				 a->compare);
	}
	o->rtol = 0;
	if (a->rtol && (!number(a->rtol, &o->rtol) || !(o->rtol > 0) ||
			o->rtol > 1))
		return apf_error(APF_EUSAGE, cmd,
				 "--replay-rtol takes a number X, 0 < X <= 1");
	if (o->replay < 0 || a->top < 0 || a->seed < -1 ||
	    a->seed > 0xffffffffL)
		return apf_error(APF_EUSAGE, cmd,
				 "--replay takes N >= 1 or all, --replay-top "
				 "Q >= 0, --seed 0 to 2^32-1");
	/* A qualifier that would do nothing is refused, not ignored: an
	 * auditor who gave it believes a check was made. */
	if (a->tolerance && !o->replay && !o->top)
		return apf_error(APF_EUSAGE, cmd,
				 "--timing-tolerance compares replayed times: "
				 "give --replay N|all or --replay-top Q");
	if (a->accept && !a->tolerance)
		return apf_error(APF_EUSAGE, cmd,
				 "--accept-other-hardware qualifies "
				 "--timing-tolerance");
	if (a->rtol && o->compare != APF_REPLAY_TOLERANT)
		return apf_error(APF_EUSAGE, cmd,
				 "--replay-rtol is the tolerance of "
				 "--replay-compare tolerant");
	uint32_t s = (uint32_t)a->seed;
	if (a->seed < 0 && getrandom(&s, sizeof s, 0) != sizeof s)
		s = (uint32_t)apf_now_ns();
	o->seed = s;
	return 0;
}

int cmd_audit_wanted(const struct apf_audit_opts *o)
{
	return o->reeval || o->replay > 0 || o->top > 0;
}

void cmd_audit_describe(const struct apf_audit_opts *o, char *out,
			size_t size)
{
	apf_buf b = {0};
	int rc = 0;
	if (o->reeval)
		rc = apf_buf_puts(&b, "re-evaluation of every checkpoint");
	if (!rc && o->replay == APF_AUDIT_ALL)
		rc = apf_buf_printf(&b, "%sreplay of every interval",
				    b.len ? "; " : "");
	else if (!rc && o->replay > 0)
		rc = apf_buf_printf(&b, "%sreplay of %ld interval%s by seed %u",
				    b.len ? "; " : "", o->replay,
				    o->replay == 1 ? "" : "s", o->seed);
	if (!rc && o->top > 0)
		rc = apf_buf_printf(&b, "%sreplay of the %ld interval%s whose "
					"parameters changed most",
				    b.len ? "; " : "", o->top,
				    o->top == 1 ? "" : "s");
	if (!rc && (o->replay || o->top) && o->compare == APF_REPLAY_TOLERANT)
		rc = apf_buf_printf(&b, ", compared within %g (tolerant)",
				    o->rtol > 0 ? o->rtol : APF_REPLAY_RTOL);
	if (!rc && o->tolerance > 0)
		rc = apf_buf_printf(&b, ", timing tolerance %g%s", o->tolerance,
				    o->accept_other_hardware
					    ? " (other hardware accepted)"
					    : "");
	snprintf(out, size, "%s", !rc && b.data ? b.data : "");
	apf_buf_free(&b);
}
