"""Command-line interface: ``maxshard`` (solve, evaluate, info, ...) and ``iopddl``.

``iopddl PROBLEM TIMEOUT`` is the contest contract: progress lines start with
``#`` and the last line printed is the solution ``[s0, s1, ...]`` (``[]`` when
the instance has none), printed before the timeout, also on SIGTERM/SIGINT.

One module per command group: :mod:`.solving` (solve, iopddl),
:mod:`.models` (evaluate, info, generate, export, restore), :mod:`.sweeps`
(compare, suite), :mod:`.plans` (plans, backends, warmup, version) and
:mod:`.torch` (the PyTorch front-end, ``maxshard torch ...``).
"""

from __future__ import annotations

import sys

from . import models, plans, sweeps  # noqa: F401 - they register their commands
from .app import app
from .common import _exit_now
from .solving import iopddl
from .torch import app as torch_app

app.add_typer(torch_app, name="torch")


def main() -> None:
    app()


def iopddl_main() -> None:
    iopddl(sys.argv[1:])
    _exit_now()
