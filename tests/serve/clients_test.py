"""weft-serve with the clients users run (driven by test_clients.sh).

Every weft-serve started here runs on free loopback ports and is stopped in
`finally`, also when a check raises."""
import base64
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

import numpy as np
import tritonclient.http as tc
from tritonclient.utils import InferenceServerException

from testlib import check, failures, free_port, stop  # tests/serve/testlib.py

SERVE = os.environ["WEFT_SERVE"]
TOOL = os.environ["WEFT_SERVE_TOOL"]
VENV = os.path.dirname(os.path.dirname(sys.executable))
procs = []


def http(port, method, path, body=None):
    req = urllib.request.Request("http://127.0.0.1:%d%s" % (port, path), method=method,
                                 data=body.encode() if isinstance(body, str) else body)
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, json.loads(r.read() or b"null")
    except urllib.error.HTTPError as e:
        data = e.read()
        try:
            return e.code, json.loads(data)
        except ValueError:
            return e.code, data


def start(tmp, args, ready_path="/v2/health/ready"):
    port = free_port()
    log = open(os.path.join(tmp, "serve-%d.log" % port), "w")
    argv = [SERVE, "--bind_address", "127.0.0.1"] + [a.replace("{PORT}", str(port)) for a in args]
    p = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
    procs.append(p)
    deadline = time.time() + 90
    while time.time() < deadline:
        try:
            if http(port, "GET", ready_path)[0] == 200:
                return p, port, log.name
        except OSError:
            pass
        if p.poll() is not None:
            break
        time.sleep(0.1)
    print(open(log.name).read())
    raise RuntimeError("weft-serve %s did not become ready" % " ".join(args))


def model(path, seed, zoo="smallcnn"):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    subprocess.check_call([TOOL, "model", zoo, path, str(seed)], stdout=subprocess.DEVNULL)


def raises(fn):
    try:
        fn()
        return False
    except InferenceServerException:
        return True


# ---- tritonclient.http: every call, against a Triton-style repository ----

