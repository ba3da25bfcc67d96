"""llama.cpp's reading of a drafter, build by build: llama-server with a GGUF drafter of architecture ``eagle3``.

llama.cpp serves drafters from GGUF files only. A GGUF drafter (``dialects/gguf.py``) is read as the build's loader
reads it (``src/models/eagle3.cpp``: its keys, its tensors, what it refuses or aborts on) and run as its speculative
loop runs it (``common/speculative.cpp``: target layers taken as input-of-layer ids, the pre-norm state fed forward).
A drafter in a Hugging Face layout goes through the same build's converter first (``convert_hf_to_gguf.py`` with
``conversion/llama.py``), whose reading differs from eaglekit's: it takes ``target_layers`` from the top-level ids only
(else the default 2, L//2, L-3), the flags from the top level only, and has no name for EAGLE 3.1's ``fc_norm``
tensors. The facts per build are data, ``llamacpp_releases.json``, each marked source or run; findings a recorded run
observed say ``evidence: run`` (``llamacpp_observations.json``, written by tests/engines/test_llamacpp_matrix.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from ..errors import UsageError
from ..io import dtypes
from ..model.drafter import INPUT, AuxLayers, Drafter, Flags, default_aux_ids
from ..model.layout import expected_tensors
from .common import EngineView, Recorder, Release, flag_findings, fused_states, int_ids, listed, load_table, stamp_runs

ENGINE = "llama.cpp"
TABLE = "llamacpp_releases.json"
OBSERVATIONS = "llamacpp_observations.json"
OPTIONAL = ("embed_tokens.weight", "lm_head.weight", "d2t")  # the loader creates them only when the file has them


def build_number(text: str) -> int:
    """``b11434`` (llama.cpp's tag) or ``11434`` -> 11434."""
    digits = text.strip().removeprefix("b")
    if not digits.isascii() or not digits.isdigit():
        raise UsageError(f"llama.cpp=={text}: expected a build as llama.cpp tags it, e.g. b11434")
    return int(digits)


release_key = build_number  # how a table's rows sort (engines.support.rows)


def release(version: str) -> Release:
    table = load_table(TABLE)
    wanted, first = build_number(version), build_number(table["first_release"])
    if wanted < first:
        raise UsageError(f"llama.cpp=={version}: eaglekit's rules start at {table['first_release']}, the build read")
    rows = sorted(table["releases"].items(), key=lambda kv: build_number(kv[0]))
    name, rules = [r for r in rows if build_number(r[0]) <= wanted][-1]
    newest = table["newest_read"]
    beyond = wanted > build_number(newest)
    return Release(ENGINE, version, name, rules, beyond, rules.get("evidence", "source"), newest)


def facts(rel: Release) -> dict:
    return {key: fact["value"] for key, fact in rel.rules["facts"].items()}


def run_evidence(version: str, path: str):
    """``check -> "llama.cpp bN, case NAME"`` for the checks a recorded run of this build observed on a drafter of the
    same kind (``path``: "gguf" or "converted"), llama.cpp doing as predicted; None for the rest."""
    wanted = build_number(version)
    covered: dict[str, str] = {}
    try:
        entries = load_table(OBSERVATIONS)["observations"]
    except FileNotFoundError:
        entries = []
    for entry in entries:
        if entry["agrees"] and entry["path"] == path and build_number(entry["release"]) == wanted:
            for check in entry["checks"]:
                covered.setdefault(check, f"llama.cpp {entry['release']}, case {entry['case']}")
    return covered.get


@dataclass
class Served:
    """The GGUF file llama-server gets: what its metadata states and which tensors (canonical names) it holds."""

    ids: tuple[int, ...] | None  # eagle3.target_layers (None: absent)
    flags: dict[str, bool]
    tensors: set[str]
    unknown: list[str] = field(default_factory=list)  # stored names the loader does not create
    target_hidden: int | None = None
    converted: bool = False  # made by the build's converter from a Hugging Face layout


def _from_gguf(loaded) -> Served:
    config = loaded.checkpoint.config or {}
    return Served(
        int_ids(config.get("eagle_aux_hidden_state_layer_ids")),
        {k: bool(config.get(k, False)) for k in ("norm_before_residual", "norm_before_fc")},
        set(loaded.names),
        list(loaded.unknown),
        config.get("target_hidden_size") if isinstance(config.get("target_hidden_size"), int) else None,
    )


def _through_converter(loaded, f: dict, out: Recorder, L: int | None) -> Served | None:
    """What the build's converter writes for a Hugging Face layout, or None (with the refusal) where it fails."""
    config = loaded.checkpoint.config or {}
    archs = config.get("architectures") if isinstance(config.get("architectures"), list) else []
    arch = archs[0] if archs and isinstance(archs[0], str) else None
    nested = config.get("transformer_layer_config")  # speculators' layer config: the converter reads it over the top
    hparams = {**config, **nested} if isinstance(nested, dict) else config
    layers = hparams.get("num_hidden_layers")
    if arch not in f["converter_architectures"]:
        out.refuse(
            "engine.converter",
            f"architecture {arch!r}",
            "cannot convert it: its converter (convert_hf_to_gguf.py) has no EAGLE 3 conversion for that architecture,"
            " so there is no GGUF to serve",
            "architectures",
        )
        return None
    if "draft_vocab_size" not in hparams or layers != 1:
        missing = "draft_vocab_size" not in hparams
        out.refuse(
            "engine.converter",
            "config.json has no draft_vocab_size" if missing else f"num_hidden_layers {layers}",
            "cannot convert it: its converter takes a config for an EAGLE 3 drafter only with draft_vocab_size and"
            " num_hidden_layers 1 (top level, or speculators' transformer_layer_config), and fails on fc.weight as a"
            " plain Llama: no GGUF to serve",
            "draft_vocab_size" if missing else "num_hidden_layers",
        )
        return None
    unmapped = [loaded.stored_name(n) for n in loaded.names if n.startswith(tuple(f["converter_unmapped"]))]
    unmapped += [n for n in loaded.unknown]
    if unmapped:
        out.refuse(
            "engine.converter",
            f"{'tensors' if len(unmapped) > 1 else 'tensor'} {listed(sorted(unmapped))}",
            "cannot convert it: its converter has no GGUF name for them and stops ('Can not map tensor'): no GGUF to"
            " serve",
            sorted(unmapped)[0],
        )
        return None
    top = int_ids(config.get("eagle_aux_hidden_state_layer_ids"))
    ids = top if top else (default_aux_ids(L) if L else None)
    return Served(
        ids,
        {k: bool(config.get(k, False)) for k in ("norm_before_residual", "norm_before_fc")},
        {n for n in loaded.names if n not in f["converter_drops"]},
        [],
        loaded.drafter.target_hidden_size,
        converted=True,
    )


def _expected(d: Drafter, served: Served) -> dict:
    """The tensors the loader creates for this file (canonical names)."""
    flags = Flags(
        norm_before_fc=served.flags["norm_before_fc"], norm_before_residual=served.flags["norm_before_residual"]
    )
    shaped = replace(d, flags=flags, num_aux=3, attention="llama", attention_bias=False, mlp_bias=False)
    return {n: s for n, s in expected_tensors(shaped).items() if n != "t2d"}


def _load(out: Recorder, served: Served, loaded, f: dict, L: int | None) -> None:
    """Refusals at load (the loader's checks) and aborts at start (the speculative loop's)."""
    d = loaded.drafter
    if served.ids is None:
        out.refuse(
            "engine.aux_ids", "the GGUF has no eagle3.target_layers", "refuses to load ('requires extract_layers')"
        )
    elif len(served.ids) != f["ids_exactly"]:
        out.refuse(
            "engine.aux_count",
            f"target_layers names {len(served.ids)} layers",
            f"refuses to load: its eagle3 drafter fuses exactly {f['ids_exactly']}",
            "eagle_aux_hidden_state_layer_ids",
        )
    if served.target_hidden is None:
        out.refuse(
            "engine.target_hidden", "the GGUF has no eagle3.target_hidden_size", "refuses to load (key not found)"
        )
    fused = fused_states(loaded)
    if fused != f["ids_exactly"] and "fc.weight" in served.tensors:
        out.refuse(
            "engine.aux_count",
            f"fc.weight fuses {fused} target states",
            f"refuses to load: it builds fc for exactly {f['ids_exactly']} (wrong shape)",
            "fc.weight",
        )
    expected = _expected(d, served)
    unknown = served.unknown + sorted(n for n in served.tensors if n not in expected)
    if unknown:
        out.refuse(
            "engine.unknown_tensor",
            f"{'tensors' if len(unknown) > 1 else 'tensor'} {listed([loaded.stored_name(n) for n in unknown])}",
            "refuses to load: its eagle3 drafter creates no such tensor ('wrong number of tensors')",
            unknown[0],
        )
    missing = sorted(n for n, s in expected.items() if s.required and n not in served.tensors and n not in OPTIONAL)
    if missing:
        out.refuse(
            "engine.missing_tensor", f"missing {listed(missing)}", "refuses to load (missing tensor)", missing[0]
        )
    if out.view.loads:
        d2t = loaded.present().get("d2t") if not served.converted else None  # the converter writes it as int64
        _aborts(out, served, d, f, L, dtypes.name(d2t[1]) if d2t else None)


def _aborts(out: Recorder, served: Served, d: Drafter, f: dict, L: int | None, d2t_dtype: str | None = None) -> None:
    """What loads, then aborts (GGML_ASSERT, GGML_ABORT): at start, building the draft graph, or at the first draft."""
    if "d2t" in served.tensors and d2t_dtype not in (None, "int64"):
        out.view.crashes = True
        out.add(
            "engine.crash", "error", f"d2t is {d2t_dtype}", "aborts at the first draft (GGML_ASSERT d2t is I64)", "d2t"
        )
    if "d2t" in served.tensors and "lm_head.weight" not in served.tensors and d.draft_vocab_size != d.vocab_size:
        out.view.crashes = True
        out.add(
            "engine.crash",
            "error",
            f"d2t maps {d.draft_vocab_size} draft tokens but the drafter ships no lm_head",
            "aborts at the first draft: the target's head gives a logit per target token, not per d2t row",
            "lm_head.weight",
        )
    if d.num_layers != f["layers_exactly"]:
        out.view.crashes = True
        out.add(
            "engine.crash",
            "error",
            f"the drafter has {d.num_layers} decoder layers",
            f"loads it, then aborts building the draft graph (GGML_ASSERT n_layer == {f['layers_exactly']})",
            "num_hidden_layers",
        )
    if L and served.ids and max(served.ids) > L:
        out.view.crashes = True
        out.add(
            "engine.crash",
            "error",
            f"target_layers {list(served.ids)} reach past the target's {L} layers",
            "aborts at start ('EAGLE3: target layer id exceeds target n_layer')",
            "eagle_aux_hidden_state_layer_ids",
        )


def _ids(out: Recorder, served: Served, d: Drafter, L: int | None) -> None:
    intended = d.aux.resolved(L)
    if intended is None or served.ids is None:
        return
    captured = tuple(sorted(served.ids))
    if captured != intended:
        why = " (its converter reads only the top-level ids; these live in eagle_config)" if served.converted else ""
        out.add(
            "engine.aux_ids",
            "error",
            f"the drafter fuses target layers {list(intended)} (input-of-layer)",
            f"captures layers {list(captured)} instead{why}: the drafter sees other layers than it was trained on",
            "eagle_aux_hidden_state_layer_ids",
        )


def _reading(out: Recorder, served: Served, loaded, L: int | None) -> Drafter:
    """Flags, feedback and capture layers as the build runs them, against the drafter's; the drafter it runs."""
    d = loaded.drafter
    flags = Flags(
        fc_norm=False,
        norm_output=False,
        norm_before_fc=served.flags["norm_before_fc"],
        norm_before_residual=served.flags["norm_before_residual"],
    )
    effects = {
        "fc_norm": "has no fc_norm (no key, no per-state norm): runs fc on the un-normed states",
        "norm_output": "has no norm_output: feeds the pre-norm state to the next step, as EAGLE 3",
        "norm_before_fc": "runs with norm_before_fc={}"
        + (" (its converter reads the flag at config.json's top level only)" if served.converted else ""),
        "norm_before_residual": "runs with norm_before_residual={}"
        + (
            " (its converter reads the flag at config.json's top level only, false when absent)"
            if served.converted
            else ""
        ),
    }
    flag_findings(out, d, flags, effects)
    _ids(out, served, d, L)
    if served.converted and served.ids is not None and d.aux.as_input() is not None:
        top = int_ids((loaded.checkpoint.config or {}).get("eagle_aux_hidden_state_layer_ids"))
        if top is None and tuple(sorted(served.ids)) == d.aux.resolved(L):
            out.add(
                "engine.converter_default_ids",
                "info",
                "the drafter's ids live only in eagle_config",
                f"ignores them in its converter, which writes the default {list(served.ids)}: here the same layers",
                "eagle_aux_hidden_state_layer_ids",
            )
    aux = AuxLayers(tuple(served.ids), INPUT) if served.ids is not None else d.aux
    return replace(d, flags=flags, aux=aux)


def interpret(loaded, rel: Release, *, target_num_layers: int | None = None) -> EngineView:
    """How build ``rel`` of llama.cpp serves ``loaded``: directly (a GGUF drafter) or after its own converter."""
    out = Recorder(rel)
    out.untested(rel)
    f = facts(rel)
    L = target_num_layers or loaded.drafter.target_num_layers
    gguf = loaded.dialect == "gguf"
    served = _from_gguf(loaded) if gguf else _through_converter(loaded, f, out, L)
    if served is not None:
        _load(out, served, loaded, f, L)
    if out.view.loads and served is not None:
        out.view.drafter = _reading(out, served, loaded, L)
    stamp_runs(out.view, run_evidence(rel.requested, "gguf" if gguf else "converted"))
    return out.view


__all__ = ["ENGINE", "build_number", "facts", "interpret", "release", "run_evidence"]
