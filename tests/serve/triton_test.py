"""weft-serve as a Triton deployment sees it (driven by test_triton.sh):
tritonclient.http.aio's calls, Triton's command-line flags,
config.pbtxt's max_batch_size, Triton's Prometheus metrics, and gRPC's
model config and metadata against HTTP's. Each
check uses a real client (tritonclient, urllib, sockets) against a real
weft-serve on free loopback ports; every process started here is stopped in
`finally`."""
import asyncio
import concurrent.futures
import gzip
import json
import os
import queue
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

import numpy as np
import tritonclient.grpc as tg
import tritonclient.grpc.aio as tgaio
import tritonclient.http as th
import tritonclient.http.aio as taio
from tritonclient.utils import InferenceServerException

from testlib import check, finish, free_port, stop  # tests/serve/testlib.py
from testlib import http as http_get

SERVE = os.environ["WEFT_SERVE"]
TOOL = os.environ["WEFT_SERVE_TOOL"]
procs = []


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


def refused(port):
    """True when nothing listens on the loopback port."""
    s = socket.socket()
    s.settimeout(5)
    try:
        s.connect(("127.0.0.1", port))
        return False
    except ConnectionRefusedError:
        return True
    finally:
        s.close()


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


# ---- config.pbtxt max_batch_size ----

def infer(client, mod, name, shape, **kw):
    """Infer zeros of shape on model name; the result, or the exception."""
    i = mod.InferInput("input", list(shape), "FP32")
    i.set_data_from_numpy(np.zeros(shape, np.float32))
    try:
        return client.infer(name, [i], **kw)
    except InferenceServerException as e:
        return e


def max_batch_checks(http_port, grpc_port):
    """a (max_batch_size 8) takes 8 samples and refuses 9 with Triton's
    words, over HTTP and gRPC; u (max_batch_size 0) is unbatched: config
    0, shapes without the batch dimension, [1,32,32,3] refused."""
    clients = ((th, th.InferenceServerClient("127.0.0.1:%d" % http_port)),
               (tg, tg.InferenceServerClient("127.0.0.1:%d" % grpc_port)))
    for mod, c in clients:
        api = mod.__name__.split(".")[-1]
        ok = infer(c, mod, "a", (8, 32, 32, 3))
        check(not isinstance(ok, Exception) and ok.as_numpy("probabilities").shape == (8, 10),
              "%s: a batch of 8 on a model with max_batch_size 8 (%s)" % (api, ok))
        e = infer(c, mod, "a", (9, 32, 32, 3))
        check(isinstance(e, InferenceServerException) and
              e.status() in ("400", "StatusCode.INVALID_ARGUMENT") and
              "batch-size must be <= 8" in e.message() and "'a'" in e.message(),
              "%s: a batch of 9 is refused naming the limit (%s)" % (api, e))
        cfg = c.get_model_config("u")
        cfg = cfg.get("config", cfg) if isinstance(cfg, dict) else cfg.config
        mb = cfg["max_batch_size"] if isinstance(cfg, dict) else cfg.max_batch_size
        md = c.get_model_metadata("u")
        shape = md["inputs"][0]["shape"] if isinstance(md, dict) else list(md.inputs[0].shape)
        check(mb == 0 and [int(d) for d in shape] == [32, 32, 3],
              "%s: max_batch_size 0 is unbatched in config and metadata (%s, %s)" % (api, mb, shape))
        r = infer(c, mod, "u", (32, 32, 3))
        check(not isinstance(r, Exception) and r.as_numpy("probabilities").shape == (10,),
              "%s: an unbatched model takes [32,32,3] and answers [10] (%s)" % (api, r))
        e = infer(c, mod, "u", (1, 32, 32, 3))
        check(isinstance(e, InferenceServerException) and "[32,32,3]" in e.message() and
              "[1,32,32,3]" in e.message(),
              "%s: [1,32,32,3] on an unbatched model is refused naming both shapes (%s)" % (api, e))
        c.close()


# ---- gRPC ModelStreamInfer ----

def stream_input(mod, x):
    i = mod.InferInput("input", list(x.shape), "FP32")
    i.set_data_from_numpy(x)
    return i


