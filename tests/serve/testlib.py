"""What every weft-serve test script shares: the check log, a free port,
stopping a server and the end of a script."""
import os
import shutil
import signal
import socket
import subprocess
import urllib.error
import urllib.request

failures = []  # what failed, in order; a script exits 1 when it is not empty


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if not cond:
        failures.append(what)


def http(port, path, headers=None, data=None, method=None):
    """(status, headers, body) of one request to the loopback port; errors
    are answers too."""
    req = urllib.request.Request("http://127.0.0.1:%d%s" % (port, path), data=data,
                                 headers=headers or {}, method=method)
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def stop(p):
    """SIGTERM a weft-serve and wait for it (killed after 30 s)."""
    if p.poll() is None:
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def finish(procs, tmp, skipped=()):
    """The end of a test script: kill what still runs, print the logs in tmp
    (kept) on failure or remove tmp; returns the exit status (77 when some
    checks in skipped did not run: a skip, never a pass)."""
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
    print("%d failures, %d skipped" % (len(failures), len(skipped)))
    return 1 if failures else 77 if skipped else 0