def tritonclient_checks(tmp, repo, jpeg):
    p, port, log = start(tmp, ["--model-repository=" + repo, "--http-port={PORT}",
                               "--grpc-port=0", "--model-control-mode=explicit",
                               "--load-model=a", "--enable_batching", "--max_batch_size=16",
                               "--file_system_poll_wait_seconds=0"])
    c = tc.InferenceServerClient("127.0.0.1:%d" % port, concurrency=8)
    check(c.is_server_live() and c.is_server_ready(), "tritonclient: live and ready")
    md = c.get_server_metadata()
    check({"model_repository", "statistics", "model_configuration", "binary_tensor_data",
           "classification"} <= set(md["extensions"]), "tritonclient: server metadata extensions")
    check(c.is_model_ready("a") and not c.is_model_ready("b"), "tritonclient: a ready, b not loaded")
    idx = c.get_model_repository_index()
    states = {(e["name"], e.get("version")): e["state"] for e in idx}
    check(states.get(("a", "1")) == "READY" and states.get(("b", None)) == "UNAVAILABLE",
          "tritonclient: repository index %s" % idx)
    c.load_model("b")
    check(c.is_model_ready("b") and c.is_model_ready("b", "1") and c.is_model_ready("b", "2"),
          "tritonclient: load_model b serves versions 1 and 2 (policy all)")
    mm = c.get_model_metadata("b")
    check(mm["name"] == "b" and sorted(mm["versions"]) == ["1", "2"] and
          mm["inputs"][0]["shape"] == [-1, 32, 32, 3], "tritonclient: model metadata %s" % mm["versions"])
    cfg = c.get_model_config("b")
    check(cfg["max_batch_size"] == 8 and cfg["input"][0]["dims"] == [32, 32, 3] and
          cfg["version_policy"] == {"all": {}} and
          cfg["dynamic_batching"]["max_queue_delay_microseconds"] == 300 and
          cfg["instance_group"][0]["count"] >= 1, "tritonclient: model config from config.pbtxt")
    check(c.get_model_config("a", "1")["max_batch_size"] == 16, "tritonclient: model config of a version")
    x = np.random.RandomState(0).rand(3, 32, 32, 3).astype(np.float32)

    def infer_fp32(binary, name="b", version="", **kw):
        i = tc.InferInput("input", list(x.shape), "FP32")
        i.set_data_from_numpy(x, binary_data=binary)
        outs = [tc.InferRequestedOutput("probabilities", binary_data=binary),
                tc.InferRequestedOutput("logits", binary_data=binary)]
        return c.infer(name, [i], model_version=version, outputs=outs, **kw)
    rb, rj = infer_fp32(True), infer_fp32(False)
    pb = rb.as_numpy("probabilities")
    check(pb.shape == (3, 10) and np.allclose(pb.sum(1), 1, atol=1e-4), "tritonclient: infer binary FP32")
    check(np.allclose(pb, rj.as_numpy("probabilities"), atol=1e-5) and
          np.allclose(rb.as_numpy("logits"), rj.as_numpy("logits"), atol=1e-4),
          "tritonclient: infer JSON equals binary")
    r1, r2 = infer_fp32(True, version="1"), infer_fp32(True, version="2")
    check(r1.get_response()["model_version"] == "1" and r2.get_response()["model_version"] == "2" and
          not np.allclose(r1.as_numpy("logits"), r2.as_numpy("logits")),
          "tritonclient: versions 1 and 2 are different models")
    for alg in ("gzip", "deflate"):
        rc = infer_fp32(True, request_compression_algorithm=alg, response_compression_algorithm=alg)
        check(np.allclose(rc.as_numpy("probabilities"), pb, atol=1e-6),
              "tritonclient: %s request and response compression" % alg)
    # no outputs named: every output
    i = tc.InferInput("input", list(x.shape), "FP32")
    i.set_data_from_numpy(x)
    ra = c.infer("b", [i])
    check(ra.as_numpy("probabilities") is not None and ra.as_numpy("logits") is not None,
          "tritonclient: all outputs when the request names none")
    # UINT8 pixels and BYTES images
    u = (np.random.RandomState(1).rand(2, 32, 32, 3) * 255).astype(np.uint8)
    i = tc.InferInput("input", list(u.shape), "UINT8")
    i.set_data_from_numpy(u)
    ru = c.infer("a", [i])
    check(ru.as_numpy("probabilities").shape == (2, 10), "tritonclient: UINT8 pixels")
    for binary in (True, False):
        i = tc.InferInput("input", [2], "BYTES")
        # JSON carries BYTES as strings: the JPEG in base64
        img = jpeg if binary else base64.b64encode(jpeg).decode()
        i.set_data_from_numpy(np.array([img, img], dtype=np.object_), binary_data=binary)
        rj = c.infer("a", [i], outputs=[tc.InferRequestedOutput("probabilities")])
        pj = rj.as_numpy("probabilities")
        check(pj.shape == (2, 10) and np.allclose(pj[0], pj[1]),
              "tritonclient: BYTES JPEG images (binary=%s)" % binary)
    o = tc.InferRequestedOutput("probabilities", class_count=3)
    i = tc.InferInput("input", list(x.shape), "FP32")
    i.set_data_from_numpy(x)
    rc = c.infer("b", [i], outputs=[o]).as_numpy("probabilities")
    top = rc[0][0].decode().split(":")
    check(rc.shape == (3, 3) and abs(float(top[0]) - pb[0].max()) < 1e-4 and
          int(top[1]) == int(pb[0].argmax()) and top[2] == "class%d" % int(pb[0].argmax()),
          "tritonclient: classification %s" % rc[0][0])
    check(infer_fp32(True, timeout=60000000) is not None, "tritonclient: request timeout parameter")
    reqs = [c.async_infer("b", [i], request_id=str(k)) for k in range(20)]
    res = [r.get_result() for r in reqs]
    check(all(np.allclose(r.as_numpy("probabilities"), pb, atol=1e-5) for r in res) and
          [r.get_response()["id"] for r in res] == [str(k) for k in range(20)],
          "tritonclient: 20 async_infer")
    st = c.get_inference_statistics("b")
    mst = {s["version"]: s for s in st["model_stats"]}
    s2 = mst.get("2", {})
    ok = s2.get("inference_stats", {}).get("success", {})
    check(ok.get("count", 0) >= 20 and ok.get("ns", 0) > 0 and
          s2["inference_stats"]["compute_infer"]["ns"] > 0 and s2["execution_count"] >= 1 and
          s2["inference_count"] >= 60 and len(s2["batch_stats"]) >= 1,
          "tritonclient: statistics of b count the requests")
    allst = c.get_inference_statistics()
    check({s["name"] for s in allst["model_stats"]} == {"a", "b"}, "tritonclient: statistics of all models")
    check(raises(lambda: c.get_model_metadata("nope")) and raises(lambda: c.load_model("nope")),
          "tritonclient: unknown models are errors")
    c.unload_model("b")
    check(not c.is_model_ready("b") and raises(lambda: infer_fp32(True)),
          "tritonclient: unload_model b")
    idx = {(e["name"], e.get("version")): e for e in c.get_model_repository_index()}
    check(idx.get(("b", "2"), {}).get("state") == "UNAVAILABLE", "tritonclient: index shows b unloaded")
    c.load_model("b")
    check(c.is_model_ready("b"), "tritonclient: load again after unload")
    metrics = urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=30).read().decode()
    for name in ("nv_inference_request_success", "nv_inference_count", "nv_inference_exec_count",
                 "nv_inference_queue_duration_us", "nv_inference_compute_infer_duration_us",
                 "nv_inference_compute_input_duration_us", "nv_inference_compute_output_duration_us"):
        check(('%s{model="a",version="1"}' % name) in metrics, "metrics: %s for model a" % name)
    check(promtool_ok(tmp, metrics), "metrics: the exposition format is valid")
    c.close()
    return p, port