async def aio_stream(port, requests):
    """(result, error) pairs of tritonclient.grpc.aio's stream_infer over
    requests [(model, x, id)]."""
    c = tgaio.InferenceServerClient("127.0.0.1:%d" % port)

    async def gen():
        for name, x, rid in requests:
            yield {"model_name": name, "inputs": [stream_input(tgaio, x)], "request_id": rid}

    out = []
    try:
        async for pair in c.stream_infer(gen()):
            out.append(pair)
            if len(out) == len(requests):
                break
    finally:
        await c.close()
    return out


def stream_checks(grpc_port):
    """tritonclient.grpc's start_stream / async_stream_infer / stop_stream
    and the aio client's stream_infer: each request answered on the stream
    with what a unary infer answers; a failing request is answered with its
    error and the stream goes on."""
    rng = np.random.default_rng(7)
    xs = [rng.random((n, 32, 32, 3), np.float32) for n in (1, 2, 3)]
    c = tg.InferenceServerClient("127.0.0.1:%d" % grpc_port)
    want = [c.infer("a", [stream_input(tg, x)]).as_numpy("probabilities") for x in xs]
    got = queue.Queue()
    c.start_stream(callback=lambda result, error: got.put((result, error)))
    sent = [("a", xs[0], "r0"), ("nope", xs[0], "r1"), ("a", xs[1], "r2"),
            ("a", np.zeros((9, 32, 32, 3), np.float32), "r3"), ("a", xs[2], "r4")]
    for name, x, rid in sent:
        c.async_stream_infer(name, [stream_input(tg, x)], request_id=rid)
    answers = []
    for _ in sent:
        try:
            answers.append(got.get(timeout=60))
        except queue.Empty:
            break
    c.stop_stream()
    check(len(answers) == len(sent), "gRPC stream: %d requests get %d answers"
          % (len(sent), len(answers)))
    ok = {r.get_response().id: r.as_numpy("probabilities") for r, e in answers if e is None}
    errors = [str(e) for r, e in answers if e is not None]
    check(sorted(ok) == ["r0", "r2", "r4"] and
          all(np.allclose(ok[rid], w, atol=1e-6) for rid, w in zip(("r0", "r2", "r4"), want)),
          "gRPC stream: each request answered as a unary infer answers it (%s)" % sorted(ok))
    check(len(errors) == 2 and any("nope" in e for e in errors) and
          any("batch-size must be <= 8" in e for e in errors),
          "gRPC stream: failed requests answered with their errors, the stream goes on (%s)"
          % errors)
    c.close()
    out = asyncio.run(aio_stream(grpc_port, [("a", xs[k], "a%d" % k) for k in range(3)]))
    res = {r.get_response().id: r.as_numpy("probabilities") for r, e in out if e is None}
    check(sorted(res) == ["a0", "a1", "a2"] and
          all(np.allclose(res["a%d" % k], want[k], atol=1e-6) for k in range(3)),
          "tritonclient.grpc.aio stream_infer: three requests, three answers (%s)" % out)


# ---- config.pbtxt inputs, outputs, labels; load_model(config=...) ----

def error_of(call):
    try:
        call()
        return None
    except InferenceServerException as e:
        return e.message()


