#!/usr/bin/env python3
"""Checks the rendered deploy/k8s objects and the llm-d router values file.

  validate_objects.py --rendered R.yaml --crds tests/k8s/crds --values deploy/k8s/llm-d-router-values.yaml
                      [--dump R.json]

1. InferencePool and HTTPRoute validate against the upstream CRD schemas (tests/k8s/crds, their
   openAPIV3Schema) with python3-jsonschema. Unknown fields are rejected, as a strict `kubectl
   apply` (server-side field validation) rejects them; the CEL rules that apply to these objects
   are re-checked by hand (JSON Schema validators do not evaluate CEL).
2. The objects agree with each other: the pool selects the Deployment's pods on its container
   port, the route names the pool, the pool names the picker the values file installs, the picker
   selects the same pods and maps the engine label the pods carry.
3. The Deployment is sized by the formula of docs/deploy.md ("Sizing a replica") for its own
   arguments, and its grace period covers the preStop hook and the drain bound.
Each check is first run on a broken copy and must fail there, so a check that cannot fail is found.
Core objects (Deployment, Service, PVC) are validated by validate_core.mjs (npm kubernetes-models).
Exit 0 when all pass, 1 otherwise.
"""
import argparse
import copy
import json
import pathlib
import re
import sys

import jsonschema
import yaml

# Clover-35B-A3B-Preview's shapes (docs/gguf.md, preset clover-35b-a3b).
CLOVER = dict(n_attention=10, n_recurrent=30, n_head_kv=2, head_dim=256, n_embd=2048,
              ssm_k_heads=16, ssm_v_heads=32, ssm_d_state=128, ssm_d_conv=4, n_vocab=248_320,
              n_expert_used=8, n_ff=512, n_expert=256, max_record_tokens=256, max_block=32)

failures = []


def check(ok, what):
    if not ok:
        failures.append(what)
    return ok


