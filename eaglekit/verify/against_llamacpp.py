"""``verify --against llama.cpp==bN``: llama-server itself, with the target's GGUF and the drafter's, on verify's
prompts.

llama-server (the build's engine environment: ``eaglekit engines install llama.cpp==bN``) serves each prompt greedily
with K draft tokens per step (``engines/llamacpp_server.py``); its per-request counters (``draft_n``,
``draft_n_accepted``) and its per-step log (the tokens each step drafted, how many were accepted) are compared with
eaglekit's simulation, counted as llama.cpp counts (a step drafts at most max_new_tokens - produced - 1 tokens:
``reference.simulate.steps(capped=True)``).

llama.cpp runs the target's quantised weights in its own kernels (a Q4_1 matrix product quantises the activations
too); eaglekit's reference runs the same weights dequantised to float32. So two things can differ, and both are
measured per prompt:

- the target's tokens: where llama.cpp's greedy output leaves verify's (``diverges_at``), the two runs continue on
  different sequences and their counters count different steps. Counters are also simulated on llama.cpp's own
  sequence (eaglekit's target and drafter on the tokens llama.cpp produced), where every step is the same step;
- the target's hidden states, which the drafter fuses: on the same sequence a draft can still differ where the
  drafter's choice is close. Each step whose drafts differ is listed with llama.cpp's probability for its draft and
  the margin of eaglekit's choice (its logit minus that of llama.cpp's draft), and the positions where the quantised
  target's token differs from what eaglekit's target picks after the same prefix (``flips``).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import torch

from ..engines import envs, llamacpp_env
from ..engines.llamacpp_server import LlamaServer, ServerFailed, parse_steps
from ..reference.model import ReferenceDrafter
from ..reference.simulate import Counters, accepted_lengths, draft_chains, steps
from .checks import Check
from .run import SequenceResult, Verifier, chain_starts, first_eos, resolved_ids


def _drafter_gguf(path: str, loaded, verifier: Verifier, tmp: Path) -> tuple[Path, str | None]:
    """The drafter as a GGUF file: itself, or eaglekit's conversion of it (said in the note returned)."""
    if loaded.dialect == "gguf":
        return Path(path), None
    from ..convert import ConvertOptions, convert

    out = tmp / "drafter.gguf"
    options = ConvertOptions(
        to="gguf",
        source_dialect=loaded.dialect,
        norm_output_semantics=verifier.options.norm_output_semantics,
        target=verifier.options.target,
        output_name=out.name,
    )
    convert(path, out, options).loaded.close()
    return out, f"the {loaded.dialect} drafter served as eaglekit's GGUF conversion of it (convert `to` gguf)"


