"""ConvNeXt-Tiny (`facebook/convnext-tiny-224`'s configuration: depths 3, 3, 9, 3, widths 96..768, 7x7 depthwise
convolutions, a 4x4 stride-4 stem) image classifier with random weights, on one 224x224 fp32 image. `layers` keeps
at most that many blocks per stage.

    neuronc compile examples/convnext.py -o convnext.neff
"""

import torch
from _hf import build, depth
from transformers import ConvNextConfig, ConvNextForImageClassification


def get_model(layers: int | None = None, tiny: bool = False):
    widths = dict(hidden_sizes=[16, 32, 64, 128]) if tiny else {}
    config = ConvNextConfig(depths=[depth(d, layers) for d in (3, 3, 9, 3)], num_labels=1000, **widths)
    model = build(ConvNextForImageClassification, config)
    size = 32 if tiny else 224
    return model, (torch.randn(1, 3, size, size),)
