"""maxshard for PyTorch: from a model and a device mesh to a sharding plan.

    import maxshard.torch as mt

    plan = mt.plan(model, example_args, mesh=(2, 4), memory="16GB", timeout=10)
    print(plan.summary())
    plan.placements["transformer.h.0.attn.c_attn.weight"]  # (Replicate(), Shard(1))
    mt.verify(plan, model, example_args)  # runs it on a gloo group, checks the gradients

:func:`trace` turns one training step into a maxshard instance
(:mod:`.trace`, :mod:`.strategies`, :mod:`.costs`, :mod:`.network`);
:func:`plan` solves it and reads the answer back (:mod:`.plan`,
:mod:`.baselines`); :func:`verify` executes the plan on real DTensors
(:mod:`.verify`). See docs/torch.md.
"""

from .plan import ShardingPlan, plan
from .trace import TorchPlanError, Traced, trace
from .verify import verify

__all__ = ["ShardingPlan", "TorchPlanError", "Traced", "plan", "trace", "verify"]
