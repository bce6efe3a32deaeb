#!/usr/bin/env bash
# A photo scores the same from a converted dataset as over HTTP: a folder of
# JPEGs of assorted sizes (classes of overlapping colours, so the small model
# trained here is unsure about many of them and any difference in decoding, resizing or
# preprocessing changes its answers) is converted by `weft data images`, a
# smallcnn is trained on it and exported; the eval accuracy of the dataset
# (`weft eval`) must equal weft-bench's accuracy on the same JPEG files sent to
# weft-serve (TF Serving b64 and KServe BYTES), counted image by image.
set -euo pipefail
: "${WEFT:?set by ctest}"
if [ -z "${WEFT_SERVE:-}" ] || [ ! -x "$WEFT_SERVE" ] || [ ! -x "${WEFT_BENCH:-}" ]; then
	echo "SKIP: weft-serve or weft-bench not built"; exit 77
fi
VENV="${WEFT_VENV_DIR:-$HOME/.cache/weft}/pillow"
mkdir -p "$(dirname "$VENV")"
(
	flock 9
	if ! "$VENV/bin/python" -c "import PIL, numpy, h5py" 2>/dev/null; then
		python3 -m venv "$VENV" || { echo "SKIP: python3 -m venv failed"; exit 77; }
		"$VENV/bin/pip" install -q pillow numpy h5py ||
			{ echo "SKIP: cannot install pillow numpy h5py from PyPI"; exit 77; }
	fi
) 9>"$VENV.lock"
T=$(mktemp -d)
SERVE_PID=
cleanup() {
	[ -n "$SERVE_PID" ] && kill "$SERVE_PID" 2>/dev/null && wait "$SERVE_PID" 2>/dev/null
	rm -rf "$T"
}
trap cleanup EXIT
cd "$T"
"$VENV/bin/python" - photos <<'PY'
import os, sys
import numpy as np
from PIL import Image
rng = np.random.default_rng(5)
for i in range(96):
    k = int(rng.integers(2))
    d = os.path.join(sys.argv[1], ["apples", "pears"][k])
    os.makedirs(d, exist_ok=True)
    w, h = int(rng.integers(20, 90)), int(rng.integers(20, 90))
    m = 128 + (25 if k == 0 else -25)  # overlapping colours: a model right most of the time
    base = np.array([rng.normal(m, 30), rng.normal(256 - m, 30), rng.integers(0, 256)])
    a = np.clip(base + rng.normal(0, 40, (h, w, 3)), 0, 255).astype(np.uint8)
    Image.fromarray(a).save(os.path.join(d, "%03d.jpg" % i), quality=int(rng.integers(60, 95)),
                            progressive=bool(i % 3 == 0))
PY
"$WEFT" data images photos --out d.h5 --size 24x32 --threads 2 >/dev/null 2>&1
cat >cfg.json <<'JSON'
{"model": {"name": "smallcnn"}, "data": {"train": "d.h5"},
 "train": {"steps": 60, "batch_size": 16, "device": "cpu", "threads": 2},
 "optimizer": {"name": "adam", "lr": 0.001}, "checkpoint": {"dir": "ckpt"}, "log": {"dir": "logs"},
 "export": {"dir": "models/m"}}
JSON
"$WEFT" train --config cfg.json >train.out 2>&1 || { cat train.out; exit 1; }
"$WEFT" eval --model models/m/1/model.h5 --data d.h5 --device cpu --json | tail -1 >eval.json
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
"$WEFT_SERVE" --model_name m --model_base_path models/m --rest_api_port "$PORT" \
	--bind_address 127.0.0.1 --file_system_poll_wait_seconds 0 --device cpu >serve.log 2>&1 &
SERVE_PID=$!
for _ in $(seq 300); do
	curl -sf "http://127.0.0.1:$PORT/v2/health/ready" >/dev/null && break
	kill -0 "$SERVE_PID" 2>/dev/null || { cat serve.log; exit 1; }
	sleep 0.1
done
for proto in tf kserve; do
	"$WEFT_BENCH" --url "http://127.0.0.1:$PORT" --model m --protocol $proto --images photos \
		--concurrency 2 --requests 96 --json | tail -1 >bench-$proto.json
done
python3 - eval.json bench-tf.json bench-kserve.json <<'PY'
import json, sys
e, t, k = (json.load(open(p)) for p in sys.argv[1:])
print("dataset eval accuracy", e["accuracy"], "over", e["count"], "| HTTP tf", t.get("accuracy"),
      "kserve", k.get("accuracy"))
assert e["count"] == 96, e
assert 0.55 < e["accuracy"] < 0.99, "the model must be unsure about some photos: %s" % e
for b in (t, k):
    assert round(b["accuracy"] * 96) == round(e["accuracy"] * 96), (e, b)
PY
echo "test_photos_http: ok"
