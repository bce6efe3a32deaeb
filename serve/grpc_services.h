/* grpc_services.h: weft-serve's two gRPC APIs over serve/grpc.h, from our own
 * .proto files (serve/proto/) compiled with protobuf-c:
 *   KServe v2 inference.GRPCInferenceService (grpc_kserve.c), --grpc_port;
 *   TF Serving tensorflow.serving.PredictionService and ModelService
 *   (grpc_tfs.c), --port.
 * The handlers reach models only through serve/grpc_adapter.h. The request
 * decoders below are pure (the fuzz target drives them). Thread-safe. */
#ifndef WF_SERVE_GRPC_SERVICES_H
#define WF_SERVE_GRPC_SERVICES_H

#include "common/error.h"
#include "serve/grpc.h"
#include "serve/grpc_adapter.h"

#include <protobuf-c/protobuf-c.h>
#include <stddef.h>
#include <stdint.h>

extern const wf_grpc_method wf_grpc_kserve_methods[];
extern const int wf_grpc_kserve_nmethods;
extern const wf_grpc_method wf_grpc_tfs_methods[];
extern const int wf_grpc_tfs_nmethods;

typedef struct wf_grpc_servers_opts {
	const char *bind_address;
	int tfs_port;	    /* TF Serving API; 0: off */
	int kserve_port;    /* KServe v2 API; 0: off */
	size_t max_message; /* bytes of one request message */
	int workers;	    /* handler threads per server at most */
	int start_workers;  /* ... started at once (the rest as calls need them) */
	int max_queue;	    /* calls waiting for a handler thread before RESOURCE_EXHAUSTED */
	int tfs_default;    /* 1: tfs_port is the default, not asked for: when it is */
	int kserve_default; /* in use, that API is off with a warning instead of an error */
	const char *token;  /* bearer token every call but liveness/readiness needs; NULL: none */
	const char *tls_cert, *tls_key; /* PEM: both ports speak TLS only; NULL: h2c */
} wf_grpc_servers_opts;

typedef struct wf_grpc_servers wf_grpc_servers;

/* Start the servers whose port is not 0 over the adapter (which must
 * outlive them). A port of -1 means any free port (tests). */
int wf_grpc_servers_start(wf_grpc_servers **out, const wf_grpc_servers_opts *o, wf_grpc_adapter *a,
			  wf_err *err);
/* The bound ports (0: that server is off). */
int wf_grpc_servers_tfs_port(wf_grpc_servers *s);
int wf_grpc_servers_kserve_port(wf_grpc_servers *s);
/* Begin the drain of both servers (wf_grpc_drain). */
void wf_grpc_servers_drain(wf_grpc_servers *s);
/* Calls being handled now. */
int wf_grpc_servers_inflight(wf_grpc_servers *s);
void wf_grpc_servers_stop(wf_grpc_servers *s);

/* ---- protobuf messages in and out (shared by both APIs) ---- */

/* The call's request as a d message (an empty body is the empty message);
 * NULL when it does not parse. Free with protobuf_c_message_free_unpacked. */
void *wf_grpc_unpack(const ProtobufCMessageDescriptor *d, const wf_grpc_call *call);
/* INVALID_ARGUMENT naming the message (`what`) that did not parse. */
int wf_grpc_bad_message(wf_grpc_call *call, const char *what);
/* Pack m as the call's reply: WF_GRPC_OK, or RESOURCE_EXHAUSTED. */
int wf_grpc_reply(wf_grpc_call *call, const ProtobufCMessage *m);

/* ---- decoders the fuzz target drives ---- */

/* A KServe ModelInferRequest message into model input for io: n samples in
 * *x (malloc'd). Returns a gRPC status code with why. */
int wf_grpc_kserve_decode_input(const wf_grpc_io *io, const uint8_t *msg, size_t len, float **x,
				int *n, char *why, size_t cap);
/* A TF Serving PredictRequest or ClassificationRequest (classify != 0)
 * message into model input for io. */
int wf_grpc_tfs_decode_input(const wf_grpc_io *io, const uint8_t *msg, size_t len, int classify,
			     float **x, int *n, char *why, size_t cap);

#endif
