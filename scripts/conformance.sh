#!/usr/bin/env bash
# Runs the official MCP conformance suite (pinned in conformance/package.json,
# with node 22 from npm) against sandboxer's Streamable HTTP server, with the
# baseline of expected failures in conformance/baseline.yml. Installs the suite
# into conformance/node_modules (git-ignored) the first time; offline after.
# Usage: scripts/conformance.sh BINARY
set -euo pipefail
bin=${1:?usage: scripts/conformance.sh BINARY}
here=$(cd "$(dirname "$0")/.." && pwd)
dir=$here/conformance
node=$dir/node_modules/node/bin/node
suite=$dir/node_modules/@modelcontextprotocol/conformance/dist/index.js
if [ ! -x "$node" ] || [ ! -f "$suite" ]; then
	echo "conformance: installing the suite (npm ci)" >&2
	(cd "$dir" && npm ci --no-audit --no-fund --loglevel=error >&2)
fi
work=$(mktemp -d)
log=$work/server.log
# --http-rate 0: the suite sends more than 100 requests in under half a second as one
# tenant, and the rate limit (tested on its own in test/e2e) would answer some with 429.
"$bin" serve --state-dir "$work/state" --http 127.0.0.1:0 --http-rate 0 --log-level info 2>"$log" &
pid=$!
cleanup() {
	kill -TERM "$pid" 2>/dev/null || true
	wait "$pid" 2>/dev/null || true
	rm -rf "$work"
}
trap cleanup EXIT
addr=
for _ in $(seq 1 600); do
	addr=$(grep -o '"addr":"[^"]*".*serving MCP on http' "$log" 2>/dev/null | head -1 | sed 's/"addr":"\([^"]*\)".*/\1/' || true)
	[ -n "$addr" ] && break
	kill -0 "$pid" 2>/dev/null || { cat "$log" >&2; echo "conformance: the server exited" >&2; exit 1; }
	sleep 0.1
done
[ -n "$addr" ] || { cat "$log" >&2; echo "conformance: the server did not start" >&2; exit 1; }
cd "$work"
"$node" "$suite" server --url "http://$addr/mcp" --expected-failures "$dir/baseline.yml"
