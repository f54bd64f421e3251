"""The one configuration every saved or validated model shares: frozen (a value, never
edited in place) and ``extra="forbid"`` (a typo in a scenario or a result file is an error,
not a silent default).

A saved file is read with :func:`validate_known` instead: a newer writer may have added
fields this version does not know, which are dropped and named rather than refused. The
models themselves keep forbidding them, so a scenario with a typo stays an error.
"""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

__all__ = ["Frozen", "validate_known"]


class Frozen(BaseModel):
    """Base of every pydantic model in ``workloads``."""

    model_config = ConfigDict(frozen=True, extra="forbid")


M = TypeVar("M", bound=BaseModel)

# Validation passes after the first: one pass reports every unknown field it meets, but a
# field inside a union member that failed for another reason shows up only once that
# member is tried again.
_PASSES = 4


def validate_known(model: type[M], data: Any, unknown: list[str], *, at: str = "") -> M:
    """``model`` validated from saved ``data`` (parsed JSON), dropping the fields ``model``
    does not know: their paths (``summary.turns[].new_figure``, list indices as ``[]``,
    prefixed by ``at``) are appended to ``unknown``, each once, and the fields are removed
    from ``data`` itself. Any other error raises pydantic's ValidationError, as
    :meth:`~pydantic.BaseModel.model_validate` does."""
    for _ in range(_PASSES):
        try:
            return model.model_validate(data)
        except ValidationError as err:
            extra = [e["loc"] for e in err.errors() if e["type"] == "extra_forbidden"]
            if not extra:
                raise
            dropped = [path for loc in extra if (path := _drop(data, loc)) is not None]
            if len(dropped) < len(extra):  # a location that is not in the data as written
                raise
            for path in dropped:
                named = f"{at}.{path}" if at else path
                if named not in unknown:
                    unknown.append(named)
    return model.model_validate(data)


def _drop(data: Any, loc: tuple[int | str, ...]) -> str | None:
    """Remove the field at pydantic's error location ``loc`` from ``data``; its path, or None
    when ``loc`` leads nowhere in ``data``. A location also names the union member it was
    tried as (``function-after[...]``, ``int``): such steps are not keys of the data and are
    passed over."""
    node = data
    path = ""
    *steps, last = loc
    for step in steps:
        if isinstance(node, dict) and step in node:
            node = node[step]
            path += f".{step}"
        elif isinstance(node, list) and isinstance(step, int) and 0 <= step < len(node):
            node = node[step]
            path += "[]"
    if not isinstance(node, dict) or last not in node:
        return None
    del node[last]
    return f"{path}.{last}".lstrip(".")
