"""``push``: validate, render the model card, and publish a drafter directory as one Hub commit.

Everything here is local; the requests themselves live in ``hub``.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import dialects
from .card import (
    DRIFT_DIR,
    VERIFY_REPORT,
    hub_id,
    read_drift_report,
    read_verify_report,
    render_card,
    verify_report_misfit,
)
from .errors import UsageError, ValidationFailed
from .findings import Finding, errors
from .io import jsonfile
from .validate import validate


@dataclass
class PushOptions:
    """``push``'s options, as the CLI's flags name them."""

    repo_id: str
    private: bool = False
    revision: str | None = None
    create_pr: bool = False
    commit_message: str | None = None
    token: str | None = None
    endpoint: str | None = None
    dry_run: bool = False
    validate: bool = True
    overwrite_card: bool = False
    base_model: str | None = None  # the verifier's Hub id for the card
    allow_untrained: bool = False  # publish a drafter eaglekit upgraded to 3.1 and nobody trained since
    allow_ambiguous: bool = False  # publish a checkpoint whose files fit two readings of its aux layers
    report: str | None = (
        None  # an `eaglekit drift --report` directory: its figures into the card, its plots into the commit
    )


def collect_files(directory: Path, roots: tuple[Path, ...] = ()) -> list[Path]:
    """Regular files under ``directory``, hidden ones and caches left out, each resolving inside it (or inside
    ``roots``: a Hub cache snapshot links into its repo's ``blobs/``)."""
    root = directory.resolve()
    files = []
    for path in sorted(directory.rglob("*")):
        relative = path.relative_to(directory)
        if any(part.startswith(".") or part == "__pycache__" for part in relative.parts):
            continue
        if path.is_dir():
            continue
        try:
            str(relative).encode("utf-8")
        except UnicodeEncodeError:  # a byte the file system kept that no UTF-8 name (a Hub path) can hold
            raise UsageError(
                f"{directory}: a file name that is not UTF-8 ({ascii(str(relative))}); rename it or move it out before"
                " pushing"
            ) from None
        try:
            real = path.resolve()
        except (RuntimeError, OSError) as exc:  # Python 3.11 raises RuntimeError for a symlink loop
            raise UsageError(
                f"{path}: a symlink loop or a path that cannot be resolved ({exc.__class__.__name__}); refusing to"
                " upload it"
            ) from None
        if root not in real.parents and not any(r in real.parents for r in roots):
            raise UsageError(f"{path}: a symlink pointing outside {directory}; refusing to upload it")
        if real.is_file():
            files.append(path)
    return files


# How a path on someone's machine starts: absolute, home, dotted, a file URL, a Windows share, a home variable
_LOCAL_PREFIXES = ("/", "~", "./", "../", "file:", "\\\\", "$HOME", "${HOME}", "%USERPROFILE%", "%HOMEPATH%")


def _is_local_path(value: str) -> bool:
    """An absolute, home or dotted path (or a file URL, a Windows share, a home variable), or a relative one that
    names something here (``models/target``, which a Hub id looks like too: the card's ``hub_id`` draws the same line).
    """
    if value.startswith(_LOCAL_PREFIXES) or (len(value) > 2 and value[1] == ":" and value[2] in "\\/"):
        return True
    return ("/" in value or "\\" in value) and Path(value).exists()


# Keys whose value names the target model (the verifier of a speculators config or of eaglekit's block, a verify
# report's target): a path there is replaced by the base model's Hub id where one is given.
TARGET_KEYS = ("verifier", "name_or_path", "target")


# A path inside a longer string (a finding's message, a note: "converted from /home/alice/ckpt"): one of the prefixed
# forms above (and ``~user/x``, ``//server/share``, scp's ``user@host:/x`` and ``host.domain:/x``), at the string's
# start
# or after a character that cannot end a word of a path (a space, a quote of any kind, a bracket, "=", ",", ";", ":",
# "*", "|", "-", a dash), up to the next quote, closing bracket, ",", ";" or "|", or a space not followed by more of the
# path (a word, then a slash: ``/Users/Bob Smith/ckpts`` is one path). A bare absolute path there is one whose first
# part is a folder machines keep files under (``MACHINE_ROOTS``), or one that starts the string (a finding's message
# starts with its file's path): text holds many other slashed words, a URL's route (``/v1/chat/completions``), a
# relative link (``/abs/2503.01840``), a date, a ratio ("3.1 /4", "tok /s"). A relative
# path inside a sentence (``models/target``) is not recognised: nothing tells it from a Hub id or a ratio there.
MACHINE_ROOTS = (
    "home",
    "Users",
    "root",
    "mnt",
    "media",
    "Volumes",
    "private",
    "tmp",
    "var",
    "opt",
    "srv",
    "usr",
    "etc",
    "data",
    "datasets",
    "scratch",
    "work",
    "workspace",
    "workspaces",
    "project",
    "projects",
    "lustre",
    "gpfs",
    "weka",
    "nfs",
    "net",
    "fsx",
    "efs",
    "cluster",
    "storage",
    "shared",
    "export",
    "raid",
    "nvme",
    "local",
    "models",
    "checkpoints",
    "ckpt",
    "ckpts",
    "cache",
    "content",
    "kaggle",
    "dbfs",
    "Workspace",
)
_QUOTES = "\"'`\u201c\u201d\u2018\u2019\u00ab\u00bb\u300c\u300d\u300e\u300f"
_BEFORE = rf"(?:^|(?<=[\s{_QUOTES}=(\[{{,;:*|<>\u2013\u2014\uff08-]))"
_STOP = rf"\s{_QUOTES})\]}},;|\uff09"
_PART = (  # a path's character, or a space inside it (a word, then a slash)
    rf"(?:[^{_STOP}]| (?=\w[^{_STOP}\\/:]*[\\/]))"
)
_EMBEDDED_PATH = re.compile(
    _BEFORE + r"(?:"
    rf"(?:[\w.+-]+@[\w.-]+:|[\w-]+(?:\.[\w-]+)+:)/[\w.~$%-]{_PART}*"  # scp: alice@host:/x, gpu01.corp.example.com:/x
    rf"|/(?:{'|'.join(MACHINE_ROOTS)})[\\/][\w.~$%-]{_PART}*"  # /home/alice, /data/run3/x
    # any absolute path that starts the string (a finding's message starts with its file)
    rf"|^/[\w.~$%-]+/[\w.~$%-]{_PART}*"
    # ~/x, ~bob/x, $HOME/x, ./x
    rf"|(?:~[\w.-]*|\$HOME|\$\{{HOME\}}|%USERPROFILE%|%HOMEPATH%|\.\.?)[\\/][\w.~$%-]{_PART}*"
    # file URLs, C:\x, \\server, //server/x
    rf"|file:{_PART}+|[A-Za-z]:[\\/]{_PART}*|\\\\{_PART}+|(?<!:)//[\w.-]+/{_PART}+)"
)
# A home folder itself (``/home/alice``, ``C:\Users\alice``): its last part is a user's name, replaced by "~"
_HOME_FOLDER = re.compile(
    r"(?:.*:)?(?:/root|(?:/home|/Users|[A-Za-z]:[\\/]Users)(?:[\\/][^\\/]*)?)[\\/]?", re.IGNORECASE
)


def _is_whole_path(s: str) -> bool:
    """A string that is one local path: no space in it, or spaces only inside its parts (``C:\\Users\\Bob
    Smith\\llama``), or it names something here; a string that goes on past its path is a sentence (``CKPT/config.json:
    ...``)."""
    if not _is_local_path(s):
        return False
    if not any(c.isspace() for c in s) or Path(s).exists():
        return True
    match = _EMBEDDED_PATH.match(s)
    return match is not None and match.end() == len(s)


def _path_end(path: str) -> str:
    """A path as it ends inside a sentence: a full stop or a colon after it is the sentence's."""
    return path.rstrip(".:")


def _embedded(match: re.Match) -> tuple[str, str] | None:
    """(the path an ``_EMBEDDED_PATH`` match holds, the name it is replaced by), or None where it names nothing
    (``./``)."""
    path = _path_end(match.group(0))
    name = _last_part(path)
    return None if name in ("", ".", "..") else (path, name)


def _embedded_paths(text: str) -> list[tuple[str, str]]:
    """The local paths inside ``text`` with their names (``_embedded``)."""
    return [found for found in map(_embedded, _EMBEDDED_PATH.finditer(text)) if found is not None]


def _last_part(path: str) -> str:
    """A path's file name (split at either slash: a Windows path is one name to this machine's ``Path``); "~" for a home
    folder itself, whose name is a user's."""
    if _HOME_FOLDER.fullmatch(path):
        return "~"
    return re.split(r"[\\/]", path.rstrip("\\/"))[-1]


def _scrub_inside(text: str) -> str:
    """``text`` with each local path inside it (only where it stands as a path) replaced by its file name."""

    def one(m: re.Match) -> str:
        found = _embedded(m)
        return m.group(0) if found is None else found[1] + m.group(0)[len(found[0]) :]  # a full stop after it kept

    return _EMBEDDED_PATH.sub(one, text)


def replace_paths(text: str, paths: dict[str, str]) -> str:
    """``text`` (a card) with each of ``paths`` replaced by its name where it stands as a path: not inside a longer
    word (``/model`` in ``org/model``, a Hub id the card names)."""
    for local in sorted(paths, key=len, reverse=True):
        text = re.sub(_BEFORE + re.escape(local) + rf"(?=$|[{_STOP}:.*<>])", lambda _m, name=paths[local]: name, text)
    return text


def _replacement(path: str, key: str | None, base_model: str | None) -> str:
    """What ``scrub_local_paths`` puts in place of ``path``: the base model's id for the target, else its last part
    (split at either slash: a Windows path is one name to this machine's ``Path``)."""
    return base_model if base_model and key in TARGET_KEYS else _last_part(path)


def _map_strings(value: Any, change, key: str | None = None) -> Any:
    """``value`` (parsed JSON) with each string ``s`` under ``key`` replaced by ``change(s, key)``."""
    if isinstance(value, dict):
        return {k: _map_strings(v, change, k) for k, v in value.items()}
    if isinstance(value, list):
        return [_map_strings(v, change, key) for v in value]
    return change(value, key) if isinstance(value, str) else value


def _scrubbed(s: str, key: str | None, base_model: str | None) -> str:
    """A string that is a local path replaced (``_replacement``); else each local path inside it by its file name."""
    return _replacement(s, key, base_model) if _is_whole_path(s) else _scrub_inside(s)


def scrub_local_paths(value: Any, base_model: str | None) -> Any:
    """``value`` (parsed JSON) with every path on the publisher's machine replaced: the target's (``TARGET_KEYS``) by
    the base model's Hub id where one is given, any other by the path's file name, inside a longer string too. What a
    published file says must mean something to its readers and name nothing of the publisher's machine."""
    return _map_strings(value, lambda s, key: _scrubbed(s, key, base_model))


def _local_paths(value: Any, base_model: str | None) -> dict[str, str]:
    """Every string in ``value`` (parsed JSON) that ``scrub_local_paths`` replaces by a name, with that name; a path
    that names nothing (``./``) says nothing of the machine and is left out, as replacing it in a card's text would
    change other text (``./out`` in a command line)."""
    found: dict[str, str] = {}

    def note(s: str, key: str | None) -> str:
        if _is_whole_path(s):
            if _replacement(s, key, base_model) not in ("", ".", ".."):
                found.setdefault(s, _replacement(s, key, base_model))
        else:
            for path, name in _embedded_paths(s):
                found.setdefault(path, name)
        return s

    _map_strings(value, note)
    return found


# The JSON files of a drafter that may record where things were on the publisher's machine.
_SCRUBBED = ("config.json", VERIFY_REPORT)


def check_options(options: PushOptions) -> str:
    """Refuse what no push could do with these options (a bad REPO_ID, --base-model or --revision), before a Hub source
    is downloaded and before anything is read; the branch pushed to."""
    from .io.hub_ids import branch_for, check_repo_id

    check_repo_id(options.repo_id)
    _check_base_model(options.base_model)
    if options.create_pr and options.revision not in (None, "main"):
        raise UsageError("`create_pr` opens a pull request against the default branch: drop `revision`")
    return branch_for(options.revision)  # what the push itself would refuse (a commit id), refused by a dry run too


def prepare(path: str, options: PushOptions):
    """(UploadFile list, card text, card kept?, validation findings), without touching the network."""
    branch = check_options(options)
    drift = _drift_report(options)  # bad input refused before anything else
    findings = _validation_findings(path, options) if options.validate else []
    with dialects.load(path) as loaded:
        card, warning = _card_for(loaded, options, branch, drift)
    if warning is not None:
        findings = [*findings, warning]
    files, kept = _files_to_publish(path, options, drift, card)
    _refuse_secrets(files, options)
    return files, card, kept, findings


def _drift_report(options: PushOptions) -> tuple[dict, list[Path]] | None:
    """The ``--report`` drift report to publish (its figures and plots), scrubbed of local paths; None without one."""
    drift = read_drift_report(Path(options.report)) if options.report else None
    if drift:  # what is published of it names no path on the publisher's machine
        drift = (scrub_local_paths(drift[0], None), drift[1])
    return drift


def _validation_findings(path: str, options: PushOptions) -> list[Finding]:
    """validate's findings on the drafter; a drafter that does not validate is refused, and so is one whose files fit
    two readings unless ``allow_ambiguous``."""
    report = validate(path)
    findings = report.findings
    problems = errors(findings)
    if problems:
        raise ValidationFailed(
            f"refusing to publish: the drafter does not validate: {problems[0].message}"
            + (f", and {len(problems) - 1} more (see `eaglekit validate`)" if len(problems) > 1 else ""),
            findings,
        )
    if report.ambiguity is not None and not options.allow_ambiguous:
        # a warning for validate (the checkpoint is readable), a refusal here: a published checkpoint is read by
        # engines one way, and nothing in its files says which way was meant
        ambiguous = next(f for f in findings if f.check in ("dialect.ambiguous", "aux.ambiguous"))
        raise ValidationFailed(
            f"refusing to publish: {ambiguous.message} (each engine reads a published checkpoint one way and"
            " nothing in its files says which was meant: decide with `eaglekit convert --from DIALECT`,"
            " `aux_layers` or `target` T `resolve` first, or pass `allow_ambiguous`)",
            findings,
        )
    return findings


def _card_for(loaded, options: PushOptions, branch: str, drift) -> tuple[str, Finding | None]:
    """The model card for the loaded drafter (its provenance, ``base_model``, verify report and drift figures), with
    local paths scrubbed as its files are, and the warning when it can name no base model. An untrained 3.1 upgrade
    (unless ``allow_untrained``) and a verify report on another drafter are refused."""
    loaded.drafter = loaded.drafter.with_(
        provenance=loaded.drafter.provenance.from_hub(loaded.checkpoint.located.origin)
    )
    if loaded.drafter.provenance.untrained_upgrade and not options.allow_untrained:
        raise ValidationFailed(
            "refusing to publish: eaglekit upgraded this drafter to EAGLE 3.1 with fc_norm weights of ones and it"
            " has not been trained since, so it would serve with poor acceptance; fine-tune it first, or pass"
            " `allow_untrained`"
        )
    if options.base_model:
        loaded.drafter = loaded.drafter.with_(verifier=options.base_model)
    verify_report = read_verify_report(loaded.checkpoint.directory)
    misfit = verify_report_misfit(verify_report, loaded.drafter) if verify_report else None
    if misfit:
        raise UsageError(
            f"refusing to publish: {VERIFY_REPORT} is not a report on this drafter: {misfit}; run `eaglekit verify "
            f"--report {VERIFY_REPORT}` again, or remove it"
        )
    card = render_card(
        loaded,
        options.repo_id,
        validated=options.validate,
        verify_report=verify_report,
        drift=(drift[0], [f"{DRIFT_DIR}/{p.name}" for p in drift[1]]) if drift else None,
        revision=None if options.create_pr else branch,
    )
    # what the card quotes of config.json and the verify report, scrubbed as those files are when uploaded
    quoted = {
        **_local_paths(verify_report, options.base_model),
        **_local_paths(loaded.checkpoint.config, options.base_model),
    }
    card = replace_paths(card, quoted)
    if hub_id(loaded.drafter.verifier) is not None:
        return card, None
    return card, Finding(
        "card.base_model",
        "warning",
        "the drafter names its target by a local path or not at all, so "
        "the card names no base model and its serve line says <target model>: pass `base_model` ORG/NAME",
    )


def _files_to_publish(path: str, options: PushOptions, drift, card: str) -> tuple[list, bool]:
    """The drafter's files (config.json and the verify report scrubbed), the drift report's, and the card unless the
    drafter holds its own README.md and ``overwrite_card`` is off; whether the drafter's own card was kept."""
    from .upload import UploadFile

    directory = Path(path)
    files = [
        _upload(p, p.relative_to(directory).as_posix(), options.base_model)
        for p in collect_files(directory, getattr(path, "roots", ()))
    ]
    if drift:  # the plots and the figures, in the same commit as everything else
        files = _with_drift_figures(files, drift, Path(options.report))
    kept = any(f.path_in_repo == "README.md" for f in files) and not options.overwrite_card
    if not kept:
        files = [f for f in files if f.path_in_repo != "README.md"]
        files.append(UploadFile("README.md", data=card.encode("utf-8")))
    return files, kept


def _with_drift_figures(files: list, drift: tuple[dict, list[Path]], report: Path) -> list:
    """``files`` with the drift report's figures (its scrubbed report.json and its plots) under DRIFT_DIR, in place of
    any of the drafter's files under those names or inside the report's directory."""
    from .upload import UploadFile

    report_json = jsonfile.dumps(drift[0]).encode("utf-8")
    figures = [UploadFile(f"{DRIFT_DIR}/report.json", data=report_json)] + [
        UploadFile(f"{DRIFT_DIR}/{p.name}", local_path=p) for p in drift[1]
    ]
    # a report kept inside the drafter goes up once, as the figures: not also as the files it was collected as
    # (its raw report.json names paths of this machine), and nothing else of the drafter's under the same names
    report_dir = report.resolve()
    taken = {f.path_in_repo for f in figures}
    return [
        f
        for f in files
        if f.path_in_repo not in taken
        and not (f.local_path is not None and report_dir in Path(f.local_path).resolve().parents)
    ] + figures


def _refuse_secrets(files: list, options: PushOptions) -> None:
    """Refuse a push whose files hold what looks like a secret (the token given included): a dry run's too."""
    given = (options.token or "", os.environ.get("HF_TOKEN", ""))  # without the Hub client: a dry run imports none
    for f in files:  # a secret in a note, a config key or a report would be published as it is: refused, dry run too
        found = f.secret(given)
        if found:
            raise UsageError(
                f"refusing to publish: {f.path_in_repo} holds what looks like {found}; remove it first "
                "(what a push publishes is readable by everyone who can see the repository)"
            )


def _check_base_model(base_model: str | None) -> None:
    """``--base-model`` must be what the card can name: a Hub id (``card.hub_id``); anything else was dropped in
    silence."""
    from .io.hub_ids import repo_id_problem

    if base_model is None or hub_id(base_model) is not None:
        return
    if not base_model:
        why = "it is empty"
    elif Path(base_model).exists():
        why = "it names a path on this machine, which the card never publishes"
    else:
        why = repo_id_problem(base_model) or "give it as namespace/name"
    raise UsageError(f"`base_model` {base_model!r} is not a Hub repo id: {why} (e.g. meta-llama/Llama-3.1-8B-Instruct)")


def _upload(path: Path, name: str, base_model: str | None):
    from .upload import UploadFile

    if name in _SCRUBBED:
        original = jsonfile.load(path, name)
        scrubbed = scrub_local_paths(original, base_model)
        if scrubbed != original:
            return UploadFile(name, data=jsonfile.dumps(scrubbed).encode("utf-8"))
    return UploadFile(name, local_path=path)


def push(path: str, options: PushOptions) -> dict:
    files, card, kept, findings = prepare(path, options)
    message = options.commit_message or "Upload EAGLE drafter with eaglekit"
    target = {
        "repo_id": options.repo_id,
        "revision": options.revision or "main",
        "create_pr": options.create_pr,
        "private": options.private,
    }
    listing = [{"path": f.path_in_repo, "size": f.size, "sha256": f.sha256} for f in files]
    result: dict = {
        "target": target,
        "files": listing,
        "card": card,
        "card_kept": kept,
        "validated": options.validate,
        "dry_run": options.dry_run,
        "findings": [f.to_dict() for f in findings if f.severity != "info"],
    }
    if options.dry_run:
        return result
    from . import hub

    published = hub.publish(
        options.repo_id,
        files,
        endpoint=options.endpoint,
        token=options.token,
        private=options.private,
        revision=options.revision,
        create_pr=options.create_pr,
        commit_message=message,
    )
    result["commit"] = published.to_dict() if hasattr(published, "to_dict") else published.__dict__
    return result
