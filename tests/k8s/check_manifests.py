"""check_manifests.py: renders every kustomization under k8s/ (the base, the
cpu and gpu overlays, the Kubeflow variants), validates every object against
the Kubernetes 1.30 schemas in strict mode (kubernetes-validate), checks the
operator kinds (TFJob, MPIJob: no schema ships offline) field by field with
their pod templates validated as PodTemplates, and checks what a user would:
the pieces fit (counts, services, ports, volumes), exit codes map to the
right podFailurePolicy action, and weft-serve's shutdown fits its grace
period.

Rendering: `kubectl kustomize` when a kubectl is given, and always this
file's own small kustomize (resources, strategic-merge patches by kind and
name, images): when both run they must agree, object for object.

usage: check_manifests.py K8S_DIR WEFT_SRC [KUBECTL]
"""
import copy
import json
import os
import re
import subprocess
import sys

import yaml
import kubernetes_validate

K8S_VERSION = "1.30.0"
failures = []


def fail(msg):
    failures.append(msg)
    print("FAIL: " + msg, file=sys.stderr)


def check(cond, msg):
    if not cond:
        fail(msg)
    return cond


# ---- a small kustomize ---------------------------------------------------------

# strategic merge: lists of these keys merge by the named field
MERGE_KEYS = {"containers": "name", "initContainers": "name", "env": "name",
              "volumes": "name", "volumeMounts": "mountPath", "ports": "containerPort",
              "tolerations": None}


def smp(base, patch, key=None):
    if isinstance(base, dict) and isinstance(patch, dict):
        out = dict(base)
        for k, v in patch.items():
            out[k] = smp(base[k], v, k) if k in base else copy.deepcopy(v)
        return out
    if isinstance(base, list) and isinstance(patch, list) and MERGE_KEYS.get(key):
        mk = MERGE_KEYS[key]
        out = [copy.deepcopy(b) for b in base]
        for p in patch:
            for i, b in enumerate(out):
                if b.get(mk) == p.get(mk):
                    out[i] = smp(b, p)
                    break
            else:
                out.append(copy.deepcopy(p))
        return out
    return copy.deepcopy(patch)


def set_images(node, images):
    if isinstance(node, dict):
        for k, v in node.items():
            if k in ("containers", "initContainers") and isinstance(v, list):
                for c in v:
                    for im in images:
                        name = c.get("image", "")
                        if name == im["name"] or name.startswith(im["name"] + ":"):
                            tag = im.get("newTag", name.partition(":")[2])
                            c["image"] = im.get("newName", im["name"]) + (":" + tag if tag else "")
            else:
                set_images(v, images)
    elif isinstance(node, list):
        for v in node:
            set_images(v, images)


def render(d):
    with open(os.path.join(d, "kustomization.yaml")) as f:
        k = yaml.safe_load(f)
    unknown = set(k) - {"apiVersion", "kind", "resources", "patches", "images"}
    if unknown:
        raise SystemExit("%s/kustomization.yaml: %s: not supported by this renderer" % (d, unknown))
    docs = []
    for r in k.get("resources", []):
        p = os.path.join(d, r)
        if os.path.isdir(p):
            docs += render(p)
        else:
            with open(p) as f:
                docs += [x for x in yaml.safe_load_all(f) if x]
    for pt in k.get("patches", []):
        with open(os.path.join(d, pt["path"])) as f:
            for patch in yaml.safe_load_all(f):
                if not patch:
                    continue
                hits = [i for i, x in enumerate(docs) if x["kind"] == patch["kind"] and
                        x["metadata"]["name"] == patch["metadata"]["name"]]
                if not check(len(hits) == 1, "%s: patch %s/%s matches %d objects" % (
                        d, patch["kind"], patch["metadata"]["name"], len(hits))):
                    continue
                docs[hits[0]] = smp(docs[hits[0]], patch)
    set_images(docs, k.get("images", []))
    return docs


def key(doc):
    return (doc["kind"], doc["metadata"]["name"])


# ---- helpers -------------------------------------------------------------------

def by(docs, kind, name):
    hits = [x for x in docs if key(x) == (kind, name)]
    check(len(hits) == 1, "%s %s: %d objects, want 1" % (kind, name, len(hits)))
    return hits[0] if hits else {}


def containers(pod_spec, name):
    hits = [c for c in pod_spec.get("containers", []) if c["name"] == name]
    return hits[0] if hits else {}


