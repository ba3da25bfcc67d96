"""Hostile and broken inputs: each gets a clean one-line error naming the problem, a non-zero exit, nothing written,
and nothing executed. Plus crash safety (SIGKILL mid-write, a full disk) and resource bounds."""

from __future__ import annotations

import json
import os
import signal
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from eaglekit import dialects

from drafters import Dims, llama_gguf_writer, write_eagle, write_gguf_target, write_specforge, write_vllm
from drafters import edit_tensors as tensors_of

ROOT = Path(__file__).resolve().parent.parent


class Evil:
    """A pickle payload that would create a marker file if unpickling ran code."""

    def __init__(self, marker: str):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def assert_clean_failure(result, *fragments, code=2):  # bad input: could not run
    assert result.exit_code == code, (result.exit_code, result.stdout, result.stderr)
    err = result.stderr
    assert err.startswith("error: ") and err.count("\n") == 1, err
    assert "Traceback" not in err
    for fragment in fragments:
        assert fragment in err, (fragment, err)


def nothing_written(tmp_path: Path, *keep: str) -> None:
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(keep)


# -- pickles -----------------------------------------------------------------------------------------------------


def bin_checkpoint(root: Path, payloads: dict, sharded: bool = False) -> Path:
    src = write_eagle(root, Dims())
    tensors = torch.load(src / "pytorch_model.bin", weights_only=True)
    (src / "pytorch_model.bin").unlink()
    if sharded:
        names = list(tensors)
        first = {n: tensors[n] for n in names[:5]}
        second = {n: tensors[n] for n in names[5:]} | payloads
        torch.save(first, src / "pytorch_model-00001-of-00002.bin")
        torch.save(second, src / "pytorch_model-00002-of-00002.bin")
        weight_map = {n: "pytorch_model-00001-of-00002.bin" for n in first} | {
            n: "pytorch_model-00002-of-00002.bin" for n in second
        }
        (src / "pytorch_model.bin.index.json").write_text(json.dumps({"weight_map": weight_map}))
    else:
        torch.save(tensors | payloads, src / "pytorch_model.bin")
    return src


@pytest.mark.parametrize("sharded", [False, True])
@pytest.mark.parametrize("nested", [False, True])
def test_malicious_pickles_run_nothing(tmp_path, cli, sharded, nested):
    marker = tmp_path / "pwned"
    payload = {"midlayer.evil": {"inner": [Evil(str(marker))]}} if nested else {"midlayer.evil": Evil(str(marker))}
    src = bin_checkpoint(tmp_path / "src", payload, sharded=sharded)
    for args in (("inspect", src), ("validate", src), ("convert", src, tmp_path / "out", "--to", "vllm")):
        result = cli(*args, expect=None)
        assert_clean_failure(result, "refused to unpickle: it asks for posix.system")
        assert "weights_only" not in result.stderr  # torch's advice to turn the guard off is not repeated
    assert not marker.exists()
    assert not (tmp_path / "out").exists()


def test_a_pickle_of_another_protocol_is_refused_in_one_line(tmp_path):
    """A .bin written by pickle.dump (protocol 4, not torch.save's 2): torch printed a two-line warning about the
    protocol above eaglekit's one-line refusal."""
    import pickle

    src = write_vllm(tmp_path / "src", Dims())
    (src / "model.safetensors").unlink()
    with open(src / "pytorch_model.bin", "wb") as f:
        pickle.dump({"fc.weight": Evil(str(tmp_path / "pwned"))}, f, protocol=4)
    done = subprocess.run(
        [sys.executable, "-m", "eaglekit", "inspect", str(src)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)},
    )
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "refused to unpickle" in done.stderr, done.stderr
    assert not (tmp_path / "pwned").exists()


@pytest.mark.parametrize("layout", ["coo", "csr"])
def test_a_sparse_tensor_in_a_pickled_checkpoint_is_a_one_line_error(tmp_path, cli, layout):
    """torch.save of a sparse tensor loads weights-only, and reading it ended in 'internal error: RuntimeError'
    (validate
    --scan, convert)."""
    src = bin_checkpoint(tmp_path / "src", {})
    tensors = torch.load(src / "pytorch_model.bin", weights_only=True)
    tensors["fc.weight"] = tensors["fc.weight"].to_sparse() if layout == "coo" else tensors["fc.weight"].to_sparse_csr()
    torch.save(tensors, src / "pytorch_model.bin")
    for args in (("inspect", src), ("validate", src, "--scan"), ("convert", src, tmp_path / "out", "--to", "vllm")):
        assert_clean_failure(
            cli(*args, expect=None),
            "pytorch_model.bin: tensor 'fc.weight' is stored in the sparse_",
            "expected a dense tensor",
        )
    nothing_written(tmp_path, "src")


# -- lying safetensors headers ------------------------------------------------------------------------------------


def raw_safetensors(root: Path, header: bytes | dict, data: bytes = b"", length: int | None = None) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    if isinstance(header, dict):
        header = json.dumps(header).encode()
    n = len(header) if length is None else length
    (root / "model.safetensors").write_bytes(struct.pack("<Q", n) + header + data)
    (root / "config.json").write_text(json.dumps({"hidden_size": 16}))
    return root


