"""maxshard: a solver for the IOPDDL auto-sharding problem.

Data flows one way: read -> reduce -> solve (backend) -> reconstruct -> verify -> print.
"""

__version__ = "0.1.0"

from . import clock as _clock  # noqa: E402,F401  (notes the start time as early as possible)
from .api import SolveResult, compare, solve  # noqa: E402

__all__ = ["SolveResult", "compare", "solve"]
