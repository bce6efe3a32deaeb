/* libFuzzer target for the messages of elastic allreduce
 * (worker/elastic_wire.h): the membership service's and the TCP ring's
 * hand-shake. The input is one message, header and body, as it arrives on a
 * socket; its body is also parsed as every type. The parser must never read
 * outside the body nor crash; a message it accepts must encode back to the
 * same bytes, and an assignment's ranks must lie inside its members. */
#include "worker/elastic_wire.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void round_trip(const wf_el_msg *m, const uint8_t *body, size_t len)
{
	size_t cap = wf_el_msg_bytes(m);
	uint8_t *out = malloc(cap);
	if (!out)
		return;
	size_t n = wf_el_msg_encode(m, out, cap);
	if (n != WF_EL_HEADER + len || memcmp(out + WF_EL_HEADER, body, len) != 0)
		__builtin_trap();
	free(out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char why[256];
	wf_el_msg m;
	int type;
	uint32_t len;
	if (size >= WF_EL_HEADER && wf_el_header_parse(data, &type, &len) == 0 &&
	    len <= size - WF_EL_HEADER) {
		const uint8_t *body = data + WF_EL_HEADER;
		if (wf_el_msg_parse(type, body, len, &m, why, sizeof(why)) == 0) {
			if (m.type == WF_EL_ASSIGN &&
			    (m.nmembers != m.size || m.rank >= m.size || m.root >= m.size))
				__builtin_trap();
			round_trip(&m, body, len);
			wf_el_msg_free(&m);
		}
	}
	/* the whole input as the body of every type */
	for (int t = 0; t <= WF_EL_DONE + 1; t++)
		if (wf_el_msg_parse(t, data, size, &m, why, sizeof(why)) == 0) {
			round_trip(&m, data, size);
			wf_el_msg_free(&m);
		}
	return 0;
}
