/* rendezvous.h: hands a small secret (the 128-byte NCCL unique id) from the
 * chief to every rank of a job over plain TCP, for allreduce jobs without
 * MPI (Kubernetes pods that only have TF_CONFIG). Rank 0 listens on the port
 * of its TF_CONFIG address; every other rank connects (retrying while the
 * chief's pod and its DNS name come up), says its rank, and gets back the id
 * and the world size. No GPU, MPI or ZeroMQ here: it is tested on loopback.
 *
 * With a job key (derived from the cluster's client key, the one
 * cluster.key_dir gives every trainer) both ends prove they hold it before
 * the id counts: the chief's reply carries the id sealed with a key only a
 * holder derives (XSalsa20-Poly1305), and a rank counts as served only when
 * it answers with an HMAC-SHA256 over both ends' fresh nonces. Someone who
 * reaches the port without the key learns nothing and cannot stand in for
 * the chief (which would make the ranks join its NCCL communicator) or for
 * a rank. Without a key (--insecure) the id goes out in the clear.
 *
 * Threads: each call is self-contained; a process calls it once. */
#ifndef WF_RENDEZVOUS_H
#define WF_RENDEZVOUS_H

#include "common/error.h"

#include <stddef.h>
#include <stdint.h>

#define WF_RDV_ID_BYTES	       128 /* NCCL_UNIQUE_ID_BYTES */
#define WF_RDV_KEY_BYTES       32
#define WF_RDV_TIMEOUT_DEFAULT 300.0 /* seconds; the program passes WEFT_RENDEZVOUS_TIMEOUT */

typedef struct wf_rdv_cfg {
	int rank;	   /* this process, in [0, size); 0 serves */
	int size;	   /* processes in the job */
	const char *chief; /* "host:port" of rank 0 ("[v6]:port" too); rank 0 binds the port */
	uint64_t job;	   /* job tag every rank derives alike; a mismatch is refused */
	double timeout;	   /* seconds for the whole rendezvous (<= 0: the default) */
	/* the job key (wf_rdv_key_derive), the same on every rank; NULL: none,
	 * the id travels in the clear (--insecure) */
	const uint8_t *key;
} wf_rdv_cfg;

/* The job key from the cluster's client secret key (its Z85 text, as
 * cluster.key_dir's client.key holds it). */
void wf_rdv_key_derive(uint8_t key[WF_RDV_KEY_BYTES], const char *client_secret);

#define WF_RDV_NONCE_BYTES 32
#define WF_RDV_MAC_BYTES   32
/* HMAC-SHA256 under the job key of label | a[32] | b[32] | n (big-endian):
 * the proof both ends of a keyed connection give over each other's fresh
 * nonces (this hand-out, the elastic membership service, the TCP ring). */
void wf_rdv_mac(uint8_t out[WF_RDV_MAC_BYTES], const uint8_t *key, const char *label,
		const uint8_t a[WF_RDV_NONCE_BYTES], const uint8_t b[WF_RDV_NONCE_BYTES], int n);
/* The crypto library's start-up (once per process; thread-safe): 0, or -1. */
int wf_rdv_crypto_init(void);
/* A fresh random nonce (after wf_rdv_crypto_init). */
void wf_rdv_nonce(uint8_t out[WF_RDV_NONCE_BYTES]);
/* 1 when the two MACs are equal (in constant time), else 0. */
int wf_rdv_mac_equal(const uint8_t a[WF_RDV_MAC_BYTES], const uint8_t b[WF_RDV_MAC_BYTES]);
/* Zero n bytes at p where the compiler cannot drop it (key copies). */
void wf_rdv_wipe(void *p, size_t n);

/* Rank 0: id is the secret to hand out; returns once every other rank got
 * it. Rank r > 0: receives rank 0's id into id. WF_ETRANSIENT naming the
 * chief's address (or the ranks that never came) when the timeout passes;
 * WF_EINVAL for a bad address, a rank/size/job that does not match, or a
 * chief that does not prove the job key. */
int wf_rdv_exchange(const wf_rdv_cfg *cfg, uint8_t id[WF_RDV_ID_BYTES], wf_err *err);

#endif
