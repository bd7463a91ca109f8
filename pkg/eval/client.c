/*
 * client.c: starting the evaluator and asking it for metrics, the same for
 * a run (pkg/runner) and a re-evaluation (verify/).
 */
#include "eval/eval.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#define EVAL_TIMEOUT_MS (10 * 60 * 1000)

struct apf_evaluator {
	pid_t pid;
	struct apf_chan ch;
};

int apf_evaluator_start(apf_evaluator **out, const char *exe,
			const struct apf_unit_args *a, int arena_fd, int logfd)
{
	*out = NULL;
	apf_evaluator *e = apf_calloc(1, sizeof *e);
	if (!e)
		return apf_error(APF_ENOMEM, "evaluator", "out of memory");
	int sv[2];
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
		free(e);
		return apf_error_errno(APF_EIO, errno, "evaluator", "socketpair");
	}
	char *argv[40];
	size_t n = 0;
	apf_buf storage = {0};
	argv[n++] = (char *)exe;
	argv[n++] = "__eval";
	int rc = apf_unit_args_to_argv(a, 0, argv, &n, &storage);
	argv[n] = NULL;
	pid_t pid = rc ? -1 : fork();
	if (pid == 0) {
		/* Child: only async-signal-safe calls until exec. Descriptors
		 * go up out of the way first, so none lands on another's
		 * target, and dup2 clears close-on-exec on the copies. */
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		/* A session of its own: a signal to the supervisor's process
		 * group (a terminal's ^C, `timeout`, a scheduler's SIGTERM)
		 * is the supervisor's to handle, and must not end the
		 * evaluator under it, which would fail the unit. */
		setsid();
		int arena = fcntl(arena_fd, F_DUPFD_CLOEXEC, 100);
		int chan = fcntl(sv[1], F_DUPFD_CLOEXEC, 100);
		int log = logfd >= 0 ? fcntl(logfd, F_DUPFD_CLOEXEC, 100) : -1;
		if (arena < 0 || chan < 0 || dup2(arena, APF_FD_ARENA) < 0 ||
		    dup2(chan, APF_FD_CHANNEL) < 0)
			_exit(126);
		if (log >= 0) {
			dup2(log, 1);
			dup2(log, 2);
		}
		execv(exe, argv);
		_exit(127);
	}
	int fork_errno = errno;
	close(sv[1]);
	apf_buf_free(&storage);
	if (pid < 0) {
		close(sv[0]);
		free(e);
		return rc ? rc
			  : apf_error_errno(APF_EIO, fork_errno, "evaluator",
					    "fork");
	}
	e->pid = pid;
	e->ch.fd = sv[0];
	*out = e;
	return 0;
}

int apf_evaluator_eval(apf_evaluator *e, json_t **metrics, char *err,
		       size_t size)
{
	*metrics = NULL;
	err[0] = 0;
	int rc = apf_chan_send(e->ch.fd, "eval");
	char line[APF_LINE_MAX];
	int r = rc ? -2 : apf_chan_recv(&e->ch, line, sizeof line, EVAL_TIMEOUT_MS);
	if (r != 1) {
		snprintf(err, size, "the evaluator %s",
			 r == -1 ? "timed out" : "went away");
		apf_error_clear();
		return 0;
	}
	if (!strncmp(line, "error ", 6)) {
		snprintf(err, size, "%.500s", line + 6);
		return 0;
	}
	json_error_t je;
	*metrics = strncmp(line, "ok ", 3) ? NULL
					   : json_loads(line + 3, 0, &je);
	if (!*metrics)
		snprintf(err, size, "the evaluator answered '%.60s'", line);
	return 0;
}

void apf_evaluator_stop(apf_evaluator *e)
{
	if (!e)
		return;
	/* A cleanup: the caller's pending error (why a re-evaluation
	 * failed) outlives it; only this function's own are dropped. */
	char keep[1024];
	apf_error_take(keep, sizeof keep);
	apf_chan_send(e->ch.fd, "quit");
	int status;
	int gone = 0;
	for (int i = 0; i < 50 && !gone; i++) {
		gone = waitpid(e->pid, &status, WNOHANG) == e->pid;
		if (!gone)
			usleep(20000);
	}
	if (!gone) {
		kill(e->pid, SIGKILL);
		waitpid(e->pid, &status, 0);
	}
	close(e->ch.fd);
	free(e);
	apf_error_restore(0, keep);
}
