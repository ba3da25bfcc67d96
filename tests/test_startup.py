"""Header-only commands never import torch or transformers (issue 16, goal 1).

Each command runs in a fresh interpreter through a small wrapper that calls the CLI and then writes which heavy
modules ``sys.modules`` holds. What is timed lives in ``benchmarks/startup_bench.py``; this guards the imports.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from drafters import Dims, llama_gguf_writer, write_eagle, write_tiny_target, write_vllm

ROOT = Path(__file__).resolve().parent.parent
HEAVY = ("torch", "transformers")
# the Hub client, what its import pulls in, and eaglekit's own module that talks to the Hub
HUB_CLIENT = ("huggingface_hub", "httpx", "httpx2", "filelock", "eaglekit.hub")

# Runs the CLI in this interpreter, then records the heavy modules it imported (whatever the exit code).
WRAPPER = """
import json, sys
out, args = sys.argv[1], sys.argv[2:]
from eaglekit.cli import main
try:
    main(args=args, prog_name="eaglekit")
except SystemExit as exc:
    code = exc.code
else:
    code = 0
with open(out, "w") as f:
    json.dump({"exit": code, "modules": sorted(m for m in MODULES if m in sys.modules)}, f)
""".replace("MODULES", repr(HEAVY + HUB_CLIENT))


def run(tmp_path: Path, *args, env: dict | None = None) -> dict:
    record = tmp_path / "imports.json"
    environment = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
        "HF_HUB_OFFLINE": "1",
        **(env or {}),
    }
    proc = subprocess.run(
        [sys.executable, "-c", WRAPPER, str(record), *map(str, args)],
        capture_output=True,
        text=True,
        env=environment,
        cwd=tmp_path,
        timeout=300,
    )
    assert record.exists(), proc.stderr
    result = json.loads(record.read_text())
    result["stdout"], result["stderr"] = proc.stdout, proc.stderr
    return result


@pytest.fixture(scope="module")
def drafter(tmp_path_factory) -> Path:
    """A tiny safetensors drafter in vLLM's layout with a pruned vocabulary: d2t and t2d are read and checked."""
    return write_vllm(tmp_path_factory.mktemp("startup") / "drafter", Dims())


