#!/bin/bash
# The tracked tree (26 MB, 10 MB of it the committed zoo bundles under reports/zoo/) and the Ray wheels (41 MB) exceed
# a device call's 64 MiB. `bash reports/gpu/leave-zoo.sh on` before the call untracks reports/zoo/ in the index only
# and excludes it (the files stay on disk, no call script reads them); `off` after the call restores both. Commit
# nothing between the two.
set -eu
cd "$(git rev-parse --show-toplevel)"
EXCLUDE=$(git rev-parse --git-path info/exclude)
case "${1:-}" in
  on)  if [ -z "$(git ls-files reports/zoo | head -1)" ]; then echo "reports/zoo is already left out"; exit 0; fi
       git rm -r -q --cached reports/zoo && echo "reports/zoo/" >> "$EXCLUDE"
       echo "reports/zoo left out of the call; run '$0 off' after it" ;;
  off) sed -i '\#^reports/zoo/$#d' "$EXCLUDE" && git reset -q -- reports/zoo && echo "reports/zoo tracked again" ;;
  *)   echo "usage: $0 on|off" >&2; exit 2 ;;
esac
