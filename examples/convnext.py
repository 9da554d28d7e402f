"""ConvNeXt-Tiny (`facebook/convnext-tiny-224`'s configuration: depths 3, 3, 9, 3, widths 96..768, 7x7 depthwise
convolutions, 4x4 stride-4 stem) image classifier with random weights, on one 224x224 fp32 image.
`NEURONC_EXAMPLE_LAYERS=N` keeps at most N blocks per stage.

    neuronc compile examples/convnext.py -o convnext.neff
"""

import torch
from _hf import build, layers
from transformers import ConvNextConfig, ConvNextForImageClassification


def get_model():
    depths = [min(d, layers(d)) for d in (3, 3, 9, 3)]
    config = ConvNextConfig(depths=depths, num_labels=1000)
    model = build(ConvNextForImageClassification, config)
    pixels = torch.randn(1, 3, 224, 224)
    return model, (pixels,)
