"""Checkpoint IO: layouts, header-only listing, one-tensor reads, exact round trips, sharding, atomicity, hygiene."""

from __future__ import annotations

import json
import os
import struct
import time
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import save_file

from eaglekit.errors import CheckpointError, OutputExistsError, UsageError
from eaglekit.io import Checkpoint, TensorPlan, atomic_directory, dtypes, parse_size, write_checkpoint_tensors
from eaglekit.io.writer import plan_shards

from drafters import same_bits

ALL_CODES = [
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
]


def every_dtype() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    out = {}
    for code in ALL_CODES:
        dtype = dtypes.from_code(code)
        raw = torch.randint(0, 256, (3, 4 * dtypes.itemsize(dtype)), dtype=torch.uint8, generator=g)
        out[f"t.{code}"] = (raw[:, :4] % 2 == 1) if dtype == torch.bool else raw.view(dtype)
    out["scalar"] = torch.tensor(3.5)
    out["empty"] = torch.empty(0, 7)
    return out


def plans(tensors: dict[str, torch.Tensor]) -> list[TensorPlan]:
    return [TensorPlan(n, t.dtype, tuple(t.shape), lambda t=t: t) for n, t in tensors.items()]


# -- layouts -------------------------------------------------------------------------------------------------


def small() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    return {f"w{i}": torch.randn(4, 8, generator=g) for i in range(6)} | {"d2t": torch.arange(5, dtype=torch.int64)}


def make_layout(root: Path, layout: str, tensors: dict[str, torch.Tensor]) -> Path:
    root.mkdir(parents=True)
    names = list(tensors)
    halves = [names[: len(names) // 2], names[len(names) // 2 :]]
    if layout == "single":
        save_file(tensors, str(root / "model.safetensors"), metadata={"format": "pt"})
    elif layout == "sharded":
        files = ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]
        for f, part in zip(files, halves):
            save_file({n: tensors[n] for n in part}, str(root / f))
        weight_map = {n: f for f, part in zip(files, halves) for n in part}
        (root / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    elif layout == "bin":
        torch.save(tensors, root / "pytorch_model.bin")
    elif layout == "sharded-bin":
        files = ["pytorch_model-00001-of-00002.bin", "pytorch_model-00002-of-00002.bin"]
        for f, part in zip(files, halves):
            torch.save({n: tensors[n] for n in part}, root / f)
        weight_map = {n: f for f, part in zip(files, halves) for n in part}
        (root / "pytorch_model.bin.index.json").write_text(json.dumps({"weight_map": weight_map}))
    (root / "config.json").write_text("{}")
    return root


@pytest.mark.parametrize("layout", ["single", "sharded", "bin", "sharded-bin"])
def test_every_layout_lists_and_reads(tmp_path, layout):
    tensors = small()
    ckpt = Checkpoint.open(make_layout(tmp_path / "ckpt", layout, tensors))
    assert set(ckpt.tensors) == set(tensors)
    assert ckpt.format == ("bin" if "bin" in layout else "safetensors")
    assert len(ckpt.files) == (2 if "sharded" in layout else 1)
    for name, t in tensors.items():
        info = ckpt.info(name)
        assert info.shape == tuple(t.shape) and info.dtype == t.dtype
        assert same_bits(ckpt.read(name), t)
    assert ckpt.config == {}
    ckpt.close()


def test_listing_reads_headers_only(tmp_path):
    """A 4 GB (sparse) tensor lists instantly: only the header is read."""
    root = tmp_path / "big"
    root.mkdir()
    nbytes = 4 * 2**30
    header = json.dumps(
        {"__metadata__": {"format": "pt"}, "huge": {"dtype": "BF16", "shape": [2**30, 2], "data_offsets": [0, nbytes]}}
    ).encode()
    header += b" " * (-len(header) % 8)
    path = root / "model.safetensors"
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(header)) + header)
    os.truncate(path, 8 + len(header) + nbytes)
    start = time.perf_counter()
    ckpt = Checkpoint.open(root)
    assert time.perf_counter() - start < 1.0
    assert ckpt.info("huge").nbytes == nbytes
    assert ckpt.byte_range("huge").length == nbytes


