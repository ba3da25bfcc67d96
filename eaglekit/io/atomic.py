"""Atomic output directories: everything is written into a hidden sibling, renamed into place when complete.

A failed, interrupted or killed run leaves no destination (or the old one, untouched); its hidden
``.NAME.eaglekit-tmp-PID-*`` folder is removed by the next run once that PID is gone.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from pathlib import Path
from typing import Iterable, Iterator

from ..errors import OutputExistsError, UsageError

_TMP_MARK = ".eaglekit-tmp-"
_OLD_MARK = ".eaglekit-old-"


def _inside(a: Path, b: Path) -> bool:
    return a == b or b in a.parents


def check_destination(destination: Path, *, force: bool, protect: Iterable[Path] = ()) -> Path:
    """Refuse destinations that would clobber a source or an existing output without ``force``."""
    dest = Path(os.path.abspath(destination))
    real_dest = dest.resolve()
    for source in protect:
        src = Path(source).resolve()
        if _inside(real_dest, src):
            raise UsageError(f"{destination}: the output must not be inside the source {source}")
        if _inside(src, real_dest):
            raise UsageError(f"{destination}: the output would contain the source {source}; choose another directory")
    if dest.is_symlink() or (dest.exists() and not dest.is_dir()):
        raise UsageError(f"{destination}: exists and is not a directory")
    if dest.exists() and not force:
        raise OutputExistsError(f"{destination}: already exists (pass --force to replace it)")
    return dest


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _clean_stale(parent: Path, name: str) -> None:
    for marker in (_TMP_MARK, _OLD_MARK):
        for leftover in parent.glob(f".{name}{marker}*"):
            pid_text = leftover.name[len(f".{name}{marker}") :].split("-", 1)[0]
            if pid_text.isdigit() and not _pid_alive(int(pid_text)):
                shutil.rmtree(leftover, ignore_errors=True)


def fsync_path(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextlib.contextmanager
def atomic_directory(destination: Path, *, force: bool = False, protect: Iterable[Path] = ()) -> Iterator[Path]:
    """Yield an empty temporary directory; on success it becomes ``destination``."""
    dest = check_destination(destination, force=force, protect=protect)
    parent = dest.parent
    parent.mkdir(parents=True, exist_ok=True)
    _clean_stale(parent, dest.name)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}{_TMP_MARK}{os.getpid()}-", dir=parent))
    try:
        yield tmp
        for child in tmp.iterdir():
            if child.is_file():
                fsync_path(child)
        fsync_path(tmp)
        if dest.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{dest.name}{_OLD_MARK}{os.getpid()}-", dir=parent))
            os.replace(dest, old / dest.name)
            os.replace(tmp, dest)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.rename(tmp, dest)
        fsync_path(parent)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