def quantity_bytes(q):
    """Kubernetes quantity (memory) -> bytes."""
    m = re.fullmatch(r"(\d+(?:\.\d+)?)(Ki|Mi|Gi|Ti|k|M|G|T)?", str(q))
    if not m:
        raise ValueError(f"not a memory quantity: {q}")
    mult = {None: 1, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40,
            "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}[m.group(2)]
    return float(m.group(1)) * mult


def arg_value(args, *names, default=None):
    for i, a in enumerate(args):
        if a in names and i + 1 < len(args):
            return args[i + 1]
    return default


def required_memory(args, model_bytes, hp=CLOVER):
    """docs/deploy.md, "Sizing a replica": bytes a crossword serve process needs, from
    src/model/state.h (KV, GDN state, recording), src/model/model.cc (ForwardContext) and the
    prompt cache's checkpoints (one GDN state each), plus 1 GiB for everything else."""
    slots = int(arg_value(args, "-np", "--parallel", default="1"))
    ctx = int(arg_value(args, "-c", "--ctx-size", default="0")) or 4096 * slots
    ckpt = int(arg_value(args, "--ctx-checkpoints", default="8"))
    batch = int(arg_value(args, "-b", "--batch-size", default="512"))
    kv_bytes = 4 if arg_value(args, "--kv-type", default="f16").lower() == "f32" else 2
    conv_dim = 2 * hp["ssm_k_heads"] * hp["ssm_d_state"] + hp["ssm_v_heads"] * hp["ssm_d_state"]
    gdn_layer = (hp["ssm_d_conv"] - 1) * conv_dim + hp["ssm_v_heads"] * hp["ssm_d_state"] ** 2
    gdn = hp["n_recurrent"] * gdn_layer * 4
    rec = hp["n_recurrent"] * (gdn_layer + hp["max_record_tokens"] *
                               (2 * conv_dim + 2 * hp["ssm_v_heads"])) * 4
    rec += hp["max_record_tokens"] * hp["ssm_v_heads"] * hp["ssm_d_state"] * 4
    kv_per_token = hp["n_attention"] * 2 * hp["n_head_kv"] * hp["head_dim"] * kv_bytes
    d_inner = hp["ssm_v_heads"] * hp["ssm_d_state"]
    q_dim = 16 * hp["head_dim"]
    kv_dim = hp["n_head_kv"] * hp["head_dim"]
    k = hp["n_expert_used"]
    floats_per_token = (3 * hp["n_embd"] + 2 * conv_dim + 2 * d_inner + 4 * hp["ssm_v_heads"] +
                        3 * q_dim + 2 * kv_dim + hp["n_expert"] + k + 2 * (k + 1) * hp["n_ff"] +
                        k * hp["n_embd"] + hp["n_embd"])
    tokens = max(batch, slots * hp["max_block"])
    rows = slots * hp["max_block"]
    scratch = (tokens * floats_per_token + rows * (hp["n_vocab"] + hp["n_embd"]) +
               slots * gdn_layer) * 4
    return (model_bytes + slots * (gdn + rec) + slots * ckpt * gdn + ctx * kv_per_token +
            scratch + 2**30)


def strict(schema):
    """The schema with unknown object fields rejected (additionalProperties: false wherever the
    schema lists properties and neither allows extra ones nor preserves unknown fields)."""
    s = copy.deepcopy(schema)

    def walk(node):
        if isinstance(node, dict):
            if ("properties" in node and "additionalProperties" not in node and
                    not node.get("x-kubernetes-preserve-unknown-fields")):
                node["additionalProperties"] = False
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    walk(s)
    # metadata is validated by the API server itself, not by the CRD: allow the usual fields.
    s["properties"]["metadata"] = {"type": "object"}
    return s


def load_crd_schemas(crd_dir):
    schemas = {}
    for p in sorted(pathlib.Path(crd_dir).glob("*.yaml")):
        crd = yaml.safe_load(p.read_text())
        group, kind = crd["spec"]["group"], crd["spec"]["names"]["kind"]
        for v in crd["spec"]["versions"]:
            if v.get("served"):
                schemas[(f"{group}/{v['name']}", kind)] = strict(v["schema"]["openAPIV3Schema"])
    return schemas


def crd_errors(obj, schemas):
    key = (obj.get("apiVersion"), obj.get("kind"))
    if key not in schemas:
        return [f"no CRD schema for {key}"]
    v = jsonschema.Draft7Validator(schemas[key])
    errs = [f"{'/'.join(map(str, e.path))}: {e.message}" for e in v.iter_errors(obj)]
    # CEL rules of these CRDs that our objects can meet (JSON Schema does not run them).
    spec = obj.get("spec", {})
    if obj["kind"] == "InferencePool":
        ref = spec.get("endpointPickerRef", {})
        if ref.get("kind", "Service") == "Service" and "port" not in ref:
            errs.append("endpointPickerRef: port is required when kind is Service")
        nums = [p.get("number") for p in spec.get("targetPorts", [])]
        if len(nums) != len(set(nums)):
            errs.append("targetPorts: port number must be unique")
    if obj["kind"] == "HTTPRoute":
        for rule in spec.get("rules", []):
            for b in rule.get("backendRefs", []):
                if b.get("group", "") == "" and b.get("kind", "Service") == "Service" and \
                        "port" not in b:
                    errs.append("backendRefs: Must have port for Service reference")
    return errs


def epp_config(values):
    """The EndpointPickerConfig the values file gives the chart (a YAML string in values)."""
    epp = values["router"]["epp"]
    return yaml.safe_load(epp["pluginsCustomConfig"][epp["pluginsConfigFile"]])


def consistency_errors(objs, values):
    errs = []
    by_kind = {o["kind"]: o for o in objs}
    dep, pool, route, svc = (by_kind.get(k) for k in
                             ("Deployment", "InferencePool", "HTTPRoute", "Service"))
    if not (dep and pool and route and svc):
        return [f"missing objects: have {sorted(by_kind)}"]
    pod_labels = dep["spec"]["template"]["metadata"]["labels"]
    container = dep["spec"]["template"]["spec"]["containers"][0]
    ports = {p["containerPort"] for p in container.get("ports", [])}
    named = {p["name"]: p["containerPort"] for p in container.get("ports", []) if "name" in p}

    def selects(selector):
        return selector and all(pod_labels.get(k) == v for k, v in selector.items())

    if not selects(pool["spec"]["selector"]["matchLabels"]):
        errs.append("the InferencePool's selector does not select the Deployment's pods")
    if not selects(svc["spec"]["selector"]):
        errs.append("the Service's selector does not select the Deployment's pods")
    if not selects(dep["spec"]["selector"]["matchLabels"]):
        errs.append("the Deployment's selector does not select its own pods")
    for p in pool["spec"]["targetPorts"]:
        if p["number"] not in ports:
            errs.append(f"pool target port {p['number']} is no container port ({sorted(ports)})")
    backends = [b for r in route["spec"]["rules"] for b in r.get("backendRefs", [])]
    if not any(b.get("kind") == "InferencePool" and b.get("name") == pool["metadata"]["name"] and
               b.get("group") == "inference.networking.k8s.io" for b in backends):
        errs.append("the HTTPRoute does not send traffic to the InferencePool")
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        pr = container.get(probe)
        if not pr:
            errs.append(f"no {probe}")
            continue
        action = pr.get("httpGet") or pr.get("tcpSocket") or {}
        port = action.get("port")
        if (named.get(port) if isinstance(port, str) else port) not in ports:
            errs.append(f"{probe} probes port {port}, which the container does not open")
    for probe in ("startupProbe", "readinessProbe"):
        if (container.get(probe, {}).get("httpGet") or {}).get("path") != "/health":
            errs.append(f"{probe} must GET /health (503 while loading or draining)")

    # The values file: the picker the pool names, the same pods, the engine label's mapping.
    router = values["router"]
    release = "crossword"  # docs/deploy.md installs the chart under this release name
    epp_name = f"{release}-epp"  # the chart's naming (routerlib llm-d-router.name)
    if pool["spec"]["endpointPickerRef"]["name"] != epp_name:
        errs.append(f"the pool's picker is {pool['spec']['endpointPickerRef']['name']}, "
                    f"the chart installs {epp_name}")
    if router["modelServers"]["matchLabels"] != pool["spec"]["selector"]["matchLabels"]:
        errs.append("the picker's matchLabels differ from the pool's selector")
    if [p["number"] for p in router["modelServers"]["targetPorts"]] != \
            [p["number"] for p in pool["spec"]["targetPorts"]]:
        errs.append("the picker's target ports differ from the pool's")
    cfg = epp_config(values)
    names = {p.get("name", p["type"]) for p in cfg["plugins"]}
    for prof in cfg["schedulingProfiles"]:
        for ref in prof["plugins"]:
            if ref["pluginRef"] not in names:
                errs.append(f"profile {prof['name']} refers to unknown plugin {ref['pluginRef']}")
    ext = [p for p in cfg["plugins"] if p["type"] == "core-metrics-extractor"]
    if len(ext) != 1:
        return errs + ["the picker config needs one core-metrics-extractor"]
    params = ext[0]["parameters"]
    label_key = params.get("engineLabelKey", "llm-d.ai/engine-type")
    engine = pod_labels.get(label_key)
    configs = {c["name"]: c for c in params.get("engineConfigs", [])}
    if engine not in configs:
        errs.append(f"the pods' {label_key} label ({engine}) has no engineConfigs entry")
    if params.get("defaultEngine") not in configs:
        errs.append("defaultEngine names no engineConfigs entry")
    for c in configs.values():
        for f in ("queuedRequestsSpec", "runningRequestsSpec", "kvUsageSpec"):
            if not c.get(f):
                errs.append(f"engine {c['name']}: {f} is empty")
        unknown = set(c) - {"name", "queuedRequestsSpec", "runningRequestsSpec", "kvUsageSpec",
                            "loraSpec", "cacheInfoSpec", "cacheBlockSizeLabelName",
                            "cacheNumBlocksLabelName", "cacheBlockSizeSpec", "cacheNumBlocksSpec",
                            "customMetrics"}
        if unknown:
            errs.append(f"engine {c['name']}: unknown fields {sorted(unknown)}")
    return errs


def sizing_errors(objs):
    errs = []
    dep = next(o for o in objs if o["kind"] == "Deployment")
    pod = dep["spec"]["template"]
    c = pod["spec"]["containers"][0]
    args = c["args"]
    model_bytes = int(pod["metadata"]["annotations"]["crossword/model-file-bytes"])
    need = required_memory(args, model_bytes)
    req = quantity_bytes(c["resources"]["requests"]["memory"])
    lim = quantity_bytes(c["resources"]["limits"]["memory"])
    if req < need:
        errs.append(f"memory request {req / 2**30:.2f} GiB < the formula's {need / 2**30:.2f} GiB")
    if req > need * 1.15:
        errs.append(f"memory request {req / 2**30:.2f} GiB > 1.15 x the formula's "
                    f"{need / 2**30:.2f} GiB")
    if lim < req:
        errs.append("memory limit below the request")
    threads = arg_value(args, "-t", "--threads")
    if threads is None or float(c["resources"]["requests"]["cpu"]) != float(threads):
        errs.append("the CPU request must equal -t (one compute thread per requested core)")
    drain = arg_value(args, "--drain-timeout")
    if drain is None:
        errs.append("no --drain-timeout: SIGTERM would not wait for running requests")
        return errs
    pre = c.get("lifecycle", {}).get("preStop", {})
    pre_s = 0
    if "sleep" in pre:
        pre_s = int(pre["sleep"]["seconds"])
    elif "exec" in pre and pre["exec"]["command"][:1] == ["sleep"]:
        pre_s = int(pre["exec"]["command"][1])
    grace = pod["spec"].get("terminationGracePeriodSeconds", 30)
    if grace <= pre_s + float(drain):
        errs.append(f"terminationGracePeriodSeconds {grace} <= preStop {pre_s} s + "
                    f"--drain-timeout {drain} s")
    return errs


def run_checks(objs, values, schemas):
    global failures
    failures = []
    for o in objs:
        if o["kind"] in ("InferencePool", "HTTPRoute"):
            for e in crd_errors(o, schemas):
                check(False, f"{o['kind']} {o['metadata']['name']}: {e}")
    for e in consistency_errors(objs, values):
        check(False, e)
    for e in sizing_errors(objs):
        check(False, e)
    return failures


def mutations():
    """Broken copies (description, function that breaks a copy) every one of which must fail."""
    def kind(objs, k):
        return next(o for o in objs if o["kind"] == k)

    def m(desc):
        def deco(fn):
            muts.append((desc, fn))
            return fn
        return deco

    muts = []

    @m("pool failureMode outside its enum")
    def _(o, v):
        kind(o, "InferencePool")["spec"]["endpointPickerRef"]["failureMode"] = "Sometimes"

    @m("unknown field in the pool spec")
    def _(o, v):
        kind(o, "InferencePool")["spec"]["targetPortz"] = [{"number": 8080}]

    @m("nine target ports (max 8)")
    def _(o, v):
        kind(o, "InferencePool")["spec"]["targetPorts"] = [{"number": 8080 + i} for i in range(9)]

    @m("duplicate target ports (CEL rule)")
    def _(o, v):
        kind(o, "InferencePool")["spec"]["targetPorts"] = [{"number": 8080}, {"number": 8080}]

    @m("picker reference without port (CEL rule)")
    def _(o, v):
        del kind(o, "InferencePool")["spec"]["endpointPickerRef"]["port"]

    @m("route path type outside its enum")
    def _(o, v):
        kind(o, "HTTPRoute")["spec"]["rules"][0]["matches"][0]["path"]["type"] = "Glob"

    @m("route to a Service without port (CEL rule)")
    def _(o, v):
        kind(o, "HTTPRoute")["spec"]["rules"][0]["backendRefs"][0] = {"name": "crossword"}

    @m("pool selects other pods")
    def _(o, v):
        kind(o, "InferencePool")["spec"]["selector"]["matchLabels"] = {"app": "other"}

    @m("pool targets a port the container does not open")
    def _(o, v):
        kind(o, "InferencePool")["spec"]["targetPorts"] = [{"number": 9999}]

    @m("route to another pool")
    def _(o, v):
        kind(o, "HTTPRoute")["spec"]["rules"][0]["backendRefs"][0]["name"] = "elsewhere"

    @m("picker maps another engine than the pods' label")
    def _(o, v):
        cfg = epp_config(v)
        ext = next(p for p in cfg["plugins"] if p["type"] == "core-metrics-extractor")
        ext["parameters"]["engineConfigs"][0]["name"] = "other"
        v["router"]["epp"]["pluginsCustomConfig"][v["router"]["epp"]["pluginsConfigFile"]] = \
            yaml.safe_dump(cfg)

    @m("memory request below the formula")
    def _(o, v):
        c = kind(o, "Deployment")["spec"]["template"]["spec"]["containers"][0]
        c["resources"]["requests"]["memory"] = "20Gi"

    @m("twice the slots for the same memory")
    def _(o, v):
        args = kind(o, "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"]
        args[args.index("-np") + 1] = "8"

    @m("grace period shorter than preStop + drain bound")
    def _(o, v):
        kind(o, "Deployment")["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] = 60

    @m("readiness on another path")
    def _(o, v):
        c = kind(o, "Deployment")["spec"]["template"]["spec"]["containers"][0]
        c["readinessProbe"]["httpGet"]["path"] = "/"

    return muts


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rendered", required=True)
    ap.add_argument("--crds", required=True)
    ap.add_argument("--values", required=True)
    ap.add_argument("--dump", help="also write the rendered objects here as a JSON array")
    a = ap.parse_args()
    objs = [o for o in yaml.safe_load_all(open(a.rendered)) if o]
    if a.dump:
        pathlib.Path(a.dump).write_text(json.dumps(objs))
    values = yaml.safe_load(open(a.values))
    schemas = load_crd_schemas(a.crds)
    kinds = sorted(o["kind"] for o in objs)
    ok = True
    if kinds != ["Deployment", "HTTPRoute", "InferencePool", "PersistentVolumeClaim", "Service"]:
        print(f"FAIL rendered kinds: {kinds}")
        ok = False
    for desc, fn in mutations():
        o, v = copy.deepcopy(objs), copy.deepcopy(values)
        fn(o, v)
        if run_checks(o, v, schemas):
            print(f"ok   a broken copy fails: {desc}")
        else:
            print(f"FAIL a broken copy passes: {desc}")
            ok = False
    errs = run_checks(objs, values, schemas)
    for e in errs:
        print(f"FAIL {e}")
    ok = ok and not errs
    dep = next(o for o in objs if o["kind"] == "Deployment")
    c = dep["spec"]["template"]["spec"]["containers"][0]
    need = required_memory(c["args"],
                           int(dep["spec"]["template"]["metadata"]["annotations"]
                               ["crossword/model-file-bytes"]))
    print(f"{'ok  ' if not errs else 'FAIL'} {len(objs)} objects: CRD schemas, cross-references, "
          f"sizing (formula {need / 2**30:.2f} GiB, request {c['resources']['requests']['memory']})")
    print(json.dumps({"passed": ok}))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
