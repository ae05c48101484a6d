// Validates the core Kubernetes objects rendered from deploy/k8s (Deployment, Service,
// PersistentVolumeClaim) with npm kubernetes-models@5.1.0 (installed by scripts/setup-oracles):
// its JSON-schema validators check types, required fields, enums and formats. They let unknown
// fields through, which a strict `kubectl apply` rejects, so every field name is also checked
// against the package's own type declarations (.d.ts: one interface per API type). A broken copy
// of each object must fail, so neither check passes vacuously.
//
//   node tests/k8s/validate_core.mjs --rendered R.json --oracles BUILD/oracles
// R.json: the rendered objects as a JSON array (validate_objects.py --dump writes it; node has no
// YAML parser). Exit 0 when all pass, 1 otherwise.
import fs from "node:fs";
import path from "node:path";
import { pathToFileURL } from "node:url";

const args = {};
for (let i = 2; i < process.argv.length; i += 2) args[process.argv[i].replace(/^--/, "")] = process.argv[i + 1];
if (!args.rendered || !args.oracles) {
  console.error("usage: node validate_core.mjs --rendered R.json --oracles BUILD/oracles");
  process.exit(2);
}
const nm = path.join(args.oracles, "node_modules");
const load = (p) => import(pathToFileURL(path.join(nm, p)).href);
const models = {
  "apps/v1 Deployment": ["kubernetes-models/apps/v1/Deployment.js", "Deployment", "kubernetes-models/apps/v1/Deployment.d.ts"],
  "v1 Service": ["kubernetes-models/v1/Service.js", "Service", "kubernetes-models/v1/Service.d.ts"],
  "v1 PersistentVolumeClaim": ["kubernetes-models/v1/PersistentVolumeClaim.js", "PersistentVolumeClaim", "kubernetes-models/v1/PersistentVolumeClaim.d.ts"],
};

// --- field names from the .d.ts declarations ---
const declCache = new Map();
/// The first interface declared in a .d.ts file: {fields: Map(name -> type text), imports: Map(type name -> .d.ts path)}.
function declaration(file) {
  if (declCache.has(file)) return declCache.get(file);
  const text = fs.readFileSync(file, "utf8");
  const imports = new Map();
  for (const m of text.matchAll(/^import \{ ([^}]+) \} from "([^"]+)";$/gm)) {
    let target = m[2];
    target = target.startsWith(".") ? path.resolve(path.dirname(file), target.replace(/\.js$/, ".d.ts")) : path.join(nm, target + ".d.ts");
    for (const name of m[1].split(",").map((s) => s.trim())) imports.set(name, target);
  }
  let fields = null;
  const start = text.search(/^export interface I\w+( extends TypeMeta)? \{$/m);
  if (start >= 0) {
    fields = new Map();
    const body = text.slice(start, text.indexOf("\n}", start));
    // `    "name"?: TYPE;` where TYPE may span lines (maps: `{\n [key: string]: string;\n };`).
    const lines = body.split("\n");
    for (let i = 0; i < lines.length; i++) {
      const m = lines[i].match(/^ {4}"([^"]+)"\??: (.*)$/);
      if (!m) continue;
      let type = m[2];
      while (!(type.endsWith(";") && [...type].filter((c) => c === "{").length === [...type].filter((c) => c === "}").length))
        type += " " + lines[++i].trim();
      fields.set(m[1], type.slice(0, -1));
    }
    if (/extends TypeMeta/.test(body.split("\n")[0])) {
      fields.set("apiVersion", "string");
      fields.set("kind", "string");
    }
  }
  const d = { fields, imports };
  declCache.set(file, d);
  return d;
}

/// Paths of fields the declarations do not know, under `where`.
function unknownFields(value, file, where, out) {
  const d = declaration(file);
  if (!d.fields || value === null || typeof value !== "object" || Array.isArray(value)) return out;
  for (const [k, v] of Object.entries(value)) {
    const type = d.fields.get(k);
    if (type === undefined) {
      out.push(`${where}.${k}`);
      continue;
    }
    checkType(v, type, d, `${where}.${k}`, out);
  }
  return out;
}