def config_checks(tmp):
    """config.pbtxt's input and output names are checked against the model
    (a mismatch fails the load, naming the field), label_filename gives the
    classification labels, preferred_batch_size is kept; load_model with a
    config applies it (max_batch_size, version policy) over HTTP and gRPC
    alike, and refuses a bad one the same way on both, the model serving on."""
    repo = os.path.join(tmp, "configrepo")
    for name in ("lab", "badin", "badout", "over"):
        for v in (1, 2):
            model(os.path.join(repo, name, str(v), "model.h5"), v)
    conf = {"lab": 'max_batch_size: 8\ninput [{ name: "input" }]\n'
                   'output [{ name: "probabilities" label_filename: "labels.txt" }]\n'
                   'dynamic_batching { preferred_batch_size: [2, 4] }\n',
            "badin": 'input [{ name: "pixels" }]\n',
            "badout": 'output [{ name: "scores" }]\n',
            "over": "max_batch_size: 8\n"}
    for name, text in conf.items():
        with open(os.path.join(repo, name, "config.pbtxt"), "w") as f:
            f.write(text)
    labels = ["label-%d" % i for i in range(10)]
    with open(os.path.join(repo, "lab", "labels.txt"), "w") as f:
        f.write("\n".join(labels) + "\n")
    p, ports, _ = start(tmp, ["--model-repository=" + repo, "--http-port={HTTP}",
                              "--grpc-port={GRPC}", "--port=0", "--model-control-mode=explicit",
                              "--load-model=lab", "--load-model=over"])
    h = th.InferenceServerClient("127.0.0.1:%d" % ports["HTTP"])
    g = tg.InferenceServerClient("127.0.0.1:%d" % ports["GRPC"])
    for name, field in (("badin", 'input name "pixels"'), ("badout", 'name "scores"')):
        for api, c in (("HTTP", h), ("gRPC", g)):
            err = error_of(lambda: c.load_model(name))
            check(err is not None and field in err,
                  "%s: config.pbtxt %s fails the load naming it (%s)" % (api, field, err))
    hc = h.get_model_config("lab")
    gc = g.get_model_config("lab", as_json=True)["config"]
    check(hc["dynamic_batching"]["preferred_batch_size"] == [2, 4] and
          [int(x) for x in gc["dynamic_batching"]["preferred_batch_size"]] == [2, 4],
          "preferred_batch_size kept and reported over HTTP and gRPC (%s)" % gc["dynamic_batching"])
    check(hc["output"][0]["label_filename"] == "labels.txt" and
          gc["output"][0]["label_filename"] == "labels.txt",
          "label_filename reported over HTTP and gRPC")
    x = np.random.default_rng(3).random((1, 32, 32, 3), np.float32)
    for api, c, m in (("HTTP", h, th), ("gRPC", g, tg)):
        out = m.InferRequestedOutput("probabilities", class_count=3)
        r = c.infer("lab", [stream_input(m, x)], outputs=[out])
        got = [e.decode().split(":", 2)[2] for e in r.as_numpy("probabilities").reshape(-1)]
        check(len(got) == 3 and all(l in labels for l in got),
              "%s: classification labels come from label_filename (%s)" % (api, got))
    # load_model(config=...): applied over HTTP, then over gRPC
    for api, c, mb in (("HTTP", h, 4), ("gRPC", g, 2)):
        cfg = json.dumps({"max_batch_size": mb,
                          "version_policy": {"specific": {"versions": [1]}}})
        err = error_of(lambda: c.load_model("over", config=cfg))
        hc, gc = h.get_model_config("over"), g.get_model_config("over", as_json=True)["config"]
        e = infer(c, tg if api == "gRPC" else th, "over", (mb + 1, 32, 32, 3))
        check(err is None and hc["max_batch_size"] == mb and int(gc["max_batch_size"]) == mb and
              isinstance(e, InferenceServerException) and
              "batch-size must be <= %d" % mb in e.message(),
              "%s: load_model with a config applies its max_batch_size %d (%s, %s)"
              % (api, mb, err, e))
        md = h.get_model_metadata("over")
        check(md["versions"] == ["1"] and "specific" in hc["version_policy"],
              "%s: load_model with a config applies its version policy (%s)" % (api, md["versions"]))
    bad = json.dumps({"max_batch_size": 8, "input": [{"name": "pixels"}]})
    errs = [error_of(lambda: c.load_model("over", config=bad)) for c in (h, g)]
    ok = infer(h, th, "over", (2, 32, 32, 3))
    check(errs[0] is not None and errs[0] == errs[1] and 'input name "pixels"' in errs[0] and
          not isinstance(ok, Exception) and h.get_model_config("over")["max_batch_size"] == 2,
          "a bad load config is refused alike over HTTP and gRPC, the model serving on (%s)"
          % errs)
    errs = [error_of(lambda: c.load_model("over", files={"file:1/model.h5": b"x"}))
            for c in (h, g)]
    check(errs[0] is not None and errs[0] == errs[1] and "not supported" in errs[0],
          "load_model with files is refused alike over HTTP and gRPC (%s)" % errs)
    h.close()
    g.close()
    stop(p)


# ---- KServe gRPC errors in Triton's words ----

