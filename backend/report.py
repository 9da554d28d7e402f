"""memory_plan.txt: kernels with their HBM traffic, tensors between kernels (on chip or spilled), every
on-chip buffer with its live range, layout decisions, and the peaks."""

from __future__ import annotations

from backend.emit import ProgramBuilder


def memory_plan(builder: ProgramBuilder) -> str:
    alloc = builder.alloc
    kernels = ["", "== kernels (HBM bytes each moves; on-chip copies between SBUF buffers are not HBM traffic)",
               f"{'kernel':<6} {'name':<34} {'instructions':<16} {'HBM read':>12} {'HBM written':>12}"]
    total = [0, 0]
    for k, rec in enumerate(alloc.kernels):
        read, written = builder.hbm_traffic.get(k, [0, 0])
        total[0] += read
        total[1] += written
        kernels.append(f"k{k:<5} {rec.name:<34} {f'[{rec.first_op}, {rec.last_op}]':<16} {read:>12} {written:>12}")
    kernels.append(f"{'total':<6} {'':<34} {'':<16} {total[0]:>12} {total[1]:>12}")
    tensors = [f"{'tensor':<8} {'HLO value':<28} {'dtype':<6} {'shape':<22} {'memory':<6} {'live':<12} detail"]
    for name, t in builder.program.tensors.items():
        if t.kind != "scratch":
            continue
        label = builder.scratch_labels.get(name, "")
        tensors.append(f"{name:<8} {label:<28} {t.dtype:<6} {str(list(t.shape)):<22} {'hbm':<6} {'':<12} spilled")
    for name, image in builder.images.items():
        label = builder.scratch_labels.get(name, "")
        tensors.append(f"{name:<8} {label:<28} {image.dtype:<6} {f'{image.rows}x{image.row}':<22} {'sbuf':<6} "
                       f"{f'k{image.first}..k{image.last}':<12} offset {image.offset}, {image.nbytes} B/partition, "
                       f"saves {image.saved} HBM bytes")
    text = alloc.memory_plan(tensors, builder.layout_notes)
    head, _, rest = text.partition("\n\n")
    return head + "\n" + "\n".join(kernels) + "\n\n" + rest
