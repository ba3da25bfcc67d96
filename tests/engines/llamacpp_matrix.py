"""The conformance matrix on llama.cpp: the cases of tests/engines/matrix.py as llama.cpp gets them, served by
llama-server of one build, and what ``validate --engine llama.cpp==bN`` predicts for each.

llama.cpp serves GGUF files only, so each case comes to it as a user would bring it:

- ``converted``: the case's Hugging Face layout through the same build's converter (``convert_hf_to_gguf.py
  --target-model-dir``, run from the engine environment as an oracle), which may refuse it;
- ``eaglekit``: eaglekit's ``convert --to gguf`` of it, where eaglekit writes one (its refusals are tested in
  tests/test_gguf_drafter.py);
- ``gguf`` cases (``GGUF_CASES``): eaglekit's GGUF of the plain case edited into what no converter writes but a file
  can hold (fc_norm tensors, no target_layers, four of them, an id past the target, a second layer, a missing norm).

The target is the matrix's tiny Llama (8 layers, width 64, vocabulary 96) with a SentencePiece tokenizer, converted to
an F32 GGUF by the same converter: llama.cpp's float32 kernels and transformers' agree on it, so the tokens each draft
step chose can be replayed exactly. Per case llama-server refuses to load, aborts, or serves; served, its log gives
every step's drafted tokens and accepted count (``engines/llamacpp_server.parse_steps``), and the prediction's
drafter (the engine view's flags, capture layers, embedding and head) is simulated along llama.cpp's own sequence
(``reference.simulate.steps``, capped as llama.cpp drafts): every drafted token and every accepted count must be the
same. Where they are not, the readings one step away (the default capture layers, each flag flipped, the post-norm
state fed forward) are tried and the ones that reproduce llama.cpp are said.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from dataclasses import dataclass, replace
from pathlib import Path

import torch

import matrix
import tiny_pair
from drafters import write_specforge

K = 3
MAX_NEW_TOKENS = 10
L = matrix.TARGET_LAYERS
PROMPTS = tiny_pair.prompts(2, 40, 3)  # the tokenizer's 40 pieces; the other 56 ids are padding tokens
SPEC = os.environ.get("EAGLEKIT_LLAMACPP", "llama.cpp==b11434")
OBSERVATIONS = Path(__file__).resolve().parents[2] / "eaglekit" / "engines" / "llamacpp_observations.json"
UNOBSERVED_CHECKS = {"engine.norm_output_reading", "engine.untested_release", "engine.lm_head_unnormed"}


def environment() -> Path | None:
    """The installed engine environment of ``EAGLEKIT_LLAMACPP`` (default llama.cpp==b11434), or None."""
    from eaglekit.engines import envs

    try:
        envs.python_for(SPEC)
    except Exception:
        return None
    return envs.env_dir(SPEC)


def write_tokenizer(directory: Path) -> None:
    """A SentencePiece character model (40 pieces) as tokenizer.model: what llama.cpp's converter reads a target's
    vocabulary from (it pads it to the config's vocab_size with unused tokens)."""
    import sentencepiece as spm

    model = io.BytesIO()
    text = ["the quick brown fox jumps over the lazy dog 0123456789"] * 50
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(text),
        model_writer=model,
        vocab_size=60,
        model_type="char",
        hard_vocab_limit=False,
        unk_id=0,
        bos_id=1,
        eos_id=2,
        pad_id=-1,
        minloglevel=2,
    )
    (directory / "tokenizer.model").write_bytes(model.getvalue())


