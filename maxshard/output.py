"""Writing answers and progress lines.

Lines go out with ``os.write`` in one piece each, so a signal that arrives
while a progress line is printed cannot split the solution line that follows.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager


def write_line(fd: int, line: str) -> None:
    data = (line + "\n").encode()
    while data:
        data = data[os.write(fd, data) :]


@contextmanager
def stdout_to(fd: int | None = None) -> Iterator[None]:
    """Send file descriptor 1 (and so C libraries' output) to ``fd``, or to
    /dev/null, until the block ends: stdout carries the answer, and a backend
    or the library under it must not write there."""
    sys.stdout.flush()
    saved = os.dup(1)
    target = os.open(os.devnull, os.O_WRONLY) if fd is None else fd
    try:
        os.dup2(target, 1)
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)
        if fd is None:
            os.close(target)


def solution_line(solution: Sequence[int] | None) -> str:
    return "[" + ", ".join(str(int(s)) for s in solution) + "]" if solution is not None else "[]"


class Progress:
    """Progress lines ``# ...``: one status line redrawn on a terminal, plain lines otherwise."""

    def __init__(self, fd: int, quiet: bool = False, live: bool | None = None) -> None:
        self.fd = fd
        self.quiet = quiet
        self.live = os.isatty(fd) if live is None else live
        self.open_line = False

    def __call__(self, message: str) -> None:
        if self.quiet:
            return
        if self.live:
            os.write(self.fd, f"\r\x1b[K# {message}".encode())
            self.open_line = True
        else:
            write_line(self.fd, f"# {message}")

    def close(self) -> None:
        if self.open_line:
            os.write(self.fd, b"\n")
            self.open_line = False
