#!/usr/bin/env bash
# Fails when git tracks a built executable (ELF, Mach-O, PE, a.out-style
# magic at the start of the file): binaries are built by `make`, never
# committed, so every clone stays small and what runs is what the source says.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  echo "no-binaries: not a git checkout: nothing to check" >&2
  exit 0
fi
found=0
while IFS= read -r -d '' f; do
  [ -f "$f" ] || continue
  magic=$(head -c 4 -- "$f" | od -An -tx1 | tr -d ' \n')
  case "$magic" in
    7f454c46|cffaedfe|cefaedfe|feedface|feedfacf|cafebabe|4d5a*)
      echo "no-binaries: $f is a built executable tracked by git: git rm --cached it and ignore it" >&2
      found=1 ;;
  esac
done < <(git ls-files -z)
exit $found
