"""scripts/check_test_mirror.py: every module has its mirrored test file or a listed reason;
each failure (untested and unlisted, no reason, stale entry) is named, and the repository
passes."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "check_test_mirror.py"
_spec = importlib.util.spec_from_file_location("check_test_mirror", SCRIPT)
mirror = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(mirror)


def make_tree(root: Path, files: list[str], exceptions: str | None = None) -> Path:
    """A fake repository at ROOT with empty FILES and, if given, the exceptions file."""
    for name in files:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text("")
    if exceptions is not None:
        (root / mirror.EXCEPTIONS_FILE).parent.mkdir(parents=True, exist_ok=True)
        (root / mirror.EXCEPTIONS_FILE).write_text(exceptions)
    return root


def run(root: Path, capsys) -> tuple[int, str, str]:
    code = mirror.main(["--root", str(root)])
    out, err = capsys.readouterr()
    return code, out, err


PACKAGE = ["agentrl/__init__.py", "agentrl/top.py", "agentrl/a/__init__.py",
           "agentrl/a/__main__.py", "agentrl/a/b/deep.py", "agentrl/a/__pycache__/cached.py"]
TESTS = ["tests/test_top.py", "tests/a/b/test_deep.py"]


def test_expected_test_mirrors_the_path():
    assert mirror.expected_test("agentrl/top.py") == "tests/test_top.py"
    assert mirror.expected_test("agentrl/a/b/deep.py") == "tests/a/b/test_deep.py"


def test_modules_leave_out_init_main_and_caches(tmp_path):
    make_tree(tmp_path, PACKAGE)
    modules = mirror.package_modules(mirror.relative_py_files(tmp_path, "agentrl"))
    assert modules == {"agentrl/top.py", "agentrl/a/b/deep.py"}


def test_parse_exceptions_skips_blanks_and_comments():
    text = "# header\n\nagentrl/x.py: tested in y: z\n  agentrl/w.py  \nagentrl/v.py:   \n"
    assert mirror.parse_exceptions(text) == [
        mirror.Entry("agentrl/x.py", "tested in y: z", 3),
        mirror.Entry("agentrl/w.py", "", 4),
        mirror.Entry("agentrl/v.py", "", 5),
    ]


def test_a_mirrored_tree_passes_with_the_counts(tmp_path, capsys):
    make_tree(tmp_path, [*PACKAGE, *TESTS, "agentrl/a/helpers.py"],
              "# helpers\n\nagentrl/a/helpers.py: exercised by tests/a/b/test_deep.py\n")
    code, out, err = run(tmp_path, capsys)
    assert (code, err) == (0, "")
    assert out == ("test mirror: 3 modules, 2 with their test file, "
                   "1 listed in tests/MIRROR_EXCEPTIONS.txt\n")


def test_an_untested_unlisted_module_fails_by_name(tmp_path, capsys):
    make_tree(tmp_path, [*PACKAGE, "tests/test_top.py"])  # no exceptions file at all
    code, out, err = run(tmp_path, capsys)
    assert code == 1 and out == ""
    assert "test mirror: 1 problem(s):" in err
    assert "agentrl/a/b/deep.py: no test file tests/a/b/test_deep.py" in err
    assert "agentrl/top.py" not in err


def test_an_entry_without_a_reason_fails(tmp_path, capsys):
    make_tree(tmp_path, [*PACKAGE, "tests/test_top.py"], "agentrl/a/b/deep.py:  \n")
    code, _, err = run(tmp_path, capsys)
    assert code == 1
    assert "tests/MIRROR_EXCEPTIONS.txt:1: agentrl/a/b/deep.py: no reason" in err
    assert "no test file" not in err  # listed, only the reason is missing


def test_a_listed_module_that_does_not_exist_is_stale(tmp_path, capsys):
    make_tree(tmp_path, [*PACKAGE, *TESTS], "\nagentrl/gone.py: was tested elsewhere\n")
    code, _, err = run(tmp_path, capsys)
    assert code == 1
    assert "tests/MIRROR_EXCEPTIONS.txt:2: agentrl/gone.py: no such module" in err


def test_a_listed_module_with_its_test_file_now_is_stale(tmp_path, capsys):
    make_tree(tmp_path, [*PACKAGE, *TESTS], "agentrl/top.py: tested through main\n")
    code, _, err = run(tmp_path, capsys)
    assert code == 1
    assert ("tests/MIRROR_EXCEPTIONS.txt:1: agentrl/top.py: has its test file "
            "tests/test_top.py now") in err


def test_find_problems_names_every_problem_in_order():
    modules = {"agentrl/top.py", "agentrl/a/b/deep.py", "agentrl/c.py"}
    entries = [mirror.Entry("agentrl/c.py", "", 1), mirror.Entry("agentrl/top.py", "why", 2),
               mirror.Entry("agentrl/c.py", "why", 3)]
    problems = mirror.find_problems(modules, {"tests/test_top.py"}, entries)
    where = "tests/MIRROR_EXCEPTIONS.txt"
    assert [p.split("; ")[0] for p in problems] == [
        "agentrl/a/b/deep.py: no test file tests/a/b/test_deep.py",
        f"{where}:1: agentrl/c.py: no reason",
        f"{where}:2: agentrl/top.py: has its test file tests/test_top.py now",
        f"{where}:3: agentrl/c.py: listed twice (first on line 1)",
    ]


def test_a_root_without_the_package_is_an_error(tmp_path, capsys):
    code, _, err = run(tmp_path, capsys)
    assert code == 1 and "no such directory" in err


def test_the_repository_mirrors_its_tree():
    done = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("test mirror: ")
