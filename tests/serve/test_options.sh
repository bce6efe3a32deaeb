# test_options.sh: weft-serve's settings come from one table: --help and
# --help-flags show each default and environment variable; a setting
# resolves as default < environment < flag; a value out of range, not a
# number or not a choice is refused naming the flag (or the variable).
. "$WEFT_SRC/tests/trainer/lib.sh"
: "${WEFT_SERVE:?set by ctest}"
"$WEFT_SERVE" --help >help.txt
grep -q "samples per forward (default 32)" help.txt || fail "--help: no default for --max_batch_size"
grep -q "(environment: WEFT_PRECISION)" help.txt || fail "--help: --precision's variable not named"
"$WEFT_SERVE" --help-flags >table.md
grep -qF '| `--max_batch_size` N | `32` |  | samples per forward |' table.md ||
	fail "--help-flags: $(grep max_batch_size table.md)"
grep -qF '| `--precision` P |  | `WEFT_PRECISION` |' table.md ||
	fail "--help-flags: $(grep -- '--precision' table.md)"
rows=$(grep -c '^| `--' table.md)
[ "$rows" -ge 60 ] || fail "--help-flags lists $rows flags"
# the environment sets what no flag gives; a flag wins over it
expect_error "WEFT_PRECISION): 'bogus'" env WEFT_PRECISION=bogus "$WEFT_SERVE" --model_base_path .
expect_error "'fp32x'" env WEFT_PRECISION=bogus "$WEFT_SERVE" --model_base_path . --precision fp32x
rc=0
WEFT_PRECISION=bogus "$WEFT_SERVE" --model_base_path "$WORK/none" --precision fp32 2>err.txt || rc=$?
[ "$rc" -ne 0 ] && ! grep -q bogus err.txt && grep -q "none" err.txt ||
	fail "--precision fp32 over WEFT_PRECISION=bogus: $(cat err.txt)"
# ranges, numbers and choices, named by the flag
expect_error "flag --max_batch_size: 0 is not an integer in \[1, 4096\]" \
	"$WEFT_SERVE" --model_base_path . --max_batch_size 0
expect_error "flag --request_timeout_seconds: expected a number" \
	"$WEFT_SERVE" --model_base_path . --request_timeout_seconds nan
expect_error "flag --grpc-infer-thread-count: expected an integer" \
	"$WEFT_SERVE" --model_base_path . --grpc-infer-thread-count=many
expect_error "flag --shared_memory" "$WEFT_SERVE" --model_base_path . --shared_memory some
expect_error "give one of --model_base_path" "$WEFT_SERVE"
echo PASS
