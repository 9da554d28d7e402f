"""Recurrent layers: LSTM and GRU, unrolled over the (static) sequence length.

Per layer and direction the input projection of every time step is one ``dot`` (x @ W_ih^T over the
whole sequence); each step then adds the hidden projection (h @ W_hh^T) and applies the gate math.
Weights come in torch's flat order: per layer, per direction, ``w_ih, w_hh[, b_ih, b_hh]``. Gate order:
LSTM i, f, g, o; GRU r, z, n (n sees ``r * (h @ W_hn^T + b_hn)``, as torch computes it).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from hlo.ir import Instruction

from .builder import HloBuilder
from .ops_common import float_dtype, require
from .ops_linalg import linear
from .ops_shape import cat, select, stack

Cell = Callable[[Instruction, list[Instruction], Instruction, Instruction | None],
                tuple[Instruction, list[Instruction]]]


def _gates(b: HloBuilder, x: Instruction, n: int) -> list[Instruction]:
    """The n equal slices of the last dim."""
    size = x.shape.dims[-1] // n
    lead = [(0, d, 1) for d in x.shape.dims[:-1]]
    return [b.slice(x, [*lead, (k * size, (k + 1) * size, 1)]) for k in range(n)]


def _run(b: HloBuilder, x: Instruction, states: list[Instruction], params: Sequence[Instruction],
         has_biases: bool, num_layers: int, dropout: float, train: bool, bidirectional: bool,
         batch_first: bool, cell: Cell) -> tuple[Instruction, list[list[Instruction]]]:
    """The layers over ``x`` from the initial ``states`` (each (layers * directions, batch, hidden)):
    (the last layer's outputs, the final states per kind of state)."""
    require(x.shape.rank == 3, f"recurrent layers take (seq, batch, features) input, got {list(x.shape.dims)}")
    require(not train or dropout == 0, "recurrent dropout in training mode is not supported")
    directions = 2 if bidirectional else 1
    per = 4 if has_biases else 2
    require(len(params) == num_layers * directions * per,
            f"{len(params)} weights for {num_layers} layers x {directions} directions (projections are not "
            "supported)")
    dtype = float_dtype(x)
    x = b.convert(b.transpose(x, [1, 0, 2]) if batch_first else x, dtype)
    steps = x.shape.dims[0]
    finals: list[list[Instruction]] = [[] for _ in states]
    for layer in range(num_layers):
        outputs = []
        for direction in range(directions):
            k = layer * directions + direction
            w_ih, w_hh, *biases = params[k * per:(k + 1) * per]
            b_ih, b_hh = biases if has_biases else (None, None)
            projected = linear(b, x, w_ih, b_ih)  # every step's input projection in one dot
            state = [b.convert(select(b, s, 0, k), dtype) for s in states]
            ys: list[Instruction | None] = [None] * steps
            for t in (range(steps) if direction == 0 else reversed(range(steps))):
                ys[t], state = cell(select(b, projected, 0, t), state, w_hh, b_hh)
            outputs.append(stack(b, ys, 0))
            for kind, s in enumerate(state):
                finals[kind].append(s)
        x = cat(b, outputs, 2) if directions == 2 else outputs[0]
    return (b.transpose(x, [1, 0, 2]) if batch_first else x), finals


def lstm(b: HloBuilder, x: Instruction, hx: Sequence[Instruction], params: Sequence[Instruction],
         has_biases: bool, num_layers: int, dropout: float, train: bool, bidirectional: bool,
         batch_first: bool) -> tuple[Instruction, Instruction, Instruction]:
    def cell(xp: Instruction, state: list[Instruction], w_hh: Instruction,
             b_hh: Instruction | None) -> tuple[Instruction, list[Instruction]]:
        h, c = state
        i, f, g, o = _gates(b, b.binary("add", xp, linear(b, h, w_hh, b_hh)), 4)
        i, f, o = (b.unary("logistic", v) for v in (i, f, o))
        c = b.binary("add", b.binary("multiply", f, c), b.binary("multiply", i, b.unary("tanh", g)))
        h = b.binary("multiply", o, b.unary("tanh", c))
        return h, [h, c]

    require(len(hx) == 2, "lstm takes (h0, c0)")
    out, (hs, cs) = _run(b, x, list(hx), params, has_biases, num_layers, dropout, train, bidirectional,
                         batch_first, cell)
    return out, stack(b, hs, 0), stack(b, cs, 0)


def gru(b: HloBuilder, x: Instruction, hx: Instruction, params: Sequence[Instruction], has_biases: bool,
        num_layers: int, dropout: float, train: bool, bidirectional: bool,
        batch_first: bool) -> tuple[Instruction, Instruction]:
    def cell(xp: Instruction, state: list[Instruction], w_hh: Instruction,
             b_hh: Instruction | None) -> tuple[Instruction, list[Instruction]]:
        (h,) = state
        x_r, x_z, x_n = _gates(b, xp, 3)
        h_r, h_z, h_n = _gates(b, linear(b, h, w_hh, b_hh), 3)
        r = b.unary("logistic", b.binary("add", x_r, h_r))
        z = b.unary("logistic", b.binary("add", x_z, h_z))
        n = b.unary("tanh", b.binary("add", x_n, b.binary("multiply", r, h_n)))
        h = b.binary("add", n, b.binary("multiply", z, b.binary("subtract", h, n)))  # (1 - z) n + z h
        return h, [h]

    out, (hs,) = _run(b, x, [hx], params, has_biases, num_layers, dropout, train, bidirectional, batch_first, cell)
    return out, stack(b, hs, 0)


RULES = {
    "aten.lstm.input": lstm,
    "aten.gru.input": gru,
}
