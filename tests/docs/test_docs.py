"""README.md and docs/*.md against the repository: every relative link reaches a file (and a
heading, when it names one), no path leaves the clone, and every measured figure cites the
JSON under bench/results it comes from.

The figure convention (README.md's Development section says it to writers): a *figure*
is a number with a unit of time, size, rate or a ratio (``122 s``, ``0.092 ms``, ``1.5x``,
``14.6 GB``, ``57%``, ``120 tokens/s``) in prose or a table. Text in code spans and fenced
blocks (config values, commands) is not prose. A block (lines between blank lines; a table
with the paragraph right after it and the one right before it when that one ends with a
colon, its caption, count as one) holding a figure must name an existing
``bench/results/<file>.json``, or say ``<!-- not measured -->`` when its numbers are limits,
defaults, hardware or examples rather than measurements.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
NOT_MEASURED = "<!-- not measured -->"

_NUMBER = r"~?\d[\d,]*(?:\.\d+)?(?:\s?[-–]\s?\d[\d,]*(?:\.\d+)?)?"
_UNIT = (r"(?:ms|µs|us|s|sec|seconds?|min|minutes?|h|hours?|GB|GiB|MB|MiB|KiB|"
         r"tokens/s|tok/s|steps?/s|it/s|samples/s)\b|%")
FIGURE = re.compile(rf"(?<![\w.\-/]){_NUMBER}(?:\s?(?:{_UNIT})|x\b)")
CITATION = re.compile(r"bench/results/[\w.\-]+\.json")
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
_CODE_SPAN = re.compile(r"`[^`]*`")
_COMMENT = re.compile(r"<!--.*?-->", re.S)


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


def figures(block: str) -> list[str]:
    """The figures of a block's prose (code spans, comments and link targets removed)."""
    prose = _COMMENT.sub(" ", _CODE_SPAN.sub(" ", block))
    prose = re.sub(r"\]\([^)]*\)", "]", prose)
    return [match.group(0) for match in FIGURE.finditer(prose)]


def unsourced_figures(path: Path) -> list[str]:
    """``file:line: figures`` of each block that has figures but no source and no marker."""
    problems = []
    for start, block in blocks(path.read_text(encoding="utf-8")):
        found = figures(block)
        if found and not CITATION.search(block) and NOT_MEASURED not in block:
            problems.append(f"{path.relative_to(ROOT)}:{start}: {', '.join(found[:4])}")
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
def test_every_figure_cites_its_bench_results_json(path):
    assert unsourced_figures(path) == []


@pytest.mark.parametrize("path", DOCS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_cited_result_exists(path):
    cited = set(CITATION.findall(path.read_text(encoding="utf-8")))
    assert sorted(c for c in cited if not (ROOT / c).is_file()) == []


def test_the_rules_flag_figures_and_dead_links_and_spare_versions_defaults_and_dates(tmp_path):
    assert figures("SFT ran 122 s (median), 1.5-1.7x TRL, 14.6 GB and 57% of it") == [
        "122 s", "1.5-1.7x", "14.6 GB", "57%"]
    assert figures("transformers 5.24.0 on 2026-11-27, Qwen2.5-3B, `timeout: 30 s`, "
                   "8 x H100, [a](f_1s.md), nano is 0.2M parameters") == []
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
