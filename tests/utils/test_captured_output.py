"""captured_output keeps what a block prints off the console, by stream and by descriptor
(a child process, a handler made before the block), and gives it back as text."""

from __future__ import annotations

import logging
import os
import subprocess
import sys

from agentrl.utils.captured_output import captured_output


def test_streams_descriptors_children_and_held_handlers_are_captured_in_order(capfd):
    console = open(2, "w", closefd=False)  # noqa: SIM115 -- the real stderr, as in a shell
    held = logging.StreamHandler(console)  # made before the block: holds that stream
    log = logging.getLogger("tests.captured_output")
    log.addHandler(held)
    log.propagate = False
    try:
        print("before")
        with captured_output() as captured:
            print("py out")
            print("py err", file=sys.stderr)
            os.write(1, b"fd 1\n")
            os.write(2, b"fd 2\n")
            log.warning("held handler")
            subprocess.run([sys.executable, "-c", "print('child')"], check=True)
        print("after")
    finally:
        log.removeHandler(held)
    assert captured.text == "py out\npy err\nfd 1\nfd 2\nheld handler\nchild\n"
    out, err = capfd.readouterr()
    assert (out, err) == ("before\nafter\n", "")


def test_the_text_is_there_when_the_block_raises():
    try:
        with captured_output() as captured:
            print("a banner")
            raise LookupError("x")
    except LookupError:
        pass
    assert captured.text == "a banner\n"
    print("the console is back")
