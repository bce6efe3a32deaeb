/* crc32c.h: CRC32C (Castagnoli polynomial, as iSCSI, ext4 and LevelDB use
 * it): the wire protocol's frame checksums and the checksums of the files
 * weft writes (checkpoint DONE lists, model files). */
#ifndef WF_CRC32C_H
#define WF_CRC32C_H

#include "common/error.h"

#include <stddef.h>
#include <stdint.h>

/* CRC32C of n bytes ("123456789" -> 0xe3069283). */
uint32_t wf_crc32c(const void *data, size_t n);
/* CRC32C continuing from crc (start with 0); hardware-accelerated with SSE4.2. */
uint32_t wf_crc32c_update(uint32_t crc, const void *data, size_t n);
/* Copy n bytes src -> dst (not overlapping) and return wf_crc32c_update(crc,
 * src, n), in one pass over memory where the build has AVX-512 VPCLMULQDQ. */
uint32_t wf_crc32c_copy(uint32_t crc, void *dst, const void *src, size_t n);
/* CRC32C and size of the whole file path; WF_EIO naming path on failure. */
int wf_crc32c_file(const char *path, uint32_t *crc, uint64_t *bytes, wf_err *err);

#endif
