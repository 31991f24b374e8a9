"""A lower-bound backend: dual block coordinate ascent (:mod:`maxshard.ascent`).

It finds no solutions; it proves, as they rise, lower bounds on the model's
optimum from the LP relaxation over the local polytope with the memory rows,
and stops once its bound reaches the cost of the incumbent it was given. It
hands its state (messages and multipliers) to the orchestrator every few
seconds (:meth:`~maxshard.backend.Context.hand_over`), so a worker that continues
it in a later stage of a plan starts where it stopped.
"""

from __future__ import annotations

import numpy as np

from .. import work
from ..ascent import Ascent
from ..backend import Capabilities, Report, Result, Status, context
from ..model import Model
from .local import warm_up


class Dual:
    name = "dual"
    capabilities = Capabilities(
        exact=False, anytime=False, memory=True, lower_bound=True,
        provides=frozenset({"ascent"}), deterministic=True,
    )  # fmt: skip

    #: seconds between two hand-overs of the state (S's messages: 2.4 MB)
    share_every = 5.0

    def prepare(self) -> None:
        warm_up()  # the diffusion bound's kernels, which the ascent starts from

    def solve(self, model: Model, deadline: float, incumbent: np.ndarray | None,
              report: Report, seed: int = 0) -> Result:  # fmt: skip
        ascent = Ascent(model)
        if not ascent.usable:
            return Result(Status.UNKNOWN)
        ctx = context(report)
        warm = ctx.inherited
        if isinstance(warm, dict):
            ascent.restore(warm)
        target = None if incumbent is None else model.cost(incumbent)
        best: int | None = None
        shared = work.now()
        while work.now() < deadline and not ascent.converged:
            bound = ascent.step(deadline)
            if bound is not None and (best is None or bound > best):
                best = bound
                report(lower_bound=bound)
                if target is not None and bound >= target:
                    break  # the incumbent is optimal: nothing left to prove
            if work.now() - shared >= self.share_every:
                ctx.hand_over(ascent.state())
                shared = work.now()
        ctx.hand_over(ascent.state())
        return Result(Status.UNKNOWN, None, best)
