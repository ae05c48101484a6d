#!/usr/bin/env python3
"""PROJECTION (not a measurement) of spec/AR and diffusion/AR speed for the full 40-layer Clover.

Combines a measured pass-cost sweep (`crossword bench --sweep -o json`, normally on the 4-layer
real-width synth file: it gives this machine's read bandwidth, int8 rate and how far each T-row
pass is from its floor) with Clover's shapes (../shared/parallel-decoding-notes.md section 1), the
expert union U(T) (random router, or a trained-like overlap of ~70 experts per 32 rows), and an
acceptance rate, into expected speed relative to AR decoding.

Model (docs/decoding.md, "Pass cost, floors and projection"):
  bytes(T) = b (W_d + U(T) L w_e + W_h) ; macs(T) = T (W_d + k L w_e) + R(T) W_h
  floor(T) = max(bytes(T) / BW, macs(T) / P) ; c(T) = eff(T) floor(T)
  eff(T) = measured time / floor of the sweep's T-row verify pass (1 with --floor-only)
  spec, d drafts, acceptance a: tokens per round E = (1 - a^(d+1)) / (1 - a),
      speed / AR = E c(1) / (c_draft(d+1) + c_verify(d+1));  best d reported, and the smallest a
      at which the best d reaches 1.0x and 1.2x AR (bisection: the speed grows with a)
  diffusion, block B, tokens per pass TPF: speed / AR = TPF c(1) / c(B); it beats AR from
      TPF = c(B) / c(1). Every pass is priced at B rows: since a block ends at its first committed
      end of generation (docs/decoding.md, block diffusion step 2) the passes after that cut are
      shorter, so this side of the projection is conservative.
Usage: bench/project_speedup.py [--sweep SWEEP.jsonl] [--bw GBPS --int8 GMACS] [--floor-only]
"""
import argparse
import json
import math
import sys

# Clover / Qwen3.5-35B-A3B shapes (parallel-decoding-notes.md section 1, clover-facts.md).
W_DENSE = 1.431e9  # dense trunk parameters (attention/GDN projections, router, shared expert)
W_EXPERT = 3.146e6  # one routed expert of one layer (gate + up + down)
W_HEAD = 0.509e9  # output head
LAYERS, E, K = 40, 256, 8
BYTES_PER_WEIGHT = {"Q4_0": 18 / 32, "Q8_0": 34 / 32, "BF16": 2.0}


def union_random(t):
    return E * (1 - (1 - K / E) ** t)


def union_trained(t):
    # LLaDA2.0-mini touches ~70 of 256 experts per 32-token block: U(32) ~ U_random(10), so
    # T rows behave like T * 10 / 32 independent ones (never fewer than one token's K).
    return max(K, union_random(t * 10 / 32)) if t > 1 else K


def spec_speed(acc, d, rounds, c1):
    """spec / AR with d drafts per round at per-draft acceptance acc: E(d) c(1) / round cost."""
    tokens = (1 - acc ** (d + 1)) / (1 - acc) if acc < 1 else d + 1.0
    return tokens * c1 / rounds[d]


def best_spec(acc, rounds, c1):
    """(best d, its spec / AR); d = 0 is plain AR (1.0) when no draft length beats it."""
    best = (0, 1.0)
    for d in rounds:
        s = spec_speed(acc, d, rounds, c1)
        if s > best[1]:
            best = (d, s)
    return best


def break_even(target, rounds, c1):
    """Smallest acceptance (to 1e-4, rounded up) at which the best d reaches spec / AR >=
    target, or None below 0.999 (the speed grows with acceptance for every d, so bisection finds
    it)."""
    if best_spec(0.999, rounds, c1)[1] < target:
        return None

    def reaches(acc):
        d, s = best_spec(acc, rounds, c1)
        return d > 0 and s >= target

    lo, hi = 0.0, 0.999
    while hi - lo > 1e-5:
        mid = (lo + hi) / 2
        if reaches(mid):
            hi = mid
        else:
            lo = mid
    # Rounded up to the 4 printed decimals: the printed acceptance itself reaches the target.
    return min(0.999, math.ceil(hi * 1e4) / 1e4)


def load_sweep(path):
    rows = {}
    machine = {}
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line.startswith("{"):
                continue
            j = json.loads(line)
            if j.get("x_floor") is None:  # a GPU sweep has no host floors
                continue
            rows[j["test"]] = j
            machine = {"bw": j["read_gbps"], "int8": j.get("int8_peak_gmacs") or j["int8_gmacs"]}
    return rows, machine


def efficiency(sweep, t, kind):
    """Measured time / floor of the sweep's pass of t rows (nearest measured t below)."""
    if not sweep:
        return 1.0
    if t == 1:
        return sweep["ar step"]["x_floor"]
    best = None
    for name, j in sweep.items():
        if name.startswith(kind) and j["rows"] <= t and (best is None or j["rows"] > best["rows"]):
            best = j
    return best["x_floor"] if best else sweep["ar step"]["x_floor"]


