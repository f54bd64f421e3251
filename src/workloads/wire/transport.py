"""The transport seam: the connection settings every request kind the library sends takes
from one place, so the streamed chat path (:mod:`workloads.wire.stream`, :mod:`workloads.
wire.client`) and the plain aiohttp reads (/models, /version, /tokenize, /metrics, the
likelihood probe, ``probe``) follow the same rules:

* **proxy**: ``Target.proxy`` (``--proxy URL``) or else ``HTTPS_PROXY`` / ``HTTP_PROXY``
  (either case) for the URL's scheme, skipped for hosts ``NO_PROXY`` names, as aiohttp's
  ``trust_env`` and curl do. http targets go through it in absolute form, https targets
  through a CONNECT tunnel. The proxy is spoken to in plain HTTP (an ``https://`` proxy is
  refused in one line). Its userinfo becomes ``Proxy-Authorization: Basic``.
* **TLS**: certificates verified against the system store by default; ``ca_bundle`` adds a
  private CA; ``insecure`` skips verification (the run's result and report say so).
* **credentials**: the API key (``Authorization: Bearer``) or the target URL's userinfo
  (``Authorization: Basic``; :class:`~workloads.model.target.Target` takes it out of the URL,
  so no file or line ever shows it). Header values are checked once, here: CR/LF or a
  character outside Latin-1 is a one-line :class:`TargetError`, never an injected header or
  a ``UnicodeEncodeError``.
* **redaction**: :meth:`Transport.redact` takes the key and the password out of any text a
  server echoed (an error body) before it is recorded or printed.
* **redirects** (the streamed chat path only): at most :data:`MAX_REDIRECTS` hops, the
  Location resolved with yarl against the request URL; 307/308 keep the method and body; a
  301/302/303 on a POST is not followed (it would turn the chat request into a GET). The
  aiohttp reads (:meth:`Transport.session`) keep aiohttp's own rule: ``max_redirects`` 10, and a
  POST redirected by a 301/302/303 is sent again as a GET.
"""

from __future__ import annotations

import asyncio
import base64
import os
import ssl
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from yarl import URL

from workloads.model.errors import RequestError, TargetError
from workloads.model.target import Target

__all__ = [
    "MAX_REDIRECTS",
    "MIN_CUT_SECRET",
    "Proxy",
    "Transport",
    "check_header",
    "followed",
    "open_tunnel",
    "plain_http_hint",
    "proxy_status",
    "tls_message",
    "transport_for",
]

MAX_REDIRECTS = 5  # hops per streamed chat request (the aiohttp reads: its max_redirects, 10)
# The shortest start of a secret redact() takes off the end of a cut text. Every echo the
# library records is redacted whole before it is cut (wire/stream.py) but for an error event's
# data, cut in core/chat_stream.py, which knows no secrets: there 1-3 characters may stay.
MIN_CUT_SECRET = 4
PORT_CHECK_S = 2.0  # a TCP connect to a port that just took one (plain_http_hint)
_FOLLOWED = (307, 308)  # keep method and body; 301/302/303 on a POST would become a GET


def check_header(name: str, value: str, what: str | None = None) -> None:
    """Raise a one-line TargetError when ``name: value`` cannot be sent as it is: CR or LF
    (a second header could be injected) or a character outside Latin-1 (HTTP/1.1's bytes).
    ``what`` names where the value came from (default: the header)."""
    what = what or f"header {name!r}"
    for text, part in ((name, "name"), (value, "value")):
        if "\r" in text or "\n" in text or "\0" in text:
            raise TargetError(f"{what}: its {part} holds a line break or NUL; remove it")
        try:
            text.encode("latin-1")
        except UnicodeEncodeError as err:
            # The position, not the character: the value may be a secret.
            raise TargetError(
                f"{what}: its {part} holds a character outside Latin-1 at "
                f"position {err.start}; HTTP headers cannot carry it"
            ) from None
    if not name or any(c in name for c in ' \t:()<>@,;"/[]?={}'):
        raise TargetError(f"header name {name!r} is not an HTTP token")


@dataclass(frozen=True, slots=True)
class Proxy:
    """The proxy one URL is reached through."""

    url: URL  # scheme, host and port only: no credentials
    authorization: str | None  # the Proxy-Authorization value, from the proxy URL's userinfo
    source: str  # where it came from: "Target.proxy" or the environment variable's name

    @property
    def host(self) -> str:
        assert self.url.raw_host is not None
        return self.url.raw_host

    @property
    def port(self) -> int:
        return self.url.port or 80

    def describe(self) -> str:
        """``http://proxy:3128 (from HTTPS_PROXY)``: for the result's environment."""
        return f"{self.url} (from {self.source})"


