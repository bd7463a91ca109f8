/*
 * fuzz_proto.c: libFuzzer target for what the supervisor accepts from a
 * trial (struct apf_proto, pkg/wire/wire.c). The input's first byte picks
 * the supervisor's choices and max_steps; the rest is split at newlines
 * into the trial's lines. tests/unit/lib/proto_model.h checks the
 * invariants (no unrequested eval, no step backwards or past max_steps,
 * nothing accepted out of turn) and aborts when one breaks.
 */
#include "fuzzlib.h"

#include "../unit/lib/proto_model.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size == 0)
		return 0;
	struct proto_model m;
	proto_model_init(&m, data[0] + 1u, data[0] % 3, data[0] % 2 ? 40 : 0);
	char line[APF_LINE_MAX];
	size_t n = 0;
	for (size_t i = 1; i <= size; i++) {
		if (i == size || data[i] == '\n') {
			line[n] = 0;
			/* The channel refuses a NUL inside a line. */
			if (strlen(line) == n)
				proto_model_feed(&m, line);
			n = 0;
		} else if (n + 1 < sizeof line) {
			line[n++] = (char)data[i];
		}
	}
	return 0;
}