def pass_cost(t, head_rows, union, bw, int8, bpw, sweep, kind):
    u = K if t == 1 else union(t)
    bytes_ = bpw * (W_DENSE + u * LAYERS * W_EXPERT + W_HEAD)
    macs = t * (W_DENSE + K * LAYERS * W_EXPERT) + head_rows * W_HEAD
    floor = max(bytes_ / (bw * 1e9), macs / (int8 * 1e9))
    return floor * efficiency(sweep, t, kind), u


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sweep", help="JSON lines of `crossword bench --sweep -o json`")
    ap.add_argument("--bw", type=float, help="read bandwidth GB/s (default: the sweep's)")
    ap.add_argument("--int8", type=float, help="int8 G multiply-adds/s (default: the sweep's)")
    ap.add_argument("--type", default="Q4_0", choices=sorted(BYTES_PER_WEIGHT))
    ap.add_argument("--floor-only", action="store_true", help="passes at their floor (eff 1)")
    ap.add_argument("--block", type=int, default=32)
    ap.add_argument("--tpf", type=float, nargs="*", default=[2.55, 5.0, 8.37],
                    help="diffusion tokens per pass (2.55: LLaDA2.0-mini at tau 0.95; 8.37: the "
                         "embedded model before the cut at a committed end of generation, 9.35 "
                         "after it)")
    ap.add_argument("--acceptance", type=float, nargs="*", default=[0.5, 0.7, 0.8, 0.9, 0.95])
    a = ap.parse_args()
    sweep, machine = load_sweep(a.sweep) if a.sweep else ({}, {})
    if a.sweep and not sweep:
        sys.exit(f"{a.sweep}: no pass rows with floors (a GPU sweep has none: its floors would be "
                 "the host CPU's); give a CPU sweep, or --bw and --int8 without --sweep")
    bw = a.bw or machine.get("bw")
    int8 = a.int8 or machine.get("int8")
    if not bw or not int8:
        sys.exit("need --sweep or both --bw and --int8")
    if a.floor_only:
        sweep = {}
    bpw = BYTES_PER_WEIGHT[a.type]
    print(f"PROJECTION for the full {LAYERS}-layer Clover ({a.type}, {bpw:.3f} bytes/weight) on a "
          f"machine with {bw:.1f} GB/s and {int8:.1f} G int8 multiply-adds/s; pass efficiency "
          + ("1 (floor only)" if not sweep else f"from {a.sweep}"))
    for uname, union in (("random router", union_random), ("trained-like overlap", union_trained)):
        c1, _ = pass_cost(1, 1, union, bw, int8, bpw, sweep, "verify")
        print(f"\n### {uname}: AR step {1e3 * c1:.1f} ms ({1 / c1:.2f} tokens/s)\n")
        print("| rows T | U(T) | verify pass, AR steps | denoise pass, AR steps |")
        print("| ---: | ---: | ---: | ---: |")
        for t in (2, 4, 8, 16, 32):
            cv, u = pass_cost(t, t, union, bw, int8, bpw, sweep, "verify")
            cd, _ = pass_cost(t, t - 1, union, bw, int8, bpw, sweep, "denoise")
            print(f"| {t} | {u:.1f} | {cv / c1:.2f} | {cd / c1:.2f} |")
        # Round cost of d drafts (a draft pass and a verify pass of d + 1 rows), once per d.
        rounds = {}
        for d in range(1, a.block):
            cv, _ = pass_cost(d + 1, d + 1, union, bw, int8, bpw, sweep, "verify")
            cd, _ = pass_cost(d + 1, d, union, bw, int8, bpw, sweep, "denoise")
            rounds[d] = cv + cd
        print("\n| spec acceptance a | best drafts d | spec / AR | spec / AR at d = 15 |")
        print("| ---: | ---: | ---: | ---: |")
        for acc in a.acceptance:
            d, s = best_spec(acc, rounds, c1)
            at15 = spec_speed(acc, 15, rounds, c1) if 15 in rounds else 0.0
            shown = f"{acc:.2f}" if round(acc, 2) == acc else f"{acc:.4f}"
            print(f"| {shown} | {d if d else '0 (AR)'} | {s:.2f} | {at15:.2f} |")
        for target in (1.0, 1.2):
            acc = break_even(target, rounds, c1)
            print(f"\nspec >= {target:.1f}x AR from acceptance "
                  + (f"{acc:.4f} (best d {best_spec(acc, rounds, c1)[0]})" if acc is not None
                     else "none below 0.999"))
        cb, _ = pass_cost(a.block, a.block - 1, union, bw, int8, bpw, sweep, "denoise")
        print(f"\n| diffusion TPF (block {a.block}) | diffusion / AR |")
        print("| ---: | ---: |")
        for tpf in a.tpf:
            print(f"| {tpf:.2f} | {tpf * c1 / cb:.2f} |")
        print(f"\ndiffusion >= 1.0x AR from {cb / c1:.2f} tokens per {a.block}-row denoise pass")


if __name__ == "__main__":
    main()
