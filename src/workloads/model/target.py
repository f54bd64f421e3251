"""The server under test: where it is, which model, where its API key comes from."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote, urlsplit, urlunsplit

from workloads.model.errors import TargetError

__all__ = ["DEFAULT_API_KEY_ENV", "Target", "base_url_problem"]

DEFAULT_API_KEY_ENV = "WORKLOADS_API_KEY"


@dataclass(frozen=True)
class Target:
    """The OpenAI-compatible server under test.

    ``base_url`` ends in ``/v1``. ``model`` None means: the first model ``/v1/models`` lists.
    The API key is read from the environment variable ``api_key_env`` when the run starts; it
    is never stored in results or printed. Userinfo in the URL (``http://user:pass@host/v1``)
    is taken out of ``base_url`` at once and sent as Basic auth (``url_credentials``), so no
    file or line the library writes shows it.

    Connection options (:mod:`workloads.wire.transport` applies them to every request):
    ``proxy`` (None: ``HTTPS_PROXY``/``HTTP_PROXY``/``NO_PROXY`` from the environment),
    ``ca_bundle`` (a PEM file of extra CA certificates) and ``insecure`` (skip certificate
    verification; the result and report say so).
    """

    base_url: str
    model: str | None = None
    api_key_env: str = DEFAULT_API_KEY_ENV
    # Set by SimulatedServer.target: the profile of the simulated engine behind this URL, so
    # a run against it is labelled simulated (no energy reading, the what-if oracle knows the
    # KV capacity) however it was started.
    simulator_profile: dict[str, Any] | None = field(default=None, compare=False, repr=False)
    # The server's KV cache, for the what-if cache oracle: capacity in tokens (None: unknown;
    # the simulated server's profile says) and the block size its prefix cache reuses in
    # (vLLM 16; llama.cpp reuses any prefix length: 1).
    kv_capacity_tokens: int | None = None
    kv_block_tokens: int = 16
    proxy: str | None = None  # http://[user:pass@]HOST:PORT; None: from the environment
    ca_bundle: str | None = None  # extra CA certificates (PEM); None: the system store only
    insecure: bool = False  # do not verify certificates: measure, but say so loudly
    # "user:password" from the URL, sent as Basic auth; never in repr, results or reports.
    url_credentials: str | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        problem = base_url_problem(self.base_url)
        if problem is not None:
            raise TargetError(problem)
        parts = urlsplit(self.base_url)
        if parts.username is not None or parts.password is not None:
            userinfo, _, host = parts.netloc.rpartition("@")
            user, colon, password = userinfo.partition(":")
            object.__setattr__(self, "base_url", urlunsplit(parts._replace(netloc=host)))
            object.__setattr__(
                self, "url_credentials", f"{unquote(user)}{colon}{unquote(password)}"
            )
        if self.kv_capacity_tokens is not None and self.kv_capacity_tokens < self.kv_block_tokens:
            raise TargetError(
                f"kv_capacity_tokens ({self.kv_capacity_tokens}) must hold at "
                f"least one block of kv_block_tokens ({self.kv_block_tokens})"
            )
        if self.kv_block_tokens < 1:
            raise TargetError(f"kv_block_tokens must be at least 1, got {self.kv_block_tokens}")

    def api_key(self) -> str | None:
        return os.environ.get(self.api_key_env) or None

    @property
    def root_url(self) -> str:
        """The server root (``/tokenize``, ``/metrics`` live there, not under ``/v1``)."""
        url = self.base_url.rstrip("/")
        return url[: -len("/v1")] if url.endswith("/v1") else url


def base_url_problem(url: str) -> str | None:
    """What is wrong with ``url`` as a target base URL (one line, without any password the
    URL holds), or None: it needs an http:// or https:// scheme and a host."""
    problem = _problem(url)
    parts = urlsplit(url)
    if problem is not None and parts.password:
        problem = problem.replace(f":{parts.password}@", ":<redacted>@")
    return problem


def _problem(url: str) -> str | None:
    if "://" not in url:
        return f"target URL {url!r} has no scheme; write it in full, e.g. http://{url.lstrip('/')}"
    parts = urlsplit(url)
    if parts.scheme.lower() not in ("http", "https"):
        return (
            f"target URL {url!r} is not HTTP ({parts.scheme}://); the target is an "
            "OpenAI-compatible server at http:// or https://"
        )
    if not parts.hostname:
        return f"target URL {url!r} names no host; e.g. http://127.0.0.1:8000/v1"
    return None