def selects(selector, labels):
    return all(labels.get(k) == v for k, v in selector.items())


def brief(e):
    """The cause and the path of a schema error, without the schema."""
    lines = str(e).splitlines()
    where = [l for l in lines if l.startswith("On instance")]
    return lines[0] + (" " + where[0][:-1] if where else "")


def validate(doc, where):
    try:
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
        return True
    except kubernetes_validate.SchemaNotFoundError:
        return None
    except kubernetes_validate.ValidationError as e:
        fail("%s: %s/%s does not validate against %s (strict): %s" % (
            where, doc.get("kind"), doc.get("metadata", {}).get("name"), K8S_VERSION, brief(e)))
        return False


def validate_template(tmpl, where):
    pt = {"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "t"},
          "template": tmpl}
    try:
        kubernetes_validate.validate(pt, K8S_VERSION, strict=True)
    except kubernetes_validate.ValidationError as e:
        fail("%s: pod template does not validate (strict): %s" % (where, brief(e)))


def first_action(policy, container, code):
    """The podFailurePolicy action a container's exit code gets (None: default)."""
    for rule in policy["rules"]:
        oe = rule.get("onExitCodes")
        if not oe or oe.get("containerName", container) != container:
            continue
        inside = code in oe["values"]
        if (oe["operator"] == "In") == inside:
            return rule["action"]
    return None


def pod_non_root(spec, where):
    sc = spec.get("securityContext", {})
    check(sc.get("runAsNonRoot") is True or sc.get("runAsUser", 0) > 0,
          "%s: pods must run as non-root" % where)


# ---- the checks -------------------------------------------------------------------

