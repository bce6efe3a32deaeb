# test_cli.sh: --help everywhere, unknown commands and flags are named,
# exit codes follow docs/promises.md.
. "$WEFT_SRC/tests/trainer/lib.sh"
"$WEFT" --help | grep -q "train" || fail "weft --help lists no commands"
for c in train eval inspect version "data synth" "data cifar10" "data images" data; do
	"$WEFT" $c --help >help.txt || fail "weft $c --help failed"
	grep -q "usage" help.txt || fail "weft $c --help has no usage"
done
"$WEFT" train --help | grep -q -- "--accumulate" || fail "train --help misses --accumulate"
# (to a file: grep -q may close a pipe before a reference over 4 KiB is written)
"$WEFT" train --help-config >keys.txt || fail "train --help-config failed"
grep -q "optimizer.schedule.warmup_steps" keys.txt || fail "no key reference"

expect_error "unknown command 'trian'" "$WEFT" trian
expect_error "unknown flag '--lr'" "$WEFT" train --config x.json --lr 3
expect_error "--config FILE is required" "$WEFT" train
expect_error "flag --threads: expected an integer" "$WEFT" train --threads many
expect_error "launch: --config FILE is required" "$WEFT" launch
"$WEFT" version | grep -q "^weft " || fail "version"
echo ok
