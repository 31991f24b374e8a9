"""SCIP (pyscipopt) on the model's MIP: the strongest open-source MIP solver.

The model goes to SCIP as the MPS file of :mod:`maxshard.formats.lp` (the
same MIP as the ``highs`` backend: local-polytope pairs, running-sum memory),
read by SCIP's own reader. Each better solution SCIP finds is reported as it
is found (an event handler on "best solution found"), its dual bound at the
end, rounded down with a margin for SCIP's tolerances. One thread.

``pip install 'maxshard[scip]'`` brings pyscipopt (an 18 MB wheel with SCIP).
"""

from __future__ import annotations

import math
import tempfile
import time
from pathlib import Path

import numpy as np

from ..backend import BackendError, Capabilities, Report, Result, Status
from ..model import Model, fingerprint


class Scip:
    name = "scip"
    capabilities = Capabilities(exact=True, anytime=True, memory=True, lower_bound=True)

    def __init__(self) -> None:
        try:
            import pyscipopt  # noqa: F401
        except ImportError:
            raise BackendError("scip needs pyscipopt: pip install 'maxshard[scip]'") from None

    def solve(self, model: Model, deadline: float, incumbent: np.ndarray | None,
              report: Report, seed: int = 0) -> Result:  # fmt: skip
        import pyscipopt

        from ..formats import FormatError, Header, export
        from ..formats.lp import read_answer

        if not model.nv:
            x = np.zeros(0, dtype=np.int64)
            report(x)
            return Result(Status.OPTIMAL, x, model.cost(x))
        scip = pyscipopt.Model()
        scip.hideOutput()
        with tempfile.TemporaryDirectory(prefix="maxshard-") as tmp:
            path = Path(tmp) / "model.mps"
            export(model, path, Header("mps", True, fingerprint(model), "model"))
            scip.readProblem(str(path))
        columns = [v for v in scip.getVars() if v.name.startswith("x")]

        def decode(sol) -> np.ndarray | None:
            text = "\n".join(f"{v.name} {scip.getSolVal(sol, v)}" for v in columns)
            try:
                return read_answer(model, text)
            except FormatError:
                return None

        best: list[np.ndarray] = []

        class Found(pyscipopt.Eventhdlr):
            def eventinit(self):
                self.model.catchEvent(pyscipopt.SCIP_EVENTTYPE.BESTSOLFOUND, self)

            def eventexec(self, event):
                x = decode(self.model.getBestSol())
                if x is not None and model.fits(x):
                    best.append(x)
                    report(x)

        scip.includeEventhdlr(Found(), "found", "reports each better solution")
        scip.setParam("limits/time", max(1.0, deadline - time.monotonic()))
        scip.setParam("randomization/randomseedshift", seed)
        scip.optimize()
        status = scip.getStatus()
        bound = scip.getDualbound()
        lower = None
        if math.isfinite(bound):
            lower = math.floor(bound - 1e-6 * max(1.0, abs(bound)))
        if status == "infeasible":
            return Result(Status.INFEASIBLE)
        if not best:
            return Result(Status.UNKNOWN, None, lower)
        x = best[-1]
        if status == "optimal":
            return Result(Status.OPTIMAL, x, model.cost(x))
        return Result(Status.FEASIBLE, x, lower)
