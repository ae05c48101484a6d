#!/usr/bin/python3
"""The fixture adapter: llama.cpp's server tests start `llama-server ARGS`; this starts
`crossword serve` with the same arguments, except the model ones: the embedded tiny model stands
in for the Hugging Face downloads (--hf-repo/--hf-file/--model-url/--model are dropped, as are
--offline, --tags and --verbose, which only concern downloading and logging), and --no-ui is
llama-server's newer spelling of --no-webui. Every other flag reaches crossword unchanged.
Environment: CROSSWORD_BIN (the binary)."""
import os
import sys

DROP_WITH_VALUE = {"--hf-repo", "--hf-file", "--model-url", "--model", "-m", "--tags"}
DROP = {"--offline", "--verbose"}
RENAME = {"--no-ui": "--no-webui"}

args = sys.argv[1:]
out = []
i = 0
while i < len(args):
    a = args[i]
    if a in DROP_WITH_VALUE:
        i += 2
        continue
    if a not in DROP:
        out.append(RENAME.get(a, a))
    i += 1
os.execv(os.environ["CROSSWORD_BIN"], [os.environ["CROSSWORD_BIN"], "serve", "-t", "2", *out])