def _proxy(value: str, source: str) -> Proxy:
    url = URL(value if "://" in value else "http://" + value)
    if url.scheme != "http" or not url.raw_host:
        if url.scheme == "https":
            why = "an https:// proxy is not supported (the target may still be https)"
        elif url.scheme != "http":
            why = f"a {url.scheme}:// proxy is not supported, only an http:// one"
        else:
            why = "it names no host"
        raise TargetError(f"{source}: proxy {url.with_user(None)} is not http://HOST:PORT; {why}")
    auth = None
    if url.user is not None:
        pair = f"{url.user}:{url.password or ''}"
        check_header("Proxy-Authorization", pair, f"{source}: the proxy URL's user:password")
        auth = "Basic " + base64.b64encode(pair.encode("latin-1")).decode("ascii")
    return Proxy(URL.build(scheme="http", host=url.raw_host, port=url.port or 80), auth, source)


@dataclass(frozen=True)
class Transport:
    """How every request to one target is sent: headers, proxy, TLS, redaction.

    transport = transport_for(target)
    async with transport.session(url, timeout_s=10) as http: ...
    """

    headers: Mapping[str, str] = field(default_factory=dict)  # checked: sent as they are
    proxy: str | None = None  # None: from the environment (HTTPS_PROXY, HTTP_PROXY, NO_PROXY)
    ca_bundle: str | None = None  # extra CA certificates (PEM); None: the system store
    insecure: bool = False  # skip certificate verification (loud in the result)
    secrets: tuple[str, ...] = ()  # what redact() takes out of any echoed text
    # Never through a proxy: the embedded simulated server, which listens on this host's
    # loopback, where no proxy on another host could reach it.
    direct: bool = False
    _ssl: ssl.SSLContext | None = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        for name, value in self.headers.items():
            check_header(name, value)
        if self.proxy is not None:
            _proxy(self.proxy, "Target.proxy")  # a bad one fails now, in one line
        if self.ca_bundle is not None and not os.path.isfile(self.ca_bundle):
            raise TargetError(
                f"Target.ca_bundle {self.ca_bundle}: no such file; give a PEM "
                "file of the CA certificates that signed the target's"
            )

    def ssl_context(self) -> ssl.SSLContext:
        """The context every https connection uses (made once)."""
        if self._ssl is None:
            try:
                ctx = ssl.create_default_context(cafile=self.ca_bundle)
            except (ssl.SSLError, OSError) as err:
                raise TargetError(
                    f"Target.ca_bundle {self.ca_bundle}: not a PEM file of CA "
                    f"certificates ({type(err).__name__}: {err})"
                ) from err
            if self.insecure:
                ctx.check_hostname = False
                ctx.verify_mode = ssl.CERT_NONE
            object.__setattr__(self, "_ssl", ctx)
        assert self._ssl is not None
        return self._ssl

    def proxy_for(self, url: str | URL) -> Proxy | None:
        """The proxy ``url`` is reached through, or None (direct): ``--proxy`` or the
        scheme's ``*_PROXY`` variable, unless ``NO_PROXY`` names the host."""
        if self.direct:
            return None
        url = URL(url)
        host = url.raw_host or ""
        env = urllib.request.getproxies_environment()  # lower-cased keys, either case read
        # In urllib since 3.x, not in typeshed: the rule aiohttp's trust_env uses for NO_PROXY.
        if env and urllib.request.proxy_bypass_environment(  # type: ignore[attr-defined]
            host if url.explicit_port is None or ":" in host else f"{host}:{url.port}", env
        ):
            return None
        if self.proxy is not None:
            return _proxy(self.proxy, "Target.proxy")
        value = env.get(url.scheme)
        if not value:
            return None
        name = f"{url.scheme.upper()}_PROXY"
        return _proxy(value, name if name in os.environ else name.lower())

    def session(
        self,
        url: str | URL,
        *,
        timeout_s: float | None,
        limit: int = 100,
        headers: Mapping[str, str] | None = None,
        connect_s: float | None = None,  # a new connection, TLS handshake included
    ) -> aiohttp.ClientSession:
        """An aiohttp session for the plain reads of ``url``'s origin, with this transport's
        headers, proxy and TLS (the environment is read here, not by aiohttp: one rule)."""
        proxy = self.proxy_for(url)
        kwargs: dict[str, Any] = {}
        if proxy is not None:
            kwargs["proxy"] = str(proxy.url)
            if proxy.authorization is not None:
                kwargs["middlewares"] = (_proxy_authorization(proxy.authorization),)
        # An http origin with the default TLS options needs no context of ours (making one
        # reads the system's CA store: ~50 ms each); aiohttp's own verified one serves a
        # redirect to https, with the same system store.
        default_tls = URL(url).scheme != "https" and self.ca_bundle is None and not self.insecure
        return aiohttp.ClientSession(
            timeout=aiohttp.ClientTimeout(total=timeout_s, connect=connect_s),
            headers={**self.headers, **(headers or {})},
            connector=aiohttp.TCPConnector(
                limit=limit, ssl=True if default_tls else self.ssl_context()
            ),
            trust_env=False,
            **kwargs,
        )

    def redact(self, text: str) -> str:
        """``text`` with the API key and URL password replaced by ``<redacted>``, and a
        text that ends with the start of one (an echo cut at a length limit) cut before it."""
        for secret in self.secrets:
            if not secret:
                continue
            if secret in text:
                text = text.replace(secret, "<redacted>")
            # The longest start of the secret the text ends with, of MIN_CUT_SECRET or more
            # characters: a shorter one may be the text's own ending (an "s" of "tokens").
            for size in range(min(len(secret) - 1, len(text)), MIN_CUT_SECRET - 1, -1):
                if text.endswith(secret[:size]):
                    text = text[:-size] + "<redacted>"
                    break
        return text

    def environment(self, url: str) -> dict[str, str]:
        """What the result's environment says of this transport for ``url``: the proxy used
        (no credentials) and the TLS choice, only where they differ from the default."""
        env: dict[str, str] = {}
        proxy = self.proxy_for(url)
        if proxy is not None:
            env["proxy"] = proxy.describe()
        if URL(url).scheme == "https":
            if self.insecure:
                env["tls"] = "insecure: certificates not verified (--insecure)"
            elif self.ca_bundle is not None:
                env["tls"] = f"verified with --ca-bundle {self.ca_bundle}"
        return env