HEADERS = {
    # "\ud800" is half a character: the safetensors library refuses it, and printing the name failed ("internal error")
    "a name that is half a character": (
        lambda r: raw_safetensors(r, {"x\ud800": {"dtype": "F32", "shape": [0], "data_offsets": [0, 0]}}),
        "a string holds a lone surrogate escape (\\ud800), which is not text",
    ),
    "offsets past EOF": (
        lambda r: raw_safetensors(r, {"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}, b"\0" * 8),
        "data runs past the end of the file",
    ),
    "overlapping ranges": (
        lambda r: raw_safetensors(
            r,
            {
                "a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]},
            },
            b"\0" * 12,
        ),
        "overlaps",
    ),
    "huge header length": (lambda r: raw_safetensors(r, b"{}", length=2**62), "exceeds the"),
    "header longer than file": (lambda r: raw_safetensors(r, b"{}", length=4096), "truncated"),
    "non-UTF-8 name": (
        lambda r: raw_safetensors(
            r, b'{"\xff\xfe": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}', b"\0" * 4
        ),
        "not valid UTF-8",
    ),
    "unknown dtype": (
        lambda r: raw_safetensors(r, {"w": {"dtype": "F128", "shape": [1], "data_offsets": [0, 16]}}, b"\0" * 16),
        "unknown dtype 'F128'",
    ),
    "shape/bytes mismatch": (
        lambda r: raw_safetensors(r, {"w": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}}, b"\0" * 8),
        "needs 12",
    ),
    "negative shape": (
        lambda r: raw_safetensors(r, {"w": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 0]}}),
        "non-negative integers",
    ),
    "header not an object": (lambda r: raw_safetensors(r, b"[1, 2]"), "header is not a JSON object"),
    # the safetensors library (and so every engine) refuses these; they used to validate OK
    "gap before a tensor": (
        lambda r: raw_safetensors(r, {"w": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}}, b"\0" * 8),
        "leaving a gap",
    ),
    "bytes no tensor uses": (
        lambda r: raw_safetensors(r, {"w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}, b"\0" * 68),
        "cover 4 of the data area's 68 bytes",
    ),
    "__metadata__ a list": (
        lambda r: raw_safetensors(
            r, {"__metadata__": [], "w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}, b"\0" * 4
        ),
        "__metadata__ must map",
    ),
    # took minutes and ended in an internal error (Python's int-to-str digit limit)
    "thousands of dimensions": (
        lambda r: raw_safetensors(
            r, {"w": {"dtype": "F32", "shape": [2**62] * 5000, "data_offsets": [0, 4]}}, b"\0" * 4
        ),
        "5000 dimensions",
    ),
    "an integer of 5000 digits": (
        lambda r: raw_safetensors(
            r, b'{"w": {"dtype": "F32", "shape": [1], "data_offsets": [0, ' + b"9" * 5000 + b"]}}", b"\0" * 4
        ),
        "not valid JSON here",
    ),
    "zero-byte file": (
        lambda r: (
            r.mkdir(parents=True),
            (r / "model.safetensors").write_bytes(b""),
            (r / "config.json").write_text("{}"),
            r,
        )[-1],
        "file is empty (0 bytes)",
    ),
    "shorter than the length": (
        lambda r: (
            r.mkdir(parents=True),
            (r / "model.safetensors").write_bytes(b"\1\0"),
            (r / "config.json").write_text("{}"),
            r,
        )[-1],
        "truncated",
    ),
}


@pytest.mark.parametrize("case", list(HEADERS))
def test_lying_headers(tmp_path, cli, case):
    make, fragment = HEADERS[case]
    src = make(tmp_path / "src")
    assert_clean_failure(cli("inspect", src, expect=None), "model.safetensors", fragment)
    assert_clean_failure(cli("convert", src, tmp_path / "out", "--to", "vllm", expect=None), fragment)
    nothing_written(tmp_path, "src")


def test_truncated_real_checkpoint(tmp_path, cli):
    src = write_vllm(tmp_path / "src", Dims())
    path = src / "model.safetensors"
    os.truncate(path, path.stat().st_size // 2)
    assert_clean_failure(
        cli("convert", src, tmp_path / "out", "--to", "speculators", expect=None), "data runs past the end of the file"
    )
    nothing_written(tmp_path, "src")


# -- escapes -----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["config.json", "model.safetensors"])
def test_a_fifo_in_the_checkpoint_is_refused_not_waited_on(tmp_path, name):
    """Opening a FIFO for reading waits for a writer: inspect and convert hung on one named config.json or
    model.safetensors."""
    src = write_vllm(tmp_path / "src", Dims())
    (src / name).unlink()
    os.mkfifo(src / name)
    for args in (["inspect", src], ["convert", src, tmp_path / "out", "--to", "vllm"]):
        done = subprocess.run(
            [sys.executable, "-m", "eaglekit", *map(str, args)],
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)},
        )
        assert (
            done.returncode == 2
            and done.stderr
            == f"error: {src / name}: not a regular file, expected"
            f" {'a JSON file' if name.endswith('.json') else 'a safetensors file'}\n"
        ), done.stderr
    assert not (tmp_path / "out").exists()


def test_symlink_pointing_outside_the_checkpoint(tmp_path, cli):
    outside = write_vllm(tmp_path / "outside", Dims())
    src = tmp_path / "src"
    src.mkdir()
    (src / "config.json").write_text((outside / "config.json").read_text())
    (src / "model.safetensors").symlink_to(outside / "model.safetensors")
    assert_clean_failure(cli("inspect", src, expect=None), "symlink that points outside the checkpoint")


@pytest.mark.parametrize("entry", ["../outside/model.safetensors", "/etc/passwd", "sub/../../x.safetensors"])
def test_index_leaving_the_directory(tmp_path, cli, entry):
    src = write_vllm(tmp_path / "src", Dims())
    write_vllm(tmp_path / "outside", Dims())  # the file the index points at exists: only the escape is wrong
    (src / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"fc.weight": entry}}))
    result = cli("inspect", src, expect=None)
    assert_clean_failure(result)
    assert "leaves the checkpoint directory" in result.stderr or "not a relative file name" in result.stderr


# -- configs -----------------------------------------------------------------------------------------------------

CONFIGS = {
    "not JSON": (b"{hidden_size: 16", "not valid JSON"),
    "deeply nested": (b"[" * 100000 + b"]" * 100000, "nested too deeply"),
    "NaN value": (b'{"hidden_size": NaN}', "NaN is not valid JSON"),
    "duplicate key": (b'{"hidden_size": 16, "hidden_size": 32}', "duplicate key 'hidden_size'"),
    "wrong type": (None, "must be an integer"),
    "not an object": (b"[]", "expected a JSON object"),
    # an integer written out past a float's range: math.isfinite raised OverflowError ("internal error")
    "a number past float's range": ("rope_theta", "rope_theta must be a finite number, got 1000000000"),
}


@pytest.mark.parametrize("case", list(CONFIGS))
def test_bad_configs(tmp_path, cli, case):
    raw, fragment = CONFIGS[case]
    src = write_vllm(tmp_path / "src", Dims())
    if not isinstance(raw, bytes):
        cfg = json.loads((src / "config.json").read_text())
        if raw is None:
            cfg["num_attention_heads"] = "two"
        else:
            cfg[raw] = 10**400
        raw = json.dumps(cfg).encode()
    (src / "config.json").write_bytes(raw)
    assert_clean_failure(cli("inspect", src, expect=None), "config.json", fragment)
    assert_clean_failure(cli("convert", src, tmp_path / "out", "--to", "vllm", expect=None), fragment)
    nothing_written(tmp_path, "src")