function checkType(v, type, d, where, out) {
  let t = type.trim();
  const arr = t.match(/^Array<(.+)>$/);
  if (arr) {
    if (Array.isArray(v)) v.forEach((e, i) => checkType(e, arr[1], d, `${where}[${i}]`, out));
    return;
  }
  const map = t.match(/^\{\s*\[key: string\]: (.+?);\s*\}$/);
  if (map) {
    if (v && typeof v === "object") for (const [k, e] of Object.entries(v)) checkType(e, map[1], d, `${where}.${k}`, out);
    return;
  }
  if (d.imports.has(t)) unknownFields(v, d.imports.get(t), where, out);
  // Anything else is a primitive, a literal union or a type alias (IntOrString, Quantity).
}

// --- the checks ---
const objects = JSON.parse(fs.readFileSync(args.rendered, "utf8"));
let failed = 0;
async function validate(obj) {
  const key = `${obj.apiVersion} ${obj.kind}`;
  const [mod, cls, dts] = models[key] ?? [];
  if (!mod) return [];  // not a core object (the CRD objects are validate_objects.py's)
  const Model = (await load(mod))[cls];
  const errors = [];
  try {
    new Model(obj).validate();
  } catch (e) {
    errors.push(e.message);
  }
  for (const f of unknownFields(obj, path.join(nm, dts), obj.kind, [])) errors.push(`unknown field ${f}`);
  return errors;
}

const core = objects.filter((o) => models[`${o.apiVersion} ${o.kind}`]);
if (core.length !== 3) {
  console.log(`FAIL expected a Deployment, a Service and a PVC, got ${core.map((o) => o.kind)}`);
  failed++;
}
for (const obj of core) {
  const errors = await validate(obj);
  if (errors.length) {
    failed++;
    console.log(`FAIL ${obj.kind} ${obj.metadata.name}: ${errors.join("; ")}`);
  } else {
    console.log(`ok   ${obj.kind} ${obj.metadata.name} validates (schema and field names)`);
  }
}

// Broken copies that must fail: a type error, a missing required field, an enum, unknown fields.
const clone = (o) => JSON.parse(JSON.stringify(o));
const dep = core.find((o) => o.kind === "Deployment");
const svc = core.find((o) => o.kind === "Service");
const pvc = core.find((o) => o.kind === "PersistentVolumeClaim");
const broken = [
  ["replicas as a string", () => Object.assign(clone(dep), { spec: { ...clone(dep.spec), replicas: "two" } })],
  ["container without a name", () => { const d = clone(dep); delete d.spec.template.spec.containers[0].name; return d; }],
  ["imagePullPolicy outside its enum", () => { const d = clone(dep); d.spec.template.spec.containers[0].imagePullPolicy = "Sometimes"; return d; }],
  ["misspelt terminationGracePeriodSecond", () => { const d = clone(dep); d.spec.template.spec.terminationGracePeriodSecond = 80; return d; }],
  ["unknown probe field", () => { const d = clone(dep); d.spec.template.spec.containers[0].readinessProbe.httpGet.paths = "/health"; return d; }],
  ["service port as a string", () => { const s = clone(svc); s.spec.ports[0].port = "http"; return s; }],
  ["unknown PVC field", () => { const p = clone(pvc); p.spec.storageClass = "nfs"; return p; }],
];
for (const [what, make] of broken) {
  const errors = await validate(make());
  if (errors.length) {
    console.log(`ok   a broken copy fails: ${what} (${errors[0].slice(0, 100)})`);
  } else {
    failed++;
    console.log(`FAIL a broken copy passes: ${what}`);
  }
}
console.log(failed ? `${failed} check(s) failed` : "all core-object checks passed");
process.exit(failed ? 1 : 0);
