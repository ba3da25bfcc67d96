"""eaglekit's side of a capture: the runner (``vllm_runner.py``, whose ``vllm_side/eaglekit_capture.py`` drives the
engine) started under the Python of the vLLM that serves the target, always in a process of its own: the target's
weights and vLLM's workers never enter eaglekit's process. What the runner does comes back as JSON lines through a
pipe, each handed to the caller as it arrives (a finished prompt's tokens and where its states are), so that the
caller keeps each sequence as soon as it is done and an interrupted capture loses only what was in flight.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from ..errors import UnsupportedError
from . import envs
from .vllm_scale import Served

CONNECTOR = {
    "name": "CpuHiddenStatesConnector",
    "module": "eaglekit_cpu_hidden_states",
    "why": (
        "kv_connector CpuHiddenStatesConnector (eaglekit's, vllm_side/eaglekit_cpu_hidden_states.py) in place of"
        " ExampleHiddenStatesConnector, which pins host memory and fails on a CPU (cpu_hidden_states_pin_memory in"
        " eaglekit's vllm_scale.json)"
    ),
}


def connector_for(served: Served, row: dict) -> dict | None:
    """The connector the job names instead of vLLM's own: eaglekit's on a CPU where the release's pins memory."""
    return CONNECTOR if served.platform == "cpu" and row.get("cpu_hidden_states_pin_memory") is not False else None


def run(job: dict, python: Path, on_event: Callable[[dict], None]) -> None:
    """``job`` (``vllm_side/eaglekit_capture.py`` says its keys) run by the runner under ``python``; every event it
    reports goes to ``on_event``. A runner that ends without a word, or with an error, raises; so does a refusal or
    crash of vLLM (``UnsupportedError``, vLLM's own line). If ``on_event`` raises (or the user interrupts), the
    runner's process group is stopped before the exception goes on."""
    if not python.exists():
        raise UnsupportedError(f"`vllm_python` {python}: no such file")
    with tempfile.TemporaryDirectory(prefix="eaglekit-capture-") as tmp:
        job_file = Path(tmp) / "job.json"
        job_file.write_text(json.dumps({**job, "kind": "capture"}))
        read_end, write_end = os.pipe()
        try:
            process = subprocess.Popen(
                [*envs.runner_command(python), str(job_file), tmp, str(write_end)],
                pass_fds=(write_end,),
                stdout=_stderr(),
                env={**os.environ, "VLLM_ENABLE_V1_MULTIPROCESSING": "0", "VLLM_LOGGING_STREAM": "ext://sys.stderr"},
                start_new_session=True,  # its workers with it: stopped together
            )
        finally:
            os.close(write_end)
        started = False
        try:
            with os.fdopen(read_end) as stream:
                for line in stream:
                    event = json.loads(line)
                    started = started or event["event"] == "started"
                    if event["event"] in ("refused", "crashed"):
                        raise UnsupportedError(
                            f"{'vLLM refused the capture' if event['event'] == 'refused' else 'vLLM failed capturing'}"
                            f" ({event.get('vllm_version', '?')}): {event['error']}"
                        )
                    on_event(event)
            code = process.wait()
        except BaseException:
            _stop(process)
            raise
    if code != 0 or not started:
        raise UnsupportedError(f"the vLLM capture runner in {python} failed (exit {code}); its output is above")


def _stderr():
    try:
        return sys.stderr.fileno()
    except (
        AttributeError,
        OSError,
        ValueError,
    ):  # in-process callers whose stderr is no file: vLLM's output is dropped
        return subprocess.DEVNULL


def _stop(process: subprocess.Popen) -> None:
    """The runner's process group (it and the workers vLLM started): SIGTERM, then SIGKILL after 30 s."""
    if process.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()