def test_a_rope_factor_past_floats_range_is_a_finding(tmp_path, cli):
    """The rope check called math.isfinite on a 400-digit integer and convert ended in "internal error"."""
    src = write_vllm(tmp_path / "src", Dims())
    cfg = json.loads((src / "config.json").read_text())
    cfg["rope_scaling"] = {"rope_type": "linear", "factor": 10**400}
    (src / "config.json").write_text(json.dumps(cfg))
    said = json.loads(cli("validate", src, "--json", expect=1).stdout)["findings"]
    assert any(
        f["check"] == "rope.parameters"
        and "factor is 1000000000" in f["message"]
        and f["message"].endswith("expected a number above 0")
        for f in said
    ), said
    refused = cli("convert", src, tmp_path / "out", "--to", "vllm", expect=1)
    assert refused.stderr.startswith("error: refusing to write") and "internal error" not in refused.stderr
    nothing_written(tmp_path, "src")


def test_enormous_config_is_refused_without_reading_it(tmp_path, cli):
    src = write_vllm(tmp_path / "src", Dims())
    with open(src / "config.json", "wb") as f:
        f.truncate(65 * 2**20)  # sparse: 65 MB of zeros
    start = time.perf_counter()
    assert_clean_failure(cli("inspect", src, expect=None), "too large for a JSON file")
    assert time.perf_counter() - start < 2


def test_enormous_declared_tensor_is_refused_in_bounded_time_and_memory(tmp_path):
    src = raw_safetensors(
        tmp_path / "src", {"w": {"dtype": "F32", "shape": [2**40, 2**40], "data_offsets": [0, 16]}}, b"\0" * 16
    )
    code = f"""
import resource, sys, time
resource.setrlimit(resource.RLIMIT_AS, (2 * 2**30, 2 * 2**30))
from eaglekit.cli import main
sys.argv = ["eaglekit", "inspect", {str(src)!r}]
main()
"""
    start = time.perf_counter()
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert p.returncode == 2 and "needs" in p.stderr, p.stderr
    assert time.perf_counter() - start < 60


# -- crash safety ----------------------------------------------------------------------------------------------------


def big_source(root: Path) -> Path:
    """A drafter of ~60 MB in many tensors, so a conversion writes many shards."""
    return write_vllm(root, Dims(H=512, T=512, I=2048, V=4096, Vd=1024, heads=8, kv_heads=2, head_dim=64, layers=2))


def temporaries(root: Path) -> list[Path]:
    return [p for p in root.iterdir() if p.name.startswith(".out.eaglekit-tmp-")]


def run_and_kill(cmd: list[str], when) -> bool:
    """Start a conversion and SIGKILL it as soon as ``when(own)`` holds, where ``own`` lists the temporaries of this
    run alone (their names carry its PID; an earlier killed run's are removed by this one meanwhile); True if it was
    killed, not finished. A temporary may vanish while it is looked at (renamed into place, or cleaned up): that
    moment simply did not hold."""
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ROOT)
    out_parent = Path(cmd[cmd.index("convert") + 2]).parent
    mark = f".out.eaglekit-tmp-{proc.pid}-"
    deadline = time.monotonic() + 120
    while proc.poll() is None and time.monotonic() < deadline:
        try:
            held = when([p for p in out_parent.iterdir() if p.name.startswith(mark)])
        except FileNotFoundError:
            held = False
        if held:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            return True
        time.sleep(0.001)
    proc.wait()
    return False


def test_sigkill_mid_write_never_leaves_a_complete_looking_output(tmp_path):
    src = big_source(tmp_path / "src")
    out = tmp_path / "out"
    cmd = [
        sys.executable,
        "-m",
        "eaglekit",
        "convert",
        str(src),
        str(out),
        "--to",
        "speculators",
        "--max-shard-size",
        "2MB",
    ]
    files_in_temp = lambda n: lambda own: any(len(list(t.iterdir())) >= n for t in own)
    moments = {
        "temporary directory just created": files_in_temp(0),
        "first shard being written": files_in_temp(1),
        "several shards written": files_in_temp(4),
        "config.json written, rename pending": lambda own: any((t / "config.json").exists() for t in own),
    }
    for name, when in moments.items():
        killed = run_and_kill(cmd, when)
        if out.exists():  # only a finished conversion renames into place, and it is then whole
            assert not killed or name.startswith("config"), name
            with dialects.load(out) as loaded:
                assert loaded.dialect == "speculators"
            subprocess.run(["rm", "-rf", str(out)], check=True)
        else:
            assert killed, f"{name}: the conversion neither finished nor was killed"
            assert temporaries(tmp_path), f"{name}: the killed run left its hidden temporary (cleaned by the next run)"
    subprocess.run(cmd, check=True, capture_output=True, cwd=ROOT)  # re-running succeeds, and cleans up after the dead
    assert (out / "config.json").exists() and temporaries(tmp_path) == []


def test_sigterm_mid_write_unwinds_and_leaves_nothing(tmp_path):
    """SIGTERM (`timeout`, `docker stop`) killed the process where it stood: its ~100 MB hidden temporary stayed until a
    later run to the same OUT swept it. It now unwinds as Ctrl-C does: exit 143, "terminated", nothing left beside OUT.
    """
    src = write_vllm(tmp_path / "src", Dims())
    out = tmp_path / "out"
    script = f"""
import os, signal, sys
import eaglekit.convert as convert
from eaglekit.cli import run
written = convert.write_checkpoint_tensors
def write_then_be_terminated(*args, **kwargs):
    files = written(*args, **kwargs)
    os.kill(os.getpid(), signal.SIGTERM)
    return files
convert.write_checkpoint_tensors = write_then_be_terminated
sys.argv = ["eaglekit", "convert", {str(src)!r}, {str(out)!r}, "--to", "speculators"]
run()
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 143 and done.stderr.strip() == "terminated", done.stderr
    assert not out.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["src"]


def test_disk_full_leaves_nothing(tmp_path):
    src = big_source(tmp_path / "src")
    out = tmp_path / "out"
    code = f"""
