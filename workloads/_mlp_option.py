"""The ``mlp=omnimoe|peer`` option of a real language model: every decoder MLP replaced by an OmniMoE (expert-centric)
or PEER (token-centric) layer with :func:`npukit.models.replace_mlp`, sized by ``experts=N`` (a square), ``topk=K``,
``heads=H`` (PEER) and ``shared=I`` (OmniMoE's shared SwiGLU). Imports nothing heavy."""

from __future__ import annotations

import math
from typing import Any

from ..sim.errors import WorkloadError

__all__ = ["MLP_DEFAULTS", "MLP_SIZES", "check_mlp_options", "mlp_config"]

MLP_SIZES = ("experts", "topk", "heads", "shared")  # the size options of mlp=omnimoe|peer
MLP_DEFAULTS = {"experts": 1024 * 1024, "topk": 32, "heads": 8}  # PEER's million experts (He 2024, arXiv:2407.04153)


def check_mlp_options(spec: str, opts: dict[str, Any]) -> None:
    """Check and default the ``mlp=`` options: sizes only with it, PEER's heads only for PEER, heads | topk."""
    sizes = [k for k in MLP_SIZES if k in opts]
    if "mlp" not in opts:
        if sizes:
            raise WorkloadError(f"workload '{spec}': {sizes[0]}= sizes the MLP that mlp=omnimoe|peer puts in; give mlp too")
        return
    for key, val in MLP_DEFAULTS.items():
        if key != "heads" or opts["mlp"] == "peer":
            opts.setdefault(key, val)
    if opts["mlp"] == "peer":
        if "shared" in opts:
            raise WorkloadError(f"workload '{spec}': shared=I sizes OmniMoE's shared MLP; PEER has none")
        if opts["topk"] % opts["heads"]:
            raise WorkloadError(f"workload '{spec}': PEER's topk ({opts['topk']}) must be a multiple of heads "
                                f"({opts['heads']}): each head retrieves topk/heads experts")
    elif "heads" in opts:
        raise WorkloadError(f"workload '{spec}': heads=H is PEER's; OmniMoE routes with one Cartesian router")
    n = math.isqrt(opts["experts"])
    if n * n != opts["experts"]:
        raise WorkloadError(f"workload '{spec}': experts must be a square (n*n product keys), got {opts['experts']:,}")
    if opts["topk"] > opts["experts"]:
        raise WorkloadError(f"workload '{spec}': topk ({opts['topk']}) is more than experts ({opts['experts']})")


def mlp_config(opts: dict[str, Any]) -> Any:
    """The OmniMoE or PEER layer that ``mlp=`` puts in place of every decoder MLP (PEER: softmax gates, the paper's)."""
    from ..models import OmniMoEConfig, PEERConfig

    if opts["mlp"] == "omnimoe":
        return OmniMoEConfig(num_experts=opts["experts"], top_k=opts["topk"], intermediate_size=opts.get("shared"),
                             backend="torch")
    return PEERConfig(num_experts=opts["experts"], heads=opts["heads"], experts_per_head=opts["topk"] // opts["heads"],
                      non_competing_scores=False)