def check_train(docs, where, gpu):
    cl = by(docs, "ConfigMap", "weft-cluster").get("data", {})
    conf = by(docs, "ConfigMap", "weft-train-config").get("data", {})
    cfg = {}
    try:
        cfg = json.loads(conf.get("config.json", ""))
        check(cfg["strategy"]["name"] == "parameter_server", "%s: config strategy" % where)
    except (ValueError, KeyError) as e:
        fail("%s: weft-train-config config.json: %s" % (where, e))
    port = int(cl.get("WEFT_PORT", "2222"))
    roles = {"ps": ("Job", "WEFT_NUM_PS"), "worker": ("Job", "WEFT_NUM_WORKERS"),
             "chief": ("Job", "WEFT_NUM_CHIEF")}
    for role, (kind, num) in roles.items():
        w = "%s: %s %s" % (where, kind, role)
        obj = by(docs, kind, role)
        svc_name = cl.get("WEFT_%s_SERVICE" % role.upper(), role)
        svc = by(docs, "Service", svc_name)
        spec = obj.get("spec", {})
        tmpl = spec.get("template", {})
        pod = tmpl.get("spec", {})
        n = int(cl.get(num, "-1"))
        check(svc.get("spec", {}).get("clusterIP") == "None", "%s: Service %s is not headless" % (w, svc_name))
        check(selects(svc.get("spec", {}).get("selector", {}), tmpl.get("metadata", {}).get("labels", {})),
              "%s: Service %s does not select its pods" % (w, svc_name))
        check([p["port"] for p in svc.get("spec", {}).get("ports", [])] == [port],
              "%s: Service %s port is not WEFT_PORT %d" % (w, svc_name, port))
        # pods are named <name>-<N>: the derivation's default name is the service's
        check(obj["metadata"]["name"] == cl.get("WEFT_%s_NAME" % role.upper(), svc_name),
              "%s: pod names %s-N do not match the service %s" % (w, obj["metadata"]["name"], svc_name))
        # every role is an Indexed Job: the servers' Job too, so it ends when
        # the chief shuts them down (a StatefulSet would restart them)
        check(spec.get("completionMode") == "Indexed", "%s: not an Indexed Job" % w)
        check(spec.get("completions") == n and spec.get("parallelism") == n,
              "%s: completions/parallelism != %s %d" % (w, num, n))
        check(pod.get("subdomain") == svc_name, "%s: subdomain is not %s" % (w, svc_name))
        check(pod.get("restartPolicy") == "Never", "%s: podFailurePolicy needs restartPolicy Never" % w)
        pol = spec.get("podFailurePolicy", {"rules": []})
        for code in range(1, 128):
            if first_action(pol, "weft", code) != "FailJob":
                fail("%s: exit %d (permanent) does not fail the Job" % (w, code))
                break
        check(first_action(pol, "weft", 138) in ("Count", "Ignore"), "%s: exit 138 is not retried" % w)
        check(first_action(pol, "weft", 137) != "FailJob", "%s: a killed pod fails the Job" % w)
        check(spec.get("backoffLimit", 6) > 0, "%s: no retries" % w)
        check(any(r["action"] == "Ignore" and r.get("onPodConditions", [{}])[0].get("type") ==
                  "DisruptionTarget" for r in pol["rules"]), "%s: evictions count as failures" % w)
        c = containers(pod, "weft")
        env = {e["name"]: e.get("value") for e in c.get("env", [])}
        check(env.get("WEFT_ROLE") == role, "%s: WEFT_ROLE is %s" % (w, env.get("WEFT_ROLE")))
        check({"configMapRef": {"name": "weft-cluster"}} in c.get("envFrom", []),
              "%s: does not read the weft-cluster ConfigMap" % w)
        check([p["containerPort"] for p in c.get("ports", [])] == [port], "%s: containerPort != %d" % (w, port))
        check(c.get("args", [None])[0] == ("ps" if role == "ps" else "train"), "%s: command %s" % (w, c.get("args")))
        mounts = {m["mountPath"]: m["name"] for m in c.get("volumeMounts", [])}
        vols = {v["name"]: v for v in pod.get("volumes", [])}
        check(vols.get(mounts.get("/weft"), {}).get("persistentVolumeClaim", {}).get("claimName") == "weft-run",
              "%s: the run volume (PVC weft-run) is not at /weft" % w)
        data = [m for m in c.get("volumeMounts", []) if m["mountPath"] == "/data"]
        if role == "ps":  # the config's model.input_shape and classes give the layout
            check(not data, "%s: the servers mount the data volume (they need no data)" % w)
            m = cfg.get("model", {}) if isinstance(cfg, dict) else {}
            check(len(m.get("input_shape", [])) == 3 and m.get("classes", 0) > 0,
                  "%s: config.json lacks model.input_shape and model.classes (the servers "
                  "would need the data)" % w)
        else:
            check(data and data[0].get("readOnly") and vols.get(data[0]["name"], {}).get(
                "persistentVolumeClaim", {}).get("claimName") == "weft-data",
                "%s: the data volume (PVC weft-data) is not at /data, read-only" % w)
        for k in ("train", "eval"):
            path = cfg.get("data", {}).get(k, "") if isinstance(cfg, dict) else ""
            check(not path or path.startswith("/data/"), "%s: data.%s %s is not on the data volume" % (w, k, path))
        check(not pod.get("initContainers"), "%s: init containers (the data comes from the volume)" % w)
        check(vols.get(mounts.get("/etc/weft"), {}).get("configMap", {}).get("name") == "weft-train-config",
              "%s: the config is not at /etc/weft" % w)
        args = c.get("args", [])
        kd = args[args.index("--key-dir") + 1] if "--key-dir" in args[:-1] else None
        check(kd is not None and vols.get(mounts.get(kd), {}).get("secret", {}).get("secretName") ==
              "weft-keys", "%s: no --key-dir on the CURVE keys (Secret weft-keys)" % w)
        pod_non_root(pod, w)
        lim = c.get("resources", {}).get("limits", {})
        want_gpu = gpu and role != "ps"
        check(("nvidia.com/gpu" in lim) == want_gpu, "%s: nvidia.com/gpu limit %s, want %s" % (
            w, lim.get("nvidia.com/gpu"), "1" if want_gpu else "none"))
    pvc = by(docs, "PersistentVolumeClaim", "weft-run")
    check("ReadWriteMany" in pvc.get("spec", {}).get("accessModes", []), "%s: the run PVC is not RWX" % where)
    by(docs, "PersistentVolumeClaim", "weft-data")
    # the model's name is set once (ConfigMap weft-model): the chief's export
    # directory and weft-serve's model are both made from it
    check("export" not in cfg, "%s: config.json sets export (the chief's --set export.dir does)" % where)
    chief = containers(by(docs, "Job", "chief").get("spec", {}).get("template", {}).get("spec", {}), "weft")
    check("export.dir=/weft/models/$(WEFT_MODEL_NAME)" in chief.get("args", []) and
          model_name_from_configmap(chief), "%s: the chief does not export to /weft/models/$(WEFT_MODEL_NAME)" % where)


