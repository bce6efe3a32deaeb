"""weft-serve under hostile and unlucky clients, against a real
server on loopback: `python3 hardening_test.py starve|drain|overload|tls`.

starve:   1000 slowloris + 1000 idle keep-alive connections held while a normal
          client's p99 stays within 100 ms of its p99 without them; the
          per-address connection limit; the whole-header deadline.
drain:    SIGTERM while requests sit in the batcher (a long batch timeout), one
          on a keep-alive connection, one mid-upload and a large one queued behind
          them (so the server is still computing it after the signal): none was
          answered before SIGTERM, all get complete 200 answers after it
          (keep-alive ones with Connection: close), no new connection is
          accepted, the process exits 0 before the drain timeout.
overload: a bounded queue answers 429 + Retry-After at once; the body budget
          answers 503 + Retry-After; a 32 MB JSON body leaves RSS bounded.
jsonparse: bodies that need jansson's tree (NaN) count it in the body budget:
          one whose tree alone exceeds the budget gets 413, one that does not
          fit beside a body in flight gets 429 + Retry-After and is served
          once that body is done; other requests are served throughout, and
          a 20 MB NaN body leaves the peak RSS within the budget.
tls:      HTTPS with a certificate made by openssl, checked with curl --cacert;
          a bearer token (401 without it; health probes open).

Every process started here is killed in `finally`; each mode stops by itself."""
import gzip
import http.client
import json
import os
import select
import selectors
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

from testlib import check, failures, free_port, stop  # tests/serve/testlib.py

SERVE = os.environ["WEFT_SERVE"]
TOOL = os.environ["WEFT_SERVE_TOOL"]
procs = []


def request(port, method, path, body=None, headers=None, timeout=30, source="127.0.0.1"):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout, source_address=(source, 0))
    try:
        c.request(method, path, body=body, headers=headers or {})
        r = c.getresponse()
        return r.status, r.read(), dict(r.getheaders())
    finally:
        c.close()


def start_server(tmp, model, *extra, wait_ready=True):
    """A server on a free port (another one when that port was taken between
    choosing and binding it, as thousands of test sockets make possible)."""
    for _ in range(5):
        try:
            return start_server_once(tmp, model, *extra, wait_ready=wait_ready)
        except RuntimeError as e:
            if "cannot listen" not in str(e):
                raise
    return start_server_once(tmp, model, *extra, wait_ready=wait_ready)


def start_server_once(tmp, model, *extra, wait_ready=True):
    base = os.path.join(tmp, model)
    if not os.path.exists(base):
        os.makedirs(os.path.join(base, "1"))
        subprocess.check_call([TOOL, "model", model, os.path.join(base, "1", "model.h5"), "1"])
    port = free_port()
    log = open(os.path.join(tmp, "serve-%d.log" % port), "w")
    p = subprocess.Popen([SERVE, "--model_name", "m", "--model_base_path", base, "--rest_api_port",
                          str(port), "--bind_address", "127.0.0.1", *extra],
                         stdout=log, stderr=subprocess.STDOUT)
    procs.append(p)
    deadline = time.time() + 60
    while wait_ready and time.time() < deadline:
        try:
            if request(port, "GET", "/v2/health/ready")[0] == 200:
                return p, port
        except (OSError, http.client.HTTPException):
            pass
        if p.poll() is not None:
            break
        time.sleep(0.1)
    if wait_ready:
        log.flush()
        with open(log.name) as f:
            tail = f.read()[-2000:]
        raise RuntimeError("weft-serve did not become ready (exit %s):\n%s" % (p.poll(), tail))
    return p, port


def zeros_body(n):
    row = "[" + ",".join(["[0.0,0.0,0.0]"] * 32) + "]"
    img = "[" + ",".join([row] * 32) + "]"
    return ('{"instances": [' + ",".join([img] * n) + "]}").encode()


def rss_kb(p, key):
    with open("/proc/%d/status" % p.pid) as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return -1


def wait_until(pred, seconds):
    """pred() polled until it holds or `seconds` pass; its last value."""
    deadline = time.time() + seconds
    while not pred() and time.time() < deadline:
        time.sleep(0.05)
    return pred()


def refuses(port):
    """True when a new connection to port is refused."""
    try:
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
        return False
    except OSError:
        return True


def p99(xs):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(0.99 * len(xs)))]


