#!/usr/bin/env bash
# One step of `git bisect run` on the warm path (issue 55): builds the commit
# checked out here (server, supervisor, sandbox images), measures warm
# `run_command true` with a bench built once from a fixed tree, and answers
# good (0) or bad (1) by the p50, or skip (125) when the commit cannot be
# built or measured. Nothing here changes the engine's setup: the images are
# built by the commit's own binary, on the engine that runs.
#
#   go build -o /tmp/bench ./cmd/bench            # once, from main
#   git worktree add /tmp/bisect GOOD && cd /tmp/bisect
#   git bisect start BAD GOOD
#   git bisect run bash /path/to/main/scripts/bisect-warm.sh /tmp/bench 10
#
# The measure is the bench's `-only warm` "pool full" row: each call comes
# as soon as the pool has its waiting sandboxes back (as `make bench` does).
# Two runs, the lower p50 counts: the noise of a busy machine only adds.
set -uo pipefail
bench=${1:?usage: bisect-warm.sh BENCH [LIMIT_MS]}
limit=${2:-10}
runs=${RUNS:-30}
commit=$(git rev-parse --short HEAD)
if ! make -s build >&2 || ! ./bin/sandboxer images build >&2; then
	echo "bisect-warm: $commit: does not build: skip" >&2
	exit 125
fi
best=
for try in 1 2; do
	line=$("$bench" -bin bin/sandboxer -only warm -runs "$runs" 2>/dev/null | grep 'pool full') || {
		echo "bisect-warm: $commit: the bench did not measure it: skip" >&2
		exit 125
	}
	p50=$(sed -n 's/.*p50_ms=\([0-9.]*\).*/\1/p' <<<"$line")
	echo "bisect-warm: $commit: try $try: $line" >&2
	if [ -z "$best" ] || awk -v a="$p50" -v b="$best" 'BEGIN{exit !(a<b)}'; then best=$p50; fi
done
if awk -v a="$best" -v l="$limit" 'BEGIN{exit !(a<=l)}'; then
	echo "bisect-warm: $commit: good (p50 $best ms <= $limit)" >&2
	exit 0
fi
echo "bisect-warm: $commit: bad (p50 $best ms > $limit)" >&2
exit 1
