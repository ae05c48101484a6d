#!/usr/bin/python3
"""A logit_bias object that bans the tokens whose bytes are not whole UTF-8 text by themselves.

    bench/utf8_fragment_bias.py MODEL.gguf GGUF_PY_DIR   -> {"id": -100, ...} on stdout

Why: llama-server (the node-llama-cpp@3.21.1 source) parses every finished answer, /v1/completions
included, with its chat-output parser, which fails with "The model produced output that does not
match the expected Content-only format" (HTTP 500 / an error event) when the text ends inside a
UTF-8 sequence. A random-weight model ends there often (a byte token such as 0x88 last).
bench/vs_llama_server.sh sends this bias to both servers, so both decode the same way and every
answer is whole UTF-8. On the synthesized vocabulary (byte-level BPE learned on English text) it
bans the byte tokens 0x80-0xFF and the few merges that hold a fragment.

GGUF_PY_DIR: llama.cpp's gguf-py (the clone bench/build_llama.sh makes) for the GGUF reader.
"""
import json
import sys


def byte_decoder():
    """GPT-2's byte-to-unicode table, inverted: the character of a byte-level token -> byte."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}


def main():
    model, gguf_py = sys.argv[1], sys.argv[2]
    sys.path.insert(0, gguf_py)
    from gguf import GGUFReader  # noqa: E402 (path set above)
    r = GGUFReader(model)
    f = r.fields["tokenizer.ggml.tokens"]
    types = r.fields.get("tokenizer.ggml.token_type")
    dec = byte_decoder()
    ban = {}
    for i, idx in enumerate(f.data):
        if types is not None and int(types.parts[types.data[i]][0]) != 1:
            continue  # control / user-defined / unused tokens are text as written
        s = bytes(f.parts[idx]).decode("utf-8")
        if any(ch not in dec for ch in s):
            continue  # not a byte-level string
        raw = bytes(dec[ch] for ch in s)
        try:
            raw.decode("utf-8")
        except UnicodeDecodeError:
            ban[str(i)] = -100
    json.dump(ban, sys.stdout)
    print(f"utf8_fragment_bias: {len(ban)} of {len(f.data)} tokens banned", file=sys.stderr)


if __name__ == "__main__":
    main()
