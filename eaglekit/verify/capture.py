"""The target run by vLLM, never by eaglekit: greedy continuations and the aux states at every position, captured by
vLLM's own ``extract_hidden_states`` in the engine the target is served on (``engines/vllm_capture.py``), with the
parallel layout it is served with (``engines/vllm_scale.py``).

Two users: ``eaglekit capture`` writes the sequences into a folder, one file per prompt in eaglekit's layout of
``verify --hidden-states`` (``stored.write_sequence``), and resumes an interrupted run; ``verify`` / ``drift
--target-engine`` keep them in memory (``Verifier.prepare_engine``). Either way eaglekit's process holds the target's
tokenizer and config, never its weights.

Each sequence is what verify's transformers run makes of the same prompt: the continuation runs
``continuation_length(max_new_tokens, K)`` tokens past the prompt; where the target's stop token comes, it ends there
and the K - 1 greedy tokens after it are kept apart (they judge the drafts of the step that crosses the stop, as vLLM
counts them). vLLM generates one token more than that (``ignore_eos``): its file then holds the states of every
position kept.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch

from ..engines import envs, vllm_capture, vllm_cpu_mla, vllm_scale
from ..errors import CheckpointError, UnsupportedError, UsageError
from ..io.tensorfile import read_safetensors
from ..model.hf_config import is_mla, rope_from_divisors
from ..reference.simulate import continuation_length
from ..target.config import TargetConfig
from ..target.decode import cut_at_stop
from ..target.dequantise import transformers_directory
from ..target.runner import DTYPES
from ..target.tokens import eos_ids, first_eos, generation_config, load_tokenizer
from .prompts import Prompt


@dataclass(frozen=True)
class Engine:
    """Which vLLM runs the target, and how: ``spec`` "vllm" or "vllm==X", ``python`` any environment's Python
    (``--vllm-python``), ``parallel`` the workers' layout."""

    spec: str = "vllm"
    python: str | None = None
    parallel: vllm_scale.Parallel = field(default_factory=vllm_scale.Parallel)


@dataclass
class CapturedSequence:
    prompt: Prompt
    tokens: torch.Tensor  # [S] the prompt and its continuation, up to the stop token
    states: dict[int, torch.Tensor]  # target layer -> [S, T], in the dtype the target ran in
    eos: int | None  # the stop token's index, where the continuation stopped
    past_eos: torch.Tensor | None  # the target's greedy tokens after it (at most K - 1)
    max_new: int  # the continuation's length as the trajectory judges it (max_new_tokens)


@dataclass
class Plan:
    """What a capture will do, said before it starts: the engine, the sequences and the bytes their states take."""

    python: Path  # the Python that runs vLLM
    served: vllm_scale.Served
    engine: Engine
    ids: tuple[int, ...]
    dtype: str
    prompts: list[Prompt]
    pending: list[int]  # indices of the prompts still to capture
    bytes_needed: int
    free_bytes: int | None = None


def target_tokens(config: TargetConfig) -> tuple[object, set[int]]:
    """The target's tokenizer and stop tokens, read as ``TargetModel.load`` reads them, from the transformers directory
    vLLM will load (a GGUF file's cache entry)."""
    directory = transformers_directory(config)
    tokenizer = load_tokenizer(config, str(directory), {})
    return tokenizer, eos_ids(generation_config(directory), tokenizer)


def served_rope(cfg) -> dict | None:
    """The rope vLLM is told to run the target with (its ``hf_overrides``), where the transformers directory it loads
    (``target_directory``) cannot state the one verify runs: a GGUF file with llama.cpp's rope divisors
    (``target.gguf_rope``), served as the rope (default, linear or llama3) that divides by the same
    (``model.hf_config.rope_from_divisors``). None where the directory states it; refused where no such rope exists."""
    if cfg.rope_freqs is None:
        return None
    rope = rope_from_divisors(cfg.rope_freqs, cfg.rope.theta)
    if rope is None:
        raise UnsupportedError(
            f"`target` {cfg.source}: holds llama.cpp rope_freqs that no default, linear or llama3 rope divides by, so"
            " vLLM cannot be told to run the rope verify runs; for `against` vllm give the model's safetensors"
            " directory"
        )
    return {
        "rope_theta": rope.theta,
        "rope_type": rope.rope_type,
        **{k: v for k, v in (rope.scaling or {}).items() if k != "rope_type"},
    }


def rope_overrides(config: TargetConfig) -> dict | None:
    """vLLM's ``hf_overrides`` for the rope verify runs the target with, where its directory cannot state it."""
    rope = served_rope(config)
    return {"rope_parameters": rope} if rope is not None else None


