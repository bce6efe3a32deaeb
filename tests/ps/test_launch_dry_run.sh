# test_launch_dry_run.sh: `weft launch --dry-run` starts nothing and tells
# what the job would be: every server's share of the model (the shares add
# up to the model; a model in fewer chunks than servers is pointed out), the
# copies of ps.replicas, and the bytes of a step on each server's link (a
# sync step: every trainer pushes the server's share and pulls it back; a
# primary sends its share once more to each copy; with ps.compression bf16
# the pushes are half). A bad job is refused as
# it would be at a real launch.
. "$WEFT_SRC/tests/ps/lib.sh"
make_synth train.h5 64 32 3
cfg=(--config "$WEFT_SRC/configs/synth-smallcnn.json" --set data.train=train.h5 --insecure)
"$WEFT" launch --dry-run --ps 3 --workers 4 "${cfg[@]}" --set ps.chunk_bytes=65536 \
	--set ps.replicas=2 >plan.txt 2>plan.err || fail "dry run failed: $(cat plan.err)"
cat plan.txt
! grep -q "listening\|\[launch\]" plan.txt plan.err || fail "a dry run started processes"
python3 - plan.txt <<'PY' || fail "the plan's figures do not add up"
import re, sys
t = open(sys.argv[1]).read()
params = int(re.search(r"model smallcnn: (\d+) parameters", t).group(1))
rows = re.findall(r"ps (\d): (\d+) chunks, ([\d.]+) MiB \(([\d.]+)%\) \+ a copy of ps (\d)'s; "
                  r"a step: ([\d.]+) MiB in, ([\d.]+) MiB out", t)
assert len(rows) == 3, rows
assert abs(sum(float(r[3]) for r in rows) - 100) < 0.2, rows
mib = {int(r[0]): float(r[2]) for r in rows}
assert abs(sum(mib.values()) - params * 4 / 2**20) < 0.02, (mib, params)
for s, _, own, _, backs, i, o in rows:
    s, backs = int(s), int(backs)
    assert backs == (s - 1) % 3, (s, backs)  # group g is kept by servers g and g+1
    assert abs(float(i) - (4 * mib[s] + mib[backs])) < 0.04, (s, i)
    assert abs(float(o) - 5 * mib[s]) < 0.04, (s, o)
assert "each trainer: a step pushes %.2f MiB" % (params * 4 / 2**20) in t, t
PY
# bf16 pushes: each server receives half of what it did, and sends as much
"$WEFT" launch --dry-run --ps 3 --workers 4 "${cfg[@]}" --set ps.chunk_bytes=65536 \
	--set ps.compression=bf16 >bf16.txt || fail "dry run with bf16 failed"
python3 - bf16.txt <<'PY' || fail "the bf16 plan's figures do not add up: $(cat bf16.txt)"
import re, sys
t = open(sys.argv[1]).read()
assert "ps.compression bf16" in t, t
rows = re.findall(r"ps \d: \d+ chunks, ([\d.]+) MiB .*; a step: ([\d.]+) MiB in, ([\d.]+) MiB out", t)
assert len(rows) == 3, rows
for own, i, o in rows:
    assert abs(float(i) - 2 * float(own)) < 0.04 and abs(float(o) - 4 * float(own)) < 0.04, rows
PY
# topk:0.05 pushes: 5% of the entries at 8 bytes each, a tenth of the bytes
"$WEFT" launch --dry-run --ps 3 --workers 4 "${cfg[@]}" --set ps.chunk_bytes=65536 \
	--set ps.compression=topk:0.05 >topk.txt || fail "dry run with topk failed"
python3 - topk.txt <<'PY' || fail "the topk plan's figures do not add up: $(cat topk.txt)"
import re, sys
t = open(sys.argv[1]).read()
assert "ps.compression topk:0.05" in t, t
rows = re.findall(r"ps \d: \d+ chunks, ([\d.]+) MiB .*; a step: ([\d.]+) MiB in, ([\d.]+) MiB out", t)
assert len(rows) == 3, rows
for own, i, o in rows:
    assert abs(float(i) - 0.4 * float(own)) < 0.04 and abs(float(o) - 4 * float(own)) < 0.04, rows
PY
# one chunk for three servers: two hold nothing, and the plan says what to do
"$WEFT" launch --dry-run --ps 3 --workers 2 "${cfg[@]}" --set ps.chunk_bytes=4194304 >one.txt ||
	fail "dry run failed"
grep -q "ps 1: 0 chunks" one.txt || fail "ps 1 should hold nothing: $(cat one.txt)"
grep -q "note: 1 chunks over 3 servers leave some servers with nothing: a smaller ps.chunk_bytes" one.txt ||
	fail "no advice for a badly balanced placement: $(cat one.txt)"
rc=0
"$WEFT" launch --dry-run --ps 1 --workers 2 "${cfg[@]}" --set ps.replicas=2 >bad.txt 2>&1 || rc=$?
[ "$rc" -ge 1 ] && [ "$rc" -le 127 ] && grep -q "ps.replicas 2: each chunk on 2 servers needs --ps 2" bad.txt ||
	fail "ps.replicas above --ps was not refused (exit $rc): $(cat bad.txt)"
echo ok
