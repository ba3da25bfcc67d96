"""Atomic output directories: everything is written into a hidden sibling, renamed into place when complete.

A failed, interrupted or killed run leaves no destination (or the old one, untouched); its hidden
``.NAME.eaglekit-tmp-PID-*`` folder is removed by the next run once that PID is gone.

``force`` replaces only what is safe to replace: an empty directory, or one that the caller's ``replaceable``
test recognises as its own earlier output. Anything else (a user's project, a directory with one file too
many) is refused with what it holds: a flag must never delete files eaglekit did not write.
The output directory gets the permissions ``mkdir`` would give it (0777 less the umask), not mkdtemp's 0700.
"""

from __future__ import annotations

import contextlib
import errno
import glob
import os
import re
import shutil
import signal
import tempfile
import threading
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from ..errors import EaglekitError, OutputExistsError, UsageError
from .locate import NAME_MAX_BYTES, overlong_part

_TMP_MARK = ".eaglekit-tmp-"
_OLD_MARK = ".eaglekit-old-"


def _inside(a: Path, b: Path) -> bool:
    return a == b or b in a.parents


# Given an existing directory, the entries that make it NOT a replaceable earlier output ([] = replaceable).
Replaceable = Callable[[Path], list[str]]


def _nothing_is_replaceable(directory: Path) -> list[str]:
    return sorted(p.name + ("/" if p.is_dir() else "") for p in directory.iterdir())


def output_path(destination: str | Path) -> Path:
    """The absolute path an output named ``destination`` is written at, as the system resolves it: the folders above it
    with their symlinks followed (``q/link/../out`` is where ``mkdir -p`` would put it, not ``q/out``), the last part
    as given (a symlink there is refused, never followed)."""
    given = Path(destination)
    if given.name in ("", ".", ".."):
        return Path(os.path.realpath(given))
    return Path(os.path.realpath(given.parent)) / given.name


def check_destination(
    destination: Path,
    *,
    force: bool,
    protect: Iterable[Path] = (),
    replaceable: Replaceable = _nothing_is_replaceable,
    appeared: bool = False,
    force_flag: str | None = "`force`",
) -> Path:
    """Refuse destinations that would clobber a source, a user's files, or an existing output without ``force``.
    ``appeared``: the check made once the output is complete, of a destination that did not exist at the start.
    ``force_flag``: the option that asked for ``force``, named in the refusals (None: the command always replaces an
    earlier output of its own)."""
    _check_name_room(destination, Path(os.path.abspath(destination)))  # before any stat: a too-long name raises there
    dest = output_path(destination)
    real_dest = dest.resolve()
    for source in protect:
        src = Path(source).resolve()
        if _inside(real_dest, src):
            raise UsageError(f"{destination}: the output must not be inside the source {source}")
        if _inside(src, real_dest):
            raise UsageError(f"{destination}: the output would contain the source {source}; choose another directory")
    if dest.is_symlink():
        raise UsageError(
            f"{destination}: is a symlink; give the directory itself (an output replaces what it names, never through a"
            " link)"
        )
    if dest.exists() and not dest.is_dir():
        raise UsageError(f"{destination}: exists and is not a directory")
    if not dest.exists():
        nearest = next(p for p in dest.parents if p.exists() or p.is_symlink())  # the root exists: always found
        if not nearest.is_dir():
            raise UsageError(f"{destination}: cannot be created: {nearest} is not a directory")
        if not os.access(nearest, os.W_OK | os.X_OK):
            raise UsageError(f"{destination}: cannot be created: {nearest} is not writable")
    if appeared and dest.exists():
        raise OutputExistsError(
            f"{destination}: appeared while the output was written; nothing replaced, the finished output discarded"
        )
    if dest.exists():
        # what --force could not replace is said first, with or without it: "pass --force" to a folder of the user's
        # files only led to a second refusal
        foreign = replaceable(dest) if any(dest.iterdir()) else []
        if foreign:
            shown = ", ".join(foreign[:5]) + (f" and {len(foreign) - 5} more" if len(foreign) > 5 else "")
            raise OutputExistsError(
                f"{destination}: not replaced{' even with ' + force_flag if force_flag else ''}: it holds files"
                f" eaglekit did not write ({shown}); choose an empty or new directory"
            )
        if _is_mount_point(dest):  # a mounted volume cannot be renamed aside (EBUSY): said before any work
            raise UsageError(f"{destination}: {_MOUNTED}")
        if not force:
            raise OutputExistsError(f"{destination}: already exists (pass {force_flag or '`force`'} to replace it)")
    return dest


