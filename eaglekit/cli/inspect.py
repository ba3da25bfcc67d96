"""``eaglekit inspect PATH``: what a drafter checkpoint is, from its headers alone."""

from __future__ import annotations

import click

from .. import api
from ..findings import Finding
from ..io.sources import origin_note
from ._options import NAMED_PLACE, download_option, from_option, json_option, norm_output_option, revision_option
from ._output import Output, findings_text, human_bytes, table


def _flags(flags: dict) -> str:
    shown = {k: v for k, v in flags.items() if k != "norm_before_lm_head"}
    text = ", ".join(f"{k} {'true' if v else 'false'}" for k, v in shown.items())
    if not flags.get("norm_before_lm_head", True):
        text += "; lm_head reads the un-normalised state (no final norm before it)"
    return text


def _semantics(s: dict) -> str:
    meaning = {
        "eagle31": "EAGLE 3.1's (post-norm feedback)",
        "specforge": "SpecForge 0.2.0's (final norm before lm_head or not; pre-norm feedback)",
    }
    return f"read as {meaning[s['reading']]}" + (
        "" if s["certain"] else ", assumed: the checkpoint cannot tell (--norm-output-semantics)"
    )


def _window(w: dict) -> str:
    layers = w["windowed_layers"]
    if layers:
        text = f"sliding window {w['sliding_window']} on layer{'s' if len(layers) > 1 else ''} {layers}"
        return text + f" (each position sees itself and the {w['sliding_window'] - 1} before it)"
    return f"full attention (sliding_window {w['sliding_window']}, layer_types {w['layer_types']}: no layer windowed)"


def _parallel(p: dict) -> str:
    token = (
        f"mask token {p['mask_token_id']} ({p['mask_token_key']})"
        if p["mask_token_id"] is not None
        else "no mask token stated"
    )
    depth = f", trained for {p['depth']} drafts per pass" if p["depth"] else ""
    return f"P-EAGLE: all K drafts in one pass, K-1 mask rows fed the mask token and mask_hidden; {token}{depth}"


def _other_family(r: dict) -> str:
    f = r["family"]
    return table(
        [
            ("checkpoint", r["source"]),
            ("drafter", f"{f['label']}: {f['what']}"),
            ("evidence", f["evidence"]),
            ("eaglekit", f"not an EAGLE 3 or P-EAGLE drafter: eaglekit does not handle {f['label']} drafters yet"),
        ]
    )


def _attention(r: dict) -> str:
    """The attention row: MLA's ranks, or the GQA family's heads."""
    dims = r["dimensions"]
    if r["attention"] == "mla":
        m = dims["mla"]
        return (
            f"MLA: {dims['num_heads']} heads, q_lora {m['q_lora_rank']}, kv_lora {m['kv_lora_rank']}, "
            f"nope {m['qk_nope_head_dim']}, rope {m['qk_rope_head_dim']}, v {m['v_head_dim']}"
        )
    family = {"llama": "Llama GQA", "qwen3": "Qwen3 GQA (q/k norm)"}[r["attention"]]
    return f"{family}: {dims['num_heads']} heads, {dims['num_kv_heads']} kv heads, head_dim {dims['head_dim']}"


def _aux_text(r: dict) -> str:
    """The aux layers row: the ids as read (and as vLLM counts them), or what an ambiguous checkpoint leaves open."""
    aux = r["aux_layers"]
    if r.get("ambiguity"):
        amb = r["ambiguity"]
        what = "which dialect" if amb["kind"] == "dialect" else "which convention"
        return f"AMBIGUOUS ({what}): eaglekit does not choose; {amb['decide']}"
    if aux["ids"] is None:
        return f"not recorded: engine default applies ({aux['num_aux']} states fused)"
    if aux["convention"] == "input":
        return f"{aux['ids']} input-of-layer (vLLM convention)"
    return f"{aux['ids']} output-of-layer = {aux['input_ids']} input-of-layer (vLLM)"


def _reading_rows(r: dict) -> list[tuple[str, str]]:
    """One row under the aux layers per reading an ambiguous checkpoint allows."""
    return [
        (
            "",
            f"reading {r_['dialect']}"
            + (f" (score {r_['score']})" if r_["score"] is not None else "")
            + ": "
            + (f"{r_['ids']} {r_['convention']}-of-layer = " if r_["convention"] == "output" else "")
            + f"{r_['input_ids']} input-of-layer; {r_['why']}",
        )
        for r_ in (r.get("ambiguity") or {}).get("readings", [])
    ]


