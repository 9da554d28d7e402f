"""A dot's results to HBM in rows too short for a long DMA run, when its moving operand streams block by
block (one group of G moving tiles at a time): staged side by side over consecutive groups in one output
buffer and stored when it is full. Only with one stationary block (the output rows on one partition block):
a second block's staged buffer could be handed out again by the pool's rotation before it is stored.
GPT-2's logits ([128 tokens, 50257] f32, 512-column moving tiles): 8 KiB runs instead of 2 KiB (descriptor
overhead 3% instead of 12%), 1140.3 -> 1131.5 us."""

from __future__ import annotations

from typing import Any

from backend.kernels.evaluate import Coords, TileEvaluator


def staged(loop: Any, blk: tuple[int, int], grp, accs: dict) -> bool:
    """A streamed moving operand's results, one group of G moving tiles at a time, in rows too short for a
    long DMA run: staged side by side over consecutive groups in one output buffer, stored when it is full
    (GPT-2's logits: 8 KiB runs, not 2 KiB). False (nothing done) when they are not to be staged."""
    plan = loop.plan
    p0, pw = blk
    g0 = grp[0][0]
    gcols = grp[-1][0] + grp[-1][1] - g0
    if 2 * gcols > loop.merged_cols or loop.b.resident(
            plan.out.hbm_ap(loop.p_axis, p0, pw, [(loop.f_axis, g0, gcols)], loop.fixed)) is not None:
        return False
    pending = loop.staging.get(p0)
    if pending is not None and (pending[1] + pending[2] != g0 or pending[2] + gcols > loop.merged_cols):
        flush(loop, p0)
        pending = None
    buf, start, cols, _ = pending if pending is not None else (loop.pools["out"].next(), g0, 0, pw)
    for f0, fw in grp:
        label = f"{loop.tag} p{p0} f{f0}"
        free = [(loop.f_axis, f0, fw)]
        operands = loop.loader.load(loop.fixed, p0, pw, free)
        coords = Coords(loop.p_axis, p0, ((loop.f_axis, f0, fw),), tuple(loop.fixed.items()))
        TileEvaluator(loop.b, loop.temps.store(), pw, fw, operands, acc=accs[p0, f0].flat("f32", pw, fw),
                      label=label, coords=coords).run(plan.epilogue, buf.flat(plan.out.dtype, pw, fw, f0 - start))
    loop.staging[p0] = (buf, start, cols + gcols, pw)
    if cols + 2 * gcols > loop.merged_cols:
        flush(loop, p0)
    return True


def flush(loop: Any, p0: int) -> None:
    """Store the results staged for the rows at p0 (one DMA)."""
    pending = loop.staging.pop(p0, None)
    if pending is None:
        return
    buf, start, cols, pw = pending
    out = loop.plan.out.hbm_ap(loop.p_axis, p0, pw, [(loop.f_axis, start, cols)], loop.fixed)
    loop.b.dma(out, buf.flat(loop.plan.out.dtype, pw, cols), f"{loop.tag} p{p0} f{start} store")
