"""The TF_CONFIG variants of tfconfig_variants.json read by TensorFlow's
TFConfigClusterResolver and by `weft tfconfig --json`, one line per variant:
agree or differ, and whether that is what the table expects (the README lists
each difference with its reason). Exits 77 when tensorflow cannot be imported
(CI has no TensorFlow; run it with a python that has it, e.g.
WEFT_TF_PYTHON=/path/to/venv/bin/python ctest -R tfconfig_vs_tf)."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_tfconfig_variants import load_variants, tf_config_text, weft_answer  # noqa: E402

try:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import tensorflow as tf
    from tensorflow.python.distribute import multi_worker_util
except ImportError as e:
    print("skip: tensorflow is not importable (%s)" % e)
    sys.exit(77)


def tf_answer(v):
    """("ok", (type, index, {job: {i: addr}}, world)) or ("refused", why).
    TensorFlow refuses when the resolver raises reading the task or the
    cluster, or when the check TensorFlow 2's strategies run on the
    resolver's answer (multi_worker_util's validate_cluster_spec, through
    worker_count and is_chief) raises. The resolver's master() is left out: a
    TensorFlow 1 session helper that skips its check for one-task clusters.
    TF_CONFIG's "environment" is left out too: the resolver takes it from its
    constructor, not from TF_CONFIG."""
    os.environ["TF_CONFIG"] = tf_config_text(v)
    try:
        r = tf.distribute.cluster_resolver.TFConfigClusterResolver()
        spec = r.cluster_spec()
        multi_worker_util._validate_cluster_spec(spec, r.task_type, r.task_id)
        jobs = {job: dict(enumerate(t)) if isinstance(t, list) else dict(t)
                for job, t in spec.as_dict().items()}
        world = len(jobs.get("chief", {})) + len(jobs.get("worker", {}))
        return "ok", (r.task_type, r.task_id, jobs, world)
    except Exception as e:  # noqa: BLE001 (any refusal counts)
        return "refused", "%s: %s" % (type(e).__name__, e)
    finally:
        del os.environ["TF_CONFIG"]


def weft_view(got):
    """weft's --json answer in tf_answer's form."""
    if got["source"] == "none":
        return (None, None, {}, 0)
    jobs = {job: {i: a for i, a in enumerate(t) if a is not None}
            for job, t in got["cluster"].items()}
    return (got["role"], got["index"], jobs, got["world_size"])


def main():
    weft = os.environ["WEFT"]
    unexpected = agree = 0
    variants = load_variants()
    print("TensorFlow %s" % tf.__version__)
    for v in variants:
        tk, ta = tf_answer(v)
        wk, wa = weft_answer(weft, v)
        if wk == "ok":
            wa = weft_view(wa)
        same = tk == wk and (tk == "refused" or ta == wa)
        agree += same
        verdict = "agree" if same else "differ"
        note = "" if verdict == v["tf"] else "  UNEXPECTED (table: %s)" % v["tf"]
        unexpected += bool(note)
        print("%-6s %s%s" % (verdict, v["name"], note))
        if not same:
            print("         tensorflow: %s %s" % (tk, ta))
            print("         weft:       %s %s" % (wk, wa))
    print("%d variants: %d agree, %d differ; %d not as the table says"
          % (len(variants), agree, len(variants) - agree, unexpected))
    return 1 if unexpected else 0


if __name__ == "__main__":
    sys.exit(main())
