#!/usr/bin/env bash
# Start fine-tuning an EAGLE 3 drafter as EAGLE 3.1 (TorchSpec's upgrade path): fc_norm weights of ones and
# norm_output on. This changes the drafter's numerics: fine-tune before serving. Downgrades are refused.
#   examples/upgrade_to_31.sh CHECKPOINT OUT [DIALECT]
set -euo pipefail
src=$1 out=$2 dialect=${3:-speculators}
eaglekit convert "$src" "$out" --to "$dialect" --upgrade 3.1
eaglekit validate "$out" --scan   # warns that the fc_norm weights are all ones, i.e. untrained
