"""Writing answers and progress lines.

Lines go out with ``os.write`` in one piece each, so a signal that arrives
while a progress line is printed cannot split the solution line that follows.
"""

from __future__ import annotations

import os
from collections.abc import Sequence


def write_line(fd: int, line: str) -> None:
    data = (line + "\n").encode()
    while data:
        data = data[os.write(fd, data) :]


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
