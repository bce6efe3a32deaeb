/* grpc_services.c: starting the two gRPC servers, and model input from
 * tensors for both APIs. */
#include "serve/grpc_services.h"

#include "common/log.h"
#include "common/util.h"
#include "serve/request.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct wf_grpc_servers {
	wf_grpc *tfs, *kserve;
};

int wf_grpc_servers_start(wf_grpc_servers **out, const wf_grpc_servers_opts *o, wf_grpc_adapter *a,
			  wf_err *err)
{
	wf_grpc_servers *s = calloc(1, sizeof(*s));
	if (!s)
		return wf_errf(err, WF_ENOMEM, "out of memory");
	wf_grpc_opts go = {
		.bind_address = o->bind_address,
		.max_message = o->max_message,
		.workers = o->workers,
		.start_workers = o->start_workers,
		.max_queue = o->max_queue,
		.max_streams = 128,
		.max_conns = 1024,
		.token = o->token,
		.tls_cert = o->tls_cert,
		.tls_key = o->tls_key,
	};
	int rc = 0;
	if (o->tfs_port) {
		go.port = o->tfs_port < 0 ? 0 : o->tfs_port;
		go.name = "TF Serving gRPC";
		rc = wf_grpc_start(&s->tfs, &go, wf_grpc_tfs_methods, wf_grpc_tfs_nmethods, a, err);
		if (rc == WF_EIO && o->tfs_default) {
			wf_warn("weft-serve: %s; the TF Serving gRPC API is off (set --port)",
				err->msg);
			rc = 0;
		}
	}
	if (!rc && o->kserve_port) {
		go.port = o->kserve_port < 0 ? 0 : o->kserve_port;
		go.name = "KServe v2 gRPC";
		rc = wf_grpc_start(&s->kserve, &go, wf_grpc_kserve_methods, wf_grpc_kserve_nmethods,
				   a, err);
		if (rc == WF_EIO && o->kserve_default) {
			wf_warn("weft-serve: %s; the KServe v2 gRPC API is off (set --grpc_port)",
				err->msg);
			rc = 0;
		}
	}
	if (rc) {
		wf_grpc_servers_stop(s);
		return rc;
	}
	*out = s;
	return 0;
}

int wf_grpc_servers_tfs_port(wf_grpc_servers *s)
{
	return s ? wf_grpc_port(s->tfs) : 0;
}

int wf_grpc_servers_kserve_port(wf_grpc_servers *s)
{
	return s ? wf_grpc_port(s->kserve) : 0;
}

void wf_grpc_servers_drain(wf_grpc_servers *s)
{
	if (!s)
		return;
	wf_grpc_drain(s->tfs);
	wf_grpc_drain(s->kserve);
}

int wf_grpc_servers_inflight(wf_grpc_servers *s)
{
	return s ? wf_grpc_inflight(s->tfs) + wf_grpc_inflight(s->kserve) : 0;
}

void wf_grpc_servers_stop(wf_grpc_servers *s)
{
	if (!s)
		return;
	wf_grpc_stop(s->tfs);
	wf_grpc_stop(s->kserve);
	free(s);
}

/* ---- model input -------------------------------------------------------- */

/* ---- protobuf messages ------------------------------------------------- */

static const uint8_t empty_msg[1];

void *wf_grpc_unpack(const ProtobufCMessageDescriptor *d, const wf_grpc_call *call)
{
	return protobuf_c_message_unpack(d, NULL, call->len, call->len ? call->msg : empty_msg);
}

int wf_grpc_bad_message(wf_grpc_call *call, const char *what)
{
	return wf_grpc_fail(call, WF_GRPC_INVALID_ARGUMENT, "cannot parse the %s message", what);
}

int wf_grpc_reply(wf_grpc_call *call, const ProtobufCMessage *m)
{
	size_t n = protobuf_c_message_get_packed_size(m);
	uint8_t *buf = wf_grpc_reply_buf(call, n);
	if (!buf)
		return wf_grpc_fail(call, WF_GRPC_RESOURCE_EXHAUSTED,
				    "out of memory for the reply");
	protobuf_c_message_pack(m, buf);
	return WF_GRPC_OK;
}