@pytest.fixture(scope="module")
def config_only_target(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("startup") / "target"
    d.mkdir()
    d.joinpath("config.json").write_text(
        json.dumps(
            {
                "architectures": ["LlamaForCausalLM"],
                "model_type": "llama",
                "hidden_size": 16,
                "num_hidden_layers": 8,
                "num_attention_heads": 2,
                "vocab_size": 64,
                "intermediate_size": 32,
                "rope_theta": 10000.0,
            }
        )
    )
    return d


HEADER_ONLY = {
    "help": lambda d, t, out: ["--help"],
    "inspect": lambda d, t, out: ["inspect", d],
    "inspect --json": lambda d, t, out: ["inspect", d, "--json"],
    "validate": lambda d, t, out: ["validate", d, "--json"],
    "validate --engine": lambda d, t, out: ["validate", d, "--engine", "vllm==0.32"],
    "validate --target (config only)": lambda d, t, out: ["validate", d, "--target", t, "--engine", "vllm==0.32"],
    "convert vllm -> speculators": lambda d, t, out: ["convert", d, out, "--to", "speculators"],
    "convert --dry-run --target": lambda d, t, out: [
        "convert",
        d,
        out,
        "--to",
        "sglang",
        "--target",
        t,
        "--dry-run",
        "--json",
    ],
    "convert --list": lambda d, t, out: ["convert", "--list"],
    "push --dry-run": lambda d, t, out: ["push", d, "someone/drafter", "--dry-run"],
}


@pytest.mark.parametrize("name", list(HEADER_ONLY))
def test_header_only_commands_import_neither_torch_nor_transformers(name, drafter, config_only_target, tmp_path):
    result = run(tmp_path, *HEADER_ONLY[name](drafter, config_only_target, tmp_path / "out"))
    assert result["exit"] in (0, 1, None), result["stderr"]  # 1: validate reports findings (engine.* on a tiny drafter)
    assert "error:" not in result["stderr"], result["stderr"]
    heavy = [m for m in result["modules"] if m in HEAVY]
    assert heavy == [], f"{name} imported {heavy}"


@pytest.fixture(scope="module", params=["rope_freqs", "yarn"])
def gguf_target(request, tmp_path_factory) -> Path:
    """A GGUF target of the tiny drafter's target dimensions: a llama file, whose config is a renaming of its metadata,
    with a rope scaling as llama.cpp's converter writes one: Llama 3.x's as the rope_freqs tensor (read from the tensor
    index and data), or YaRN's in keys (which transformers drops, so eaglekit reads them)."""
    gguf = pytest.importorskip("gguf")
    import numpy as np

    d = Dims()
    path = tmp_path_factory.mktemp("startup") / "target.Q8_0.gguf"
    writer = llama_gguf_writer(path, d)
    writer.add_rope_freq_base(10000.0)
    if request.param == "yarn":
        writer.add_rope_scaling_type(gguf.RopeScalingType.YARN)
        writer.add_rope_scaling_factor(4.0)
        writer.add_rope_scaling_orig_ctx_len(512)
    writer.add_tensor("token_embd.weight", np.zeros((d.V, d.T), dtype=np.float32))
    if request.param == "rope_freqs":
        writer.add_tensor("rope_freqs.weight", np.array([1.0, 1.0, 2.5, 8.0], dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


@pytest.mark.parametrize("command", ["validate", "convert"])
def test_a_gguf_target_read_for_its_config_imports_neither_torch_nor_transformers(
    command, drafter, gguf_target, tmp_path
):
    """validate --target and convert --target read a GGUF target's metadata alone (target/gguf_config.py): transformers'
    reading imported torch and transformers and parsed the whole file (~10 s for SmolLM2 on 2 cores)."""
    args = (
        ["validate", drafter, "--target", gguf_target, "--json"]
        if command == "validate"
        else ["convert", drafter, tmp_path / "out", "--to", "sglang", "--target", gguf_target, "--dry-run", "--json"]
    )
    result = run(tmp_path, *args, env={"XDG_CACHE_HOME": str(tmp_path / "cache")})
    assert result["exit"] in (0, 1, None), result["stderr"]
    assert "error" not in result["stderr"].lower(), result["stderr"]
    assert [m for m in result["modules"] if m in HEAVY] == []
    if command == "validate":  # the drafter's default rope is not the file's: the scaling was read
        assert (
            "divided by the file's rope_freqs (1 to 8)" if _has_rope_freqs(gguf_target) else "theta 10000, yarn"
        ) in result["stdout"]
    assert (
        '"target.hidden"' not in result["stdout"] and '"target.vocab"' not in result["stdout"]
    )  # the target's dims were read


def _has_rope_freqs(path: Path) -> bool:
    from eaglekit.io.gguf_metadata import read_metadata

    return "rope_freqs.weight" in read_metadata(path, tensors=True).tensors


def test_push_dry_run_imports_no_hub_client(drafter, tmp_path):
    """Issue 20: the dry run checks the repo id and writes the card's YAML without huggingface_hub (whose import pulls
    in its HTTP client, filelock and yaml: about as much again as the start-up floor); it sends nothing, so needs none.
    PyYAML writes the YAML, as the client itself would."""
    result = run(tmp_path, "push", drafter, "someone/drafter", "--dry-run")
    assert result["exit"] in (0, None), result["stderr"]
    assert "library_name: vllm" in result["stdout"] and "nothing sent (--dry-run)" in result["stdout"]
    assert result["modules"] == [], result["modules"]
    bad = run(tmp_path, "push", drafter, "someone/bad--name", "--dry-run")
    assert bad["exit"] == 2 and "is not a valid repository id" in bad["stderr"] and bad["modules"] == []


def test_a_command_imports_only_its_own_cli_module(drafter, tmp_path):
    """The CLI imports a subcommand's module when that subcommand runs: push does not load verify's or drift's."""
    code = (
        "import sys; from eaglekit.cli import main\ntry:\n    main(args=sys.argv[1:], prog_name='eaglekit')\nexcept"
        " SystemExit:\n    pass\nprint(sorted(m for m in sys.modules if m.startswith('eaglekit.cli.') and not"
        " m.startswith('eaglekit.cli._')), file=sys.stderr)"
    )
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
        "HF_HUB_OFFLINE": "1",
    }
    proc = subprocess.run(
        [sys.executable, "-c", code, "push", str(drafter), "someone/drafter", "--dry-run"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == "['eaglekit.cli.push']"


def test_every_listed_command_resolves_under_its_own_name():
    from click.testing import CliRunner

    from eaglekit.cli import COMMANDS, main

    assert main.list_commands(None) == list(COMMANDS)
    for name in COMMANDS:
        command = main.get_command(None, name)
        assert command is not None and command.name == name
    assert main.get_command(None, "nonsense") is None
    listing = CliRunner().invoke(main, ["--help"]).output
    assert [line.split()[0] for line in listing.split("Commands:")[1].strip().splitlines()] == list(COMMANDS)
    unknown = CliRunner().invoke(main, ["nonsense"])
    assert unknown.exit_code == 2 and "No such command 'nonsense'" in unknown.output


def test_convert_copies_bytes_without_torch_and_the_output_reads_back(drafter, tmp_path):
    out = tmp_path / "out"
    result = run(tmp_path, "convert", drafter, out, "--to", "speculators")
    assert result["exit"] in (0, None) and not set(result["modules"]) & set(HEAVY)
    from eaglekit.io.reader import Checkpoint

    with Checkpoint.open(drafter) as src, Checkpoint.open(out) as dst:
        assert torch.equal(src.read("d2t"), dst.read("d2t")) and torch.equal(src.read("t2d"), dst.read("t2d"))


def test_tensor_math_imports_torch(drafter, tmp_path):
    """The other side: a cast makes tensors, and a pickled .bin is read by torch."""
    cast = run(tmp_path, "convert", drafter, tmp_path / "cast", "--to", "speculators", "--dtype", "bfloat16")
    assert cast["exit"] in (0, None) and "torch" in cast["modules"], cast["stderr"]
    bin_drafter = write_eagle(tmp_path / "eagle-bin", Dims(), bin_file=True)
    listed = run(tmp_path, "inspect", bin_drafter)
    assert listed["exit"] in (0, None) and "torch" in listed["modules"], listed["stderr"]


def test_verify_still_runs(drafter, tmp_path):
    target = write_tiny_target(tmp_path / "tiny-target")
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"input_ids": [1 + i, 7, 3 + i, 9]}) + "\n" for i in range(2)))
    result = run(
        tmp_path, "verify", drafter, "--target", target, "--prompts", prompts, "--max-new-tokens", "6", "--json"
    )
    assert result["exit"] in (0, None), result["stderr"]
    report = json.loads(result["stdout"])
    assert report["acceptance_length"] >= 1.0
    assert "torch" in result["modules"]


