"""``eaglekit drift``: the recorded figures against a hand computation, the feedback growth without EAGLE 3.1's norms,
acceptance equal to verify's, and the report's files (schema, HTML, PNGs)."""

from __future__ import annotations

import base64
import html
import json
import re
from dataclasses import replace
from html.parser import HTMLParser
from pathlib import Path

import pytest
import torch

from eaglekit import api, dialects, schemas
from eaglekit.drift.figures import per_depth
from eaglekit.drift.inputs import bucket_edges
from eaglekit.reference.model import ReferenceDrafter, weights_for
from eaglekit.reference.record import DriftRecorder
from eaglekit.reference.simulate import Counters, chains_from, continuation_length, first_pass

import tiny_pair
from drafters import Dims, write_vllm

PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def pair31(trained_pair) -> dict:
    return trained_pair(eagle="3.1")


# -- the recorder against an independent computation -------------------------------------------------------


def _rms(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def _rope(x, pos, theta):
    """neox rope on [heads, d] at one position, typed out from the definition."""
    d = x.shape[-1]
    inv = theta ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    ang = pos * inv
    cos, sin = torch.cat([ang.cos(), ang.cos()]).float(), torch.cat([ang.sin(), ang.sin()]).float()
    rot = torch.cat([-x[..., d // 2 :], x[..., : d // 2]], dim=-1)
    return x * cos + rot * sin


class Hand:
    """A one-layer Llama EAGLE 3 drafter, row by row, from its weights (no eaglekit code)."""

    def __init__(self, w, cfg, flags):
        self.w, self.c, self.f = w, cfg, flags

    def row(self, token, hidden, pos):
        w, c = self.w, self.c
        eps, hd = c["eps"], c["head_dim"]
        x = torch.cat(
            [
                _rms(w["embed_tokens.weight"][token], w["layers.0.input_layernorm.weight"], eps),
                _rms(hidden, w["layers.0.hidden_norm.weight"], eps),
            ]
        )
        residual = _rms(hidden, w["layers.0.hidden_norm.weight"], eps) if self.f.norm_before_residual else hidden
        q = _rope((w["layers.0.self_attn.q_proj.weight"] @ x).view(-1, hd), pos, c["theta"])
        k = _rope((w["layers.0.self_attn.k_proj.weight"] @ x).view(-1, hd), pos, c["theta"])
        v = (w["layers.0.self_attn.v_proj.weight"] @ x).view(-1, hd)
        return q, k, v, residual

    def finish(self, probs, vs, residual):
        """probs [heads, n] over the value rows vs [n, kv_heads, d]: the rest of the layer and the final norm."""
        w, c = self.w, self.c
        groups = probs.shape[0] // vs.shape[1]
        vs = vs.repeat_interleave(groups, dim=1)
        attn = torch.einsum("hn,nhd->hd", probs, vs).reshape(-1)
        o = w["layers.0.self_attn.o_proj.weight"] @ attn
        r2 = o + residual
        h2 = _rms(r2, w["layers.0.post_attention_layernorm.weight"], c["eps"])
        m = w["layers.0.mlp.down_proj.weight"] @ (
            torch.nn.functional.silu(w["layers.0.mlp.gate_proj.weight"] @ h2) * (w["layers.0.mlp.up_proj.weight"] @ h2)
        )
        pre = m + r2
        normed = _rms(pre, w["norm.weight"], c["eps"])
        return pre, normed

    def attend(self, q, ks):
        groups = q.shape[0] // ks.shape[1]
        ks = ks.repeat_interleave(groups, dim=1)
        return (torch.einsum("hd,nhd->hn", q, ks) * self.c["head_dim"] ** -0.5).softmax(-1)


def test_recorded_figures_match_a_hand_computation(tmp_path):
    src = write_vllm(tmp_path / "d", Dims(heads=2, kv_heads=1, head_dim=8))
    with dialects.load(src) as loaded:
        d = loaded.drafter.with_(target_num_layers=8)
        w = weights_for(loaded)
    model = ReferenceDrafter(d, w)
    g = torch.Generator().manual_seed(3)
    S, j, K, sinks = 14, 9, 3, 3
    tokens = torch.randint(0, d.vocab_size, (S,), generator=g)
    aux = torch.randn(S, d.num_aux * d.target_hidden_size, generator=g) * 3
    recorder = DriftRecorder(sinks)
    first = first_pass(model, tokens, aux, recorder)
    chains_from(model, first, tokens, torch.tensor([j]), K, recorder=recorder)

    hand = Hand(
        {n: t.float() for n, t in w.items()},
        {"eps": d.rms_norm_eps, "head_dim": d.head_dim, "theta": d.rope.theta},
        d.flags,
    )
    d2t = w.get("d2t", torch.zeros(w["lm_head.weight"].shape[0], dtype=torch.long))
    # first pass: row t reads token x_{t+1} and fc(aux_t); keys/values of rows 0..j
    rows = [hand.row(int(tokens[t + 1]), w["fc.weight"] @ aux[t], t) for t in range(j + 1)]
    ks, vs = torch.stack([r[1] for r in rows]), torch.stack([r[2] for r in rows])
    probs = hand.attend(rows[j][0], ks)
    expect = [(float(probs[:, :sinks].sum(-1).mean()), 0.0)]
    pre, normed = hand.finish(probs, vs, rows[j][3])
    feedback = normed if d.flags.norm_output else pre
    norms = [float(feedback.norm())]
    own_k, own_v = [], []
    for step in range(2, K + 1):
        draft = int((w["lm_head.weight"] @ normed).argmax())
        draft = draft + int(d2t[draft])
        q, k, v, residual = hand.row(draft, feedback, j + step - 1)
        own_k.append(k)
        own_v.append(v)
        probs = hand.attend(q, torch.cat([ks, torch.stack(own_k)]))
        expect.append((float(probs[:, :sinks].sum(-1).mean()), float(probs[:, j + 1 :].sum(-1).mean())))
        pre, normed = hand.finish(probs, torch.cat([vs, torch.stack(own_v)]), residual)
        feedback = normed if d.flags.norm_output else pre
        norms.append(float(feedback.norm()))

    for step in range(1, K + 1):
        t = recorder.totals[(0, step)]
        assert t["chains"] == 1
        assert t["sink"] == pytest.approx(expect[step - 1][0], abs=1e-5)
        assert t["own"] == pytest.approx(expect[step - 1][1], abs=1e-5)
        assert t["feedback"] == pytest.approx(norms[step - 1], rel=1e-4)
    assert expect[-1][1] > 0  # the figures are not trivially zero
    chunks = aux[j].chunk(d.num_aux)
    fc = recorder.fc_totals[0]["sum"]
    assert [float(x) for x in fc] == pytest.approx([float(c.norm()) for c in chunks], rel=1e-5)
    rows = per_depth(Counters(), recorder, K)
    assert rows[0]["feedback_norm_relative"] == 1.0
    assert rows[2]["feedback_norm_relative"] == pytest.approx(norms[2] / norms[0], rel=1e-4)


def test_recording_changes_nothing(tmp_path):
    """Recorder or not, the drafts and states are bit-identical (verify's numbers cannot move)."""
    src = write_vllm(tmp_path / "d", Dims(fc_norm=True))
    with dialects.load(src) as loaded:
        model = ReferenceDrafter(loaded.drafter.with_(target_num_layers=8), weights_for(loaded))
    g = torch.Generator().manual_seed(1)
    tokens = torch.randint(0, 64, (20,), generator=g)
    aux = torch.randn(20, 48, generator=g)
    starts = torch.arange(4, 19)
    plain = chains_from(model, first_pass(model, tokens, aux), tokens, starts, 3)
    recorded = chains_from(
        model, first_pass(model, tokens, aux, DriftRecorder()), tokens, starts, 3, recorder=DriftRecorder()
    )
    assert torch.equal(plain.drafts, recorded.drafts) and torch.equal(plain.y, recorded.y)


def test_bucket_edges():
    assert bucket_edges(300) == [0, 512]
    assert bucket_edges(4096) == [0, 512, 2048, 8192]
    assert bucket_edges(8192) == [0, 512, 2048, 8192]


# -- on a trained tiny pair -----------------------------------------------------------------------------------


def test_without_31_norms_the_fed_back_norm_grows_with_depth(pair31):
    """EAGLE 3.1's second cause, on the same weights: post-norm feedback keeps the fed-back norm flat; with fc_norm and
    norm_output switched off the pre-norm residual is fed back and its norm grows step after step."""
    from eaglekit.target import read_target_config
    from eaglekit.target.runner import TargetModel

    cfg = read_target_config(pair31["target"])
    target = TargetModel.load(cfg)
    with dialects.load(pair31["drafter"], target_num_layers=cfg.num_layers) as loaded:
        d = loaded.drafter.with_(target_num_layers=cfg.num_layers)
        w = weights_for(loaded, target_embed=target.embed_weight, target_lm_head=target.lm_head_weight)
    assert d.flags.fc_norm and d.flags.norm_output
    K = 5
    figures = {}
    for label, drafter in (("3.1", d), ("off", d.with_(flags=replace(d.flags, fc_norm=False, norm_output=False)))):
        model = ReferenceDrafter(drafter, w)
        recorder = DriftRecorder()
        for line in Path(pair31["prompts"]).read_text().splitlines()[:3]:
            prompt = json.loads(line)["input_ids"]
            tokens = target.generate(prompt, 24)
            aux, _ = target.aux_states(tokens, d.aux.resolved(cfg.num_layers))
            first = first_pass(model, tokens, aux, recorder)
            chains_from(model, first, tokens, torch.arange(len(prompt) - 1, tokens.shape[0] - 1), K, recorder=recorder)
            recorder.sequence_done()
        figures[label] = [r["feedback_norm_relative"] for r in per_depth(Counters(), recorder, K)]
    on, off = figures["3.1"], figures["off"]
    assert all(0.8 < x < 1.25 for x in on), on
    assert all(b > a for a, b in zip(off, off[1:])), off  # grows with every step
    assert off[-1] > 1.5 * on[-1], (on, off)


class _Html(HTMLParser):
    VOID = {"meta", "img", "br", "hr", "link", "input"}

    def __init__(self):
        super().__init__()
        self.stack, self.images, self.errors, self.doctype = [], [], [], False

    def handle_decl(self, decl):
        self.doctype = decl.lower() == "doctype html"

    def handle_starttag(self, tag, attrs):
        if tag == "img":
            self.images.append(dict(attrs)["src"])
        if tag not in self.VOID:
            self.stack.append(tag)

    def handle_endtag(self, tag):
        if not self.stack or self.stack.pop() != tag:
            self.errors.append(f"unbalanced </{tag}>")


def check_html(page: str, directory: Path) -> list[str]:
    """No browser installs offline here (no chromium, no firefox), so the page is checked as one would load it:
    well-formed (every element closed, in order), a doctype, no script, nothing fetched from the network, and
    every <img> an inline data: PNG or an existing PNG file beside the page (PNG signature checked). Returns the
    image sources."""
    parser = _Html()
    parser.feed(page)
    parser.close()
    assert parser.doctype and not parser.errors and not parser.stack, (parser.errors, parser.stack)
    assert "<script" not in page.lower() and "http://" not in page and "https://" not in page
    for src in parser.images:
        if src.startswith("data:"):
            assert src.startswith("data:image/png;base64,")
            assert base64.b64decode(src.split(",", 1)[1]).startswith(PNG)
        else:
            assert (directory / src).is_file() and (directory / src).read_bytes().startswith(PNG), src
    return parser.images


def test_report_acceptance_equals_verify_and_files_are_valid(pair31, cli, tmp_path):
    pytest.importorskip("matplotlib")
    out = tmp_path / "report"
    common = [
        "--target",
        pair31["target"],
        "--prompts",
        pair31["prompts"],
        "--max-new-tokens",
        20,
        "--num-speculative-tokens",
        3,
    ]
    result = cli(
        "drift",
        pair31["drafter"],
        *common,
        "--compare",
        pair31["drafter"],
        "--chunk",
        5,
        "--sink-tokens",
        2,
        "--report",
        out,
        "--json",
    )
    data = json.loads(result.stdout)
    verified = api.verify(
        pair31["drafter"], target=str(pair31["target"]), prompts=str(pair31["prompts"]), max_new_tokens=20, k=3
    ).data
    # the same sequences, chunked or not: the greedy acceptance is verify's
    assert data["acceptance"]["trajectory"] == verified["trajectory"]
    assert data["acceptance"]["every_position"] == verified["every_position"]
    assert verified["every_position"]["num_accepted_tokens"] > 0
    assert (
        sum(b["every_position"]["num_drafts"] for b in data["by_context_length"])
        == verified["every_position"]["num_drafts"]
    )
    assert data["ok"] and schemas.check(data, "drift.schema.json") == []
    # compared with itself: every ratio that exists is 1
    ratios = data["compare"]["ratios"]
    assert ratios["acceptance_length"] == 1.0
    assert all(v in (None, 1.0) for row in ratios["per_depth"] for k, v in row.items() if k != "step")
    # per depth: no own drafts at step 1, some later; attention masses are fractions
    depth = data["per_depth"]
    assert depth[0]["own_draft_attention"] == 0.0 and depth[1]["own_draft_attention"] > 0
    assert depth[0]["acceptance_rate"] == verified["every_position"]["per_position_rate"][0]
    # the files
    report = json.loads((out / "report.json").read_text())
    assert report == data and schemas.check(report, "drift.schema.json") == []
    page = (out / "report.html").read_text()
    assert len(check_html(page, out)) == 3
    for name in ("per_depth.png", "by_context_length.png", "fc_input.png"):
        assert (out / name).read_bytes().startswith(PNG)
    # the terminal prints the same tables
    from eaglekit.cli.drift import render
    from eaglekit.drift.report import tables

    text = render(data)
    for title, _ in tables(data):
        assert title in text and html.escape(title) in page


def test_usage_errors_exit_2(pair31, cli):
    result = cli("drift", pair31["drafter"], "--target", pair31["target"], "--max-context", 100000, expect=2)
    assert "window" in result.stderr
    result = cli("drift", pair31["drafter"], "--target", pair31["target"], expect=2)  # built-in inputs need a tokenizer
    assert "--prompts" in result.stderr


def test_a_drafter_that_cannot_run_is_refused_before_the_target_decodes(pair31, tmp_path, monkeypatch):
    """Both drafters are read and checked once, before the long decode: a --compare whose aux layers the 8-layer
    target lacks is refused at once, in run_checks' words."""
    import shutil

    from eaglekit.drift.run import DriftOptions, drift
    from eaglekit.errors import UsageError
    from eaglekit.target.runner import TargetModel

    bad = tmp_path / "bad"
    shutil.copytree(pair31["drafter"], bad)
    config = json.loads((bad / "config.json").read_text())
    config["eagle_config"]["eagle_aux_hidden_state_layer_ids"] = [1, 4, 40]
    (bad / "config.json").write_text(json.dumps(config))

    def decoded(*args, **kwargs):
        raise AssertionError("the target decoded before the drafters were checked")

    monkeypatch.setattr(TargetModel, "decode_batch", decoded)
    with pytest.raises(UsageError, match="bad cannot run on"):
        drift(
            str(pair31["drafter"]),
            DriftOptions(target=str(pair31["target"]), prompts=str(pair31["prompts"]), compare=str(bad)),
        )


# -- --variants ------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def chat_target(pair31, tmp_path_factory) -> Path:
    """The tiny target with a character tokenizer and a chat template: text prompts and their framings can run."""
    import shutil

    target = tmp_path_factory.mktemp("chat") / "target"
    shutil.copytree(pair31["target"], target)
    tiny_pair.add_char_tokenizer(target)
    return target


TEXTS = ["abc def ghi", "the quick brown fox", "x = y + 1; print(x)"]


def test_variants_each_framing_is_its_own_run_and_the_spread_is_theirs(pair31, chat_target, cli, tmp_path):
    pytest.importorskip("matplotlib")
    from transformers import AutoTokenizer

    from eaglekit.drift.variants import load_variants

    prompts = tmp_path / "text.jsonl"
    prompts.write_text("".join(json.dumps({"id": f"t{i}", "prompt": t}) + "\n" for i, t in enumerate(TEXTS)))
    out = tmp_path / "report"
    result = cli(
        "drift",
        pair31["drafter"],
        "--target",
        chat_target,
        "--prompts",
        prompts,
        "--max-new-tokens",
        12,
        "--variants",
        "--temperature",
        "0.7",
        "--report",
        out,
        "--json",
    )
    data = json.loads(result.stdout)
    assert schemas.check(data, "drift.schema.json") == []
    # the page with every section: five plots (per depth, by context, fc input, variants, sampling), all PNGs
    page = (out / "report.html").read_text()
    assert (
        len(check_html(page, out)) == 5
        and (out / "variants.png").read_bytes().startswith(PNG)
        and (out / "sampling.png").is_file()
    )
    assert all(row["sampling_acceptance_length"] >= 1 for row in data["variants"]["variants"])
    rows = {row["name"]: row for row in data["variants"]["variants"]}
    assert list(rows) == [v["name"] for v in load_variants()]
    assert data["variants"]["inputs"] == len(TEXTS)
    # the target's own template with no system prompt is what the main run used
    assert rows["chat"]["acceptance"] == data["acceptance"]
    # two framings rebuilt by hand, run through verify: the same acceptance
    tok = AutoTokenizer.from_pretrained(str(chat_target))
    by_hand = {
        "no-template": [tok(t)["input_ids"] for t in TEXTS],
        "system-helpful": [
            list(
                tok.apply_chat_template(
                    [{"role": "system", "content": "You are a helpful assistant."}, {"role": "user", "content": t}],
                    add_generation_prompt=True,
                    tokenize=True,
                )["input_ids"]
            )
            for t in TEXTS
        ],
    }
    for name, ids in by_hand.items():
        file = tmp_path / f"{name}.jsonl"
        file.write_text("".join(json.dumps({"id": f"t{i}", "input_ids": x}) + "\n" for i, x in enumerate(ids)))
        verified = api.verify(
            pair31["drafter"], target=str(chat_target), prompts=str(file), max_new_tokens=12, k=3
        ).data
        assert rows[name]["acceptance"]["trajectory"] == verified["trajectory"], name
        assert rows[name]["acceptance"]["every_position"] == verified["every_position"], name
        assert rows[name]["tokens"] == [
            len(x) + continuation_length(12, 3) for x in ids
        ]  # input + what the trajectory judges
    als = [row["acceptance_length"] for row in rows.values()]
    spread = data["variants"]["spread"]["acceptance_length"]
    assert spread["min"] == min(als) and spread["max"] == max(als)
    assert spread["range"] == pytest.approx(max(als) - min(als), abs=1e-6)
    assert len(set(als)) > 1  # the framings do move acceptance on this pair (the figure is not a constant)
    from eaglekit.cli.drift import render

    assert "Acceptance per prompt variant" in render(data) and "system-concise" in render(data)


def test_variants_need_text_prompts(pair31, chat_target, cli):
    result = cli(
        "drift", pair31["drafter"], "--target", chat_target, "--prompts", pair31["prompts"], "--variants", expect=2
    )
    assert "--variants" in result.stderr and "input_ids" in result.stderr and "p0" in result.stderr


def test_built_in_inputs_fit_the_context_they_are_given_or_it_says_why(pair31, chat_target, cli):
    """The chat template's framing is counted in tokens (transformers 5 returns a BatchEncoding from
    apply_chat_template: its length, 2, was taken for the framing's, and inputs came out longer than their bucket):
    where the context leaves no room for framing and continuation, one line says so before any decoding."""
    from transformers import AutoTokenizer

    from eaglekit.drift.inputs import long_records
    from eaglekit.verify.prompts import chat_ids

    tokenizer = AutoTokenizer.from_pretrained(str(chat_target))
    records = long_records(tokenizer, 400, 2, 44)
    assert records and all(len(chat_ids(tokenizer, r["messages"])) <= 400 - 44 for r in records)
    for args, overhead in (
        (("--max-context", 100, "--max-new-tokens", 40), "continuation 44"),
        (("--max-new-tokens", 600), "continuation 604"),
    ):
        result = cli("drift", pair31["drafter"], "--target", chat_target, *args, expect=2)
        assert (
            "leaves no room for a built-in input" in result.stderr
            and overhead in result.stderr
            and result.stderr.count("\n") == 1
        )


def test_per_depth_figures_count_the_chains_acceptance_counts(pair31):
    """Every per-depth figure (attention, fed-back norm, fc input) is taken over the chains acceptance over every
    position counts: none whose K targets run past max_new_tokens (all were recorded: 2K - 1 more per prompt)."""
    from eaglekit.drift.run import DriftOptions, drift

    data = drift(
        str(pair31["drafter"]),
        DriftOptions(target=str(pair31["target"]), prompts=str(pair31["prompts"]), max_new_tokens=12, k=3),
    )
    judged = data["acceptance"]["every_position"]["num_drafts"]
    assert judged > 0 and [row["chains"] for row in data["per_depth"]] == [judged] * 3
    for bucket in data["by_context_length"]:
        assert [row["chains"] for row in bucket["per_depth"]] == [bucket["every_position"]["num_drafts"]] * 3


@pytest.fixture(scope="module")
def fast_pair(tmp_path_factory) -> dict:
    """A tiny random pair and one prompt: a drift run in well under a second (what it measures does not matter)."""
    from drafters import write_fast_pair

    return write_fast_pair(tmp_path_factory.mktemp("fast-pair"))


def _tree(folder: Path) -> dict:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_a_report_replaces_the_earlier_one_as_a_whole(fast_pair, cli, tmp_path):
    """A second `--report DIR` run without --temperature left the first run's sampling.png beside the new report.json,
    and `push --report` published it with a report that has no sampling section."""
    pytest.importorskip("matplotlib")
    out = tmp_path / "report"
    common = [
        fast_pair["drafter"],
        "--target",
        fast_pair["target"],
        "--prompts",
        fast_pair["prompts"],
        "--max-new-tokens",
        8,
        "--report",
        out,
    ]
    # a random pair: drift's findings fail the run (exit 1), the report is written all the same
    assert cli("drift", *common, "--temperature", "0.7", expect=None).exit_code == 1
    assert (out / "sampling.png").is_file()
    assert cli("drift", *common, expect=None).exit_code == 1
    assert sorted(p.name for p in out.iterdir()) == [
        "by_context_length.png",
        "fc_input.png",
        "per_depth.png",
        "report.html",
        "report.json",
    ]
    assert json.loads((out / "report.json").read_text()).get("sampling") is None
    assert [p.name for p in tmp_path.iterdir()] == ["report"]  # no hidden folder left beside it


@pytest.mark.parametrize(
    "where", ["drafter", "inside-drafter", "target", "file", "users-folder", "other-json", "holds-drafter"]
)
def test_a_report_folder_that_is_not_an_earlier_report_is_refused_before_the_run(fast_pair, cli, tmp_path, where):
    """drift --report wrote report.json and report.html into the drafter's (or the target's) own folder, and into a
    file's path only failed after the whole run."""
    drafter = tmp_path / "drafter"
    target = tmp_path / "target"
    import shutil

    shutil.copytree(fast_pair["drafter"], drafter)
    shutil.copytree(fast_pair["target"], target)
    report = {
        "drafter": drafter,
        "inside-drafter": drafter / "drift",
        "target": target,
        "file": tmp_path / "notes.txt",
        "users-folder": tmp_path / "project",
        "other-json": tmp_path / "other",
        "holds-drafter": tmp_path,
    }[where]
    (tmp_path / "notes.txt").write_text("mine\n")
    (tmp_path / "project").mkdir()
    (tmp_path / "project" / "main.py").write_text("print()\n")
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "report.json").write_text('{"loss": 1.5}\n')
    before = _tree(tmp_path)
    result = cli(
        "drift",
        drafter,
        "--target",
        target,
        "--prompts",
        fast_pair["prompts"],
        "--max-new-tokens",
        8,
        "--report",
        report,
        expect=2,
    )
    assert _tree(tmp_path) == before
    assert str(report) in result.stderr and "\n" not in result.stderr.strip() and "Traceback" not in result.stderr
    expected = {
        "drafter": "inside the source",
        "inside-drafter": "inside the source",
        "target": "inside the source",
        "file": "not a directory",
        "users-folder": "main.py",
        "other-json": "report.json (not a drift report)",
        "holds-drafter": "would contain the source",
    }[where]
    assert expected in result.stderr, result.stderr
    assert "--force" not in result.stderr  # drift has no such option


# -- the plots -----------------------------------------------------------------------------------------------------


def _side(path: str, version: str, shift: float) -> dict:
    depth = [
        {
            "step": k,
            "acceptance_rate": 0.6 - 0.15 * k + shift,
            "sink_attention": 0.3 - 0.05 * k,
            "own_draft_attention": 0.05 * (k - 1),
            "feedback_norm_relative": 1 + 0.2 * (k - 1) - shift,
        }
        for k in (1, 2, 3)
    ]
    buckets = [
        {"bucket": "<512", "acceptance_length": 2.4 + shift, "every_position": {"num_drafts": 300}},
        {"bucket": "512-2k", "acceptance_length": 2.1 + shift, "every_position": {"num_drafts": 900}},
    ]
    return {
        "path": path,
        "eagle_version": version,
        "per_depth": depth,
        "by_context_length": buckets,
        "fc_input": {"chunk_norms": [10.0, 14.0 + shift, 17.0]},
        "sampling": {"temperature": 0.8, "top_p": 0.95, "per_position_rate": [0.5 + shift, 0.3, 0.2]},
    }


def synthetic_report() -> dict:
    """A drift report's figures as the plots read them: a drafter, --compare, two context buckets, --variants and
    --temperature (every plot), the paths as a user gives them."""
    r = _side("/home/alice/ckpts/eagle3-run7", "3", 0.0)
    r.update(drafter=r.pop("path"), target="/data/models/SmolLM2-135M-Instruct.Q4_1.gguf", num_speculative_tokens=3)
    r["sink_tokens"] = 4
    r["compare"] = _side("/home/alice/ckpts/eagle31-run9", "3.1", 0.1)
    r["variants"] = {
        "inputs": 3,
        "variants": [
            {"name": name, "acceptance_length": 2.0 + i / 10, "compare": {"acceptance_length": 2.2 + i / 10}}
            for i, name in enumerate(["chat", "no-template", "system-helpful"])
        ],
    }
    return r


def test_every_plot_names_its_axes_its_categories_and_whose_figures_it_shows():
    """The plots had no y-axis labels, fractional ticks on categorical axes (fc_input's aux chunks at 0.0, 0.5, ...),
    one colour meaning the drafter in one panel and an attention share in the next, no title naming drafter and target,
    and figure captions that were file names."""
    plt = pytest.importorskip("matplotlib.pyplot")
    from matplotlib.lines import Line2D
    from matplotlib.patches import Rectangle

    from eaglekit.drift.plots import CAPTIONS, SIDE_STYLE, figures
    from eaglekit.drift.report import PLOT_FILES, require_matplotlib

    require_matplotlib()
    r = synthetic_report()
    made = figures(r, plt)
    assert [name for name, _ in made] == list(PLOT_FILES) and set(CAPTIONS) == set(PLOT_FILES)
    colour_of = {"eagle3-run7": SIDE_STYLE[0]["color"], "eagle31-run9": SIDE_STYLE[1]["color"]}
    for name, fig in made:
        title = fig._suptitle.get_text().replace("\n", " ")  # the target on a line of its own where one would overrun
        assert title == "eagle3-run7 (EAGLE 3) vs eagle31-run9 (EAGLE 3.1) on SmolLM2-135M-Instruct.Q4_1.gguf", title
        assert "/home/alice" not in title  # a machine's folders say nothing to a reader
        for ax in fig.axes:
            assert ax.get_xlabel() and ax.get_ylabel() and ax.get_title(), (name, ax.get_title())
            ticks = list(ax.get_xticks())
            labels = [t.get_text() for t in ax.get_xticklabels()]
            if ax.get_xlabel() == "draft step k":  # steps: 1..K and nothing between
                assert ticks == [1, 2, 3] and labels == ["1", "2", "3"], (name, ticks)
            else:  # bars: one tick per category, at its group's centre, named
                assert ticks == list(range(len(ticks))) and all(not _is_number(x) for x in labels), (name, labels)
            for artist in [*ax.lines, *[p for p in ax.patches if isinstance(p, Rectangle)]]:
                label = artist.get_label() if isinstance(artist, Line2D) else artist.get_label() or ""
                owner = next((who for who in colour_of if str(label).startswith(who)), None)
                if owner is not None:  # one colour per drafter, in every figure
                    from matplotlib.colors import to_hex

                    assert to_hex(
                        artist.get_color() if isinstance(artist, Line2D) else artist.get_facecolor()
                    ) == to_hex(colour_of[owner]), (name, label)
        plt.close(fig)


def _is_number(text: str) -> bool:
    try:
        float(text.replace("\u2212", "-"))
    except ValueError:
        return False
    return True


def test_the_report_page_captions_each_plot_with_what_it_shows(fast_pair, cli, tmp_path):
    pytest.importorskip("matplotlib")
    from eaglekit.drift.plots import CAPTIONS

    out = tmp_path / "report"
    argv = ["drift", fast_pair["drafter"], "--target", fast_pair["target"], "--prompts", fast_pair["prompts"]]
    cli(*argv, "--report", out, expect=1)  # a random drafter accepts nothing: said, and the report written
    page = (out / "report.html").read_text()
    captions = re.findall(r"<figcaption>(.*?)</figcaption>", page)
    assert captions == [
        html.escape(CAPTIONS[name]) for name in ("per_depth.png", "by_context_length.png", "fc_input.png")
    ]
    assert not any(c.endswith(".png") for c in captions)