def promtool_ok(tmp, text):
    """promtool check metrics on weft's own metrics where promtool exists;
    else a check of the text format's rules done here."""
    own = "\n".join(l for l in text.splitlines() if "nv_inference" not in l) + "\n"
    if shutil.which("promtool"):
        r = subprocess.run(["promtool", "check", "metrics"], input=own.encode(),
                           capture_output=True)
        if r.returncode != 0:
            print(r.stdout.decode(), r.stderr.decode())
        return r.returncode == 0
    import re
    typed = {}
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ", 3)
            if name in typed or kind not in ("counter", "gauge", "histogram", "summary", "untyped"):
                return False
            typed[name] = kind
        elif line and not line.startswith("#"):
            m = re.match(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (\S+)$', line)
            if not m:
                print("bad line:", line)
                return False
            base = re.sub(r"_(bucket|sum|count)$", "", m.group(1))
            if m.group(1) not in typed and base not in typed:
                print("untyped sample:", line)
                return False
            float(m.group(3).replace("+Inf", "inf"))
    return all(not n.startswith("weft_") or k != "counter" or n.endswith("_total")
               for n, k in typed.items())


def perf_analyzer_checks(port):
    pa = os.path.join(VENV, "bin", "perf_analyzer")
    lib = os.path.join(VENV, "lib", "python%d.%d" % sys.version_info[:2], "site-packages",
                       "nvidia", "cuda_runtime", "lib")
    env = dict(os.environ, LD_LIBRARY_PATH=lib + ":" + os.environ.get("LD_LIBRARY_PATH", ""))
    if not os.path.exists(pa):
        check(False, "perf_analyzer is in the venv")
        return
    r = subprocess.run([pa, "-m", "a", "-u", "127.0.0.1:%d" % port, "-i", "http",
                        "--concurrency-range", "1:50:49", "--measurement-mode", "count_windows",
                        "--measurement-request-count", "60", "--stability-percentage", "10000",
                        "--max-trials", "6"],
                       env=env, capture_output=True, text=True, timeout=300)
    tail = (r.stdout + r.stderr).strip().splitlines()[-3:]
    check(r.returncode == 0 and "Concurrency: 50" in r.stdout,
          "perf_analyzer over HTTP at concurrency 1 and 50 exits 0: %s" % tail)


# ---- TF Serving: model config file, labels, edits under load, curl ----

def write_config(path, text):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


CONFIG1 = """model_config_list {
  config {
    name: 'm1'
    base_path: '%(d)s/m1'
    model_platform: 'tensorflow'
    model_version_policy { specific { versions: 1 versions: 2 } }
    version_labels { key: 'stable' value: 1 }
    version_labels { key: 'canary' value: 2 }
  }
  config { name: 'm2' base_path: '%(d)s/m2' model_platform: 'tensorflow' }
  config { name: 'm3' base_path: '%(d)s/m3' model_platform: 'tensorflow' }
}
"""
# the edit: canary moves to version 3 (added to the policy), m3 leaves, m4 arrives
CONFIG2 = """model_config_list {
  config {
    name: 'm1'
    base_path: '%(d)s/m1'
    model_platform: 'tensorflow'
    model_version_policy { specific { versions: 1 versions: 2 versions: 3 } }
    version_labels { key: 'stable' value: 1 }
    version_labels { key: 'canary' value: 3 }
  }
  config { name: 'm2' base_path: '%(d)s/m2' model_platform: 'tensorflow' }
  config { name: 'm4' base_path: '%(d)s/m4' model_platform: 'tensorflow' }
}
"""


def tf_serving_checks(tmp, d, jpeg):
    cfg = os.path.join(tmp, "models.config")
    write_config(cfg, CONFIG1 % {"d": d})
    grpc = free_port()
    # TF Serving's own command line, unchanged
    p, port, log = start(tmp, ["--port=%d" % grpc, "--rest_api_port={PORT}",
                               "--model_config_file=" + cfg,
                               "--model_config_file_poll_wait_seconds=1",
                               "--file_system_poll_wait_seconds=1"])
    code, doc = http(port, "GET", "/v1/models/m1")
    st = {s["version"]: s["state"] for s in doc.get("model_version_status", [])}
    check(code == 200 and st == {"1": "AVAILABLE", "2": "AVAILABLE"},
          "config file: m1 serves versions 1 and 2 at once (%s)" % st)
    check(http(port, "GET", "/v1/models/m1/labels/stable")[1]["model_version_status"][0]["version"] == "1",
          "config file: status by label")
    x = np.random.RandomState(2).rand(1, 32, 32, 3).tolist()
    body = json.dumps({"instances": x})
    outs = {}
    for path in ("/v1/models/m1/versions/1:predict", "/v1/models/m1/versions/2:predict",
                 "/v1/models/m1/labels/stable:predict", "/v1/models/m1/labels/canary:predict",
                 "/v1/models/m1:predict", "/v1/models/m2:predict", "/v1/models/m3:predict"):
        code, doc = http(port, "POST", path, body)
        outs[path] = doc.get("predictions") if code == 200 else None
        check(code == 200, "config file: POST %s" % path)
    check(outs["/v1/models/m1/labels/stable:predict"] == outs["/v1/models/m1/versions/1:predict"] and
          outs["/v1/models/m1/labels/canary:predict"] == outs["/v1/models/m1/versions/2:predict"] and
          outs["/v1/models/m1:predict"] == outs["/v1/models/m1/versions/2:predict"] and
          outs["/v1/models/m1/versions/1:predict"] != outs["/v1/models/m1/versions/2:predict"],
          "config file: labels address their versions; no version means the newest")
    code, doc = http(port, "POST", "/v1/models/m1/labels/nightly:predict", body)
    check(code == 404 and "nightly" in doc.get("error", ""), "config file: unknown label is 404")
    # requests copied from TF Serving's REST API documentation (curl)
    curl_checks(port, jpeg)
    # edits while requests run: zero failed requests on models that stay
    stop_flag = threading.Event()
    errors, count = [], [0]

    def load_loop(path):
        while not stop_flag.is_set():
            code, doc = http(port, "POST", path, body)
            count[0] += 1
            if code != 200:
                errors.append((path, code, doc))
    threads = [threading.Thread(target=load_loop, args=(pth,)) for pth in
               ("/v1/models/m1/labels/stable:predict", "/v1/models/m2:predict",
                "/v1/models/m1/versions/2:predict")]
    for t in threads:
        t.start()
    def served(n, seconds=60):  # wait until the load threads have sent n requests
        deadline = time.time() + seconds
        while count[0] < n and time.time() < deadline:
            time.sleep(0.05)
    try:
        served(10)  # the edit lands while requests run
        write_config(cfg, CONFIG2 % {"d": d})
        deadline = time.time() + 60
        while time.time() < deadline:
            c3 = http(port, "GET", "/v1/models/m1/labels/canary")
            c4 = http(port, "GET", "/v1/models/m4")
            if c3[0] == 200 and c3[1]["model_version_status"][0]["version"] == "3" and \
               c4[0] == 200 and c4[1]["model_version_status"][0]["state"] == "AVAILABLE":
                break
            time.sleep(0.3)
        served(max(count[0], 10) + 11)  # and go on after the swap
    finally:
        stop_flag.set()
        for t in threads:
            t.join()
    check(count[0] > 20 and not errors,
          "config file edited under load: %d requests, failures %s" % (count[0], errors[:3]))
    code, doc = http(port, "POST", "/v1/models/m1/labels/canary:predict", body)
    check(code == 200 and doc["predictions"] != outs["/v1/models/m1/versions/2:predict"],
          "config file edit: canary now answers from version 3")
    check(http(port, "POST", "/v1/models/m4:predict", body)[0] == 200, "config file edit: m4 added")
    check(http(port, "POST", "/v1/models/m3:predict", body)[0] == 404, "config file edit: m3 removed")
    logtext = open(log).read()
    check("skipping version 7" in logtext and "SavedModel" in logtext,
          "log: a SavedModel version is skipped with its reason")
    stop(p)


def curl_checks(port, jpeg):
    """Requests as TF Serving's REST API page writes them, sent with curl."""
    base = "http://127.0.0.1:%d" % port

    def curl(*args):
        r = subprocess.run(["curl", "-s", "-w", "\n%{http_code}"] + list(args),
                           capture_output=True, text=True, timeout=60)
        body, _, code = r.stdout.rpartition("\n")
        try:
            return int(code), json.loads(body)
        except ValueError:
            return int(code or 0), body
    code, doc = curl(base + "/v1/models/m2")
    check(code == 200 and doc["model_version_status"][0]["state"] == "AVAILABLE",
          "curl: GET /v1/models/m2 (model status)")
    code, doc = curl(base + "/v1/models/m2/metadata")
    check(code == 200 and "signature_def" in doc.get("metadata", {}), "curl: GET .../metadata")
    row = [[[0.5, 0.25, 0.125]] * 32] * 32
    code, doc = curl("-d", json.dumps({"signature_name": "serving_default", "instances": [row, row]}),
                     "-X", "POST", base + "/v1/models/m2:predict")
    check(code == 200 and len(doc["predictions"]) == 2, "curl: row format predict")
    code, doc = curl("-d", json.dumps({"inputs": [row]}), "-X", "POST",
                     base + "/v1/models/m2/versions/1:predict")
    check(code == 200 and len(doc["outputs"]) == 1, "curl: columnar format predict")
    code, meta = curl(base + "/v1/models/m2/metadata")
    sigs = meta.get("metadata", {}).get("signature_def", {}).get("signature_def", {}) \
        if code == 200 else {}
    check(sorted(sigs.get("serving_default", {}).get("outputs", {})) == ["probabilities"] and
          sorted(sigs.get("serving_all", {}).get("outputs", {})) == ["logits", "probabilities"],
          "curl: metadata lists serving_default (probabilities) and serving_all (both outputs)")
    code, doc = curl("-d", json.dumps({"signature_name": "serving_all", "instances": [row, row]}),
                     "-X", "POST", base + "/v1/models/m2:predict")
    p0 = doc.get("predictions", [{}])[0] if code == 200 else {}
    check(code == 200 and len(doc["predictions"]) == 2 and sorted(p0) == ["logits", "probabilities"]
          and len(p0["logits"]) == 10 and abs(sum(p0["probabilities"]) - 1) < 1e-4,
          "curl: a signature with several outputs answers one object per instance (TF Serving)")
    code, doc = curl("-d", json.dumps({"signature_name": "serving_all", "inputs": [row]}),
                     "-X", "POST", base + "/v1/models/m2:predict")
    check(code == 200 and sorted(doc.get("outputs", {})) == ["logits", "probabilities"]
          and len(doc["outputs"]["logits"]) == 1,
          "curl: columnar, several outputs: {\"outputs\": {name: value}}")
    nan_row = json.dumps({"instances": [row]}).replace("0.5", "NaN", 1).replace("0.25", "Infinity", 1)
    code, doc = curl("-d", nan_row, "-X", "POST", base + "/v1/models/m2:predict")
    check(code == 200, "curl: NaN and Infinity accepted as TF Serving documents (%d)" % code)
    b64 = base64.b64encode(jpeg).decode()
    code, doc = curl("-d", json.dumps({"instances": [{"b64": b64}]}), "-X", "POST",
                     base + "/v1/models/m2:predict")
    check(code == 200 and len(doc["predictions"][0]) == 10, "curl: {\"b64\": JPEG} predict")
    code, doc = curl("-d", json.dumps({"examples": [{"input": {"b64": b64}}]}), "-X", "POST",
                     base + "/v1/models/m2:classify")
    check(code == 200 and len(doc.get("results", [[]])[0]) > 0, "curl: classify")
    code, doc = curl("-X", "POST", "-d", "{}", base + "/v1/models/nope:predict")
    check(code == 404 and "error" in doc, "curl: unknown model gives 404 with {\"error\"}")


def newest_that_loads(tmp):
    """latest: a newest version that fails to load is reported and skipped
    (the one before serves), and retried when its file changes."""
    base = os.path.join(tmp, "fl")
    model(os.path.join(base, "1", "model.h5"), 51)
    os.makedirs(os.path.join(base, "2"))
    with open(os.path.join(base, "2", "model.h5"), "wb") as f:
        f.write(b"not an HDF5 file")
    p, port, log = start(tmp, ["--model_name=fl", "--model_base_path=" + base,
                               "--rest_api_port={PORT}", "--file_system_poll_wait_seconds=0.2",
                               "--enable_model_warmup=true", "--rest_api_timeout_in_ms=30000"])
    code, doc = http(port, "GET", "/v1/models/fl")
    st = {s["version"]: s for s in doc.get("model_version_status", [])}
    check(st.get("1", {}).get("state") == "AVAILABLE" and st.get("2", {}).get("state") == "END" and
          st["2"]["status"]["error_code"] != "OK",
          "a version that fails to load is reported; the newest that loads serves (%s)" %
          {k: v["state"] for k, v in st.items()})
    code, idx = http(port, "POST", "/v2/repository/index", "{}")
    idx = {e.get("version"): e for e in idx if e["name"] == "fl"} if code == 200 else {}
    check(idx.get("1", {}).get("state") == "READY" and idx.get("2", {}).get("state") ==
          "UNAVAILABLE" and "model.h5" in idx.get("2", {}).get("reason", ""),
          "repository index: the failed version is UNAVAILABLE with the load error as its "
          "reason (%s)" % idx)
    model(os.path.join(base, "2", "tmp.h5"), 52)
    os.replace(os.path.join(base, "2", "tmp.h5"), os.path.join(base, "2", "model.h5"))
    deadline, ok = time.time() + 60, False
    while time.time() < deadline and not ok:
        code, doc = http(port, "GET", "/v1/models/fl/versions/2")
        ok = code == 200 and doc["model_version_status"][0]["state"] == "AVAILABLE"
        time.sleep(0.2)
    check(ok, "the failed version is retried when its file changes")
    stop(p)


def poll_mode(tmp):
    """--model-control-mode=poll: models added to or removed from the
    repository folder are loaded and unloaded; load/unload calls are refused."""
    repo = os.path.join(tmp, "pollrepo")
    model(os.path.join(repo, "a", "1", "model.h5"), 61)
    p, port, log = start(tmp, ["--model-repository=" + repo, "--http-port={PORT}",
                               "--model-control-mode=poll", "--repository-poll-secs=0.3"])
    c = tc.InferenceServerClient("127.0.0.1:%d" % port)
    model(os.path.join(tmp, "c.h5"), 62)
    os.makedirs(os.path.join(repo, "c", "1"))
    os.replace(os.path.join(tmp, "c.h5"), os.path.join(repo, "c", "1", "model.h5"))
    deadline = time.time() + 60
    while time.time() < deadline and not c.is_model_ready("c"):
        time.sleep(0.2)
    check(c.is_model_ready("c"), "poll mode: a model folder added is loaded")
    shutil.rmtree(os.path.join(repo, "a"))
    deadline = time.time() + 60
    while time.time() < deadline and c.is_model_ready("a"):
        time.sleep(0.2)
    check(not c.is_model_ready("a") and c.is_server_ready(),
          "poll mode: a model folder removed is unloaded")
    check(raises(lambda: c.load_model("c")), "poll mode: explicit load is refused")
    c.close()
    stop(p)


def thread_budget(tmp):
    """A model's instance count (config.pbtxt instance_group) caps the batch
    threads it holds: a flood of requests to a slow model leaves a thread
    for the others, so their requests do not queue behind it."""
    repo = os.path.join(tmp, "budget")
    os.makedirs(os.path.join(repo, "big", "1"))
    # 448x448: a forward long enough (16 ms on one Zen core, 4 at 224x224)
    # that a small request's queueing stands out from the scheduling noise
    # of a machine running other tests beside this one
    subprocess.check_call([TOOL, "model", "mobilenetv2", os.path.join(repo, "big", "1", "model.h5"),
                           "7", "448"], stdout=subprocess.DEVNULL)
    with open(os.path.join(repo, "big", "config.pbtxt"), "w") as f:
        f.write("max_batch_size: 1\ninstance_group [ { count: 1 kind: KIND_CPU } ]\n")
    model(os.path.join(repo, "small", "1", "model.h5"), 71)
    p, port, log = start(tmp, ["--model-repository=" + repo, "--http-port={PORT}",
                               "--num_batch_threads=2", "--threads=1",
                               "--file_system_poll_wait_seconds=0"])
    stop_flag = threading.Event()
    xb = np.random.RandomState(3).rand(1, 448, 448, 3).astype(np.float32)

    def flood():
        c = tc.InferenceServerClient("127.0.0.1:%d" % port, network_timeout=300)
        i = tc.InferInput("input", [1, 448, 448, 3], "FP32")
        i.set_data_from_numpy(xb)
        while not stop_flag.is_set():
            c.infer("big", [i])
    def big_done(c):
        st = c.get_inference_statistics(model_name="big")["model_stats"]
        return int(st[0]["inference_stats"]["success"]["count"]) if st else 0
    threads = [threading.Thread(target=flood) for _ in range(4)]
    for t in threads:
        t.start()
    try:
        c = tc.InferenceServerClient("127.0.0.1:%d" % port, network_timeout=300)
        xs = np.random.RandomState(4).rand(1, 32, 32, 3).astype(np.float32)
        i = tc.InferInput("input", [1, 32, 32, 3], "FP32")
        i.set_data_from_numpy(xs)
        deadline = time.time() + 60  # the flood is on: big has run a few forwards
        while time.time() < deadline and big_done(c) < 4:
            time.sleep(0.05)
        for _ in range(15):
            c.infer("small", [i])
            time.sleep(0.05)
    finally:
        stop_flag.set()
        for t in threads:
            t.join()
    st = {s["name"]: s["inference_stats"] for s in c.get_inference_statistics()["model_stats"]}
    big_forward = st["big"]["compute_infer"]["ns"] / max(1, st["big"]["compute_infer"]["count"])
    small_queue = st["small"]["queue"]["ns"] / max(1, st["small"]["queue"]["count"])
    check(small_queue < 0.2 * big_forward,
          "thread budget: with big capped to 1 of 2 batch threads, small waits %.1f ms in the "
          "queue (big's forward: %.1f ms)" % (small_queue / 1e6, big_forward / 1e6))
    stop(p)


def main():
    tmp = tempfile.mkdtemp(prefix="weft-clients-")
    try:
        jpeg_path = os.path.join(tmp, "img.jpg")
        subprocess.check_call([TOOL, "jpeg", jpeg_path, "45", "37", "5"])
        jpeg = open(jpeg_path, "rb").read()
        repo = os.path.join(tmp, "repo")
        model(os.path.join(repo, "a", "1", "model.h5"), 1)
        model(os.path.join(repo, "b", "1", "model.h5"), 2)
        model(os.path.join(repo, "b", "2", "model.h5"), 3)
        with open(os.path.join(repo, "b", "config.pbtxt"), "w") as f:
            f.write('name: "b"\nmax_batch_size: 8\nversion_policy: { all {} }\n'
                    'dynamic_batching { max_queue_delay_microseconds: 300 }\n'
                    'instance_group [ { count: 2 kind: KIND_CPU } ]\n')
        p, port = tritonclient_checks(tmp, repo, jpeg)
        perf_analyzer_checks(port)
        stop(p)
        d = os.path.join(tmp, "tf")
        for name, ver, seed in (("m1", 1, 11), ("m1", 2, 12), ("m1", 3, 13), ("m2", 1, 21),
                                ("m3", 1, 31), ("m4", 1, 41)):
            model(os.path.join(d, name, str(ver), "model.h5"), seed)
        os.makedirs(os.path.join(d, "m2", "7"))  # a SavedModel version: skipped with the reason
        open(os.path.join(d, "m2", "7", "saved_model.pb"), "wb").close()
        os.makedirs(os.path.join(d, "m5", "export"))
        with open(os.path.join(tmp, "m5.config"), "w") as f:
            f.write("model_config_list { config { name: 'm5' base_path: '%s/m5' } }" % d)
        p5, _, log5 = start(tmp, ["--rest_api_port={PORT}", "--model_config_file=" +
                                  os.path.join(tmp, "m5.config")], ready_path="/v2/health/live")
        time.sleep(1)
        stop(p5)
        hint5 = "Did you forget to name your leaf directory as a number" in open(log5).read()
        tf_serving_checks(tmp, d, jpeg)
        newest_that_loads(tmp)
        poll_mode(tmp)
        thread_budget(tmp)
        check(hint5, "log: base path without numbered versions gets TF Serving's hint")
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        shutil.rmtree(tmp, ignore_errors=True)
    if failures:
        print("%d checks failed" % len(failures))
        sys.exit(1)
    print("all checks passed")


if __name__ == "__main__":
    main()
