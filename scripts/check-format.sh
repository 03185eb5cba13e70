#!/usr/bin/env bash
# scripts/check-format.sh: every C file is as clang-format (.clang-format)
# writes it.  Lists the files that are not and fails; the fix is
# `clang-format -i FILE`.  Tracked files in a git checkout, else every
# .c/.h outside the build directories.
set -euo pipefail
cd "$(dirname "$0")/.."

command -v clang-format >/dev/null || {
    echo "check-format: clang-format is missing (scripts/dev.sh deps installs it)" >&2
    exit 1
}
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    mapfile -t files < <(git ls-files -- '*.c' '*.h')
else
    mapfile -t files < <(find . -path './build*' -prune -o \
        -type f \( -name '*.c' -o -name '*.h' \) -print | sort)
fi
if ! out=$(clang-format --dry-run -Werror "${files[@]}" 2>&1); then
    grep -o '^[^:]*\.[ch]:' <<<"$out" | sort -u | sed 's/^/check-format: not clang-formatted: /; s/:$//'
    echo "check-format: clang-format -i FILE writes them as .clang-format says" >&2
    exit 1
fi
echo "check-format: ${#files[@]} C files as clang-format writes them"
