#!/usr/bin/env python3
"""Layering check (DEVELOPERS.md, "Layers, one direction"): no #include and no CMake link from a
lower layer to a higher one.

    base -> core -> {gguf, kernels} -> model -> backends/* -> decode -> engine
         -> {server, tools} -> cli (the executable, which registers every library's commands)

Backends sit beside the model behind its seam: they implement the executor interface the model
layer declares, so they may use model (and below), and model never uses them.

tokenizer, chat and grammar sit on the side: they may use base, core, gguf and each other, and
only model and the layers above may use them. Tests (*_test.cc, *_test.sh) are exempt: a test may
build its fixtures with higher layers (e.g. tools' synthesized models). Exits 1 listing every
violation as file:line.

Usage: layering_check.py SRC_DIR
"""
import pathlib
import re
import sys

RANK = {"base": 0, "core": 1, "gguf": 2, "kernels": 2, "model": 3, "backends": 3.5, "decode": 4,
        "engine": 5, "server": 6, "tools": 6, "cli": 7}
SIDE = {"tokenizer", "chat", "grammar"}
SIDE_RANK = 2.5  # above gguf, below model


def layer_of(rel: str) -> str:
    return rel.split("/", 1)[0]


def allowed(src: str, dst: str) -> bool:
    if src == dst:
        return True
    if src in SIDE and dst in SIDE:
        return True
    rs = SIDE_RANK if src in SIDE else RANK[src]
    rd = SIDE_RANK if dst in SIDE else RANK[dst]
    return rd < rs


def main() -> int:
    src_dir = pathlib.Path(sys.argv[1])
    known = set(RANK) | SIDE
    bad = []
    include = re.compile(r'^\s*#\s*include\s+"([a-z_]+)/')
    link = re.compile(r"\bcrossword_([a-z_]+)\b")
    for path in sorted(src_dir.rglob("*")):
        if not path.is_file():
            continue
        rel = path.relative_to(src_dir).as_posix()
        src = layer_of(rel)
        if src not in known:
            bad.append(f"{rel}: folder '{src}' has no layer; add it to layering_check.py and DEVELOPERS.md")
            continue
        name = path.name
        if "_test" in name or name.startswith("test_"):
            continue
        text = path.read_text(errors="replace")
        if path.suffix in (".cc", ".h", ".inc", ".in"):
            for n, line in enumerate(text.splitlines(), 1):
                m = include.match(line)
                if m and m.group(1) in known and not allowed(src, m.group(1)):
                    bad.append(f"{rel}:{n}: {src} includes {m.group(1)} ({line.strip()})")
        elif name == "CMakeLists.txt":
            # Only the libraries' own link lines; test targets (crossword_test, *_test) may link more.
            for m in re.finditer(r"target_link_libraries\(\s*([A-Za-z0-9_]+)([^)]*)\)", text):
                target, deps = m.group(1), m.group(2)
                if "test" in target or "bench" in target:
                    continue
                n = text.count("\n", 0, m.start()) + 1
                for d in link.findall(deps):
                    dst = "backends" if d in ("vulkan",) else d
                    if dst in known and not allowed(src, dst):
                        bad.append(f"{rel}:{n}: {target} links crossword_{d} ({src} -> {dst})")
    for b in bad:
        print(f"layering: {b}")
    if bad:
        print(f"layering: {len(bad)} violation(s) of the layer order in DEVELOPERS.md")
        return 1
    print("layering: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