@pytest.mark.slow
def test_a_tensor_over_2_gib_reads_whole(tmp_path):
    """One read(2) returns at most 2 GiB - 4 KiB on Linux: a Kimi-sized embedding must be read in pieces, not
    reported as truncated. The file is sparse except for the tensor's last bytes, which must arrive."""
    root = tmp_path / "big"
    root.mkdir()
    nbytes = 2**31 + 16
    header = json.dumps(
        {"__metadata__": {"format": "pt"}, "big": {"dtype": "U8", "shape": [nbytes], "data_offsets": [0, nbytes]}}
    ).encode()
    header += b" " * (-len(header) % 8)
    path = root / "model.safetensors"
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(header)) + header)
        f.seek(8 + len(header) + nbytes - 16)
        f.write(bytes(range(1, 17)))
    with Checkpoint.open(root) as ckpt:
        tensor = ckpt.read("big")
        assert (
            tensor.numel() == nbytes and tensor[-16:].tolist() == list(range(1, 17)) and int(tensor[:4096].sum()) == 0
        )
        del tensor
        assert sum(piece.numel() for piece in ckpt.read_chunks("big", max_bytes=2**30)) == nbytes


# -- writer ------------------------------------------------------------------------------------------------


def test_every_dtype_round_trips_bit_exactly(tmp_path):
    tensors = every_dtype()
    files = write_checkpoint_tensors(tmp_path, plans(tensors))
    assert files == ["model.safetensors"]
    ckpt = Checkpoint.open(tmp_path)
    for name, t in tensors.items():
        assert same_bits(ckpt.read(name), t), name
    with safe_open(str(tmp_path / "model.safetensors"), "pt") as f:  # the library reads our files
        assert f.metadata() == {"format": "pt"}
        for name, t in tensors.items():
            assert same_bits(f.get_tensor(name), t), name


def test_sharding_and_index(tmp_path):
    tensors = {f"w{i}": torch.full((10,), float(i)) for i in range(5)}  # 40 bytes each
    files = write_checkpoint_tensors(tmp_path, plans(tensors), max_shard_bytes=100)
    assert files == [
        "model-00001-of-00003.safetensors",
        "model-00002-of-00003.safetensors",
        "model-00003-of-00003.safetensors",
        "model.safetensors.index.json",
    ]
    index = json.loads((tmp_path / "model.safetensors.index.json").read_text())
    assert index["metadata"]["total_size"] == 200
    assert index["weight_map"] == {
        "w0": files[0],
        "w1": files[0],
        "w2": files[1],
        "w3": files[1],
        "w4": files[2],
    }
    ckpt = Checkpoint.open(tmp_path)
    assert all(same_bits(ckpt.read(n), t) for n, t in tensors.items())


def test_copied_bytes_are_exact_and_every_written_byte_is_handed_to_writeback(tmp_path, monkeypatch):
    """Copies go in chunks, and the writer asks the kernel to start writing each piece as it is done (issue 16: the
    final fsync then finds little left): the output is byte-identical, and the ranges handed to posix_fadvise tile
    the file from its first byte to its last, once each."""
    if not hasattr(os, "posix_fadvise"):
        pytest.skip("no posix_fadvise on this platform")
    from eaglekit.io import writer

    g = torch.Generator().manual_seed(0)
    tensors = {
        "big": torch.randn(5000, generator=g),
        "mid": torch.randn(1500, generator=g).to(torch.bfloat16),
        "ids": torch.arange(700, dtype=torch.int64),
    }
    (tmp_path / "src").mkdir()
    save_file(tensors, str(tmp_path / "src" / "model.safetensors"))
    with Checkpoint.open(tmp_path / "src") as src:
        copy_plans = [
            TensorPlan(n, src.tensors[n].dtype, src.tensors[n].shape, lambda n=n: src.byte_range(n)) for n in tensors
        ]
        computed = [TensorPlan("made", torch.float32, (300,), lambda: torch.ones(300))]
        monkeypatch.setattr(writer, "_COPY_CHUNK", 4096)  # 20000 bytes of "big" in 5 copy calls
        calls = []
        real = os.posix_fadvise
        monkeypatch.setattr(
            os,
            "posix_fadvise",
            lambda fd, off, n, advice: (calls.append((off, n, advice)), real(fd, off, n, advice))[1],
        )
        with atomic_directory(tmp_path / "out") as tmp:
            write_checkpoint_tensors(tmp, copy_plans + computed)
    out = tmp_path / "out" / "model.safetensors"
    with safe_open(str(out), "pt") as f:
        assert all(same_bits(f.get_tensor(n), t) for n, t in tensors.items())
        assert torch.equal(f.get_tensor("made"), torch.ones(300))
    assert {advice for *_, advice in calls} == {os.POSIX_FADV_DONTNEED}
    assert calls[0][0] == 0 and calls[-1][0] + calls[-1][1] == out.stat().st_size
    assert all(a + n == b for (a, n, _), (b, _, _) in zip(calls, calls[1:]))
    assert len(calls) >= 5 + 3  # the chunks of "big", then one range per remaining tensor at most


