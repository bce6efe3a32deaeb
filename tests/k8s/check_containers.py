"""check_containers.py: static checks of k8s/docker/Dockerfile.* against
this build (see test_containers.sh). usage: check_containers.py SRC BUILD"""
import os
import re
import subprocess
import sys

SRC, BUILD = sys.argv[1], sys.argv[2]
failures = []
# in every Debian base image (essential), so not installed explicitly
ESSENTIAL = {"libc6", "libgcc-s1", "libstdc++6"}
# CUDA libraries come from NVIDIA's repository; the package each needs
CUDA = {"libcudart": "cuda-cudart-", "libcublas": "libcublas-", "libcublasLt": "libcublas-",
        "libcudnn": "libcudnn9-cuda-", "libnccl": "libnccl2"}


def check(cond, msg):
    if not cond:
        failures.append(msg)
        print("FAIL: " + msg, file=sys.stderr)


def stages(text):
    """[(FROM line, [instructions])] with continuation lines joined."""
    text = re.sub(r"\\\n", " ", text)
    out = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.upper().startswith("FROM "):
            out.append((line, []))
        elif out:
            out[-1][1].append(line)
    return out


def needed(binary):
    out = subprocess.run(["readelf", "-d", binary], capture_output=True, text=True).stdout
    return re.findall(r"\(NEEDED\)\s+Shared library: \[(.*)\]", out)


def debian_package(soname):
    out = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True).stdout
    m = re.search(r"^\s*%s \(.*x86-64.*\) => (\S+)" % re.escape(soname), out, re.M)
    if not m:
        return None
    path = os.path.realpath(m.group(1))
    for p in (path, m.group(1)):
        r = subprocess.run(["dpkg", "-S", p], capture_output=True, text=True)
        if r.returncode == 0:
            return r.stdout.split(":")[0]
    return None


def main():
    for name, binary, cuda in (("Dockerfile.train", "weft", True),
                               ("Dockerfile.serve-cpu", "weft-serve", False),
                               ("Dockerfile.serve-cuda", "weft-serve", True)):
        w = "k8s/docker/" + name
        with open(os.path.join(SRC, w)) as f:
            text = f.read()
        st = stages(text)
        check(len(st) >= 2 and re.search(r"\bAS build\b", st[0][0]), "%s: not a multi-stage build" % w)
        if len(st) < 2:
            continue
        build, final = st[0][1], st[-1][1]
        check(any("--target %s" % binary in i for i in build), "%s: the build stage does not build %s" % (w, binary))
        copies = [i.split()[1:] for i in final if i.startswith("COPY ")]
        frm = [c for c in copies if c[0].startswith("--from=build")]
        check(len(frm) == 1 and frm[0][1] == "/src/build/" + binary,
              "%s: the runtime stage should copy exactly /src/build/%s from the build" % (w, binary))
        built = os.path.join(BUILD, binary)
        check(os.access(built, os.X_OK), "%s: %s is not what this build makes (%s missing)" % (w, binary, built))
        dest = frm[0][2] if frm else ""
        entry = [i for i in final if i.startswith("ENTRYPOINT")]
        check(entry and entry[-1] == 'ENTRYPOINT ["%s"]' % binary and dest == "/usr/local/bin/" + binary,
              "%s: the entrypoint is not the copied %s on PATH" % (w, binary))
        for c in copies:
            if not c[0].startswith("--"):
                check(os.path.exists(os.path.join(SRC, c[0])), "%s: COPY %s: no such file" % (w, c[0]))
            check(not re.search(r"\.h5$|models?/|/run/", " ".join(c)), "%s: a model or data is baked in: %s" % (w, c))
        users = [i.split()[1] for i in final if i.startswith("USER ")]
        check(users and users[-1].split(":")[0] not in ("0", "root"), "%s: the image runs as root" % w)
        ign = os.path.join(SRC, w + ".dockerignore")
        check(os.path.exists(ign), "%s: no %s.dockerignore (the build context would hold build dirs)" % (w, name))
        # the runtime stage installs a package for every library the binary links
        runtime = " ".join(i for i in final if i.startswith("RUN "))
        pkgs = set(re.findall(r"[a-z0-9][a-z0-9.+-]*(?:\$\{CUDA_PKG\})?", runtime))
        pkgs = {p.replace("${CUDA_PKG}", "12-6") for p in pkgs}
        for so in needed(built):
            base = so.split(".so")[0]
            if base in CUDA:
                if cuda:
                    check(any(p.startswith(CUDA[base]) for p in pkgs), "%s: %s needs %s*" % (w, so, CUDA[base]))
                continue
            pkg = debian_package(so)
            check(pkg in ESSENTIAL or pkg in pkgs, "%s: %s links %s (Debian %s), not installed in the runtime stage"
                  % (w, binary, so, pkg))
        if binary == "weft-serve":
            bad = [so for so in needed(built) if re.match(r"lib(mpi|zmq|nccl)", so)]
            check(not bad, "%s: weft-serve links %s (docs/architecture.md: no MPI, NCCL or ZeroMQ)" % (w, bad))
            check(not re.search(r"\b(libzmq5|libopenmpi3|libnccl2|openmpi-bin)\b", runtime),
                  "%s: the serving image installs training-only libraries" % w)
    if failures:
        sys.exit(1)
    print("container files: multi-stage, non-root, no model inside; binaries and runtime libraries match "
          "this build")


main()
