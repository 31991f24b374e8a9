"""Mixed-integer programs (CPLEX LP and free MPS files), written by HiGHS.

The model is the one the ``highs`` backend solves (:class:`~maxshard.mip.MipForm`):
a binary column ``x<v>_<a>`` per value (exactly one per variable), a
continuous ``y<e>_<a>_<b>`` per allowed table entry, linked to the values by
the local-polytope rows (exact for binary ``x``, and a strong relaxation), no
column for a forbidden entry, upper bound 0 on a forbidden value, and memory
in running-sum form: a continuous level ``l<p>`` per kept point, in units of
the usages' greatest common divisor, bounded by the room there. The objective
constant is the model's offset, so the objective is the model's cost exactly
(all coefficients are integers; HiGHS writes them exactly below 10^15, far
above these models' costs).

An answer is a solution file as MIP solvers write them, read by column name:
HiGHS (``writeSolution``), CBC (``solu``), SCIP, Gurobi (``.sol``) and others
that print a column's name then its value; a value is taken when it is above
one half.
"""

from __future__ import annotations

import re
import shutil
import tempfile
from pathlib import Path

import numpy as np

from ..model import Model
from . import FormatError, Header, one_value_each, open_out

#: HiGHS prints numbers with 15 significant digits: integers below this are exact
EXACT_BELOW = 10**15


def write(model: Model, path: Path, header: Header) -> dict:
    import highspy

    from ..mip import MipForm, new_highs

    mip = MipForm(model)
    big = float(np.abs(mip.cost).max(initial=0.0))
    if big >= EXACT_BELOW or abs(model.offset) >= EXACT_BELOW:
        raise FormatError(f"a cost of {big:.3g} cannot be written exactly in an LP/MPS file")
    lp = highspy.HighsLp()
    ncol, nrow = len(mip.cost), len(mip.row_lo)
    lp.num_col_, lp.num_row_ = ncol, nrow
    lp.col_cost_ = mip.cost
    lp.col_lower_ = np.zeros(ncol)
    lp.col_upper_ = mip.upper
    lp.row_lower_ = np.where(np.isinf(mip.row_lo), -highspy.kHighsInf, mip.row_lo)
    lp.row_upper_ = mip.row_hi
    lp.offset_ = float(model.offset)
    lp.a_matrix_.format_ = highspy.MatrixFormat.kRowwise
    lp.a_matrix_.num_col_, lp.a_matrix_.num_row_ = ncol, nrow
    lp.a_matrix_.start_ = np.append(mip.a_start, len(mip.a_index)).astype(np.int32)
    lp.a_matrix_.index_ = mip.a_index
    lp.a_matrix_.value_ = mip.a_value
    lp.integrality_ = [highspy.HighsVarType.kInteger] * mip.n_x + [
        highspy.HighsVarType.kContinuous
    ] * (ncol - mip.n_x)
    lp.col_names_ = column_names(model, mip)
    lp.row_names_ = [f"r{i}" for i in range(nrow)]
    h = new_highs(threads=None)  # it only writes the model
    h.passModel(lp)
    with tempfile.TemporaryDirectory() as tmp:
        plain = Path(tmp) / f"model.{header.format}"
        h.writeModel(str(plain))
        mark = "\\ " if header.format == "lp" else "* "
        with open_out(path) as out, open(plain, "rb") as body:
            out.write(f"{mark}{header.line()}\n".encode())
            out.write(f"{mark}objective = the model's cost; x<v>_<a>: v takes a\n".encode())
            shutil.copyfileobj(body, out, 1 << 20)
    return {"columns": ncol, "rows": nrow, "nonzeros": len(mip.a_index), "binaries": mip.n_x}


def column_names(model: Model, mip) -> list[str]:
    var = np.repeat(np.arange(model.nv), model.dom_size)
    val = np.arange(mip.n_x) - model.dom_off[var]
    names = [f"x{v}_{a}" for v, a in zip(var.tolist(), val.tolist(), strict=True)]
    for e, a, b in mip.y_entries:
        names += [f"y{e}_{i}_{j}" for i, j in zip(a.tolist(), b.tolist(), strict=True)]
    names += [f"l{p}" for p in range(len(mip.cost) - len(names))]
    return names


_NUMBER = re.compile(r"^[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$")
_VALUE_NAME = re.compile(r"^x(\d+)_(\d+)$")


def read_answer(model: Model, text: str) -> np.ndarray:
    nval = int(model.dom_off[-1])
    chosen = np.zeros(nval, dtype=np.int64)
    seen = 0
    for line in text.splitlines():
        tokens = line.split()
        for i, token in enumerate(tokens):
            name = _VALUE_NAME.match(token)
            if name is None:
                continue
            value = next((t for t in tokens[i + 1 :] if _NUMBER.match(t)), None)
            if value is None:
                continue
            v, a = int(name.group(1)), int(name.group(2))
            if not (0 <= v < model.nv and 0 <= a < model.dom_size[v]):
                raise FormatError(f"the solution names column {token}, which the model has not")
            seen += 1
            if float(value) > 0.5:
                chosen[model.dom_off[v] + a] = 1
            break
    if not seen:
        raise FormatError("no x<v>_<a> column in the solution file (the solver found none?)")
    return one_value_each(model, chosen, "solution")
