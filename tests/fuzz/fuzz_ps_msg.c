/* libFuzzer target for wf_ps_msg_parse: the input is split into frames
 * (a 2-byte length prefix per frame), parsed as a request and as a reply
 * against fixed limits. The parser must never read outside the frames nor
 * crash; a message it accepts must re-encode to the same checksum, a
 * bf16 push's gradient frame must be the chunk's floats at 2 bytes each,
 * and a topk push's entries must lie inside the chunk, in order. */
#include "ps/proto.h"

#include <stdint.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const uint64_t floats[3] = {4, 16, 0};
	const void *frames[8];
	size_t sizes[8];
	int n = 0;
	while (size >= 2 && n < 8) {
		size_t len = (size_t)data[0] | ((size_t)data[1] << 8);
		data += 2;
		size -= 2;
		if (len > size)
			len = size;
		frames[n] = data;
		sizes[n] = len;
		n++;
		data += len;
		size -= len;
	}
	for (int reply = 0; reply < 2; reply++) {
		wf_ps_limits lim = {.job_id = 7,
				    .nchunks = 3,
				    .chunk_floats = floats,
				    .state_floats = 2,
				    .nslots = 2,
				    .nworkers = 4,
				    .is_reply = reply,
				    .max_text = 256};
		wf_ps_msg m;
		wf_err err;
		int reason = -1;
		if (wf_ps_msg_parse(&m, frames, sizes, n, &lim, &reason, &err) == 0) {
			uint8_t hb[WF_PS_HEADER_BYTES];
			wf_ps_hdr h = m.hdr;
			wf_ps_hdr_encode(&h, hb, m.frame, m.size, m.nframes);
			if (h.checksum != m.hdr.checksum || memcmp(hb, frames[0], 56))
				__builtin_trap();
			if (m.hdr.dtype == WF_PS_DTYPE_BF16) { /* as a server expands it */
				float g[16];
				if (m.size[0] % 2 || m.size[0] / 2 > 16)
					__builtin_trap();
				wf_ps_bf16_decode(g, m.frame[0], m.size[0] / 2);
			}
			if (m.hdr.dtype == WF_PS_DTYPE_TOPK) { /* as a server expands it */
				uint64_t n = floats[m.hdr.chunk];
				const uint8_t *p = m.frame[0];
				size_t k = m.size[0] / 8;
				float g[16];
				if (m.size[0] % 8 || k < 1 || k > n || n > 16)
					__builtin_trap();
				for (size_t j = 0; j < k; j++) {
					uint32_t i = (uint32_t)p[4 * j] |
						     (uint32_t)p[4 * j + 1] << 8 |
						     (uint32_t)p[4 * j + 2] << 16 |
						     (uint32_t)p[4 * j + 3] << 24;
					uint32_t prev =
						j ? (uint32_t)p[4 * j - 4] |
								(uint32_t)p[4 * j - 3] << 8 |
								(uint32_t)p[4 * j - 2] << 16 |
								(uint32_t)p[4 * j - 1] << 24
						  : 0;
					if (i >= n || (j && i <= prev))
						__builtin_trap();
				}
				wf_ps_topk_decode(g, (size_t)n, m.frame[0], m.size[0]);
			}
		} else if (reason < 0 || reason >= WF_PS_REJECT__COUNT) {
			__builtin_trap();
		}
	}
	return 0;
}
