"""Triton's system shared memory extension with the real clients (driven by
test_shm_clients.sh): tritonclient.http and .grpc put tensors into POSIX
shared memory (tritonclient.utils.shared_memory), register the regions and
name them in requests; perf_analyzer --shared-memory system over HTTP and
gRPC. The answers must equal those of the same request sent in the body.
Who may use it: nobody by default, loopback clients under
--shared_memory=local (a client reaching the server through a non-loopback
address of this machine is refused), everyone under Triton's
--allow-client-shm=true. A region whose object the client shrinks gives an
error, not a dead server."""
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time

import numpy as np
import tritonclient.grpc as tg
import tritonclient.http as th
import tritonclient.utils.shared_memory as shm
from tritonclient.utils import InferenceServerException

from testlib import check, failures, free_port  # tests/serve/testlib.py

SERVE = os.environ["WEFT_SERVE"]
TOOL = os.environ["WEFT_SERVE_TOOL"]
VENV = os.path.dirname(os.path.dirname(sys.executable))
procs = []
TAG = "weft_shm_%d" % os.getpid()


def start(tmp, base, *flags):
    """weft-serve on two free ports (tried again on others if it exits at
    once: another test may have taken a port between free_port and bind)."""
    for _ in range(3):
        http, grpc = free_port(), free_port()
        log = open(os.path.join(tmp, "serve-%d.log" % http), "w")
        p = subprocess.Popen([SERVE, "--model_name", "m", "--model_base_path", base,
                              "--rest_api_port", str(http), "--port", "0", "--grpc_port",
                              str(grpc), "--enable_batching", "--max_batch_size", "8"]
                             + list(flags), stdout=log, stderr=subprocess.STDOUT)
        procs.append(p)
        c = th.InferenceServerClient("127.0.0.1:%d" % http)
        deadline = time.time() + 60
        while time.time() < deadline and p.poll() is None:
            try:
                if c.is_server_ready():
                    return p, http, grpc
            except (InferenceServerException, OSError):
                pass
            time.sleep(0.1)
        if p.poll() is None:
            break
    raise RuntimeError("weft-serve did not become ready; see " + log.name)


def stop(p):
    p.send_signal(signal.SIGTERM)
    p.wait(timeout=60)


def refused(fn, words):
    try:
        fn()
        return False
    except InferenceServerException as e:
        return all(w in str(e) for w in words)


def other_address():
    """An IPv4 address of this machine that is not loopback, or None."""
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        s.connect(("10.255.255.255", 1))  # no packet is sent
        a = s.getsockname()[0]
    except OSError:
        return None
    finally:
        s.close()
    return None if a.startswith("127.") else a


def region(name, nbytes):
    return shm.create_shared_memory_region(name, "/%s_%s" % (TAG, name), nbytes)


def off_by_default(tmp, base):
    p, http, grpc = start(tmp, base)
    h = th.InferenceServerClient("127.0.0.1:%d" % http)
    g = tg.InferenceServerClient("127.0.0.1:%d" % grpc)
    check("system_shared_memory" not in h.get_server_metadata()["extensions"],
          "default: the server metadata does not list system_shared_memory")
    r = region("off", 64)
    check(refused(lambda: h.register_system_shared_memory("off", "/%s_off" % TAG, 64),
                  ["--shared_memory=none"]),
          "default: HTTP register refused, naming --shared_memory=none")
    check(refused(lambda: g.register_system_shared_memory("off", "/%s_off" % TAG, 64),
                  ["PERMISSION_DENIED"]), "default: gRPC register PERMISSION_DENIED")
    shm.destroy_shared_memory_region(r)
    stop(p)


