# test_priority.sh: priority by layer (ps.priority_kb) really reorders.
# Two sync workers and one server on emulated 50 Mbit/s links, the backward
# releasing pushes faster than the links carry them, worker 0's timeline
# per chunk: when the backward released its push, when the push went to
# ZeroMQ and when its reply was read. Without priority every push leaves
# when released (in release order) and the first layer's chunk (the last
# released: the parameters are laid out in reverse layer order) is answered
# last. With it, that chunk goes out ahead of chunks released before it and
# still held, and its reply is read before theirs. Skips (77) where network
# namespaces cannot be made (not root, no iproute2).
. "$WEFT_SRC/tests/ps/lib.sh"
if [ "$(id -u)" != 0 ] || ! command -v ip >/dev/null || ! command -v tc >/dev/null; then
	echo "SKIP: needs root and iproute2 (ip, tc) for network namespaces"
	exit 77
fi
ns=weft-test-$$
if ! ip netns add "$ns" 2>/dev/null; then
	echo "SKIP: this machine does not allow network namespaces"
	exit 77
fi
ip netns del "$ns"
for kb in 0 16; do
	"$WEFT" bench cluster --model resnet20 --scale 1 --chunk-bytes 16384 --workers 2 \
		--servers 1 --mode sync --priority $kb --timeline tl$kb.jsonl --link 50mbit \
		--compute-ms 5/20 --steps 3 --warmup 1 --timeout 120 >p$kb.jsonl 2>p$kb.log ||
		fail "weft bench cluster --priority $kb failed: $(tail -5 p$kb.log)"
done
python3 - <<'PY' || fail "the timelines do not show priority by layer"
import json

def steps(path):
    return [json.loads(l) for l in open(path)][1:]  # after the warm-up step

def overtaken(chunks):
    """Chunks released before the first layer's chunk but sent after it."""
    top = chunks[-1]  # [server, floats, released, waited, sent, read] ms
    return [c for c in chunks[:-1] if c[2] < top[2] and c[4] > top[4]]

# off: pushes leave in release order; the first layer is answered last
for s in steps("tl0.jsonl"):
    ch = s["chunks"]
    assert len(ch) > 20, len(ch)
    sent = [c[4] for c in ch]
    assert sent == sorted(sent), ("priority off: sent out of release order", s)
    assert not overtaken(ch), s
    assert max(c[5] for c in ch[:-1]) <= ch[-1][5], ("priority off: first layer not last", s)
# on: the first layer's chunk overtakes held ones, and its reply comes first
for s in steps("tl16.jsonl"):
    ch = s["chunks"]
    late = overtaken(ch)
    assert len(late) >= 5, ("priority on: too few chunks overtaken", len(late), s)
    after = sum(c[5] > ch[-1][5] for c in late)  # the other worker's timing may differ a little
    assert after >= 0.8 * len(late), ("priority on: replies out of order", after, len(late), s)
r = [json.loads(l) for l in open("p16.jsonl")]
assert len(r) == 1 and r[0]["priority_kb"] == 16 and r[0]["step_ms"] > 0, r
print("ok")
PY
echo ok