def model_name_from_configmap(c):
    """The container's WEFT_MODEL_NAME comes from ConfigMap weft-model."""
    for e in c.get("env", []):
        if e["name"] == "WEFT_MODEL_NAME":
            return e.get("valueFrom", {}).get("configMapKeyRef", {}) == {
                "name": "weft-model", "key": "WEFT_MODEL_NAME"}
    return False


def arg_value(args, flag):
    return args[args.index(flag) + 1] if flag in args else None


def check_serve(docs, where, gpu):
    dep = by(docs, "Deployment", "weft-serve")
    tmpl = dep.get("spec", {}).get("template", {})
    pod = tmpl.get("spec", {})
    c = containers(pod, "weft-serve")
    args = c.get("args", [])
    check(c.get("readinessProbe", {}).get("httpGet", {}).get("path") == "/v2/health/ready",
          "%s: readiness is not /v2/health/ready" % where)
    check(c.get("livenessProbe", {}).get("httpGet", {}).get("path") == "/v2/health/live",
          "%s: liveness is not /v2/health/live" % where)
    pre = c.get("lifecycle", {}).get("preStop", {})
    cmd = pre.get("exec", {}).get("command", [])
    sleep = int(cmd[1]) if cmd[:1] == ["sleep"] else pre.get("sleep", {}).get("seconds", 0)
    drain = int(arg_value(args, "--drain_timeout_seconds") or 30)  # weft-serve's default
    grace = pod.get("terminationGracePeriodSeconds", 30)
    check(sleep > 0, "%s: no preStop delay" % where)
    check(grace >= sleep + drain + 5, "%s: terminationGracePeriodSeconds %d < preStop %d + drain %d + 5" % (
        where, grace, sleep, drain))
    port = int(arg_value(args, "--rest_api_port") or 8501)
    named = {p["name"]: p["containerPort"] for p in c.get("ports", [])}
    check(named.get("http") == port, "%s: container port http != --rest_api_port" % where)
    svc = by(docs, "Service", "weft-serve")
    check(selects(svc.get("spec", {}).get("selector", {}), tmpl.get("metadata", {}).get("labels", {})),
          "%s: Service weft-serve does not select the pods" % where)
    check(svc.get("spec", {}).get("ports", [{}])[0].get("targetPort") in ("http", port), "%s: Service port" % where)
    hpa = by(docs, "HorizontalPodAutoscaler", "weft-serve")
    check(hpa.get("spec", {}).get("scaleTargetRef", {}).get("name") == "weft-serve", "%s: HPA target" % where)
    check(c.get("resources", {}).get("requests", {}).get("cpu"), "%s: HPA on CPU needs a CPU request" % where)
    pdb = by(docs, "PodDisruptionBudget", "weft-serve")
    check(selects(pdb.get("spec", {}).get("selector", {}).get("matchLabels", {}),
                  tmpl.get("metadata", {}).get("labels", {})), "%s: PDB does not select the pods" % where)
    check(pdb.get("spec", {}).get("minAvailable", 0) < min(dep["spec"]["replicas"], hpa["spec"]["minReplicas"]),
          "%s: the PDB blocks every eviction" % where)
    check(arg_value(args, "--model_name") == "$(WEFT_MODEL_NAME)" and
          arg_value(args, "--model_base_path") == "/weft/models/$(WEFT_MODEL_NAME)" and
          model_name_from_configmap(c), "%s: weft-serve does not serve $(WEFT_MODEL_NAME) from "
          "/weft/models/$(WEFT_MODEL_NAME) (ConfigMap weft-model)" % where)
    check(by(docs, "ConfigMap", "weft-model").get("data", {}).get("WEFT_MODEL_NAME"),
          "%s: ConfigMap weft-model has no WEFT_MODEL_NAME" % where)
    base = arg_value(args, "--model_base_path") or ""
    mounts = [m for m in c.get("volumeMounts", []) if base.startswith(m["mountPath"].rstrip("/") + "/")]
    check(mounts and mounts[0].get("readOnly"), "%s: the model path %s is not on a read-only volume" % (where, base))
    lim = c.get("resources", {}).get("limits", {})
    check(("nvidia.com/gpu" in lim) == gpu, "%s: serve nvidia.com/gpu limit: %s" % (where, lim))
    pod_non_root(pod, where + ": weft-serve")


