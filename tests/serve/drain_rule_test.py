"""One drain rule for HTTP and gRPC (driven by test_drain_rule.sh).

One weft-serve with REST, TF Serving gRPC and KServe v2 gRPC. Before SIGTERM:
requests held in the batcher on every front end (requests of 40 samples:
the first one taken keeps the one batch thread waiting 10 s for a batch of
64, which no other fits into, so the others queue, counted by
nv_inference_pending_request_count): HTTP
(python http.client), TF Serving Predict (grpc futures) and a KServe
ModelStreamInfer message (tritonclient); an HTTP request mid-upload; an idle
keep-alive HTTP connection; a raw HTTP/2 connection to the TF Serving port.
After SIGTERM: new connections are refused on every port, the raw HTTP/2
connection gets a GOAWAY, a request sent on the open keep-alive connection
is served with Connection: close, a message sent on the open gRPC stream is
served, every request held before is answered completely (zero failures),
and the process exits 0 within --drain_timeout_seconds."""
import http.client
import json
import os
import queue
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

import grpc
import numpy as np
import tritonclient.grpc as tg
from tritonclient.utils import InferenceServerException
from tensorflow.core.framework import types_pb2
from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc

from testlib import check, finish, free_port  # tests/serve/testlib.py

SERVE = os.environ["WEFT_SERVE"]
TOOL = os.environ["WEFT_SERVE_TOOL"]
DRAIN = 20  # --drain_timeout_seconds
CAP = 64  # --max_batch_size
BIG = 40  # samples of a held request: two do not fit in one batch
procs = []


def wait_for(pred, seconds):
    deadline = time.time() + seconds
    while time.time() < deadline:
        if pred():
            return True
        time.sleep(0.02)
    return pred()


def refused(port):
    try:
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
        return False
    except OSError:
        return True


def grpc_ready(tc):
    """KServe ServerReady, False while the port does not answer yet."""
    try:
        return tc.is_server_ready()
    except InferenceServerException:
        return False


def accepted(pid, client_port):
    """Whether process pid holds the server end of the TCP connection from
    client_port: accepted, not still in the listener's backlog, whose
    connections a closing listener resets."""
    inodes = set()
    for path in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            rows = open(path).read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            f = row.split()
            if int(f[2].rsplit(":", 1)[1], 16) == client_port:
                inodes.add(f[9])
    fds = "/proc/%d/fd" % pid
    try:
        links = [os.readlink(os.path.join(fds, d)) for d in os.listdir(fds)]
    except OSError:
        return False
    return any(l == "socket:[%s]" % i for i in inodes for l in links)


def pending(rest):
    """nv_inference_pending_request_count of the served version."""
    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % rest, timeout=10) as r:
        text = r.read().decode()
    return sum(int(float(l.rsplit(" ", 1)[1])) for l in text.splitlines()
               if l.startswith("nv_inference_pending_request_count{"))


def predict_body(n):
    return json.dumps({"instances": np.zeros((n, 32, 32, 3)).tolist()}).encode()


def post(conn, n):
    """(status, connection header, predictions) of a :predict on conn."""
    conn.request("POST", "/v1/models/m:predict", body=predict_body(n),
                 headers={"Content-Type": "application/json"})
    r = conn.getresponse()
    doc = json.loads(r.read())
    return r.status, (r.getheader("Connection") or "").lower(), len(doc.get("predictions", []))


def h2_frames(s, until_type, seconds):
    """Read HTTP/2 frames from s until one of until_type arrives: its payload or None."""
    buf, deadline = b"", time.time() + seconds
    s.settimeout(0.5)
    while time.time() < deadline:
        while len(buf) >= 9:
            n = int.from_bytes(buf[:3], "big")
            if len(buf) < 9 + n:
                break
            ftype, payload, buf = buf[3], buf[9:9 + n], buf[9 + n:]
            if ftype == until_type:
                return payload
        try:
            d = s.recv(65536)
        except socket.timeout:
            continue
        if not d:
            return None
        buf += d
    return None