def _proxy_authorization(value: str) -> aiohttp.ClientMiddlewareType:
    """An aiohttp client middleware that gives each request through the proxy its
    Proxy-Authorization: on the CONNECT of an https origin, on the absolute-form request of
    an http one. (ClientSession takes no ``proxy_headers``; its ``proxy_auth`` is deprecated
    in aiohttp 3.14, and a request's ``proxy_headers`` reach the CONNECT only.)"""

    async def middleware(
        request: aiohttp.ClientRequest, handler: aiohttp.ClientHandlerType
    ) -> aiohttp.ClientResponse:
        if request.proxy is not None:
            if request.is_ssl():
                request.update_proxy(request.proxy, None, {"Proxy-Authorization": value})
            else:
                request.headers["Proxy-Authorization"] = value
        return await handler(request)

    return middleware


def transport_for(target: Target) -> Transport:
    """The transport for ``target``: its API key or URL credentials as the Authorization
    header, its proxy and TLS options."""
    headers: dict[str, str] = {}
    secrets: list[str] = []
    key = target.api_key()
    credentials = target.url_credentials
    if key and credentials:
        raise TargetError(
            f"the target URL carries user:password and ${target.api_key_env} holds an API "
            "key: both would be the Authorization header; drop one"
        )
    if key:
        check_header("Authorization", key, f"the API key (${target.api_key_env})")
        headers["Authorization"] = f"Bearer {key}"
        secrets.append(key)
    elif credentials:
        check_header("Authorization", credentials, "the target URL's user:password")
        token = base64.b64encode(credentials.encode("latin-1")).decode("ascii")
        headers["Authorization"] = f"Basic {token}"
        secrets += [token, credentials.partition(":")[2] or credentials]
    return Transport(
        headers=headers,
        proxy=target.proxy,
        ca_bundle=target.ca_bundle,
        insecure=target.insecure,
        secrets=tuple(secrets),
    )


# Answers a forward proxy gives of its own: 407 (credentials), 502/504 (it could not reach
# the origin, or got no answer in time; RFC 9110 15.6.3 and 15.6.5).
_PROXY_STATUSES = (407, 502, 504)


def proxy_status(proxy: Proxy | None, status: int, url: str) -> str | None:
    """One line for a status that, through ``proxy``, is most likely the proxy's own answer
    (407, 502, 504), naming the proxy and what to check; None otherwise (the target's)."""
    if proxy is None or status not in _PROXY_STATUSES:
        return None
    where = f"{url} answered HTTP {status} through proxy {proxy.describe()}"
    if status == 407:
        return (
            f"{where}: the proxy refused the credentials in its URL; check the user and password"
            if proxy.authorization is not None
            else f"{where}: the proxy asks for credentials; give them as "
            "http://USER:PASSWORD@HOST:PORT"
        )
    return (
        f"{where}: most likely the proxy's own answer (it could not reach the target, or got "
        "no answer in time); check that the proxy can reach it, or name the host in NO_PROXY"
    )


