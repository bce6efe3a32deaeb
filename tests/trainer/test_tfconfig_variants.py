"""Every TF_CONFIG variant of tfconfig_variants.json through `weft tfconfig
--json`, as a pod would run it: weft's task, world and cluster, or its
refusal (exit 1..127, the words expected on stderr). Standard library only;
WEFT names the weft binary."""
import concurrent.futures
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
VARIANTS = os.path.join(HERE, "tfconfig_variants.json")
# Everything that could tell weft its place besides the TF_CONFIG under test.
IDENTITY_VARS = ("WEFT_ROLE", "WEFT_INDEX", "JOB_COMPLETION_INDEX", "OMPI_COMM_WORLD_RANK",
                 "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "WEFT_NUM_CHIEF",
                 "WEFT_NUM_WORKERS", "WEFT_NUM_PS", "WEFT_NUM_EVALUATORS")


def load_variants():
    with open(VARIANTS) as f:
        return json.load(f)["variants"]


def tf_config_text(v):
    return v["tf_config_text"] if "tf_config_text" in v else json.dumps(v["tf_config"])


def weft_answer(weft, v):
    """("ok", the --json object) or ("refused", stderr's last line)."""
    env = {k: x for k, x in os.environ.items() if k not in IDENTITY_VARS}
    env.update(v.get("env", {}))
    env["TF_CONFIG"] = tf_config_text(v)
    p = subprocess.run([weft, "tfconfig", "--json"], env=env, capture_output=True, text=True,
                       timeout=30)
    if p.returncode == 0:
        return "ok", json.loads(p.stdout)
    if not 1 <= p.returncode <= 127:
        raise RuntimeError("%s: weft tfconfig exited %d: %s" % (v["name"], p.returncode, p.stderr))
    return "refused", (p.stderr.strip().splitlines() or [""])[-1]


def check(v, kind, got):
    """The differences between weft's answer and the table's (empty: none)."""
    want = v["weft"]
    if "error" in want:
        if kind != "refused":
            return ["accepted, want a refusal naming '%s'" % want["error"]]
        return [] if want["error"] in got else ["refusal '%s' lacks '%s'" % (got, want["error"])]
    if kind != "ok":
        return ["refused: %s" % got]
    if want.get("local"):
        return [] if got["source"] == "none" and got["world_size"] == 1 else \
            ["want one process, got %s" % got["source"]]
    bad = []
    for key, field in (("role", "role"), ("index", "index"), ("world", "world_size"),
                       ("cluster", "cluster"), ("environment", "environment")):
        if key in want and got.get(field) != want[key]:
            bad.append("%s %r, want %r" % (field, got.get(field), want[key]))
    return bad


def main():
    weft = os.environ["WEFT"]
    variants = load_variants()
    with concurrent.futures.ThreadPoolExecutor(4) as pool:  # weft mostly waits to start
        answers = list(pool.map(lambda v: weft_answer(weft, v), variants))
    failed = 0
    for v, (kind, got) in zip(variants, answers):
        bad = check(v, kind, got)
        shown = got if kind == "refused" else "%s %d, world %d" % (got["role"], got["index"],
                                                                   got["world_size"])
        print("%s: %s: %s" % ("FAIL" if bad else "ok", v["name"], "; ".join(bad) or shown))
        failed += bool(bad)
    print("%d of %d variants as expected" % (len(variants) - failed, len(variants)))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
