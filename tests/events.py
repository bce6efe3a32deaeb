#!/usr/bin/env python3
"""Query a weft event file (log.events / WEFT_EVENTS: one JSON object per line).

  events.py FILE count EVENT [KEY=VALUE ...]   number of matching events
  events.py FILE get EVENT FIELD [KEY=VALUE ...]  FIELD of the last match
                                               (exit 1 when none matches)
  events.py FILE wait EVENT SECONDS [KEY=VALUE ...]  until one matches

VALUE matches the field's JSON text or its string value ("restart=true",
"who=worker:1", "step=40"). A complete line that is not JSON fails the
query: every process writes whole lines.
"""
import json
import sys
import time


def load(path):
    try:
        with open(path) as f:
            text = f.read()
    except FileNotFoundError:
        return []
    lines = text.split("\n")
    lines.pop()  # "" after the last newline, or a line still being written
    return [json.loads(line) for line in lines if line.strip()]


def matches(ev, name, filters):
    if ev.get("event") != name:
        return False
    for f in filters:
        key, _, want = f.partition("=")
        if key not in ev:
            return False
        v = ev[key]
        if want not in (json.dumps(v), str(v) if isinstance(v, str) else None):
            return False
    return True


def main(argv):
    path, op, name = argv[1], argv[2], argv[3]
    if op == "count":
        print(sum(matches(e, name, argv[4:]) for e in load(path)))
        return 0
    if op == "get":
        hits = [e for e in load(path) if matches(e, name, argv[5:])]
        if not hits:
            return 1
        v = hits[-1].get(argv[4])
        print(v if isinstance(v, str) else json.dumps(v))
        return 0
    if op == "wait":
        deadline = time.time() + float(argv[4])
        while time.time() < deadline:
            if any(matches(e, name, argv[5:]) for e in load(path)):
                return 0
            time.sleep(0.1)
        print(f"no {name} event {' '.join(argv[5:])} in {path} within {argv[4]} s",
              file=sys.stderr)
        return 1
    print(__doc__, file=sys.stderr)
    return 2


sys.exit(main(sys.argv))
