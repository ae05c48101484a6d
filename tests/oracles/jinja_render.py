#!/usr/bin/python3
"""Jinja2 oracle: renders chat templates with Debian's python3-jinja2 set up as HF transformers does.

Usage: jinja_render.py TEMPLATE CASES.json [OUT.json]. CASES is a JSON list of context objects
(messages, tools, add_generation_prompt, ... ). Writes a JSON list of {"ok": text} or {"error": msg}.
"""
import json
import sys

import jinja2
import jinja2.ext
import jinja2.sandbox


class TemplateRaised(Exception):
    pass


def raise_exception(message):
    raise TemplateRaised(message)


def tojson(value, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    # Same keyword set and defaults as transformers' chat-template tojson.
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                      sort_keys=sort_keys)


def make_env():
    env = jinja2.sandbox.ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    return env


def main():
    template_path, cases_path = sys.argv[1], sys.argv[2]
    with open(template_path, encoding="utf-8") as f:
        source = f.read()
    with open(cases_path, encoding="utf-8") as f:
        cases = json.load(f)
    template = make_env().from_string(source)
    results = []
    for context in cases:
        try:
            results.append({"ok": template.render(**context)})
        except TemplateRaised as e:
            results.append({"raised": str(e)})
        except Exception as e:  # any other Jinja2 failure is reported, not fatal
            results.append({"error": f"{type(e).__name__}: {e}"})
    out = json.dumps(results, ensure_ascii=False, indent=1)
    if len(sys.argv) > 3:
        with open(sys.argv[3], "w", encoding="utf-8") as f:
            f.write(out)
    else:
        sys.stdout.write(out + "\n")


if __name__ == "__main__":
    main()