def check_ids(ids: tuple[int, ...], config: TargetConfig) -> tuple[int, ...]:
    """Layer ids vLLM can capture: inputs of its layers 0..L-1 (the state after the last layer is no layer's input)."""
    bad = [i for i in ids if not 0 <= i < config.num_layers]
    if bad:
        raise UnsupportedError(
            f"aux layer {bad[0]}: vLLM captures the input of a layer, 0..{config.num_layers - 1} for"
            f" {config.name} ({config.num_layers} layers); the target run by eaglekit (not `target_engine`) gives the"
            " others"
        )
    return tuple(sorted(set(ids)))


def bytes_per_sequence(length: int, n: int, hidden: int, dtype: str) -> int:
    """A sequence's file: its states, its token ids and a header (~1 KB, its metadata)."""
    return length * (n * hidden * DTYPES[dtype].itemsize + 8) + 2048


def prepare(
    config: TargetConfig,
    prompts: list[Prompt],
    ids: tuple[int, ...],
    engine: Engine,
    *,
    dtype: str,
    max_new_tokens: int,
    k: int,
    done: set[int] = frozenset(),
) -> Plan:
    """The plan, and everything refused before any engine starts: a layout the release cannot run on this target,
    layers vLLM cannot capture."""
    python, served = envs.served(engine.spec, engine.python)
    vllm_scale.check(served, engine.parallel, config, purpose="capture")
    ids = check_ids(ids, config)
    pending = [i for i in range(len(prompts)) if i not in done]
    length = continuation_length(max_new_tokens, k)
    needed = sum(bytes_per_sequence(len(prompts[i].ids) + length, len(ids), config.hidden_size, dtype) for i in pending)
    return Plan(python, served, engine, ids, dtype, prompts, pending, needed)


def run(
    plan: Plan,
    config: TargetConfig,
    eos: set[int],
    *,
    max_new_tokens: int,
    k: int,
    keep: Callable[[int, CapturedSequence], None],
    progress: Callable[[str, int], object] | None = None,
    staging_parent: Path | None = None,
    hf_overrides: dict | None = None,
) -> dict:
    """Capture ``plan.pending``; each sequence handed to ``keep(index, sequence)`` as soon as vLLM has written it.
    Returns what the engine said (release, workarounds)."""
    if not plan.pending:
        return {}
    job = _job(plan, config, continuation_length(max_new_tokens, k), hf_overrides)
    said: dict = {}
    bar = progress("capturing", len(plan.pending)) if progress else None
    staging = Path(tempfile.mkdtemp(prefix=".eaglekit-staging-", dir=staging_parent))
    try:
        job["staging"] = str(staging)

        def on_event(event: dict) -> None:
            if event["event"] == "started":
                said.update(vllm_version=event["vllm_version"], workarounds=event["workarounds"])
                return
            index = int(event["index"])
            keep(index, _sequence(plan, index, event, eos, max_new_tokens, k))
            for leftover in (Path(event["states"]), Path(event["states"] + ".lock")):
                leftover.unlink(missing_ok=True)
            if bar is not None:
                bar.update(1)

        vllm_capture.run(job, plan.python, on_event)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
        if bar is not None:
            bar.close()
    return said


def _job(plan: Plan, config: TargetConfig, length: int, hf_overrides: dict | None) -> dict:
    """The runner's capture job (``vllm_side/eaglekit_capture.py`` says its keys); its ``staging`` comes last."""
    longest = max(len(plan.prompts[i].ids) for i in plan.pending) + length + 1
    job = {
        "target": str(transformers_directory(config)),
        "dtype": plan.dtype,
        "max_model_len": longest + 8,
        "max_num_seqs": min(len(plan.pending), 16),
        "aux_layer_ids": list(plan.ids),
        "max_tokens": length + 1,  # one more than kept: the last kept token is fed, so its states are written
        "prompts": [[i, plan.prompts[i].ids] for i in plan.pending],
        "parallel": plan.engine.parallel.job_entry(),
        "data_parallel_size": plan.engine.parallel.data,
        "moe": any(key in config.config for key in MOE_KEYS),
        "connector": vllm_capture.connector_for(plan.served, vllm_scale.rules(plan.served)),
    }
    if plan.served.platform == "cpu":  # a CPU engine's cache is sized from what the sequences need (else 4 GiB+)
        job["kv_cache_memory_bytes"] = _cpu_cache_bytes(config, len(plan.ids), longest, job["max_num_seqs"], plan.dtype)
    if hf_overrides:
        job["hf_overrides"] = hf_overrides
    if is_mla(config.config):  # what vLLM's CPU build needs to run an MLA target (engines/vllm_cpu_mla.py)
        job["mla"] = vllm_cpu_mla.job_entry(plan.served.version)
    return job


