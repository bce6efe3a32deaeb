# test_bench_cluster.sh: `weft bench cluster` runs the modelled exchanges on
# an emulated network: sync parameter servers (real servers and client, in
# their own namespaces) and, where mpirun exists, MPI allreduce under a real
# mpirun whose ranks start in their namespaces. Each configuration prints
# one JSON line with a positive step time, the bound, the efficiency and the
# workers' CPU time per step; the namespaces are gone afterwards; the same
# with replicated servers. No timing is asserted (the machine is shared),
# but each line carries the network's counters (retransmissions, timeouts,
# queue drops); 32 workers with 32 servers reach each other. Skips (77)
# without root or network namespaces.
. "$WEFT_SRC/tests/ps/lib.sh"
if [ "$(id -u)" != 0 ] || ! command -v ip >/dev/null || ! command -v tc >/dev/null; then
	echo "SKIP: needs root and iproute2 (ip, tc) for network namespaces"
	exit 77
fi
ns=weft-test-$$
ip netns add "$ns" 2>/dev/null || { echo "SKIP: this machine does not allow network namespaces"; exit 77; }
ip netns del "$ns"
# orphans: the namespaces of benches whose process is gone (others may run
# their own benches on this machine meanwhile)
orphans() {
	ip netns list | sed -n 's/^\(wf\([0-9]*\)-[0-9]*\).*/\2 \1/p' | while read -r pid ns; do
		kill -0 "$pid" 2>/dev/null || echo "$ns"
	done
}
modes=sync,ssp:1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
"$WEFT" bench cluster --model resnet20 --scale 1 --workers 2,3 --servers 1,2 --mode $modes \
	--link 200mbit --compute-ms 2/4 --steps 3 --warmup 1 --timeout 60 >out.jsonl 2>bench.log ||
	fail "weft bench cluster failed"
# MPI allreduce under a real mpirun (its daemons started in the namespaces
# through an rsh agent, each with a TMPDIR of its own)
if command -v mpirun >/dev/null; then
	modes=$modes,allreduce
	"$WEFT" bench cluster --model resnet20 --scale 1 --workers 2,3 --mode allreduce \
		--link 200mbit --compute-ms 2/4 --steps 3 --warmup 1 --timeout 60 \
		>ar.jsonl 2>ar.log || fail "weft bench cluster --mode allreduce failed: $(tail -5 ar.log)"
	cat ar.jsonl >>out.jsonl
fi
python3 - "$modes" <<'PY' || fail "bad result lines: $(cat out.jsonl)"
import json, sys
rows = [json.loads(l) for l in open("out.jsonl")]
want = {(m, w) for m in sys.argv[1].split(",") for w in (2, 3)}
got = {(r["mode"], r["workers"]) for r in rows}
assert got == want, (got, want)
for r in rows:
    assert r["step_ms"] > 0 and r["bound_ms"] > 0 and 0 < r["efficiency"], r
    assert r["cpu_ms_per_step"] > 0, r  # the workers' own CPU time per step
    assert all(len(r[k]) == 2 and min(r[k]) >= 0 for k in
               ("tcp_retrans_per_step", "tcp_rto_per_step", "drops_in_per_step")), r
    assert r["grad_bytes"] == 4 * 272474 or r["grad_bytes"] > 0, r
    if r["mode"] != "allreduce":
        assert r["servers"] == (1 if r["workers"] == 2 else 2), r
print("ok:", len(rows), "configurations")
PY
# replicated servers (ps.replicas 2): every update also goes to a backup;
# with bf16 pushes, and worker 0's timeline: every chunk of every step, its
# reply landed after its push left
"$WEFT" bench cluster --model resnet20 --scale 1 --workers 3 --servers 2 --mode sync --replicas 2 \
	--compression bf16 --timeline tl.jsonl \
	--link 200mbit --compute-ms 2/4 --steps 3 --warmup 1 --timeout 60 >rep.jsonl 2>rep.log ||
	fail "weft bench cluster --replicas 2 failed: $(tail -5 rep.log)"
