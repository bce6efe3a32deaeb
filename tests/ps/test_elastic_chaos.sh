# test_elastic_chaos.sh: an elastic sync job (weft launch --ps 2 --workers 3
# --elastic 2:4, ps.replicas 2) under a seeded random schedule of four
# events at random moments: a worker joins (SIGUSR1 to launch), the last
# one leaves (SIGUSR2), kill -9 of a random worker (the chief included) or
# of a random server. ps.replicas 2 holds through one server failure at a
# time, as any two-copy scheme does: a server is killed only once every
# server killed before it in the trial holds its groups again (its
# ps_joined or, in a job not yet seeded, ps_group_new events after its
# kill), waiting for that at most 30 s; a kill that waited longer is a
# second failure and marked so (a rollback after it is reported, not
# failed). Every trial must end exit 0 with a complete final
# checkpoint, no rollback (events), an eval accuracy within 0.05 of the
# unchanged elastic run, within 2x its time + 60 s (no hang); when no
# server was killed, every complete epoch applied each of its samples
# exactly once. Seeded: WEFT_CHAOS_SEED (1), WEFT_CHAOS_TRIALS (3 in CI; the
# longer run: WEFT_CHAOS_TRIALS=50 bash this script with WEFT and
# WEFT_SRC set; WEFT_CHAOS_SET="key=value ..." adds settings to every run,
# e.g. strategy.elastic_batch=global). Each trial's line is printed; times
# are against the median of the unchanged runs (one first, one more before
# every 10th trial), and a last line sums them up.
. "$WEFT_SRC/tests/ps/lib.sh"
mkdir -p data
make_synth data/train.h5 2000 16 1
make_synth data/eval.h5 500 16 2
seed=${WEFT_CHAOS_SEED:-1}
trials=${WEFT_CHAOS_TRIALS:-3}
RANDOM=$seed
args=(--ps 2 --workers 3 --elastic 2:4 --threads 2 --device cpu
	--config "$WEFT_SRC/configs/synth-smallcnn.json" --set data.train=data/train.h5
	--set data.eval=data/eval.h5 --set train.steps=400 --set train.eval_every_steps=400
	--set checkpoint.every_steps=100 --set log.every_steps=20 --set ps.replicas=2
	--set strategy.mode=sync --set optimizer.lr=0.05)
for kv in ${WEFT_CHAOS_SET:-}; do
	args+=(--set "$kv")
