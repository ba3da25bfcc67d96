"""Loading the target runs with Python's cyclic garbage collector off (``target/long_lived.py``: importing transformers'
model code and parsing a GGUF file only grow the heap, and each full collection over it freed next to nothing), inside
a frozen scope (a verify or drift run) freezes what exists once it has loaded, out of later collections' walks until
the scope ends, and gives the collector back as it found it, whether the load succeeds or fails; a GGUF file is parsed
once while it loads
(``runner._gguf_loader``); on CUDA the target's forwards keep attention off cuDNN's kernels
(``runner._without_cudnn_attention``)."""

from __future__ import annotations

import gc

import pytest

from drafters import write_tiny_target


@pytest.fixture
def target_config(tmp_path):
    from eaglekit.target import read_target_config

    return read_target_config(write_tiny_target(tmp_path / "t", hidden=32))


def spy_on_from_pretrained(monkeypatch, seen: list, fail: bool = False):
    import transformers

    original = transformers.AutoModelForCausalLM.from_pretrained

    def from_pretrained(*args, **kwargs):
        seen.append(gc.isenabled())
        if fail:
            raise OSError("no weights here")
        return original(*args, **kwargs)

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", from_pretrained)


def test_the_collector_is_off_while_the_target_loads_and_on_again_after(target_config, monkeypatch):
    from eaglekit.target.runner import TargetModel

    seen: list[bool] = []
    spy_on_from_pretrained(monkeypatch, seen)
    assert gc.isenabled()
    target = TargetModel.load(target_config)
    assert seen == [False] and gc.isenabled()
    assert target.model is not None


def test_a_failed_load_gives_the_collector_back(target_config, monkeypatch):
    from eaglekit.target.long_lived import frozen_scope
    from eaglekit.target.runner import TargetModel

    seen: list[bool] = []
    spy_on_from_pretrained(monkeypatch, seen, fail=True)
    with frozen_scope():
        frozen = gc.get_freeze_count()
        with pytest.raises(OSError, match="no weights here"):
            TargetModel.load(target_config)
        assert gc.get_freeze_count() == frozen  # its traceback's frames are not kept out of the collector's reach
    assert seen == [False] and gc.isenabled()


def test_inside_a_frozen_scope_a_loaded_target_is_out_of_the_collections_until_the_scope_ends(target_config):
    import weakref

    from eaglekit.target.long_lived import frozen_scope
    from eaglekit.target.runner import TargetModel

    def walked(obj) -> bool:  # in a generation the collector walks (frozen objects are in none)
        return any(o is obj for o in gc.get_objects())

    outside = TargetModel.load(target_config)
    assert walked(outside.model)  # no scope: nothing frozen, as before
    with frozen_scope():
        target = TargetModel.load(target_config)
        assert gc.is_tracked(target.model) and not walked(target.model)
        model, weight = weakref.ref(target.model), weakref.ref(target.model.lm_head.weight)
        gc.disable()  # frozen, yet freed by reference counting alone
        try:
            del target
            assert model() is None and weight() is None
        finally:
            gc.enable()
        again = TargetModel.load(target_config)
    assert gc.get_freeze_count() == 0 and walked(again.model)  # handed back when the scope ends


def test_a_caller_that_turned_the_collector_off_keeps_it_off(target_config):
    from eaglekit.target.runner import TargetModel

    gc.disable()
    try:
        TargetModel.load(target_config)
        assert not gc.isenabled()
    finally:
        gc.enable()


def tiny_gguf(path) -> str:
    import gguf
    import numpy as np

    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_block_count(2)
    writer.add_tensor("token_embd.weight", np.zeros((4, 8), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return str(path)


def test_a_gguf_file_is_parsed_once_while_the_target_loads_and_gguf_is_itself_again_after(tmp_path):
    """transformers builds a new GGUFReader for each thing it reads from the file, and gguf's tensor-name map for each
    module; inside ``_gguf_loader`` both are built once (runner's docstring), and outside it gguf is untouched, also
    after a failure."""
    gguf = pytest.importorskip("gguf")
    from eaglekit.target.runner import _gguf_loader

    path = tiny_gguf(tmp_path / "tiny.gguf")
    reader_class, name_map = gguf.GGUFReader, gguf.get_tensor_name_map
    with _gguf_loader():
        first = gguf.GGUFReader(path)
        assert isinstance(first, reader_class) and gguf.GGUFReader(path) is first
        assert gguf.get_tensor_name_map(gguf.MODEL_ARCH.LLAMA, 2) is gguf.get_tensor_name_map(gguf.MODEL_ARCH.LLAMA, 2)
    assert gguf.GGUFReader is reader_class and gguf.get_tensor_name_map is name_map
    assert gguf.GGUFReader(path) is not gguf.GGUFReader(path)
    with pytest.raises(OSError), _gguf_loader():
        raise OSError("the load failed")
    assert gguf.GGUFReader is reader_class and gguf.get_tensor_name_map is name_map


@pytest.mark.parametrize("device, cudnn_inside", [("cuda", False), ("cuda:1", False), ("cpu", True)])
def test_a_cuda_targets_forwards_run_without_cudnn_attention_and_leave_the_switches_as_they_were(device, cudnn_inside):
    """cuDNN's attention builds a plan on the host for every new key length (2.8 ms a decode step's call, bf16 on an
    H100): on CUDA the target's methods run with it off, flash and memory-efficient attention on; a CPU target's
    leave the switches alone; either way they are as before afterwards, also when the method raises."""
    import torch

    from eaglekit.target.runner import _without_cudnn_attention

    class Target:
        def __init__(self, device):
            self.device = device

        @_without_cudnn_attention
        def switches(self, fail=False):
            seen = (
                torch.backends.cuda.cudnn_sdp_enabled(),
                torch.backends.cuda.flash_sdp_enabled(),
                torch.backends.cuda.mem_efficient_sdp_enabled(),
            )
            if fail:
                raise RuntimeError("the forward failed")
            return seen

    before = torch.backends.cuda.cudnn_sdp_enabled()
    assert before  # torch's default, which this test relies on
    assert Target(device).switches() == (cudnn_inside, True, True)
    with pytest.raises(RuntimeError):
        Target(device).switches(fail=True)
    assert torch.backends.cuda.cudnn_sdp_enabled() == before
