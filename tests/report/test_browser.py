"""The report in headless Chromium: the page renders (a screenshot that is not blank) and,
after its script ran, the DOM holds the plots, the selected trajectory's tool call and
its tokens coloured by loss mask.

Needs Debian's chromium (/usr/bin/chromium): skipped without it, unless
AGENTRL_REQUIRE_CHROMIUM=1 (CI), where its absence is a failure."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import matplotlib.image
import numpy as np
import pytest

from agentrl.report import write_report

pytestmark = pytest.mark.slow

CHROMIUM = Path("/usr/bin/chromium")
FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--window-size=1280,2000",
]  # fmt: skip


def _chromium() -> Path:
    if CHROMIUM.is_file():
        return CHROMIUM
    if os.environ.get("AGENTRL_REQUIRE_CHROMIUM") == "1":
        pytest.fail(f"{CHROMIUM} is missing (AGENTRL_REQUIRE_CHROMIUM=1): apt-get install chromium")
    pytest.skip(f"{CHROMIUM} is not installed (apt-get install chromium)")


def _run(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    command = [str(_chromium()), *FLAGS, f"--user-data-dir={tmp_path / 'chromium'}", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)


def test_report_renders_in_headless_chromium(train_run, tmp_path, synthetic):
    url = write_report(train_run).as_uri()

    shot = tmp_path / "report.png"
    result = _run(tmp_path, f"--screenshot={shot}", url)
    assert result.returncode == 0 and shot.is_file(), result.stderr[-2000:]
    pixels = matplotlib.image.imread(shot)[..., :3]  # (2000, 1280, 3), floats in [0, 1]
    assert pixels.shape[:2] == (2000, 1280)
    not_white = (pixels < 0.95).any(axis=-1)
    assert not_white.mean() > 0.05, "the screenshot is (nearly) blank"
    assert pixels.std() > 0.1
    assert len(np.unique((pixels * 255).astype(np.uint8).reshape(-1, 3), axis=0)) > 100

    result = _run(tmp_path, "--dump-dom", url)
    assert result.returncode == 0, result.stderr[-2000:]
    dom = result.stdout
    # the plots
    assert dom.count('<img alt="') == len(synthetic.EXPECTED_PLOTS)
    assert dom.count('src="data:image/png;base64,') == len(synthetic.EXPECTED_PLOTS)
    # the viewer, built by the script: 12 trajectories listed, the first one shown
    assert "12 of 12 trajectories" in dom
    assert dom.count("<li") == 12
    assert '<code class="tool-call">calculator({"expression":"12*3"})</code>' in dom
    assert '<pre class="tool-response">36</pre>' in dom
    assert dom.count('class="tok m1"') == synthetic.MASK.count(1) + 1  # + the legend
    assert dom.count('class="tok m0"') == synthetic.MASK.count(0) + 1
    assert "&lt;answer&gt;36&lt;/answer&gt;" in dom  # model text is text, not markup
