"""drain_clients.py: what SIGTERM costs the requests a weft-serve is answering
(bench/bench_drain.sh runs it with the client venv's python).

Starts weft-serve on a model base path, keeps HTTP clients (KServe binary
FP32 tensors over keep-alive connections, http.client) and gRPC clients
(tritonclient.grpc, one channel each) sending requests, and sends SIGTERM:
  steady  with the model served and nothing else happening;
  loading while a new version (dropped into the base path first) loads and
          warms beside the served one.
Every request is recorded with its start and end. A request in flight at
SIGTERM (started before it) must be answered; one started after it on an
open connection, until the process ends, is answered or refused (both are
the drain rule's, neither a failure); the exit time is from SIGTERM to the
process's end.
  python drain_clients.py SERVE BASE STAGE SIZE ROUNDS [HTTP_CLIENTS GRPC_CLIENTS]
STAGE holds the versions to drop in (STAGE/<v>/model.h5, v = 2, 3, ...).
Prints one line per round and a JSON line per scenario (medians)."""
import http.client
import json
import os
import socket
import statistics
import struct
import subprocess
import sys
import threading
import time

import numpy as np
import tritonclient.grpc as grpcclient


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class Server:
    def __init__(self, serve, base, log, drain_s):
        self.http, self.grpc = free_port(), free_port()
        self.log = log
        with open(log, "w") as out:
            self.p = subprocess.Popen(
                [serve, "--model_name", "m", "--model_base_path", base,
                 "--rest_api_port", str(self.http), "--grpc_port", str(self.grpc), "--port", "0",
                 "--bind_address", "127.0.0.1", "--enable_batching", "--max_batch_size", "32",
                 "--batch_timeout_micros", "2000", "--file_system_poll_wait_seconds", "0.1",
                 "--drain_timeout_seconds", str(drain_s)],
                stdout=out, stderr=subprocess.STDOUT)

    def wait_log(self, text, limit=300):
        """Until the server's log holds text (False: it ended or the limit passed)."""
        t0 = time.time()
        while time.time() - t0 < limit:
            with open(self.log) as f:
                if text in f.read():
                    return True
            if self.p.poll() is not None:
                return False
            time.sleep(0.02)
        return False


def http_loop(port, size, rec, stop):
    x = np.random.default_rng(1).random((1, size, size, 3), dtype=np.float32)
    head = json.dumps({"inputs": [{"name": "input", "datatype": "FP32", "shape": list(x.shape),
                                   "parameters": {"binary_data_size": x.nbytes}}],
                       "outputs": [{"name": "probabilities",
                                    "parameters": {"binary_data": True}}]}).encode()
    body = head + x.tobytes()
    hdrs = {"Content-Type": "application/octet-stream",
            "Inference-Header-Content-Length": str(len(head))}
    conn = None
    while not stop.is_set():
        fresh = conn is None
        if fresh:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        t0 = time.time()
        try:
            conn.request("POST", "/v2/models/m/infer", body, hdrs)
            r = conn.getresponse()
            r.read()
            ok = r.status == 200
            rec.append(("http", t0, time.time(), ok, fresh, "" if ok else "HTTP %d" % r.status))
            if r.getheader("Connection", "").lower() == "close":
                conn.close()
                conn = None
        except (OSError, http.client.HTTPException) as e:
            rec.append(("http", t0, time.time(), False, fresh, type(e).__name__))
            conn.close()
            conn = None
            time.sleep(0.01)


def grpc_loop(port, size, rec, stop):
    c = grpcclient.InferenceServerClient("127.0.0.1:%d" % port)
    x = np.random.default_rng(2).random((1, size, size, 3), dtype=np.float32)
    inp = grpcclient.InferInput("input", list(x.shape), "FP32")
    inp.set_data_from_numpy(x)
    while not stop.is_set():
        t0 = time.time()
        try:
            c.infer("m", [inp], client_timeout=60)
            rec.append(("grpc", t0, time.time(), True, False, ""))
        except Exception as e:  # InferenceServerException: its status names it
            rec.append(("grpc", t0, time.time(), False, False,
                        str(getattr(e, "status", lambda: type(e).__name__)())))
            time.sleep(0.01)


def round_(serve, base, stage, size, nh, ng, scenario, version, tmp):
    srv = Server(serve, base, os.path.join(tmp, "serve-%s-%d.log" % (scenario, version)), 30)
    if not srv.wait_log("is available"):
        raise SystemExit("weft-serve did not serve: see " + srv.log)
    rec, stop = [], threading.Event()
    threads = [threading.Thread(target=http_loop, args=(srv.http, size, rec, stop))
               for _ in range(nh)]
    threads += [threading.Thread(target=grpc_loop, args=(srv.grpc, size, rec, stop))
                for _ in range(ng)]
    for t in threads:
        t.start()
    time.sleep(3)  # a window of steady traffic before the event, not a wait for one
    if scenario == "loading":
        os.rename(os.path.join(stage, str(version)), os.path.join(base, str(version)))
        if not srv.wait_log("loading model m version %d" % version, 60):
            raise SystemExit("the new version did not start loading: see " + srv.log)
        time.sleep(1)  # into the load (its warm-up), beside the traffic
    t_term = time.time()
    srv.p.terminate()
    code = srv.p.wait(120)
    t_exit = time.time()
    stop.set()
    for t in threads:
        t.join(90)
    before = [r for r in rec if r[1] < t_term - 2]
    inflight = [r for r in rec if r[1] < t_term <= r[2]]
    after = [r for r in rec if t_term <= r[1] < t_exit]
    failed = [r for r in inflight if not r[3]]
    res = {
        "scenario": scenario, "exit_code": code, "exit_s": round(t_exit - t_term, 3),
        "steady_req_s": round(len(before) / max(1e-9, (t_term - 2) - min(r[1] for r in rec)), 1),
        "in_flight": len(inflight), "in_flight_failed": len(failed),
        "failed_how": sorted({r[5] for r in failed}),
        "after_answered": sum(1 for r in after if r[3]),
        "after_refused": sum(1 for r in after if not r[3]),
    }
    return res


def main():
    serve, base, stage, size, rounds = sys.argv[1:6]
    size, rounds = int(size), int(rounds)
    nh = int(sys.argv[6]) if len(sys.argv) > 6 else 8
    ng = int(sys.argv[7]) if len(sys.argv) > 7 else 8
    tmp = os.path.dirname(stage)
    version = 2
    for scenario in ("steady", "loading"):
        rows = []
        for r in range(rounds):
            res = round_(serve, base, stage, size, nh, ng, scenario, version, tmp)
            if scenario == "loading":
                version += 1
            rows.append(res)
            print("%s round %d: %d req/s steady; SIGTERM -> exit %d in %.2f s; in flight %d, "
                  "failed %d %s; after SIGTERM until the exit: %d answered, %d refused (retries on "
                  "new connections included)"
                  % (scenario, r + 1, res["steady_req_s"], res["exit_code"], res["exit_s"],
                     res["in_flight"], res["in_flight_failed"], res["failed_how"] or "",
                     res["after_answered"], res["after_refused"]), flush=True)
        print(json.dumps({"scenario": scenario, "rounds": rounds,
                          "exit_s_median": statistics.median(r["exit_s"] for r in rows),
                          "exit_s_max": max(r["exit_s"] for r in rows),
                          "in_flight": sum(r["in_flight"] for r in rows),
                          "in_flight_failed": sum(r["in_flight_failed"] for r in rows),
                          "exit_codes": sorted({r["exit_code"] for r in rows})}), flush=True)


if __name__ == "__main__":
    main()
