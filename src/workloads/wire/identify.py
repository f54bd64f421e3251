"""identify(): does the target answer, which model, what identity does it offer."""

from __future__ import annotations

import aiohttp

from workloads.model.errors import TargetError
from workloads.model.results import ServerIdentity
from workloads.model.target import Target
from workloads.wire.errors import READ_ERRORS, describe

__all__ = ["identify"]

# /version answered something that is not {"version": ...}: identity comes from elsewhere.
_VERSION_ERRORS: tuple[type[BaseException], ...] = (*READ_ERRORS, AttributeError)


async def identify(target: Target, timeout_s: float) -> tuple[str, ServerIdentity]:
    """Check the target answers, pick the model, read what identity it offers.

    Raises :class:`TargetError` when ``/models`` cannot be read or lists no model. Used by
    runs and by ``probe``.
    """
    headers = target.headers()
    timeout = aiohttp.ClientTimeout(total=timeout_s)
    async with aiohttp.ClientSession(timeout=timeout, headers=headers) as http:
        try:
            async with http.get(target.base_url.rstrip("/") + "/models") as resp:
                if resp.status != 200:
                    raise TargetError(
                        f"{target.base_url}/models answered HTTP {resp.status}; is this an "
                        "OpenAI-compatible base URL (ending in /v1), and is the API key set in "
                        f"${target.api_key_env}?"
                    )
                listing = await resp.json(content_type=None)
        except ValueError as err:  # before READ_ERRORS, which holds it
            raise TargetError(f"{target.base_url}/models did not answer JSON: {err}") from err
        except READ_ERRORS as err:
            raise TargetError(f"cannot reach {target.base_url}/models: {describe(err)}") from err
        data = listing.get("data") if isinstance(listing, dict) else None
        if not isinstance(data, list):
            raise TargetError(
                f"{target.base_url}/models is not an OpenAI model list (no 'data' array)"
            )
        models = [str(m.get("id", "")) for m in data if isinstance(m, dict)]
        model = target.model or (models[0] if models else None)
        if model is None:
            raise TargetError(f"{target.base_url}/models lists no model; pass --model")
        if target.model is not None and models and target.model not in models:
            # Every turn would fail (vLLM and SGLang answer 404): say so before sending any.
            raise TargetError(
                f"model {target.model!r} is not served at {target.base_url}; /models offers: "
                f"{', '.join(models)} (pass one with --model, or leave --model out for the "
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
