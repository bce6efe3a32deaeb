"""weft-serve as a Triton deployment sees it (driven by test_triton.sh):
tritonclient.http.aio's calls. Each
check uses a real client (tritonclient, urllib) against a real
weft-serve on free loopback ports; every process started here is stopped in
`finally`."""
import asyncio
import gzip
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

import numpy as np
import tritonclient.grpc as tg
import tritonclient.http.aio as taio
from tritonclient.utils import InferenceServerException

from testlib import check, failures, free_port  # tests/serve/testlib.py

SERVE = os.environ["WEFT_SERVE"]
TOOL = os.environ["WEFT_SERVE_TOOL"]
procs = []


def http_get(port, path, headers=None, data=None):
    """(status, headers, body) of one request; errors are answers too."""
    req = urllib.request.Request("http://127.0.0.1:%d%s" % (port, path), data=data,
                                 headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


def http_ready(port):
    try:
        return http_get(port, "/v2/health/ready")[0] == 200
    except OSError:
        return False


def grpc_ready(port):
    try:
        return tg.InferenceServerClient("127.0.0.1:%d" % port).is_server_ready()
    except InferenceServerException:
        return False


def start(tmp, args, ready="http"):
    """weft-serve with args, where {HTTP}, {GRPC}, {METRICS} and {TFS} become
    free ports; waits until it answers ready over `ready` ("http" or "grpc").
    Started again on other ports when it exits at once (another test took a
    port). Returns (process, ports, log path)."""
    for _ in range(3):
        ports = {k: free_port() for k in ("HTTP", "GRPC", "METRICS", "TFS")}
        log = os.path.join(tmp, "serve-%d.log" % ports["HTTP"])
        argv = [SERVE, "--bind_address=127.0.0.1"]
        for a in args:
            for k, v in ports.items():
                a = a.replace("{%s}" % k, str(v))
            argv.append(a)
        p = subprocess.Popen(argv, stdout=open(log, "w"), stderr=subprocess.STDOUT)
        procs.append(p)
        deadline = time.time() + 90
        while time.time() < deadline and p.poll() is None:
            if (http_ready if ready == "http" else grpc_ready)(ports[ready.upper()]):
                return p, ports, log
            time.sleep(0.1)
        if p.poll() is None:
            break
    print(open(log).read())
    raise RuntimeError("weft-serve %s did not become ready" % " ".join(args))


def stop(p):
    if p.poll() is None:
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def model(path, seed):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    subprocess.check_call([TOOL, "model", "smallcnn", path, str(seed)], stdout=subprocess.DEVNULL)


def make_repo(tmp):
    """a: max_batch_size 8; u: max_batch_size 0 (unbatched); both smallcnn
    [32,32,3] -> 10 classes."""
    repo = os.path.join(tmp, "repo")
    model(os.path.join(repo, "a", "1", "model.h5"), 1)
    model(os.path.join(repo, "u", "1", "model.h5"), 2)
    with open(os.path.join(repo, "a", "config.pbtxt"), "w") as f:
        f.write('name: "a"\nmax_batch_size: 8\n')
    with open(os.path.join(repo, "u", "config.pbtxt"), "w") as f:
        f.write('name: "u"\nmax_batch_size: 0\n')
    return repo


# ---- tritonclient.http.aio: every reply it reads as text ----

async def aio_calls(port):
    c = taio.InferenceServerClient("127.0.0.1:%d" % port)
    out = {}
    try:
        for name, call in (("server metadata", c.get_server_metadata()),
                           ("model metadata", c.get_model_metadata("a")),
                           ("model config", c.get_model_config("a")),
                           ("statistics", c.get_inference_statistics("a")),
                           ("repository index", c.get_model_repository_index()),
                           ("shm status", c.get_system_shared_memory_status())):
            try:
                out[name] = await call
            except Exception as e:  # what the client raised, for the check line
                out[name] = e
        try:
            await c.get_model_metadata("nope")
            out["error"] = None
        except InferenceServerException as e:
            out["error"] = e
        x = np.zeros((2, 32, 32, 3), np.float32)
        i = taio.InferInput("input", list(x.shape), "FP32")
        i.set_data_from_numpy(x)
        r = await c.infer("a", [i], response_compression_algorithm="gzip")
        out["infer"] = r.as_numpy("probabilities")
    finally:
        await c.close()
    return out


def aio_checks(port):
    out = asyncio.run(aio_calls(port))
    for name in ("server metadata", "model metadata", "model config", "statistics",
                 "repository index", "shm status"):
        check(not isinstance(out[name], Exception),
              "tritonclient.http.aio: %s (%r)" % (name, out[name]))
    err = out["error"]
    check(err is not None and "nope" in err.message() and "decoding" not in err.message(),
          "tritonclient.http.aio: an error reply is readable (%s)" % err)
    check(out["infer"].shape == (2, 10), "tritonclient.http.aio: infer with a gzip reply")


def compression_checks(port):
    """Only successful inference replies are compressed, as Triton does."""
    gz = {"Accept-Encoding": "gzip"}
    for path in ("/v2", "/v2/models/a", "/v2/models/a/config", "/v2/models/a/stats",
                 "/v2/models/nope"):
        st, hdrs, body = http_get(port, path, gz)
        check("Content-Encoding" not in hdrs and body.startswith(b"{"),
              "GET %s with Accept-Encoding: gzip answers plain JSON (%d %s)"
              % (path, st, hdrs.get("Content-Encoding")))
    body = b'{"inputs":[{"name":"input","shape":[1,32,32,3],"datatype":"FP32","data":[%s]}]}' % (
        b",".join([b"0"] * 3072))
    st, hdrs, data = http_get(port, "/v2/models/a/infer", gz, body)
    check(st == 200 and hdrs.get("Content-Encoding") == "gzip" and
          b'"outputs"' in gzip.decompress(data), "an inference reply is gzipped when asked")


def main():
    tmp = tempfile.mkdtemp(prefix="weft-triton-test-")
    try:
        repo = make_repo(tmp)
        p, ports, _ = start(tmp, ["--model-repository=" + repo, "--http-port={HTTP}",
                                  "--grpc-port={GRPC}", "--port=0", "--shared_memory=local"])
        aio_checks(ports["HTTP"])
        compression_checks(ports["HTTP"])
        stop(p)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        if failures:
            print("logs kept in", tmp)
            for name in sorted(os.listdir(tmp)):
                if name.endswith(".log"):
                    print("----", name)
                    print(open(os.path.join(tmp, name)).read()[-3000:])
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    print("%d failures" % len(failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
