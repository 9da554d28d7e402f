"""Example plug-in fusion strategy "bounded": greedy fusion, but no fusion grows beyond MAX_MEMBERS
instructions (smaller kernels: less SBUF per kernel, more HBM traffic between them).

    neuronc compile examples/mlp.py --plugin examples/plugins/bounded_fusion.py --fusion bounded

The pass's own checks run first (what one kernel can compute); `allow` only refuses more, and its reason
lands in fusion_decisions.txt as "strategy bounded: ...".
"""

from compiler.passes.fusion.cost import duplication
from compiler.passes.fusion.registry import FusionStrategy, register_fusion_strategy

MAX_MEMBERS = 3


def allow(producer, consumer, kind, members):
    """None lets `producer` join the fusion of `members` (grown from `consumer`); else the reason it may not."""
    if len(members) > MAX_MEMBERS:
        return f"the fusion would hold {len(members)} instructions (at most {MAX_MEMBERS})"
    return None


register_fusion_strategy(FusionStrategy("bounded", f"greedy, at most {MAX_MEMBERS} instructions per fusion",
                                        allow=allow, duplicate=duplication))
