#!/usr/bin/env bash
# check-readme-serve.sh [--write] WEFT_SERVE: the README's table of
# weft-serve's flags (the first table after "### weft-serve's flags") is the
# table `WEFT_SERVE --help-flags` prints from the settings table
# (serve/options.c), row for row. Exit 0 when they agree, 1 with a diff when
# they do not; --write puts the program's table into the README instead.
# ctest runs the check in the quick tier.
set -euo pipefail
write=0
if [ "${1:-}" = "--write" ]; then
	write=1
	shift
fi
serve=${1:?usage: check-readme-serve.sh [--write] path/to/weft-serve}
cd "$(dirname "$0")/.."
help=$(mktemp)
trap 'rm -f "$help"' EXIT
"$serve" --help-flags >"$help"
exec python3 - README.md "$help" "$write" <<'PY'
import difflib, sys

readme_path, help_path, write = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
heading = "### weft-serve's flags"
readme = open(readme_path).read().split("\n")
want = [l for l in open(help_path).read().split("\n") if l.startswith("|")]
if not want:
    sys.exit("check-readme-serve: --help-flags printed no table")
try:
    start = readme.index(heading)
except ValueError:
    sys.exit("check-readme-serve: README.md has no '%s'" % heading)
first = next((i for i in range(start + 1, len(readme))
              if readme[i].startswith("|") or readme[i].startswith("#")), len(readme))
if first == len(readme) or not readme[first].startswith("|"):
    sys.exit("check-readme-serve: no table under '%s'" % heading)
end = first
while end < len(readme) and readme[end].startswith("|"):
    end += 1
have = readme[first:end]
if write:
    readme[first:end] = want
    open(readme_path, "w").write("\n".join(readme))
    print("check-readme-serve: README.md's flag table written from --help-flags")
    sys.exit(0)
if have != want:
    print("check-readme-serve: the README's weft-serve flag table (line %d) differs from "
          "`weft-serve --help-flags` (scripts/check-readme-serve.sh --write fixes it):"
          % (first + 1))
    sys.stdout.writelines(difflib.unified_diff([l + "\n" for l in have], [l + "\n" for l in want],
                                               "README.md", "--help-flags"))
    sys.exit(1)
print("check-readme-serve: the README's flag table is --help-flags'")
PY