def http_checks(h, x, ref_probs, ref_logits):
    n_in, n_out = x.nbytes, ref_probs.nbytes
    rin, rout = region("hin", n_in), region("hout", 2 * n_out)
    shm.set_shared_memory_region(rin, [x])
    h.register_system_shared_memory("hin", "/%s_hin" % TAG, n_in)
    h.register_system_shared_memory("hout", "/%s_hout" % TAG, 2 * n_out)
    st = {s["name"]: s for s in h.get_system_shared_memory_status()}
    check(st.get("hin", {}).get("byte_size") == n_in and st["hout"]["key"] == "/%s_hout" % TAG,
          "HTTP: status lists both regions with key and size")
    i = th.InferInput("input", list(x.shape), "FP32")
    i.set_shared_memory("hin", n_in)
    o1 = th.InferRequestedOutput("probabilities", binary_data=True)
    o1.set_shared_memory("hout", n_out)
    o2 = th.InferRequestedOutput("logits", binary_data=True)
    o2.set_shared_memory("hout", n_out, offset=n_out)
    res = h.infer("m", [i], outputs=[o1, o2]).get_response()
    probs = shm.get_contents_as_numpy(rout, np.float32, list(ref_probs.shape))
    logits = shm.get_contents_as_numpy(rout, np.float32, list(ref_probs.shape), offset=n_out)
    check(np.allclose(probs, ref_probs, atol=1e-6) and np.allclose(logits, ref_logits, atol=1e-5)
          and all("data" not in o for o in res["outputs"]),
          "HTTP: FP32 input from shared memory, both outputs written into it at their offsets")
    small = th.InferRequestedOutput("probabilities")
    small.set_shared_memory("hout", n_out - 4)
    check(refused(lambda: h.infer("m", [i], outputs=[small]), ["shared_memory_byte_size"]),
          "HTTP: an output region too small is an error naming shared_memory_byte_size")
    h.unregister_system_shared_memory("hin")
    check(refused(lambda: h.infer("m", [i]), ["hin"]),
          "HTTP: a request naming an unregistered region is an error naming it")
    h.unregister_system_shared_memory()
    check(h.get_system_shared_memory_status() == [], "HTTP: unregister all empties the status")
    shm.destroy_shared_memory_region(rin)
    shm.destroy_shared_memory_region(rout)


def grpc_checks(g, xu8, ref_u8_logits):
    rin, rout = region("gin", xu8.nbytes), region("gout", 4096)
    shm.set_shared_memory_region(rin, [xu8])
    g.register_system_shared_memory("gin", "/%s_gin" % TAG, xu8.nbytes)
    g.register_system_shared_memory("gout", "/%s_gout" % TAG, 4096)
    st = g.get_system_shared_memory_status(as_json=True)["regions"]
    check(set(st) == {"gin", "gout"}, "gRPC: status lists both regions")
    i = tg.InferInput("input", list(xu8.shape), "UINT8")
    i.set_shared_memory("gin", xu8.nbytes)
    o1 = tg.InferRequestedOutput("logits")
    o1.set_shared_memory("gout", ref_u8_logits.nbytes)
    o2 = tg.InferRequestedOutput("probabilities", class_count=1)
    r = g.infer("m", [i], outputs=[o1, o2])
    logits = shm.get_contents_as_numpy(rout, np.float32, list(ref_u8_logits.shape))
    top = [s.decode().split(":")[1] for s in r.as_numpy("probabilities").reshape(-1)]
    check(np.allclose(logits, ref_u8_logits, atol=1e-5) and
          top == [str(k) for k in ref_u8_logits.argmax(1)],
          "gRPC: UINT8 input from shared memory, logits written into it, classification in "
          "the reply")
    g.unregister_system_shared_memory()
    check(g.get_system_shared_memory_status(as_json=True).get("regions", {}) == {},
          "gRPC: unregister all")
    check(refused(lambda: g.register_cuda_shared_memory("c", b"\0" * 64, 0, 64), ["CUDA"]),
          "gRPC: CUDA shared memory register is refused with a reason")
    shm.destroy_shared_memory_region(rin)
    shm.destroy_shared_memory_region(rout)


def truncated(h, x, grpc_port):
    """The client shrinks its object after registering: errors, and the
    server lives on."""
    key = "/%s_trunc" % TAG
    r = region("trunc", x.nbytes)
    shm.set_shared_memory_region(r, [x])
    h.register_system_shared_memory("trunc", key, x.nbytes)
    os.truncate("/dev/shm" + key, 16)
    i = th.InferInput("input", list(x.shape), "FP32")
    i.set_shared_memory("trunc", x.nbytes)
    check(refused(lambda: h.infer("m", [i]), ["truncated"]),
          "a region whose object was shrunk: an error that says so")
    gi = tg.InferInput("input", list(x.shape), "FP32")
    gi.set_shared_memory("trunc", x.nbytes)
    g = tg.InferenceServerClient("127.0.0.1:%d" % grpc_port)
    check(refused(lambda: g.infer("m", [gi]), ["truncated"]), "the same over gRPC")
    check(h.is_server_live(), "and the server is still alive")
    h.unregister_system_shared_memory()
    shm.destroy_shared_memory_region(r)


skipped = []  # checks that did not run: the script then exits 77 (a skip), never 0