# The longest suffix eaglekit adds to an output's name for its hidden siblings: ".NAME" + mark + pid + "-" + mkdtemp's 8
_SIBLING_EXTRA = 1 + max(len(_TMP_MARK), len(_OLD_MARK)) + 10 + 1 + 8


_MOUNTED = "a mount point cannot be replaced as a whole; write into a new directory inside it"


def _is_mount_point(path: Path) -> bool:
    """Whether ``path`` is where a file system is mounted: ``os.path.ismount``, or (Linux) a mount point the kernel
    lists, which takes in a bind mount of a folder of the same file system (``ismount`` sees none)."""
    if os.path.ismount(path):
        return True
    try:
        with open("/proc/self/mountinfo", encoding="utf-8", errors="surrogateescape") as f:
            points = {line.split()[4] for line in f if len(line.split()) > 4}
    except OSError:
        return False
    # the kernel writes a space, tab, newline and backslash in a mount point as octal escapes
    unescape = lambda p: re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), p)
    return str(path.resolve()) in {unescape(p) for p in points}


def _check_name_room(destination: Path, dest: Path) -> None:
    """Refuse a name no file system holds (a part of the path over 255 bytes), and one too long to leave room for the
    hidden temporary sibling the output is written in (a 230-byte name is a valid folder, but
    ``.NAME.eaglekit-tmp-PID-XXXXXXXX`` is not)."""
    too_long = overlong_part(dest.parts)
    if too_long is not None:
        raise UsageError(
            f"{destination}: a part of the path is {len(os.fsencode(too_long))} bytes long; a file system holds at most"
            f" {NAME_MAX_BYTES}"
        )
    nearest = next((p for p in (dest.parent, *dest.parent.parents) if p.is_dir()), None)
    try:
        limit = os.pathconf(nearest, "PC_NAME_MAX") if nearest is not None else NAME_MAX_BYTES
    except (OSError, ValueError, AttributeError):
        limit = NAME_MAX_BYTES
    length = len(os.fsencode(dest.name))
    if length + _SIBLING_EXTRA > limit:
        raise UsageError(
            f"{destination}: a name of {length} bytes leaves no room for the hidden folder it is written in beside it "
            f"(at most {limit - _SIBLING_EXTRA} bytes here); choose a shorter name"
        )


