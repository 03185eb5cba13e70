#!/usr/bin/env bash
# scripts/check-commits.sh: the commits after BASE have a subject of at
# most 72 characters and a body that says why, after a blank line.  The
# history up to BASE stays as it was written.  Skips (exit 0, with a
# message) where it cannot see that history: no git checkout, a shallow
# clone without BASE, a HEAD that BASE is not an ancestor of.
#
# Usage: scripts/check-commits.sh [BASE]   (default: 902f98a, where the
# rule began)
set -euo pipefail
cd "$(dirname "$0")/.."

base=${1:-902f98a}
max=72

skip() {
    echo "check-commits: skipped, $*"
    exit 0
}
git rev-parse --is-inside-work-tree >/dev/null 2>&1 || skip "not a git checkout"
git cat-file -e "$base^{commit}" 2>/dev/null || skip "$base is not in this clone (shallow?)"
git merge-base --is-ancestor "$base" HEAD 2>/dev/null || skip "HEAD does not descend from $base"

# Count characters, not bytes, whatever the caller's locale.
export LC_ALL=C.UTF-8
# Commits on main whose message breaks the rule but that cannot be
# reworded any more (main is never rewritten): full hash, then why.
grandfathered=(
    "fa8bab7fd38fda24d6d1e05123a7ca5246626cc7 74-character subject, landed unchecked"
    "bff61ea1bc8c389159baec36ba982d7752ade82c no body, landed unchecked"
)
is_grandfathered() {
    local g
    for g in "${grandfathered[@]}"; do
        [[ ${g%% *} == "$1" ]] && return 0
    done
    return 1
}
bad=0
n=0
while read -r commit; do
    n=$((n + 1))
    is_grandfathered "$commit" && continue
    mapfile -t lines < <(git log -1 --format=%B "$commit")
    subject=${lines[0]-}
    why=""
    if ((${#subject} > max)); then
        why="subject has ${#subject} characters (at most $max)"
    elif ((${#lines[@]} < 3)) || [[ -n ${lines[1]} ]]; then
        why="no body after a blank line (the body says why)"
    elif [[ -z $(printf '%s\n' "${lines[@]:2}" | tr -d '[:space:]') ]]; then
        why="empty body (the body says why)"
    fi
    if [[ -n $why ]]; then
        echo "check-commits: $(git log -1 --format=%h "$commit") \"$subject\": $why"
        bad=$((bad + 1))
    fi
done < <(git rev-list --no-merges "$base..HEAD")

if ((bad)); then
    echo "check-commits: $bad of $n commits after $base need rewording (git rebase -i, reword)"
    exit 1
fi
echo "check-commits: $n commits after $base, each with a short subject and a body"