def _identity_rows(r: dict) -> list[tuple[str, str]]:
    """What the checkpoint is: its files, its dialect (with the evidence), its EAGLE version, P-EAGLE."""
    det = r["dialect"]
    set_31 = [flag for flag in ("fc_norm", "norm_output") if r["flags"][flag]]
    version = r["eagle_version"] + (f" ({', '.join(set_31)})" if set_31 else "")
    return [
        (
            "checkpoint",
            (
                f"{r['source']} ({r['format']}, {len(r['files'])}"
                f" file{'s' if len(r['files']) != 1 else ''}{', indexed' if r['index'] else ''})"
            ),
        ),
        (
            "dialect",
            ("ambiguous, best " if (r.get("ambiguity") or {}).get("kind") == "dialect" else "")
            + f"{det['dialect']}"
            + (f" (score {det['score']}: {'; '.join(det['evidence'])})" if det["score"] is not None else " (given)"),
        ),
        ("EAGLE", version),
        *([("parallel", _parallel(r["parallel"]))] if r.get("parallel") else []),
    ]


def _shape_rows(r: dict) -> list[tuple[str, str]]:
    """The drafter's shape: attention, dimensions, vocab and its maps, the tensors it ships."""
    dims, vocab = r["dimensions"], r["vocab"]
    maps = [m for m in ("d2t", "t2d") if vocab[m]]
    return [
        ("attention", _attention(r)),
        (
            "dimensions",
            (
                f"hidden {dims['hidden_size']}, target hidden {dims['target_hidden_size']}, layers"
                f" {dims['num_layers']}, intermediate {dims['intermediate_size']}"
            ),
        ),
        (
            "vocab",
            f"{vocab['vocab_size']} target, {vocab['draft_vocab_size']} draft"
            + (f" ({', '.join(maps)})" if maps else ""),
        ),
        (
            "ships",
            (
                f"embed_tokens {'yes' if vocab['embed_tokens'] else 'no'}, lm_head"
                f" {vocab['lm_head'] if vocab['lm_head'] == 'factorised' else ('yes' if vocab['lm_head'] else 'no')}"
            ),
        ),
    ]


def _how_read_rows(r: dict) -> list[tuple[str, str]]:
    """How the drafter is read: aux layers (and the readings), flags, norm_output, window, rope, verifier."""
    rope = f"theta {r['rope']['theta']:g}" + (
        f", {r['rope']['scaling']['rope_type']} scaling" if r["rope"]["scaling"] else ""
    )
    return [
        ("aux layers", _aux_text(r)),
        *_reading_rows(r),
        ("flags", _flags(r["flags"])),
        *([("norm_output", _semantics(r["norm_output_semantics"]))] if r.get("norm_output_semantics") else []),
        *([("window", _window(r["window"]))] if r.get("window") else []),
        ("rope", rope),
        ("verifier", r["verifier"] or "not recorded"),
    ]


def _contents_rows(r: dict) -> list[tuple[str, str]]:
    """What the files hold: tensors and dtypes, provenance and its notes, tensors no dialect names."""
    rows = [
        (
            "tensors",
            f"{r['num_tensors']} ({r['num_parameters']:,} parameters, {human_bytes(r['total_bytes'])}); "
            + ", ".join(f"{k} x{v}" for k, v in r["dtypes"].items()),
        ),
    ]
    if r["provenance"]["framework"] or r["provenance"]["eaglekit_version"]:
        p = r["provenance"]
        by_eaglekit = p["eaglekit_version"] and f"eaglekit {p['eaglekit_version']}" + (
            f" (converted from {p['converted_from']})" if p["converted_from"] else ""
        )
        written = [x for x in (p["framework"], by_eaglekit) if x]
        rows.append(("provenance", ", ".join(written)))
    for note in r["provenance"]["notes"]:
        rows.append(("", note))
    if r["unknown_tensors"]:
        rows.append(
            ("unknown", ", ".join(r["unknown_tensors"][:8]) + (" ..." if len(r["unknown_tensors"]) > 8 else ""))
        )
    return rows


def render(r: dict) -> str:
    """The inspect report as a table: what the checkpoint is, its shape, how it is read, what its files hold; then
    the findings."""
    if r.get("family"):
        return _other_family(r)
    text = table([*_identity_rows(r), *_shape_rows(r), *_how_read_rows(r), *_contents_rows(r)])
    notes = [Finding(**n) for n in r["findings"]]
    if notes:
        text += "\n" + findings_text(notes)
    return text


@click.command("inspect")
@click.argument("path", type=NAMED_PLACE)
@from_option
@norm_output_option
@revision_option
@download_option
@json_option
def inspect_command(
    path: str, source_dialect: str, norm_output_semantics: str, revision: str | None, download: bool, json_mode: bool
) -> None:
    """Show what the drafter checkpoint PATH is: dialect (with evidence), EAGLE version, dimensions, aux layers,
    flags, vocab maps, dtypes and shards. Reads headers only: PATH may be a Hub id (org/name[@REV]), whose
    config and safetensors headers are read by HTTP range requests, never its weights.

    \b
    Example:
      eaglekit inspect ./my-drafter
      eaglekit inspect RedHatAI/Llama-3.1-8B-Instruct-speculator.eagle3 --json
    """
    out = Output(json_mode)
    data = api.inspect(
        path,
        source_dialect=source_dialect,
        norm_output_semantics=norm_output_semantics,
        revision=revision,
        download=download,
    ).data
    note = origin_note(data.get("origin"))
    if note:
        out.note(note)
    out.emit(data, render)