def check_images(docs, where, want):
    for d in docs:
        for part in re.findall(r"'image': '([^']*)'", str(d)):
            check(any(part.startswith(w) for w in want), "%s: %s: image %s not set by the overlay" % (
                where, key(d), part))


def check_tfjob(doc, where):
    spec = doc.get("spec", {})
    check(doc.get("apiVersion") == "kubeflow.org/v1", "%s: TFJob apiVersion" % where)
    check(set(spec) <= {"runPolicy", "successPolicy", "tfReplicaSpecs", "enableDynamicWorker"},
          "%s: TFJob spec fields %s" % (where, sorted(spec)))
    rp = spec.get("runPolicy", {})
    check(set(rp) <= {"cleanPodPolicy", "ttlSecondsAfterFinished", "activeDeadlineSeconds",
                      "backoffLimit", "schedulingPolicy", "suspend", "managedBy"}, "%s: runPolicy %s" % (where, rp))
    check(rp.get("cleanPodPolicy", "None") in ("All", "Running", "None"), "%s: cleanPodPolicy" % where)
    reps = spec.get("tfReplicaSpecs", {})
    check(set(reps) <= {"Chief", "Master", "PS", "Worker", "Evaluator"} and {"PS", "Worker"} <= set(reps),
          "%s: tfReplicaSpecs %s" % (where, sorted(reps)))
    for name, r in reps.items():
        w = "%s: tfReplicaSpecs.%s" % (where, name)
        check(set(r) <= {"replicas", "restartPolicy", "template"}, "%s: fields %s" % (w, sorted(r)))
        check(isinstance(r.get("replicas"), int) and r["replicas"] >= 1, "%s: replicas" % w)
        check(r.get("restartPolicy") == "ExitCode", "%s: restartPolicy %s: ExitCode retries 128-255 "
              "(138) and not 1-127" % (w, r.get("restartPolicy")))
        validate_template(r.get("template", {}), w)
        c = containers(r["template"]["spec"], "tensorflow")
        check(c, "%s: no container named tensorflow (the operator injects TF_CONFIG there)" % w)
        check({"name": "tfjob-port", "containerPort": 2222} in c.get("ports", []), "%s: tfjob-port 2222" % w)
        check(c.get("args", [None])[0] == ("ps" if name == "PS" else "train"), "%s: args %s" % (w, c.get("args")))
        pod_non_root(r["template"]["spec"], w)


def check_mpijob(doc, where, src):
    spec = doc.get("spec", {})
    check(doc.get("apiVersion") == "kubeflow.org/v2beta1", "%s: MPIJob apiVersion" % where)
    check(set(spec) <= {"slotsPerWorker", "runPolicy", "mpiReplicaSpecs", "sshAuthMountPath",
                        "mpiImplementation", "launcherCreationPolicy", "runLauncherAsWorker"},
          "%s: MPIJob spec fields %s" % (where, sorted(spec)))
    check(spec.get("mpiImplementation", "OpenMPI") in ("OpenMPI", "Intel", "MPICH"), "%s: mpiImplementation" % where)
    reps = spec.get("mpiReplicaSpecs", {})
    check(set(reps) == {"Launcher", "Worker"}, "%s: mpiReplicaSpecs %s" % (where, sorted(reps)))
    for name, r in reps.items():
        w = "%s: mpiReplicaSpecs.%s" % (where, name)
        check(set(r) <= {"replicas", "restartPolicy", "template"}, "%s: fields %s" % (w, sorted(r)))
        check(r.get("restartPolicy", "Never") in ("Always", "OnFailure", "Never", "ExitCode"), "%s: restartPolicy" % w)
        validate_template(r.get("template", {}), w)
        pod_non_root(r["template"]["spec"], w)
    check(reps["Launcher"].get("replicas") == 1, "%s: one launcher" % where)
    cmd = reps["Launcher"]["template"]["spec"]["containers"][0].get("command", [])
    np_ = int(arg_value(cmd, "-np") or arg_value(cmd, "-n") or 0)
    check(np_ == reps["Worker"]["replicas"] * spec.get("slotsPerWorker", 1),
          "%s: mpirun -np %d != workers x slotsPerWorker" % (where, np_))
    check("strategy.name=allreduce" in cmd and "weft" in cmd, "%s: the launcher does not run allreduce" % where)
    wcmd = reps["Worker"]["template"]["spec"]["containers"][0].get("command", [])
    with open(os.path.join(src, "k8s/docker/Dockerfile.train")) as f:
        dockerfile = f.read()
    check(wcmd[:1] == ["/usr/sbin/sshd"] and "openssh-server" in dockerfile,
          "%s: workers must run the image's sshd" % where)
    conf = arg_value(wcmd, "-f")
    check(conf and re.search(r"^COPY \S+ %s$" % re.escape(conf), dockerfile, re.M),
          "%s: sshd config %s is not in the training image" % (where, conf))
    check(spec.get("sshAuthMountPath", "/root/.ssh").startswith("/home/weft/"),
          "%s: sshAuthMountPath is not the image user's home" % where)


