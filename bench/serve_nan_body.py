"""serve_nan_body.py WEFT_SERVE MODEL_BASE: weft-serve with its default flags
serving MODEL_BASE as model m (e.g. `serve_tool model smallcnn B/1/model.h5`);
one 60 MB TF Serving :predict body of NaNs, then four at once, then a plain
request: prints each answer and the server's peak resident memory (VmHWM).
The README's "Limits and security" lists the result."""
import http.client
import socket
import subprocess
import sys
import threading
import time

serve, base = sys.argv[1], sys.argv[2]
s = socket.socket()
s.bind(("127.0.0.1", 0))
port = s.getsockname()[1]
s.close()
p = subprocess.Popen([serve, "--model_name", "m", "--model_base_path", base, "--rest_api_port",
                      str(port), "--port", "0", "--grpc_port", "0"], stderr=subprocess.DEVNULL)


def req(body):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
    c.request("POST", "/v1/models/m:predict", body)
    r = c.getresponse()
    d = r.read()
    c.close()
    return r.status, d[:120]


def hwm():
    for line in open("/proc/%d/status" % p.pid):
        if line.startswith("VmHWM"):
            return int(line.split()[1]) >> 10


def ready():
    try:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
        c.request("GET", "/v2/health/ready")
        return c.getresponse().status == 200
    except OSError:
        return False


try:
    for _ in range(600):
        if ready():
            break
        time.sleep(0.1)
    row = "[" + ",".join(["[NaN,NaN,NaN]"] * 32) + "]"
    img = "[" + ",".join([row] * 32) + "]"
    n = (60 << 20) // (len(img) + 1)
    body = ('{"instances": [' + ",".join([img] * n) + "]}").encode()
    print("idle VmHWM %d MB; body %d bytes" % (hwm(), len(body)))
    print("one:", req(body), "VmHWM %d MB" % hwm())
    res = []
    ts = [threading.Thread(target=lambda: res.append(req(body)[0])) for _ in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    print("four at once:", res, "VmHWM %d MB" % hwm())
    row0 = "[" + ",".join(["[0.0,0.0,0.0]"] * 32) + "]"
    print("a plain request after:", req(('{"instances": [[' + ",".join([row0] * 32) + "]]}").encode())[0])
finally:
    p.terminate()
    p.wait()
