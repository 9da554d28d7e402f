"""Base (lhs) dilation of a convolution as an explicit ``pad`` (a transposed convolution as a plain one).

``convolution(x, w)`` with ``lhs_dilate=d`` on some spatial dimension reads ``x`` with ``d - 1`` zeros between
its elements, then padded by ``pad_low``/``pad_high``: exactly ``pad(x, 0)`` with interior padding ``d - 1`` and
those edges (negative edges crop, as in the convolution). The convolution then has no base dilation and no
padding; stride, window dilation and reversal are kept. The backend lowers plain convolutions and pads.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from compiler.passes.interface import HloPass
from compiler.passes.utils import insert_before, new_instruction, reachable_computations
from hlo.ir import Instruction, Module, Shape, Window, numpy_dtype
from hlo.shape_inference import format_padding


def _lhs_spatial_dims(inst: Instruction) -> list[int] | None:
    """Operand dimension of each spatial window dimension, from dim_labels (e.g. b01f_01io->b01f)."""
    labels = str(inst.attrs.get("dim_labels", ""))
    lhs = labels.split("_")[0]
    spatial = sorted((c, i) for i, c in enumerate(lhs) if c.isdigit())
    return [i for _, i in spatial] if spatial else None


class ConvLhsDilationExpander(HloPass):
    name = "conv_lhs_dilation_expander"

    def run(self, module: Module) -> bool:
        changed = False
        for comp in reachable_computations(module):
            for conv in [i for i in comp.instructions if i.opcode == "convolution"]:
                window = conv.attrs.get("window")
                if not isinstance(window, Window) or all(d.lhs_dilate == 1 for d in window.dims):
                    continue
                dims = _lhs_spatial_dims(conv)
                if dims is None or len(dims) != len(window.dims):
                    continue
                x = conv.operands[0]
                config = [(0, 0, 0)] * x.shape.rank
                for d, w in zip(dims, window.dims, strict=True):
                    config[d] = (w.pad_low, w.pad_high, w.lhs_dilate - 1)
                out_dims = tuple(n + lo + hi + max(n - 1, 0) * it for n, (lo, hi, it) in zip(x.shape.dims, config,
                                                                                              strict=True))
                zero = new_instruction(module, "constant", Shape(x.shape.dtype, ()), [], metadata=conv.metadata,
                                       literal=np.zeros((), numpy_dtype(x.shape.dtype)), name=f"{conv.name}.zero")
                pad = new_instruction(module, "pad", Shape(x.shape.dtype, out_dims), [x, zero],
                                      {"padding": format_padding(config)}, conv.metadata, name=f"{conv.name}.dilated")
                insert_before(comp, conv, zero)
                insert_before(comp, conv, pad)
                conv.operands[0] = pad
                conv.attrs["window"] = Window(tuple(replace(w, lhs_dilate=1, pad_low=0, pad_high=0)
                                                   for w in window.dims))
                changed = True
        return changed
