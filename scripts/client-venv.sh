#!/usr/bin/env bash
# client-venv.sh: create (once) the cached venv of real weft-serve clients
# (tritonclient, perf_analyzer, TF Serving's gRPC stubs) from
# scripts/client-requirements.txt and, with --no-deps,
# scripts/client-requirements-nodeps.txt, and print its directory.
# Idempotent: a venv whose stamp matches the requirements files is reused. Exit 77 (ctest's "skipped") with a message when PyPI cannot be
# reached; 1 on any other failure.
#   usage: VENV=$(scripts/client-venv.sh) || exit $?
#   env:   WEFT_VENV_DIR (default ~/.cache/weft); the venv is $WEFT_VENV_DIR/clients
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
req="$here/client-requirements.txt"
nodeps="$here/client-requirements-nodeps.txt"
venv="${WEFT_VENV_DIR:-$HOME/.cache/weft}/clients"
stamp="$venv/.weft-requirements"
want="$(cat "$req" "$nodeps")"
fresh() { [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && [ -x "$venv/bin/python" ]; }
if fresh; then
	echo "$venv"
	exit 0
fi
command -v python3 >/dev/null || { echo "skip: python3 not found" >&2; exit 77; }
if ! python3 - <<'PY' >/dev/null 2>&1; then
import urllib.request
urllib.request.urlopen("https://pypi.org/simple/tritonclient/", timeout=15)
PY
	echo "skip: PyPI (https://pypi.org) cannot be reached; the client venv $venv cannot be built" >&2
	exit 77
fi
mkdir -p "$(dirname "$venv")"
lock="$venv.lock"
exec 9>"$lock"
flock 9 # two tests building the venv at once: the second waits
if fresh; then
	echo "$venv"
	exit 0
fi
rm -rf "$venv"
python3 -m venv "$venv" >&2
"$venv/bin/pip" install --quiet -r "$req" >&2 || {
	echo "client-venv.sh: pip install -r $req failed" >&2
	exit 1
}
"$venv/bin/pip" install --quiet --no-deps -r "$nodeps" >&2 || {
	echo "client-venv.sh: pip install --no-deps -r $nodeps failed" >&2
	exit 1
}
printf '%s\n' "$want" >"$stamp"
echo "$venv"