def test_writeback_runs_beside_the_copy_and_a_refusal_fails_the_write_whole(tmp_path, monkeypatch):
    """The advice to start writing runs in a thread of its own, beside the copy of the next piece, and is done before
    the writer returns; where the kernel refuses it, the write fails naming the file, and the atomic output is never
    made."""
    if not hasattr(os, "posix_fadvise"):
        pytest.skip("no posix_fadvise on this platform")
    import threading

    from eaglekit.io import writer

    (tmp_path / "src").mkdir()
    save_file({"big": torch.randn(5000)}, str(tmp_path / "src" / "model.safetensors"))
    monkeypatch.setattr(writer, "_COPY_CHUNK", 4096)
    threads = set()
    real = os.posix_fadvise

    def advise(fd, off, n, advice):
        threads.add(threading.current_thread().name)
        return real(fd, off, n, advice)

    monkeypatch.setattr(os, "posix_fadvise", advise)
    with Checkpoint.open(tmp_path / "src") as src:
        plans = [TensorPlan("big", torch.float32, (5000,), lambda: src.byte_range("big"))]
        with atomic_directory(tmp_path / "out") as tmp:
            write_checkpoint_tensors(tmp, plans)
        assert threads == {"eaglekit-writeback"}

        def refuse(fd, off, n, advice):
            raise OSError(5, "Input/output error")

        monkeypatch.setattr(os, "posix_fadvise", refuse)
        with pytest.raises(CheckpointError, match=r"model\.safetensors: .*Input/output error"):
            with atomic_directory(tmp_path / "refused") as tmp:
                write_checkpoint_tensors(tmp, plans)
    assert not (tmp_path / "refused").exists()
    assert {p.name for p in tmp_path.iterdir()} == {"src", "out"}  # no temporary folder left behind


def test_a_tensor_larger_than_the_shard_limit_gets_its_own_shard():
    p = [TensorPlan(n, torch.float32, (s,), lambda: None) for n, s in (("a", 10), ("big", 100), ("b", 10))]
    assert [[x.name for x in shard] for shard in plan_shards(p, 60)] == [["a"], ["big"], ["b"]]


def test_writer_refuses_a_tensor_that_differs_from_its_plan(tmp_path):
    bad = [TensorPlan("x", torch.float32, (3,), lambda: torch.zeros(4))]
    with pytest.raises(CheckpointError, match="planned float32"):
        write_checkpoint_tensors(tmp_path, bad)


def test_parse_size():
    assert parse_size("5GB") == 5 * 10**9
    assert parse_size("500MB") == 500 * 10**6
    assert parse_size("2GiB") == 2 * 2**30
    assert parse_size("1000") == 1000
    with pytest.raises(UsageError):
        parse_size("lots")


# -- atomic output ------------------------------------------------------------------------------------------