import resource, signal, sys
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit then fails with EFBIG, like a full disk
resource.setrlimit(resource.RLIMIT_FSIZE, (3 * 2**20, 3 * 2**20))
from eaglekit.cli import main
sys.argv = ["eaglekit", "convert", {str(src)!r}, {str(out)!r}, "--to", "vllm"]
main()
"""
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert p.returncode == 1, p.stderr
    assert p.stderr.startswith("error: ") and "File too large" in p.stderr, p.stderr
    nothing_written(tmp_path, "src")


# -- a newcomer's mistakes get one line that says what to do ------------------------------------------------------


def test_a_base_model_is_called_one(tmp_path, cli):
    from drafters import write_tiny_target

    base = write_tiny_target(tmp_path / "base", layers=12)
    for command in ("inspect", "validate"):
        assert_clean_failure(
            cli(command, base, expect=None),
            "is a base model (LlamaForCausalLM, 12 layers",
            "did you mean to pass it as --target?",
        )


def test_a_base_model_with_a_malformed_config_is_still_called_one(tmp_path, cli):
    """Found by tests/test_properties.py: `architectures` that is not a list of names crashed the message itself."""
    base = tmp_path / "base"
    base.mkdir()
    save_file({"layers.3.mlp.up_proj.weight": torch.zeros(2)}, str(base / "model.safetensors"))
    for config, said in (
        ({"architectures": {"architectures": None}}, "(a causal LM, many layers"),
        ({"architectures": [7], "num_hidden_layers": "30"}, "(a causal LM, many layers"),
        ({"architectures": ["LlamaForCausalLM"], "num_hidden_layers": 30}, "(LlamaForCausalLM, 30 layers"),
    ):
        (base / "config.json").write_text(json.dumps(config))
        assert_clean_failure(cli("inspect", base, expect=None), "is a base model " + said)


def test_pointing_at_a_file_suggests_what_to_give(tmp_path, cli):
    src = write_vllm(tmp_path / "src", Dims())
    assert_clean_failure(
        cli("inspect", src / "model.safetensors", expect=None), f"got a file (give its directory: {src})"
    )
    (tmp_path / "t.gguf").write_bytes(b"GGUF")  # a GGUF file is read as llama.cpp's drafter format: this is none
    assert_clean_failure(cli("inspect", tmp_path / "t.gguf", expect=None), "not a GGUF file (4 bytes")
    write_gguf_target(tmp_path / "target.gguf", Dims())
    assert_clean_failure(cli("inspect", tmp_path / "target.gguf", expect=None), "is a target model", "--target?")


def test_a_drafter_list_that_is_not_utf8_is_a_usage_error(tmp_path, cli):
    listing = tmp_path / "drafters.txt"
    listing.write_bytes(b"./a\n\xff\xfe latin-1 \xe9\n")
    assert_clean_failure(
        cli("validate", "--from-file", listing, expect=None),
        f"--from-file {listing}: not UTF-8 text (byte 0xff at offset 4)",
    )


def test_a_misspelt_dialect_gets_a_suggestion(tmp_path, cli):
    src = write_vllm(tmp_path / "src", Dims())
    assert_clean_failure(
        cli("convert", src, tmp_path / "o", "--to", "speculator", expect=None), "did you mean 'speculators'?"
    )


def test_option_values_are_checked_before_anything_loads(tmp_path, cli):
    src = write_vllm(tmp_path / "src", Dims())
    assert_clean_failure(cli("verify", src, "--target", tmp_path, "--device", "gpu", expect=None), "--device 'gpu'")
    assert_clean_failure(
        cli("verify", src, "--target", tmp_path, "--num-prompts", "0", expect=None),
        "--num-prompts",
        "see `eaglekit verify --help`",
    )
    assert_clean_failure(cli("verify", src, expect=None), "Missing option '--target'")


@pytest.mark.parametrize(
    "args, named",
    [
        (["validate", "SRC", "--target", ""], "--target: empty; give a path or a Hub id"),
        (["validate", ""], "PATHS: empty"),
        (["inspect", " "], "PATH: empty"),
        (["convert", "SRC", "", "--to", "vllm"], "OUT: empty"),
        (["push", "", "me/x", "--dry-run"], "PATH: empty"),
        (["verify", "SRC", "--target", "T", "--prompts", ""], "--prompts: empty; give a path"),
        (["drift", "SRC", "--target", "T", "--compare", ""], "--compare: empty"),
    ],
)
def test_an_empty_path_is_refused_not_read_as_none_or_here(tmp_path, cli, args, named):
    """`--target ''` was read as no target (validate said OK without the target's checks), `--prompts ''` as the
    built-in prompts, and an empty PATH or OUT as the current directory."""
    src = write_vllm(tmp_path / "src", Dims())
    argv = [str(src) if a == "SRC" else str(tmp_path) if a == "T" else a for a in args]
    assert_clean_failure(cli(*argv, expect=None), named)


def test_forcing_a_dialect_that_the_files_contradict_is_said(tmp_path, cli):
    from drafters import write_specforge

    src = write_specforge(tmp_path / "src", Dims(fc_norm=True), norm_output=True)
    text = cli("inspect", src, "--from", "nemo").stdout
    assert "dialect.override" in text and "read as automodel, as asked, though the files look like sglang" in text


def test_upgrade_3_on_an_eagle_3_drafter_has_nothing_to_do(tmp_path, cli):
    src = write_vllm(tmp_path / "src", Dims())
    assert_clean_failure(
        cli("convert", src, tmp_path / "o", "--to", "vllm", "--upgrade", "3", expect=None),
        "already EAGLE 3, nothing to do",
    )


# -- a config.json alone as --target (issue 20, item 17) --------------------------------------------------------------


def test_a_config_file_is_a_config_only_target(tmp_path, cli, target_dir):
    config = target_dir / "config.json"
    # validate reads it: ids beyond its 8 layers are an error, which only its num_hidden_layers can tell
    far = write_vllm(tmp_path / "far", Dims(), ids=[2, 4, 12])
    result = cli("validate", far, "--target", config, expect=1)
    assert f"with target {config}" in result.stdout and "[aux." in result.stdout and "12" in result.stdout
    # convert takes the default ids from it; it writes no path of this machine as the verifier (issue 53, item 9), and
    # its serve line names the config's directory, not the file
    src = write_eagle(tmp_path / "src", Dims(), bin_file=False)
    out = tmp_path / "out"
    result = cli("convert", src, out, "--to", "vllm", "--target", config)
    written = json.loads((out / "config.json").read_text())
    assert written["eagle_aux_hidden_state_layer_ids"] == [2, 4, 5]  # 2, L//2, L-3 for L = 8
    assert str(target_dir) not in json.dumps(written) and "verifier" not in written["eaglekit"]
    assert f"vllm serve {target_dir} " in result.stdout and "config.json --spec" not in result.stdout
    # a mistyped config file is one line naming it, not a Hub lookup; one that is not a JSON object names the file too
    assert_clean_failure(
        cli("validate", far, "--target", target_dir / "confg.json", expect=None),
        f"--target {target_dir / 'confg.json'}: no such config file",
    )
    (tmp_path / "list.json").write_text("[1, 2]")
    assert_clean_failure(
        cli("validate", far, "--target", tmp_path / "list.json", expect=None), str(tmp_path / "list.json")
    )


@pytest.mark.parametrize("command", ["verify", "drift"])
def test_running_the_target_needs_its_weights(tmp_path, cli, target_dir, command):
    src = write_vllm(tmp_path / "src", Dims())
    started = time.perf_counter()
    result = cli(command, src, "--target", target_dir / "config.json", expect=None)
    assert_clean_failure(
        result,
        "is a config file, with no weights",
        f"{command} runs the target model, so it needs the weights",
        "give the model's directory",
    )
    assert time.perf_counter() - started < 5  # refused before anything loads
    result = cli(command, src, "--target", target_dir, expect=None)  # a directory with config.json alone
    assert_clean_failure(result, f"--target {target_dir}: holds no weights", f"{command} runs the target model")


@pytest.mark.parametrize("command", ["verify", "drift"])
def test_a_target_that_cannot_run_is_told_before_it_loads(tmp_path, cli, target_dir, command):
    """A target whose safetensors file is not one, and a drafter given as the target, ended in transformers' errors
    ("internal error: SafetensorError", "RuntimeError: You set `ignore_mismatched_sizes`") after 5-8 s of imports."""
    src = write_vllm(tmp_path / "src", Dims())
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "config.json").write_bytes((target_dir / "config.json").read_bytes())
    (broken / "model.safetensors").write_text("junk\n")
    started = time.perf_counter()
    assert_clean_failure(
        cli(command, src, "--target", broken, expect=None),
        f"--target {broken}: model.safetensors: truncated (5 bytes, shorter than the 8-byte header length)",
    )
    assert_clean_failure(cli(command, src, "--target", src, expect=None), f"--target {src}: this is an EAGLE drafter")
    assert time.perf_counter() - started < 5  # refused before anything loads


def test_a_drafter_given_as_the_target_is_told_by_every_command_that_reads_a_target(tmp_path, cli):
    """validate and convert read a --target for its config alone, and read a drafter's as a 1-layer target: "aux layer
    ids outside 0..1", exit 1. A drafter is one by its config's keys (its config.json alone too) or its tensors."""
    src = write_vllm(tmp_path / "src", Dims())
    other = write_specforge(tmp_path / "other", Dims())
    for target in (other, other / "config.json"):
        for args in (["validate", src], ["convert", src, tmp_path / "out", "--to", "sglang"]):
            assert_clean_failure(
                cli(*args, "--target", target, expect=None),
                f"--target {target}: this is an EAGLE drafter (its config states",
            )
    bare = tmp_path / "bare"  # a drafter's tensors under a config that states nothing a drafter's does
    bare.mkdir()
    (bare / "model.safetensors").write_bytes((other / "model.safetensors").read_bytes())
    (bare / "config.json").write_text(
        json.dumps(
            {
                k: v
                for k, v in json.loads((other / "config.json").read_text()).items()
                if k not in ("draft_vocab_size", "eagle_config")
            }
        )
    )
    assert_clean_failure(
        cli("validate", src, "--target", bare, expect=None),
        "this is an EAGLE drafter (a fusion layer and no decoder stack)",
    )
    assert not (tmp_path / "out").exists()
    # a target of its own MTP head (Qwen3.5: mtp.fc.weight, its layers under model.language_model.) is no drafter, nor
    # is a small one with an MTP head, nor GPT-2's c_fc
    for name, names in (
        ("qwen35", [f"model.language_model.layers.{i}.mlp.up_proj.weight" for i in range(8)] + ["mtp.fc.weight"]),
        ("tiny-mtp", ["model.layers.0.mlp.up_proj.weight", "model.layers.1.mlp.up_proj.weight", "mtp.fc.weight"]),
        ("gpt2", [f"h.{i}.mlp.c_fc.weight" for i in range(2)]),
    ):
        target = tmp_path / name
        target.mkdir()
        save_file({n: torch.zeros(2, 2) for n in names}, target / "model.safetensors")
        (target / "config.json").write_text(
            json.dumps(
                {
                    "model_type": "llama",
                    "num_hidden_layers": 8,
                    "hidden_size": 16,
                    "vocab_size": 64,
                    "num_attention_heads": 2,
                }
            )
        )
        assert "EAGLE drafter" not in cli("validate", src, "--target", target, expect=None).stderr, name


def _cache_config_only(tmp_path, monkeypatch, target_dir) -> Path:
    """What `hf download org/target config.json` leaves: a Hub cache snapshot holding config.json alone."""
    from huggingface_hub import constants

    cache = tmp_path / "hub"
    snapshot = cache / "models--org--target" / "snapshots" / ("b" * 40)
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_bytes((target_dir / "config.json").read_bytes())
    (cache / "models--org--target" / "refs").mkdir()
    (cache / "models--org--target" / "refs" / "main").write_text("b" * 40)
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    return snapshot


def test_hub_id_hint_asks_only_for_what_the_command_needs(tmp_path, monkeypatch, cli, target_dir):
    snapshot = _cache_config_only(tmp_path, monkeypatch, target_dir)
    src = write_vllm(tmp_path / "src", Dims())
    for args in (
        ("validate", src),
        ("convert", src, tmp_path / "o", "--to", "speculators"),
    ):  # the config is all they read
        assert_clean_failure(
            cli(*args, "--target", "org/missing", expect=None),
            "fetch it first with `hf download org/missing config.json`",
        )
    assert_clean_failure(
        cli("verify", src, "--target", "org/missing", expect=None), "fetch it first with `hf download org/missing`)"
    )
    # after `hf download org/target config.json`: the Hub id serves validate and convert, and verify says what is
    # missing
    assert "with target org/target" in cli("validate", src, "--target", "org/target", expect=None).stdout
    assert_clean_failure(
        cli("verify", src, "--target", "org/target", expect=None), "holds no weights", "`hf download org/target`"
    )
    # the path hf download prints, given as the target: the drafter records the Hub id, not a cache path
    out = tmp_path / "out"
    cli(
        "convert",
        write_eagle(tmp_path / "eagle", Dims(), bin_file=False),
        out,
        "--to",
        "vllm",
        "--target",
        snapshot / "config.json",
    )
    assert json.loads((out / "config.json").read_text())["eaglekit"]["verifier"] == "org/target"


def test_a_weights_file_that_is_a_symlink_loop_is_a_one_line_error(tmp_path, cli):
    src = write_vllm(tmp_path / "src", Dims())
    (src / "model.safetensors").unlink()
    os.symlink("model.safetensors", src / "model.safetensors")  # points at itself
    assert_clean_failure(cli("inspect", src, expect=None), "symlink loop")


@pytest.mark.parametrize("name", ["out[1]", "a?", "star*"])
def test_a_killed_runs_leftovers_are_swept_whatever_the_output_is_named(tmp_path, cli, name):
    """The sweep globbed the output's name unescaped: 'out[1]' never matched its own leftovers."""
    src = write_vllm(tmp_path / "src", Dims())
    stale = tmp_path / f".{name}.eaglekit-tmp-999999-abcd"
    stale.mkdir()
    other = tmp_path / ".a1.eaglekit-tmp-999999-abcd"  # 'a?' must not sweep another output's leftovers
    other.mkdir()
    cli("convert", src, tmp_path / name, "--to", "vllm")
    assert not stale.exists() and other.exists() and (tmp_path / name / "config.json").exists()


def test_a_mount_point_output_is_refused_and_leaves_nothing(tmp_path, cli, monkeypatch):
    """A mounted volume cannot be renamed aside (EBUSY): --force used to fail half-way and leave a hidden folder."""
    from eaglekit.io import atomic

    src = write_vllm(tmp_path / "src", Dims())
    out = tmp_path / "volume"
    cli("convert", src, out, "--to", "vllm")
    before = sorted(p.name for p in tmp_path.iterdir())
    real = atomic.os.path.ismount
    monkeypatch.setattr(atomic.os.path, "ismount", lambda p: str(p) == str(out) or real(p))
    result = cli("convert", src, out, "--to", "vllm", "--force", expect=None)
    assert result.exit_code != 0 and "mount point" in result.stderr and "Traceback" not in result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == before and (out / "config.json").exists()


def test_an_output_under_a_file_is_refused_by_the_dry_run_too(tmp_path, cli):
    """OUT below a file: the dry run said the conversion would create it, then the run failed with 'File exists'
    (exit 1)."""
    src = write_vllm(tmp_path / "src", Dims())
    (tmp_path / "afile").write_text("x")
    out = tmp_path / "afile" / "out"
    planned = json.loads(cli("convert", src, out, "--to", "vllm", "--dry-run", "--json").stdout)
    assert planned["destination"]["refusal"] == f"{out}: cannot be created: {tmp_path / 'afile'} is not a directory"
    run = cli("convert", src, out, "--to", "vllm", expect=2)
    assert run.stderr == f"error: {planned['destination']['refusal']}\n"


def test_a_refused_conversion_leaves_no_folder_it_made(tmp_path, cli, monkeypatch):
    """The folders above OUT are made before the tensors are written: a conversion refused while writing (a value
    float16 cannot hold) left them behind after saying "nothing written"; an output folder that cannot be made is
    one line naming OUT, not the hidden temporary."""
    from eaglekit.io import atomic

    src = tensors_of(write_vllm(tmp_path / "src", Dims()), lambda t: t["fc.weight"].__setitem__((0, 0), 1e10))
    result = cli("convert", src, tmp_path / "a" / "b" / "out", "--to", "vllm", "--dtype", "float16", expect=2)
    assert "beyond float16's range" in result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["src"]

    def refuse(*args, **kwargs):
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(atomic.tempfile, "mkdtemp", refuse)
    result = cli("convert", src, tmp_path / "a" / "out", "--to", "vllm", expect=2)
    assert result.stderr == f"error: {tmp_path / 'a' / 'out'}: cannot be written there: Operation not permitted\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["src"]


def test_a_tokenizer_that_is_there_but_does_not_load_is_one_line(tmp_path, cli):
    """transformers' OSError / ValueError for files that hold no tokenizer it can build: no tokenizer (input_ids prompts
    run). A tokenizer file that does not parse (a JSONDecodeError, a ValueError too, had silently dropped the
    tokenizer's eos and chat template; a KeyError from a truncated tokenizer.json was an internal error): one line
    naming the target."""
    import shutil

    from drafters import write_tiny_target
    from tiny_pair import add_char_tokenizer

    target = write_tiny_target(tmp_path / "target", layers=8, hidden=64, vocab=96, heads=2)
    drafter = write_vllm(
        tmp_path / "drafter", Dims(H=64, T=64, V=96, Vd=96, heads=2, kv_heads=1, head_dim=32, I=96), ids=[2, 4, 5]
    )
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"input_ids": [3, 4, 5]}\n')
    base = ("verify", drafter, "--target", target, "--prompts", prompts, "--max-new-tokens", 2)
    assert cli(*base).exit_code == 0  # no tokenizer files: no tokenizer
    add_char_tokenizer(target)
    (target / "tokenizer_config.json").rename(tmp_path / "tokenizer_config.json")
    assert cli(*base).exit_code == 0  # a tokenizer.json alone loads
    for name, text, said in (
        ("tokenizer.json", '{"version": "1.0"}', "KeyError"),
        ("tokenizer.json", "{not json", "JSONDecodeError"),
        ("tokenizer_config.json", "[1, 2]", "AttributeError"),
    ):
        broken = tmp_path / f"broken-{said}"
        shutil.copytree(target, broken)
        (broken / name).write_text(text)
        assert_clean_failure(
            cli(*base[:3], broken, *base[4:], expect=None), f"--target {broken}: its tokenizer does not load ({said}"
        )


