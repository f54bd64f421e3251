"""The server under test: where it is, which model, where its API key comes from."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

__all__ = ["DEFAULT_API_KEY_ENV", "Target"]

DEFAULT_API_KEY_ENV = "WORKLOADS_API_KEY"


@dataclass(frozen=True)
class Target:
    """The OpenAI-compatible server under test.

    ``base_url`` ends in ``/v1``. ``model`` None means: the first model ``/v1/models`` lists.
    The API key is read from the environment variable ``api_key_env`` when the run starts; it
    is never stored in results or printed.
    """

    base_url: str
    model: str | None = None
    api_key_env: str = DEFAULT_API_KEY_ENV
    # Set by SimulatedServer.target: the profile of the simulated engine behind this URL, so
    # a run against it is labelled simulated (no energy reading, the what-if oracle knows the
    # KV capacity) however it was started.
    simulator_profile: dict[str, Any] | None = field(default=None, compare=False, repr=False)

    def api_key(self) -> str | None:
        return os.environ.get(self.api_key_env) or None

    def headers(self) -> dict[str, str]:
        """HTTP headers for every request to the target (the API key, when one is set)."""
        key = self.api_key()
        return {"Authorization": f"Bearer {key}"} if key else {}

    @property
    def root_url(self) -> str:
        """The server root (``/tokenize``, ``/metrics`` live there, not under ``/v1``)."""
        url = self.base_url.rstrip("/")
        return url[: -len("/v1")] if url.endswith("/v1") else url