def _cpu_cache_bytes(config: TargetConfig, n: int, longest: int, seqs: int, dtype: str) -> int:
    """Room for the KV cache and the captured states of ``min(seqs, 4)`` sequences of ``longest`` tokens, and some."""
    c = config.config
    heads = c.get("num_attention_heads") or 1
    kv_heads = c.get("num_key_value_heads") or heads
    head_dim = c.get("head_dim") or config.hidden_size // heads
    per_token = (2 * config.num_layers * kv_heads * head_dim + n * config.hidden_size) * DTYPES[dtype].itemsize
    return int(per_token * longest * min(seqs, 4) * 1.5) + 64 * 2**20


def _sequence(plan: Plan, index: int, event: dict, eos: set[int], max_new_tokens: int, k: int) -> CapturedSequence:
    """One finished prompt: vLLM's tokens cut as verify cuts them, its states of the positions kept."""
    prompt = plan.prompts[index]
    path = Path(event["states"])
    try:
        raw = read_safetensors(path, ("hidden_states", "token_ids"))
    except (CheckpointError, KeyError, OSError) as exc:
        raise UnsupportedError(f"vLLM's capture of prompt {prompt.id} ({path}) cannot be read: {exc}") from None
    generated = torch.tensor(event["generated"][: continuation_length(max_new_tokens, k)], dtype=torch.int64)
    new, after = cut_at_stop(generated, eos, k - 1)
    tokens = torch.cat([torch.tensor(prompt.ids, dtype=torch.int64), new])
    states, fed = raw["hidden_states"], raw["token_ids"].to(torch.int64)
    S = tokens.shape[0]
    if states.dim() != 3 or states.shape[0] < S or fed.shape[0] < S or not torch.equal(fed[:S], tokens):
        raise UnsupportedError(
            f"vLLM's capture of prompt {prompt.id} holds states {list(states.shape)} of {fed.shape[0]} tokens, not of"
            f" the {S} of its sequence"
        )
    return CapturedSequence(
        prompt,
        tokens,
        {layer: states[:S, j].contiguous() for j, layer in enumerate(plan.ids)},
        first_eos(tokens, len(prompt.ids), eos),
        after if after is not None and after.numel() else None,
        max_new_tokens,
    )


# -- eaglekit capture: the folder ------------------------------------------------------------------------------

MANIFEST = "capture.json"
# config keys of a mixture-of-experts target (DeepSeek/Kimi, Mixtral/Qwen-MoE, gpt-oss): its data-parallel ranks are
# vLLM's (vllm_side/eaglekit_capture.py)
MOE_KEYS = ("n_routed_experts", "num_local_experts", "num_experts")


def sequence_file(out: Path, index: int) -> Path:
    return out / f"seq-{index:05d}.safetensors"


def manifest(
    config: TargetConfig, ids: tuple[int, ...], dtype: str, prompts: list[Prompt], *, max_new_tokens: int, k: int
) -> dict:
    """What defines a capture's data: a rerun into the same folder resumes only if it asks for the same."""
    digest = hashlib.sha256(json.dumps([[p.id, p.ids] for p in prompts]).encode()).hexdigest()
    return {
        "format": "eaglekit-capture",
        "target": config.hub_id or Path(config.source).name,  # no machine's path: the folder may be shared
        "target_config_sha256": hashlib.sha256(
            json.dumps(config.config, sort_keys=True, default=str).encode()
        ).hexdigest(),
        "aux_layer_ids": list(ids),
        "dtype": dtype,
        "max_new_tokens": max_new_tokens,
        "num_speculative_tokens": k,
        "prompts": len(prompts),
        "prompts_sha256": digest,
    }


def resumable(out: Path, wanted: dict, *, force: bool) -> set[int]:
    """The prompts OUT already holds, where it holds a capture of the same data; a folder holding anything else is
    refused (``force``: an earlier capture of other settings is replaced)."""
    if not out.exists():
        return set()
    if not out.is_dir():
        raise UsageError(f"{out}: exists and is not a directory")
    path = out / MANIFEST
    if not path.is_file():
        if any(out.iterdir()):
            raise UsageError(f"{out}: holds files that are not a capture of eaglekit's; give an empty or new folder")
        return set()
    try:
        found = json.loads(path.read_text())
    except ValueError:
        found = None
    if found != wanted:
        if not force:
            differ = sorted(k for k in wanted if not isinstance(found, dict) or found.get(k) != wanted[k])
            raise UsageError(
                f"{out}: holds a capture of other settings ({', '.join(differ)} differ); replace it (force) or give"
                " another folder"
            )
        for old in out.glob("seq-*.safetensors"):
            old.unlink()
        return set()
    return {i for i in range(wanted["prompts"]) if sequence_file(out, i).is_file()}


