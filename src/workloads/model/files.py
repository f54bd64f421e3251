"""Reading and writing the saved JSON files (result.json, capacity.json) the one way: a
write never leaves a partial file and names the file it could not write
(:class:`OutputError`); a read names the file it could not read (:class:`ResultFormatError`).
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path
from typing import Any

from workloads.model.errors import OutputError, OutputExistsError, ResultFormatError

__all__ = ["read_json", "replace_file", "target_file"]


def target_file(directory: str | Path, name: str, *, overwrite: bool) -> Path:
    """``directory/name``, the directory made if missing; :class:`OutputExistsError` when
    the file exists and not ``overwrite``."""
    out = Path(directory)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise OutputError.writing(out, err) from err
    path = out / name
    if path.exists() and not overwrite:
        raise OutputExistsError(
            f"{path} exists; pass overwrite=True or choose another out_dir=",
            path=str(path),
        )
    return path


def replace_file(path: Path, content: str | bytes) -> Path:
    """Write ``content`` (text as UTF-8, or bytes: a PNG) to ``path`` through ``path.tmp``
    and an atomic rename: a failed write removes the tmp file, leaves a file already at
    ``path`` as it was, and raises :class:`OutputError` naming ``path``."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        tmp.write_bytes(content.encode("utf-8") if isinstance(content, str) else content)
        os.replace(tmp, path)
    except OSError as err:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        raise OutputError.writing(path, err) from err
    return path


def read_json(path: Path, *, missing: str) -> dict[str, Any]:
    """The JSON object in ``path``; :class:`ResultFormatError` naming it when it is missing
    (``missing`` says what), not JSON, or not an object."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as err:
        raise ResultFormatError(f"{path}: {missing}") from err
    except json.JSONDecodeError as err:
        raise ResultFormatError(f"{path}: not JSON ({err})") from err
    if not isinstance(data, dict):
        raise ResultFormatError(f"{path}: not a JSON object with format_version")
    return data
