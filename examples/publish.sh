#!/usr/bin/env bash
# Publish a drafter: validate, look at what would be sent, then send it as one commit (HF_TOKEN or --token).
#   examples/publish.sh CHECKPOINT REPO_ID TARGET
set -euo pipefail
src=$1 repo=$2 target=$3
eaglekit verify "$src" --target "$target" --report "$src/eaglekit-verify.json"   # its figures go in the model card
eaglekit push "$src" "$repo" --dry-run
eaglekit push "$src" "$repo"