def test_a_gguf_target_without_the_gguf_package_is_one_line(tmp_path, monkeypatch):
    """The missing gguf package is a MissingDependencyError (a local import in TargetModel.load's tokenizer clause once
    made that name local to the whole function: an UnboundLocalError here)."""
    from eaglekit.errors import MissingDependencyError
    from eaglekit.target import read_target_config
    from eaglekit.target.runner import TargetModel

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # no dequantised entry: the file itself is read
    monkeypatch.setitem(sys.modules, "gguf", None)  # import gguf raises ImportError
    fixture = ROOT / "tests" / "fixtures" / "gguf_rope" / "yarn-rope.gguf"
    with pytest.raises(MissingDependencyError, match="needs the gguf package"):
        TargetModel.load(read_target_config(str(fixture)))


def test_a_truncated_gguf_target_is_refused_before_it_loads(tmp_path, cli, monkeypatch):
    """A GGUF file cut short (an interrupted download): verify and drift loaded it and failed in gguf's reshape of the
    first tensor past the end (internal error, exit 1). Each tensor's extent is checked against the file's size, with
    the bytes per block of each ggml type as the gguf package gives them (here Q8_0, F16 and F32)."""
    gguf = pytest.importorskip("gguf")
    import numpy as np
    from gguf.quants import quantize

    from eaglekit.target import read_target_config
    from eaglekit.target.runner import TargetModel

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # no dequantised entry: the file itself is read
    d = Dims()
    whole = tmp_path / "target.gguf"
    writer = llama_gguf_writer(whole, d)
    embed = np.random.default_rng(0).standard_normal((d.V, d.T)).astype(np.float32)
    up = np.random.default_rng(1).standard_normal((4, 64)).astype(np.float32)  # Q8_0 packs blocks of 32 values
    writer.add_tensor(
        "blk.0.ffn_up.weight", quantize(up, gguf.GGMLQuantizationType.Q8_0), raw_dtype=gguf.GGMLQuantizationType.Q8_0
    )
    writer.add_tensor("output_norm.weight", np.ones(d.T, dtype=np.float16))
    writer.add_tensor("token_embd.weight", embed)  # F32, the last: the one a cut reaches first
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    read_target_config(str(whole), weights=True)  # the whole file: every extent inside it
    data = whole.read_bytes()
    reader = gguf.GGUFReader(str(whole))
    last = max(reader.tensors, key=lambda t: t.data_offset)
    assert last.data_offset + last.n_bytes == len(
        data
    )  # the file ends where its last tensor does, as the check computes

    def never(*a, **kw):
        raise AssertionError("the target was loaded")

    monkeypatch.setattr(TargetModel, "load", never)
    drafter = write_vllm(tmp_path / "drafter", d)
    for cut, tensor in ((1, "token_embd.weight"), (len(data) - last.data_offset + 1, "output_norm.weight")):
        short = tmp_path / f"short-{cut}.gguf"
        short.write_bytes(data[:-cut])
        for command in ("verify", "drift"):
            assert_clean_failure(
                cli(command, drafter, "--target", short, expect=None),
                f"{short}: GGUF tensor '{tensor}' runs past the end of the file",
            )


