"""Why neuronc keeps its graph algorithms hand-written instead of using networkx (measured, issue 17).

A random DAG shaped like a scheduled program (10^5 instructions, up to 3 predecessors each within the previous
50): bottom levels (the list scheduler's critical-path priority) over plain lists, against the same over a
networkx DiGraph; and networkx's transitive reduction (what semaphore minimization would need) at 5k nodes.
networkx is not a dependency: `pip install networkx` into the venv to run this.

    .venv/bin/python benchmarks/graph_libraries.py
"""

from __future__ import annotations

import random
import time


def main(n: int = 100_000) -> None:
    try:
        import networkx as nx
    except ImportError:
        raise SystemExit("networkx is not installed (it is not a dependency): pip install networkx") from None
    random.seed(0)
    preds = [sorted({random.randrange(max(0, i - 50), i) for _ in range(3)}) if i else [] for i in range(n)]
    cost = [random.random() for _ in range(n)]

    start = time.perf_counter()
    succs: list[list[int]] = [[] for _ in range(n)]
    for i, ps in enumerate(preds):
        for p in ps:
            succs[p].append(i)
    level = [0.0] * n
    for i in range(n - 1, -1, -1):
        level[i] = cost[i] + max((level[s] for s in succs[i]), default=0.0)
    lists = time.perf_counter() - start

    start = time.perf_counter()
    graph = nx.DiGraph()
    graph.add_nodes_from(range(n))
    graph.add_edges_from((p, i) for i, ps in enumerate(preds) for p in ps)
    levels: dict[int, float] = {}
    for node in reversed(list(nx.topological_sort(graph))):
        levels[node] = cost[node] + max((levels[s] for s in graph.successors(node)), default=0.0)
    with_nx = time.perf_counter() - start

    start = time.perf_counter()
    small = nx.DiGraph()
    small.add_edges_from((p, i) for i, ps in enumerate(preds[:5000]) for p in ps)
    nx.transitive_reduction(small)
    reduction = time.perf_counter() - start
    print(f"bottom levels, {n} nodes: lists {lists:.3f} s, networkx {with_nx:.3f} s ({with_nx / lists:.1f}x); "
          f"networkx transitive_reduction, 5000 nodes: {reduction:.2f} s")


if __name__ == "__main__":
    main()
