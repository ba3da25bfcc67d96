"""Running llama-server with a target and an EAGLE 3 drafter, on loopback, for one job, and reading what it did.

``LlamaServer`` starts the binary on 127.0.0.1 at a free port (``--spec-type draft-eagle3``, K draft tokens, no minimum
length and no probability cut-off, so every step drafts a fixed chain as eaglekit's simulation does; one slot), waits
for ``/health``, and is stopped when the ``with`` block ends, however it ends (an error, Ctrl-C): SIGTERM to its
process group, then SIGKILL. It logs everything (``-v``) to a file: each draft step's candidates (``common/
speculative.cpp``'s ``draft candidate`` lines, the chosen one first) and each verification's size (the server's ``add
accepted tokens`` lines); ``request_logs`` cuts the log per request and ``parse_steps`` reads each part.

A start that ends before ``/health`` answers is ``ServerFailed``: ``refused`` (the loader's error, e.g. a missing
tensor) or ``crashed`` (an abort or a signal: GGML_ASSERT, GGML_ABORT). A request whose server dies is ``crashed`` too.
Requests are ``/completion`` with the prompt as token ids, greedy (temperature 0, top-k 1), no prompt cache, tokens
returned; the answer's ``timings.draft_n`` / ``draft_n_accepted`` are the server's own counters.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from ..errors import EaglekitError

START_SECONDS = 300  # loading a large target takes a while; a server that exits is noticed at once
REQUEST_SECONDS = 600
CANDIDATE = re.compile(r"draft candidate\s+(\d+), pos\s+(\d+):\s+(-?\d+)\s+\(\s*([-0-9.eE+naif]+)\)")
ACCEPTED = re.compile(r"add accepted tokens: sampled=(-?\d+), ids\.size=(\d+), n_draft=(\d+)")
CRASH_MARKS = ("GGML_ASSERT", "GGML_ABORT", "Segmentation fault", "Aborted", "terminate called")


class ServerFailed(EaglekitError):
    """llama-server refused the models, or crashed; ``kind`` says which, ``line`` its own words."""

    def __init__(self, kind: str, line: str):
        super().__init__(f"llama-server {kind}: {line}")
        self.kind, self.line = kind, line


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def threads() -> int:
    """Threads llama-server computes with: ``EAGLEKIT_THREADS``, else the CPUs this process may use, at most 8."""
    given = os.environ.get("EAGLEKIT_THREADS", "").strip()
    if given.isdigit() and int(given) > 0:
        return int(given)
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, min(cpus, 8))


# llama.cpp's log prefix, "0.00.021.400 E ": the time since start (it differs run to run) and the level
_LOG_PREFIX = re.compile(r"^\d+\.\d+\.\d+\.\d+ [A-Z] ")


def why_it_stopped(log: str, returncode: int | None) -> ServerFailed:
    """Refused or crashed, from the server's log and exit status, with its most telling line."""
    lines = [_LOG_PREFIX.sub("", line.strip()) for line in log.splitlines() if line.strip()]
    crash = next((line for line in lines if any(mark in line for mark in CRASH_MARKS)), None)
    if crash or (returncode is not None and returncode < 0):
        return ServerFailed("crashed", crash or f"killed by signal {-returncode}")
    telling = [line for line in lines if re.search(r"error|failed|exception|invalid|wrong", line, re.IGNORECASE)]
    return ServerFailed("refused", (telling or lines or [f"exit {returncode}"])[0][:400])


@dataclass
class LlamaServer:
    binary: Path
    target: Path
    drafter: Path
    k: int
    context: int
    log_path: Path
    process: subprocess.Popen | None = None
    port: int = 0

    def command(self) -> list[str]:
        return [
            str(self.binary),
            *("-m", str(self.target), "-md", str(self.drafter), "--spec-type", "draft-eagle3"),
            *("--spec-draft-n-max", str(self.k), "--spec-draft-n-min", "0", "--spec-draft-p-min", "0"),
            *("-c", str(self.context), "-np", "1", "-t", str(threads()), "-ngl", "0"),
            *("--host", "127.0.0.1", "--port", str(self.port), "--no-webui", "--no-warmup"),
            *("-v", "--log-colors", "off"),
        ]

    def __enter__(self) -> LlamaServer:
        self.port = free_port()
        out = open(self.log_path, "w")
        self.process = subprocess.Popen(
            self.command(), stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True
        )
        out.close()
        try:
            self._wait_healthy()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def request_logs(self) -> list[str]:
        """The log cut at each request's start (the slot's "processing task" line): one part per request, in order.
        Read once the server has stopped (its log is written by a thread of its own)."""
        parts = re.split(r"(?m)^.*launch_slot_.*processing task.*$", self.log())
        return parts[1:]

    def _wait_healthy(self) -> None:
        deadline = time.monotonic() + START_SECONDS
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise why_it_stopped(self.log(), self.process.returncode)
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=5) as answer:
                    if answer.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.2)
        raise ServerFailed("refused", f"did not answer /health within {START_SECONDS} s")

    def complete(self, prompt: list[int], n_predict: int, *, ignore_eos: bool = False) -> dict:
        """One greedy completion of ``prompt`` (token ids): the server's answer (``tokens``, ``timings``, ...);
        ``ignore_eos``: decode all ``n_predict`` tokens (for a target whose end-of-sequence token means nothing)."""
        body = {
            "ignore_eos": ignore_eos,
            "prompt": prompt,
            "n_predict": n_predict,
            "temperature": 0.0,
            "top_k": 1,
            "cache_prompt": False,
            "return_tokens": True,
            "stream": False,
        }
        request = urllib.request.Request(
            f"http://127.0.0.1:{self.port}/completion",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=REQUEST_SECONDS) as answer:
                return json.loads(answer.read())
        except (urllib.error.URLError, OSError, ValueError) as exc:
            time.sleep(0.5)
            if self.process.poll() is not None:
                raise why_it_stopped(self.log(), self.process.returncode) from None
            raise EaglekitError(f"llama-server /completion failed: {exc}") from None

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        try:
            os.killpg(self.process.pid, signal.SIGTERM)
            self.process.wait(timeout=10)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            try:
                os.killpg(self.process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.process.wait()


@dataclass
class Step:
    """One verification step as llama-server logged it: the tokens it drafted (each position's chosen candidate, with
    its probability) and how many it accepted."""

    drafts: list[int]
    probabilities: list[float]
    accepted: int


def parse_steps(log: str) -> list[Step]:
    """The verification steps in ``log`` (a part of the server's log covering requests), in order."""
    out: list[Step] = []
    drafts: dict[int, tuple[int, float]] = {}
    for line in log.splitlines():
        found = CANDIDATE.search(line)
        if found and found.group(1) == "0":
            drafts[int(found.group(2))] = (int(found.group(3)), float(found.group(4)))
            continue
        found = ACCEPTED.search(line)
        if found:
            ordered = [drafts[i] for i in sorted(drafts)]
            n_draft = int(found.group(3))
            out.append(
                Step([t for t, _ in ordered][:n_draft], [p for _, p in ordered][:n_draft], int(found.group(2)) - 1)
            )
            drafts = {}
    return out


__all__ = ["LlamaServer", "ServerFailed", "Step", "parse_steps", "threads", "why_it_stopped"]