def kserve_errors_checks(http_port, grpc_port):
    """An unknown model or version gets the same message over gRPC as over
    HTTP, Triton's ("Request for unknown model: ..."), not TF Serving's."""
    h = th.InferenceServerClient("127.0.0.1:%d" % http_port)
    g = tg.InferenceServerClient("127.0.0.1:%d" % grpc_port)
    x = np.zeros((1, 32, 32, 3), np.float32)
    calls = {
        "infer of an unknown model": lambda c, m: c.infer("nope", [stream_input(m, x)]),
        "infer of an unknown version": lambda c, m: c.infer("a", [stream_input(m, x)],
                                                             model_version="9"),
        "metadata of an unknown model": lambda c, m: c.get_model_metadata("nope"),
        "config of an unknown model": lambda c, m: c.get_model_config("nope"),
        "statistics of an unknown version": lambda c, m: c.get_inference_statistics("a", "9"),
    }
    for what, call in calls.items():
        msgs = []
        for c, m in ((h, th), (g, tg)):
            try:
                call(c, m)
                msgs.append(None)
            except InferenceServerException as e:
                msgs.append(e.message())
        check(msgs[0] is not None and msgs[0] == msgs[1] and
              msgs[1].startswith("Request for unknown model: "),
              "%s: gRPC's message is HTTP's, in Triton's words (%s)" % (what, msgs))
    h.close()
    g.close()


# ---- trace and log settings ----

def log_lines_with(log, text, want, timeout=30):
    """Lines of the server's log holding text, once there are `want` of them
    (or the timeout passed)."""
    deadline = time.time() + timeout
    while True:
        lines = [l for l in open(log, errors="replace") if text in l]
        if len(lines) >= want or time.time() > deadline:
            return lines
        time.sleep(0.05)


def garbage_to(port):
    """Bytes that are not HTTP/2 to the gRPC port: the server closes the
    connection, saying why in a debug line."""
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(b"GET / HTTP/1.1\r\n\r\n" * 4)
    s.settimeout(30)
    try:
        while s.recv(4096):
            pass
    except OSError:
        pass
    s.close()


def settings_checks(http_port, grpc_port, log):
    """Triton's trace and log settings over HTTP and gRPC: one store
    (what one protocol sets the other reports), a model's trace settings
    over the server's, all-or-nothing updates, the log level taking
    effect."""
    h = th.InferenceServerClient("127.0.0.1:%d" % http_port)
    g = tg.InferenceServerClient("127.0.0.1:%d" % grpc_port)
    gjson = lambda r: {k: v.get("value", []) for k, v in r["settings"].items()}
    try:
        t = h.get_trace_settings()
    except InferenceServerException as e:
        t = {"error": e.message()}
    check(t.get("trace_level") == ["OFF"] and t.get("trace_rate") == "1000" and
          t.get("trace_count") == "-1", "HTTP trace settings: Triton's defaults (%s)" % t)
    if "error" in t:
        return
    t = h.update_trace_settings(settings={"trace_rate": "5", "trace_level": ["TIMESTAMPS"]})
    gt = gjson(g.get_trace_settings(as_json=True))
    check(t.get("trace_rate") == "5" and gt.get("trace_rate") == ["5"] and
          gt.get("trace_level") == ["TIMESTAMPS"],
          "a trace setting updated over HTTP is reported over gRPC (%s)" % gt)
    gt = gjson(g.update_trace_settings(model_name="a", settings={"trace_count": "10"},
                                       as_json=True))
    ht = h.get_trace_settings(model_name="a")
    check(gt.get("trace_count") == ["10"] and ht.get("trace_count") == "10" and
          ht.get("trace_rate") == "5" and h.get_trace_settings().get("trace_count") == "-1",
          "a model's trace setting over gRPC: the model's own, the rest the server's (%s)" % ht)
    ht = h.update_trace_settings(model_name="a", settings={"trace_count": None})
    check(ht.get("trace_count") == "-1", "a model's trace setting cleared follows the server's")
    for api, call in (("HTTP", lambda: h.update_trace_settings(
                          settings={"trace_rate": "7", "trace_level": ["LOUD"]})),
                      ("gRPC", lambda: g.update_trace_settings(
                          settings={"trace_rate": "7", "trace_level": ["LOUD"]}))):
        try:
            call()
            err = None
        except InferenceServerException as e:
            err = e.message()
        check(err is not None and "trace_level" in err and
              h.get_trace_settings().get("trace_rate") == "5",
              "%s: a bad trace setting is refused naming it, nothing applied (%s)" % (api, err))
    for api, call in (("HTTP", lambda: h.get_trace_settings(model_name="nope")),
                      ("gRPC", lambda: g.get_trace_settings(model_name="nope"))):
        try:
            call()
            err = None
        except InferenceServerException as e:
            err = e.message()
        check(err is not None and "nope" in err,
              "%s: trace settings of an unknown model: an error (%s)" % (api, err))
    l = h.get_log_settings()
    check(l.get("log_info") is True and l.get("log_verbose_level") == 0 and
          l.get("log_format") == "default", "HTTP log settings as the flags set them (%s)" % l)
    garbage_to(grpc_port)  # at level 0: no debug line
    gl = g.update_log_settings(settings={"log_verbose_level": 1}, as_json=True)["settings"]
    check(gl["log_verbose_level"].get("uint32_param") == 1 and
          h.get_log_settings().get("log_verbose_level") == 1,
          "log_verbose_level set over gRPC is reported over HTTP (%s)" % gl["log_verbose_level"])
    garbage_to(grpc_port)
    lines = log_lines_with(log, "debug:", 1)
    check(len(lines) == 1 and "closing a connection" in lines[0],
          "log_verbose_level 1 turns debug lines on, 0 had them off (%s)" % lines)
    try:
        h.update_log_settings(settings={"log_info": "yes"})
        err = None
    except InferenceServerException as e:
        err = e.message()
    check(err is not None and "log_info" in err, "a log setting of the wrong type is refused (%s)"
          % err)
    h.update_log_settings(settings={"log_verbose_level": 0})
    h.close()
    g.close()


