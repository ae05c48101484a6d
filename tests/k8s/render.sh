#!/usr/bin/env bash
# Renders deploy/k8s with `kubectl kustomize` (kubectl 1.20's kustomize 2 from Debian, or a newer
# kubectl) into OUT/rendered.yaml, and the same objects as a JSON array into OUT/rendered.json.
#   tests/k8s/render.sh KUBECTL SOURCE_DIR OUT_DIR
set -euo pipefail
kubectl=${1:?usage: render.sh KUBECTL SOURCE_DIR OUT_DIR}
src=${2:?}
out=${3:?}
mkdir -p "$out"
"$kubectl" kustomize "$src/deploy/k8s" >"$out/rendered.yaml"
/usr/bin/python3 -c '
import json, sys, yaml
objs = [o for o in yaml.safe_load_all(open(sys.argv[1])) if o]
json.dump(objs, open(sys.argv[2], "w"))
print("ok   rendered", len(objs), "objects:", ", ".join(sorted(o["kind"] for o in objs)))
' "$out/rendered.yaml" "$out/rendered.json"
