/* data_priv.h: what the dataset sources share (data.c: the HDF5 lock,
 * checksums, opening and reading; data_write.c: the writer). Not part of the
 * public API. */
#ifndef WF_DATA_PRIV_H
#define WF_DATA_PRIV_H

#include <stddef.h>
#include <stdint.h>

#define CHUNK_TARGET_BYTES (1 << 20) /* bytes per images chunk, about */
#define CHUNK_MAX_IMAGES   256
#define LABEL_CHUNK	   65536
#define CHUNK_CACHE_BYTES  (16 << 20)
#define CHUNK_CACHE_SLOTS  1009

/* Take the HDF5 lock and turn HDF5's own printing off until wf_data_h5_unlock. */
void wf_data_h5_lock(void);
void wf_data_h5_unlock(void);
/* CRC-32 (zlib's) of n int32 labels as little-endian bytes. */
uint32_t wf_data_crc_i32(uint32_t crc, const int32_t *v, long n);
/* CRC-32 of any number of bytes (zlib takes at most 4 GiB per call). */
uint32_t wf_data_crc_bytes(uint32_t crc, const uint8_t *b, size_t n);

#endif
