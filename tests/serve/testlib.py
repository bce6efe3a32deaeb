"""What every weft-serve test script shares: the check log and a free port."""
import socket

failures = []  # what failed, in order; a script exits 1 when it is not empty


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if not cond:
        failures.append(what)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port
