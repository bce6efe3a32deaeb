"""End-to-end checks of weft-serve (driven by test_serve.sh under ctest).

Starts real weft-serve processes on free loopback ports with models written by
serve_tool, checks every endpoint and error, a hot swap under weft-bench load,
and a SIGTERM drain. Every process started here is stopped in `finally`."""
import base64
import http.client
import json
import os
import re
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import zlib

from testlib import check, finish, free_port  # tests/serve/testlib.py

SERVE = os.environ["WEFT_SERVE"]
TOOL = os.environ["WEFT_SERVE_TOOL"]
BENCH = os.environ.get("WEFT_BENCH", "")
procs = []
skipped = []  # checks that did not run: the script then exits 77 (a skip), never 0


def start_server(base, *extra):
    """weft-serve on a free HTTP port (gRPC off: these checks speak HTTP),
    tried again on other ports when it exits at once: another test may take
    a port between free_port and bind. An extra argument "{mport}" becomes
    a second free port. Returns (process, port, that second port)."""
    for _ in range(3):
        port, mport = free_port(), free_port()
        log = open(os.path.join(os.path.dirname(base), "serve-%d.log" % port), "w")
        args = [a.replace("{mport}", str(mport)) for a in extra]
        p = subprocess.Popen([SERVE, "--model_name", "m", "--model_base_path", base,
                              "--rest_api_port", str(port), "--bind_address", "127.0.0.1",
                              "--port", "0", "--grpc_port", "0", *args],
                             stdout=log, stderr=subprocess.STDOUT)
        procs.append(p)
        deadline = time.time() + 60
        while time.time() < deadline and p.poll() is None:
            try:
                if request(port, "GET", "/v2/health/ready")[0] == 200:
                    return p, port, mport
            except OSError:
                pass
            time.sleep(0.1)
        if p.poll() is None:
            break
    raise RuntimeError("weft-serve did not become ready; see " + log.name)


def request(port, method, path, body=None, headers=None, timeout=60):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        if isinstance(body, str):
            body = body.encode()
        c.request(method, path, body=body, headers=headers or {})
        r = c.getresponse()
        return r.status, r.read(), dict(r.getheaders())
    finally:
        c.close()


def jreq(port, method, path, body=None, headers=None):
    code, data, hdrs = request(port, method, path, body, headers)
    try:
        doc = json.loads(data)
    except ValueError:
        doc = None
    return code, doc


def error_is(port, method, path, body, code, words, headers=None):
    got, doc = jreq(port, method, path, body, headers)
    msg = doc.get("error", "") if isinstance(doc, dict) else ""
    check(got == code and all(w in msg for w in words),
          "%s %s -> %d %r (got %d %r)" % (method, path, code, words, got, msg[:120]))


def zeros(n):
    return [[[[0.0] * 3 for _ in range(32)] for _ in range(32)] for _ in range(n)]


# ---- PNG, written here (zlib + struct) so the server's decoder meets an
# encoder other than the libpng it uses. Samples are big-endian as PNG stores them.
ADAM7 = [(0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2), (0, 1, 1, 2)]


def png_chunk(kind, data):
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def make_png(w, h, px, color_type, depth=8, interlace=False, plte=None, trns=None):
    """px: h rows of w pixels, each a tuple of samples (one per channel)."""
    def row_bytes(pixels):
        fmt = ">%d%s" % (sum(len(p) for p in pixels), "H" if depth == 16 else "B")
        return b"\0" + struct.pack(fmt, *[s for p in pixels for s in p])  # filter: none
    raw = b""
    if interlace:
        for x0, y0, dx, dy in ADAM7:
            if x0 < w:
                raw += b"".join(row_bytes(px[y][x0::dx]) for y in range(y0, h, dy))
    else:
        raw = b"".join(row_bytes(r) for r in px)
    out = b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, depth, color_type, 0, 0,
                                                                    1 if interlace else 0))
    if plte:
        out += png_chunk(b"PLTE", b"".join(bytes(c) for c in plte))
    if trns:
        out += png_chunk(b"tRNS", trns)
    return out + png_chunk(b"IDAT", zlib.compress(raw, 6)) + png_chunk(b"IEND", b"")


