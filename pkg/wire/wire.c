/*
 * wire.c: the line channel between the supervisor and its processes, the
 * protocol checker the supervisor feeds every line of the trial's, and the
 * hidden subcommands' arguments (wire.h).
 */
#include "wire/wire.h"

#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>


static int send_line(int fd, int pass, const char *fmt, va_list ap)
{
	char line[APF_LINE_MAX];
	int n = vsnprintf(line, sizeof line - 1, fmt, ap);
	if (n < 0 || (size_t)n >= sizeof line - 1)
		return apf_error(APF_EINTERNAL, "channel", "line too long");
	line[n++] = '\n';
	const char *p = line;
	if (pass >= 0) {
		/* The descriptor rides on the line's first bytes. */
		struct iovec iov = {(void *)p, (size_t)n};
		union {
			char buf[CMSG_SPACE(sizeof(int))];
			struct cmsghdr align;
		} u;
		memset(&u, 0, sizeof u);
		struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1,
				    .msg_control = u.buf,
				    .msg_controllen = sizeof u.buf};
		struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(c), &pass, sizeof pass);
		ssize_t w;
		do
			w = sendmsg(fd, &mh, MSG_NOSIGNAL);
		while (w < 0 && errno == EINTR);
		if (w < 0)
			return apf_error_errno(APF_EIO, errno, "channel", "sendmsg");
		p += w;
		n -= (int)w;
	}
	while (n > 0) {
		/* A peer that died must be an error here, not a SIGPIPE. */
		ssize_t w = send(fd, p, (size_t)n, MSG_NOSIGNAL);
		if (w < 0 && errno == ENOTSOCK)
			w = write(fd, p, (size_t)n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0)
			return apf_error_errno(APF_EIO, errno, "channel", "write");
		p += w;
		n -= (int)w;
	}
	return 0;
}

int apf_chan_send(int fd, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int rc = send_line(fd, -1, fmt, ap);
	va_end(ap);
	return rc;
}

int apf_chan_send_fd(int fd, int pass, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int rc = send_line(fd, pass, fmt, ap);
	va_end(ap);
	return rc;
}

/* Moves the first complete line of the buffer to out. */
static int take_line(struct apf_chan *c, char *out, size_t size)
{
	char *nl = memchr(c->buf, '\n', c->len);
	if (!nl)
		return 0;
	size_t n = (size_t)(nl - c->buf);
	if (n >= size)
		return apf_error(APF_EINPUT, "channel", "line too long");
	/* A NUL would cut the line short of what was sent, and a check of
	 * the rest would never see it. */
	if (memchr(c->buf, 0, n))
		return apf_error(APF_EINPUT, "channel", "a NUL byte in a line");
	memcpy(out, c->buf, n);
	out[n] = 0;
	memmove(c->buf, nl + 1, c->len - n - 1);
	c->len -= n + 1;
	return 1;
}

int apf_chan_pending(const struct apf_chan *c)
{
	return memchr(c->buf, '\n', c->len) != NULL;
}

/* One read of what is there: >0 bytes, 0 at EOF, -1 would block. */
static int fill(struct apf_chan *c)
{
	if (c->len == sizeof c->buf)
		return apf_error(APF_EINPUT, "channel",
				 "a line longer than %d bytes", APF_LINE_MAX);
	for (;;) {
		ssize_t r = read(c->fd, c->buf + c->len, sizeof c->buf - c->len);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return -1;
		if (r < 0)
			return apf_error_errno(APF_EIO, errno, "channel", "read");
		c->len += (size_t)r;
		return r == 0 ? 0 : 1;
	}
}

int apf_chan_try(struct apf_chan *c, char *out, size_t size)
{
	int t = take_line(c, out, size);
	if (t)
		return t;
	struct pollfd p = {c->fd, POLLIN, 0};
	if (poll(&p, 1, 0) <= 0)
		return 0;
	int f = fill(c);
	if (f < 0 && f != -1)
		return f;
	if (f == 0)
		return 2;
	return take_line(c, out, size);
}

