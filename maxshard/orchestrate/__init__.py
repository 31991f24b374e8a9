"""Run backends under a deadline and keep the best verified solution.

How a run flows, one file per job:

- :mod:`.pipeline`: read → reduce → the plan's stages → :class:`SolveResult`
  (what the CLI, the API and the workbench all call);
- :mod:`.plan`: plans as data (the built-in ``default.toml`` and
  ``prove.toml``, or a user's file) and :class:`Budget`, which turns shares
  of the time into moments;
- :mod:`.loop`: one stage: its workers, a handler per message, the leader
  switch;
- :mod:`.workers`: the worker processes, the shared incumbent, the context
  a backend receives;
- :mod:`.incumbent`: the best evaluator-checked answer and the rules by which
  a bound proves it.
"""

from .incumbent import Best
from .loop import run_backends
from .pipeline import Options, Run, SolveResult, solve
from .plan import Plan, PlanError, Stage, built_in, load
from .workers import available_cores

__all__ = [
    "Best",
    "Options",
    "Plan",
    "PlanError",
    "SolveResult",
    "Run",
    "Stage",
    "available_cores",
    "built_in",
    "load",
    "run_backends",
    "solve",
]
