#!/usr/bin/env bash
# Runs the official MCP conformance suite (pinned in conformance/package.json,
# with node 22 from npm) against sandboxer's Streamable HTTP server: the
# requirement sets of the 2026-07-28 and 2025-11-25 revisions and the tasks
# extension's scenarios, with the baseline of expected failures (fixture
# tools only) in conformance/baseline.yml. Installs the suite
# into conformance/node_modules (git-ignored) the first time; offline after.
# Usage: scripts/conformance.sh BINARY
set -euo pipefail
bin=${1:?usage: scripts/conformance.sh BINARY}
here=$(cd "$(dirname "$0")/.." && pwd)
dir=$here/conformance
node=$dir/node_modules/node/bin/node
suite=$dir/node_modules/@modelcontextprotocol/conformance/dist/index.js
# Installed from this lock file: (re)install when node_modules was made from another one.
stamp=$dir/node_modules/.sandboxer-lock.json
if [ ! -x "$node" ] || [ ! -f "$suite" ] || ! cmp -s "$dir/package-lock.json" "$stamp"; then
	echo "conformance: installing the suite (npm ci)" >&2
	(cd "$dir" && npm ci --no-audit --no-fund --loglevel=error >&2)
	cp "$dir/package-lock.json" "$stamp"
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
url="http://$addr/mcp"
# Both revisions' requirement sets, and the tasks extension's scenarios (not scored by a
# requirement set, so run one by one against the same baseline).
status=0
for revision in 2026-07-28 2025-11-25; do
	echo "conformance: --requirements $revision" >&2
	"$node" "$suite" server --url "$url" --requirements "$revision" --expected-failures "$dir/baseline.yml" || status=1
done
for scenario in $("$node" "$suite" list --server | sed -n 's/^ *- \(tasks-[a-z0-9-]*\) \[extension\]$/\1/p'); do
	echo "conformance: --scenario $scenario" >&2
	"$node" "$suite" server --url "$url" --scenario "$scenario" --expected-failures "$dir/baseline.yml" || status=1
done
exit $status