def test_failure_mid_write_leaves_no_destination(tmp_path):
    def boom():
        raise RuntimeError("disk on fire")

    dest = tmp_path / "out"
    with pytest.raises(RuntimeError):
        with atomic_directory(dest) as tmp:
            write_checkpoint_tensors(
                tmp,
                [
                    TensorPlan("a", torch.float32, (2,), lambda: torch.zeros(2)),
                    TensorPlan("b", torch.float32, (2,), boom),
                ],
            )
    assert not dest.exists()
    assert list(tmp_path.iterdir()) == []  # the hidden temporary is gone too


def test_refuses_to_overwrite_without_force_and_replaces_with_it(tmp_path):
    dest = tmp_path / "out"
    dest.mkdir()
    (dest / "old.txt").write_text("old")
    with pytest.raises(OutputExistsError):
        with atomic_directory(dest):
            pass
    assert (dest / "old.txt").exists()
    with atomic_directory(dest, force=True, replaceable=lambda d: []) as tmp:  # the caller recognises its output
        (tmp / "new.txt").write_text("new")
    assert sorted(p.name for p in dest.iterdir()) == ["new.txt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_force_never_replaces_a_directory_the_caller_does_not_recognise(tmp_path):
    dest = tmp_path / "out"
    (dest / "data").mkdir(parents=True)
    (dest / "notes.txt").write_text("mine")
    with pytest.raises(OutputExistsError, match=r"did not write \(data/, notes.txt\)"):
        with atomic_directory(dest, force=True) as tmp:
            (tmp / "new.txt").write_text("new")
    assert (dest / "notes.txt").read_text() == "mine" and (dest / "data").is_dir()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


@pytest.mark.parametrize("force", [False, True])
def test_a_destination_that_appears_during_the_write_is_refused_not_replaced(tmp_path, force):
    """The destination was checked only before the work: a folder made meanwhile (a user's, another run's) was moved
    aside and deleted at the end, with or without --force. It is checked again right before the output takes its place.
    """
    dest = tmp_path / "out"
    with pytest.raises(OutputExistsError):
        with atomic_directory(dest, force=force, replaceable=lambda d: sorted(p.name for p in d.iterdir())) as tmp:
            (tmp / "new.txt").write_text("new")
            dest.mkdir()
            (dest / "notes.txt").write_text("precious")
    assert (dest / "notes.txt").read_text() == "precious" and sorted(p.name for p in dest.iterdir()) == ["notes.txt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # the finished temporary is not left beside it


def test_the_last_check_is_of_the_folder_resolved_first_even_if_a_link_above_it_moved(tmp_path):
    """The check before the rename resolved OUT again: with a symlink above OUT pointed elsewhere meanwhile, it looked
    at the other folder and the rename replaced the first, a user's file in it included (with --force)."""
    (tmp_path / "A" / "o").mkdir(parents=True)
    (tmp_path / "B").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "A")
    with pytest.raises(OutputExistsError, match="notes.txt"):
        with atomic_directory(
            tmp_path / "link" / "o", force=True, replaceable=lambda d: sorted(p.name for p in d.iterdir())
        ) as tmp:
            (tmp / "new.txt").write_text("new")
            (tmp_path / "A" / "o" / "notes.txt").write_text("mine")
            (tmp_path / "link").unlink()
            (tmp_path / "link").symlink_to(tmp_path / "B")
    assert (tmp_path / "A" / "o" / "notes.txt").read_text() == "mine"


def test_the_swap_holds_ctrl_c_and_sigterm_back_until_it_is_done():
    """A signal between the two renames of a --force swap lost the old output (or stranded it): it waits for the end."""
    import signal

    from eaglekit.io.atomic import _signals_held

    got = []
    previous = signal.signal(signal.SIGTERM, lambda *a: got.append("term"))
    try:
        with _signals_held():
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.05)
            assert got == []  # held back
        time.sleep(0.05)
        assert got == ["term"]  # delivered once the block ends
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_a_path_part_no_file_system_holds_is_refused_before_any_work(tmp_path):
    for given in (tmp_path / ("c" * 300), tmp_path / "x" / ("c" * 300) / "y"):
        with pytest.raises(UsageError, match="is 300 bytes long; a file system holds at most 255"):
            with atomic_directory(given):
                raise AssertionError("no work may start")
    assert list(tmp_path.iterdir()) == []