int apf_chan_recv_fd(struct apf_chan *c, char *out, size_t size, int *fd)
{
	*fd = -1;
	for (;;) {
		int t = take_line(c, out, size);
		if (t)
			return t;
		if (c->len == sizeof c->buf)
			return apf_error(APF_EINPUT, "channel",
					 "a line longer than %d bytes", APF_LINE_MAX);
		struct iovec iov = {c->buf + c->len, sizeof c->buf - c->len};
		union {
			char buf[CMSG_SPACE(sizeof(int))];
			struct cmsghdr align;
		} u;
		struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1,
				    .msg_control = u.buf,
				    .msg_controllen = sizeof u.buf};
		ssize_t r = recvmsg(c->fd, &mh, MSG_CMSG_CLOEXEC);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return apf_error_errno(APF_EIO, errno, "channel", "recvmsg");
		for (struct cmsghdr *m = CMSG_FIRSTHDR(&mh); m;
		     m = CMSG_NXTHDR(&mh, m))
			if (m->cmsg_level == SOL_SOCKET &&
			    m->cmsg_type == SCM_RIGHTS &&
			    m->cmsg_len == CMSG_LEN(sizeof(int))) {
				int got;
				memcpy(&got, CMSG_DATA(m), sizeof got);
				if (*fd >= 0)
					close(got);
				else
					*fd = got;
			}
		if (r == 0)
			return 0;
		c->len += (size_t)r;
	}
}

int apf_chan_recv(struct apf_chan *c, char *out, size_t size, int timeout_ms)
{
	uint64_t deadline = timeout_ms < 0 ? 0
					   : apf_now_ns() +
						     (uint64_t)timeout_ms * 1000000u;
	for (;;) {
		int t = take_line(c, out, size);
		if (t)
			return t;
		int wait = -1;
		if (timeout_ms >= 0) {
			uint64_t now = apf_now_ns();
			if (now >= deadline)
				return -1;
			wait = (int)((deadline - now) / 1000000u) + 1;
		}
		struct pollfd p = {c->fd, POLLIN, 0};
		int r = poll(&p, 1, wait);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return apf_error_errno(APF_EIO, errno, "channel", "poll");
		if (r == 0)
			continue;
		int f = fill(c);
		if (f == 0)
			return 0;
		if (f < -1)
			return f;
	}
}

/* ---- what the supervisor accepts from the trial ------------------------------ */

/* A step or batch count: decimal digits only, no sign, no leading zero,
 * at most 18 digits; the rest of the text after it in *end. */
static int parse_count(const char *s, const char **end, int64_t *out)
{
	const char *p = s;
	int64_t v = 0;
	while (*p >= '0' && *p <= '9' && p - s < 18)
		v = v * 10 + (*p++ - '0');
	if (p == s || (*s == '0' && p - s > 1) || (*p >= '0' && *p <= '9'))
		return -1;
	*end = p;
	*out = v;
	return 0;
}

/* The line as the fault names it: escaped, cut to a readable length. */
static void quote(char *out, size_t size, const char *line)
{
	char cut[84];
	size_t n = strlen(line);
	snprintf(cut, sizeof cut, "%.80s%s", line, n > 80 ? "..." : "");
	apf_text_escape(out, size, cut);
}

static int refuse(const char *line, const char *why)
{
	char q[400];
	quote(q, sizeof q, line);
	return apf_error(APF_EVERIFY, "protocol", "'%s' from the trial: %s", q,
			 why);
}

static const char *phase_wants(enum apf_proto_phase ph)
{
	return ph == APF_PROTO_SETUP    ? "expected lock"
	       : ph == APF_PROTO_LOCKED ? "expected ready"
	       : ph == APF_PROTO_RUNNING ? "expected an eval report"
	       : ph == APF_PROTO_COPYING ? "expected copied"
				     : "the supervisor has not answered yet";
}

