# damage.sh: damaged checkpoints that DONE does not catch, shared by
# test_files_robust.sh, model/test_corrupt_files.sh and
# bench/hostile_files.sh. Source it; it defines functions only.

# damage_model DIR: 2 bytes in the middle of DIR/model.h5 overwritten (same size)
damage_model() {
	local f=$1/model.h5 sz
	sz=$(stat -c %s "$f")
	printf '\x55\xaa' | dd of="$f" bs=1 seek=$((sz / 2)) conv=notrunc 2>/dev/null
}

# reseal DIR: rewrite DIR/DONE with the sizes and CRC32Cs of its files as
# they are now (a DONE recomputed over whatever the files hold)
reseal() {
	python3 - "$1" <<'PY'
import json, os, sys
d = sys.argv[1]
table = []
for i in range(256):
    c = i
    for _ in range(8):
        c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
    table.append(c)
def crc32c(b):
    c = 0xFFFFFFFF
    for x in b:
        c = table[(c ^ x) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF
done = json.load(open(os.path.join(d, "DONE")))
for name in done["files"]:
    b = open(os.path.join(d, name), "rb").read()
    done["files"][name] = {"bytes": len(b), "crc32c": "%08x" % crc32c(b)}
json.dump(done, open(os.path.join(d, "DONE"), "w"))
PY
}

# damage_under_done DIR HOW: DIR/model.h5 damaged, under an empty DONE (HOW
# empty: an older weft's) or a DONE recomputed to match (HOW recomputed)
damage_under_done() {
	damage_model "$1"
	case $2 in
	empty) : >"$1/DONE" ;;
	recomputed) reseal "$1" ;;
	*) return 1 ;;
	esac
}
