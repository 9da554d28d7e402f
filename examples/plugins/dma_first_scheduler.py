"""Example plug-in scheduler "dma_first": program order, except that every ready DMA goes first.

    neuronc compile examples/mlp.py --plugin examples/plugins/dma_first_scheduler.py --scheduler dma_first

A list scheduler on the backend's estimated timeline (problem.placer()): the ready instruction that comes
first is a DMA if there is one (eager prefetch: loads start as soon as their buffer is free), else the
earliest in program order; the engines are the ones the kernels chose, DMAs take the queue they start on
first. Compare with `--scheduler inorder` (program order) and `list` (critical path) in a sweep:

    neuronc sweep --models examples/mlp.py --plugin examples/plugins/dma_first_scheduler.py \\
                  --grid scheduler=inorder,dma_first,list --out out/dma_first
"""

import heapq

from backend.registry import register_scheduler


@register_scheduler("dma_first", description="program order, but every ready DMA is issued first")
def dma_first(problem):
    """problem: backend.schedule.ScheduleProblem (ops, preds, costs, n_queues); returns its Placement."""
    placer = problem.placer()
    key = [(0 if op.opcode == "dma" else 1, i) for i, op in enumerate(problem.ops)]
    ready = [key[i] for i, preds in enumerate(problem.preds) if not preds]
    heapq.heapify(ready)
    while ready:
        _, i = heapq.heappop(ready)
        for j in placer.commit(i):  # commits op i on its engine (a DMA on its best queue); j became ready
            heapq.heappush(ready, key[j])
    return placer.placement
