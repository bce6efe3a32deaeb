#!/usr/bin/env bash
# long-functions.sh: the C functions longer than N lines (default 100), longest
# first, as "lines file:line name". Counts from the first line of the
# signature to the closing brace, in the clang-formatted layout the tree
# keeps (a function's braces alone on their lines at column 0).
#   scripts/long-functions.sh [-n N] [-c] [PATH ...]
# PATHs (files or folders) default to the product folders; -c prints only the
# count. Exit 0 always: it reports, the reader decides.
set -euo pipefail
cd "$(dirname "$0")/.."

n=100
count_only=0
while getopts "n:c" opt; do
	case $opt in
	n) n=$OPTARG ;;
	c) count_only=1 ;;
	*)
		echo "usage: $0 [-n N] [-c] [PATH ...]" >&2
		exit 2
		;;
	esac
done
shift $((OPTIND - 1))
[ $# -gt 0 ] || set -- common kernels model worker ps trainer serve

list=$(find "$@" -type f \( -name '*.c' -o -name '*.cu' \) | sort |
	xargs awk -v max="$n" '
	FNR == 1 { sig = 0; body = 0 }
	# a signature starts at column 0 with an identifier (not a
	# preprocessor line, a comment, a brace or a label)
	!body && /^[A-Za-z_]/ && !/^[A-Za-z_][A-Za-z0-9_]*:/ { sig = FNR; text = $0 }
	!body && sig && FNR > sig && /^[ \t]/ { text = text " " $0 }
	!body && /^\{/ && sig { body = 1; start = sig; name = text; next }
	body && /^\}/ {
		len = FNR - start + 1
		if (len > max) {
			sub(/\(.*/, "", name)
			k = split(name, w, /[ \t*]+/)
			printf "%d %s:%d %s\n", len, FILENAME, start, w[k]
		}
		body = 0; sig = 0
	}
	!body && /^[;}]|^$|^#/ { sig = 0 }
	' | sort -rn)

if [ "$count_only" = 1 ]; then
	printf '%s\n' "$list" | grep -c . || true
else
	printf '%s\n' "$list" | grep . || true
fi
