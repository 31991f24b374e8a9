"""maxshard: a solver for the IOPDDL auto-sharding problem.

Data flows one way: read -> reduce -> solve (backend) -> reconstruct -> verify -> print.
"""

__version__ = "0.1.0"