def test_names_from_a_checkpoint_cannot_forge_or_steer_the_output(tmp_path, cli):
    """A tensor named ``x\\nresult: OK (0 errors)`` printed a second, false verdict line in validate's output, and an
    escape sequence in a name reached the terminal: names from a file are shown with such characters escaped."""
    name = "midlayer.x\nresult: OK (0 errors)\x1b[2J\u2028\u200f\u061c"  # the last two: bidi marks that reorder a line
    src = tensors_of(write_vllm(tmp_path / "src", Dims()), lambda t: t.update({name: torch.zeros(2)}))
    out = cli("validate", src, expect=1).stdout
    assert "result: OK (0 errors)" not in out.splitlines() and not any(c in out for c in "\x1b\u2028\u200f\u061c")
    assert "unknown tensor midlayer.x\\nresult: OK (0 errors)\\x1b[2J\\u2028\\u200f\\u061c" in out
    assert "\\x1b[2J" in cli("inspect", src).stdout
    err = cli("convert", src, tmp_path / "out", "--to", "vllm", expect=1).stderr
    assert err.count("\n") == 1 and "\\x1b[2J" in err and "\x1b" not in err
    assert (
        json.loads(cli("validate", src, "--json", expect=1).stdout)["findings"][0]["subject"] == name
    )  # JSON keeps it exact


