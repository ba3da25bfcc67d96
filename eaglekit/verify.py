"""``verify``: run a drafter on its target's real hidden states and measure what a greedy vLLM run would see.

Per prompt: the target generates a greedy continuation; one target pass over the whole sequence gives the
aux states; the reference drafter drafts a K-step chain at every position (batched); drafts are compared
with the target's tokens. Reported with vLLM's definitions: along the positions a vLLM run visits
("trajectory": what its counters would say) and over every position (a steadier estimate).

Parity: ``reference`` runs a second checkpoint of the same drafter on the same states; ``engine`` runs the
drafter as a vLLM release would interpret it beside the intended drafter; ``against`` runs vLLM itself.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Callable

import torch

from . import dialects, engines
from .errors import UnsupportedError, UsageError
from .findings import errors
from .io import jsonfile
from .model.drafter import Drafter
from .reference.model import ReferenceDrafter, weights_for
from .reference.simulate import Chains, Counters, accepted_lengths, draft_chains, every_position, trajectory
from .target import read_target_config
from .target.runner import DTYPES, TargetModel, pick_device
from .target.weights import read_target_weight
from .validate.checks import CheckInput, run_checks


@dataclass
class VerifyOptions:
    target: str
    prompts: str | None = None  # JSONL file; None: the built-in set
    num_prompts: int | None = None
    max_new_tokens: int = 64
    k: int = 3
    engine: str | None = None
    reference: str | None = None
    against: str | None = None  # "vllm"
    min_acceptance_length: float | None = None
    device: str = "cpu"
    dtype: str = "float32"
    device_map: str | None = None
    hidden_states: str | None = None
    source_dialect: str = "auto"
    atol: float | None = None  # logit tolerance for --reference; None: 0 for same dtypes, else dtype-based


@dataclass
class Prompt:
    id: str
    category: str
    ids: list[int]


@dataclass
class SequenceResult:
    prompt: Prompt
    tokens: torch.Tensor  # prompt + continuation
    chains: Chains
    accepted: torch.Tensor
    trajectory: Counters
    every_position: Counters
    target_mismatches: int = 0  # continuation tokens the full-sequence pass would not pick (numerics)


@dataclass
class Check:
    name: str
    passed: bool
    detail: str

    def to_dict(self) -> dict:
        return {"name": self.name, "passed": self.passed, "detail": self.detail}


# -- prompts ---------------------------------------------------------------------------------------------------


def read_prompt_records(path: str | None) -> list[dict]:
    if path is None:
        text = resources.files("eaglekit").joinpath("data/prompts.jsonl").read_text()
        label = "built-in prompts"
    else:
        try:
            text = Path(path).read_text()
        except OSError as exc:
            raise UsageError(f"--prompts {path}: cannot read ({exc.strerror})") from None
        label = path
    records = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        record = jsonfile.loads(line, f"{label} line {number}")
        if not isinstance(record, dict) or not any(k in record for k in ("prompt", "messages", "input_ids")):
            raise UsageError(f"{label} line {number}: expected an object with 'prompt', 'messages' or 'input_ids'")
        record.setdefault("id", f"prompt-{number}")
        records.append(record)
    if not records:
        raise UsageError(f"{label}: no prompts")
    return records


def encode_prompts(records: list[dict], tokenizer, limit: int | None) -> list[Prompt]:
    out = []
    for record in records[:limit] if limit else records:
        if "input_ids" in record:
            ids = [int(i) for i in record["input_ids"]]
        else:
            if tokenizer is None:
                raise UsageError("the target has no tokenizer: give prompts as input_ids")
            messages = record.get("messages") or [{"role": "user", "content": record["prompt"]}]
            if getattr(tokenizer, "chat_template", None):
                ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
                if isinstance(ids, dict) or hasattr(ids, "input_ids"):
                    ids = ids["input_ids"]
                ids = list(ids)
            else:
                ids = tokenizer("\n".join(m["content"] for m in messages))["input_ids"]
        if len(ids) < 2:
            raise UsageError(f"prompt {record['id']}: fewer than 2 tokens")
        out.append(Prompt(str(record["id"]), str(record.get("category", "custom")), ids))
    return out


# -- simulation ------------------------------------------------------------------------------------------------


def simulate(model: ReferenceDrafter, prompt: Prompt, tokens: torch.Tensor, aux: torch.Tensor, k: int, max_new_tokens: int, eos: int | None) -> SequenceResult:
    """``tokens`` runs up to K+1 tokens past ``max_new_tokens`` so that the last verification is judged as vLLM
    judges it; ``eos`` is the index of the first end-of-sequence token, if any."""
    P, S = len(prompt.ids), tokens.shape[0]
    starts = torch.arange(P - 1, S - 1)
    chains = draft_chains(model, tokens, aux, starts, k)
    accepted = accepted_lengths(chains, tokens).cpu()
    end = min(S, P + max_new_tokens, eos + 1 if eos is not None else S)
    return SequenceResult(
        prompt,
        tokens,
        chains,
        accepted,
        trajectory(accepted, starts, k, P, max_new_tokens, eos),
        every_position(accepted, starts, k, last_full=end - 2 - k),
    )


def first_eos(tokens: torch.Tensor, prompt_len: int, eos_ids: set[int]) -> int | None:
    for i in range(prompt_len, tokens.shape[0]):
        if int(tokens[i]) in eos_ids:
            return i
    return None


def _slice_aux(aux_all: torch.Tensor, union: tuple[int, ...], ids: tuple[int, ...], width: int) -> torch.Tensor:
    chunks = aux_all.split(width, dim=-1)
    return torch.cat([chunks[union.index(i)] for i in ids], dim=-1)


def _totals(results: list[SequenceResult]) -> tuple[Counters, Counters]:
    traj, every = Counters(), Counters()
    for r in results:
        traj.merge(r.trajectory)
        every.merge(r.every_position)
    return traj, every


def _compare_chains(a: ReferenceDrafter, b: ReferenceDrafter, ra: list[SequenceResult], rb: list[SequenceResult], k: int) -> dict:
    """Per draft step: max abs / rel logit difference and draft-token agreement."""
    steps = []
    for step in range(k):
        max_abs = max_rel = 0.0
        agree = total = 0
        for x, y in zip(ra, rb):
            la = a.draft_logits(x.chains.y[:, step]).float()
            lb = b.draft_logits(y.chains.y[:, step].to(a.device)).float().to(la.device)
            if la.shape == lb.shape:
                diff = (la - lb).abs()
                max_abs = max(max_abs, float(diff.max()))
                max_rel = max(max_rel, float((diff / la.abs().clamp_min(1e-6)).max()))
            else:
                max_abs = max_rel = float("inf")
            agree += int((x.chains.drafts[:, step].cpu() == y.chains.drafts[:, step].cpu()).sum())
            total += x.chains.drafts.shape[0]
        steps.append({"step": step + 1, "max_abs_logit_diff": max_abs, "max_rel_logit_diff": max_rel, "token_agreement": agree / total if total else 1.0})
    return {"steps": steps, "bit_identical": all(s["max_abs_logit_diff"] == 0.0 and s["token_agreement"] == 1.0 for s in steps)}


# -- the run -------------------------------------------------------------------------------------------------


class Verifier:
    """Holds the target and prompts so several drafters (the drafter, a reference, an engine's view) share them."""

    def __init__(self, options: VerifyOptions, progress: Callable[[str, int], object] | None = None):
        if options.k < 1:
            raise UsageError("--num-speculative-tokens must be at least 1")
        if options.dtype not in DTYPES:
            raise UsageError(f"--dtype {options.dtype!r}: one of {', '.join(DTYPES)}")
        self.options = options
        self.device = pick_device(options.device)
        self.dtype = DTYPES[options.dtype]
        self.target_config = read_target_config(options.target)
        self.progress = progress
        self.target: TargetModel | None = None
        self.sequences: list[tuple[Prompt, torch.Tensor]] = []  # prompt + continuation + K+1 lookahead tokens
        self.eos: list[int | None] = []
        self.max_new: list[int] = []  # per sequence: how many tokens the trajectory may produce
        self.stored_ids: tuple[int, ...] | None = None  # --hidden-states: the only aux layers available
        self._aux_cache: dict[tuple[str, tuple[int, ...]], torch.Tensor] = {}

    def prepare(self) -> None:
        self.target = TargetModel.load(self.target_config, device=self.device, dtype=self.dtype, device_map=self.options.device_map)
        records = read_prompt_records(self.options.prompts)
        prompts = encode_prompts(records, self.target.tokenizer, self.options.num_prompts)
        bar = self.progress("generating", len(prompts)) if self.progress else None
        eos_ids = self.target.eos_token_ids()
        for prompt in prompts:
            tokens = self.target.generate(prompt.ids, self.options.max_new_tokens + self.options.k + 1)
            self.sequences.append((prompt, tokens))
            self.eos.append(first_eos(tokens, len(prompt.ids), eos_ids))
            self.max_new.append(self.options.max_new_tokens)
            if bar is not None:
                bar.update(1)
        if bar is not None:
            bar.close()

    def prepare_stored(self, drafter: Drafter, ids: tuple[int, ...]) -> None:
        """--hidden-states: sequences and aux states from files; the target contributes its config and, where the
        drafter ships none, its embedding and lm_head (read alone from its checkpoint)."""
        from .hidden_states import read_sequences

        stored = read_sequences(self.options.hidden_states, num_aux=drafter.num_aux, hidden=drafter.target_hidden_size, limit=self.options.num_prompts)
        for seq in stored:
            if seq.aux_layer_ids is not None and tuple(sorted(seq.aux_layer_ids)) != ids:
                raise UsageError(f"{seq.name}: the file holds target layers {list(seq.aux_layer_ids)}, the drafter fuses {list(ids)}")
            prompt = Prompt(seq.name, "stored", seq.tokens[: seq.prompt_len].tolist())
            self.sequences.append((prompt, seq.tokens))
            self.eos.append(None)
            self.max_new.append(int(seq.tokens.shape[0]) - seq.prompt_len)
            self._aux_cache[(prompt.id, ids)] = (seq.aux, 0)
        self.stored_ids = ids

    def target_weight(self, kind: str) -> torch.Tensor | None:
        """The target's input embedding ("embed") or lm_head: from the loaded model, else from its checkpoint."""
        if self.target is not None:
            return self.target.embed_weight if kind == "embed" else self.target.lm_head_weight
        return read_target_weight(self.target_config, kind)

    def aux(self, index: int, ids: tuple[int, ...]) -> tuple[torch.Tensor, int]:
        prompt, tokens = self.sequences[index]
        key = (prompt.id, ids)
        if key not in self._aux_cache and self.stored_ids is not None:
            raise UnsupportedError(f"the stored hidden states hold target layers {list(self.stored_ids)}, not {list(ids)}: run the target to compare these")
        if key not in self._aux_cache:
            aux, target_next = self.target.aux_states(tokens, ids)
            mismatches = int((target_next[len(prompt.ids) - 1 : -1].cpu() != tokens[len(prompt.ids) :]).sum())
            self._aux_cache[key] = (aux, mismatches)
        return self._aux_cache[key]

    def model_for(self, loaded: dialects.LoadedDrafter, drafter: Drafter | None = None, extra_weights: dict | None = None) -> ReferenceDrafter:
        needs_embed = "embed_tokens.weight" not in loaded.names
        needs_head = "lm_head.weight" not in loaded.names and "lm_head.up.weight" not in loaded.names
        weights = weights_for(
            loaded,
            target_embed=self.target_weight("embed") if needs_embed else None,
            target_lm_head=self.target_weight("lm_head") if needs_head else None,
        )
        weights.update(extra_weights or {})
        return ReferenceDrafter(drafter or loaded.drafter, weights, device=self.device, dtype=self.dtype)

    def run(self, model: ReferenceDrafter, ids: tuple[int, ...], label: str) -> tuple[list[SequenceResult], float]:
        results = []
        seconds = 0.0
        bar = self.progress(f"drafting ({label})", len(self.sequences)) if self.progress else None
        for index, (prompt, tokens) in enumerate(self.sequences):
            aux, mismatches = self.aux(index, ids)
            start = time.perf_counter()
            result = simulate(model, prompt, tokens, aux, self.options.k, self.max_new[index], self.eos[index])
            seconds += time.perf_counter() - start
            result.target_mismatches = mismatches
            results.append(result)
            if bar is not None:
                bar.update(1)
        if bar is not None:
            bar.close()
        return results, seconds


def _resolved_ids(d: Drafter, L: int) -> tuple[int, ...]:
    ids = d.aux.resolved(L)
    if ids is None:  # pragma: no cover - resolved() falls back to the default whenever L is known
        raise UnsupportedError("aux layer ids cannot be resolved")
    return ids


def verify(path: str, options: VerifyOptions, progress: Callable[[str, int], object] | None = None) -> dict:
    """Run the verification and return the report (a dict following schemas/verify.schema.json)."""
    if options.hidden_states and options.against:
        raise UsageError("--against vllm runs the target itself; it cannot use --hidden-states")
    verifier = Verifier(options, progress)
    L = verifier.target_config.num_layers
    loaded = dialects.load(path, options.source_dialect)
    with loaded:
        d = loaded.drafter.with_(target_num_layers=L)
        loaded.drafter = d
        findings = run_checks(CheckInput(d, loaded.present(), read=loaded.read, target=verifier.target_config))
        checks: list[Check] = []
        if errors(findings):
            checks.append(Check("validate", False, f"{len(errors(findings))} error(s), first: {errors(findings)[0].message}"))
        ids = _resolved_ids(d, L)
        if options.hidden_states:
            verifier.prepare_stored(d, ids)
        else:
            verifier.prepare()
        model = verifier.model_for(loaded)
        results, seconds = verifier.run(model, ids, "drafter")
        traj, every = _totals(results)
        drafted = sum(r.chains.drafts.numel() for r in results)
        report: dict = {
            "drafter": str(path),
            "dialect": loaded.dialect,
            "eagle_version": d.eagle_version,
            "target": verifier.target_config.name,
            "device": verifier.device,
            "dtype": options.dtype,
            "num_speculative_tokens": options.k,
            "max_new_tokens": options.max_new_tokens,
            "hidden_states": options.hidden_states,
            "aux_layer_ids": list(ids),
            "aux_layer_ids_recorded": d.aux.ids is not None,
            "acceptance_length": round(traj.acceptance_length, 6),
            "trajectory": traj.to_dict(),
            "every_position": every.to_dict(),
            "prompts": [
                {
                    "id": r.prompt.id,
                    "category": r.prompt.category,
                    "prompt_tokens": len(r.prompt.ids),
                    "new_tokens": min(int(r.tokens.shape[0]) - len(r.prompt.ids), verifier.max_new[i]),
                    "target_mismatches": r.target_mismatches,
                    "trajectory": r.trajectory.to_dict(),
                    "every_position": r.every_position.to_dict(),
                }
                for i, r in enumerate(results)
            ],
            "throughput": {"drafted_tokens": drafted, "seconds": round(seconds, 4), "drafted_tokens_per_second": round(drafted / seconds, 1) if seconds else None},
            "findings": [f.to_dict() for f in findings if f.severity != "info"],
            "reference": None,
            "engine": None,
            "against": None,
        }
        if options.min_acceptance_length is not None:
            ok = traj.acceptance_length >= options.min_acceptance_length
            checks.append(Check("min_acceptance_length", ok, f"acceptance length {traj.acceptance_length:.3f} {'>=' if ok else '<'} {options.min_acceptance_length}"))
        if options.reference:
            report["reference"], check = _reference(verifier, loaded, model, results, options)
            checks.append(check)
        if options.engine:
            report["engine"], check = _engine(verifier, loaded, model, results, options)
            checks.append(check)
        if options.against:
            from .against_vllm import against_vllm

            report["against"], new_checks = against_vllm(path, verifier, model, results, ids, options)
            checks.extend(new_checks)
    report["checks"] = [c.to_dict() for c in checks]
    report["passed"] = all(c.passed for c in checks)
    return report


def _float_dtypes(loaded: dialects.LoadedDrafter) -> set[torch.dtype]:
    return {i.dtype for i in loaded.checkpoint.tensors.values() if i.dtype.is_floating_point}


def _reference(verifier: Verifier, loaded: dialects.LoadedDrafter, model: ReferenceDrafter, results: list[SequenceResult], options: VerifyOptions) -> tuple[dict, Check]:
    """The same run on another checkpoint of the same drafter. With the same stored dtypes (a lossless conversion)
    nothing may differ at all; otherwise logits within --atol (if given) and 99% token agreement."""
    L = verifier.target_config.num_layers
    with dialects.load(options.reference) as ref:
        ref.drafter = ref.drafter.with_(target_num_layers=L)
        ref_ids = _resolved_ids(ref.drafter, L)
        ref_model = verifier.model_for(ref)
        ref_results, _ = verifier.run(ref_model, ref_ids, "reference")
        lossless_expected = _float_dtypes(ref) == _float_dtypes(loaded)
    comparison = _compare_chains(model, ref_model, results, ref_results, options.k)
    ref_traj, _ = _totals(ref_results)
    ids_match = ref_ids == _resolved_ids(model.d, L)
    worst = max(s["max_abs_logit_diff"] for s in comparison["steps"])
    agree = min(s["token_agreement"] for s in comparison["steps"])
    if lossless_expected and options.atol is None:
        ok = ids_match and comparison["bit_identical"]
        rule = "bit-identical (same stored dtypes)"
    else:
        ok = ids_match and agree >= 0.99 and (options.atol is None or worst <= options.atol)
        rule = "token agreement >= 99%" + (f", |logit diff| <= {options.atol:g}" if options.atol is not None else "")
    detail = f"max |logit diff| {worst:.3g}, token agreement {agree:.2%}; required: {rule}"
    if not ids_match:
        detail += f"; aux layer ids differ: {list(ref_ids)} vs {list(_resolved_ids(model.d, L))}"
    data = {
        "path": options.reference,
        "aux_layer_ids": list(ref_ids),
        "acceptance_length": round(ref_traj.acceptance_length, 6),
        "required": rule,
        **comparison,
    }
    return data, Check("reference_parity", ok, detail)


def _engine(verifier: Verifier, loaded: dialects.LoadedDrafter, model: ReferenceDrafter, results: list[SequenceResult], options: VerifyOptions) -> tuple[dict, Check]:
    release = engines.parse(options.engine)
    view = engines.interpret(loaded, release, target_num_layers=verifier.target_config.num_layers)
    data: dict = {"engine": release.label, "loads": view.loads, "findings": [f.to_dict() for f in view.findings]}
    causes = [f"{f.message} — {f.effect}" for f in view.findings if f.severity == "error"]
    if not view.loads:
        return data, Check("engine_parity", False, f"{release.label} would not load it: " + "; ".join(causes[:3]))
    if view.uninitialised:
        return data, Check("engine_parity", False, f"{release.label} leaves {', '.join(view.uninitialised[:3])} uninitialised: its output is undefined")
    engine_drafter = view.drafter
    extra = {}
    for name in view.unit_weights:
        extra[name] = torch.ones(engine_drafter.target_hidden_size if name.startswith("fc_norm.") else engine_drafter.hidden_size)
    engine_model = verifier.model_for(loaded, drafter=engine_drafter, extra_weights=extra)
    ids = _resolved_ids(engine_drafter, verifier.target_config.num_layers)
    engine_results, _ = verifier.run(engine_model, ids, release.label)
    intended, _ = _totals(results)
    served, _ = _totals(engine_results)
    comparison = _compare_chains(model, engine_model, results, engine_results, options.k)
    agree = min(s["token_agreement"] for s in comparison["steps"])
    diverges = agree < 1.0 or abs(intended.acceptance_length - served.acceptance_length) > 1e-9
    data.update(
        {
            "aux_layer_ids": list(ids),
            "intended_acceptance_length": round(intended.acceptance_length, 6),
            "engine_acceptance_length": round(served.acceptance_length, 6),
            "intended": intended.to_dict(),
            "served": served.to_dict(),
            "token_agreement": [s["token_agreement"] for s in comparison["steps"]],
        }
    )
    if diverges or causes:
        # a silent misreading fails even where these prompts happen not to show it in the acceptance length
        why = "; ".join(causes[:3]) or "numerics differ"
        detail = f"{release.label} would reach acceptance length {served.acceptance_length:.3f} (intended {intended.acceptance_length:.3f}): {why}"
        return data, Check("engine_parity", False, detail)
    return data, Check("engine_parity", True, f"{release.label} runs it as intended (acceptance length {served.acceptance_length:.3f})")


__all__ = ["Check", "VerifyOptions", "Verifier", "encode_prompts", "read_prompt_records", "simulate", "verify"]