def local_only(http, grpc):
    a = other_address()
    if a is None:
        print("SKIP: no non-loopback IPv4 address here to check --shared_memory=local from")
        skipped.append("--shared_memory=local from another address")
        return
    h = th.InferenceServerClient("%s:%d" % (a, http))
    g = tg.InferenceServerClient("%s:%d" % (a, grpc))
    r = region("far", 64)
    check(refused(lambda: h.register_system_shared_memory("far", "/%s_far" % TAG, 64),
                  ["--shared_memory=local"]),
          "local: HTTP register from %s refused, naming --shared_memory=local" % a)
    check(refused(lambda: g.register_system_shared_memory("far", "/%s_far" % TAG, 64),
                  ["PERMISSION_DENIED"]), "local: gRPC register from %s refused" % a)
    shm.destroy_shared_memory_region(r)


def perf_analyzer(http, grpc):
    pa = os.path.join(VENV, "bin", "perf_analyzer")
    lib = os.path.join(VENV, "lib", "python%d.%d" % sys.version_info[:2], "site-packages",
                       "nvidia", "cuda_runtime", "lib")
    if not os.path.exists(pa):
        check(False, "perf_analyzer is in the venv")
        return
    env = dict(os.environ, LD_LIBRARY_PATH=lib + ":" + os.environ.get("LD_LIBRARY_PATH", ""))
    for proto, port in (("http", http), ("grpc", grpc)):
        r = subprocess.run([pa, "-m", "m", "-i", proto, "-u", "127.0.0.1:%d" % port,
                            "--shared-memory", "system", "--concurrency-range", "1:8:7",
                            "--measurement-interval", "1000", "-s", "1000", "--max-trials", "3"],
                           env=env, capture_output=True, text=True, timeout=300)
        lines = [l for l in r.stdout.splitlines() if l.startswith("Concurrency: ")]
        check(r.returncode == 0 and len(lines) == 2,
              "perf_analyzer -i %s --shared-memory system at concurrency 1 and 8 exits 0%s"
              % (proto, "" if r.returncode == 0 else ": " + (r.stdout + r.stderr)[-600:]))


def main():
    tmp = tempfile.mkdtemp(prefix="weft-shm-")
    base = os.path.join(tmp, "m")
    os.makedirs(os.path.join(base, "1"))
    subprocess.check_call([TOOL, "model", "smallcnn", os.path.join(base, "1", "model.h5"), "1"],
                          stdout=subprocess.DEVNULL)
    try:
        off_by_default(tmp, base)
        p, http, grpc = start(tmp, base, "--bind_address", "0.0.0.0", "--shared_memory=local")
        h = th.InferenceServerClient("127.0.0.1:%d" % http)
        g = tg.InferenceServerClient("127.0.0.1:%d" % grpc)
        check("system_shared_memory" in h.get_server_metadata()["extensions"],
              "local: the server metadata lists system_shared_memory")
        rng = np.random.default_rng(3)
        x = rng.random((3, 32, 32, 3), dtype=np.float32)
        i = th.InferInput("input", list(x.shape), "FP32")
        i.set_data_from_numpy(x)
        ref = h.infer("m", [i])
        http_checks(h, x, ref.as_numpy("probabilities"), ref.as_numpy("logits"))
        xu8 = rng.integers(0, 256, (2, 32, 32, 3), dtype=np.uint8)
        gi = tg.InferInput("input", list(xu8.shape), "UINT8")
        gi.set_data_from_numpy(xu8)
        grpc_checks(g, xu8, g.infer("m", [gi]).as_numpy("logits"))
        truncated(h, x, grpc)
        local_only(http, grpc)
        stop(p)
        p, http, grpc = start(tmp, base, "--allow-client-shm=true")
        perf_analyzer(http, grpc)
        h = th.InferenceServerClient("127.0.0.1:%d" % http)
        check(h.get_system_shared_memory_status() == [],
              "perf_analyzer unregistered its regions at the end")
        stop(p)
        check(p.returncode == 0, "SIGTERM: exit 0")
    finally:
        for q in procs:
            if q.poll() is None:
                q.kill()
                q.wait()
        for f in os.listdir("/dev/shm"):
            if f.startswith(TAG):
                os.unlink("/dev/shm/" + f)
    if failures:
        for f in sorted(os.listdir(tmp)):
            if f.endswith(".log"):
                print("--- %s\n%s" % (f, open(os.path.join(tmp, f)).read()[-3000:]))
        print("%d check(s) failed" % len(failures))
        return 1
    if skipped:
        print("shared memory checks passed, but not run: %s" % ", ".join(skipped))
        return 77
    print("all shared memory checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