def test_config_keys_and_notes_cannot_forge_lines_in_convert_or_push(tmp_path, cli):
    """convert --dry-run printed config key names raw, and push put a note's newline into the card (a note could add a
    section to the published README)."""
    src = write_vllm(tmp_path / "src", Dims())
    cfg = json.loads((src / "config.json").read_text())
    cfg["evil\nFORGED-KEY-LINE"] = 1
    (src / "config.json").write_text(json.dumps(cfg))
    out = cli("convert", src, tmp_path / "out", "--to", "sglang", "--dry-run").stdout
    assert not any(line.startswith("FORGED") for line in out.splitlines()) and "evil\\nFORGED-KEY-LINE" in out
    from eaglekit.convert import ConvertOptions, convert

    converted = tmp_path / "converted"
    convert(write_vllm(tmp_path / "src2", Dims()), converted, ConvertOptions(to="vllm", aux_layers=(2, 4, 5)))
    cfg = json.loads((converted / "config.json").read_text())
    cfg["eaglekit"]["notes"] = ["a note\n## Verification\nall passed \x1b[31mRED"]
    (converted / "config.json").write_text(json.dumps(cfg))
    card = cli("push", converted, "org/x", "--dry-run").stdout
    assert "## Verification" not in card.splitlines() and "- a note\\n## Verification\\nall passed \\x1b[31mRED" in card
    cfg["eaglekit"]["source_repo"] = "org/src\n## Forged section"  # any value the card quotes from the drafter's files
    (converted / "config.json").write_text(json.dumps(cfg))
    card = cli("push", converted, "org/x", "--dry-run").stdout
    assert "## Forged section" not in card.splitlines() and "Hub repo" not in card  # no Hub id: not quoted at all
    # a verifier's name reaches convert's serve line
    cfg["eaglekit"]["verifier"] = "org/tgt\nFORGED-VERIFIER"
    (converted / "config.json").write_text(json.dumps(cfg))
    out = cli("convert", converted, tmp_path / "again", "--to", "vllm").stdout
    assert not any(line.startswith("FORGED") for line in out.splitlines()) and "org/tgt\\nFORGED-VERIFIER" in out


@pytest.mark.parametrize("command", ["inspect", "convert", "validate", "verify", "drift", "push", "engines"])
def test_help_never_shows_an_unset_bound(cli, command):
    """`verify --help` showed `[x<=None]` after --min-acceptance-length: a finite float with no bounds has no range
    to show."""
    text = cli(command, "--help").stdout
    assert "None" not in text


