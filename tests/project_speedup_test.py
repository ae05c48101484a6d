#!/usr/bin/env python3
"""bench/project_speedup.py (issue 18's projection) agrees with itself: the break-even
acceptances it prints are where its own table crosses 1.0x and 1.2x (at the printed acceptance the
best draft length reaches the target; 0.002 below it no draft length beats AR, or 1.2x is missed),
and the diffusion tokens per pass it names give 1.00x in its diffusion table. Floor-only passes on
a fixed machine (45 GB/s, 470 G int8 multiply-adds/s), so the numbers do not depend on this host.
Usage: project_speedup_test.py bench/project_speedup.py"""
import re
import subprocess
import sys

SCRIPT = sys.argv[1]
BASE = [sys.executable, SCRIPT, "--floor-only", "--bw", "45", "--int8", "470"]


def run(*extra):
    return subprocess.run(BASE + list(extra), capture_output=True, text=True, check=True).stdout


def first_section(text):
    return text.split("### ")[1]  # the random router's section


def spec_rows(section):
    """{acceptance: (best d, 0 for AR, spec / AR)} of the section's spec table."""
    return {round(float(m.group(1)), 4): (int(m.group(2)), float(m.group(3)))
            for m in re.finditer(r"^\| (0\.\d+) \| (\d+)[^|]* \| ([\d.]+) \|", section, re.M)}


out = first_section(run())
found = dict(re.findall(r"spec >= (1\.[02])x AR from acceptance ([\d.]+)", out))
assert set(found) == {"1.0", "1.2"}, out
for target, acc in found.items():
    acc = float(acc)
    a_hi, a_lo = round(acc, 4), round(acc - 0.002, 4)
    at = spec_rows(first_section(run("--acceptance", f"{a_hi:.4f}", f"{a_lo:.4f}")))
    assert len(at) == 2, at
    (d_hi, high), (d_lo, low) = at[a_hi], at[a_lo]
    assert d_hi > 0 and high >= float(target) - 0.005, (target, acc, d_hi, high)
    if target == "1.0":
        assert d_lo == 0, (acc, d_lo, low)  # below break-even no draft length beats AR
    else:
        assert low < float(target), (target, acc, low)
assert float(found["1.0"]) < float(found["1.2"]), found
tpf = float(re.search(r"diffusion >= 1\.0x AR from ([\d.]+) tokens", out).group(1))
table = first_section(run("--tpf", f"{tpf:.2f}"))
ratio = float(re.search(rf"^\| {tpf:.2f} \| ([\d.]+) \|$", table, re.M).group(1))
assert abs(ratio - 1.0) <= 0.01, (tpf, ratio)
print(f"ok: spec break-even {found}, diffusion from {tpf} tokens per pass")