def test_a_name_with_no_room_for_the_hidden_sibling_is_refused_before_any_work(tmp_path):
    """A 230-byte folder name is valid, but the hidden ``.NAME.eaglekit-tmp-PID-XXXXXXXX`` beside it is not: the run
    did all its work and then failed with exit 1. Now it is refused first (exit 2), naming the limit."""
    with pytest.raises(UsageError, match="leaves no room for the hidden folder"):
        with atomic_directory(tmp_path / ("d" * 230)):
            raise AssertionError("no work may start")
    with atomic_directory(tmp_path / ("d" * 200)) as tmp:
        (tmp / "x").write_text("x")
    assert (tmp_path / ("d" * 200) / "x").exists()


def test_a_mount_point_is_refused_before_any_work(tmp_path, monkeypatch):
    """--force on a mounted volume (a container's /out) wrote the whole output, then failed to rename the volume
    aside."""
    dest = tmp_path / "out"
    dest.mkdir()
    monkeypatch.setattr(os.path, "ismount", lambda p: Path(p) == dest)
    with pytest.raises(UsageError, match="a mount point cannot be replaced"):
        with atomic_directory(dest, force=True):
            raise AssertionError("no work may start")


def test_an_output_is_written_where_the_system_resolves_its_path(tmp_path):
    """``q/link/../out`` names the folder beside link's target (as mkdir -p and the kernel read it), not ``q/out``."""
    from eaglekit.io.atomic import output_path

    (tmp_path / "elsewhere" / "deep").mkdir(parents=True)
    (tmp_path / "link").symlink_to(tmp_path / "elsewhere" / "deep")
    given = tmp_path / "link" / ".." / "out"
    assert output_path(given) == tmp_path / "elsewhere" / "out"
    with atomic_directory(given) as tmp:
        (tmp / "x").write_text("x")
    assert (tmp_path / "elsewhere" / "out" / "x").exists() and not (tmp_path / "out").exists()


def test_force_replaces_an_empty_directory(tmp_path):
    dest = tmp_path / "out"
    dest.mkdir()
    with atomic_directory(dest, force=True) as tmp:
        (tmp / "new.txt").write_text("new")
    assert [p.name for p in dest.iterdir()] == ["new.txt"]


def test_output_directory_honours_the_umask(tmp_path):
    old = os.umask(0o022)
    try:
        with atomic_directory(tmp_path / "out") as tmp:
            (tmp / "x").write_text("x")
    finally:
        os.umask(old)
    assert (tmp_path / "out").stat().st_mode & 0o777 == 0o755
    assert (tmp_path / "out" / "x").stat().st_mode & 0o777 == 0o644


def test_refuses_destination_inside_or_around_the_source(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    with pytest.raises(UsageError, match="inside the source"):
        with atomic_directory(src / "out", protect=[src]):
            pass
    with pytest.raises(UsageError, match="inside the source"):
        with atomic_directory(src, force=True, protect=[src]):
            pass
    with pytest.raises(UsageError, match="contain the source"):
        with atomic_directory(tmp_path, force=True, protect=[src]):
            pass


def test_stale_temporaries_of_dead_runs_are_cleaned(tmp_path):
    stale = tmp_path / ".out.eaglekit-tmp-999999999-abc"
    stale.mkdir()
    with atomic_directory(tmp_path / "out") as tmp:
        (tmp / "x").write_text("x")
    assert not stale.exists()
    assert (tmp_path / "out" / "x").exists()


def test_a_single_file_is_replaced_whole_or_not_at_all(tmp_path):
    """verify --report and the drift report's files: a failed write keeps the old file and leaves no temporary."""
    from eaglekit.io.atomic import _umask, write_file_atomically

    report = tmp_path / "report.json"
    report.write_text("old")
    os.chmod(report, 0o600)

    def fails(path):
        path.write_text("half of the new")
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError, match="disk full"):
        write_file_atomically(report, fails)
    assert report.read_text() == "old" and sorted(p.name for p in tmp_path.iterdir()) == ["report.json"]
    write_file_atomically(report, "new")
    assert report.read_text() == "new" and sorted(p.name for p in tmp_path.iterdir()) == ["report.json"]
    assert report.stat().st_mode & 0o777 == 0o666 & ~_umask()  # what open() gives a new file
    write_file_atomically(tmp_path / "plot.png", lambda path: path.write_bytes(b"\x89PNG"))
    assert (tmp_path / "plot.png").read_bytes() == b"\x89PNG"


