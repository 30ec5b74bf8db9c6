#!/usr/bin/env bash
# What a remote GPU machine is sent of this checkout, and how to send less. Such a machine takes the
# tracked and untracked-not-ignored files, at most 64 MiB; the bundled weights (zoo/weights) alone are
# over 70 MiB, and no GPU check or training run reads them.
#   scripts/device_tree.sh size      what would travel now (MiB)
#   scripts/device_tree.sh hide      untrack zoo/weights in the index and ignore it (.git/info/exclude):
#                                    the files stay on disk, a device run leaves them behind
#   scripts/device_tree.sh restore   track them again exactly as HEAD has them (run before any commit:
#                                    a commit made while they are hidden deletes them)
set -euo pipefail
case "${1:-}" in -h | --help) sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;; esac  # usage above
cd "$(git rev-parse --show-toplevel)"
exclude=.git/info/exclude
line=/zoo/weights/
case "${1:-size}" in
size)
    git ls-files -z --cached --others --exclude-standard | xargs -0 du -cb 2>/dev/null | tail -n 1 |
        awk '{printf "%.1f MiB would travel (limit 64)\n", $1 / 1048576}'
    ;;
hide)
    git rm -r -q --cached zoo/weights
    grep -qxF "$line" "$exclude" 2>/dev/null || echo "$line" >>"$exclude"
    echo "zoo/weights hidden: run '$0 restore' before committing"
    "$0" size
    ;;
restore)
    sed -i "\#^$line\$#d" "$exclude"
    git reset -q HEAD -- zoo/weights
    git diff --quiet HEAD -- zoo/weights && echo "zoo/weights tracked again, as HEAD has them"
    ;;
*)
    echo "usage: $0 size|hide|restore" >&2
    exit 2
    ;;
esac
