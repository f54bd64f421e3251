"""The run directory: claimed by one run only, and left behind only by a run that started.

Two runs must never write into one directory: their records.jsonl lines would interleave
into a file no report can use (``show`` refuses one with two run headers). Every claim is
therefore atomic, not a check followed by a write:

- :func:`new_run_dir` makes a fresh directory for the CLI's default ``runs/NAME-STAMP``
  with ``os.mkdir``, which fails when the name exists; the next name is tried then
  (``NAME-STAMP-2``, ``-3``, …), so runs started in the same second get one each.
- :func:`claim_out_dir` claims a given ``--out`` (``out_dir=``) for as long as the run
  goes: an exclusive lock on the directory (``flock``: released when the process ends, also
  when it is killed) and records.jsonl created with ``O_EXCL``. A second run is refused with
  :class:`OutputExistsError`, even with ``--overwrite``, while the first is running.

A run that fails to start (an unreachable target, a bad option found late, Ctrl-C before
the first line) removes what its claim made: an empty records.jsonl and transcripts.jsonl,
and the directories it created, each only if empty. A run that wrote its header keeps
everything.

    with claim_out_dir(Path("runs/a")) as out:   # OutputExistsError if it holds a result
        ...                                        # write out/records.jsonl
"""

from __future__ import annotations

import contextlib
import errno
import os
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from workloads.model.errors import OutputError, OutputExistsError
from workloads.model.results import RECORDS_FILE, RESULT_FILE
from workloads.model.transcripts import TRANSCRIPTS_FILE

__all__ = ["NewRunDir", "check_out_dir", "claim_out_dir", "new_run_dir"]

# Names tried after the first for a default run directory: -2 … -1000. Runs started in one
# second on one host number a few; past this something is wrong (a loop starting runs).
MAX_SUFFIX = 1000
_WRITTEN = (RESULT_FILE, RECORDS_FILE, TRANSCRIPTS_FILE)  # what a run leaves: never mixed


@dataclass
class NewRunDir:
    """A fresh, empty run directory made by :func:`new_run_dir`, and the directories made
    for it (its own last): :meth:`discard` removes them if the run never started."""

    path: Path
    made: list[Path]

    def discard(self) -> None:
        """Remove the directories made for this run, deepest first, each only if empty."""
        _remove_empty(self.made)


def new_run_dir(base: Path) -> NewRunDir:
    """Make a directory of its own for a run: ``base``, or ``base-2``, ``base-3``, … when
    that name is taken (``os.mkdir`` fails on an existing name, so two runs started at once
    never get the same). Raises :class:`OutputError` when the parent cannot be written."""
    made = _make_parents(base.parent, base)
    for n in range(1, MAX_SUFFIX + 1):
        path = base if n == 1 else base.with_name(f"{base.name}-{n}")
        try:
            os.mkdir(path)
        except FileExistsError:
            continue
        except OSError as err:
            _remove_empty(made)
            raise OutputError.writing(
                path, err, name=f"the run directory {path}", then="; give out_dir=DIR"
            ) from err
        return NewRunDir(path, [*made, path])
    _remove_empty(made)
    raise OutputError(
        f"cannot make a run directory: {base} and {base.name}-2 … "
        f"-{MAX_SUFFIX} all exist; give out_dir=DIR",
        path=str(base),
    )


def check_out_dir(out: Path, *, overwrite: bool = False) -> None:
    """Check, making nothing, that ``out`` could take a new result: not a file, no result in
    it (unless ``overwrite``), and writable (or its nearest existing parent, if it does not
    exist yet). The CLI checks so before it starts a server; :func:`claim_out_dir` claims."""
    existing = _existing(out)
    if existing == out:
        _refuse_present(out, overwrite=overwrite)
    try:
        with tempfile.TemporaryFile(dir=existing):
            pass
    except OSError as err:
        raise _cannot_use(out, err) from err


