/* fuzz_grpc_h2.c: libFuzzer target for weft-serve's gRPC transport: bytes
 * from a client into one server-side HTTP/2 session (nghttp2 plus weft's
 * callbacks: headers, DATA accumulation and limits, gRPC framing, dispatch
 * to workers and inline handlers, streaming calls (messages taken as they
 * arrive, replies queued, deferred and resumed, trailers), calls finished by wf_grpc_call_done,
 * replies and trailers, resets, closes). Handlers here echo, fail or return
 * nothing, so only the transport is under test. Seeds:
 * tests/fuzz/seeds/grpc_h2 (what tritonclient.grpc sent). Any input must end
 * in replies or a closed connection, never a crash or a leak. */
#include "serve/grpc.h"

#include <stdint.h>
#include <string.h>

static int echo(void *ctx, wf_grpc_call *call)
{
	uint8_t *out = wf_grpc_reply_buf(call, call->len);
	if (!out)
		return wf_grpc_fail(call, WF_GRPC_RESOURCE_EXHAUSTED, "out of memory");
	if (call->len)
		memcpy(out, call->msg, call->len);
	return WF_GRPC_OK;
}

static int fail(void *ctx, wf_grpc_call *call)
{
	return wf_grpc_fail(call, WF_GRPC_INVALID_ARGUMENT, "bad \xff message %% %zu", call->len);
}

static int nothing(void *ctx, wf_grpc_call *call)
{
	return WF_GRPC_OK; /* no reply message: the transport answers INTERNAL */
}

/* Finishes the call before it returns WF_GRPC_PENDING, as a batch thread
 * may finish a queued inference. */
static int later(void *ctx, wf_grpc_call *call)
{
	wf_grpc_call_done(call, echo(ctx, call));
	return WF_GRPC_PENDING;
}

/* A streaming method's reply message is the call's reply; a failure ends
 * the stream. */
static int as_is(wf_grpc_call *call, int code)
{
	return code;
}

static const wf_grpc_method methods[] = {
	/* small messages in the loop, larger ones in the worker */
	{"/inference.GRPCInferenceService/ModelInfer", later, 0, 0, 64, NULL},
	{"/inference.GRPCInferenceService/ServerLive", echo, 1, 0, 0, NULL},
	{"/inference.GRPCInferenceService/ModelReady", fail, 0, 0, 0, NULL},
	{"/inference.GRPCInferenceService/ServerReady", nothing, 1, 0, 0, NULL},
	/* streaming: each message a call, in the loop or the worker */
	{"/inference.GRPCInferenceService/ModelStreamInfer", later, 0, 0, 64, as_is},
	{"/inference.GRPCInferenceService/RepositoryIndex", fail, 0, 0, 0, as_is},
};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	wf_grpc_fuzz_session(methods, (int)(sizeof(methods) / sizeof(methods[0])), NULL, data,
			     size);
	return 0;
}