def png_variants(rgb, seed):
    """The same 32x32 picture as PNGs of several colour types; returns (name, png, the RGB
    pixels it must decode to) where a type cannot hold rgb exactly (gray, palette)."""
    import random
    rnd = random.Random(seed)
    gray = [[(p[0],) for p in row] for row in rgb]
    pal = [tuple(rnd.randrange(256) for _ in range(3)) for _ in range(64)]
    idx = [[(rnd.randrange(64),) for _ in row] for row in rgb]
    as_rgb = lambda rows: [c for row in rows for p in row for c in p]
    return [
        ("RGB 8-bit", make_png(32, 32, rgb, 2), as_rgb(rgb)),
        ("RGBA 8-bit", make_png(32, 32, [[p + (rnd.randrange(256),) for p in r] for r in rgb], 6), as_rgb(rgb)),
        ("RGB 16-bit", make_png(32, 32, [[tuple(v * 257 for v in p) for p in r] for r in rgb], 2, 16),
         as_rgb(rgb)),
        ("gray+alpha 16-bit", make_png(32, 32, [[(p[0] * 257, 9) for p in r] for r in gray], 4, 16),
         as_rgb([[p * 3 for p in r] for r in gray])),
        ("gray 8-bit", make_png(32, 32, gray, 0), as_rgb([[p * 3 for p in r] for r in gray])),
        ("palette 8-bit + tRNS", make_png(32, 32, idx, 3, plte=pal, trns=bytes(range(0, 256, 8))),
         as_rgb([[pal[i[0]] for i in r] for r in idx])),
        ("interlaced RGB 8-bit", make_png(32, 32, rgb, 2, interlace=True), as_rgb(rgb)),
        ("interlaced RGBA 16-bit", make_png(32, 32, [[tuple(v * 257 for v in p) + (0,) for p in r] for r in rgb],
                                            6, 16, interlace=True), as_rgb(rgb)),
    ]


def kv2_uint8(port, pixels, n):
    hdr = json.dumps({"inputs": [{"name": "input", "shape": [n, 32, 32, 3], "datatype": "UINT8",
                                  "parameters": {"binary_data_size": n * 3072}}]}).encode()
    code, doc = jreq(port, "POST", "/v2/models/m/infer", hdr + bytes(pixels),
                     {"Inference-Header-Content-Length": str(len(hdr))})
    return doc["outputs"][0]["data"] if code == 200 else None


def max_diff(a, b):
    return max(abs(x - y) for x, y in zip(a, b)) if a and b and len(a) == len(b) else 1e9


