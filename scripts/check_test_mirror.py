"""Check that the tests mirror the package tree (run by .ci/run).

Every module ``agentrl/A/B/name.py`` has its test file ``tests/A/B/test_name.py`` (a
top-level ``agentrl/name.py``: ``tests/test_name.py``); ``__init__.py`` and ``__main__.py``
are not checked. A module without one is listed in ``tests/MIRROR_EXCEPTIONS.txt`` with the
reason, one a line: ``agentrl/path/module.py: where it is tested instead``; blank lines and
``#`` comments are allowed. The check fails, naming each path, on a module neither tested
nor listed, an entry without a reason, and a stale entry (the module is gone, or has its
test file now).

    python scripts/check_test_mirror.py [--root DIR]      # DIR: the repository, by default
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable
from pathlib import Path, PurePosixPath
from typing import NamedTuple

PACKAGE = "agentrl"
EXCEPTIONS_FILE = "tests/MIRROR_EXCEPTIONS.txt"
NOT_CHECKED = {"__init__.py", "__main__.py"}


class Entry(NamedTuple):
    """One line of the exceptions file: the module, why it has no test file, the line."""

    module: str
    reason: str
    line: int


def expected_test(module: str) -> str:
    """The test file of a module: agentrl/A/B/name.py -> tests/A/B/test_name.py."""
    path = PurePosixPath(module).relative_to(PACKAGE)
    return PurePosixPath("tests", *path.parent.parts, f"test_{path.name}").as_posix()


def relative_py_files(root: Path, folder: str) -> set[str]:
    """The .py files under ROOT/FOLDER, as POSIX paths relative to ROOT, caches left out."""
    base = root / folder
    return {
        path.relative_to(root).as_posix()
        for path in base.rglob("*.py")
        if "__pycache__" not in path.relative_to(base).parts
    }


def package_modules(py_files: Iterable[str]) -> set[str]:
    """The modules the check covers: every .py file but __init__.py and __main__.py."""
    return {f for f in py_files if PurePosixPath(f).name not in NOT_CHECKED}


def parse_exceptions(text: str) -> list[Entry]:
    """The entries of the exceptions file's TEXT; a line without ':' has an empty reason."""
    entries = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        module, _, reason = line.partition(":")
        entries.append(Entry(module.strip(), reason.strip(), number))
    return entries


def entry_problems(entries: list[Entry], modules: set[str], tests: set[str]) -> list[str]:
    """What is wrong with the listed modules: no reason, listed twice, or a stale entry."""
    problems, seen = [], {}
    for entry in entries:
        where = f"{EXCEPTIONS_FILE}:{entry.line}: {entry.module}"
        if not entry.reason:
            problems.append(f"{where}: no reason; write it as '{entry.module}: <why>'")
        if entry.module in seen:
            problems.append(f"{where}: listed twice (first on line {seen[entry.module]})")
            continue
        seen[entry.module] = entry.line
        if entry.module not in modules:
            problems.append(f"{where}: no such module; remove the stale entry")
        elif expected_test(entry.module) in tests:
            problems.append(f"{where}: has its test file {expected_test(entry.module)} now; "
                            "remove the stale entry")
    return problems


def find_problems(modules: set[str], tests: set[str], entries: list[Entry]) -> list[str]:
    """Every problem: untested modules that are not listed, then the entries' problems."""
    listed = {entry.module for entry in entries}
    problems = [
        f"{module}: no test file {expected_test(module)}; write it, or list the module in "
        f"{EXCEPTIONS_FILE} with the reason"
        for module in sorted(modules)
        if expected_test(module) not in tests and module not in listed
    ]
    return problems + entry_problems(entries, modules, tests)


def summary(modules: set[str], tests: set[str], entries: list[Entry]) -> str:
    """The success line: how many modules, how many tested, how many listed."""
    tested = sum(expected_test(module) in tests for module in modules)
    return (f"test mirror: {len(modules)} modules, {tested} with their test file, "
            f"{len(entries)} listed in {EXCEPTIONS_FILE}")


def check(root: Path) -> tuple[list[str], str]:
    """Read the tree at ROOT: (the problems, the summary line)."""
    if not (root / PACKAGE).is_dir():
        return [f"{root / PACKAGE}: no such directory (is --root the repository?)"], ""
    modules = package_modules(relative_py_files(root, PACKAGE))
    tests = relative_py_files(root, "tests") if (root / "tests").is_dir() else set()
    exceptions = root / EXCEPTIONS_FILE
    entries = parse_exceptions(exceptions.read_text()) if exceptions.is_file() else []
    return find_problems(modules, tests, entries), summary(modules, tests, entries)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parents[1],
                        help="the repository (default: this script's parent's parent)")
    args = parser.parse_args(argv)
    problems, line = check(args.root)
    if problems:
        print(f"test mirror: {len(problems)} problem(s):", file=sys.stderr)
        for problem in problems:
            print(f"  {problem}", file=sys.stderr)
        return 1
    print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
