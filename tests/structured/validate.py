#!/usr/bin/env python3
"""Validates outputs generated under JSON schemas with Debian's python3-jsonschema.

Usage: validate.py OUTPUTS.jsonl
Each line: {"schema": {...}, "mode": "ar", "finish": "stop", "text": "..."}. Every output must have
ended by itself (finish "stop": the grammar let the model end) and be valid under its schema
(Draft 2020-12 validator, with the format checker). Prints a summary; exit 1 on any failure.
"""
import json
import sys

import jsonschema


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    checker = jsonschema.FormatChecker()
    n, failures = 0, []
    by_mode = {}
    with open(sys.argv[1], encoding="utf-8") as f:
        for line in f:
            rec = json.loads(line)
            n += 1
            by_mode[rec["mode"]] = by_mode.get(rec["mode"], 0) + 1
            where = f"{rec['mode']}: {json.dumps(rec['schema'])[:200]}: {rec['text'][:200]!r}"
            if rec["finish"] != "stop":
                failures.append(f"did not end ({rec['finish']}): {where}")
                continue
            try:
                value = json.loads(rec["text"])
            except json.JSONDecodeError as e:
                failures.append(f"not JSON ({e}): {where}")
                continue
            try:
                jsonschema.Draft202012Validator(rec["schema"], format_checker=checker).validate(value)
            except jsonschema.ValidationError as e:
                failures.append(f"invalid ({e.message}): {where}")
    modes = ", ".join(f"{k} {v}" for k, v in sorted(by_mode.items()))
    print(f"validate: {n} outputs ({modes}), {n - len(failures)} valid")
    for msg in failures[:20]:
        print("  " + msg)
    sys.exit(1 if failures or n == 0 else 0)


if __name__ == "__main__":
    main()