def pid_alive(pid: int) -> bool:
    """Whether a process ``pid`` exists (owned by anyone): a writer whose temporary files must not be swept."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _clean_stale(parent: Path, name: str) -> None:
    for marker in (_TMP_MARK, _OLD_MARK):
        for leftover in parent.glob(f"{glob.escape('.' + name + marker)}*"):
            pid_text = leftover.name[len(f".{name}{marker}") :].split("-", 1)[0]
            if pid_text.isdigit() and not pid_alive(int(pid_text)):
                shutil.rmtree(leftover, ignore_errors=True)


def fsync_path(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def check_output_file(
    path: str | Path, *, inputs: Iterable[str | Path | None] = (), kept_beside: tuple[str | Path, str] | None = None
) -> Path:
    """Refuse, before any work, an output file that could not be written or would overwrite an input: its folder
    must exist, it must not be a folder, and it must be none of ``inputs`` (files) nor inside one of them (folders),
    except ``kept_beside`` = (an input folder, a name): that name directly in that folder (a report eaglekit keeps
    beside a drafter's weights; not in the target's folder, nor a folder below)."""
    out = Path(path).expanduser()
    if out.is_dir():
        raise UsageError(f"{out}: is a directory; give a file name")
    if not out.parent.is_dir():
        raise UsageError(f"{out}: its folder {out.parent} does not exist")
    resolved = out.resolve()
    for given in inputs:
        if given is None or not Path(given).expanduser().exists():
            continue  # a Hub id, or nothing given
        source = Path(given).expanduser().resolve()
        kept = (
            kept_beside is not None
            and resolved.parent == Path(kept_beside[0]).expanduser().resolve() == source
            and out.name == kept_beside[1]
        )
        if resolved == source or (_inside(resolved, source) and not kept):
            raise UsageError(
                f"{out}: would overwrite {'' if resolved == source else 'a file of '}the input {given}; write it"
                " elsewhere"
            )
    return out


def check_file_destination(
    destination: str | Path,
    *,
    force: bool,
    protect: Iterable[Path] = (),
    replaceable: Callable[[Path], bool] = lambda path: False,
    appeared: bool = False,
) -> Path:
    """An output that is one file (a GGUF drafter): refused where it would clobber a source (``protect``: files or
    folders), a folder, or an existing file without ``force``; with ``force`` only a file ``replaceable`` recognises as
    an earlier output of eaglekit's is replaced. ``appeared``: checked again once written, of a file that did not exist
    at the start."""
    _check_name_room(Path(destination), Path(os.path.abspath(destination)))
    dest = output_path(destination)
    for source in protect:
        src = Path(source).resolve()
        if dest.resolve() == src or _inside(dest.resolve(), src):
            raise UsageError(
                f"{destination}: would overwrite {'' if dest.resolve() == src else 'a file of '}the input {source}"
            )
    if dest.is_symlink():
        raise UsageError(
            f"{destination}: is a symlink; give the file itself (an output is never written through a link)"
        )
    if dest.is_dir():
        raise UsageError(f"{destination}: is a directory; give a file name")
    if not dest.parent.is_dir():
        raise UsageError(f"{destination}: its folder {dest.parent} does not exist")
    if not os.access(dest.parent, os.W_OK | os.X_OK):
        raise UsageError(f"{destination}: cannot be created: {dest.parent} is not writable")
    if appeared and dest.exists():
        raise OutputExistsError(f"{destination}: appeared while the output was written; nothing replaced")
    if dest.exists() and not force:
        raise OutputExistsError(f"{destination}: already exists (pass `force` to replace it)")
    if dest.exists() and not replaceable(dest):
        raise OutputExistsError(
            f"{destination}: not replaced even with `force`: eaglekit did not write it; choose another file name"
        )
    return dest


def write_file_atomically(path: str | Path, data: bytes | str | Callable[[Path], None]) -> Path:
    """One file written beside ``path`` under a hidden name and renamed over it once complete and synced: a reader
    (or a crash) sees the old file or the new one, never half of one. ``data`` is the content, or a function that
    writes the file at the path it is given (a plot's ``savefig``)."""
    path = Path(path)
    fd, name = tempfile.mkstemp(prefix=f".{path.name}{_TMP_MARK}{os.getpid()}-", dir=path.parent)
    tmp = Path(name)
    try:
        with os.fdopen(fd, "wb") as f:
            if isinstance(data, (bytes, str)):
                f.write(data.encode("utf-8") if isinstance(data, str) else data)
        if callable(data):
            data(tmp)
        os.chmod(tmp, 0o666 & ~_umask())  # what open() would have given the file, not mkstemp's 0600
        fsync_path(tmp)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


@contextlib.contextmanager
def atomic_directory(
    destination: Path,
    *,
    force: bool = False,
    protect: Iterable[Path] = (),
    replaceable: Replaceable = _nothing_is_replaceable,
    force_flag: str | None = "`force`",
) -> Iterator[Path]:
    """Yield an empty temporary directory; on success it becomes ``destination``. The destination is checked before
    and again once the output is complete, right before it takes the destination's place: a folder that appeared
    meanwhile (another process, a user) is refused as it would have been at the start, not replaced."""
    dest = check_destination(destination, force=force, protect=protect, replaceable=replaceable, force_flag=force_flag)
    existed = dest.exists()
    parent = dest.parent
    created = [p for p in (parent, *parent.parents) if not (p.exists() or p.is_symlink())]  # removed again on failure
    try:
        parent.mkdir(parents=True, exist_ok=True)
        _clean_stale(parent, dest.name)
        tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}{_TMP_MARK}{os.getpid()}-", dir=parent))
    except OSError as exc:  # what check_destination cannot see ahead (a read-only or immutable folder, a full disk)
        _remove_created(created)
        refused_here = exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOTDIR, errno.EEXIST)
        raise (UsageError if refused_here else EaglekitError)(
            f"{destination}: cannot be written there: {exc.strerror or exc}"
        ) from None
    os.chmod(tmp, 0o777 & ~_umask())
    try:
        yield tmp
        # The one durability pass: every file, then the directory, then the rename (writers do not fsync on their
        # own), so a crash before the rename leaves only the hidden temporary directory, never a partial output.
        for child in sorted(tmp.rglob("*")):
            if child.is_file():
                fsync_path(child)
            elif child.is_dir():
                fsync_path(child)
        fsync_path(tmp)
        # as it is now, not as it was: the very folder resolved at the start (a symlink above it may point elsewhere
        # now)
        check_destination(
            dest, force=force, protect=protect, replaceable=replaceable, appeared=not existed, force_flag=force_flag
        )
        with _signals_held():  # the swap runs to its end: Ctrl-C or SIGTERM between its renames would lose an output
            _swap_into_place(tmp, dest, parent, destination)
        fsync_path(parent)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        _remove_created(created)
        raise


