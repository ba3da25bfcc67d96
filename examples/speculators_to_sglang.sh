#!/usr/bin/env bash
# A vllm-project/speculators drafter -> SGLang's layout (midlayer.*, ids nested in eagle_config as
# output-of-layer ids, t2d/d2t kept, embeddings left to the target).
#   examples/speculators_to_sglang.sh CHECKPOINT OUT
set -euo pipefail
src=$1 out=$2
eaglekit convert "$src" "$out" --to sglang --dry-run
eaglekit convert "$src" "$out" --to sglang
eaglekit inspect "$out"