int apf_proto_accept(struct apf_proto *p, const char *line, struct apf_proto_msg *m)
{
	memset(m, 0, sizeof *m);
	if (!strncmp(line, "error ", 6)) {
		m->kind = APF_PROTO_ERROR;
		m->text = line + 6;
		return 0;
	}
	if (!strncmp(line, "warn ", 5)) {
		if (p->warnings >= APF_PROTO_MAX_WARN)
			return refuse(line, "more warnings than the protocol "
					    "allows");
		for (const char *c = line + 5; *c; c++)
			if ((unsigned char)*c < 0x20 || (unsigned char)*c >= 0x7f)
				return refuse(line, "a warning that is not "
						    "printable ASCII");
		if (!line[5])
			return refuse(line, "an empty warning");
		p->warnings++;
		m->kind = APF_PROTO_WARN;
		m->text = line + 5;
		return 0;
	}
	const char *e;
	if (!strcmp(line, "lock")) {
		if (p->phase != APF_PROTO_SETUP)
			return refuse(line, phase_wants(p->phase));
		m->kind = APF_PROTO_LOCK;
		p->phase = APF_PROTO_WAIT;
		return 0;
	}
	if (!strncmp(line, "ready ", 6)) {
		if (p->phase != APF_PROTO_LOCKED)
			return refuse(line, phase_wants(p->phase));
		if (parse_count(line + 6, &e, &m->step) || *e != ' ' ||
		    parse_count(e + 1, &e, &m->batch) || *e)
			return refuse(line, "malformed ready");
		if (m->step != p->step)
			return refuse(line, "ready at another step than the "
					    "checkpoint's");
		if (m->batch < 1 || m->batch > (1 << 24))
			return refuse(line, "a batch size outside [1, 2^24]");
		m->kind = APF_PROTO_READY;
		p->phase = APF_PROTO_WAIT;
		return 0;
	}
	if (!strncmp(line, "eval ", 5)) {
		if (p->phase != APF_PROTO_RUNNING)
			return refuse(line, phase_wants(p->phase));
		if (parse_count(line + 5, &e, &m->step) || *e != ' ')
			return refuse(line, "malformed eval report");
		e++;
		if (!strcmp(e, "due"))
			m->why = APF_WHY_DUE;
		else if (!strcmp(e, "complete"))
			m->why = APF_WHY_COMPLETE;
		else if (!strcmp(e, "max_steps"))
			m->why = APF_WHY_MAX_STEPS;
		else
			return refuse(line, "malformed eval report");
		if (m->step <= p->step)
			return refuse(line, "a step not after the last one");
		if (p->max_steps > 0 && m->step > p->max_steps)
			return refuse(line, "a step past max_steps");
		if (m->why == APF_WHY_DUE && (!p->eval_at || m->step < p->eval_at))
			return refuse(line, "an eval the supervisor did not ask "
					    "for");
		if (m->why == APF_WHY_MAX_STEPS && m->step != p->max_steps)
			return refuse(line, "max_steps reported at another step");
		m->kind = APF_PROTO_EVAL;
		p->step = m->step;
		p->eval_at = 0;
		p->phase = APF_PROTO_COPYING;
		return 0;
	}
	if (!strcmp(line, "copied")) {
		if (p->phase != APF_PROTO_COPYING)
			return refuse(line, phase_wants(p->phase));
		m->kind = APF_PROTO_COPIED;
		m->step = p->step;
		p->phase = APF_PROTO_WAIT;
		return 0;
	}
	return refuse(line, "not a message of the protocol");
}

void apf_proto_locked(struct apf_proto *p)
{
	p->phase = APF_PROTO_LOCKED;
}

void apf_proto_go(struct apf_proto *p, int64_t eval_at)
{
	p->phase = APF_PROTO_RUNNING;
	p->eval_at = eval_at;
}

void apf_proto_request(struct apf_proto *p, int64_t eval_at)
{
	if (p->phase == APF_PROTO_RUNNING && !p->eval_at)
		p->eval_at = eval_at;
}

/* ---- arguments --------------------------------------------------------------- */

static int want(const char *name, const char *v)
{
	if (!v)
		return apf_error(APF_EUSAGE, "runner", "--%s needs a value", name);
	return 0;
}

const char *const apf_submission_cflags[] = {
	"-std=c17",	  "-O2",	      "-fPIC",
	"-shared",	  "-ffp-contract=off", "-fno-fast-math",
	"-Wall",	  "-Werror=implicit-function-declaration",
	"-Werror=incompatible-pointer-types",
	NULL};