@contextlib.contextmanager
def _signals_held() -> Iterator[None]:
    """Ctrl-C and SIGTERM held back until the block ends, then handled as they would have been (the first of them).
    Done with Python's handlers, not the thread's signal mask: another thread (torch's, tqdm's) would take a masked
    signal and the main thread would still run the handler. Outside the main thread nothing is held (no handler can
    be set there)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    pending: list[int] = []
    saved = {number: signal.getsignal(number) for number in (signal.SIGINT, signal.SIGTERM)}
    for number in saved:
        signal.signal(number, lambda got, frame: pending.append(got))
    try:
        yield
    finally:
        for number, handler in saved.items():
            signal.signal(number, handler)
        if pending:
            handler = saved[pending[0]]
            if callable(handler):
                handler(pending[0], None)
            elif handler == signal.SIG_DFL:
                signal.raise_signal(pending[0])


def _swap_into_place(tmp: Path, dest: Path, parent: Path, destination: Path) -> None:
    """``tmp`` renamed to ``dest``; an existing ``dest`` first moved aside, and put back if the second rename fails."""
    if not dest.exists():
        os.rename(tmp, dest)
        return
    old = Path(tempfile.mkdtemp(prefix=f".{dest.name}{_OLD_MARK}{os.getpid()}-", dir=parent))
    try:
        os.replace(dest, old / dest.name)
    except OSError as exc:
        shutil.rmtree(old, ignore_errors=True)  # nothing was moved into it
        if exc.errno == errno.EBUSY:  # a mount point no check saw (one mounted during the run)
            raise UsageError(f"{destination}: {_MOUNTED}") from None
        raise
    try:
        os.replace(tmp, dest)
    except BaseException:
        os.replace(old / dest.name, dest)  # the old output back where it was
        shutil.rmtree(old, ignore_errors=True)
        raise
    shutil.rmtree(old, ignore_errors=True)


def _remove_created(created: list[Path]) -> None:
    """The folders a failed write made above its output (innermost first), each only while it stays empty."""
    for folder in created:
        try:
            folder.rmdir()
        except OSError:
            return


def destination_status(out: str | Path, *, force: bool, protect: list[Path], check: Callable[..., None]) -> dict:
    """What writing ``out`` would do, for a dry run: whether it exists, whether the conversion needs ``--force``, the
    entries ``--force`` replaces, and the refusal the same command without ``--dry-run`` would stop with (or None).
    ``check(dest, force=, protect=)`` raises where the write would be refused (convert's ``check_output``)."""
    dest = Path(out)
    exists = dest.exists() or dest.is_symlink()

    def refusal(with_force: bool) -> str | None:
        try:
            check(dest, force=with_force, protect=protect)
        except EaglekitError as exc:
            return str(exc)
        return None

    forced = refusal(True)  # a refusal even --force cannot lift (a user's files, the source) is the one to show
    stop = forced if forced or force else refusal(False)
    replaces = []
    if exists and not forced:
        replaces = (
            sorted(p.name + ("/" if p.is_dir() else "") for p in dest.iterdir()) if dest.is_dir() else [dest.name]
        )
    return {
        "path": str(out),
        "exists": exists,
        "needs_force": exists and not forced,
        "replaces": replaces,
        "refusal": stop,
    }