# ---- Prometheus: Triton's pending, CPU and memory gauges, failed loads ----

def metric(port, name):
    """{labels: value} of one metric in /metrics ("" for no labels)."""
    text = http_get(port, "/metrics")[2].decode()
    out = {}
    for m in re.finditer(r"^%s(\{[^}]*\})? (\S+)$" % re.escape(name), text, re.M):
        out[m.group(1) or ""] = float(m.group(2))
    return out


def metrics_checks(tmp):
    """A slow model behind one batch thread: nv_inference_pending_request_count
    shows the requests waiting while a burst runs, 0 after; a model file that
    fails to load counts in weft_serve_model_load_failures_total; nv_cpu_*
    describe the host."""
    repo = os.path.join(tmp, "metricsrepo")
    path = os.path.join(repo, "slow", "1", "model.h5")
    os.makedirs(os.path.dirname(path))
    subprocess.check_call([TOOL, "model", "mobilenetv2", path, "5", "160"],
                          stdout=subprocess.DEVNULL)
    with open(os.path.join(repo, "slow", "config.pbtxt"), "w") as f:
        f.write("max_batch_size: 4\n")
    os.makedirs(os.path.join(repo, "bad", "1"))
    with open(os.path.join(repo, "bad", "1", "model.h5"), "w") as f:
        f.write("not a model")
    p, ports, _ = start(tmp, ["--model-repository=" + repo, "--http-port={HTTP}",
                              "--grpc-port=0", "--port=0", "--model-control-mode=explicit",
                              "--load-model=slow", "--num_batch_threads=1", "--threads=1"])
    port = ports["HTTP"]
    key = '{model="slow",version="1"}'
    check(metric(port, "nv_inference_pending_request_count").get(key) == 0,
          "nv_inference_pending_request_count of an idle model is 0")
    # 48 requests at once (binary tensors), one thread each
    raw = np.zeros((4, 160, 160, 3), np.float32).tobytes()
    head = json.dumps({"inputs": [{"name": "input", "shape": [4, 160, 160, 3],
                                   "datatype": "FP32",
                                   "parameters": {"binary_data_size": len(raw)}}]}).encode()
    hdrs = {"Inference-Header-Content-Length": str(len(head)),
            "Content-Type": "application/octet-stream"}
    with concurrent.futures.ThreadPoolExecutor(48) as pool:
        burst = [pool.submit(http_get, port, "/v2/models/slow/infer", hdrs, head + raw)
                 for _ in range(48)]
        seen = 0
        while seen == 0 and not all(f.done() for f in burst):
            seen = metric(port, "nv_inference_pending_request_count").get(key, 0)
        codes = [f.result()[0] for f in burst]
    check(seen > 0 and codes == [200] * 48,
          "nv_inference_pending_request_count counts the requests waiting (%d)" % seen)
    check(metric(port, "nv_inference_pending_request_count").get(key) == 0,
          "nv_inference_pending_request_count is 0 again once they ran")
    before = metric(port, "weft_serve_model_load_failures_total").get("")
    st = http_get(port, "/v2/repository/models/bad/load", data=b"{}")[0]
    after = metric(port, "weft_serve_model_load_failures_total").get("")
    check(before == 0 and st == 400 and after == 1,
          "weft_serve_model_load_failures_total counts a failed load (%s -> %s)" % (before, after))
    util = metric(port, "nv_cpu_utilization").get("")
    total = metric(port, "nv_cpu_memory_total_bytes").get("")
    used = metric(port, "nv_cpu_memory_used_bytes").get("")
    mem_kb = int(re.search(r"MemTotal:\s+(\d+)", open("/proc/meminfo").read()).group(1))
    check(util is not None and 0 <= util <= 1, "nv_cpu_utilization in [0, 1] (%s)" % util)
    check(total == mem_kb * 1024 and used is not None and 0 < used < total,
          "nv_cpu_memory_total_bytes is MemTotal, used below it (%s, %s)" % (total, used))
    stop(p)