def png_checks(port, tmp):
    import random
    rnd = random.Random(11)
    rgb = [[tuple(rnd.randrange(256) for _ in range(3)) for _ in range(32)] for _ in range(32)]
    variants = png_variants(rgb, 12)
    n = len(variants)
    # PNG is lossless: each decodes to exactly the raw UINT8 pixels it holds
    want = kv2_uint8(port, [v for _, _, px in variants for v in px], n)
    code, doc = jreq(port, "POST", "/v2/models/m/infer", json.dumps({"inputs": [{
        "name": "input", "shape": [n], "datatype": "BYTES",
        "data": [base64.b64encode(png).decode() for _, png, _ in variants]}]}))
    got = doc["outputs"][0]["data"] if code == 200 else None
    for i, (name, _, _) in enumerate(variants):
        check(code == 200 and want is not None and max_diff(got[i * 10:i * 10 + 10], want[i * 10:i * 10 + 10]) < 1e-6,
              "v2 infer BYTES PNG (%s) == UINT8 pixels" % name)
    png = variants[1][1]
    hdr = json.dumps({"inputs": [{"name": "input", "shape": [1], "datatype": "BYTES",
                                  "parameters": {"binary_data_size": len(png) + 4}}]}).encode()
    code, doc = jreq(port, "POST", "/v2/models/m/infer", hdr + struct.pack("<I", len(png)) + png,
                     {"Inference-Header-Content-Length": str(len(hdr))})
    check(code == 200 and max_diff(doc["outputs"][0]["data"], want[10:20]) < 1e-6,
          "v2 infer binary PNG (BYTES) == UINT8 pixels")
    code, doc = jreq(port, "POST", "/v1/models/m:predict",
                     json.dumps({"instances": [{"b64": base64.b64encode(variants[6][1]).decode()}]}))
    check(code == 200 and max_diff(doc["predictions"][0], want[60:70]) < 1e-6,
          "predict b64 interlaced PNG == UINT8 pixels")

    # the same picture as JPEG and as PNG (its decoded pixels, larger than the
    # input: both get resized) gives the same prediction
    raw = os.path.join(tmp, "a.rgb")
    w, h = map(int, subprocess.check_output([TOOL, "decode", JPEG, raw]).split())
    with open(raw, "rb") as f:
        data = f.read()
    rows = [[tuple(data[(y * w + x) * 3:(y * w + x) * 3 + 3]) for x in range(w)] for y in range(h)]
    with open(JPEG, "rb") as f:
        jpg = f.read()
    insts = [{"b64": base64.b64encode(b).decode()} for b in
             (jpg, make_png(w, h, rows, 2), make_png(w, h, [[p + (128,) for p in r] for r in rows], 6, interlace=True))]
    code, doc = jreq(port, "POST", "/v1/models/m:predict", json.dumps({"instances": insts}))
    preds = doc["predictions"] if code == 200 else [[], [], []]
    check(code == 200 and max_diff(preds[0], preds[1]) < 1e-6 and max_diff(preds[0], preds[2]) < 1e-6,
          "predict: the same %dx%d image as JPEG and as PNG (RGB, interlaced RGBA) agree" % (w, h))

    # corrupt, truncated and oversized PNGs: 400 with the reason
    def bad_png(body, words, what):
        error_is(port, "POST", "/v1/models/m:predict",
                 json.dumps({"instances": [{"b64": base64.b64encode(body).decode()}]}), 400, words)
    png = variants[0][1]
    bad_png(png[:len(png) // 2], ["invalid PNG", "truncated"], "truncated")
    flipped = bytearray(png)
    flipped[19] ^= 1  # the width in IHDR: its CRC no longer matches
    bad_png(bytes(flipped), ["invalid PNG", "CRC"], "bad CRC")
    idat = png.index(b"IDAT") - 4
    ln = struct.unpack(">I", png[idat:idat + 4])[0]
    junk = bytes((i * 37 + 11) & 255 for i in range(ln))
    bad_png(png[:idat] + png_chunk(b"IDAT", junk) + png_chunk(b"IEND", b""), ["invalid PNG"], "bad zlib data")
    huge = lambda w, h: (b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
                         + png_chunk(b"IDAT", zlib.compress(b"\0" * 100)) + png_chunk(b"IEND", b""))
    bad_png(huge(100000, 1), ["PNG", "100000x1", "65535 pixels per side"], "too wide")
    bad_png(huge(20000, 20000), ["PNG", "20000x20000", "67108864 pixels"], "too many pixels")
    hdr = json.dumps({"inputs": [{"name": "input", "shape": [1], "datatype": "BYTES",
                                  "parameters": {"binary_data_size": len(png) - 30 + 4}}]}).encode()
    error_is(port, "POST", "/v2/models/m/infer", hdr + struct.pack("<I", len(png) - 30) + png[:-30], 400,
             ["element 0", "invalid PNG"], {"Inference-Header-Content-Length": str(len(hdr))})


def api_checks(port, jpeg_b64):
    code, doc = jreq(port, "GET", "/v2/health/live")
    check(code == 200 and doc == {"live": True}, "live")
    code, doc = jreq(port, "GET", "/v1/models/m")
    check(code == 200 and doc["model_version_status"][0]["version"] == "1"
          and doc["model_version_status"][0]["state"] == "AVAILABLE"
          and doc["model_version_status"][0]["status"]["error_code"] == "OK", "v1 status")
    check(jreq(port, "GET", "/v1/models/m/versions/1")[0] == 200, "v1 status of version 1")
    error_is(port, "GET", "/v1/models/m/versions/9", None, 404, ["version 9"])
    error_is(port, "GET", "/v1/models/m/versions/abc", None, 400, ["version"])
    error_is(port, "GET", "/v1/models/nope", None, 404, ["nope"])
    code, doc = jreq(port, "GET", "/v1/models/m/metadata")
    sig = doc["metadata"]["signature_def"]["signature_def"]["serving_default"] if code == 200 else {}
    # the input as the model names it (its input layer, "image" in weft's zoo)
    dims = [d["size"] for d in sig.get("inputs", {}).get("image", {}).get("tensor_shape", {}).get("dim", [])]
    check(code == 200 and dims == ["-1", "32", "32", "3"] and doc["model_spec"]["version"] == "1"
          and len(doc["metadata"]["weft"]["classes"]) == 10, "v1 metadata")
    check(jreq(port, "GET", "/v1/models/m/versions/1/metadata")[0] == 200, "v1 version metadata")

    # :predict, row and columnar, numbers and JPEG
    code, doc = jreq(port, "POST", "/v1/models/m:predict", json.dumps({"instances": zeros(2)}))
    preds = doc.get("predictions", []) if code == 200 else []
    check(code == 200 and len(preds) == 2 and len(preds[0]) == 10
          and abs(sum(preds[0]) - 1) < 1e-4, "predict numbers (instances)")
    for name in ("input", "image"):  # the generic name and the model's own
        code, doc = jreq(port, "POST", "/v1/models/m/versions/1:predict",
                         json.dumps({"inputs": {name: zeros(1)}}))
        check(code == 200 and len(doc["outputs"]) == 1 and
              max(abs(a - b) for a, b in zip(doc["outputs"][0], preds[0])) < 1e-6,
              "predict columnar (input named %r) on version 1 matches" % name)
    code, doc = jreq(port, "POST", "/v1/models/m:predict",
                     json.dumps({"instances": [{"b64": jpeg_b64}, {"input": {"b64": jpeg_b64}}]}))
    check(code == 200 and len(doc["predictions"]) == 2 and doc["predictions"][0] == doc["predictions"][1],
          "predict b64 JPEG")
    code, doc = jreq(port, "POST", "/v1/models/m:classify",
                     json.dumps({"instances": [{"b64": jpeg_b64}], "top_k": 3}))
    res = doc.get("results", [[]])[0] if code == 200 else []
    check(code == 200 and len(res) == 3 and res[0][0].startswith("class")
          and res[0][1] >= res[1][1] >= res[2][1], "classify with labels")

    # errors
    error_is(port, "POST", "/v1/models/m:predict", "{bad json", 400, ["malformed JSON"])
    error_is(port, "POST", "/v1/models/m:predict", json.dumps({"instances": [[[1, 2, 3]]]}), 400, ["[32][32][3]"])
    error_is(port, "POST", "/v1/models/m:predict", json.dumps({"instances": [{"b64": "@@@"}]}), 400, ["base64"])
    error_is(port, "POST", "/v1/models/m:predict",
             json.dumps({"instances": [{"b64": base64.b64encode(b"\xff\xd8\xff\xe0 not a jpeg").decode()}]}),
             400, ["JPEG"])
    error_is(port, "POST", "/v1/models/m:predict",
             json.dumps({"instances": [{"b64": base64.b64encode(b"\x89PNG\r\n\x1a\n....").decode()}]}),
             400, ["PNG"])
    # The server answers 413 from the headers alone and closes: send just the headers.
    sk = socket.create_connection(("127.0.0.1", port), timeout=30)
    sk.sendall(b"POST /v1/models/m:predict HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % (2 << 20))
    sk.sendall(b"{" * 1000)
    resp = b""
    while b"}" not in resp.split(b"\r\n\r\n", 1)[-1]:
        chunk = sk.recv(65536)
        if not chunk:
            break
        resp += chunk
    sk.close()
    check(resp.startswith(b"HTTP/1.1 413") and b"larger than the limit" in resp, "oversized body -> 413")
    error_is(port, "POST", "/v1/models/m/versions/2:predict", json.dumps({"instances": zeros(1)}), 404, ["m, 2"])
    error_is(port, "POST", "/v1/models/other:predict", json.dumps({"instances": zeros(1)}), 404, ["other"])
    error_is(port, "GET", "/v1/models/m:predict", None, 405, ["GET"])
    error_is(port, "GET", "/v1/nothing/here", None, 404, ["Malformed"])

    # KServe v2
    code, doc = jreq(port, "GET", "/v2")
    check(code == 200 and "binary_tensor_data" in doc["extensions"], "v2 server metadata")
    code, doc = jreq(port, "GET", "/v2/models/m")
    check(code == 200 and doc["versions"] == ["1"] and doc["inputs"][0]["shape"] == [-1, 32, 32, 3]
          and doc["outputs"][0]["shape"] == [-1, 10], "v2 model metadata")
    check(jreq(port, "GET", "/v2/models/m/versions/1")[0] == 200, "v2 version metadata")
    check(jreq(port, "GET", "/v2/models/m/ready")[0] == 200, "v2 model ready")
    check(jreq(port, "GET", "/v2/models/m/versions/5/ready")[0] == 503, "v2 version 5 not ready")
    flat = [0.0] * 3072
    code, doc = jreq(port, "POST", "/v2/models/m/infer", json.dumps(
        {"id": "q1", "inputs": [{"name": "input", "shape": [1, 32, 32, 3], "datatype": "FP32", "data": flat}]}))
    out = doc["outputs"][0] if code == 200 else {}
    check(code == 200 and doc["id"] == "q1" and doc["model_version"] == "1" and out["shape"] == [1, 10]
          and max(abs(a - b) for a, b in zip(out["data"], preds[0])) < 1e-6, "v2 infer JSON matches :predict")
    hdr = json.dumps({"inputs": [{"name": "input", "shape": [1, 32, 32, 3], "datatype": "FP32",
                                  "parameters": {"binary_data_size": 3072 * 4}}],
                      "outputs": [{"name": "probabilities", "parameters": {"binary_data": True}},
                                  {"name": "logits", "parameters": {"classification": 2}}]}).encode()
    code, data, hdrs = request(port, "POST", "/v2/models/m/infer", hdr + bytes(3072 * 4),
                               {"Inference-Header-Content-Length": str(len(hdr))})
    hl = int({k.lower(): v for k, v in hdrs.items()}.get("inference-header-content-length", "0"))
    ok = code == 200 and hl > 0
    if ok:
        meta = json.loads(data[:hl])
        probs = struct.unpack("<10f", data[hl:hl + 40])
        cls = meta["outputs"][1]["data"]
        ok = (meta["outputs"][0]["parameters"]["binary_data_size"] == 40 and len(data) == hl + 40
              and max(abs(a - b) for a, b in zip(probs, preds[0])) < 1e-6
              and len(cls) == 2 and cls[0].split(":")[2].startswith("class"))
    check(ok, "v2 infer binary in/out + classification")
    with open(JPEG, "rb") as f:
        jpg = f.read()
    hdr = json.dumps({"inputs": [{"name": "input", "shape": [1], "datatype": "BYTES",
                                  "parameters": {"binary_data_size": len(jpg) + 4}}]}).encode()
    code, doc = jreq(port, "POST", "/v2/models/m/versions/1/infer", hdr + struct.pack("<I", len(jpg)) + jpg,
                     {"Inference-Header-Content-Length": str(len(hdr))})
    check(code == 200 and doc["outputs"][0]["shape"] == [1, 10], "v2 infer binary JPEG (BYTES)")
    error_is(port, "POST", "/v2/models/m/infer", json.dumps(
        {"inputs": [{"name": "input", "shape": [1, 32, 32, 3], "datatype": "INT64", "data": flat}]}), 400, ["INT64"])
    error_is(port, "POST", "/v2/models/m/infer", json.dumps(
        {"inputs": [{"name": "input", "shape": [1, 32, 32, 3], "datatype": "FP32", "data": flat[:5]}]}), 400, ["5 values"])
    error_is(port, "POST", "/v2/models/zz/infer", "{}", 404, ["zz"])
    error_is(port, "POST", "/v2/models/m/infer", "{}", 400, ["Inference-Header-Content-Length"],
             {"Inference-Header-Content-Length": "99"})

    code, data, _ = request(port, "GET", "/metrics")
    text = data.decode()
    check(code == 200 and 'weft_serve_requests_total{endpoint="v1_predict",code="200"}' in text
          and 'weft_serve_requests_total{endpoint="v1_predict",code="413"}' in text
          and "weft_serve_batch_size_bucket" in text and "weft_serve_request_duration_seconds_bucket" in text
          and 'weft_serve_model_version{model="m"} 1' in text and "weft_serve_queue_depth" in text
          and "weft_serve_queue_duration_seconds_count" in text
          and 'nv_inference_request_success{model="m",version="1"}' in text
          and 'nv_inference_exec_count{model="m",version="1"}' in text, "metrics")


def served(port, version):
    """Requests model m's version has answered, from /metrics."""
    text = request(port, "GET", "/metrics")[1].decode()
    m = re.search(r'^nv_inference_request_success\{model="m",version="%s"\} (\d+)' % version,
                  text, re.M)
    return int(m.group(1)) if m else 0


def hot_swap(port, base, images, tmp):
    if not BENCH or not os.path.exists(BENCH):
        print("SKIP hot swap under load: weft-bench not built")
        skipped.append("hot swap under load")
        return
    out = open(os.path.join(tmp, "bench.json"), "w+")
    bench = subprocess.Popen([BENCH, "--url", "http://127.0.0.1:%d" % port, "--model", "m",
                              "--protocol", "kserve", "--concurrency", "8", "--duration", "5",
                              "--images", images, "--json"], stdout=out, stderr=subprocess.STDOUT)
    procs.append(bench)
    deadline = time.time() + 30  # version 1 is serving the load before version 2 arrives
    while served(port, "1") < 20 and time.time() < deadline and bench.poll() is None:
        time.sleep(0.05)
    staging = os.path.join(base, ".staging-2")
    os.makedirs(staging)
    subprocess.check_call([TOOL, "model", "smallcnn", os.path.join(staging, "model.h5"), "2"])
    os.rename(staging, os.path.join(base, "2"))
    bench.wait(timeout=60)
    out.seek(0)
    lines = out.read().strip().splitlines()
    res = json.loads(lines[-1]) if lines and lines[-1].startswith("{") else {}
    print("bench:", lines[-1] if lines else "(no output)")
    check(res.get("ok", 0) > 50 and res.get("non_2xx", 1) == 0 and res.get("errors", 1) == 0,
          "hot swap under load: no failed request")
    check(res.get("versions", {}).get("1", 0) > 0 and res.get("versions", {}).get("2", 0) > 0,
          "hot swap under load: responses switch from version 1 to 2")
    code, doc = jreq(port, "GET", "/v1/models/m")
    check(code == 200 and doc["model_version_status"][0]["version"] == "2", "status shows version 2")
    code, doc = jreq(port, "GET", "/v1/models/m/versions/1")
    check(code == 200 and doc["model_version_status"][0]["state"] == "END",
          "version 1 is unloaded (state END, as TF Serving reports it)")
    check(jreq(port, "POST", "/v1/models/m/versions/1:predict", json.dumps({"instances": zeros(1)}))[0] == 404,
          "version 1 no longer answers")


def drain(tmp):
    """A slow request (ref backend, resnet20, 48 samples) in flight when SIGTERM arrives
    completes; readiness fails meanwhile; the process exits 0."""
    base = os.path.join(tmp, "slow")
    os.makedirs(os.path.join(base, "1"))
    subprocess.check_call([TOOL, "model", "resnet20", os.path.join(base, "1", "model.h5"), "3"])
    p, port, _ = start_server(base, "--device", "ref", "--max_batch_size", "8",
                              "--num_batch_threads", "1")
    n = 48
    hdr = json.dumps({"inputs": [{"name": "input", "shape": [n, 32, 32, 3], "datatype": "UINT8",
                                  "parameters": {"binary_data_size": n * 3072}}]}).encode()
    result = {}

    def slow():
        t = time.time()
        code, doc = jreq(port, "POST", "/v2/models/m/infer", hdr + bytes(n * 3072),
                         {"Inference-Header-Content-Length": str(len(hdr))})
        result["code"], result["doc"], result["t"] = code, doc, time.time() - t

    th = threading.Thread(target=slow)
    th.start()
    time.sleep(0.4)
    p.send_signal(signal.SIGTERM)
    time.sleep(0.1)
    try:
        ready = request(port, "GET", "/v2/health/ready")[0]
    except OSError:
        ready = -1
    th.join(timeout=120)
    rc = p.wait(timeout=60)
    print("slow request took %.2fs" % result.get("t", -1))
    # -1: the port stopped accepting, which fails a readiness probe as well
    check(ready in (503, -1) or "code" in result and result.get("t", 0) < 0.5,
          "readiness fails during drain")
    check(result.get("code") == 200 and result["doc"]["outputs"][0]["shape"] == [n, 10],
          "in-flight request completes after SIGTERM")
    check(rc == 0, "weft-serve exits 0 after draining")
    log = open(os.path.join(tmp, "serve-%d.log" % port)).read()
    check(re.search(r"; [1-9][0-9]* batch norm/dropout layers folded", log),
          "a model file that was not exported is served with its batch norms folded")


def metrics_port_checks(port, mport):
    """Triton's --metrics-port: /metrics on its own port too, nothing else there."""
    st, body, _ = request(mport, "GET", "/metrics")
    _, main_body, _ = request(port, "GET", "/metrics")
    names = lambda b: {l.split()[2] for l in b.decode().splitlines() if l.startswith("# TYPE")}
    check(st == 200 and names(body) and names(body) == names(main_body),
          "--metrics-port serves the HTTP port's metrics (%d, %d metric names)"
          % (st, len(names(body))))
    check(request(mport, "GET", "/v2/health/ready")[0] == 404,
          "--metrics-port serves nothing but /metrics")


def main():
    global JPEG
    tmp = tempfile.mkdtemp(prefix="weft-serve-test-")
    try:
        base = os.path.join(tmp, "models")
        os.makedirs(os.path.join(base, "1"))
        subprocess.check_call([TOOL, "model", "smallcnn", os.path.join(base, "1", "model.h5"), "1"])
        JPEG = os.path.join(tmp, "a.jpg")
        subprocess.check_call([TOOL, "jpeg", JPEG, "45", "37", "5"])
        images = os.path.join(tmp, "images")
        subprocess.check_call([TOOL, "images", images, "40", "9"])
        with open(JPEG, "rb") as f:
            jpeg_b64 = base64.b64encode(f.read()).decode()
        code = subprocess.run([SERVE, "--model_base_path", base, "--no_such_flag"],
                              capture_output=True, text=True)
        check(code.returncode != 0 and "--no_such_flag" in code.stderr, "bad flag is named")
        code = subprocess.run([SERVE, "--model_base_path", os.path.join(tmp, "missing")],
                              capture_output=True, text=True)
        check(code.returncode != 0 and "missing" in code.stderr, "missing base path is named")
        p, port, mport = start_server(base, "--enable_batching", "--max_batch_size", "8",
                                      "--batch_timeout_micros", "2000",
                                      "--file_system_poll_wait_seconds", "0.2",
                                      "--max_request_bytes", str(1 << 20),
                                      "--metrics-port={mport}")
        api_checks(port, jpeg_b64)
        metrics_port_checks(port, mport)
        png_checks(port, tmp)
        hot_swap(port, base, images, tmp)
        p.send_signal(signal.SIGTERM)
        check(p.wait(timeout=30) == 0, "SIGTERM on an idle server exits 0")
        drain(tmp)
    finally:
        status = finish(procs, tmp, skipped)
    return status


if __name__ == "__main__":
    sys.exit(main())
