# Sourced by the serve_bench shell tests: starts `crossword serve` ($cw) on the embedded model
# (port 0, 2 slots, 1 thread), waits until it is ready and sets $work (a temporary directory),
# $server (its pid), $url and $py; the server and $work go at exit.
work=$(mktemp -d)
server=
cleanup() {
  [[ -n $server ]] && kill "$server" 2>/dev/null && wait "$server" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
py=/usr/bin/python3

"$cw" serve --port 0 -np 2 -t 1 2>"$work/server.log" >/dev/null &
server=$!
for _ in $(seq 600); do
  grep -q " ready: " "$work/server.log" 2>/dev/null && break
  kill -0 "$server" 2>/dev/null || { echo "FAIL: server died"; cat "$work/server.log"; exit 1; }
  sleep 0.1
done
port=$(grep -o 'listening on http://[^ ]*' "$work/server.log" | head -1 | sed 's/.*://')
[[ -n $port ]] || { echo "FAIL: no port in the server log"; cat "$work/server.log"; exit 1; }
url=http://127.0.0.1:$port
