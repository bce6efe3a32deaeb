#!/usr/bin/env bash
# check-results.sh: bench/RESULTS.md's "Current standing" table is well formed.
# Every row has as many cells as the header, a command (in backticks, or
# "the same" for the row above's), a date (YYYY-MM-DD) and the short hash of
# a commit that exists in this repository and is not dated after the row.
# Exit 0 when it is, 1 naming every bad row, 77 (a skip) outside a git
# checkout. Run from anywhere; ctest runs it in the quick tier.
set -uo pipefail
cd "$(dirname "$0")/.."
git rev-parse --git-dir >/dev/null 2>&1 || {
	echo "check-results: not a git checkout, skipped"
	exit 77
}
exec python3 - bench/RESULTS.md <<'PY'
import datetime, re, subprocess, sys

def cells(line):
    # split a table row on the pipes that are not escaped (\|)
    parts = re.split(r'(?<!\\)\|', line.strip())
    return [c.strip() for c in parts[1:-1]]

lines = open(sys.argv[1]).read().split('\n')
try:
    start = lines.index('## Current standing')
except ValueError:
    sys.exit('check-results: bench/RESULTS.md has no "## Current standing" section')
rows = []
for line in lines[start + 1:]:
    if line.startswith('## '):
        break
    if line.startswith('|'):
        rows.append(line)
if len(rows) < 3:
    sys.exit('check-results: the standing table has no rows')
head = [c.lower() for c in cells(rows[0])]
for need in ('figure', 'command', 'date', 'commit'):
    if need not in head:
        sys.exit('check-results: the standing table has no "%s" column' % need)
ic, idate, icommit = head.index('command'), head.index('date'), head.index('commit')
bad, last_command = [], None
for n, line in enumerate(rows[2:], 1):
    c = cells(line)
    what = 'row %d (%s)' % (n, c[0] if c else line)
    if len(c) != len(head):
        bad.append('%s: %d cells, the header has %d' % (what, len(c), len(head)))
        continue
    command = c[ic]
    if command == 'the same' and last_command:
        command = last_command
    if not re.fullmatch(r'`[^`]+`', command):
        bad.append('%s: no command in backticks' % what)
    last_command = command
    try:
        day = datetime.date.fromisoformat(c[idate])
    except ValueError:
        bad.append('%s: date "%s" is not YYYY-MM-DD' % (what, c[idate]))
        day = None
    commit = c[icommit]
    if not re.fullmatch(r'[0-9a-f]{7,40}', commit):
        bad.append('%s: commit "%s" is not a hash' % (what, commit))
        continue
    r = subprocess.run(['git', 'log', '-1', '--format=%cs', commit + '^{commit}', '--'],
                       capture_output=True, text=True)
    if r.returncode != 0:
        bad.append('%s: commit %s does not exist in this repository' % (what, commit))
    elif day and datetime.date.fromisoformat(r.stdout.strip()) > day + datetime.timedelta(days=1):
        bad.append('%s: commit %s is dated %s, after the figure (%s)' % (what, commit,
                   r.stdout.strip(), day))
for b in bad:
    print('check-results: ' + b)
print('check-results: %d rows, %s' % (len(rows) - 2, 'bad' if bad else 'well formed'))
sys.exit(1 if bad else 0)
PY
