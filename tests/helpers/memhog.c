/*
 * memhog: the program test_sandbox runs to try the sandbox's memory limit,
 * each action holding memory a different way. Arguments, in this order:
 *   [premade]  makes a memfd before anything else (in the setup phase);
 *   [wait]     prints "ready" and waits for one byte on stdin, so the test
 *              can lock the sandbox in between;
 *   memfd MiB        fallocate()s MiB in a memfd (the premade one, if any);
 *   scratch DIR MiB  writes a file of MiB into DIR, 1 MiB at a time;
 *   anon MiB         allocates and touches MiB of anonymous memory;
 *   shm MiB          a SysV segment of MiB, attached and touched.
 * Each reports what came of it as "key value" lines on stdout; an action
 * that the limit stops with a kill reports nothing.
 *
 * Built without sanitizers, as sandboxee is (see the Makefile).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/shm.h>
#include <unistd.h>

#define MIB (1ull << 20)

static void touch(char *p, uint64_t bytes)
{
	for (uint64_t i = 0; i < bytes; i += 4096)
		p[i] = 1;
}

int main(int argc, char **argv)
{
	int i = 1, premade = -1;
	if (i < argc && !strcmp(argv[i], "premade")) {
		premade = memfd_create("memhog-premade", MFD_CLOEXEC);
		if (premade < 0) {
			dprintf(1, "premade %s\n", strerror(errno));
			return 2;
		}
		i++;
	}
	if (i < argc && !strcmp(argv[i], "wait")) {
		char c;
		dprintf(1, "ready %d\n", (int)getpid());
		if (read(0, &c, 1) != 1)
			return 100;
		i++;
	}
	const char *a = i < argc ? argv[i] : "";
	const char *arg = i + 1 < argc ? argv[i + 1] : "0";
	if (!strcmp(a, "memfd")) {
		int fd = premade >= 0 ? premade : memfd_create("memhog", MFD_CLOEXEC);
		if (fd < 0) {
			dprintf(1, "memfd_create %s\n", strerror(errno));
			return 3;
		}
		int r = fallocate(fd, 0, 0, (off_t)(strtoull(arg, NULL, 10) * MIB));
		dprintf(1, "memfd %s\n", r < 0 ? strerror(errno) : "ok");
	} else if (!strcmp(a, "scratch")) {
		static char block[1 << 20];
		memset(block, 1, sizeof block);
		char path[4096];
		snprintf(path, sizeof path, "%s/fill", arg);
		uint64_t want = strtoull(i + 2 < argc ? argv[i + 2] : "0", NULL, 10);
		int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
		uint64_t done = 0;
		const char *why = fd < 0 ? strerror(errno) : "ok";
		while (fd >= 0 && done < want) {
			ssize_t n = write(fd, block, sizeof block);
			if (n != (ssize_t)sizeof block) {
				why = n < 0 ? strerror(errno) : "short write";
				break;
			}
			done++;
		}
		dprintf(1, "scratch %llu %s\n", (unsigned long long)done, why);
	} else if (!strcmp(a, "anon")) {
		uint64_t bytes = strtoull(arg, NULL, 10) * MIB;
		char *p = malloc(bytes);
		if (!p) {
			dprintf(1, "anon %s\n", strerror(errno));
			return 3;
		}
		touch(p, bytes);
		dprintf(1, "anon ok\n");
		free(p);
	} else if (!strcmp(a, "shm")) {
		uint64_t bytes = strtoull(arg, NULL, 10) * MIB;
		int id = shmget(IPC_PRIVATE, bytes, IPC_CREAT | 0600);
		if (id < 0) {
			dprintf(1, "shmget %s\n", strerror(errno));
			return 3;
		}
		char *p = shmat(id, NULL, 0);
		if (p == (void *)-1) {
			dprintf(1, "shmat %s\n", strerror(errno));
			return 3;
		}
		touch(p, bytes);
		dprintf(1, "shm ok\n");
	} else {
		dprintf(1, "error unknown action %s\n", a);
		return 99;
	}
	return 0;
}
