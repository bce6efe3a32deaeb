"""A model config is applied all or nothing (driven by test_reload.sh).

One weft-serve from a TF Serving --model_config_file (model a: versions 1 and
2, labels; model b) polled every 0.2 s. TF Serving's own ModelServiceStub
sends HandleReloadConfigRequest with one bad model among good ones (no
base_path, a base_path that does not exist, a version policy naming versions
that are not there): each gets INVALID_ARGUMENT naming the model and the
field, and GetModelStatus, the labels and Predict show nothing changed (no
model unloaded, none added). Then the config file is edited badly (one model
of the new set has no such base_path): the server logs the reason and keeps
serving what it served; a later good edit applies. Every process started here
is killed at the end."""
import os
import signal
import subprocess
import sys
import tempfile
import time

import grpc
import numpy as np
from tensorflow.core.framework import types_pb2
from tensorflow_serving.apis import (get_model_status_pb2, model_management_pb2,
                                     model_service_pb2_grpc, predict_pb2,
                                     prediction_service_pb2_grpc)

from testlib import check, failures, finish, free_port  # tests/serve/testlib.py
from testlib import http as http_req

SERVE = os.environ["WEFT_SERVE"]
TOOL = os.environ["WEFT_SERVE_TOOL"]
AVAILABLE = get_model_status_pb2.ModelVersionStatus.AVAILABLE
procs = []


def config_text(models):
    """A TF Serving ModelServerConfig text of (name, base_path, extra) models."""
    return ("model_config_list {\n" + "".join(
        '  config { name: "%s" base_path: "%s" model_platform: "weft" %s }\n' % m
        for m in models) + "}\n")


def write_atomically(path, text):
    with open(path + ".tmp", "w") as f:
        f.write(text)
    os.replace(path + ".tmp", path)


def wait_for(pred, seconds, what):
    """pred() polled until it holds; fails the check named `what` otherwise."""
    deadline = time.time() + seconds
    while time.time() < deadline:
        if pred():
            return True
        time.sleep(0.05)
    check(False, what + " (timed out after %d s)" % seconds)
    return False


