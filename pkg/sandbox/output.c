/*
 * output.c: the program's stdout and stderr (apf_sandbox_config.output).
 *
 * The program writes into a pipe; the supervisor reads it and appends what
 * it read to the log file, escaped (apf_text_escape_lines: lines stay
 * lines, every other control and invalid byte becomes \xNN) and cut after
 * output_max bytes. So the program never holds a descriptor of a host file
 * (one could be reopened, truncated or changed through /proc/self/fd, and
 * its /proc/self/fd link names the file's host path), and nothing it
 * prints reaches a terminal that shows the log as anything but text.
 *
 * Draining never blocks the supervisor: the read end is non-blocking, and
 * one call reads at most DRAIN_MAX bytes, so a program that prints without
 * end costs the supervisor a bounded amount per turn of its loop. Past the
 * cut the pipe is still drained (a program blocked on a full pipe would
 * stall an honest trial) and the bytes are counted, not kept.
 */
#include "sandbox/internal.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define DEFAULT_OUTPUT_MAX (4ull << 20)
#define DRAIN_MAX (1u << 20)

int apf_sandbox_output_open(apf_sandbox *sb, const char *path, uint64_t max,
			    int *write_end)
{
	*write_end = -1;
	int p[2];
	if (pipe2(p, O_CLOEXEC) < 0)
		return apf_error_errno(APF_EIO, errno, "sandbox", "output pipe");
	int log = open(path, O_WRONLY | O_CREAT | O_APPEND | O_NOFOLLOW |
				     O_CLOEXEC,
		       0644);
	if (log < 0) {
		int e = errno;
		close(p[0]);
		close(p[1]);
		return apf_error_errno(APF_EINPUT, e, path, "open");
	}
	int fl = fcntl(p[0], F_GETFL);
	if (fl < 0 || fcntl(p[0], F_SETFL, fl | O_NONBLOCK) < 0) {
		int e = errno;
		close(p[0]);
		close(p[1]);
		close(log);
		return apf_error_errno(APF_EIO, e, "sandbox", "output pipe");
	}
	sb->out_rfd = p[0];
	sb->out_log = log;
	sb->out_max = max ? max : DEFAULT_OUTPUT_MAX;
	*write_end = p[1];
	return 0;
}

int apf_sandbox_output_fd(const apf_sandbox *sb)
{
	return sb->out_rfd;
}

/* Appends text to the log, within the cut; the first byte past it writes
 * the line that says so instead. */
static void keep(apf_sandbox *sb, const char *text, size_t len)
{
	if (sb->out_cut) {
		sb->out_dropped += len;
		return;
	}
	size_t room = sb->out_written < sb->out_max
			      ? (size_t)(sb->out_max - sb->out_written)
			      : 0;
	size_t n = len < room ? len : room;
	for (size_t off = 0; off < n;) {
		ssize_t w = write(sb->out_log, text + off, n - off);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			break; /* a full disk loses log text, never the run */
		off += (size_t)w;
	}
	sb->out_written += n;
	if (n < len) {
		sb->out_cut = 1;
		sb->out_dropped += len - n;
	}
}

static void close_output(apf_sandbox *sb)
{
	if (sb->out_rfd < 0)
		return;
	if (sb->out_cut) {
		char line[160];
		int n = snprintf(line, sizeof line,
				 "\n[apf: output cut after %llu bytes; %llu more "
				 "not kept]\n",
				 (unsigned long long)sb->out_written,
				 (unsigned long long)sb->out_dropped);
		if (n > 0 && write(sb->out_log, line, (size_t)n) < 0)
			(void)0; /* as in keep() */
	}
	close(sb->out_rfd);
	close(sb->out_log);
	sb->out_rfd = sb->out_log = -1;
}

int apf_sandbox_output_drain(apf_sandbox *sb)
{
	if (sb->out_rfd < 0)
		return 0;
	char buf[65536 + 4];
	apf_buf esc = {0};
	size_t total = 0;
	while (total < DRAIN_MAX) {
		memcpy(buf, sb->out_carry, sb->out_ncarry);
		ssize_t n = read(sb->out_rfd, buf + sb->out_ncarry,
				 sizeof buf - 4);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EAGAIN)
			break;
		int eof = n <= 0;
		size_t len = sb->out_ncarry + (n > 0 ? (size_t)n : 0);
		sb->out_ncarry = 0;
		esc.len = 0;
		size_t took = apf_text_escape_lines(&esc, buf, len, eof);
		if (!eof && took < len && len - took <= sizeof sb->out_carry) {
			memcpy(sb->out_carry, buf + took, len - took);
			sb->out_ncarry = len - took;
		}
		if (esc.len)
			keep(sb, esc.data, esc.len);
		if (eof) {
			close_output(sb);
			break;
		}
		total += (size_t)n;
	}
	apf_buf_free(&esc);
	return 0;
}

void apf_sandbox_output_close(apf_sandbox *sb)
{
	/* What the program wrote before it ended is still in the pipe: every
	 * writer has gone by now, so this ends at end of file. */
	while (sb->out_rfd >= 0) {
		uint64_t before = sb->out_written + sb->out_dropped;
		apf_sandbox_output_drain(sb);
		if (sb->out_rfd < 0 || sb->out_written + sb->out_dropped != before)
			continue;
		/* Nothing there yet: a process of an unsealed sandbox may
		 * still be dying with the write end open. A short wait, then
		 * what is left is not kept. */
		struct pollfd pf = {sb->out_rfd, POLLIN, 0};
		int r = poll(&pf, 1, 100);
		if (r <= 0 && !(r < 0 && errno == EINTR))
			close_output(sb);
	}
}