async def plain_http_hint(url: str | URL, proxy: Proxy | None) -> str:
    """Why no connection to an https ``url`` came within the connect timeout, as a clause:
    when its port accepts TCP at once (checked here: a connect, then a close, nothing
    written), the TLS handshake is what got no answer: most likely a plain-HTTP port (a
    server that reads a request line waits for one the ClientHello never ends)."""
    url = URL(url)
    if url.scheme != "https" or proxy is not None or url.raw_host is None:
        return ""
    try:
        async with asyncio.timeout(PORT_CHECK_S):
            _, writer = await asyncio.open_connection(url.raw_host, url.port)
    except (OSError, TimeoutError):
        return ""
    writer.close()
    return (
        f"; port {url.port} accepts connections but never answered the TLS handshake: most "
        "likely it speaks plain HTTP (then write the target with http://)"
    )


def followed(status: int) -> bool:
    """Whether a redirect with ``status`` is followed for a POST (307/308 only)."""
    return status in _FOLLOWED


def tls_message(err: BaseException, where: str) -> str | None:
    """One line naming a certificate failure at ``where`` and the option that fixes it, or
    None when ``err`` is not one."""
    cause: BaseException | None = err
    for _ in range(5):  # bounded: aiohttp wraps the ssl error once or twice
        if cause is None or isinstance(cause, ssl.SSLCertVerificationError):
            break
        cause = cause.__cause__ or cause.__context__
    if not isinstance(cause, ssl.SSLCertVerificationError):
        if isinstance(err, aiohttp.ClientConnectorCertificateError):
            cause = err.certificate_error
        else:
            return None
    reason = getattr(cause, "verify_message", None) or str(cause)
    return (
        f"TLS: the certificate of {where} was not verified ({reason}); pass --ca-bundle "
        "FILE if a private CA signed it, or --insecure to skip verification"
    )


# --- the streamed path's proxy tunnel ---------------------------------------------------------

MAX_CONNECT_HEAD = 16 * 1024  # a proxy's answer to CONNECT longer than this is refused


class _Tunnel(asyncio.Protocol):
    """Reads a proxy's answer to CONNECT: the status line and headers, nothing more."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.answer: asyncio.Future[bytes] = loop.create_future()
        self.buffer = b""

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        if self.answer.done():
            return
        if b"\r\n\r\n" in self.buffer:
            self.answer.set_result(self.buffer)
        elif len(self.buffer) > MAX_CONNECT_HEAD:
            self.answer.set_exception(ConnectionError("the proxy's answer to CONNECT has no end"))

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.answer.done():
            self.answer.set_exception(
                ConnectionError("the proxy closed the connection before answering CONNECT")
            )


async def open_tunnel(
    proxy: Proxy,
    host: str,
    port: int,
    ctx: ssl.SSLContext,
    protocol: asyncio.Protocol,
    *,
    family: int,
    proto: int,
    address: tuple[Any, ...],
) -> None:
    """Open a connection to ``proxy`` (at the resolved ``address``), ask it to CONNECT to
    ``host:port``, and shake hands TLS with the target through the tunnel; ``protocol`` then
    gets the TLS transport (``connection_made``) and every decrypted read. A proxy that
    refuses raises a one-line :class:`~workloads.model.errors.RequestError`
    (``connect_failed``); a certificate failure the ssl error (kind ``tls``)."""
    loop = asyncio.get_running_loop()
    raw, tunnel = await loop.create_connection(
        lambda: _Tunnel(loop), host=address[0], port=address[1], family=family, proto=proto
    )
    try:
        authority = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        raw.write(
            f"CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n".encode("latin-1")
            + (
                f"Proxy-Authorization: {proxy.authorization}\r\n".encode("latin-1")
                if proxy.authorization
                else b""
            )
            + b"\r\n"
        )
        answer = await tunnel.answer
        status_line = answer.split(b"\r\n", 1)[0].decode("latin-1", "replace")
        parts = status_line.split(None, 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/") or parts[1] != "200":
            raise RequestError(
                "connect_failed",
                f"proxy {proxy.url} refused CONNECT {authority}: {status_line[:200]!r}",
            )
        if answer.index(b"\r\n\r\n") + 4 != len(answer):
            raise RequestError(
                "connect_failed",
                f"proxy {proxy.url} sent bytes after its answer to CONNECT {authority}",
            )
        secure = await loop.start_tls(raw, protocol, ctx, server_hostname=host)
    except BaseException:
        raw.abort()
        raise
    if secure is None:  # the loop closed the transport under us
        raise ConnectionError(f"the TLS handshake with {authority} through the proxy ended")
    protocol.connection_made(secure)  # start_tls does not call it
