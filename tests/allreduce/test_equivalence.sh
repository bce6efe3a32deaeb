# test_equivalence.sh: `mpirun -np 2` ends within 1e-5 relative of one process
# with --accumulate 2 (same data, seed and config; models without dropout),
# straight through and when the 2-rank run is resumed from a checkpoint;
# resnet20's trainable weights (batch norm) too; and strategy allreduce
# without mpirun is a world of one that equals the local strategy.
. "$WEFT_SRC/tests/allreduce/lib.sh"
CMP="$WEFT_SRC/tests/trainer/compare_dump.py"
make_synth train.h5 512 8 3
export OMP_NUM_THREADS=1
for model in smallcnn mlp; do
	cat >c.json <<JSON
{"model": {"name": "$model"}, "data": {"train": "train.h5", "augment": true},
 "train": {"batch_size": 16, "steps": 12, "seed": 2},
 "optimizer": {"name": "sgd", "lr": 0.05, "momentum": 0.9}, "log": {"every_steps": 4},
 "checkpoint": {"every_steps": 6, "keep": 5}}
JSON
	"$WEFT" train --config c.json --device cpu --threads 1 --accumulate 2 \
		--set checkpoint.dir=acc/ckpt --set log.dir=acc/logs 2>acc.err ||
		{ cat acc.err; fail "$model: --accumulate 2 run failed"; }
	# small buckets, so several are in flight while backward runs
	weft_mpirun 2 train --config c.json --device cpu --threads 1 \
		--set strategy.name=allreduce --set strategy.bucket_mb=0.05 \
		--set checkpoint.dir=mpi/ckpt --set log.dir=mpi/logs >mpi.out 2>mpi.err ||
		{ cat mpi.err; fail "$model: mpirun -np 2 failed"; }
	"$WEFT" inspect --model acc/ckpt/step-12/model.h5 --dump >acc.txt
	"$WEFT" inspect --model mpi/ckpt/step-12/model.h5 --dump >mpi.txt
	python3 "$CMP" acc.txt mpi.txt 1e-5 ||
		fail "$model: mpirun -np 2 differs from --accumulate 2"

	# Only rank 0 writes: one metrics file, checkpoints with DONE and optimizer.h5.
	[ -f mpi/ckpt/step-6/DONE ] && [ -f mpi/ckpt/step-6/optimizer.h5 ] ||
		fail "$model: no complete checkpoint at step 6"
	n=$(wc -l <mpi/logs/metrics.jsonl)
	[ "$n" -eq "$(wc -l <acc/logs/metrics.jsonl)" ] || fail "$model: $n metrics lines"

	# Resume: drop the final checkpoint, continue from step 6 on 2 ranks.
	rm -rf mpi/ckpt/step-12
	weft_mpirun 2 train --config c.json --device cpu --threads 1 --resume \
		--set strategy.name=allreduce --set checkpoint.dir=mpi/ckpt \
		--set log.dir=mpi/logs >res.out 2>res.err ||
		{ cat res.err; fail "$model: resumed mpirun failed"; }
	grep -q "resuming from mpi/ckpt/step-6" res.err || fail "$model: did not resume"
	"$WEFT" inspect --model mpi/ckpt/step-12/model.h5 --dump >res.txt
	python3 "$CMP" acc.txt res.txt 1e-5 || fail "$model: resumed run differs"
	rm -rf acc mpi
done

# Batch norm (resnet20): each rank normalises its batch as each micro-batch
# is normalised, so the trainable weights agree as well; the running
# statistics are averaged across ranks instead of updated twice per step, so
# they are compared only for being finite and present.
make_synth small.h5 256 8 3
cat >b.json <<JSON
{"model": {"name": "resnet20"}, "data": {"train": "small.h5", "augment": true},
 "train": {"batch_size": 8, "steps": 6, "seed": 2},
 "optimizer": {"name": "sgd", "lr": 0.05, "momentum": 0.9}, "log": {"every_steps": 3}}
JSON
"$WEFT" train --config b.json --device cpu --threads 1 --accumulate 2 \
	--set checkpoint.dir=bacc/ckpt --set log.dir=bacc/logs 2>/dev/null >/dev/null ||
	fail "resnet20: --accumulate 2 run failed"
weft_mpirun 2 train --config b.json --device cpu --threads 1 --set strategy.name=allreduce \
	--set strategy.bucket_mb=0.1 --set checkpoint.dir=bmpi/ckpt --set log.dir=bmpi/logs \
	>bmpi.out 2>bmpi.err || { cat bmpi.err; fail "resnet20: mpirun -np 2 failed"; }
"$WEFT" inspect --model bacc/ckpt/step-6/model.h5 --dump | grep -v /moving_ >bacc.txt
"$WEFT" inspect --model bmpi/ckpt/step-6/model.h5 --dump | grep -v /moving_ >bmpi.txt
python3 "$CMP" bacc.txt bmpi.txt 1e-5 || fail "resnet20: trainable weights differ"
"$WEFT" inspect --model bmpi/ckpt/step-6/model.h5 --dump | grep /moving_variance |
	python3 -c 'import math,sys; v=[float(x) for l in sys.stdin for x in l.split()[1:]]; sys.exit(0 if v and all(math.isfinite(x) and x > 0 for x in v) else 1)' ||
	fail "resnet20: bad running variances"

# Without mpirun: a world of one, the same as the local strategy.
"$WEFT" train --config c.json --device cpu --threads 1 --accumulate 2 \
	--set strategy.name=allreduce --set checkpoint.dir=one/ckpt --set log.dir=one/logs \
	2>one.err || { cat one.err; fail "allreduce without mpirun failed"; }
"$WEFT" train --config c.json --device cpu --threads 1 --accumulate 2 \
	--set checkpoint.dir=loc/ckpt --set log.dir=loc/logs 2>/dev/null || fail "local run failed"
"$WEFT" inspect --model one/ckpt/step-12/model.h5 --dump >one.txt
"$WEFT" inspect --model loc/ckpt/step-12/model.h5 --dump >loc.txt
python3 "$CMP" one.txt loc.txt 0 || fail "a world of one differs from the local strategy"
echo ok