def run_converter(env: Path, source: Path, out: Path, target: Path | None = None, outtype: str = "f32") -> str | None:
    """llama.cpp's converter on ``source``: None when it wrote ``out``, else its last error line."""
    from eaglekit.engines.llamacpp_env import converter

    script, _ = converter(env)
    command = [sys.executable, str(script), str(source), "--outfile", str(out), "--outtype", outtype]
    if target is not None:
        command += ["--target-model-dir", str(target)]
    done = subprocess.run(command, capture_output=True, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    if done.returncode == 0 and out.exists():
        return None
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    telling = [line for line in lines if "Error" in line or "error" in line]
    return (telling or lines or [f"exit {done.returncode}"])[-1].strip()[:300]


def write_target(root: Path, env: Path) -> tuple[Path, Path]:
    directory = matrix.write_target(root / "target")
    write_tokenizer(directory)
    gguf_path = root / "target.gguf"
    failed = run_converter(env, directory, gguf_path)
    assert failed is None, f"llama.cpp's converter could not convert the tiny target: {failed}"
    return directory, gguf_path


# -- the drafters each case is served as -----------------------------------------------------------------------------

# llama.cpp's own cases in a Hugging Face layout, beside tests/engines/matrix.py's: SpecForge ids that are not the
# default (the matrix's "specforge" case has output-of-layer [1, 3, 4] = input [2, 4, 5], the default for 8 layers, so
# a converter that ignores them writes the same layers there)
EXTRA_CASES = {
    "specforge, ids not the default": matrix.Case(
        lambda d: write_specforge(d, matrix.base_dims(), ids=[0, 3, 5]),
        "SpecForge layout, output-of-layer ids [0, 3, 5] (= input-of-layer [1, 4, 6]) only in eagle_config",
    )
}
HF_CASES = [*matrix.selected(), *EXTRA_CASES]


def build_case(name: str, directory: Path) -> Path:
    return EXTRA_CASES[name].write(directory) if name in EXTRA_CASES else matrix.build(name, directory)


def eaglekit_gguf(source: Path, target_gguf: Path, out: Path) -> str | None:
    """eaglekit's conversion of ``source`` (None when written, else its refusal)."""
    from eaglekit.convert import ConvertOptions, convert
    from eaglekit.errors import EaglekitError

    try:
        convert(source, out, ConvertOptions(to="gguf", target=str(target_gguf), output_name=out.name)).loaded.close()
    except EaglekitError as exc:
        return str(exc)
    return None


def edit_gguf(src: Path, out: Path, *, values=None, drop=(), add=None, ids=None) -> Path:
    """``src`` rewritten with key/values changed (``values``: key -> (type, value); ``drop``: keys or tensors),
    tensors added (``add``: name -> float32 tensor), or target_layers replaced (``ids``)."""
    from eaglekit.io.checkpoints import open_checkpoint
    from eaglekit.io.gguf_tensors import GGML_TYPE_OF
    from eaglekit.io.gguf_writer import GGUFTensor, copied_entries, encode_value, write_gguf

    values = dict(values or {})
    if ids is not None:
        values["eagle3.target_layers"] = ("int32[]", list(ids))
    entries = [(k, v) for k, v in copied_entries(src, lambda k: k not in drop) if k not in values]
    entries += [(k, encode_value(kind, value)) for k, (kind, value) in values.items()]
    tensors = []
    with open_checkpoint(src) as ckpt:
        for name, info in ckpt.tensors.items():
            if name in drop:
                continue
            raw = bytes(ckpt._raw(name))
            tensors.append(GGUFTensor(name, ckpt.ggml_types[name], info.shape, len(raw), lambda raw=raw: raw))
    for name, tensor in (add or {}).items():
        raw = tensor.float().contiguous().numpy().tobytes()
        tensors.append(GGUFTensor(name, GGML_TYPE_OF["float32"], tuple(tensor.shape), len(raw), lambda raw=raw: raw))
    return write_gguf(out, entries, tensors)


def _second_layer(src: Path) -> dict:
    """Layer 1's tensors, copies of layer 0's (its q/k/v read the 2H-wide input: llama.cpp's graph asserts first)."""
    from eaglekit.io.checkpoints import open_checkpoint

    with open_checkpoint(src) as ckpt:
        return {n.replace("blk.0.", "blk.1."): ckpt.read(n).float() for n in ckpt.tensors if n.startswith("blk.0.")}


GGUF_CASES = {
    "gguf fc_norm tensors": ("EAGLE 3.1's fc_norm.{0,1,2} tensors in an eagle3 file", "add_fc_norm"),
    "gguf no target_layers": ("eagle3.target_layers absent", "drop_ids"),
    "gguf 4 target_layers": ("four target_layers (fc still fuses three)", "four_ids"),
    "gguf id past the target": ("target_layers [2, 4, 9] for an 8-layer target", "past_ids"),
    "gguf two layers": ("block_count 2, layer 1 a copy of layer 0", "two_layers"),
    "gguf hidden_norm missing": ("blk.0.attn_norm_2.weight absent", "drop_hidden_norm"),
}


def build_gguf_case(name: str, plain: Path, out: Path) -> Path:
    edit = GGUF_CASES[name][1]
    if edit == "add_fc_norm":
        return edit_gguf(plain, out, add={f"fc_norm.{i}.weight": torch.ones(64) for i in range(3)})
    if edit == "drop_ids":
        return edit_gguf(plain, out, drop=("eagle3.target_layers",))
    if edit == "four_ids":
        return edit_gguf(plain, out, ids=[1, 3, 5, 7])
    if edit == "past_ids":
        return edit_gguf(plain, out, ids=[2, 4, 9])
    if edit == "two_layers":
        return edit_gguf(plain, out, values={"eagle3.block_count": ("uint32", 2)}, add=_second_layer(plain))
    return edit_gguf(plain, out, drop=("blk.0.attn_norm_2.weight",))


# -- what llama.cpp did ----------------------------------------------------------------------------------------------


def serve(env: Path, target_gguf: Path, drafter: Path, log: Path) -> dict:
    """llama-server on the matrix's prompts: refused, crashed, or served (tokens, counters and logged steps)."""
    from eaglekit.engines.llamacpp_env import binary_path
    from eaglekit.engines.llamacpp_server import LlamaServer, ServerFailed, parse_steps

    server = LlamaServer(binary_path(env), target_gguf, drafter, K, 256, log)
    answers = []
    try:
        with server:
            for prompt in PROMPTS:
                answers.append(server.complete(prompt, MAX_NEW_TOKENS, ignore_eos=True))
    except ServerFailed as exc:
        return {
            "loads": exc.kind != "refused",
            **({"crashed": exc.line} if exc.kind == "crashed" else {"error": exc.line}),
        }
    runs = []
    for answer, part in zip(answers, server.request_logs()):
        timings = answer.get("timings", {})
        runs.append(
            {
                "generated": [int(t) for t in answer["tokens"]],
                "draft_n": int(timings.get("draft_n", 0)),
                "draft_n_accepted": int(timings.get("draft_n_accepted", 0)),
                "steps": [(s.drafts, s.accepted) for s in parse_steps(part)],
            }
        )
    return {"loads": True, "runs": runs}


@dataclass
class Target:
    """The tiny target in transformers: hidden states (input of every layer) over a sequence, embedding and head."""

    directory: Path

    def __post_init__(self):
        from transformers import AutoModelForCausalLM

        self.model = AutoModelForCausalLM.from_pretrained(self.directory, torch_dtype=torch.float32).eval()

    def aux(self, tokens: list[int], ids: tuple[int, ...]) -> torch.Tensor:
        with torch.no_grad():
            out = self.model(torch.tensor([tokens]), output_hidden_states=True, use_cache=False)
        states = out.hidden_states[:-1]  # [-1] is after the final norm; input-of-layer ids index the rest
        return torch.cat([states[i][0] for i in sorted(ids)], dim=-1)

    def weight(self, kind: str) -> torch.Tensor:
        module = self.model.get_input_embeddings() if kind == "embed" else self.model.get_output_embeddings()
        return module.weight.detach()


def mismatches(served_gguf: Path, drafter, target: Target, runs: list[dict]) -> list[float | None]:
    """``drafter`` (a canonical Drafter: flags, capture layers) with the served file's weights, at every step llama.cpp
    logged (each starting where the one before left off, on llama.cpp's own sequence): per step whose drafted tokens
    or accepted count differ, eaglekit's logit margin of its draft over llama.cpp's at the first differing draft (None
    where only the accepted count differs)."""
    from eaglekit import dialects
    from eaglekit.reference.model import ReferenceDrafter, weights_for
    from eaglekit.reference.simulate import accepted_lengths, draft_chains

    with dialects.load(served_gguf, target_num_layers=L) as loaded:
        loaded.drafter = drafter
        weights = weights_for(loaded, target_embed=target.weight("embed"), target_lm_head=target.weight("lm_head"))
    if drafter.flags.norm_before_fc and "input_norm.weight" not in weights:  # a reading the file has no norm for
        weights["input_norm.weight"] = torch.ones(3 * drafter.target_hidden_size)
    model = ReferenceDrafter(drafter, weights)
    out: list[float | None] = []
    for prompt, run in zip(PROMPTS, runs):
        tokens = torch.tensor(prompt + run["generated"])
        starts = torch.arange(len(prompt) - 1, tokens.shape[0] - 1)
        chains = draft_chains(model, tokens, target.aux(tokens.tolist(), drafter.aux.resolved(L)), starts, K)
        accepted = accepted_lengths(chains, tokens).cpu()
        j = len(prompt) - 1
        for drafts, taken in run["steps"]:
            row = j - (len(prompt) - 1)
            ours = chains.drafts[row, : len(drafts)].tolist()
            if ours != list(drafts) or min(int(accepted[row]), len(drafts)) != taken:
                at = next((i for i, (a, b) in enumerate(zip(ours, drafts)) if a != b), None)
                out.append(None if at is None else _margin(model, chains.y[row, at], ours[at], drafts[at]))
            j += taken + 1
    return out


def _margin(model, y: torch.Tensor, ours: int, theirs: int) -> float | None:
    logits = model.draft_logits(y[None]).float()[0]
    index = {int(t): i for i, t in enumerate(model.draft_to_target.tolist())}
    if theirs not in index:
        return None
    return float(logits[index[ours]] - logits[index[theirs]])


# float32 ties: llama.cpp's kernels and torch's agree to about 1e-6 of the logits' magnitude; a draft whose two
# candidates are closer than this may go either way
FLOAT_TIE = 1e-3


def readings(drafter) -> dict[str, object]:
    """The predicted reading and those one step away, by name."""
    from eaglekit.model.drafter import INPUT, AuxLayers, default_aux_ids

    out = {"predicted": drafter}
    out["default capture layers"] = replace(drafter, aux=AuxLayers(default_aux_ids(L), INPUT))
    for flag in ("norm_before_residual", "norm_before_fc", "norm_output"):
        flags = replace(drafter.flags, **{flag: not getattr(drafter.flags, flag)})
        out[f"{flag} {'on' if getattr(flags, flag) else 'off'}"] = replace(drafter, flags=flags)
    return out


# -- prediction, observation, agreement ------------------------------------------------------------------------------


def predict(path: Path, release: str) -> dict:
    """What ``validate --engine llama.cpp==bN`` says of the file or directory at ``path``, in the terms a run sees."""
    from eaglekit import dialects, engines

    with dialects.load(path, target_num_layers=L) as loaded:
        loaded.drafter = loaded.drafter.with_(target_num_layers=L)
        view = engines.interpret(loaded, engines.parse(f"llama.cpp=={release}"), target_num_layers=L)
    checks = sorted({f.check for f in view.findings if f.check not in UNOBSERVED_CHECKS})
    if not view.loads:
        return {"loads": False, "converter_refuses": "engine.converter" in checks, "checks": checks}
    if view.crashes:
        return {"loads": True, "crashes": True, "checks": checks}
    return {"loads": True, "drafter": view.drafter, "checks": checks}


def observe(served_gguf: Path, result: dict, predicted: dict, target: Target) -> dict:
    """What llama-server did with ``served_gguf`` (``serve``'s result), and which readings reproduce it."""
    from eaglekit import dialects

    if not result["loads"] or "crashed" in result:
        return {k: v for k, v in result.items() if k != "runs"}
    runs = result["runs"]
    drafter = predicted.get("drafter")
    if drafter is None:  # llama.cpp served what was predicted to fail: read the file as eaglekit does
        with dialects.load(served_gguf, target_num_layers=L) as loaded:
            drafter = loaded.drafter.with_(target_num_layers=L)
    tried = {name: mismatches(served_gguf, reading, target, runs) for name, reading in readings(drafter).items()}
    matching = [name for name, found in tried.items() if all(m is not None and abs(m) <= FLOAT_TIE for m in found)]
    counted = all(
        run["draft_n"] == sum(len(d) for d, _ in run["steps"])
        and run["draft_n_accepted"] == sum(a for _, a in run["steps"])
        for run in runs
    )
    return {
        "loads": True,
        "steps": sum(len(run["steps"]) for run in runs),
        # the steps the predicted reading drafts otherwise, with eaglekit's margin there (a float32 tie: <= FLOAT_TIE)
        "predicted_mismatch_margins": [None if m is None else float(f"{m:.3g}") for m in tried["predicted"]],
        "drafted": sum(run["draft_n"] for run in runs),
        "accepted": sum(run["draft_n_accepted"] for run in runs),
        "log_matches_counters": counted,
        "readings": matching,
    }


def disagreements(predicted: dict, observed: dict) -> list[str]:
    """Where llama.cpp did otherwise than predicted (empty: as predicted)."""
    if "converted" in observed:  # the converter's verdict (only for converted cases)
        refused = not observed["converted"]
        if refused != predicted.get("converter_refuses", False):
            said = "refuses" if predicted.get("converter_refuses") else "converts"
            did = f"failed: {observed['error']}" if refused else "converted it"
            return [f"predicted its converter {said} it; it {did}"]
        if refused:
            return []
    if predicted["loads"] != observed["loads"]:
        did = "loaded" if observed["loads"] else f"refused: {observed.get('error', '')}"
        return [f"predicted {'loads' if predicted['loads'] else 'refuses'}, llama-server {did}"]
    if not observed["loads"]:
        return []
    if bool(predicted.get("crashes")) != ("crashed" in observed):
        did = f"aborted: {observed['crashed']}" if "crashed" in observed else "served"
        return [f"predicted {'an abort' if predicted.get('crashes') else 'serving'}, llama-server {did}"]
    if "crashed" in observed:
        return []
    out = []
    if not observed["log_matches_counters"]:
        out.append("the logged steps do not add up to the server's draft_n / draft_n_accepted")
    if "predicted" not in observed["readings"]:
        tried = observed["readings"] or "no reading tried"
        out.append(f"drafts: the predicted reading does not reproduce them; {tried} does")
    return out


def semantic(observation: dict) -> dict:
    """An observation without its figures (the margins of float32 ties vary with the machine's float noise)."""
    return {k: v for k, v in observation.items() if k != "predicted_mismatch_margins"}


def stored() -> dict:
    return json.loads(OBSERVATIONS.read_text()) if OBSERVATIONS.exists() else {"observations": []}


def record(release: str, date: str, results: dict[str, dict]) -> None:
    """This run's observations of ``release`` replace its earlier ones (the file written whole, then renamed)."""
    data = stored()
    kept = [e for e in data["observations"] if e["release"] != release or e["case"] not in results]
    for case, r in results.items():
        kept.append(
            {
                "release": release,
                "date": date,
                "case": case,
                "path": r["path"],
                "checks": r["predicted"]["checks"],
                "observation": r["observed"],
                "agrees": not r["disagreements"],
            }
        )
    data = {
        "about": "What llama-server of each build did with tests/engines/llamacpp_matrix.py's drafters (path:"
        " converted, through the build's own converter; gguf, a GGUF file as given), written by"
        " tests/engines/test_llamacpp_matrix.py with EAGLEKIT_RECORD=1; validate --engine llama.cpp==bN cites the"
        " checks of the entries that agree",
        "observations": sorted(kept, key=lambda e: (e["release"], e["case"])),
    }
    tmp = OBSERVATIONS.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(data, indent=1) + "\n")
    tmp.replace(OBSERVATIONS)
