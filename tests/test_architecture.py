"""docs/architecture.md is the map of the code: every module and folder it names exists, every
package has its entry in its layout, and every module it points into with a name
(`core/agent.child_session`, `report.console.stopped_early`) defines that name. A rename in
the code without the doc (or the reverse) fails here, naming the line."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "workloads"
DOC = ROOT / "docs" / "architecture.md"
LAYERS = ("model", "core", "wire", "telemetry", "servers", "report", "probe", "runner", "cli")
# Folders of the repository that the doc names paths in, besides the package's own.
REPO_DIRS = ("tests", "benchmarks", "scripts", "docs", "scenarios", "traces")

PY = re.compile(r"(?<![\w./-])((?:[\w-]+/)*\w+\.py)\b")
NAMED = re.compile(r"`(?:workloads\.)?((?:" + "|".join(LAYERS) + r")(?:[./]\w+)+)")


def doc_lines() -> list[str]:
    return DOC.read_text(encoding="utf-8").splitlines()


def layout() -> tuple[int, int]:
    """The line span of the layout block (the first code block after "## Layout")."""
    lines = doc_lines()
    start = next(i for i, line in enumerate(lines) if line.startswith("## Layout"))
    opening = next(i for i in range(start, len(lines)) if lines[i].startswith("```"))
    closing = next(i for i in range(opening + 1, len(lines)) if lines[i].startswith("```"))
    return opening + 1, closing


def found(path: str, base: Path) -> bool:
    """Whether ``path`` (as the doc writes it) names a file or folder: under ``base``, or
    the repository's own folders (tests/ included: a test file by its path in the folders
    that mirror the package)."""
    path = path.rstrip("/")
    top = path.split("/", 1)[0]
    if top in REPO_DIRS:
        return (ROOT / path).exists()
    return (base / path).exists()


def layout_names() -> tuple[set[Path], list[str]]:
    """What the layout names, resolved: the files and folders that exist, and a line for each
    name that does not (``line N: NAME``). A name is looked up in the folder of its entry: an
    entry line's own names in its parent folder, a module named in an entry's description (as
    ``telemetry/`` lists ``prometheus.py``) in that entry's folder."""
    lines = doc_lines()
    first, end = layout()
    named: set[Path] = set()
    missing = []
    stack: list[tuple[int, Path]] = []  # (indent, folder) of the entries above this line
    context = ROOT  # where a name on the current line is looked up

    def look_up(name: str, base: Path, number: int) -> None:
        if found(name, base):
            top = name.rstrip("/").split("/", 1)[0]
            named.add((ROOT if top in REPO_DIRS else base) / name.rstrip("/"))
        else:
            missing.append(f"line {number + 1}: {name}")

    for number in range(first, end):
        line = lines[number]
        if not line.strip():
            continue
        indent = len(line) - len(line.lstrip())
        names, _, about = line.strip().partition("  ")
        entry = bool(re.fullmatch(r"[\w./, -]+", names)) and (
            names.endswith("/") or ".py" in names or indent < 20
        )
        if entry:
            while stack and stack[-1][0] >= indent:
                stack.pop()
            parent = stack[-1][1] if stack else ROOT
            if names == "src/workloads/":
                stack.append((indent, SRC))
                context = SRC
                continue
            context = parent
            for name in (n.strip() for n in names.split(",")):
                if name.endswith("/") or name.endswith(".py"):
                    look_up(name, parent if name.count("/") <= 1 else SRC, number)
                    if name.endswith("/") and name.count("/") == 1:
                        context = parent / name.rstrip("/")
                        if not names.count(","):
                            stack.append((indent, context))
            text = about
        else:
            text = line
        for name in PY.findall(text):
            look_up(name, SRC if "/" in name else context, number)
    return named, missing


def test_the_layout_names_only_files_and_folders_that_exist():
    _, missing = layout_names()
    assert not missing, "docs/architecture.md's layout names what does not exist:\n" + "\n".join(
        missing
    )


def test_the_layout_names_every_module():
    # each module under src/workloads/ in its own folder's entry (a package's __init__.py is
    # its folder's entry, but for the top level's own)
    named, _ = layout_names()
    modules = {p for p in SRC.rglob("*.py") if p.name != "__init__.py" or p.parent == SRC}
    absent = sorted(str(p.relative_to(SRC)) for p in modules - named)
    assert not absent, f"modules docs/architecture.md's layout does not name: {absent}"


def test_every_package_and_top_level_module_has_its_entry_in_the_layout():
    lines = doc_lines()
    first, end = layout()
    entries = set()
    stack: list[tuple[int, str]] = []
    for line in lines[first:end]:
        indent = len(line) - len(line.lstrip())
        names = line.strip().partition("  ")[0]
        if not names or indent >= 20:
            continue
        while stack and stack[-1][0] >= indent:
            stack.pop()
        prefix = stack[-1][1] if stack else ""
        for name in (n.strip() for n in names.split(",")):
            entries.add(prefix + name)
            if name.endswith("/") and "," not in names:
                stack.append((indent, prefix + name))
    wanted = {
        "src/workloads/" + str(p.parent.relative_to(SRC)) + "/"
        for p in SRC.rglob("__init__.py")
        if p.parent != SRC
    } | {"src/workloads/" + p.name for p in SRC.glob("*.py")}
    assert not sorted(wanted - entries), (
        "packages or modules with no entry in docs/architecture.md's layout: "
        f"{sorted(wanted - entries)}"
    )


def test_every_module_path_in_the_text_exists():
    lines = doc_lines()
    first, end = layout()
    missing = []
    for number, line in enumerate(lines):
        if first <= number < end:
            continue
        for name in PY.findall(line):
            if "/" in name:
                ok = found(name, SRC)
            else:  # a module named alone: one of that name somewhere in the package or tests
                ok = any(SRC.rglob(name)) or any((ROOT / "tests").rglob(name))
            if not ok:
                missing.append(f"line {number + 1}: {name}")
    assert not missing, "docs/architecture.md names modules that do not exist:\n" + "\n".join(
        missing
    )


def defines(module: Path, name: str) -> bool:
    text = module.read_text(encoding="utf-8")
    return bool(
        re.search(
            rf"^\s*(?:async\s+def|def|class)\s+{name}\b|^\s*{name}\s*[:=]|\"{name}\"", text, re.M
        )
    )


def test_every_name_the_text_points_into_a_module_is_defined_there():
    wrong = []
    for number, line in enumerate(doc_lines()):
        for dotted in NAMED.findall(line):
            parts = re.split(r"[./]", dotted)
            path = SRC
            rest = parts
            while rest and (path / rest[0]).is_dir():
                path, rest = path / rest[0], rest[1:]
            if rest and rest[0] == "py":
                rest = rest[1:]
            if rest and (path / f"{rest[0]}.py").exists():
                path, rest = path / f"{rest[0]}.py", rest[1:]
                if rest and rest[0] == "py":
                    rest = rest[1:]
            elif path.is_dir():
                path = path / "__init__.py"
            else:
                wrong.append(f"line {number + 1}: {dotted} (no such module)")
                continue
            if rest and not defines(path, rest[0]):
                wrong.append(
                    f"line {number + 1}: {dotted} ({rest[0]} not in {path.relative_to(SRC)})"
                )
    assert not wrong, "docs/architecture.md points at names that are not there:\n" + "\n".join(
        wrong
    )