# -- what replaced torch on those paths agrees with torch --------------------------------------------------


def test_dtype_table_agrees_with_torch():
    from eaglekit.io import dtypes

    for code in (
        "F64",
        "F32",
        "F16",
        "BF16",
        "F8_E4M3",
        "F8_E4M3FNUZ",
        "F8_E5M2",
        "F8_E5M2FNUZ",
        "F8_E8M0",
        "C64",
        "I64",
        "I32",
        "I16",
        "I8",
        "U64",
        "U32",
        "U16",
        "U8",
        "BOOL",
    ):
        ours, theirs = dtypes.by_code(code), dtypes.from_code(code)
        assert ours.torch is theirs and ours == theirs and theirs == ours and not ours != theirs
        assert ours.itemsize == theirs.itemsize and ours.is_floating_point == theirs.is_floating_point
        assert dtypes.name(ours) == dtypes.name(theirs) and dtypes.to_code(theirs) == code and dtypes.of(theirs) is ours
    assert dtypes.by_code("BF16") != torch.float16 and dtypes.by_code("X") is None


def _torch_vocab_findings(d2t: torch.Tensor, t2d: torch.Tensor, vocab: int, draft_vocab: int) -> set[str]:
    """The checks as they were written in torch before they moved to ints: the oracle."""
    found = set()
    mapped = torch.arange(d2t.numel(), dtype=torch.int64) + d2t.to(torch.int64)
    if vocab == draft_vocab:
        found.add("vocab.d2t_full_vocab")
    if mapped.numel() > 1 and not bool(torch.all(mapped[1:] > mapped[:-1])):
        found.add("vocab.d2t_order")
    if mapped.numel() and (int(mapped.min()) < 0 or int(mapped.max()) >= vocab):
        found.add(f"vocab.d2t_range [{int(mapped.min())}, {int(mapped.max())}]")
    if int(t2d.sum()) != draft_vocab:
        found.add(f"vocab.t2d_count {int(t2d.sum())}")
    inside = mapped[(mapped >= 0) & (mapped < t2d.numel())]
    if inside.numel() != mapped.numel() or not bool(torch.all(t2d[inside])):
        found.add("vocab.t2d_mismatch")
    return found


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.int16, torch.uint8, torch.uint64])
def test_vocab_checks_on_ints_match_torch(dtype, tmp_path):
    """d2t/t2d read as raw bytes give the findings torch gave, for every integer dtype and broken map."""
    from safetensors.torch import save_file

    from eaglekit.io.reader import Checkpoint
    from eaglekit.validate.checks import CheckInput, check_vocab

    g = torch.Generator().manual_seed(0)
    for case in range(24):
        vocab, draft_vocab = 40, [12, 12, 40][case % 3]
        used = torch.sort(torch.randperm(vocab, generator=g)[:draft_vocab]).values
        d2t = used - torch.arange(draft_vocab)
        if case % 4 == 1:
            d2t = d2t.flip(0)
        if case % 5 == 2:
            d2t = d2t + 7
        if case % 7 == 3 and dtype.is_signed:
            d2t[0] = -3
        t2d = torch.zeros(vocab, dtype=torch.bool)
        t2d[used] = True
        if case % 6 == 4:
            t2d = t2d.roll(1)
        d2t = d2t.clamp(min=0).to(dtype) if not dtype.is_signed else d2t.to(dtype)
        path = tmp_path / f"c{case}"
        path.mkdir()
        save_file({"d2t": d2t.contiguous(), "t2d": t2d}, str(path / "model.safetensors"))
        with Checkpoint.open(path) as ckpt:
            present = {n: (i.shape, i.dtype) for n, i in ckpt.tensors.items()}
            drafter = type(
                "D", (), {"pruned_vocab": draft_vocab != vocab, "vocab_size": vocab, "draft_vocab_size": draft_vocab}
            )()
            ours = check_vocab(CheckInput(drafter, present, values=ckpt.read_values))
        got = set()
        for f in ours:
            if f.check == "vocab.d2t_range":
                got.add(f"vocab.d2t_range [{f.message.split('[')[1].split(']')[0]}]")
            elif f.check == "vocab.t2d_count":
                got.add(f"vocab.t2d_count {f.message.split()[2]}")
            else:
                got.add(f.check)
        assert got == _torch_vocab_findings(d2t, t2d, vocab, draft_vocab), case


