"""When the files cannot tell two readings of a drafter apart, measure them: the weights were trained with the reading
under which the target accepts more of its drafts.

Two kinds of doubt are measured: which aux layer ids (an ambiguous dialect or id convention,
``LoadedDrafter.ambiguity``) and what ``norm_output`` means (EAGLE 3.1's post-norm feedback or SpecForge's final norm
before lm_head, when the checkpoint does not say). Each reading is simulated on the same sequences as the drafter
itself.
"""

from __future__ import annotations

from dataclasses import replace

from .. import dialects
from ..errors import UsageError
from ..model.drafter import INPUT, AuxLayers, Drafter
from .options import VerifyOptions
from .run import SequenceResult, Verifier, layers_of, resolved_ids, totals

# A reading is named the one training used only when its every-position acceptance length beats the runner-up's by
# this fraction: a real misreading costs far more (the example pair loses ~25% with norm_output flipped; an aux id
# off by one layer, more), while prompt noise between two near-equal readings stays well under it.
DECISIVE_MARGIN = 0.05


def alternatives(loaded: dialects.LoadedDrafter, d: Drafter, L: int) -> list[tuple[str, Drafter]]:
    """The readings to measure, each a labelled drafter; empty when the checkpoint is unambiguous."""
    return aux_readings(loaded, d, L) + norm_output_readings(d)


def settled(loaded: dialects.LoadedDrafter, d: Drafter, L: int) -> set[str]:
    """The warnings whose doubt ``measure`` answers: verify says the measured readings in their place (a warning that
    tells the user to measure with verify, printed by verify after measuring, contradicted the run it was in)."""
    out = set()
    if len(aux_readings(loaded, d, L)) > 1:
        out.add("aux.unsettled_convention")
    if norm_output_readings(d):
        out |= {"flags.norm_output_semantics", "engine.norm_output_reading"}
    return out


def aux_readings(loaded: dialects.LoadedDrafter, d: Drafter, L: int) -> list[tuple[str, Drafter]]:
    """One labelled drafter per aux-id reading of an ambiguous checkpoint, or of ids whose convention the target's depth
    did not settle (input-of-layer ids that fit the target)."""
    out: list[tuple[str, Drafter]] = []
    if loaded.doubt is not None:
        for reading in loaded.doubt.readings:
            ids = reading.input_ids
            if ids is not None and all(0 <= i <= L for i in ids):
                out.append((f"{reading.dialect} ids {list(ids)} (input-of-layer)", d.with_(aux=AuxLayers(ids, INPUT))))
    return out


def norm_output_readings(d: Drafter) -> list[tuple[str, Drafter]]:
    out: list[tuple[str, Drafter]] = []
    if d.norm_output_semantics is not None and not d.norm_output_certain:
        raw = d.flags.norm_output if d.norm_output_semantics == "eagle31" else d.flags.norm_before_lm_head
        out.append(
            (
                "norm_output read as EAGLE 3.1's",
                d.with_(
                    flags=replace(d.flags, norm_output=raw, norm_before_lm_head=True), norm_output_semantics="eagle31"
                ),
            )
        )
        out.append(
            (
                "norm_output read as SpecForge's",
                d.with_(
                    flags=replace(d.flags, norm_output=False, norm_before_lm_head=raw),
                    norm_output_semantics="specforge",
                ),
            )
        )
    return out


def measure(
    verifier: Verifier,
    loaded: dialects.LoadedDrafter,
    candidates: list[tuple[str, Drafter]],
    done: tuple[Drafter, list[SequenceResult]] | None = None,
) -> dict:
    """Each reading's acceptance on the verifier's sequences, and the one training used where the margin is decisive.
    ``done``: a drafter already simulated on these sequences, with its results; the reading that is that very drafter
    (the one the checkpoint is read as: the same target layers, however its ids are written, and all else equal) takes
    them instead of being simulated again."""
    L = verifier.target_config.num_layers
    measured = []
    for label, drafter in candidates:
        if (
            done is not None
            and resolved_ids(drafter, L) == resolved_ids(done[0], L)
            and drafter.with_(aux=done[0].aux) == done[0]
        ):
            results = done[1]
        else:
            results, _ = verifier.run(verifier.model_for(loaded, drafter=drafter), resolved_ids(drafter, L), label)
        trajectory, every = totals(results)
        measured.append(
            {
                "reading": label,
                "acceptance_length": round(trajectory.acceptance_length, 6),
                "every_position_acceptance_length": round(every.acceptance_length, 6),
            }
        )
    ranked = sorted(measured, key=lambda m: -m["every_position_acceptance_length"])
    best, runner_up = ranked[0], ranked[1] if len(ranked) > 1 else None
    decisive = runner_up is None or best["every_position_acceptance_length"] > runner_up[
        "every_position_acceptance_length"
    ] * (1 + DECISIVE_MARGIN)
    return {
        "measured": measured,
        "trained_with": best["reading"] if decisive else None,
        "rule": (
            f"the reading whose every-position acceptance length beats every other by more than {DECISIVE_MARGIN:.0%}"
        ),
    }


def resolve(path: str, options: VerifyOptions) -> dict | None:
    """``convert --resolve``: the aux-id reading an ambiguous checkpoint was trained with, measured on
    ``options.target`` as ``verify`` measures it (``measure``). None when the checkpoint is not ambiguous; a UsageError
    when no reading wins by the margin. The result says what was measured: each reading's acceptance, the rule, the
    winning input-of-layer ids.
    """
    verifier = Verifier(options)
    L = verifier.target_config.num_layers
    loaded = dialects.load(
        path, options.source_dialect, norm_output_semantics=options.norm_output_semantics, target_num_layers=L
    )
    with loaded:
        if loaded.doubt is None:
            return None
        d = loaded.drafter.with_(target_num_layers=L)
        loaded.drafter = d
        candidates = aux_readings(loaded, d, L)
        if len(candidates) < 2:
            raise UsageError(
                f"{path}: `resolve`: fewer than two readings fit the target's {L} layers; pass `source_dialect` or"
                " `aux_layers`"
            )
        verifier.prepare(
            capture=layers_of((c for _, c in candidates), L)
        )  # every reading's layers, kept while decoding
        result = measure(verifier, loaded, candidates)
    table = "; ".join(
        f"{m['reading']}: every-position acceptance length {m['every_position_acceptance_length']:.3f}"
        for m in result["measured"]
    )
    where = f"on {verifier.target_config.name}, {len(verifier.sequences)} prompts x {options.max_new_tokens} tokens"
    if result["trained_with"] is None:
        raise UsageError(
            f"{path}: `resolve` measured {table} ({where}): no reading wins by the margin ({result['rule']}); "
            "refusing to convert; pass `source_dialect` DIALECT or `aux_layers`"
        )
    ids = dict(candidates)[result["trained_with"]].aux.as_input()
    return {
        **result,
        "aux_layers": list(ids),
        "target": verifier.target_config.name,
        "prompts": len(verifier.sequences),
        "max_new_tokens": options.max_new_tokens,
        "summary": f"measured {table} ({where}): trained with {result['trained_with']}",
    }