# -- index hygiene ------------------------------------------------------------------------------------------


def sharded(tmp_path: Path) -> Path:
    return make_layout(tmp_path / "ckpt", "sharded", small())


def edit_index(root: Path, fn) -> None:
    path = root / "model.safetensors.index.json"
    index = json.loads(path.read_text())
    fn(index["weight_map"])
    path.write_text(json.dumps(index))


def test_index_pointing_at_a_missing_shard(tmp_path):
    root = sharded(tmp_path)
    (root / "model-00002-of-00002.safetensors").unlink()
    with pytest.raises(
        CheckpointError,
        match=r"model.safetensors.index.json: tensor '\w+' points at missing shard 'model-00002-of-00002.safetensors'",
    ):
        Checkpoint.open(root)


def test_index_naming_an_absent_tensor(tmp_path):
    root = sharded(tmp_path)
    edit_index(root, lambda wm: wm.update({"ghost": "model-00001-of-00002.safetensors"}))
    with pytest.raises(
        CheckpointError,
        match="tensor 'ghost' is indexed in 'model-00001-of-00002.safetensors', which does not contain it",
    ):
        Checkpoint.open(root)


def test_tensor_present_but_not_indexed(tmp_path):
    root = sharded(tmp_path)
    edit_index(root, lambda wm: wm.pop("w0"))
    with pytest.raises(
        CheckpointError,
        match="model-00001-of-00002.safetensors: tensor 'w0' is not listed in model.safetensors.index.json",
    ):
        Checkpoint.open(root)


def test_duplicate_names_across_shards(tmp_path):
    root = sharded(tmp_path)
    save_file(
        {"w0": torch.zeros(4, 8), **{n: small()[n] for n in ("w3", "w4", "w5", "d2t")}},
        str(root / "model-00002-of-00002.safetensors"),
    )
    with pytest.raises(CheckpointError, match="tensor 'w0' is stored twice"):
        Checkpoint.open(root)


def test_index_entry_in_the_wrong_shard(tmp_path):
    root = sharded(tmp_path)
    edit_index(root, lambda wm: wm.update({"w0": "model-00002-of-00002.safetensors"}))
    with pytest.raises(
        CheckpointError,
        match="'w0' is indexed in 'model-00002-of-00002.safetensors' but stored in 'model-00001-of-00002.safetensors'",
    ):
        Checkpoint.open(root)


def test_truncated_file(tmp_path):
    root = make_layout(tmp_path / "ckpt", "single", small())
    path = root / "model.safetensors"
    os.truncate(path, path.stat().st_size - 10)
    with pytest.raises(CheckpointError, match=r"model.safetensors: tensor '\w+': data runs past the end of the file"):
        Checkpoint.open(root)


def test_header_offsets_past_the_file(tmp_path):
    root = tmp_path / "ckpt"
    root.mkdir()
    header = json.dumps(
        {
            "w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]},
            "x": {"dtype": "F32", "shape": [1000], "data_offsets": [16, 4016]},
        }
    ).encode()
    (root / "model.safetensors").write_bytes(struct.pack("<Q", len(header)) + header + b"\0" * 16)
    with pytest.raises(CheckpointError, match="model.safetensors: tensor 'x': data runs past the end of the file"):
        Checkpoint.open(root)


def test_empty_directory(tmp_path):
    with pytest.raises(CheckpointError, match="no tensor files"):
        Checkpoint.open(tmp_path)


# -- pickles -------------------------------------------------------------------------------------------------