def main():
    k8s, src = sys.argv[1], sys.argv[2]
    kubectl = sys.argv[3] if len(sys.argv) > 3 else ""
    dirs = {"base": "base", "overlays/cpu": "cpu", "overlays/gpu": "gpu",
            "kubeflow/tfjob": "tfjob", "kubeflow/mpijob": "mpijob",
            "examples/synth-data": "synth-data"}
    found = sorted(os.path.relpath(r, k8s) for r, _, fs in os.walk(k8s) if "kustomization.yaml" in fs)
    rendered = {}
    for d in dirs:
        docs = render(os.path.join(k8s, d))
        if kubectl:
            out = subprocess.run([kubectl, "kustomize", os.path.join(k8s, d)], capture_output=True,
                                 text=True)
            if check(out.returncode == 0, "kubectl kustomize %s: %s" % (d, out.stderr.strip())):
                theirs = {key(x): x for x in yaml.safe_load_all(out.stdout) if x}
                ours = {key(x): x for x in docs}
                check(sorted(theirs) == sorted(ours), "%s: kubectl renders %s, we render %s" % (
                    d, sorted(theirs), sorted(ours)))
                for k in ours:
                    if k in theirs and theirs[k] != ours[k]:
                        fail("%s: %s renders differently with kubectl kustomize" % (d, k))
        rendered[d] = docs
    # every object of every rendering (patches are partial objects: they are
    # validated once merged)
    seen = 0
    for d, docs in rendered.items():
        for doc in docs:
            r = validate(doc, d)
            seen += r is not None
            if r is None:
                check(doc["kind"] in ("TFJob", "MPIJob"), "%s: no schema for %s" % (d, key(doc)))
    for d in ("base", "overlays/cpu", "overlays/gpu"):
        check_train(rendered[d], d, gpu=(d == "overlays/gpu"))
        check_serve(rendered[d], d, gpu=(d == "overlays/gpu"))
    check_images(rendered["overlays/cpu"], "overlays/cpu", ["registry.example.com/weft/train:",
                                                            "registry.example.com/weft/serve-cpu:"])
    check_images(rendered["overlays/gpu"], "overlays/gpu", ["registry.example.com/weft/train:",
                                                            "registry.example.com/weft/serve-cuda:"])
    check_tfjob(by(rendered["kubeflow/tfjob"], "TFJob", "weft"), "kubeflow/tfjob")
    check_mpijob(by(rendered["kubeflow/mpijob"], "MPIJob", "weft-allreduce"), "kubeflow/mpijob", src)
    synth = by(rendered["examples/synth-data"], "Job", "weft-data-synth")
    outs = [arg_value(c.get("args", []), "--out") for k in ("initContainers", "containers")
            for c in synth.get("spec", {}).get("template", {}).get("spec", {}).get(k, [])]
    try:
        cfg = json.loads(by(rendered["base"], "ConfigMap", "weft-train-config")["data"]["config.json"])
        want = sorted([cfg["data"]["train"], cfg["data"]["eval"]])
    except (KeyError, ValueError):
        want = None
    check(sorted(outs) == want, "examples/synth-data: writes %s, the config reads %s" % (outs, want))
    missing = sorted(set(found) - set(dirs) - {"base/common", "base/train", "base/serve"})
    check(not missing, "kustomizations not checked: %s" % missing)
    print("%d objects validated against Kubernetes %s (strict) in %d renderings (%s); "
          "TFJob and MPIJob checked field by field, their pod templates validated" % (
              seen, K8S_VERSION, len(rendered), "kubectl kustomize and our own, equal" if kubectl else
              "our own kustomize"))
    if failures:
        print("%d failures" % len(failures), file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
