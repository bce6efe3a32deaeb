"""peak_rss.py OUT CMD...: run CMD and write "EXIT PEAK_KIB" into OUT: its exit
status and the peak resident memory of the largest of CMD and every process
it waited for (a sandboxed child included), from getrusage(RUSAGE_CHILDREN).
SIGTERM and SIGINT are passed on to CMD."""
import os
import resource
import signal
import subprocess
import sys

out, cmd = sys.argv[1], sys.argv[2:]
p = subprocess.Popen(cmd)
for s in (signal.SIGTERM, signal.SIGINT):
    signal.signal(s, lambda sig, _f: p.send_signal(sig))
rc = p.wait()
kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
with open(out + ".tmp", "w") as f:
    f.write("%d %d\n" % (rc, kib))
os.replace(out + ".tmp", out)