# -- found by fuzzing (2026-11-27): each ended in an internal error, a wrong exit code, or a fabricated figure --------


def _indexed(tmp_path: Path, entry: str) -> Path:
    """A one-shard indexed drafter whose d2t entry in the index is ``entry``."""
    src = write_vllm(tmp_path / "indexed", Dims())
    (src / "model.safetensors").rename(src / "model-00001-of-00001.safetensors")
    from safetensors import safe_open

    with safe_open(str(src / "model-00001-of-00001.safetensors"), framework="pt") as f:
        weight_map = {name: "model-00001-of-00001.safetensors" for name in f.keys()}
    weight_map["d2t"] = entry
    (src / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    return src


@pytest.mark.parametrize("entry, said", [("a\x00b", "a NUL byte"), ("a" * 5000, "longer than 255 bytes")])
def test_an_index_entry_no_file_system_names_is_a_clean_refusal_and_a_survey_row(tmp_path, cli, entry, said):
    src = _indexed(tmp_path, entry)
    assert_clean_failure(
        cli("validate", src, expect=None), "model.safetensors.index.json: tensor 'd2t': refers to", said
    )
    other = write_vllm(tmp_path / "other", Dims())
    rows = [json.loads(line) for line in cli("validate", src, other, "--json", expect=None).stdout.splitlines()]
    assert [r["ok"] for r in rows] == [False, True]  # a row, not the end of the survey
    assert len(cli("validate", src, expect=None).stderr) < 400  # the 5000-character name is cut


def test_a_bin_without_data_or_without_a_pickle_is_told_as_what_it_is(tmp_path, cli):
    meta = write_vllm(tmp_path / "meta", Dims())
    state = load_file(meta / "model.safetensors")
    state["d2t"] = torch.empty(state["d2t"].shape, dtype=torch.int64, device="meta")
    (meta / "model.safetensors").unlink()
    torch.save(state, meta / "pytorch_model.bin")
    assert_clean_failure(cli("validate", meta, expect=None), "tensor 'd2t' holds no data (a meta-device tensor")
    garbage = write_vllm(tmp_path / "garbage", Dims())
    (garbage / "model.safetensors").unlink()
    (garbage / "pytorch_model.bin").write_bytes(bytes(100))
    assert_clean_failure(
        cli("validate", garbage, expect=None), "torch's weights-only loader does not read its bytes (corrupt, truncated"
    )


def test_checking_many_unknown_tensors_does_not_scan_a_list_per_tensor(tmp_path):
    """A header listing 32,000 unknown tensors took 19 s to validate (300,000: unfinished after 10 min): each tensor's
    finding asked ``name in unknown`` of a list. The lookup is a set's."""
    from eaglekit import dialects

    class Unscannable(list):
        def __contains__(self, item):
            raise AssertionError("a list was scanned")

    with dialects.load(write_vllm(tmp_path / "src", Dims())) as loaded:
        loaded.unknown = Unscannable(["z0", "z1"])
        assert loaded.stored_name("z1") == "z1" and loaded.stored_name("norm.weight") == "norm.weight"


def test_push_refuses_a_symlink_loop_a_name_that_is_not_utf8_and_a_report_without_its_figures(tmp_path, cli):
    src = write_vllm(tmp_path / "loop", Dims())
    os.symlink("notes.txt", src / "notes.txt")
    assert_clean_failure(cli("push", src, "me/x", "--dry-run", "--no-validate", expect=None), "a symlink loop")
    named = write_vllm(tmp_path / "named", Dims())
    (named / os.fsdecode(b"a\xff.txt")).write_text("x")
    assert_clean_failure(
        cli("push", named, "me/x", "--dry-run", "--no-validate", expect=None), "a file name that is not UTF-8"
    )
    fake = write_vllm(tmp_path / "fake", Dims())
    (fake / "eaglekit-verify.json").write_text('{"a": 1}')  # the card said "mean acceptance length 0.000" of it
    assert_clean_failure(
        cli("push", fake, "me/x", "--dry-run", "--no-validate", expect=None), "has no acceptance_length"
    )


def test_scan_reads_float64_values_as_they_are(tmp_path, cli):
    """--scan cast every piece to float32: a float64 weight of 1e300 was "NaN/Inf", one of 1e-60 "entirely zero"."""
    src = tensors_of(
        write_vllm(tmp_path / "src", Dims()),
        lambda t: (
            t.update({"norm.weight": torch.full_like(t["norm.weight"], 1e-60, dtype=torch.float64)}),
            t.update({"fc.weight": t["fc.weight"].double()}),
        ),
    )
    checks = {f["check"] for f in json.loads(cli("validate", src, "--scan", "--json", expect=None).stdout)["findings"]}
    assert "scan.zero" not in checks and "scan.nonfinite" not in checks
    huge = tensors_of(
        write_vllm(tmp_path / "huge", Dims()),
        lambda t: t.update({"norm.weight": torch.full_like(t["norm.weight"], 1e300, dtype=torch.float64)}),
    )
    checks = {f["check"] for f in json.loads(cli("validate", huge, "--scan", "--json", expect=None).stdout)["findings"]}
    assert "scan.nonfinite" not in checks and "scan.uninitialised" in checks  # finite, and far past any trained weight


def test_an_error_line_is_cut_and_an_aux_list_past_the_limit_is_refused_before_it_is_read(tmp_path, cli):
    from drafters import edit_config

    src = edit_config(
        write_vllm(tmp_path / "src", Dims()), lambda c: c.update(eagle_aux_hidden_state_layer_ids=list(range(5000)))
    )
    assert_clean_failure(cli("inspect", src, expect=None), "lists 5000 layer ids; a drafter fuses at most 1024")
    # a header value quoted whole in its error made a 500 KB line: every error line is cut
    bad = write_vllm(tmp_path / "bad", Dims())
    header = json.dumps({"d2t": {"dtype": ["x"] * 100_000, "shape": [2], "data_offsets": [0, 16]}}).encode()
    (bad / "model.safetensors").write_bytes(len(header).to_bytes(8, "little") + header + bytes(16))
    err = cli("inspect", bad, expect=None).stderr
    assert err.startswith("error: ") and len(err) < 2100 and "characters more)" in err
    err = cli("inspect", "\x01" * 3000, expect=None).stderr  # cut once escaped too: each \x01 is 4 characters shown
    assert err.startswith("error: ") and len(err) < 2100