done
# unchanged: one more run of the unchanged job; ref_time is the median of
# those so far (a long run takes one before every 10th trial too: these
# machines' speed drifts, and one fast or slow run would set every ratio)
ref_times=()
unchanged() {
	local n=${#ref_times[@]} t0
	t0=$(date +%s.%N)
	export WEFT_EVENTS=$WORK/ref$n.events.jsonl
	"$WEFT" launch "${args[@]}" --set checkpoint.dir=ref$n/ckpt --set log.dir=ref$n/logs \
		>ref$n.log 2>&1 || fail "the unchanged elastic run failed"
	ref_times+=("$(python3 -c "import time; print(round(time.time() - $t0, 1))")")
	ref_time=$(python3 -c "import statistics, sys; print(round(statistics.median(map(float, sys.argv[1:])), 2))" \
		"${ref_times[@]}")
}
unchanged
# rejoined PS KILLED_AT: ps:PS has joined both its groups since KILLED_AT
rejoined() {
	python3 - "$WEFT_EVENTS" "$1" "$2" <<'PY'
import json, sys
path, who, since = sys.argv[1], "ps:" + sys.argv[2], float(sys.argv[3])
ev = [json.loads(l) for l in open(path).read().split("\n")[:-1] if l.strip()]
groups = {e["group"] for e in ev
          if e.get("event") in ("ps_joined", "ps_group_new") and e.get("who") == who
          and e["time"] > since}
sys.exit(0 if len(groups) >= 2 else 1)
PY
}
ref_acc=$(eval_accuracy ref0/logs/metrics.jsonl)
echo "unchanged: ${ref_time} s, eval accuracy ${ref_acc}"
ratios=()
for ((t = 0; t < trials; t++)); do
	if [ $t -gt 0 ] && [ $((t % 10)) = 0 ]; then
		unchanged
		echo "unchanged again: ${ref_times[-1]} s (median of ${#ref_times[@]}: ${ref_time} s)"
	fi
	name=t$t
	export WEFT_EVENTS=$WORK/$name.events.jsonl
	t0=$(date +%s.%N)
	launch_bg $name.log "${args[@]}" --set checkpoint.dir=$name/ckpt --set log.dir=$name/logs
	# four events at sorted random moments in (0, 0.9 x the unchanged time)
	moments=$(for i in 1 2 3 4; do python3 -c "print(round(${ref_time} * 0.9 * ($RANDOM + 1) / 32769, 2))"; done | sort -n)
	done_s=0 what="" server_killed=0 second=0 killed_at=()
	for at in $moments; do
		python3 -c "import time; time.sleep(max(0, $at - (time.time() - $t0)))"
		kill -0 "$LAUNCH_PID" 2>/dev/null || break
		case $((RANDOM % 4)) in
		0) kill -USR1 "$LAUNCH_PID"; what+=" join@$at" ;;
		1) kill -USR2 "$LAUNCH_PID"; what+=" leave@$at" ;;
		2)
			w=$((RANDOM % 4))
			pid=$(pid_of "worker:$w" || true)
			# only a running worker (a free slot's last pid is gone)
			if [ -n "$pid" ] && kill -9 "$pid" 2>/dev/null; then what+=" kill-worker:$w@$at"; fi
			;;
		3)
			p=$((RANDOM % 2)) whole=1
			for q in "${!killed_at[@]}"; do
				for ((i = 0; i < 300; i++)); do
					rejoined "$q" "${killed_at[$q]}" && break
					kill -0 "$LAUNCH_PID" 2>/dev/null || break
					sleep 0.1
				done
				rejoined "$q" "${killed_at[$q]}" || whole=0
			done
			pid=$(pid_of "ps:$p" || true)
			now=$(date +%s.%N)
			if [ -n "$pid" ] && kill -9 "$pid" 2>/dev/null; then
				what+=" kill-ps:$p@$at"
				[ $whole = 1 ] || {
					what+="(a second failure)"
					second=1
				}
				server_killed=1
				killed_at[$p]=$now
			fi
			;;
		esac
	done
	echo "trial $t:$what: waiting for the job (at most 2x the unchanged time + 60 s)"
	rc=0
	wait_launch "$(python3 -c "print(int(2 * ${ref_time} + 60))")" || rc=$?
	took=$(python3 -c "import time; print(round(time.time() - $t0, 1))")
	[ $rc = 0 ] || fail "trial $t ($what): launch exited $rc"
	[ -f $name/ckpt/step-400/DONE ] || fail "trial $t ($what): no complete final checkpoint"
	acc=$(eval_accuracy $name/logs/metrics.jsonl)
	rollbacks=$(events count rollback)
	joins=$(events count worker_joined server=0)
	lefts=$(events count worker_left server=0)
	ratios+=("$(python3 -c "print(round($took / ${ref_time}, 2))")")
	echo "trial $t:$what: exit 0 in $took s (${ratios[-1]}x), eval accuracy $acc, $rollbacks rollback(s), $joins join(s) and $lefts leave(s) seen by ps:0"
	[ "$rollbacks" = 0 ] || [ $second = 1 ] || fail "trial $t ($what): $rollbacks rollback(s)"
	python3 -c "import sys; sys.exit(0 if abs($acc - ${ref_acc}) <= 0.05 else 1)" ||
		fail "trial $t ($what): eval accuracy $acc, unchanged ${ref_acc}"
	[ $server_killed = 1 ] || python3 - $name/logs/metrics.jsonl <<'PY' || fail "trial $t ($what): an epoch's samples were not each applied once"
import json, sys
done = [json.loads(l) for l in open(sys.argv[1]) if '"complete":true' in l]
assert done, "no complete epoch"
for l in done:
    assert l["samples_applied"] == l["samples_per_epoch"], l
PY
done
python3 - "${ratios[@]}" <<'PY'
import statistics, sys
r = sorted(map(float, sys.argv[1:]))
print(f"time against the unchanged runs' median: median {statistics.median(r):.2f}x, "
      f"90th percentile {r[max(0, -(-9 * len(r) // 10) - 1)]:.2f}x, largest {r[-1]:.2f}x, "
      f"{sum(x <= 1.2 for x in r)} of {len(r)} within 1.2x")
PY
echo ok