# ---- gRPC's model config and metadata say what HTTP's say ----

def grpc_agrees_checks(tmp):
    """Version policies all, specific and latest N: gRPC's version_policy
    and metadata versions equal HTTP's (and say the policy); so do the
    server metadata's extensions."""
    repo = os.path.join(tmp, "policyrepo")
    policies = {"every": ("all {}", (1, 2)), "some": ("specific { versions: [1, 3] }", (1, 2, 3)),
                "two": ("latest { num_versions: 2 }", (1, 2, 3))}
    for name, (policy, versions) in policies.items():
        for v in versions:
            model(os.path.join(repo, name, str(v), "model.h5"), v)
        with open(os.path.join(repo, name, "config.pbtxt"), "w") as f:
            f.write("version_policy: { %s }\n" % policy)
    p, ports, _ = start(tmp, ["--model-repository=" + repo, "--http-port={HTTP}",
                              "--grpc-port={GRPC}", "--port=0"])
    h = th.InferenceServerClient("127.0.0.1:%d" % ports["HTTP"])
    g = tg.InferenceServerClient("127.0.0.1:%d" % ports["GRPC"])
    deadline = time.time() + 60  # ready means a version of each: wait for all six
    while time.time() < deadline and sum(e.get("state") == "READY"
                                         for e in h.get_model_repository_index()) < 6:
        time.sleep(0.1)
    want = {"every": {"all": {}}, "some": {"specific": {"versions": ["1", "3"]}},
            "two": {"latest": {"num_versions": 2}}}
    for name in policies:
        hp = h.get_model_config(name)["version_policy"]
        gp = g.get_model_config(name, as_json=True)["config"]["version_policy"]
        norm = lambda d: {k: {kk: [str(x) for x in vv] if isinstance(vv, list) else vv
                              for kk, vv in v.items()} for k, v in d.items()}
        check(norm(gp) == norm(hp) == want[name],
              "gRPC model config version_policy of %s is HTTP's (%s, %s)" % (name, gp, hp))
        hv = h.get_model_metadata(name)["versions"]
        gv = list(g.get_model_metadata(name).versions)
        check(gv == hv and len(gv) == 2, "gRPC model metadata versions of %s are HTTP's (%s, %s)"
              % (name, gv, hv))
    def plain(x):  # protobuf's JSON (int64 as strings, defaults left out) as HTTP's
        if isinstance(x, dict):
            return {k: plain(v) for k, v in x.items() if v not in (False, "", [])}
        if isinstance(x, list):
            return [plain(v) for v in x]
        return int(x) if isinstance(x, str) and x.lstrip("-").isdigit() else x
    hc, gc = h.get_model_config("some"), g.get_model_config("some", as_json=True)["config"]
    check(plain(hc) == plain(gc), "gRPC model config is HTTP's (%s, %s)" % (plain(gc), plain(hc)))
    hx = h.get_server_metadata()["extensions"]
    gx = list(g.get_server_metadata().extensions)
    check(gx == hx and "statistics" in gx, "gRPC server metadata extensions are HTTP's (%s)" % gx)
    h.close()
    g.close()
    stop(p)


