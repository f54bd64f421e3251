"""identify(): does the target answer, which model, what identity does it offer."""

from __future__ import annotations

import aiohttp

from workloads.model.errors import TargetError
from workloads.model.results import ServerIdentity
from workloads.model.scenario import Timeouts
from workloads.model.target import Target
from workloads.wire.errors import READ_ERRORS, describe
from workloads.wire.transport import (
    Transport,
    plain_http_hint,
    proxy_status,
    tls_message,
    transport_for,
)

__all__ = ["identify"]

DEFAULT_CONNECT_S = Timeouts().connect_s  # the scenario's default: one home for it
# /version answered something that is not {"version": ...}: identity comes from elsewhere.
_VERSION_ERRORS: tuple[type[BaseException], ...] = (*READ_ERRORS, AttributeError)


async def identify(
    target: Target,
    timeout_s: float,
    transport: Transport | None = None,
    *,
    connect_s: float = DEFAULT_CONNECT_S,  # a new connection, TLS handshake included
) -> tuple[str, ServerIdentity]:
    """Check the target answers, pick the model, read what identity it offers.

    Raises :class:`TargetError` when ``/models`` cannot be read or lists no model, or the
    target's transport options are wrong (one line each). Used by runs and by ``probe``.
    """
    transport = transport or transport_for(target)
    url = target.base_url.rstrip("/") + "/models"
    connect_s = min(connect_s, timeout_s)
    async with transport.session(url, timeout_s=timeout_s, limit=2, connect_s=connect_s) as http:
        try:
            async with http.get(url) as resp:
                if resp.status != 200:
                    raise TargetError(
                        proxy_status(transport.proxy_for(url), resp.status, url)
                        or f"{url} answered HTTP {resp.status}; is this an OpenAI-compatible "
                        f"base URL (ending in /v1), and is the API key set in "
                        f"${target.api_key_env}?"
                    )
                listing = await resp.json(content_type=None)
        except READ_ERRORS as err:
            # A certificate failure is a ValueError too (ssl.SSLCertVerificationError): name
            # it, and the option that fixes it, before reading ValueError as "not JSON".
            tls = tls_message(err, url)
            if tls is not None:
                raise TargetError(tls) from err
            if isinstance(err, ValueError) and not isinstance(err, aiohttp.ClientError):
                raise TargetError(f"{url} did not answer JSON: {err}") from err
            if isinstance(err, aiohttp.ConnectionTimeoutError):
                hint = await plain_http_hint(url, transport.proxy_for(url))
                raise TargetError(
                    f"cannot reach {url}: no connection within {connect_s:g} s{hint}"
                ) from err
            raise TargetError(f"cannot reach {url}: {describe(err, url)}") from err
        data = listing.get("data") if isinstance(listing, dict) else None
        if not isinstance(data, list):
            raise TargetError(f"{url} is not an OpenAI model list (no 'data' array)")
        models = [str(m.get("id", "")) for m in data if isinstance(m, dict)]
        model = target.model or (models[0] if models else None)
        if model is None:
            raise TargetError(f"{url} lists no model; name one with Target.model")
        if target.model is not None and models and target.model not in models:
            # Every turn would fail (vLLM and SGLang answer 404): say so before sending any.
            raise TargetError(
                f"model {target.model!r} is not served at {target.base_url}; /models offers: "
                f"{', '.join(models)} (name one of them with Target.model, or none for the "
                "first)"
            )
        version = None
        try:
            async with http.get(target.root_url + "/version") as resp:
                if resp.status == 200:
                    version = str((await resp.json(content_type=None)).get("version"))
        except _VERSION_ERRORS:
            pass  # not every server has /version; identity then comes from the fingerprint
    return model, ServerIdentity(version=version, models=models)
