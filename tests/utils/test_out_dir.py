"""check_writable_dir: a directory a command will write is refused, by its flag, when a
file is in the way or the place cannot be written; nothing is made by the check."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentrl.utils.out_dir import check_writable_dir


def test_a_file_in_the_way_or_a_place_it_cannot_write_is_refused(tmp_path):
    (tmp_path / "file").write_text("")
    check_writable_dir(tmp_path, "--out")
    check_writable_dir(tmp_path / "new" / "deeper", "--out-dir")  # made later, by the run
    assert not (tmp_path / "new").exists()
    with pytest.raises(ValueError, match="^--out-dir .*/file is a file, not a directory$"):
        check_writable_dir(tmp_path / "file", "--out-dir")
    with pytest.raises(ValueError, match=r"^--out .*/file/x is under .*/file, which is a file"):
        check_writable_dir(tmp_path / "file" / "x", "--out")
    with pytest.raises(ValueError, match="^--out-dir /proc/agentrl-no/out: cannot write in /proc"):
        check_writable_dir(Path("/proc/agentrl-no/out"), "--out-dir")