# -- the end of a run: no interpreter teardown when nothing needs it (cli.exit_now) -------------------------------

# A global whose __del__ prints: the interpreter's teardown runs it, a process ended by os._exit does not.
EXIT_PROBE = """
import atexit, sys
from eaglekit.cli import run

class Probe:
    def __del__(self):
        print("torn down", flush=True)

probe = Probe()
if sys.argv[1] == "atexit":
    atexit.register(print, "atexit ran")
if sys.argv[1] == "thread":  # a non-daemon thread that lives until the main thread ends, however long the run takes
    import threading
    threading.Thread(target=threading.main_thread().join).start()

sys.argv = ["eaglekit", *sys.argv[2:]]
run()
"""


def _probe(mode: str, *args) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
        "HF_HUB_OFFLINE": "1",
    }
    return subprocess.run(
        [sys.executable, "-c", EXIT_PROBE, mode, *map(str, args)], capture_output=True, text=True, env=env, timeout=300
    )


def test_a_light_command_exits_without_teardown_and_keeps_its_output_and_code(drafter):
    done = _probe("plain", "push", drafter, "someone/drafter", "--dry-run", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["dry_run"] is True  # all of it flushed, nothing after it
    assert "torn down" not in done.stdout
    refused = _probe("plain", "inspect", drafter.parent / "missing")
    assert refused.returncode == 2 and "error:" in refused.stderr and "torn down" not in refused.stdout
    from click.testing import CliRunner

    from eaglekit.cli import main

    args = ["validate", str(drafter), "--engine", "vllm==0.32"]
    in_process = CliRunner().invoke(main, args)  # click's own exit code, no exit_now
    findings = _probe("plain", *args)
    assert (
        findings.returncode == in_process.exit_code
        and findings.stdout == in_process.output
        and "torn down" not in findings.stdout
    )


def test_exit_handlers_still_run(drafter):
    """An exit handler (torch's, logging's flush, multiprocessing's) runs as at Python's own exit; only the teardown
    after it is skipped."""
    done = _probe("atexit", "inspect", drafter)
    assert done.returncode == 0, done.stderr
    assert "atexit ran" in done.stdout and "torn down" not in done.stdout


def test_a_running_thread_is_waited_for_by_pythons_own_exit(drafter):
    done = _probe("thread", "inspect", drafter)
    assert done.returncode == 0, done.stderr
    assert "torn down" in done.stdout


def test_pythons_own_exit_for_a_debug_run(drafter, monkeypatch):
    monkeypatch.setenv("EAGLEKIT_DEBUG", "1")
    done = _probe("plain", "inspect", drafter)
    assert done.returncode == 0, done.stderr
    assert "torn down" in done.stdout


def test_cprofile_of_a_command_writes_its_profile(drafter, tmp_path):
    """cProfile (like pdb and trace) runs eaglekit in-process and writes its results after it returns."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
        "HF_HUB_OFFLINE": "1",
    }
    out = tmp_path / "inspect.prof"
    done = subprocess.run(
        [sys.executable, "-m", "cProfile", "-o", str(out), "-m", "eaglekit", "inspect", str(drafter)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert out.stat().st_size > 0


@pytest.mark.parametrize("command", ["verify", "drift"])
def test_a_wrong_path_is_told_before_torch_is_imported(command, drafter, tmp_path):
    """verify and drift import torch (~2 s) and drift loads the target before its drafters (~5 s more): a drafter or
    target that is not there is refused first, in one line, with nothing heavy imported."""
    missing = run(tmp_path, command, tmp_path / "no-drafter", "--target", tmp_path / "target.gguf")
    assert missing["exit"] == 2 and "no-drafter: no such checkpoint directory" in missing["stderr"], missing["stderr"]
    no_target = run(tmp_path, command, drafter, "--target", tmp_path / "target.gguf")
    assert no_target["exit"] == 2 and "target.gguf: no such GGUF file" in no_target["stderr"], no_target["stderr"]
    for result in (missing, no_target):
        assert [m for m in result["modules"] if m in HEAVY] == [], result["modules"]
    if command == "drift":
        compared = run(
            tmp_path, command, drafter, "--target", tmp_path / "target.gguf", "--compare", tmp_path / "no-other"
        )
        assert compared["exit"] == 2 and "no-other: no such checkpoint directory" in compared["stderr"], compared[
            "stderr"
        ]
        assert [m for m in compared["modules"] if m in HEAVY] == []


@pytest.mark.parametrize("command", ["verify", "drift"])
def test_a_target_without_weights_and_a_chain_of_nothing_are_told_before_torch_is_imported(
    command, drafter, config_only_target, tmp_path
):
    """A config-only target, and K or the continuation's length below 1 (verify reported AL 1.000 over 0 drafts for
    ``--max-new-tokens 0`` after loading its target), are refused in one line with nothing heavy imported."""
    weightless = run(tmp_path, command, drafter, "--target", config_only_target)
    assert weightless["exit"] == 2 and "holds no weights" in weightless["stderr"], weightless["stderr"]
    assert f"{command} runs the target model" in weightless["stderr"]
    assert [m for m in weightless["modules"] if m in HEAVY] == [], weightless["modules"]
    for option in ("--num-speculative-tokens", "--max-new-tokens"):
        nothing = run(tmp_path, command, drafter, "--target", config_only_target, option, "0")
        assert nothing["exit"] == 2 and option in nothing["stderr"] and "x>=1" in nothing["stderr"], nothing["stderr"]
        assert [m for m in nothing["modules"] if m in HEAVY] == [], nothing["modules"]
    if command == "verify":  # --hidden-states runs no target: a config is all it needs, so it is not refused for that
        stored = run(
            tmp_path, command, drafter, "--target", config_only_target, "--hidden-states", tmp_path / "no-states.pt"
        )
        assert "holds no weights" not in stored["stderr"], stored["stderr"]
