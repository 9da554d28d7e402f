"""Example plug-in memory planner "half_sbuf": the built-in residency planner with half of SBUF, leaving
the other half to the kernels' own pools (a working set that spills more, for studies of the trade-off).

    neuronc compile examples/mlp.py --plugin examples/plugins/half_sbuf_memory.py --memory-planner half_sbuf

A memory planner gets the backend's survey of the first lowering (every access of every tensor between
kernels, each kernel's SBUF need) and proposes which tensors stay in SBUF (residency.Image list).
"""

from backend.registry import register_memory_planner
from backend.residency import plan_residency


@register_memory_planner("half_sbuf")
def half_sbuf(survey, tensors, sbuf_partition_bytes, partitions, excluded):
    return plan_residency(survey, tensors, sbuf_partition_bytes // 2, partitions, excluded)