def serve(verifier: Verifier, drafter: Path, tmp: Path) -> tuple[list[dict], list[str]]:
    """llama-server on every prompt: its answers and, per request, its log."""
    options = verifier.options
    cfg = verifier.target_config
    binary = llamacpp_env.binary_path(envs.env_dir(options.against))
    longest = max(len(prompt.ids) for prompt, _ in verifier.sequences)
    context = -(-(longest + options.max_new_tokens + options.k + 16) // 256) * 256
    server = LlamaServer(binary, cfg.directory / cfg.gguf_file, drafter, options.k, context, tmp / "server.log")
    answers = []
    with server:
        for prompt, _ in verifier.sequences:
            answers.append(server.complete(prompt.ids, options.max_new_tokens))
    return answers, server.request_logs()


def against_llamacpp(
    path: str, verifier: Verifier, loaded, model: ReferenceDrafter, results: list[SequenceResult]
) -> tuple[dict, list[Check]]:
    with tempfile.TemporaryDirectory(prefix="eaglekit-llamacpp-") as tmp:
        drafter, note = _drafter_gguf(path, loaded, verifier, Path(tmp))
        try:
            answers, logs = serve(verifier, drafter, Path(tmp))
        except ServerFailed as exc:
            data = {"build": verifier.options.against, "status": f"llama-server {exc.kind}: {exc.line}", "note": note}
            return data, [Check("llamacpp_load" if exc.kind == "refused" else "llamacpp_run", False, data["status"])]
    return compare(verifier, model, results, answers, logs, note)


def own_sequence(verifier: Verifier, model: ReferenceDrafter, prompt, generated: list[int], ids: tuple[int, ...]):
    """eaglekit's target and drafter on llama.cpp's sequence: (its tokens, chains, accepted lengths, eos index, the
    positions where eaglekit's target picks another token after the same prefix)."""
    tokens = torch.tensor(prompt.ids + generated, dtype=torch.long)
    aux, target_next = verifier.target.aux_states(tokens, ids)
    P = len(prompt.ids)
    starts = chain_starts(P, tokens.shape[0])
    chains = draft_chains(model, tokens, aux, starts, verifier.options.k)
    accepted = accepted_lengths(chains, tokens).cpu()
    flips = [t for t in range(P, tokens.shape[0]) if int(target_next[t - 1]) != int(tokens[t])]
    return tokens, chains, accepted, first_eos(tokens, P, verifier.target.eos_token_ids()), flips


def _counted(step_list, k: int) -> Counters:
    counters = Counters()
    for accepted, drafted, _ in step_list:
        if drafted:
            counters.add(accepted, k, drafted)
    return counters


def _step_differences(logged, prompt_len: int, chains, accepted, model: ReferenceDrafter) -> list[dict]:
    """Walking llama.cpp's own steps (each starts where the one before left off), those where it drafted or accepted
    otherwise than eaglekit's drafter does from the same position of the same sequence, with eaglekit's logit margin
    of its draft over llama.cpp's at the first draft that differs."""
    out = []
    row_of = {int(j): r for r, j in enumerate(chains.starts.tolist())}
    j = prompt_len - 1
    for index, theirs in enumerate(logged):
        row = row_of.get(j)
        if row is None:
            break
        drafted = len(theirs.drafts)
        ours, ours_accepted = chains.drafts[row, :drafted].tolist(), min(int(accepted[row]), drafted)
        if theirs.drafts != ours or theirs.accepted != ours_accepted:
            at = next((i for i, (a, b) in enumerate(zip(theirs.drafts, ours)) if a != b), None)
            margin = None
            if at is not None:  # eaglekit's logit for its own draft minus its logit for llama.cpp's
                logits = model.draft_logits(chains.y[row, at][None]).float()[0]
                mine, other = _logit(model, logits, ours[at]), _logit(model, logits, theirs.drafts[at])
                margin = mine - other if mine is not None and other is not None else None
            out.append(
                {
                    "step": index,
                    "position": j,
                    "llamacpp": {"drafts": theirs.drafts, "accepted": theirs.accepted, "p": theirs.probabilities},
                    "eaglekit": {"drafts": ours, "accepted": ours_accepted},
                    "first_different_draft": at,
                    "margin": margin,
                }
            )
        j += theirs.accepted + 1
    return out


def _logit(model: ReferenceDrafter, logits: torch.Tensor, token: int) -> float | None:
    """The logit of target token ``token`` (None where the draft vocabulary has no row for it)."""
    rows = (model.draft_to_target == token).nonzero()
    return float(logits[int(rows[0])]) if rows.numel() else None


def _prompt(verifier, model, result: SequenceResult, answer: dict, log: str, ids, eos_verify: int | None) -> dict:
    """One prompt: llama.cpp's counters and steps beside the simulation on verify's sequence and on llama.cpp's own."""
    options = verifier.options
    prompt, k = result.prompt, options.k
    P = len(prompt.ids)
    generated = [int(t) for t in answer.get("tokens", [])]
    timings = answer.get("timings", {})
    served = {
        "num_draft_tokens": int(timings.get("draft_n", 0)),
        "num_accepted_tokens": int(timings.get("draft_n_accepted", 0)),
    }
    logged = parse_steps(log)
    ours = result.tokens[P:].tolist()
    diverges = next((i for i, (a, b) in enumerate(zip(generated, ours)) if a != b), None)
    on_verify = _counted(
        steps(result.accepted, result.chains.starts.cpu(), k, P, options.max_new_tokens, eos_verify, capped=True), k
    )
    tokens, chains, accepted, eos, flips = own_sequence(verifier, model, prompt, generated, ids)
    simulated = steps(accepted, chains.starts.cpu(), k, P, options.max_new_tokens, eos, capped=True)
    on_own = _counted(simulated, k)
    differences = _step_differences(logged, P, chains, accepted, model)
    return {
        "id": prompt.id,
        "llamacpp": served,
        "logged_steps": len(logged),
        "logged_accepted": sum(s.accepted for s in logged),
        "simulated_on_verify_sequence": on_verify.to_dict(),
        "simulated_on_llamacpp_sequence": on_own.to_dict(),
        "generated_tokens": len(generated),
        "tokens": generated,
        "diverges_at": diverges,
        "flips": [t - P for t in flips],
        "step_differences": differences,
    }


def _sum(entries: list[dict]) -> dict:
    drafted = sum(e["num_draft_tokens"] for e in entries)
    accepted = sum(e["num_accepted_tokens"] for e in entries)
    return {"num_draft_tokens": drafted, "num_accepted_tokens": accepted}


def _same(served: dict, simulated: dict) -> bool:
    return (served["num_draft_tokens"], served["num_accepted_tokens"]) == (
        simulated["num_draft_tokens"],
        simulated["num_accepted_tokens"],
    )


# A draft that differs between llama.cpp and eaglekit's drafter on the same sequence is a near tie when eaglekit's logit
# for its own choice exceeds its logit for llama.cpp's by at most this much. On the SmolLM2 pair (Q4_1 target) every
# differing draft had a margin of 0.04 to 0.17: the drafter fuses the target's hidden states, which llama.cpp computes
# with 8-bit activations in each Q4_1 product and a float16 KV cache; emulating the 8-bit activations alone in
# eaglekit's target turned one of them into llama.cpp's choice (docs/llama-cpp.md)
NEAR_TIE_LOGITS = 0.5


def compare(verifier: Verifier, model, results, answers, logs, note) -> tuple[dict, list[Check]]:
    ids = resolved_ids(model.d, verifier.target_config.num_layers)
    prompts = [
        _prompt(verifier, model, r, answer, log, ids, verifier.eos[i])
        for i, (r, answer, log) in enumerate(zip(results, answers, logs))
    ]
    served = _sum([p["llamacpp"] for p in prompts])
    own = _sum([p["simulated_on_llamacpp_sequence"] for p in prompts])
    on_verify = _sum([p["simulated_on_verify_sequence"] for p in prompts])
    logged_ok = all(p["logged_accepted"] == p["llamacpp"]["num_accepted_tokens"] for p in prompts)
    equal_own = [p["id"] for p in prompts if _same(p["llamacpp"], p["simulated_on_llamacpp_sequence"])]
    diverged = [p["diverges_at"] for p in prompts if p["diverges_at"] is not None]
    steps_total = sum(p["logged_steps"] for p in prompts)
    differing = [d for p in prompts for d in p["step_differences"]]
    far = [d for d in differing if d["margin"] is None or abs(d["margin"]) > NEAR_TIE_LOGITS]
    data = {
        "build": verifier.options.against,
        "note": note,
        "llamacpp": served,
        "simulated_on_llamacpp_sequence": own,
        "simulated_on_verify_sequence": on_verify,
        "steps": steps_total,
        "steps_differing": len(differing),
        "near_tie_logits": NEAR_TIE_LOGITS,
        "prompts": prompts,
    }
    largest = max((abs(d["margin"]) for d in differing if d["margin"] is not None), default=0.0)
    detail = (
        f"llama.cpp accepted {served['num_accepted_tokens']} of {served['num_draft_tokens']} drafts; on its own"
        f" tokens eaglekit's drafter drafts the same at {steps_total - len(differing)} of {steps_total} steps"
        + (
            f", the other {len(differing)} near ties (margins up to {largest:.3g} logits)"
            if differing and not far
            else ""
        )
        + (f", {len(far)} steps differ by more than {NEAR_TIE_LOGITS} logits" if far else "")
        + f"; counters simulated on its tokens {own['num_accepted_tokens']} of {own['num_draft_tokens']} (equal on"
        f" {len(equal_own)} of {len(prompts)} prompts), on verify's {on_verify['num_accepted_tokens']} of"
        f" {on_verify['num_draft_tokens']}: llama.cpp's quantised target leaves verify's tokens in"
        f" {len(diverged)} of {len(prompts)} prompts"
        + ("" if logged_ok else "; its log does not add up to its counters")
    )
    return data, [Check("llamacpp_acceptance", logged_ok and not far, detail)]