# ---- Triton's command-line flags ----

def allow_flags_checks(tmp, repo):
    """--allow-grpc=false and --allow-metrics=false close those ports; the
    HTTP port's /metrics goes too. The space form (--allow-grpc false) too."""
    p, ports, _ = start(tmp, ["--model-repository=" + repo, "--http-port={HTTP}",
                              "--grpc-port={GRPC}", "--port={TFS}", "--metrics-port={METRICS}",
                              "--allow-grpc=false", "--allow-metrics", "false"])
    check(refused(ports["GRPC"]) and refused(ports["TFS"]),
          "--allow-grpc=false: neither gRPC port listens")
    check(refused(ports["METRICS"]), "--allow-metrics false: the metrics port does not listen")
    check(http_get(ports["HTTP"], "/metrics")[0] == 404,
          "--allow-metrics false: /metrics on the HTTP port is 404")
    stop(p)
    p, ports, _ = start(tmp, ["--model-repository=" + repo, "--http-port={HTTP}",
                              "--grpc-port={GRPC}", "--port=0", "--allow-http=false"],
                        ready="grpc")
    check(refused(ports["HTTP"]), "--allow-http=false: the HTTP port does not listen")
    stop(p)


def address_checks(tmp, repo):
    """--http-address, --grpc-address and --metrics-address pick each
    port's address; a bad one is refused, naming the flag."""
    p, ports, _ = start(tmp, ["--model-repository=" + repo, "--http-port={HTTP}",
                              "--grpc-port={GRPC}", "--port=0", "--metrics-port={METRICS}",
                              "--bind_address=0.0.0.0", "--http-address=127.0.0.1",
                              "--grpc-address=127.0.0.1", "--metrics-address=127.0.0.2"])
    listening = open("/proc/net/tcp").read()
    local = lambda ip, port: ("%s:%04X" % (ip, port)) in listening
    check(local("0100007F", ports["HTTP"]) and local("0100007F", ports["GRPC"]) and
          local("0200007F", ports["METRICS"]),
          "--http-address, --grpc-address, --metrics-address: each port on its address")
    stop(p)
    r = subprocess.run([SERVE, "--model-repository=" + repo, "--grpc-address=localhost:1"],
                       capture_output=True, text=True)
    check(r.returncode != 0 and "--grpc-address" in r.stderr and "localhost:1" in r.stderr,
          "a bad --grpc-address is named (%s)" % r.stderr.strip())


def log_flags_checks(tmp, repo):
    """--log-file receives the log; --log-info=false leaves warnings and
    errors; --log-verbose=1 adds debug lines."""
    broken = os.path.join(tmp, "logrepo")
    shutil.copytree(os.path.join(repo, "a"), os.path.join(broken, "a"))
    os.makedirs(os.path.join(broken, "bad", "1"))
    with open(os.path.join(broken, "bad", "1", "model.h5"), "w") as f:
        f.write("not a model")
    quiet = os.path.join(tmp, "quiet.log")
    p, ports, out = start(tmp, ["--model-repository=" + broken, "--http-port={HTTP}",
                                "--grpc-port=0", "--port=0", "--log-file=" + quiet,
                                "--log-info=false", "--model-control-mode=explicit",
                                "--load-model=a"])
    st = http_get(ports["HTTP"], "/v2/repository/models/bad/load", data=b"{}")[0]
    stop(p)
    text = open(quiet).read()
    check(st == 400 and "error:" in text and "is available" not in text and
          not open(out).read().strip(),
          "--log-file --log-info=false: errors in the file, no info lines, nothing on stderr")
    loud = os.path.join(tmp, "loud.log")
    p, ports, _ = start(tmp, ["--model-repository=" + repo, "--http-port={HTTP}",
                              "--grpc-port={GRPC}", "--port=0", "--log-file=" + loud,
                              "--log-verbose=1"])
    s = socket.create_connection(("127.0.0.1", ports["GRPC"]), timeout=30)
    s.sendall(b"not HTTP/2 at all\r\n\r\n" * 4)
    while s.recv(4096):  # the server closes the connection (a debug line says why)
        pass
    s.close()
    stop(p)
    text = open(loud).read()
    check("is available" in text and "debug:" in text, "--log-verbose=1: info and debug lines")
    r = subprocess.run([SERVE, "--model-repository=" + repo, "--log-file=/nonexistent/x.log"],
                       capture_output=True, text=True)
    check(r.returncode != 0 and "--log-file" in r.stderr and "/nonexistent/x.log" in r.stderr,
          "an unwritable --log-file is named (%s)" % r.stderr.strip())


