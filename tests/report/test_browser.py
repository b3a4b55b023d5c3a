"""The report in headless Chromium: the page renders (a screenshot that is not blank) and,
after its script ran, the DOM holds the plots, the selected trajectory's tool call and
its tokens coloured by loss mask; a quickstart report is no wider than the window (measured
in the browser at 1280 and 800 pixels) and its full-page screenshot (report_full_page.png
in the test's tmp directory: look at it) is not blank.

Needs Debian's chromium (/usr/bin/chromium): skipped without it, unless
AGENTRL_REQUIRE_CHROMIUM=1 (CI), where its absence is a failure."""

from __future__ import annotations

import html
import json
import os
import re
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


# Loads the report in iframes of two widths (a desktop and half a laptop screen) and writes
# what the browser measured into the harness's DOM, which --dump-dom returns.
HARNESS = """<!doctype html><html><body>
<iframe id="w1280" src="{url}" style="width:1280px;height:900px;border:0"></iframe>
<iframe id="w800" src="{url}" style="width:800px;height:900px;border:0"></iframe>
<script>
var measured = {{}};
function measure(frame) {{
  var doc = frame.contentDocument.documentElement, win = frame.contentWindow;
  measured[frame.id] = {{scrollWidth: doc.scrollWidth, innerWidth: win.innerWidth,
                         clientWidth: doc.clientWidth, scrollHeight: doc.scrollHeight}};
  var out = document.getElementById("measured") || document.createElement("pre");
  out.id = "measured"; out.textContent = JSON.stringify(measured);
  document.body.appendChild(out);
}}
Array.prototype.forEach.call(document.querySelectorAll("iframe"), function (f) {{
  f.addEventListener("load", function () {{ measure(f); }});
}});
</script></body></html>"""


def _measure(tmp_path: Path, report: Path) -> dict[str, dict[str, int]]:
    harness = report.parent / "harness.html"
    harness.write_text(HARNESS.format(url=report.name), encoding="utf-8")
    result = _run(tmp_path, "--allow-file-access-from-files", "--dump-dom", harness.as_uri())
    assert result.returncode == 0, result.stderr[-2000:]
    found = re.search(r'<pre id="measured">(.*?)</pre>', result.stdout, re.S)
    assert found, result.stdout[-2000:]
    return json.loads(html.unescape(found.group(1)))


def test_the_quickstart_report_fits_the_window_and_shows_the_story(quickstart_dir, tmp_path,
                                                                   synthetic):  # fmt: skip
    rows = synthetic.metrics_rows(4)
    for row, value in zip(rows, (0.2, 0.3, 0.45, 0.5, 0.6), strict=True):
        row["val-core/agentrl/arithmetic/acc/mean@1"] = value
    synthetic.write_jsonl(quickstart_dir / "rl" / "metrics.jsonl", rows)
    many = [synthetic.dump_row(1, k, float(k % 2), expression="1+" * 200 + "1") for k in range(40)]
    synthetic.write_jsonl(quickstart_dir / "rl" / "rollouts" / "1.jsonl", many)
    report = write_report(quickstart_dir)

    measured = _measure(tmp_path, report)
    for width, page in measured.items():  # no horizontal scrolling of the page
        assert page["scrollWidth"] <= page["innerWidth"], (width, page)
    height = measured["w1280"]["scrollHeight"]
    shot = tmp_path / "report_full_page.png"  # the whole page, for a person to look at
    result = _run(tmp_path, "--hide-scrollbars", f"--window-size=1280,{height}",
                  f"--screenshot={shot}", report.as_uri())  # fmt: skip
    assert result.returncode == 0 and shot.stat().st_size > 0, result.stderr[-2000:]
    pixels = matplotlib.image.imread(shot)[..., :3]
    assert pixels.shape[:2] == (height, 1280)
    assert (pixels < 0.95).any(axis=-1).mean() > 0.05, "the screenshot is (nearly) blank"

    dom = _run(tmp_path, "--dump-dom", report.as_uri()).stdout
    assert dom.count('id="viewer-truncated"') == 1 and 'id="notes"' not in dom
    assert "rollouts 16 of 40" in dom
    for plot in ("sft_loss", "sft_check", "accuracy", "phrasing"):
        assert f'id="plot-{plot}"' in dom
    assert '<tr data-group="direct_phrasings">' in dom


def test_the_viewer_draws_an_agent_session_tree(tmp_path, synthetic):
    """The first agent row (segment 1 of session e0) is selected: its session's tree lists
    the root, the segment with its branch point and trained tokens (highlighted), and the
    side call; clicking needs no server, so the tree's entries are buttons."""
    run = tmp_path / "agent_run"
    synthetic.write_jsonl(run / "metrics.jsonl", synthetic.metrics_rows())
    synthetic.write_jsonl(run / "rollouts" / "1.jsonl", synthetic.agent_rows())
    result = _run(tmp_path, "--dump-dom", write_report(run).as_uri())
    assert result.returncode == 0, result.stderr[-2000:]
    dom = html.unescape(result.stdout)
    assert "4 of 4 trajectories" in dom and "1-0 · segment 1 · score" in dom
    assert "Session tree (3 segments; this one highlighted)" in dom
    tree = dom[dom.index('<ul class="tree">'):]
    tree = tree[: tree.index("</ul>")]
    entries = re.findall(r'<li([^>]*)><button type="button">([^<]*)</button>', tree)

    def attribute(attrs: str, pattern: str) -> str:
        found = re.search(pattern, attrs)
        return found.group(1) if found else ""

    assert [(attribute(a, r'data-segment="(\d+)"'), attribute(a, r"padding-left: (\d+)px"),
             attribute(a, r'class="([^"]*)"')) for a, _ in entries] == [
        ("0", "0", ""), ("1", "22", "current"), ("2", "0", "")]
    texts = [text for _, text in entries]
    assert texts[0] == "segment 0 · root · 4 of 6 response tokens trained"
    assert texts[1] == ("└ segment 1 · branches from segment 0 at message 1, token 2 · "
                        "3 of 4 response tokens trained")
    assert texts[2] == "segment 2 · side call · 1 of 1 response tokens trained"
    assert dom.count('class="tok m1"') == 3 + 1  # the selected segment's tokens + the legend