class _Evil:
    def __init__(self, marker: str):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_malicious_pickle_is_refused_and_runs_nothing(tmp_path):
    marker = tmp_path / "pwned"
    root = tmp_path / "ckpt"
    root.mkdir()
    torch.save({"w": torch.zeros(2), "evil": _Evil(str(marker))}, root / "pytorch_model.bin")
    with pytest.raises(CheckpointError, match="pytorch_model.bin: refused to unpickle"):
        Checkpoint.open(root)
    assert not marker.exists()


@pytest.mark.parametrize(
    "text, refused",
    [
        ("[" * 63 + "1" + "]" * 63, False),
        ("[" * 64 + "1" + "]" * 64, True),  # a value inside counts as a level
        ("[" * 64 + "]" * 64, False),
        ("[" * 65 + "]" * 65, True),
        ('{"a":' * 63 + "1" + "}" * 63, False),
        ('{"a":' * 64 + "1" + "}" * 64, True),
    ],
)
def test_json_depth_limit(text, refused):
    """The depth walk was made to stack containers only; where the limit falls stays where it was (64 levels, a value
    inside the deepest container counting as one)."""
    from eaglekit.errors import CheckpointError
    from eaglekit.io import jsonfile

    if refused:
        with pytest.raises(CheckpointError, match="nested deeper than 64 levels"):
            jsonfile.loads(text, "x")
    else:
        jsonfile.loads(text, "x")


def test_copied_tensors_keep_their_offset_within_a_page_and_neighbours_are_copied_as_one_range(tmp_path, monkeypatch):
    """A copy whose source and destination sit alike within their pages runs page by page (misaligned, every page is
    split across two: ~2x the kernel's time for a 1.9 GB drafter), and one range copied at once costs less than its
    tensors one by one: the header is padded so that the most copied bytes keep their offset within a page, tensors of
    one item size follow their source's order, and neighbours there are copied in one call. The output reads back as
    the source, with safetensors' own reader too."""
    from safetensors import safe_open

    from eaglekit.io import writer

    g = torch.Generator().manual_seed(1)
    tensors = {
        "ids": torch.arange(700, dtype=torch.int64),
        "a.weight": torch.randn(3000, generator=g).to(torch.bfloat16),
        "b.weight": torch.randn(5001, generator=g).to(torch.bfloat16),
        "c.weight": torch.randn(2000, generator=g).to(torch.bfloat16),
    }
    (tmp_path / "src").mkdir()
    save_file(tensors, str(tmp_path / "src" / "model.safetensors"))
    copies = []
    real = writer._copy_range
    monkeypatch.setattr(writer, "_copy_range", lambda src, out, wb=None: copies.append(src) or real(src, out, wb))
    with Checkpoint.open(tmp_path / "src") as src:
        renamed = {"ids": "z.ids", "a.weight": "y.a", "b.weight": "x.b", "c.weight": "w.c"}  # another name order
        plans = [
            TensorPlan(new, src.tensors[old].dtype, src.tensors[old].shape, lambda: None, src.byte_range(old))
            for old, new in renamed.items()
        ]
        plans.append(TensorPlan("made", torch.float32, (30,), lambda: torch.ones(30)))
        (tmp_path / "out").mkdir()
        write_checkpoint_tensors(tmp_path / "out", plans)
        sources = {new: src.byte_range(old) for old, new in renamed.items()}
    with Checkpoint.open(tmp_path / "out") as out:
        for old, new in renamed.items():
            assert same_bits(out.read(new), tensors[old])
        for new in ("y.a", "x.b", "w.c"):  # the most bytes (ids, 5.6 KB, another offset: one pad cannot suit both)
            assert out.byte_range(new).offset % writer.PAGE == sources[new].offset % writer.PAGE
        assert torch.equal(out.read("made"), torch.ones(30))
    with safe_open(str(tmp_path / "out" / "model.safetensors"), "pt") as f:
        assert all(same_bits(f.get_tensor(new), tensors[old]) for old, new in renamed.items())
    # ids (int64) alone, then the three bf16 tensors, adjacent in the source, in one call
    assert [c.length for c in copies] == [
        sources["z.ids"].length,
        sum(sources[n].length for n in ("y.a", "x.b", "w.c")),
    ]
