# test_manifests.sh: every manifest under k8s/ validates against the
# Kubernetes 1.30 schemas in strict mode, and fits together
# (check_manifests.py). kubernetes-validate (PyPI; the schemas ship with it)
# is installed once into a venv in the build directory; without PyPI the
# test skips (77). Renders with `kubectl kustomize` where a kubectl is
# installed, and always with check_manifests.py's own kustomize (they must
# agree). Then the checker must catch two broken copies.
set -euo pipefail
: "${WEFT_SRC:?set WEFT_SRC to the source tree}"
: "${WEFT_BUILD:?set WEFT_BUILD to the build directory}"
VENV="$WEFT_BUILD/k8s-venv"
PKG="kubernetes-validate==1.37.0"
if ! "$VENV/bin/python" -c "import kubernetes_validate, yaml" 2>/dev/null; then
	rm -rf "$VENV"
	python3 -m venv "$VENV" || {
		echo "SKIP: python3 -m venv failed (Debian: apt-get install python3-venv)"
		exit 77
	}
	if ! timeout 180 "$VENV/bin/pip" install -q --disable-pip-version-check "$PKG" >"$VENV.log" 2>&1; then
		tail -5 "$VENV.log"
		rm -rf "$VENV"
		echo "SKIP: cannot install $PKG from PyPI (offline?): the manifests were not validated"
		exit 77
	fi
fi
# a kubectl whose built-in kustomize knows `patches:` (kustomize v4 and later;
# Debian's kubernetes-client 1.20 has v2)
KUBECTL=""
kv=$(timeout 20 kubectl version --client 2>/dev/null | sed -n 's/^Kustomize Version: v\([0-9]*\).*/\1/p') || true
if [ -n "$kv" ] && [ "$kv" -ge 4 ]; then
	KUBECTL=$(command -v kubectl)
else
	echo "note: no kubectl with kustomize v4+ here: rendering with check_manifests.py's own kustomize only"
fi
PY="$VENV/bin/python"
"$PY" "$WEFT_SRC/tests/k8s/check_manifests.py" "$WEFT_SRC/k8s" "$WEFT_SRC" $KUBECTL

# the checker is not a rubber stamp: two broken copies must fail
WORK=$(mktemp -d /tmp/weft-k8s-test.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
broken() { # broken NAME FILE SED-EXPR NEEDLE
	rm -rf "$WORK/k8s" && cp -r "$WEFT_SRC/k8s" "$WORK/k8s"
	sed -i "$3" "$WORK/k8s/$2"
	cmp -s "$WEFT_SRC/k8s/$2" "$WORK/k8s/$2" && { echo "FAIL: $1: the edit did not apply"; exit 1; }
	if "$PY" "$WEFT_SRC/tests/k8s/check_manifests.py" "$WORK/k8s" "$WEFT_SRC" >"$WORK/out" 2>&1; then
		echo "FAIL: $1 passed the check"
		exit 1
	fi
	grep -qF -- "$4" "$WORK/out" || { echo "FAIL: $1: not named: $(cat "$WORK/out")"; exit 1; }
}
broken "an unknown field" base/train/ps.yaml 's/  completionMode: Indexed/  completionMode: Indexed\n  replicas: 2/' \
	"'replicas' was unexpected"
broken "a grace period shorter than the drain" base/serve/serve.yaml \
	's/terminationGracePeriodSeconds: 40/terminationGracePeriodSeconds: 20/' "terminationGracePeriodSeconds 20"
broken "a ps count that differs from the Job's completions" base/common/config.yaml \
	's/WEFT_NUM_PS: "2"/WEFT_NUM_PS: "3"/' "completions/parallelism != WEFT_NUM_PS 3"
broken "the model name set twice" base/serve/serve.yaml \
	's|- \$(WEFT_MODEL_NAME)$|- synth|' "weft-serve does not serve"
broken "synthetic data made in every pod again" base/train/worker.yaml \
	's|      containers:|      initContainers:\n        - {name: data, image: weft-train, args: [data, synth, --out, /data/train.h5]}\n      containers:|' \
	"init containers"
broken "servers that need the data" base/common/config.yaml \
	's/, "input_shape": \[32, 32, 3\]//' "lacks model.input_shape"
echo ok