@contextlib.contextmanager
def claim_out_dir(out: Path, *, overwrite: bool = False) -> Iterator[Path]:
    """Claim ``out`` for one run while the ``with`` lasts: made if missing, locked against
    any other run, its old result removed if ``overwrite`` (else refused if it holds one:
    :class:`OutputExistsError`), and an empty records.jsonl created exclusively.

    Leaving by an exception while records.jsonl is still empty (the run never started)
    removes that file, an empty transcripts.jsonl and the directories made for the claim.
    Raises :class:`OutputError` with a one-line message when ``out`` cannot be written."""
    _existing(out)  # not a file, nor inside one
    made = _make_parents(out, out)
    try:
        with _locked(out):
            present = _refuse_present(out, overwrite=overwrite)
            try:
                for path in present:
                    path.unlink(missing_ok=True)
                os.close(os.open(out / RECORDS_FILE, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
            except FileExistsError as err:  # a run without the lock (another host's NFS)
                raise OutputExistsError(
                    f"{out / RECORDS_FILE} appeared as this run claimed out_dir={_q(out)}: "
                    "another run is writing there; choose another out_dir=",
                    path=str(out / RECORDS_FILE),
                ) from err
            except OSError as err:
                raise _cannot_use(out, err) from err
            try:
                yield out
            except BaseException:
                _remove_empty_files(out)
                raise
    except _Busy:
        raise  # the directory is another run's now, even one this claim made: never removed
    except BaseException:
        _remove_empty(made)
        raise


class _Busy(OutputExistsError):
    """Another run holds the directory's lock."""


def _existing(out: Path) -> Path:
    """``out`` or its nearest existing parent, which must be a directory."""
    path = out
    while not path.exists() and path != path.parent:  # bounded by the path's depth
        path = path.parent
    if path.exists() and not path.is_dir():
        where = "is a file" if path == out else f"is inside {path}, a file"
        raise OutputExistsError(
            f"out_dir={_q(out)} {where}, not a directory; choose a directory",
            path=str(path),
        )
    return path


def _refuse_present(out: Path, *, overwrite: bool) -> list[Path]:
    """The result files already in ``out``; refused unless ``overwrite``."""
    present = [out / name for name in _WRITTEN if (out / name).exists()]
    if present and not overwrite:
        # records.jsonl alone is what a killed run leaves: appending to it would mix runs.
        raise OutputExistsError(
            f"{present[0]} exists; choose another out_dir=, or pass overwrite=True to replace it",
            path=str(present[0]),
        )
    return present


def _make_parents(path: Path, out: Path) -> list[Path]:
    """Make ``path`` and its missing parents; return those made here, outermost first (a
    directory made meanwhile by another process is not ours)."""
    missing: list[Path] = []
    while not path.exists() and path != path.parent:  # bounded by the path's depth
        missing.append(path)
        path = path.parent
    made: list[Path] = []
    for directory in reversed(missing):
        try:
            os.mkdir(directory)
        except FileExistsError:
            continue
        except OSError as err:
            _remove_empty(made)
            if err.errno == errno.ENOTDIR:
                _existing(out)  # says which parent is a file
            raise _cannot_use(out, err) from err
        made.append(directory)
    return made


@contextlib.contextmanager
def _locked(out: Path) -> Iterator[None]:
    """Hold an exclusive lock on the directory ``out`` (flock: advisory, between workloads
    processes on this host; the kernel drops it when the process ends, so a killed run
    leaves no stale lock). Windows has no flock: records.jsonl's O_EXCL is then the claim."""
    if sys.platform == "win32":
        yield
        return
    import fcntl

    try:
        fd = os.open(out, os.O_RDONLY)
    except OSError as err:
        raise _cannot_use(out, err) from err
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as err:
            raise _Busy(
                f"out_dir={_q(out)} is being written by another run now; wait for it to "
                "end, or choose another out_dir=",
                path=str(out),
            ) from err
        yield
    finally:
        os.close(fd)


def _remove_empty_files(out: Path) -> None:
    """When records.jsonl is still empty (the run never wrote its header), remove it and an
    empty transcripts.jsonl: this run made both (its claim refused any that were there)."""
    with contextlib.suppress(OSError):
        if (out / RECORDS_FILE).stat().st_size != 0:
            return  # the run started: everything it wrote stays
        (out / RECORDS_FILE).unlink()
        if (out / TRANSCRIPTS_FILE).stat().st_size == 0:
            (out / TRANSCRIPTS_FILE).unlink()


def _remove_empty(made: list[Path]) -> None:
    """Remove the directories in ``made`` (outermost first), deepest first, each only if it
    is empty; one that is not stays, with its parents."""
    for directory in reversed(made):
        try:
            directory.rmdir()
        except OSError:
            return


def _cannot_use(out: Path, err: OSError) -> OutputError:
    return OutputError.writing(
        out, err, name=f"to out_dir={_q(out)}", then="; choose a writable directory"
    )


def _q(out: Path) -> str:
    """``out`` as the library's messages spell an argument, quoted (the CLI's flag_words
    turns ``out_dir='runs/a'`` into ``--out runs/a``)."""
    return repr(str(out))