int apf_unit_args_parse(struct apf_unit_args *a, int argc, char **argv)
{
	memset(a, 0, sizeof *a);
	a->threads = 1;
	a->device = "cpu";
	a->variant = "base";
	for (int i = 1; i < argc; i++) {
		const char *k = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (strncmp(k, "--", 2))
			return apf_error(APF_EUSAGE, "runner",
					 "unexpected argument '%s'", k);
		k += 2;
		int rc = want(k, v);
		if (rc)
			return rc;
		i++;
		if (!strcmp(k, "workloads"))
			a->workloads_dir = v;
		else if (!strcmp(k, "workload"))
			a->workload = v;
		else if (!strcmp(k, "variant"))
			a->variant = v;
		else if (!strcmp(k, "seed"))
			a->seed = strtoull(v, NULL, 10);
		else if (!strcmp(k, "study"))
			a->study = (uint32_t)strtoul(v, NULL, 10);
		else if (!strcmp(k, "trial"))
			a->trial = (uint32_t)strtoul(v, NULL, 10);
		else if (!strcmp(k, "threads"))
			a->threads = atoi(v);
		else if (!strcmp(k, "numerics")) {
			a->numerics = atoi(v);
			if (a->numerics < 1)
				return apf_error(APF_EUSAGE, "runner",
						 "--numerics N, not '%s'", v);
		}
		else if (!strcmp(k, "device"))
			a->device = v;
		else if (!strcmp(k, "so"))
			a->so = v;
		else if (!strcmp(k, "hparams"))
			a->hparams = v;
		else if (!strcmp(k, "max-steps"))
			a->max_steps = strtoll(v, NULL, 10);
		else if (!strcmp(k, "step-hint"))
			a->step_hint = strtoll(v, NULL, 10);
		else if (!strcmp(k, "budget-s"))
			a->budget_s = strtod(v, NULL);
		else if (!strcmp(k, "arena-bytes"))
			a->arena_bytes = strtoull(v, NULL, 10);
		else if (!strcmp(k, "train-layout")) {
			unsigned long long n = 0;
			char end = 0;
			if (sscanf(v, "%d,%d,%d,%d,%llu%c", &a->train_h,
				   &a->train_w, &a->train_c, &a->train_classes,
				   &n, &end) != 5)
				return apf_error(APF_EUSAGE, "runner",
						 "--train-layout H,W,C,K,N, not "
						 "'%s'",
						 v);
			a->train_n = n;
		}
		else
			return apf_error(APF_EUSAGE, "runner",
					 "unknown option --%s", k);
	}
	if (!a->workloads_dir || !a->workload || a->threads < 1 ||
	    !a->arena_bytes)
		return apf_error(APF_EUSAGE, "runner",
				 "--workloads, --workload, --threads and "
				 "--arena-bytes are required");
	return 0;
}

int apf_unit_args_to_argv(const struct apf_unit_args *a, int trial, char **argv,
		      size_t *n, apf_buf *storage)
{
	/* Values are formatted into one buffer; offsets become pointers at
	 * the end, since the buffer moves while it grows. */
	size_t offs[32], k = 0;
#define ADD(key, fmt, ...)                                                    \
	do {                                                                  \
		offs[k++] = storage->len;                                     \
		apf_buf_printf(storage, "--" key "%c" fmt "%c", 0,            \
			       __VA_ARGS__, 0);                               \
	} while (0)
	ADD("workloads", "%s", a->workloads_dir);
	ADD("workload", "%s", a->workload);
	ADD("variant", "%s", a->variant);
	ADD("seed", "%llu", (unsigned long long)a->seed);
	ADD("study", "%u", a->study);
	ADD("trial", "%u", a->trial);
	ADD("threads", "%d", a->threads);
	if (a->numerics)
		ADD("numerics", "%d", a->numerics);
	ADD("device", "%s", a->device);
	ADD("arena-bytes", "%llu", (unsigned long long)a->arena_bytes);
	if (trial) {
		ADD("so", "%s", a->so);
		ADD("hparams", "%s", a->hparams);
		ADD("max-steps", "%lld", (long long)a->max_steps);
		ADD("step-hint", "%lld", (long long)a->step_hint);
		ADD("budget-s", "%.17g", a->budget_s);
		ADD("train-layout", "%d,%d,%d,%d,%llu", a->train_h, a->train_w,
		    a->train_c, a->train_classes,
		    (unsigned long long)a->train_n);
	}
#undef ADD
	if (!storage->data)
		return apf_error(APF_ENOMEM, "runner", "out of memory");
	for (size_t i = 0; i < k; i++) {
		char *key = storage->data + offs[i];
		argv[(*n)++] = key;
		argv[(*n)++] = key + strlen(key) + 1;
	}
	return 0;
}
