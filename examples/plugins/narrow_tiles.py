"""Example plug-in tile policy "narrow": GEMMs with few output columns use 256-wide moving tiles and
three rotating stationary buffers; every other kernel keeps the default tiling.

    neuronc compile examples/mlp.py --plugin examples/plugins/narrow_tiles.py --tile-policy narrow

A tile policy sees each dot or convolution kernel's shape (backend.registry.KernelShape: kind, dims, dtype)
and returns the options that kernel is tiled with; only the fields of backend.registry.TILE_FIELDS may
change, within their bounds.
"""

from dataclasses import replace

from backend.registry import register_tile_policy


@register_tile_policy("narrow")
def narrow(shape, options):
    if shape.kind == "dot":
        _, m, k, n = shape.dims
        if n <= 1024:
            return replace(options, moving_tile=256, stationary_buffers=3)
    return options
