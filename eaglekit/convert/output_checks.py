"""What convert checks of its output and what writing repairs: validate's checks held to the output as planned (its
schema, its tensors, the source's vocab maps standing in for the output's), and the notes for the source's own faults
that the written config no longer has."""

from __future__ import annotations

from .. import dialects
from ..dialects.base import lookup
from ..findings import Finding
from ..model.config_view import shown
from ..model.drafter import Drafter
from ..model.vocab_map import t2d_from_d2t
from ..validate.checks import CheckInput, run_checks


def check_planned(loaded, d: Drafter, config: dict, out_present: dict, out_names: dict, writer, target) -> list:
    """validate's checks of the output as planned: its config against its dialect's schema, its tensors (the source's
    vocab maps standing in for the output's) against its config."""
    from .. import schemas  # jsonschema: the output's config.json is held to its dialect's schema, as validate holds it

    findings = schemas.check_config(config, writer.schema, mla=d.attention == "mla", label="the output's config.json")
    return findings + run_checks(
        CheckInput(
            d,
            out_present,
            values=lambda c: _values_for_checks(loaded, c),
            target=target,
            config=config,
            stored_name=lambda c: out_names.get(c, c),
        )
    )  # the output's names


def repaired(notes: list[Finding], found: list[Finding], loaded, writer, d: Drafter) -> list[Finding]:
    """``notes`` and what writing repairs of the source's own faults (the class its tensors fit, the weights' dtype,
    tie_word_embeddings false, the q_lora_rank its tensors give)."""
    notes = list(notes)
    if any(n.check == "config.architecture_mismatch" for n in notes):
        from ..model.architectures import written_as

        notes.append(
            Finding(
                "architecture.repaired",
                "info",
                "the source's architecture label did not fit its tensors: wrote "
                f"{written_as(writer.name, d.attention)} (model_type {d.attention}), the class the tensors fit",
                "architectures",
            )
        )

    for stated in (
        f for f in found if f.check == "config.dtype" and f.severity != "info"
    ):  # (d.dtype: the weights', or --dtype's)
        why = "which no reader can load" if stated.severity == "error" else "not a floating-point dtype"
        notes.append(
            Finding(
                "config.dtype_repaired",
                "info",
                f"the source's config.json had {stated.subject}"
                f" {shown(lookup(loaded.checkpoint.config, stated.subject))}, {why}: wrote torch_dtype {d.dtype}, the"
                " weights' dtype",
                stated.subject,
            )
        )
    notes += [
        Finding(
            "config.tied_head_repaired",
            "info",
            f"the source's {f.subject} was true beside a shipped lm_head.weight: wrote tie_word_embeddings false, so"
            " that every loader runs the shipped head (as vLLM did)",
            f.subject,
        )
        for f in found
        if f.check == "config.tied_head"
    ]
    if any(n.check == "mla.q_lora_rank" for n in notes):  # the source's error, repaired by writing the key
        notes = [n for n in notes if n.check != "mla.q_lora_rank"]
        notes.append(
            Finding(
                "mla.q_lora_rank_repaired",
                "info",
                f"the source's config.json had no q_lora_rank: wrote {d.mla.q_lora_rank}, "
                "the row count of its q_a_proj.weight",
                "q_lora_rank",
            )
        )
    return notes


def _values_for_checks(loaded: dialects.LoadedDrafter, canonical: str):
    if canonical == "t2d" and "t2d" not in loaded.names:
        return t2d_from_d2t(loaded.read_values("d2t"), loaded.drafter.vocab_size)
    return loaded.read_values(canonical)
