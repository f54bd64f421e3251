"""The one configuration every saved or validated model shares: frozen (a value, never
edited in place) and ``extra="forbid"`` (a typo in a scenario or a result file is an error,
not a silent default)."""

from pydantic import BaseModel, ConfigDict

__all__ = ["Frozen"]


class Frozen(BaseModel):
    """Base of every pydantic model in ``workloads``."""

    model_config = ConfigDict(frozen=True, extra="forbid")