def main():
    tmp = tempfile.mkdtemp(prefix="weft-reload-")
    for name, ver, seed in (("a", 1, 1), ("a", 2, 2), ("b", 1, 3), ("c", 1, 4)):
        os.makedirs(os.path.join(tmp, name, str(ver)))
        subprocess.check_call([TOOL, "model", "smallcnn",
                               os.path.join(tmp, name, str(ver), "model.h5"), str(seed), "32"])
    a, b, c = (os.path.join(tmp, n) for n in "abc")
    a_cfg = ("a", a, "model_version_policy { specific { versions: 1 versions: 2 } } "
             "version_labels { key: 'stable' value: 1 } version_labels { key: 'canary' value: 2 }")
    conf = os.path.join(tmp, "models.config")
    write_atomically(conf, config_text([a_cfg, ("b", b, "")]))
    log = os.path.join(tmp, "serve.log")
    try:
        def ready():
            try:
                return p.poll() is None and http_req(rest, "/v2/health/ready")[0] == 200
            except OSError:
                return False
        for _ in range(5):  # other ports when one chosen was taken before the bind
            rest, port = free_port(), free_port()
            p = subprocess.Popen([SERVE, "--model_config_file", conf,
                                  "--model_config_file_poll_wait_seconds", "0.2",
                                  "--bind_address", "127.0.0.1", "--rest_api_port", str(rest),
                                  "--port", str(port), "--grpc_port", "0"],
                                 stdout=open(log, "w"), stderr=subprocess.STDOUT)
            procs.append(p)
            deadline = time.time() + 60
            while p.poll() is None and not ready() and time.time() < deadline:
                time.sleep(0.05)
            if p.poll() is None or "cannot listen" not in open(log).read():
                break
        if not wait_for(ready, 1, "weft-serve ready"):
            return finish(procs, tmp)
        ch = grpc.insecure_channel("127.0.0.1:%d" % port)
        ms = model_service_pb2_grpc.ModelServiceStub(ch)
        ps = prediction_service_pb2_grpc.PredictionServiceStub(ch)
        x = np.random.default_rng(5).random((1, 32, 32, 3), dtype=np.float32)

        def status(name):
            """{version: state} of a model from GetModelStatus, or the error code."""
            req = get_model_status_pb2.GetModelStatusRequest()
            req.model_spec.name = name
            try:
                r = ms.GetModelStatus(req, timeout=30)
            except grpc.RpcError as e:
                return e.code().name
            return {s.version: s.state for s in r.model_version_status}

        def predict(name, label=None):
            """(version, probabilities) of a Predict, or the error code."""
            req = predict_pb2.PredictRequest()
            req.model_spec.name = name
            if label:
                req.model_spec.version_label = label
            t = req.inputs["input"]
            t.dtype = types_pb2.DT_FLOAT
            for d in x.shape:
                t.tensor_shape.dim.add().size = d
            t.tensor_content = x.tobytes()
            try:
                r = ps.Predict(req, timeout=60)
            except grpc.RpcError as e:
                return e.code().name, None
            return r.model_spec.version.value, tuple(r.outputs["probabilities"].float_val)

        def state():
            """What a user sees of the served set."""
            return (status("a"), status("b"), status("c"), predict("a", "stable"),
                    predict("a", "canary"), predict("b"), predict("c")[0])

        before = state()
        check(before[0] == {1: AVAILABLE, 2: AVAILABLE} and before[1] == {1: AVAILABLE}
              and before[2] == "NOT_FOUND" and before[3][0] == 1 and before[4][0] == 2
              and before[5][0] == 1 and before[6] == "NOT_FOUND",
              "start: a serves 1 (stable) and 2 (canary), b serves 1, c is not served")

        def reload(models):
            rc = model_management_pb2.ReloadConfigRequest()
            for name, base, policy in models:
                cfg = rc.config.model_config_list.config.add()
                cfg.name = name
                if base:
                    cfg.base_path = base
                cfg.model_platform = "weft"
                if policy is not None:
                    cfg.model_version_policy.specific.versions.extend(policy)
            try:
                ms.HandleReloadConfigRequest(rc, timeout=120)
                return "OK", ""
            except grpc.RpcError as e:
                return e.code().name, e.details()

        bad = [("no base_path", [("a", a, None), ("c", None, None)], ("c", "base_path")),
               ("a base_path that does not exist",
                [("a", a, None), ("c", os.path.join(tmp, "nowhere"), None)],
                ("c (base_path", "nowhere")),
               ("a version policy of versions that are not there",
                [("a", a, [7]), ("c", c, None)], ("a (model_version_policy", " 7 ")),
               ("a version policy that lists no version",
                [("a", a, None), ("b", b, []), ("c", c, None)],
                ("b (model_version_policy", "no version"))]
        for what, models, names in bad:
            code, why = reload(models)
            check(code == "INVALID_ARGUMENT" and all(n in why for n in names),
                  "HandleReloadConfigRequest with %s: INVALID_ARGUMENT naming %s (%s: %s)"
                  % (what, " and ".join(names), code, why))
            now = state()
            check(now == before, "after the refused reload (%s) nothing changed (%s)"
                  % (what, "same" if now == before else (now,)))

        # the config file: a bad edit is logged and ignored as a whole
        with open(log) as f:
            seen = len(f.read())
        write_atomically(conf, config_text([("b", b, ""), ("c", c, ""),
                                            ("d", os.path.join(tmp, "nowhere"), "")]))

        def logged_ignored():
            with open(log) as f:
                text = f.read()[seen:]
            return "the edit is ignored as a whole" in text and text
        if wait_for(logged_ignored, 120, "a bad edit of the config file is logged"):
            text = logged_ignored()
            line = [l for l in text.splitlines() if "ignored as a whole" in l][0]
            check("d (base_path" in line and "nowhere" in line,
                  "the log line names the model and the field (%s)" % line.strip())
        now = state()
        check(now == before, "after the bad edit of the config file nothing changed (%s)"
              % ("same" if now == before else (now,)))
        # a later good edit applies: a goes, c comes, b stays
        write_atomically(conf, config_text([("b", b, ""), ("c", c, "")]))
        wait_for(lambda: status("c") == {1: AVAILABLE} and predict("a")[0] == "NOT_FOUND"
                 and AVAILABLE not in status("a").values(),
                 120, "a good edit of the config file applies: c served, a gone")
        check(predict("b") == before[5] and predict("c")[0] == 1,
              "after the good edit: b answers as before, c serves version 1")
        ch.close()
        p.send_signal(signal.SIGTERM)
        check(p.wait(timeout=60) == 0, "SIGTERM: exit 0")
    finally:
        rc = finish(procs, tmp)
    return rc


if __name__ == "__main__":
    sys.exit(main())
