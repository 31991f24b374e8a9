"""Outside command-line solvers as backends, declared without writing Python.

A solver is a format and a command: maxshard exports the model
(:mod:`maxshard.formats`), runs the command under the deadline (killed when
it comes, with everything it started), restores the answer and reports it;
the orchestrator re-costs it with the evaluator like any other. Declared in
a TOML file::

    [solvers.mycbc]
    format = "mps"                       # wcnf, opb, lp, mps or cfn
    command = "cbc {model} -sec {timeout} -solve -solu {answer}"
    optimal = "^Optimal"                 # optional: a line that proves optimality

or on the command line, ``--solver 'mycbc=mps:cbc {model} -sec {timeout}
-solve -solu {answer}'``. Placeholders: ``{model}`` the exported file,
``{timeout}`` whole seconds the solver may take, ``{answer}`` a file for the
answer (without it the answer is read from the command's standard output),
``{seed}``. ``optimal`` is a regular expression searched in the answer and the
output (default per format: ``s OPTIMUM FOUND`` for WCNF and OPB, a first
line starting ``Optimal`` for LP and MPS, ``Optimum:`` for CFN); a match
makes the run's answer proven optimal (the exported model is exact). Files
are read from ``$MAXSHARD_SOLVERS`` (paths separated by ``:``) and
``~/.config/maxshard/solvers.toml``.

Built in: ``cbc`` (Alpa's solver; ``pip install 'maxshard[cbc]'`` brings the
CBC binary, cbcbox), on the MPS file, one thread, no relative gap.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import re
import shlex
import signal
import subprocess
import tempfile
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..backend import BackendError, Capabilities, Report, Result, Status
from ..model import Model, fingerprint

#: default optimality evidence per format
OPTIMAL = {
    "wcnf": r"^s OPTIMUM FOUND",
    "opb": r"^s OPTIMUM FOUND",
    "lp": r"\A\s*(Model status\s*)?Optimal",
    "mps": r"\A\s*(Model status\s*)?Optimal",
    "cfn": r"Optimum:",
}
#: seconds kept back at the end for restoring and reporting the answer
RESTORE_MARGIN = 1.0
INLINE = "MAXSHARD_SOLVERS_INLINE"  # declared on the command line (JSON), for workers


@dataclass(frozen=True)
class Spec:
    name: str
    format: str
    command: str
    optimal: str | None = None

    def check(self) -> Spec:
        from ..formats import FORMATS

        if self.format not in FORMATS:
            known = ", ".join(FORMATS)
            raise BackendError(f"solver {self.name!r}: unknown format {self.format!r} ({known})")
        if "{model}" not in self.command:
            raise BackendError(f"solver {self.name!r}: its command has no {{model}} placeholder")
        try:
            shlex.split(self.command.format(model="m", timeout=1, answer="a", seed=0))
        except (KeyError, IndexError, ValueError) as exc:
            raise BackendError(f"solver {self.name!r}: bad command ({exc})") from None
        return self


def parse_inline(text: str) -> Spec:
    """``NAME=FORMAT:COMMAND`` as given to ``--solver``."""
    name, eq, rest = text.partition("=")
    fmt, colon, command = rest.partition(":")
    if not (eq and colon and name.strip() and command.strip()):
        raise BackendError(f"--solver expects NAME=FORMAT:COMMAND, got {text!r}")
    return Spec(name.strip(), fmt.strip().lower(), command.strip()).check()


def declare(specs: list[Spec]) -> None:
    """Make ``specs`` known to this process and the workers it starts."""
    known = json.loads(os.environ.get(INLINE, "[]"))
    known += [{"name": s.name, "format": s.format, "command": s.command} for s in specs]
    os.environ[INLINE] = json.dumps(known)


def config_files() -> list[Path]:
    paths = [Path(p) for p in os.environ.get("MAXSHARD_SOLVERS", "").split(os.pathsep) if p]
    user = Path.home() / ".config" / "maxshard" / "solvers.toml"
    return paths + ([user] if user.exists() else [])


def declared() -> dict[str, Spec]:
    """Every solver declared in the config files and on the command line."""
    found: dict[str, Spec] = {}
    for path in config_files():
        try:
            data = tomllib.loads(path.read_text())
        except FileNotFoundError:
            raise BackendError(f"{path}: no such solvers file") from None
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise BackendError(f"{path}: not a valid solvers file ({exc})") from None
        for name, table in data.get("solvers", {}).items():
            if not isinstance(table, dict) or "format" not in table or "command" not in table:
                raise BackendError(f"{path}: solver {name!r} needs a format and a command")
            found[name] = Spec(
                name, str(table["format"]).lower(), str(table["command"]), table.get("optimal")
            ).check()
    for item in json.loads(os.environ.get(INLINE, "[]")):
        found[item["name"]] = Spec(**item).check()
    return found


class External:
    """A declared command-line solver as a backend (see the module docstring)."""

    capabilities = Capabilities(exact=True, anytime=False, memory=True, lower_bound=False)

    def __init__(self, spec: Spec) -> None:
        self.spec = spec
        self.name = spec.name

    def solve(self, model: Model, deadline: float, incumbent: np.ndarray | None,
              report: Report, seed: int = 0) -> Result:  # fmt: skip
        from ..formats import FormatError, Header, export, restore

        fmt = self.spec.format
        with tempfile.TemporaryDirectory(prefix="maxshard-") as tmp:
            path = Path(tmp) / f"model.{fmt}"
            export(model, path, Header(fmt, True, fingerprint(model), "model"))
            answer = Path(tmp) / "answer.txt"
            stop = deadline - RESTORE_MARGIN
            seconds = max(1, int(stop - time.monotonic()))
            command = self.spec.command.format(
                model=shlex.quote(str(path)), timeout=seconds, answer=shlex.quote(str(answer)),
                seed=seed,
            )  # fmt: skip
            out, finished = run_until(shlex.split(command), stop, Path(tmp) / "stdout.txt")
            text = answer.read_text(errors="replace") if answer.exists() else out
            if "{answer}" in self.spec.command and not answer.exists():
                if not finished:
                    return Result(Status.UNKNOWN)  # killed before it wrote an answer
                raise RuntimeError(f"{self.name} wrote no answer file; it printed: {tail(out)}")
            try:
                x = restore(model, fmt, text)
            except FormatError as exc:
                if not finished:
                    return Result(Status.UNKNOWN)
                raise RuntimeError(f"{self.name}'s answer: {exc}") from None
        if not model.fits(x):
            raise RuntimeError(f"{self.name}'s answer does not fit in memory")
        report(x)
        proof = self.spec.optimal or OPTIMAL[fmt]
        optimal = finished and bool(re.search(proof, text + "\n" + out, re.MULTILINE))
        if optimal:
            return Result(Status.OPTIMAL, x, model.cost(x))
        return Result(Status.FEASIBLE, x)


def run_until(args: list[str], stop: float, log: Path) -> tuple[str, bool]:
    """Run ``args`` until it ends or ``stop`` (monotonic) comes, then kill it and
    all it started. Returns (its output, whether it ended by itself)."""
    with log.open("w+b") as sink:
        try:
            proc = subprocess.Popen(
                args, stdout=sink, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True, preexec_fn=_die_with_parent,
            )  # fmt: skip
        except OSError as exc:
            raise RuntimeError(f"cannot start {args[0]!r}: {exc.strerror}") from None
        try:
            proc.wait(timeout=max(0.0, stop - time.monotonic()))
            finished = True
        except subprocess.TimeoutExpired:
            finished = False
            _kill_group(proc)
        sink.seek(0)
        return sink.read().decode(errors="replace"), finished


def _kill_group(proc: subprocess.Popen) -> None:
    for sig, wait in ((signal.SIGTERM, 0.5), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def _die_with_parent() -> None:
    """In the child: be killed when the worker that started it dies (Linux), so
    a worker killed at the deadline leaves no solver running."""
    with contextlib.suppress(OSError):  # not Linux: the worker's own kill must do
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def tail(text: str, n: int = 200) -> str:
    text = " ".join(text.split())
    return repr(text[-n:]) if text else "nothing"


class Cbc(External):
    """CBC (Alpa's ILP solver) on the MPS file, through cbcbox's binary."""

    def __init__(self) -> None:
        try:
            import cbcbox
        except ImportError:
            raise BackendError("cbc needs the CBC binary: pip install 'maxshard[cbc]'") from None
        binary = shlex.quote(cbcbox.cbc_bin_path())
        command = (
            f"{binary} {{model}} -threads 1 -ratioGap 0 -allowableGap 0 "
            f"-sec {{timeout}} -randomSeed {{seed}} -solve -solu {{answer}}"
        )
        super().__init__(Spec("cbc", "mps", command))