python3 -c 'import json,sys; r=[json.loads(l) for l in open("rep.jsonl")]
assert len(r) == 1 and r[0]["replicas"] == 2 and r[0]["step_ms"] > 0, r
assert r[0]["compression"] == "bf16" and len(r[0]["tcp_retrans_per_step"]) == 2, r
t=[json.loads(l) for l in open("tl.jsonl")]
assert len(t) == 4, len(t)
for s in t:
    assert s["chunks"] and all(c[0] in (0, 1) and c[1] > 0 and c[3] >= c[2] for c in s["chunks"]), s' ||
	fail "bad --replicas result: $(cat rep.jsonl)"
# the next forward layer by layer as the chunks land (--layer-ready), on
# a lossless fabric with jumbo frames (--mtu, --queue-kb)
"$WEFT" bench cluster --model resnet20 --scale 1 --workers 2 --servers 1 --mode sync --layer-ready \
	--mtu 9000 --queue-kb 4096 \
	--link 200mbit --compute-ms 2/4 --steps 3 --warmup 1 --timeout 60 >lr.jsonl 2>lr.log ||
	fail "weft bench cluster --layer-ready failed: $(tail -5 lr.log)"
python3 -c 'import json; r=[json.loads(l) for l in open("lr.jsonl")]
assert len(r) == 1 and r[0]["layer_ready"] == 1 and r[0]["step_ms"] > 0, r
assert r[0]["mtu"] == 9000 and r[0]["queue_kb"] == 4096, r' ||
	fail "bad --layer-ready result: $(cat lr.jsonl)"
"$WEFT" bench cluster --mtu 100 >/dev/null 2>mtu.log && fail "--mtu 100 was taken"
grep -q -- "--mtu 576..65000" mtu.log || fail "--mtu 100: no clear error: $(cat mtu.log)"
# top-k pushes against none in the same run: the servers take in a fraction
# of the bytes (rank 0's init of the servers is counted too), and the topk
# line carries its step time against none's
"$WEFT" bench cluster --model resnet20 --scale 1 --workers 2 --servers 1 --mode sync \
	--compression none,topk:0.01 \
	--link 200mbit --compute-ms 2/4 --steps 3 --warmup 1 --timeout 60 >tk.jsonl 2>tk.log ||
	fail "weft bench cluster --compression none,topk:0.01 failed: $(tail -5 tk.log)"
python3 -c 'import json; r=[json.loads(l) for l in open("tk.jsonl")]
assert [x["compression"] for x in r] == ["none", "topk:0.01"], r
assert "step_vs_none" not in r[0] and r[1]["step_vs_none"] > 0, r
assert "bucket_mb" not in r[1], r
assert r[1]["push_bytes_per_step"] < 0.3 * r[0]["push_bytes_per_step"], r' ||
	fail "bad --compression topk result: $(cat tk.jsonl)"
# 64 nodes, every worker talking to every server: more neighbours than the
# kernel's shared ARP table holds by default (1024), so each node is told
# the others' addresses up front (before, workers 16-31 never got a SYN out)
"$WEFT" bench cluster --model resnet20 --scale 0.05 --workers 32 --servers 32 --mode sync \
	--link 1gbit --compute-ms 1/1 --steps 1 --warmup 0 --timeout 50 >big.jsonl 2>big.log ||
	fail "weft bench cluster with 32 workers and 32 servers failed: $(tail -3 big.log | cut -c1-300)"
python3 -c 'import json; r=[json.loads(l) for l in open("big.jsonl")]
assert len(r) == 1 and r[0]["workers"] == 32 and r[0]["servers"] == 32 and r[0]["step_ms"] > 0, r' ||
	fail "bad 32 x 32 result: $(cat big.jsonl)"
left=$(orphans)
[ -z "$left" ] || fail "namespaces left behind: $left"
echo ok
