#!/usr/bin/env bash
# A SpecForge or TorchSpec training output -> a drafter vLLM serves exactly as trained.
#   examples/specforge_to_vllm.sh CHECKPOINT TARGET OUT
# CHECKPOINT: the training framework's export; TARGET: the target model (directory, cached Hub id or .gguf),
# read for its config only, so the aux layer ids and the verifier are resolved for it.
set -euo pipefail
src=$1 target=$2 out=$3
eaglekit inspect "$src"
eaglekit convert "$src" "$out" --to vllm --target "$target"
eaglekit validate "$out" --target "$target" --engine vllm==0.32
eaglekit verify "$out" --target "$target" --reference "$src"
