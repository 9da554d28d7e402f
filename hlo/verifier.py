"""The HLO verifier: structural invariants, then every instruction's shape against shape inference.

Each failure raises VerificationError naming the computation, the instruction (``inst.where()``: name, opcode,
PyTorch op and source line when known) and exactly what does not match.
"""

from __future__ import annotations

from hlo.errors import VerificationError
from hlo.ir import HLO_DTYPES, Computation, Instruction, Module, Shape, numpy_dtype
from hlo.shape_inference import ShapeInferenceError, fmt, infer_shape, same_shape


def _element_types(shape: Shape) -> list[str]:
    return [t for s in shape.tuple_shapes for t in _element_types(s)] if shape.is_tuple else [shape.dtype]


class _Verifier:
    def __init__(self, module: Module):
        self.module = module
        self.comp: Computation | None = None

    def fail(self, message: str, inst: Instruction | None = None) -> VerificationError:
        where = f"computation %{self.comp.name}" if self.comp is not None else f"module {self.module.name}"
        if inst is not None:
            where += f": {inst.where()}"
        return VerificationError(f"{where}: {message}")

    def run(self) -> None:
        module = self.module
        if module.entry is None or module.entry not in module.computations:
            raise self.fail("the entry computation is missing from the module's computations")
        self.check_unique_names()
        for comp in module.computations:
            self.comp = comp
            self.check_structure(comp)
        self.comp = None
        self.check_call_graph()
        for comp in module.computations:
            self.comp = comp
            for inst in comp.instructions:
                self.check_instruction(inst)

    def check_unique_names(self) -> None:
        comps: set[str] = set()
        for comp in self.module.computations:
            if comp.name in comps:
                raise self.fail(f"two computations are named %{comp.name}")
            comps.add(comp.name)
        owner: dict[str, str] = {}
        for comp in self.module.computations:
            for inst in comp.instructions:
                if inst.name in owner:
                    self.comp = comp
                    raise self.fail(f"the name %{inst.name} is also used in computation %{owner[inst.name]}",
                                    inst)
                owner[inst.name] = comp.name

    def check_structure(self, comp: Computation) -> None:
        """ROOT, parameter numbers, operands defined earlier in this computation (so no cycles)."""
        if not comp.instructions:
            raise self.fail("the computation has no instructions")
        if comp.root is None or comp.root not in comp.instructions:
            raise self.fail("the ROOT is not an instruction of the computation")
        seen: set[int] = set()
        position = {inst.uid: i for i, inst in enumerate(comp.instructions)}
        for inst in comp.instructions:
            if inst.uid in seen:
                raise self.fail("the instruction appears twice in the computation", inst)
            for k, op in enumerate(inst.operands):
                if op.uid not in seen:
                    raise self.fail(self.describe_bad_operand(comp, inst, k, op, position), inst)
            seen.add(inst.uid)
        self.check_parameters(comp)

    def describe_bad_operand(self, comp: Computation, inst: Instruction, k: int, op: Instruction,
                             position: dict[int, int]) -> str:
        if op.uid not in position:
            owner = next((c.name for c in self.module.computations if op in c.instructions), None)
            where = f"computation %{owner}" if owner else "no computation of the module"
            return f"operand {k} %{op.name} belongs to {where}, not to %{comp.name}"
        cycle = _find_cycle(inst)
        if cycle:
            return "cycle: " + " -> ".join(f"%{i.name}" for i in cycle)
        return f"operand {k} %{op.name} is defined after its use"

    def check_parameters(self, comp: Computation) -> None:
        params = [i for i in comp.instructions if i.opcode == "parameter"]
        numbers = sorted(p.parameter_number for p in params if p.parameter_number is not None)
        for p in params:
            if p.parameter_number is None or p.operands:
                raise self.fail("a parameter needs a parameter number and no operands", p)
        if numbers != list(range(len(params))):
            raise self.fail(f"parameter numbers are {numbers}, expected 0..{len(params) - 1} once each")
        for inst in comp.instructions:
            if inst.opcode != "parameter" and inst.parameter_number is not None:
                raise self.fail("only parameters have a parameter number", inst)

    def check_call_graph(self) -> None:
        """Called computations belong to the module and no computation calls itself, even indirectly."""
        comps = self.module.computations
        state: dict[int, str] = {}

        def visit(comp: Computation, path: list[str]) -> None:
            state[id(comp)] = "open"
            self.comp = comp
            for inst in comp.instructions:
                for callee in inst.called_computations():
                    if callee not in comps:
                        raise self.fail(f"calls computation %{callee.name}, which is not in the module", inst)
                    if state.get(id(callee)) == "open":
                        cycle = " -> ".join(f"%{n}" for n in path + [comp.name, callee.name])
                        raise self.fail(f"recursive call: {cycle}", inst)
                    if id(callee) not in state:
                        visit(callee, path + [comp.name])
                        self.comp = comp
            state[id(comp)] = "done"

        for comp in comps:
            if id(comp) not in state:
                visit(comp, [])

    def check_instruction(self, inst: Instruction) -> None:
        unknown = [t for t in _element_types(inst.shape) if t not in HLO_DTYPES]
        if unknown:
            raise self.fail(f"unknown element type {unknown[0]} (known: {', '.join(HLO_DTYPES)})", inst)
        try:
            inferred = infer_shape(inst.opcode, [o.shape for o in inst.operands], inst.attrs, inst.shape)
        except ShapeInferenceError as exc:
            raise self.fail(str(exc), inst) from None
        if not same_shape(inferred, inst.shape):
            raise self.fail(f"the shape is declared {fmt(inst.shape)} but the operands give {fmt(inferred)}",
                            inst)
        if not inst.shape.is_tuple and inst.shape.layout is not None and \
                sorted(inst.shape.layout) != list(range(inst.shape.rank)):
            raise self.fail(f"layout {list(inst.shape.layout)} is not a permutation of the dimensions", inst)
        check = _EXTRA_CHECKS.get(inst.opcode)
        if check is not None:
            check(self, inst)

    def check_constant(self, inst: Instruction) -> None:
        lit = inst.literal
        if lit is None:
            raise self.fail("the constant has no data (was its constants side file loaded?)", inst)
        if inst.shape.is_tuple:
            raise self.fail("tuple-shaped constants are not supported", inst)
        want = numpy_dtype(inst.shape.dtype)
        if lit.dtype != want or tuple(lit.shape) != inst.shape.dims:
            raise self.fail(f"the literal is {lit.dtype}{list(lit.shape)} but the shape is {fmt(inst.shape)} "
                            f"({want})", inst)

    def check_fusion(self, inst: Instruction) -> None:
        self.check_callee_params(inst, inst.attrs["calls"], [o.shape for o in inst.operands])

    def check_call(self, inst: Instruction) -> None:
        self.check_callee_params(inst, inst.attrs["to_apply"], [o.shape for o in inst.operands])

    def check_reducer(self, inst: Instruction) -> None:
        """reduce / reduce-window / scatter: to_apply maps (accumulators..., values...) scalars to the
        accumulators (one scalar, or a tuple of them)."""
        n = (len(inst.operands) - 1) // 2 if inst.opcode == "scatter" else len(inst.operands) // 2
        scalars = [Shape(o.shape.dtype) for o in inst.operands[:n]]
        callee = inst.attrs["to_apply"]
        self.check_callee_params(inst, callee, scalars * 2)
        want = scalars[0] if n == 1 else Shape.tuple_of(scalars)
        root = callee.root.shape
        if not same_shape(root, want):
            raise self.fail(f"to_apply=%{callee.name} returns {fmt(root)}, expected {fmt(want)}", inst)

    def check_callee_params(self, inst: Instruction, callee: Computation, shapes: list) -> None:
        params = callee.parameters
        if len(params) != len(shapes):
            raise self.fail(f"%{callee.name} has {len(params)} parameters but is called with {len(shapes)} "
                            "values", inst)
        for p, shape in zip(params, shapes, strict=True):
            if not same_shape(p.shape, shape):
                raise self.fail(f"parameter({p.parameter_number}) %{p.name} of %{callee.name} is {fmt(p.shape)}"
                                f" but receives {fmt(shape)}", inst)


_EXTRA_CHECKS = {
    "constant": _Verifier.check_constant,
    "fusion": _Verifier.check_fusion,
    "call": _Verifier.check_call,
    "reduce": _Verifier.check_reducer,
    "reduce-window": _Verifier.check_reducer,
    "scatter": _Verifier.check_reducer,
}


def _find_cycle(start: Instruction) -> list[Instruction]:
    """A path start -> ... -> start through operands, or [] when there is none."""
    stack: list[tuple[Instruction, list[Instruction]]] = [(op, [start, op]) for op in start.operands]
    seen: set[int] = set()
    while stack:
        node, path = stack.pop()
        if node is start:
            return path
        if node.uid in seen:
            continue
        seen.add(node.uid)
        stack.extend((op, path + [op]) for op in node.operands)
    return []


def verify_module(module: Module) -> None:
    """Raise VerificationError at the first ill-formed part of ``module``; return None when it is valid."""
    _Verifier(module).run()
