"""Models in the optimisation community's file formats, and answers read back.

``maxshard export`` writes a model (presolved by default) for solvers that do
not speak the contest's JSON; ``maxshard restore`` turns such a solver's answer
back into a contest solution. One module per format family, each with a
``write(model, path, header) -> dict`` (sizes worth reporting) and a
``read_answer(model, text) -> model solution``:

========  ==========================  =========================================
format    module                      what reads it
========  ==========================  =========================================
``wcnf``  :mod:`.wcnf`                MaxSAT solvers (MaxSAT Evaluation 2022+)
``opb``   :mod:`.opb`                 pseudo-Boolean solvers (PB competition)
``lp``    :mod:`.lp`                    MIP solvers (CPLEX LP format)
``mps``   :mod:`.lp`                    MIP solvers (free MPS)
``cfn``   :mod:`.cfn`                 toulbar2 and other cost function networks
========  ==========================  =========================================

Every file starts with a comment saying what it is: a line ``maxshard-model
format=... presolve=yes|no fingerprint=... problem=...``. The fingerprint is a
hash of the model (:func:`~maxshard.model.fingerprint`); presolve is
deterministic, so ``restore`` recomputes the model from the problem file and
checks that it is the one the file was written from: nothing else needs to be
kept beside the file.
"""

from __future__ import annotations

import gzip
import importlib
import lzma
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..model import Model

#: format name -> module (in this package) that writes and reads it
FORMATS = {"wcnf": "wcnf", "opb": "opb", "lp": "lp", "mps": "lp", "cfn": "cfn"}


class FormatError(ValueError):
    """A model file or an answer that cannot be used: one line saying why."""


@dataclass(frozen=True)
class Header:
    format: str
    presolve: bool
    fingerprint: str
    problem: str

    def line(self) -> str:
        return (
            f"maxshard-model format={self.format} presolve={'yes' if self.presolve else 'no'} "
            f"fingerprint={self.fingerprint} problem={self.problem}"
        )


def checked_units(model: Model):
    """The model's memory in units (:func:`maxshard.knapsack.units`), or None;
    a point where nothing fits is an error here (a file cannot state it)."""
    from ..knapsack import units

    mem = units(model)
    if mem is not None and (mem.room < 0).any():
        raise FormatError("memory cannot fit at some time point whatever the choice")
    return mem


def format_of(path: str | Path, explicit: str | None = None) -> str:
    """The format named, or the one of the file's suffix (``.gz`` looked through)."""
    if explicit is not None:
        if explicit.lower() not in FORMATS:
            raise FormatError(f"unknown format {explicit!r} (known: {', '.join(FORMATS)})")
        return explicit.lower()
    suffixes = [s.lower().lstrip(".") for s in Path(path).suffixes]
    if suffixes and suffixes[-1] in ("gz", "xz"):
        suffixes = suffixes[:-1]
    if suffixes and suffixes[-1] in FORMATS:
        return suffixes[-1]
    raise FormatError(f"{path}: cannot tell the format from the suffix; give --format")


def module(fmt: str):
    return importlib.import_module(f"{__name__}.{FORMATS[fmt]}")


def export(model: Model, path: Path, header: Header) -> dict:
    """Write ``model`` to ``path`` in ``header.format``; returns its sizes."""
    return module(header.format).write(model, path, header)


_HEADER = re.compile(
    r"maxshard-model format=(\w+) presolve=(yes|no) fingerprint=([0-9a-f]+) problem=(\S*)"
)


def read_header(path: Path) -> Header:
    """The header of a model file written by :func:`export` (within its first lines)."""
    try:
        with open_text(path) as f:
            for _, line in zip(range(100), f, strict=False):
                found = _HEADER.search(line)
                if found:
                    fmt, presolve, fp, problem = found.groups()
                    return Header(fmt, presolve == "yes", fp, problem)
    except (OSError, UnicodeDecodeError) as exc:
        raise FormatError(f"{path}: cannot read it ({exc})") from None
    raise FormatError(f"{path}: not a model file written by maxshard export (no header line)")


def open_text(path: Path):
    """A text file for reading, gzip- or xz-compressed or plain (by its first bytes)."""
    with open(path, "rb") as f:
        magic = f.read(6)
    if magic[:2] == b"\x1f\x8b":
        return gzip.open(path, "rt")
    if magic == b"\xfd7zXZ\x00":
        return lzma.open(path, "rt")
    return open(path)


def open_out(path: Path):
    """A binary file for writing, compressed when its name ends in .gz or .xz."""
    suffix = Path(path).suffix.lower()
    if suffix == ".gz":
        return gzip.open(path, "wb", compresslevel=3)
    if suffix == ".xz":
        return lzma.open(path, "wb", preset=1)
    return open(path, "wb")


def restore(model: Model, fmt: str, text: str) -> np.ndarray:
    """The model solution in a solver's answer ``text`` for a file of format ``fmt``
    (a model that presolve solved whole has one solution, whatever the answer)."""
    if not model.nv:
        return np.zeros(0, dtype=np.int64)
    return module(fmt).read_answer(model, text)


def v_lines(text: str) -> list[str]:
    """The bodies of a SAT-style answer's ``v`` lines; FormatError if there are none."""
    found = [line[2:].strip() for line in text.splitlines() if line.startswith("v ")]
    if not found:
        raise FormatError("the answer has no 'v' line (the solver found no assignment?)")
    return found


def one_value_each(model: Model, chosen: np.ndarray, what: str) -> np.ndarray:
    """The model solution from 0/1 flags per value (indexed like ``model.unary``);
    FormatError unless every variable has exactly one value set."""
    counts = np.add.reduceat(chosen.astype(np.int64), model.dom_off[:-1]) if model.nv else []
    for v, c in enumerate(np.asarray(counts).tolist()):
        if c != 1:
            state = "no value" if c == 0 else f"{c} values"
            raise FormatError(f"the {what} gives variable {v} {state} (incomplete or malformed)")
    flat = np.flatnonzero(chosen)
    return flat - np.repeat(model.dom_off[:-1], np.diff(model.dom_off))[flat]
