"""What a foreign library prints while it runs, kept off the console.

    with captured_output() as captured:
        env = some_library.load(name)        # its banners, warnings and log lines
    captured.text                            # everything it wrote, after the block

Loading another library's environment can print pages (a download banner, the library's
own logger, a child process's output) around the one fact a user needs. Both the Python
streams (`sys.stdout`, `sys.stderr`, which a logging handler may hold) and file descriptors
1 and 2 (C code, child processes, a handler made before the block) go to one temporary
file while the block runs; the caller decides what to show: the cause, in one line, when it
failed; the text as it was, or nothing, when it worked.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass


@dataclass
class Captured:
    text: str = ""  # what was written during the block (set when it ends)


@contextlib.contextmanager
def captured_output() -> Iterator[Captured]:
    """Capture stdout and stderr, streams and file descriptors, for the block."""
    captured = Captured()
    # appending: the stream and the descriptors share one offset, so neither overwrites
    with tempfile.TemporaryFile(mode="a+", buffering=1, encoding="utf-8",
                                errors="replace") as sink:  # line-buffered: in order
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(AttributeError, OSError, ValueError):
                stream.flush()
        saved = [os.dup(fd) for fd in (1, 2)]
        try:
            for fd in (1, 2):
                os.dup2(sink.fileno(), fd)
            with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
                yield captured
        finally:
            sink.flush()
            for fd, copy in zip((1, 2), saved, strict=True):
                os.dup2(copy, fd)
                os.close(copy)
            sink.seek(0)
            captured.text = sink.read()


__all__ = ["Captured", "captured_output"]
