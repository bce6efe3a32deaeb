#!/usr/bin/env bash
# check-readme-config.sh [--write] WEFT: the README's configuration tables
# (the keys under "## Configuration reference" and the environment variables
# after them) are the two tables `WEFT train --help-config` prints, row for
# row. Exit 0 when they agree, 1 with a diff when they do not; --write puts
# the program's tables into the README instead. ctest runs the check in the
# quick tier.
set -euo pipefail
write=0
if [ "${1:-}" = "--write" ]; then
	write=1
	shift
fi
weft=${1:?usage: check-readme-config.sh [--write] path/to/weft}
cd "$(dirname "$0")/.."
help=$(mktemp)
trap 'rm -f "$help"' EXIT
"$weft" train --help-config >"$help"
exec python3 - README.md "$help" "$write" <<'PY'
import difflib, sys

readme_path, help_path, write = sys.argv[1], sys.argv[2], sys.argv[3] == "1"

def tables(lines):
    """The runs of consecutive '|' lines, as (first index, lines)."""
    out, i = [], 0
    while i < len(lines):
        if lines[i].startswith("|"):
            j = i
            while j < len(lines) and lines[j].startswith("|"):
                j += 1
            out.append((i, lines[i:j]))
            i = j
        else:
            i += 1
    return out

readme = open(readme_path).read().split("\n")
want = [t for _, t in tables(open(help_path).read().split("\n"))]
if len(want) != 2:
    sys.exit("check-readme-config: --help-config printed %d tables, expected 2" % len(want))
try:
    start = readme.index("## Configuration reference")
except ValueError:
    sys.exit("check-readme-config: README.md has no '## Configuration reference'")
end = next((i for i in range(start + 1, len(readme)) if readme[i].startswith("## ")), len(readme))
have = [(start + i, t) for i, t in tables(readme[start:end])][:2]
if len(have) != 2:
    sys.exit("check-readme-config: the README's configuration reference has %d tables, expected 2"
             % len(have))
names = ("configuration keys", "environment variables")
if write:
    for (first, old), new in reversed(list(zip(have, want))):
        readme[first:first + len(old)] = new
    open(readme_path, "w").write("\n".join(readme))
    print("check-readme-config: README.md tables written from --help-config")
    sys.exit(0)
bad = 0
for name, (first, old), new in zip(names, have, want):
    if old != new:
        bad = 1
        print("check-readme-config: the README's %s table (line %d) differs from "
              "`weft train --help-config` (scripts/check-readme-config.sh --write fixes it):"
              % (name, first + 1))
        sys.stdout.writelines(difflib.unified_diff([l + "\n" for l in old], [l + "\n" for l in new],
                                                   "README.md", "--help-config"))
print("check-readme-config: %s" % ("differs" if bad else "the README's tables are --help-config's"))
sys.exit(bad)
PY
