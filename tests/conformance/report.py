#!/usr/bin/python3
"""Per-file table of a conformance run: passed / failed (on purpose, expected.tsv says why) / n/a
(expected.tsv says why) / unexplained. Exit 1 when a test fails that expected.tsv does not list.
Usage: report.py RESULT.xml EXPECTED.tsv"""
import collections
import fnmatch
import sys
import xml.etree.ElementTree as ET

result, expected_path = sys.argv[1], sys.argv[2]
rules = []  # (pattern "file::test", kind "na"|"differs", reason)
for line in open(expected_path, encoding="utf-8"):
    line = line.rstrip("\n")
    if not line or line.startswith("#"):
        continue
    pattern, kind, reason = line.split("\t", 2)
    rules.append((pattern, kind, reason))

rows = collections.OrderedDict()
unexplained = []
for case in ET.parse(result).getroot().iter("testcase"):
    file = case.get("classname", "").split(".")[-1] + ".py"
    test_id = f"{file}::{case.get('name')}"
    bad = case.find("failure") is not None or case.find("error") is not None
    skipped = case.find("skipped") is not None
    row = rows.setdefault(file, collections.Counter())
    if skipped:
        row["skipped"] += 1
        continue
    if not bad:
        row["passed"] += 1
        continue
    rule = next((r for r in rules if fnmatch.fnmatchcase(test_id, r[0])), None)
    if rule is None:
        row["unexplained"] += 1
        msg = (case.find("failure") if case.find("failure") is not None else case.find("error"))
        unexplained.append(f"{test_id}: {(msg.get('message') or '')[:200]}")
    else:
        row[rule[1]] += 1

print("| file | passed | n/a | differs on purpose | known gap | unexplained | skipped by the suite |")
print("|---|---|---|---|---|---|---|")
total = collections.Counter()
for file, c in rows.items():
    total.update(c)
    print(f"| {file} | {c['passed']} | {c['na']} | {c['differs']} | {c['gap']} | {c['unexplained']} | {c['skipped']} |")
print(f"| all | {total['passed']} | {total['na']} | {total['differs']} | {total['gap']} | {total['unexplained']} | {total['skipped']} |")
for u in unexplained:
    print("UNEXPLAINED", u)
sys.exit(1 if unexplained else 0)