def exit_timeout_checks(tmp, repo):
    """--exit-timeout-secs bounds the drain: a request whose body never
    comes holds a default server for its 60 s body deadline, this one 1 s."""
    p, ports, log = start(tmp, ["--model-repository=" + repo, "--http-port={HTTP}",
                                "--grpc-port=0", "--port=0", "--exit-timeout-secs=1"])
    s = socket.create_connection(("127.0.0.1", ports["HTTP"]), timeout=30)
    s.sendall(b"POST /v2/models/a/infer HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n"
              b"Expect: 100-continue\r\n\r\n")
    check(s.recv(64).startswith(b"HTTP/1.1 100"), "the server holds a request waiting for its body")
    t0 = time.time()
    p.send_signal(signal.SIGTERM)
    rc = p.wait(timeout=30)
    took = time.time() - t0
    s.close()
    check(rc == 0 and took < 10 and "still in flight after 1s" in open(log).read(),
          "--exit-timeout-secs=1: exits %.1fs after SIGTERM with a request in flight" % took)


def load_threads_checks(tmp, repo):
    """--model-load-thread-count=2 loads two models at once: both start
    loading before either is available (one at a time by default)."""
    def order(extra):
        p, ports, log = start(tmp, ["--model-repository=" + repo, "--http-port={HTTP}",
                                    "--grpc-port=0", "--port=0"] + extra)
        stop(p)
        return [l for l in open(log).read().splitlines()
                if re.search(r"loading model|is available", l)]
    seq = order([])
    check(len(seq) == 4 and "loading" in seq[0] and "available" in seq[1],
          "by default models load one after another")
    # the second load thread may start only after the first load ended on a
    # loaded machine: overlap in one of three starts shows two threads
    for _ in range(3):
        seq = order(["--model-load-thread-count=2"])
        if len(seq) == 4 and "loading" in seq[0] and "loading" in seq[1]:
            break
    check(len(seq) == 4 and "loading" in seq[0] and "loading" in seq[1],
          "--model-load-thread-count=2: two models load at once (%s)" % seq[:2])
    r = subprocess.run([SERVE, "--model-repository=" + repo, "--model-load-thread-count=0"],
                       capture_output=True, text=True)
    check(r.returncode != 0 and "--model-load-thread-count" in r.stderr,
          "--model-load-thread-count=0 is refused, naming the flag")


def help_checks():
    out = subprocess.run([SERVE, "--help"], capture_output=True, text=True).stdout
    for flag in ("--allow-grpc", "--allow-http", "--allow-metrics", "--exit-timeout-secs",
                 "--http-address", "--grpc-address", "--metrics-address", "--log-file",
                 "--model-load-thread-count", "--log-verbose", "--log-info", "--log-warning",
                 "--log-error"):
        check(flag in out, "--help documents %s" % flag)


def main():
    tmp = tempfile.mkdtemp(prefix="weft-triton-test-")
    try:
        repo = make_repo(tmp)
        p, ports, log = start(tmp, ["--model-repository=" + repo, "--http-port={HTTP}",
                                    "--grpc-port={GRPC}", "--port=0", "--shared_memory=local"])
        aio_checks(ports["HTTP"])
        compression_checks(ports["HTTP"])
        max_batch_checks(ports["HTTP"], ports["GRPC"])
        stream_checks(ports["GRPC"])
        settings_checks(ports["HTTP"], ports["GRPC"], log)
        kserve_errors_checks(ports["HTTP"], ports["GRPC"])
        stop(p)
        metrics_checks(tmp)
        grpc_agrees_checks(tmp)
        config_checks(tmp)
        allow_flags_checks(tmp, repo)
        address_checks(tmp, repo)
        log_flags_checks(tmp, repo)
        exit_timeout_checks(tmp, repo)
        load_threads_checks(tmp, repo)
        help_checks()
    finally:
        status = finish(procs, tmp)
    return status


if __name__ == "__main__":
    sys.exit(main())