def judging_metadata(seq: CapturedSequence, k: int) -> dict[str, str]:
    """How verify judges the sequence (``stored.write_sequence``'s ``judging``): as it judged its own run."""
    meta = {
        "prompt_id": seq.prompt.id,
        "category": seq.prompt.category,
        "max_new_tokens": str(seq.max_new),
        "num_speculative_tokens": str(k),
    }
    if seq.eos is not None:
        meta["eos_position"] = str(seq.eos)
    if seq.past_eos is not None:
        meta["past_eos"] = ",".join(map(str, seq.past_eos.tolist()))
    return meta


def _folder_plan(
    config: TargetConfig,
    records: list[dict],
    out: Path,
    engine: Engine,
    aux_layers: tuple[int, ...] | None,
    dtype: str,
    max_new_tokens: int,
    k: int,
    *,
    num_prompts: int | None,
    force: bool,
) -> tuple[Plan, dict, set[int]]:
    """The plan of a capture into ``out`` (the prompts it already holds left out, the free space known), the
    manifest it will carry, and the target's stop tokens."""
    from ..model.drafter import default_aux_ids
    from .prompts import encode_prompts

    if dtype not in DTYPES:
        raise UsageError(f"dtype {dtype!r}: one of {', '.join(DTYPES)}")
    ids = check_ids(aux_layers or default_aux_ids(config.num_layers), config)
    tokenizer, eos = target_tokens(config)
    prompts = encode_prompts(records, tokenizer, num_prompts, config.vocab_size)
    wanted = manifest(config, ids, dtype, prompts, max_new_tokens=max_new_tokens, k=k)
    done = resumable(out, wanted, force=force)
    plan = prepare(config, prompts, ids, engine, dtype=dtype, max_new_tokens=max_new_tokens, k=k, done=done)
    plan.free_bytes = shutil.disk_usage(next(p for p in (out, *out.parents) if p.exists())).free
    return plan, wanted, eos


def capture_to_folder(
    config: TargetConfig,
    records: list[dict],
    out: Path,
    engine: Engine,
    *,
    aux_layers: tuple[int, ...] | None,
    dtype: str,
    max_new_tokens: int,
    k: int,
    num_prompts: int | None = None,
    force: bool = False,
    on_plan: Callable[[Plan], None] | None = None,
    progress: Callable[[str, int], object] | None = None,
) -> dict:
    """``eaglekit capture``: each prompt's sequence and states written into ``out`` as vLLM finishes it (one file per
    prompt, ``stored.write_sequence``, each renamed into place complete), beside ``capture.json``, which says what the
    folder holds; a rerun with the same settings captures only the prompts still missing."""
    from ..io.atomic import write_file_atomically
    from .stored import write_sequence

    plan, wanted, eos = _folder_plan(
        config, records, out, engine, aux_layers, dtype, max_new_tokens, k, num_prompts=num_prompts, force=force
    )
    ids, prompts, done = plan.ids, plan.prompts, set(range(len(plan.prompts))) - set(plan.pending)
    if on_plan is not None:
        on_plan(plan)
    if plan.bytes_needed > plan.free_bytes:
        raise UnsupportedError(
            f"{out}: the capture takes up to {plan.bytes_needed:,} bytes and its disk has {plan.free_bytes:,} free"
        )
    out.mkdir(parents=True, exist_ok=True)
    write_file_atomically(out / MANIFEST, json.dumps(wanted, indent=2) + "\n")

    def keep(index: int, seq: CapturedSequence) -> None:
        aux = torch.cat([seq.states[i] for i in ids], dim=-1)
        meta = judging_metadata(seq, k)
        write_file_atomically(
            sequence_file(out, index),
            lambda tmp: write_sequence(tmp, seq.tokens, aux, ids, len(seq.prompt.ids), meta),
        )

    said = run(
        plan,
        config,
        eos,
        max_new_tokens=max_new_tokens,
        k=k,
        keep=keep,
        progress=progress,
        staging_parent=out.parent,
        hf_overrides=rope_overrides(config),
    )
    return {
        "output": str(out),
        "target": config.name,
        "aux_layer_ids": list(ids),
        "dtype": dtype,
        "sequences": len(prompts),
        "captured": len(plan.pending),
        "resumed": len(done),
        "bytes": sum(sequence_file(out, i).stat().st_size for i in range(len(prompts))),
        "engine": engine.spec,
        "vllm_version": said.get("vllm_version"),
        "parallel": engine.parallel.to_dict(),
        "workarounds": said.get("workarounds", []),
    }