def main():
    tmp = tempfile.mkdtemp(prefix="weft-drain-")
    os.makedirs(os.path.join(tmp, "m", "1"))
    subprocess.check_call([TOOL, "model", "smallcnn", os.path.join(tmp, "m", "1", "model.h5"),
                           "1", "32"])
    log = os.path.join(tmp, "serve.log")
    results = queue.Queue()  # (what, ok, detail)
    try:
        for _ in range(5):  # other ports when one chosen was taken before the bind
            rest, tfs, ks = free_port(), free_port(), free_port()
            p = subprocess.Popen([SERVE, "--model_name", "m", "--model_base_path",
                                  os.path.join(tmp, "m"), "--bind_address", "127.0.0.1",
                                  "--rest_api_port", str(rest), "--port", str(tfs),
                                  "--grpc_port", str(ks), "--enable_batching",
                                  "--max_batch_size", str(CAP), "--num_batch_threads", "1",
                                  "--batch_timeout_micros", "10000000",
                                  "--drain_timeout_seconds", str(DRAIN)],
                                 stdout=open(log, "w"), stderr=subprocess.STDOUT)
            procs.append(p)
            tc = tg.InferenceServerClient("127.0.0.1:%d" % ks)
            wait_for(lambda: p.poll() is not None or grpc_ready(tc), 60)
            if p.poll() is None or "cannot listen" not in open(log).read():
                break
        if p.poll() is not None or not grpc_ready(tc):
            check(False, "weft-serve ready")
            return finish(procs, tmp)
        # an idle keep-alive connection, and a raw HTTP/2 one to TF Serving's port
        ka = http.client.HTTPConnection("127.0.0.1", rest, timeout=60)
        ka.request("GET", "/v2/health/live")
        r = ka.getresponse()
        r.read()
        check(r.status == 200 and (r.getheader("Connection") or "").lower() != "close",
              "keep-alive connection open before SIGTERM")
        h2 = socket.create_connection(("127.0.0.1", tfs), timeout=10)
        h2.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00")
        check(h2_frames(h2, 4, 10) is not None, "raw HTTP/2 connection: the server's SETTINGS")

        def http_job(what, n):
            c = http.client.HTTPConnection("127.0.0.1", rest, timeout=120)
            try:
                st, _, npred = post(c, n)
                results.put((what, st == 200 and npred == n, "%d, %d predictions" % (st, npred)))
            except (OSError, http.client.HTTPException, ValueError) as e:
                results.put((what, False, repr(e)))
            finally:
                c.close()
        # held requests: HTTP, TF Serving Predict, a KServe stream message
        threads = [threading.Thread(target=http_job, args=("HTTP held %d" % i, BIG))
                   for i in range(3)]
        for t in threads:
            t.start()
        ch = grpc.insecure_channel("127.0.0.1:%d" % tfs)
        ps = prediction_service_pb2_grpc.PredictionServiceStub(ch)
        x = np.zeros((BIG, 32, 32, 3), np.float32)
        req = predict_pb2.PredictRequest()
        req.model_spec.name = "m"
        t = req.inputs["input"]
        t.dtype = types_pb2.DT_FLOAT
        for d in x.shape:
            t.tensor_shape.dim.add().size = d
        t.tensor_content = x.tobytes()
        futures = [ps.Predict.future(req, timeout=120) for _ in range(3)]
        stream_answers = queue.Queue()
        tc.start_stream(callback=lambda result, error: stream_answers.put((result, error)))
        inp = tg.InferInput("input", list(x.shape), "FP32")
        inp.set_data_from_numpy(x)
        tc.async_stream_infer("m", [inp], request_id="before")
        queued = 3 + 3 + 1 - 1  # all but the one in the held batch
        check(wait_for(lambda: pending(rest) >= queued, 60),
              "%d requests queued behind the held batch before SIGTERM (%d)"
              % (queued, pending(rest)))
        # an HTTP request mid-upload keeps the drain open until the end of the test
        body = predict_body(1)
        up = socket.create_connection(("127.0.0.1", rest), timeout=120)
        up.sendall(b"POST /v1/models/m:predict HTTP/1.1\r\nHost: x\r\nContent-Type: "
                   b"application/json\r\nContent-Length: %d\r\n\r\n" % len(body) +
                   body[:len(body) // 2])
        # SIGTERM closes the listener, which resets what is still in its backlog
        check(wait_for(lambda: accepted(p.pid, up.getsockname()[1]), 30),
              "the mid-upload connection is accepted before SIGTERM")

        t_term = time.time()
        p.send_signal(signal.SIGTERM)
        check(wait_for(lambda: refused(rest) and refused(tfs) and refused(ks), 10),
              "after SIGTERM new connections are refused on the REST, TF Serving and KServe ports")
        goaway = h2_frames(h2, 7, 10)
        check(goaway is not None and struct.unpack(">I", goaway[4:8])[0] == 0,
              "the open HTTP/2 connection gets a GOAWAY (NO_ERROR)")
        h2.close()
        # arrivals on connections already open are served
        try:
            st, conn, npred = post(ka, 1)
        except (OSError, http.client.HTTPException, ValueError) as e:
            st, conn, npred = repr(e), "", 0
        check(st == 200 and npred == 1 and conn == "close",
              "a request on the open keep-alive connection during the drain: served with "
              "Connection: close (%s, %s, %d predictions)" % (st, conn, npred))
        ka.close()
        tc.async_stream_infer("m", [inp], request_id="during")
        answers = {}
        for _ in range(2):
            try:
                res, err = stream_answers.get(timeout=60)
            except queue.Empty:
                break
            if err is None:
                answers[res.get_response().id] = res.as_numpy("probabilities").shape
            else:
                answers[str(err)] = None
        check(answers.get("before") == (BIG, 10) and answers.get("during") == (BIG, 10),
              "the gRPC stream's messages before and during the drain are answered (%s)" % answers)
        for i, f in enumerate(futures):
            try:
                r = f.result(timeout=60)
                n = len(r.outputs["probabilities"].float_val)
                results.put(("TF Serving Predict %d" % i, n == BIG * 10, "%d values" % n))
            except grpc.RpcError as e:
                results.put(("TF Serving Predict %d" % i, False, "%s %s" % (e.code(), e.details())))
        for t in threads:
            t.join(timeout=60)
        # the last in-flight request: its body's second half now
        up.sendall(body[len(body) // 2:])
        buf = b""
        while b"\r\n\r\n" not in buf:
            d = up.recv(65536)
            if not d:
                break
            buf += d
        head = buf.split(b"\r\n\r\n", 1)[0].decode("latin-1").lower()
        results.put(("HTTP mid-upload", head.startswith("http/1.1 200") and
                     "connection: close" in head, head.split("\r\n")[0]))
        up.close()
        tc.stop_stream()
        tc.close()
        ch.close()
        try:
            rc = p.wait(timeout=DRAIN + 10)
        except subprocess.TimeoutExpired:
            rc = None
        took = time.time() - t_term
        failed, results_n = [], [0]
        while not results.empty():
            results_n[0] += 1
            what, ok, detail = results.get()
            print("  %s: %s" % (what, detail), flush=True)
            if not ok:
                failed.append(what)
        check(not failed and results_n[0] == 3 + 3 + 1,
              "every request in flight at SIGTERM is answered completely (failed: %s)" % failed)
        check(rc == 0 and took < DRAIN,
              "exit 0 within the drain timeout (%s after %.2f s)" % (rc, took))
    finally:
        rc = finish(procs, tmp)
    return rc


if __name__ == "__main__":
    sys.exit(main())
