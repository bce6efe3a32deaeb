# test_outputs.sh: a run leaves metrics.jsonl (one object per logged step with
# the documented keys), a decodable TensorBoard event file with the same
# scalars, the resolved config.json, and step-N checkpoints with DONE.
. "$WEFT_SRC/tests/trainer/lib.sh"
make_synth train.h5 256 8 1
make_synth eval.h5 64 8 2
cat >c.json <<'JSON'
{"model": {"name": "mlp"}, "data": {"train": "train.h5", "eval": "eval.h5"},
 "train": {"batch_size": 16, "steps": 20, "eval_every_steps": 10},
 "checkpoint": {"dir": "out/ckpt", "every_steps": 10},
 "log": {"dir": "out/logs", "every_steps": 5}}
JSON
"$WEFT" train --config c.json --device cpu --threads 2 2>err.txt || { cat err.txt; fail "train"; }
[ -f out/ckpt/step-10/DONE ] && [ -f out/ckpt/step-20/DONE ] || fail "checkpoints missing"
[ -f out/ckpt/step-20/model.h5 ] && [ -f out/ckpt/step-20/optimizer.h5 ] || fail "files missing"
ls out/logs/events.out.tfevents.* >/dev/null || fail "no event file"
python3 - <<'PY' || fail "outputs do not decode"
import glob, json, struct

# metrics.jsonl
rows = [json.loads(l) for l in open("out/logs/metrics.jsonl")]
assert [r["step"] for r in rows] == [5, 10, 15, 20], rows
for r in rows:
    for k in ("step", "epoch", "loss", "accuracy", "lr", "images_per_sec"):
        assert k in r, (k, r)
    assert ("eval_loss" in r) == (r["step"] in (10, 20)), r
    assert 0 <= r["accuracy"] <= 1 and r["loss"] > 0 and r["images_per_sec"] > 0
assert abs(rows[1]["epoch"] - 10 / 16) < 1e-9, rows[1]

# config.json: the resolved config, every section present
cfg = json.load(open("out/logs/config.json"))
assert cfg["model"]["name"] == "mlp" and cfg["train"]["batch_size"] == 16
assert cfg["optimizer"]["schedule"]["name"] == "constant" and "export" in cfg

# TFRecord framing + Event protobufs, CRC32C checked
def crc32c(data):
    c = 0xFFFFFFFF
    for b in data:
        c ^= b
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
    return c ^ 0xFFFFFFFF

def mask(c):
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF

def varint(b, i):
    v = s = 0
    while True:
        x = b[i]; i += 1
        v |= (x & 0x7F) << s; s += 7
        if not x & 0x80:
            return v, i

def fields(b):
    i = 0
    while i < len(b):
        k, i = varint(b, i)
        f, w = k >> 3, k & 7
        if w == 0:
            v, i = varint(b, i)
        elif w == 1:
            v = b[i:i + 8]; i += 8
        elif w == 5:
            v = b[i:i + 4]; i += 4
        elif w == 2:
            n, i = varint(b, i); v = b[i:i + n]; i += n
        else:
            raise ValueError("wire type %d" % w)
        yield f, v

data = open(glob.glob("out/logs/events.out.tfevents.*")[0], "rb").read()
i, events = 0, []
while i < len(data):
    (n,) = struct.unpack_from("<Q", data, i)
    assert struct.unpack_from("<I", data, i + 8)[0] == mask(crc32c(data[i:i + 8]))
    body = data[i + 12:i + 12 + n]
    assert struct.unpack_from("<I", data, i + 12 + n)[0] == mask(crc32c(body))
    events.append(body)
    i += 12 + n + 4
first = dict(fields(events[0]))
assert first[3] == b"brain.Event:2", first
scalars = {}
for ev in events[1:]:
    f = list(fields(ev))
    step = [v for k, v in f if k == 2][0]
    for k, summ in f:
        if k != 5:
            continue
        for _, val in fields(summ):
            d = dict(fields(val))
            scalars[(step, d[1].decode())] = struct.unpack("<f", d[2])[0]
for r in rows:
    assert abs(scalars[(r["step"], "loss")] - r["loss"]) <= 1e-6 * max(1, r["loss"]), r
    if "eval_accuracy" in r:
        assert abs(scalars[(r["step"], "eval_accuracy")] - r["eval_accuracy"]) < 1e-6
print("decoded", len(events), "events")
PY
echo ok
