#!/usr/bin/env bash
# llama.cpp's server test suite (tools/server/tests of the llama.cpp release that the npm package
# node-llama-cpp@3.21.1 ships, installed by scripts/setup-oracles) against `crossword serve`:
# pytest (Debian's python3-pytest) runs the applicable files through adapter.py, then report.py
# prints the per-file table and fails on any result that expected.tsv does not explain.
# Usage: run.sh CROSSWORD_BINARY BUILD_DIR [PYTEST ARGS...]. Exit 77 (skipped) without the suite.
set -u
here=$(cd "$(dirname "$0")" && pwd)
cw=$(realpath "$1")
build=$(realpath "$2")
shift 2
bundle=$build/oracles/node_modules/node-llama-cpp/llama/gitRelease.bundle
if [[ ! -f $bundle ]]; then echo "skipped: no $bundle (scripts/setup-oracles)"; exit 77; fi
if ! /usr/bin/python3 -c "import pytest, requests, wget, filelock" 2>/dev/null; then
  echo "skipped: python3-pytest, python3-requests, python3-wget, python3-filelock missing (scripts/install-deps)"
  exit 77
fi
cache=$build/conformance
if [[ ! -d $cache/llama.cpp/tools/server/tests ]]; then
  rm -rf "$cache/llama.cpp"
  git clone -q "$bundle" "$cache/llama.cpp" 2>/dev/null || { echo "cannot clone $bundle"; exit 1; }
fi
# Beside the original (the tests open ../../../models/templates/*.jinja relative to their folder).
suite=$cache/llama.cpp/tools/server/tests-crossword
rm -rf "$suite"
cp -r "$cache/llama.cpp/tools/server/tests" "$suite"
# Adapter, part 2: the session fixture that pre-downloads every preset's model has nothing to do;
# the `openai` Python client is not in Debian 12: a stub whose use fails (those tests are n/a).
sed -i 's/^        ServerPreset.load_all()$/        pass  # crossword: nothing to download/' "$suite/conftest.py"
mkdir -p "$suite/stub/openai"
cat >"$suite/stub/openai/__init__.py" <<'PY'
class OpenAI:
    def __init__(self, *a, **k):
        raise RuntimeError("the openai Python package is not installed (not in Debian 12)")
PY
port=$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
files=(test_basic.py test_completion.py test_tokenize.py test_chat_completion.py test_infill.py
       test_ignore_eos.py test_security.py test_template.py test_stream.py test_metrics.py)
args=()
for f in "${files[@]}"; do [[ -f $suite/unit/$f ]] && args+=("unit/$f"); done
cd "$suite" || exit 1
CROSSWORD_BIN=$cw LLAMA_SERVER_BIN_PATH=$here/adapter.py PORT=$port PYTHONPATH=$suite/stub \
  timeout 300 /usr/bin/python3 -m pytest -q -p no:cacheprovider "${args[@]}" \
  --junitxml="$cache/result.xml" "$@" >"$cache/pytest.log" 2>&1
rc=$?
if [[ ! -f $cache/result.xml ]]; then tail -30 "$cache/pytest.log"; exit 1; fi
/usr/bin/python3 "$here/report.py" "$cache/result.xml" "$here/expected.tsv"