# ---- starve ---------------------------------------------------------------

class Hogs:
    """Slowloris connections (a header that never ends, one more header line
    every second) and idle keep-alive connections (one answered request, then
    silence), all held by one selector thread until stop()."""

    def __init__(self, port, slow, idle, sources):
        self.port, self.stop_flag = port, threading.Event()
        self.slow, self.idle, self.closed_early = [], [], 0
        self.sel = selectors.DefaultSelector()
        k = 0
        for i in range(slow + idle):
            s = socket.socket()
            s.bind((sources[k % len(sources)], 0))
            k += 1
            s.settimeout(10)
            try:
                s.connect(("127.0.0.1", port))
            except OSError:
                self.closed_early += 1
                s.close()
                continue
            if i < slow:
                s.sendall(b"POST /v1/models/m:predict HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n")
                self.slow.append(s)
            else:
                s.sendall(b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n")
                self.idle.append(s)
        for s in self.idle:  # read each answer; the connection stays open
            try:
                s.recv(4096)
            except OSError:
                self.closed_early += 1
        for s in self.slow + self.idle:
            s.setblocking(False)
        self.th = threading.Thread(target=self.run)
        self.th.start()

    def run(self):
        n = 0
        while not self.stop_flag.wait(1.0):
            n += 1
            for s in self.slow:
                try:
                    s.send(b"X-a%d: b\r\n" % n)
                except OSError:
                    pass

    def alive(self):
        """Connections the server has not closed."""
        n = 0
        for s in self.slow + self.idle:
            try:
                d = s.recv(65536)
                if d:
                    n += 1  # an answer (e.g. 408): the server is closing it
                    continue
            except BlockingIOError:
                n += 1
                continue
            except OSError:
                pass
        return n

    def stop(self):
        self.stop_flag.set()
        self.th.join()
        for s in self.slow + self.idle:
            s.close()


def latencies(port, n, source="127.0.0.1"):
    body = zeros_body(1)
    out, bad = [], 0
    for _ in range(n):
        t = time.time()
        try:
            code = request(port, "POST", "/v1/models/m:predict", body, source=source)[0]
        except (OSError, http.client.HTTPException):
            code = -1
        out.append(time.time() - t)
        bad += code != 200
    return out, bad


def starve(tmp):
    import resource
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = 4096 if hard == resource.RLIM_INFINITY else min(hard, 4096)
    if soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    if want < 2300:
        print("skip: the open-file limit (hard %d) is below the 2300 sockets this test holds" % hard)
        sys.exit(77)
    p, port = start_server(tmp, "smallcnn", "--client_header_timeout_seconds", "60",
                           "--idle_timeout_seconds", "120")
    try:
        # The machine is shared: a p99 over the target is measured again (a
        # starved server fails every attempt; noise does not repeat).
        for attempt in range(3):
            base, bad_base = latencies(port, 100)
            hogs = Hogs(port, 1000, 1000, ["127.0.0.1"])
            try:
                time.sleep(1.5)
                held = hogs.alive()
                under, bad = latencies(port, 100)
                held_after = hogs.alive()
            finally:
                hogs.stop()
            extra = p99(under) - p99(base)
            print("attempt %d: p99 without hogs %.1f ms, with 1000 slowloris + 1000 idle %.1f ms "
                  "(+%.1f ms); hog connections open %d then %d" %
                  (attempt + 1, p99(base) * 1e3, p99(under) * 1e3, extra * 1e3, held, held_after),
                  flush=True)
            if bad or bad_base or held < 1900 or extra < 0.1:
                break
            time.sleep(2)
        check(bad_base == 0, "normal client without hogs: 100/100 requests succeed")
        check(held >= 1900, "the server holds the 2000 hog connections (%d open)" % held)
        check(bad == 0, "normal client under 1000 slowloris + 1000 idle: 100/100 succeed")
        check(extra < 0.1, "p99 under attack within 100 ms of normal (+%.1f ms)" % (extra * 1e3))
    finally:
        stop(p)

    # Per-address limit: 127.0.0.1 holds at most 50; 127.0.0.2 still gets in.
    p, port = start_server(tmp, "smallcnn", "--max_connections_per_client", "50",
                           "--client_header_timeout_seconds", "60")
    try:
        hogs = Hogs(port, 100, 100, ["127.0.0.1"])
        try:
            wait_until(lambda: hogs.alive() <= 50, 10)  # the server closes the rest
            held = hogs.alive()
            _, bad = latencies(port, 20, source="127.0.0.2")
        finally:
            hogs.stop()
        check(held <= 50, "--max_connections_per_client 50: one address holds %d of 200" % held)
        check(bad == 0, "another address is served while one is at its limit")
    finally:
        stop(p)

    # Whole-header deadline: a header trickled one line a second is cut at 2 s.
    p, port = start_server(tmp, "smallcnn", "--client_header_timeout_seconds", "2")
    try:
        s = socket.create_connection(("127.0.0.1", port))
        s.settimeout(0.5)
        t0, closed_at = time.time(), None
        s.sendall(b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\n")
        while time.time() - t0 < 10 and closed_at is None:
            try:
                s.sendall(b"X-slow: 1\r\n")
                if s.recv(4096) == b"":
                    closed_at = time.time() - t0
            except socket.timeout:
                pass
            except OSError:
                closed_at = time.time() - t0
        s.close()
        print("trickled header closed after %s s" % closed_at)
        check(closed_at is not None and 1.5 <= closed_at <= 5,
              "a header not complete within --client_header_timeout_seconds 2 is cut (%s s)"
              % closed_at)
    finally:
        stop(p)


# ---- drain ----------------------------------------------------------------

def read_response(s):
    """One HTTP/1.1 response from socket s: (status, headers dict, body)."""
    buf = b""
    while b"\r\n\r\n" not in buf:
        d = s.recv(65536)
        if not d:
            raise OSError("connection closed before a response header")
        buf += d
    head, body = buf.split(b"\r\n\r\n", 1)
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    hdrs = {}
    for l in lines[1:]:
        k, v = l.split(":", 1)
        hdrs[k.strip().lower()] = v.strip()
    n = int(hdrs.get("content-length", "0"))
    while len(body) < n:
        d = s.recv(65536)
        if not d:
            raise OSError("connection closed mid-body")
        body += d
    return status, hdrs, body


def drain(tmp):
    # Requests wait up to 5 s in the batcher for a batch of 64 to fill; one
    # batch thread, so a large request queued behind that batch cannot start
    # before SIGTERM flushes it: the server is still computing it after the
    # signal, whatever the machine's speed, and must finish it before exiting.
    p, port = start_server(tmp, "smallcnn", "--enable_batching", "--max_batch_size", "64",
                           "--num_batch_threads", "1", "--batch_timeout_micros", "5000000",
                           "--drain_timeout_seconds", "20")
    body = zeros_body(1)
    req = (b"POST /v1/models/m:predict HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
           b"Content-Length: %d\r\n\r\n" % len(body))
    big_n = 768
    big_body = zeros_body(big_n)
    big_req = (b"POST /v1/models/m:predict HTTP/1.1\r\nHost: x\r\n"
               b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(big_body))
    results = {}
    try:
        # A keep-alive connection: one answered request, then one held in the batcher.
        ka = socket.create_connection(("127.0.0.1", port), timeout=30)
        ka.sendall(b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n")
        st, hd, _ = read_response(ka)
        check(st == 200 and hd.get("connection", "").lower() != "close",
              "keep-alive connection open before SIGTERM")
        ka.sendall(req + body)
        # Two more requests held in the batcher on their own connections.
        held = [socket.create_connection(("127.0.0.1", port), timeout=30) for _ in range(2)]
        for s in held:
            s.sendall(req + body)
        # One request mid-upload: header and half the body now, the rest after SIGTERM.
        up = socket.create_connection(("127.0.0.1", port), timeout=30)
        up.sendall(req + body[:len(body) // 2])
        # One request mid-header: its request line and a header line now, the
        # rest after every other answer (the drain must wait for it).
        hdr = socket.create_connection(("127.0.0.1", port), timeout=30)
        hdr.sendall(req[:req.index(b"Content-Type")])
        # A large request (768 samples, 12 forwards of 64) queued behind the held batch.
        big = socket.create_connection(("127.0.0.1", port), timeout=60)
        big.sendall(big_req + big_body)
        time.sleep(1.0)
        socks = [("keep-alive", ka), ("held 1", held[0]), ("held 2", held[1]),
                 ("mid-upload", up), ("large", big)]
        readable, _, _ = select.select([s for _, s in socks] + [hdr], [], [], 0)
        check(not readable, "no request was answered before SIGTERM (%d were)" % len(readable))
        t_term = time.time()
        p.send_signal(signal.SIGTERM)
        check(wait_until(lambda: refuses(port), 5), "no new connection is accepted after SIGTERM")
        time.sleep(0.5)
        up.sendall(body[len(body) // 2:])
        for name, s in socks:
            try:
                st, hd, b = read_response(s)
                doc = json.loads(b)
                results[name] = (st, hd.get("connection", "").lower(),
                                 len(doc.get("predictions", [])))
            except (OSError, ValueError) as e:
                results[name] = (-1, str(e), 0)
            s.close()
        time.sleep(0.5)
        try:
            hdr.sendall(req[req.index(b"Content-Type"):] + body)
            st, hd, b = read_response(hdr)
            results["mid-header"] = (st, hd.get("connection", "").lower(),
                                     len(json.loads(b).get("predictions", [])))
        except (OSError, ValueError) as e:
            results["mid-header"] = (-1, str(e), 0)
        hdr.close()
        rc = p.wait(timeout=30)
        took = time.time() - t_term
        print("drain results %s; exit %d after %.2f s" % (results, rc, took), flush=True)
        for name, (st, conn, npred) in results.items():
            want = big_n if name == "large" else 1
            check(st == 200 and npred == want,
                  "%s request answered completely after SIGTERM (%d of %d predictions)"
                  % (name, npred, want))
        check(results["keep-alive"][1] == "close", "keep-alive answer carries Connection: close")
        check(results["mid-header"][1] == "close", "mid-header answer carries Connection: close")
        check(rc == 0 and took < 20, "exit 0 within the drain timeout (%.2f s)" % took)
    finally:
        if p.poll() is None:
            p.kill()


# ---- overload -------------------------------------------------------------

def overload(tmp):
    # One forward thread, a slow model, a queue of 2: most of 12 concurrent
    # requests must be refused at once with 429 + Retry-After.
    p, port = start_server(tmp, "resnet20", "--device", "ref", "--num_batch_threads", "1",
                           "--max_queue_size", "2", "--retry_after_seconds", "3")
    try:
        body = zeros_body(8)
        t = time.time()
        request(port, "POST", "/v1/models/m:predict", body)
        one = time.time() - t
        res = []

        def one_req():
            t0 = time.time()
            try:
                st, _, hd = request(port, "POST", "/v1/models/m:predict", body, timeout=120)
            except OSError:
                st, hd = -1, {}
            res.append((st, time.time() - t0, hd.get("Retry-After")))

        ths = [threading.Thread(target=one_req) for _ in range(12)]
        for th in ths:
            th.start()
        for th in ths:
            th.join()
        print("times", sorted(round(r[1], 2) for r in res))
        ok = [r for r in res if r[0] == 200]
        busy = [r for r in res if r[0] == 429]
        print("one request %.2f s; 12 at once: %d x 200, %d x 429 (slowest 429 %.2f s)" %
              (one, len(ok), len(busy), max([r[1] for r in busy] or [0])), flush=True)
        # 3-4 when the forward thread took the first request before the
        # third came; on a loaded machine it may wake after all 12 came: 2
        check(len(ok) + len(busy) == 12 and 2 <= len(ok) <= 4 and len(busy) >= 8,
              "queue of 2 + 1 running: 2-4 answered, the rest 429 (%d/%d)" % (len(ok), len(busy)))
        check(all(r[2] == "3" for r in busy), "429 answers carry Retry-After: 3")
        check(busy and max(r[1] for r in busy) < max(0.5 * one, 0.2),
              "429 comes at once, not after a forward")
    finally:
        stop(p)

    # Body budget: one 2 MB upload in progress holds the budget of 3 MB, a
    # second 2 MB body is refused with 503 + Retry-After before it is sent.
    p, port = start_server(tmp, "smallcnn", "--max_request_bytes", "2000000",
                           "--max_body_bytes_in_flight", "3000000")
    try:
        body = zeros_body(1)
        pad = body + b" " * (2000000 - len(body))
        up = socket.create_connection(("127.0.0.1", port), timeout=30)
        up.sendall(b"POST /v1/models/m:predict HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n"
                   % len(pad) + pad[:1000])
        time.sleep(0.3)
        # The answer comes after the header alone, before any body byte is sent.
        s = socket.create_connection(("127.0.0.1", port), timeout=10)
        s.sendall(b"POST /v1/models/m:predict HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n"
                  % len(pad))
        try:
            st, hd, _ = read_response(s)
        except OSError:
            st, hd = -1, {}
        s.close()
        check(st == 503 and "retry-after" in hd,
              "a body over the in-flight budget gets 503 + Retry-After at once (%d)" % st)
        # A gzip body of a few KB that inflates to 1.5 MB counts at its inflated size.
        gz = gzip.compress(body + b" " * (1500000 - len(body)))
        gz_head = {"Content-Encoding": "gzip", "Content-Type": "application/json"}
        st, _, hd = request(port, "POST", "/v1/models/m:predict", gz, headers=gz_head)
        check(st == 503 and "Retry-After" in hd,
              "a %d-byte gzip body inflating over the in-flight budget gets 503 + Retry-After "
              "(%d)" % (len(gz), st))
        up.sendall(pad[1000:])
        st1 = read_response(up)[0]
        up.close()
        st2 = request(port, "POST", "/v1/models/m:predict", pad)[0]
        st3 = request(port, "POST", "/v1/models/m:predict", gz, headers=gz_head)[0]
        check(st1 == 200 and st2 == 200 and st3 == 200,
              "the bodies are served once the budget frees (%d, %d, gzip %d)" % (st1, st2, st3))
    finally:
        stop(p)

    # Memory: 32 MB JSON bodies, three in a row. The peak stays near body +
    # floats (no JSON tree of ~20x the body) and resident memory returns.
    p, port = start_server(tmp, "smallcnn")
    try:
        n = (32 << 20) // len(zeros_body(1))
        body = zeros_body(n)
        before = rss_kb(p, "VmRSS")
        codes = [request(port, "POST", "/v1/models/m:predict", body, timeout=120)[0]
                 for _ in range(3)]
        time.sleep(0.5)
        after, hwm = rss_kb(p, "VmRSS"), rss_kb(p, "VmHWM")
        print("3 x 32 MB JSON body (%d samples each): %s; VmRSS %d -> %d MB, VmHWM %d MB" %
              (n, codes, before >> 10, after >> 10, hwm >> 10), flush=True)
        check(codes == [200] * 3, "32 MB JSON bodies are served")
        check(hwm - before < 200 << 10,
              "peak memory for a 32 MB body under 200 MB above idle (%d MB)" % ((hwm - before) >> 10))
        check(after - before < 50 << 10,
              "RSS after three 32 MB bodies within 50 MB of idle (%d MB)" % ((after - before) >> 10))
    finally:
        stop(p)

    # The same for a KServe v2 JSON body: its "data" array is read without a tree.
    p, port = start_server(tmp, "smallcnn")
    try:
        samples = zeros_body(n)[len(b'{"instances": '):-1]
        body = (b'{"inputs": [{"name": "input", "datatype": "FP32", "shape": [%d, 32, 32, 3], '
                b'"data": ' % n) + samples + b'}]}'
        before = rss_kb(p, "VmRSS")
        st, reply, _ = request(port, "POST", "/v2/models/m/infer", body, timeout=120)
        time.sleep(0.5)
        hwm = rss_kb(p, "VmHWM")
        print("32 MB KServe JSON body (%d samples): %d; VmRSS before %d MB, VmHWM %d MB" %
              (n, st, before >> 10, hwm >> 10), flush=True)
        check(st == 200, "a 32 MB KServe JSON body is served (%d %s)" % (st, reply[:200]))
        check(hwm - before < 200 << 10,
              "peak memory for a 32 MB KServe body under 200 MB above idle (%d MB)" %
              ((hwm - before) >> 10))
    finally:
        stop(p)


# ---- jsonparse -------------------------------------------------------------

def nan_body(n):
    row = "[" + ",".join(["[NaN,NaN,NaN]"] * 32) + "]"
    img = "[" + ",".join([row] * 32) + "]"
    return ('{"instances": [' + ",".join([img] * n) + "]}").encode()


def jsonparse(tmp):
    budget = 8000000
    p, port = start_server(tmp, "smallcnn", "--max_request_bytes", "4000000",
                           "--max_body_bytes_in_flight", str(budget))
    try:
        ok = zeros_body(1)
        check(request(port, "POST", "/v1/models/m:predict", ok)[0] == 200, "a plain body first")
        big = nan_body(2000000 // len(nan_body(1)))
        st, reply, hd = request(port, "POST", "/v1/models/m:predict", big)
        print("%d-byte NaN body, budget %d: %d %s" % (len(big), budget, st, reply[:300]),
              flush=True)
        check(st == 413 and b"needs more memory to parse than the budget" in reply,
              "a NaN body whose tree alone exceeds the budget gets 413 naming it (%d)" % st)
        check(request(port, "POST", "/v1/models/m:predict", ok)[0] == 200,
              "a plain body after the refusal")
        st, reply, _ = request(port, "POST", "/v2/models/m/infer",
                               b'{"inputs": [{"name": "input", "datatype": "FP32", '
                               b'"shape": [%d, 32, 32, 3], "data": ' % (len(big) // 14000) +
                               big[len(b'{"instances": '):-1] + b'}]}')
        check(st == 413, "the same for a KServe JSON tensor of NaNs (%d)" % st)
        small = nan_body(20)
        check(request(port, "POST", "/v1/models/m:predict", small)[0] == 200,
              "a %d-byte NaN body that fits is served" % len(small))
        # A 3.9 MB upload in progress holds half the budget: the same NaN
        # body does not fit beside it (429 at once), and does once it is done.
        pad = ok + b" " * (3900000 - len(ok))
        up = socket.create_connection(("127.0.0.1", port), timeout=30)
        up.sendall(b"POST /v1/models/m:predict HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n"
                   % len(pad) + pad[:1000])
        st, reply, hd = 0, b"", {}
        for _ in range(100):  # until the server has read the upload's header
            st, reply, hd = request(port, "POST", "/v1/models/m:predict", small)
            if st != 200:
                break
        print("%d-byte NaN body beside a 3.9 MB upload: %d %s" % (len(small), st, reply[:200]),
              flush=True)
        check(st == 429 and hd.get("Retry-After") and b"retry later" in reply,
              "a NaN body that does not fit beside a body in flight gets 429 + Retry-After (%d)"
              % st)
        check(request(port, "POST", "/v1/models/m:predict", ok)[0] == 200,
              "a plain body is served while the upload holds the budget")
        up.sendall(pad[1000:])
        st1 = read_response(up)[0]
        up.close()
        st2 = request(port, "POST", "/v1/models/m:predict", small)[0]
        check(st1 == 200 and st2 == 200,
              "the upload and then the NaN body are served (%d, %d)" % (st1, st2))
    finally:
        stop(p)

    # Memory: a 20 MB NaN body at the default budget (4 x 64 MiB): refused
    # within the budget instead of a tree of ~20x the body.
    p, port = start_server(tmp, "smallcnn")
    try:
        body = nan_body((20 << 20) // len(nan_body(1)))
        before = rss_kb(p, "VmRSS")
        st, reply, _ = request(port, "POST", "/v1/models/m:predict", body, timeout=120)
        hwm = rss_kb(p, "VmHWM")
        print("%d-byte NaN body: %d; VmRSS before %d MB, VmHWM %d MB" %
              (len(body), st, before >> 10, hwm >> 10), flush=True)
        check(st == 413, "a 20 MB NaN body is refused at the default budget (%d)" % st)
        check(hwm - before < 300 << 10, "its peak memory stays within the 256 MiB budget "
              "(%d MB above idle)" % ((hwm - before) >> 10))
        check(request(port, "POST", "/v1/models/m:predict", zeros_body(1))[0] == 200,
              "and the server answers after it")
    finally:
        stop(p)


# ---- tls ------------------------------------------------------------------

def curl(*args):
    r = subprocess.run(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "--max-time", "20",
                        *args], capture_output=True, text=True)
    return r.stdout.strip() or "000"


def tls(tmp):
    if not shutil.which("curl") or not shutil.which("openssl"):
        print("skip: curl or openssl not found")
        sys.exit(77)
    key, cert = os.path.join(tmp, "key.pem"), os.path.join(tmp, "cert.pem")
    subprocess.check_call(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days",
                           "2", "-subj", "/CN=localhost", "-addext",
                           "subjectAltName=DNS:localhost,IP:127.0.0.1", "-keyout", key, "-out",
                           cert], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    token = os.path.join(tmp, "token")
    with open(token, "w") as f:
        f.write("s3cret-token-0123456789\n")
    os.chmod(token, 0o600)
    r = subprocess.run([SERVE, "--model_base_path", tmp, "--ssl_cert_file", cert],
                       capture_output=True, text=True)
    check(r.returncode != 0 and "--ssl_key_file" in r.stderr, "a certificate without a key is refused")
    p, port = start_server(tmp, "smallcnn", "--ssl_cert_file", cert, "--ssl_key_file", key,
                           "--auth_token_file", token, wait_ready=False)
    try:
        url = "https://127.0.0.1:%d" % port
        deadline = time.time() + 60
        while time.time() < deadline and curl("--cacert", cert, url + "/v2/health/ready") != "200":
            time.sleep(0.2)
        check(curl("--cacert", cert, url + "/v2/health/ready") == "200",
              "HTTPS: readiness probe open without a token (curl --cacert)")
        check(curl("--cacert", cert, url + "/v2/health/live") == "200", "liveness open")
        check(curl("--cacert", cert, url + "/v1/models/m") == "401", "no token: 401")
        check(curl("--cacert", cert, "-H", "Authorization: Bearer wrong-token-0123456789",
                   url + "/v1/models/m") == "401", "wrong token: 401")
        auth = ["-H", "Authorization: Bearer s3cret-token-0123456789"]
        check(curl("--cacert", cert, *auth, url + "/v1/models/m") == "200", "right token: 200")
        body = os.path.join(tmp, "body.json")
        with open(body, "wb") as f:
            f.write(zeros_body(2))
        check(curl("--cacert", cert, *auth, "--data-binary", "@" + body,
                   url + "/v1/models/m:predict") == "200", "predict over HTTPS with the token")
        check(curl("--cacert", cert, "--data-binary", "@" + body, url + "/v1/models/m:predict")
              == "401", "predict without the token: 401")
        check(curl(*auth, url + "/v1/models/m") == "000",
              "an unknown certificate is rejected by curl (the server really speaks TLS)")
        check(curl("http://127.0.0.1:%d/v2/health/live" % port) == "000", "no plain HTTP on the port")
    finally:
        stop(p)

    # The same key pair through TF Serving's --ssl_config_file: the key as one
    # escaped literal, the certificate pasted with its newlines.
    with open(key) as f:
        key_pem = f.read()
    with open(cert) as f:
        cert_pem = f.read()
    conf = os.path.join(tmp, "ssl.conf")
    with open(conf, "w") as f:
        f.write("# SSLConfig\nserver_key: \"%s\"\nserver_cert: \"%s\"\nclient_verify: false\n"
                % (key_pem.replace("\n", "\\n"), cert_pem))
    bad = os.path.join(tmp, "bad.conf")
    with open(bad, "w") as f:
        f.write("server_key: \"x\"\nserver_certificate: \"y\"\n")
    r = subprocess.run([SERVE, "--model_base_path", tmp, "--ssl_config_file", bad],
                       capture_output=True, text=True)
    check(r.returncode != 0 and "server_certificate" in r.stderr and "line 2" in r.stderr,
          "an SSL config with an unknown field is refused, naming it and its line")
    p, port = start_server(tmp, "smallcnn", "--ssl_config_file", conf, wait_ready=False)
    try:
        url = "https://127.0.0.1:%d/v2/health/ready" % port
        deadline = time.time() + 60
        while time.time() < deadline and curl("--cacert", cert, url) != "200":
            time.sleep(0.2)
        check(curl("--cacert", cert, url) == "200", "HTTPS from --ssl_config_file")
    finally:
        stop(p)


def main():
    mode = sys.argv[1]
    tmp = tempfile.mkdtemp(prefix="weft-serve-%s-" % mode)
    try:
        {"starve": starve, "drain": drain, "overload": overload, "jsonparse": jsonparse,
         "tls": tls}[mode](tmp)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        if failures:
            for name in os.listdir(tmp):
                if name.endswith(".log"):
                    print("---- " + name)
                    with open(os.path.join(tmp, name)) as f:
                        print(f.read()[-3000:])
        shutil.rmtree(tmp, ignore_errors=True)
    print("%d failures" % len(failures))
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
