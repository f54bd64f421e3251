"""A report table as plain values, and its layouts: console text that fits any width,
Markdown, and the rows of a CSV. Every report table (per turn, tokens, what-if, sweep,
reconciliation) is built once as a :class:`ReportTable` and drawn by each export from it, so
the console, ``show --format md`` and the HTML report never disagree.

Console layout: columns are as wide as their widest value and never cut. When the columns do
not fit the width, the table reflows into stacked blocks, each repeating the key columns
(``turn``, ``C``…) so every row stays readable: a value is never truncated and a column is
never dropped. Headers are one line each, so no header wraps mid-phrase.
"""

from __future__ import annotations

import textwrap
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from rich.cells import cell_len
from rich.console import Console, ConsoleOptions, RenderResult
from rich.text import Text

__all__ = [
    "GAP",
    "INDENT",
    "Block",
    "Line",
    "Pairs",
    "ReportTable",
    "blocks",
    "markdown",
]

INDENT = 1  # left margin of every table line
GAP = 2  # spaces between columns


@dataclass(frozen=True)
class ReportTable:
    """A titled table of formatted cells. The first ``key`` columns identify a row (left
    aligned, repeated in every block when the table reflows); the others are right aligned.
    ``notes`` are prose lines printed under it (footnotes for *, †, ~)."""

    title: str
    columns: list[str]
    rows: list[list[str]] = field(default_factory=list)
    key: int = 1
    notes: list[str] = field(default_factory=list)
    # Further left-aligned columns (words rather than figures), by index.
    left: tuple[int, ...] = ()
    # A short identifier for exports (CSV section names, HTML ids): "turns", "tokens", ...
    name: str = ""

    def add_row(self, *cells: str) -> None:
        if len(cells) != len(self.columns):
            raise ValueError(
                f"{self.name or self.title}: {len(cells)} cells for {len(self.columns)} columns"
            )
        self.rows.append(list(cells))

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        yield Text(self.title, style="bold")
        for line, header in _lines(self, options.max_width):
            # no_wrap: a table line is laid out to fit already; wrapping one would split a row
            yield Text(line, style="bold" if header else "", no_wrap=True, overflow="ignore")
        for note in self.notes:
            yield Text(note)


@dataclass(frozen=True)
class Line:
    """One line of prose in a report (wrapped at spaces to the width). ``style``: "bold"
    for a heading or headline, "warning", "error", or "" for plain."""

    text: str
    style: str = ""

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        style = {"warning": "yellow", "error": "bold red"}.get(self.style, self.style)
        yield Text(self.text, style=style)


@dataclass(frozen=True)
class Pairs:
    """Labelled lines: ``label  text`` rows (the measured window's figures). Long texts wrap
    under their own column."""

    rows: list[tuple[str, str]]
    label_width: int = 17

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        from rich.table import Table

        grid = Table.grid(padding=(0, 2))
        grid.add_column(style="bold", no_wrap=True, min_width=self.label_width)
        grid.add_column()
        for label, text in self.rows:
            grid.add_row(label, Text(text))  # Text: "[nvidia]" in a hint is not markup
        yield grid


Block = Line | Pairs | ReportTable


def _widths(table: ReportTable) -> list[int]:
    return [
        max([cell_len(name)] + [cell_len(row[i]) for row in table.rows])
        for i, name in enumerate(table.columns)
    ]


def blocks(table: ReportTable, width: int) -> list[list[int]]:
    """Column indices of each stacked block for a table drawn in ``width`` cells: every block
    starts with the key columns; the others are packed in order, as many as fit. A column
    too wide to fit even beside the keys alone gets a block of its own: a column of words
    then wraps at spaces, a figure runs past the width rather than be cut."""
    widths = _widths(table)
    keys = list(range(min(table.key, len(widths))))
    key_width = INDENT + sum(widths[i] + GAP for i in keys)
    out: list[list[int]] = []
    current: list[int] = []
    used = key_width
    for i in range(len(keys), len(widths)):
        need = widths[i] + (GAP if current else 0)
        if current and used + need > width:
            out.append(keys + current)
            current, used = [], key_width
            need = widths[i]
        current.append(i)
        used += need
    if current or not out:
        out.append(keys + current)
    return out


def _line(table: ReportTable, block: list[int], widths: list[int], cells: Sequence[str]) -> str:
    parts = []
    for i in block:
        pad = widths[i] - cell_len(cells[i])
        flush_left = i < table.key or i in table.left
        parts.append(cells[i] + " " * pad if flush_left else " " * pad + cells[i])
    return (" " * INDENT + (" " * GAP).join(parts)).rstrip()


def _row_lines(
    table: ReportTable, block: list[int], widths: list[int], row: list[str]
) -> Iterator[str]:
    """One row as printed: one line, or more when its last column of words wraps."""
    last = block[-1]
    if cell_len(row[last]) <= widths[last]:
        yield _line(table, block, widths, row)
        return
    pieces = textwrap.wrap(
        row[last], widths[last], break_on_hyphens=False, break_long_words=False
    ) or [""]
    yield _line(table, block, widths, [*row[:last], pieces[0], *row[last + 1 :]])
    for piece in pieces[1:]:
        blank = [""] * len(row)
        blank[last] = piece
        yield _line(table, block, widths, blank)


def _lines(table: ReportTable, width: int) -> Iterator[tuple[str, bool]]:
    """(line, is_header) for each line of the console layout."""
    natural = _widths(table)
    for number, block in enumerate(blocks(table, width)):
        if number:
            yield "", False
        widths = list(natural)
        last = block[-1]
        over = INDENT + sum(widths[i] for i in block) + GAP * (len(block) - 1) - width
        if over > 0 and last in table.left:
            # A column of words (a description, a verdict) wraps at spaces within what is
            # left of the width; figures never wrap.
            widths[last] = max(widths[last] - over, cell_len(table.columns[last]), 12)
        yield _line(table, block, widths, table.columns), True
        yield " " * INDENT + "─" * (sum(widths[i] for i in block) + GAP * (len(block) - 1)), False
        for row in table.rows:
            for text in _row_lines(table, block, widths, row):
                yield text, False


def _md_cell(value: str) -> str:
    return value.replace("|", "\\|").replace("\n", " ") or " "


def markdown(table: ReportTable) -> str:
    """The table in GitHub Markdown: a bold title line, the table, notes as a list."""
    out = [f"**{_md_cell(table.title)}**", ""]
    out.append("| " + " | ".join(_md_cell(c) for c in table.columns) + " |")
    out.append(
        "|"
        + "|".join(
            ":---" if i < table.key or i in table.left else "---:"
            for i in range(len(table.columns))
        )
        + "|"
    )
    for row in table.rows:
        out.append("| " + " | ".join(_md_cell(c) for c in row) + " |")
    if table.notes:
        out.append("")
        out += [f"- {note}" for note in table.notes]
    return "\n".join(out)
