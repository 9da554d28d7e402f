"""ResNet-50 (`microsoft/resnet-50`'s configuration: stages of 3, 4, 6, 3 bottleneck blocks) image classifier with
random weights (batch norm with random running statistics), on one 224x224 fp32 image. `layers` keeps at most that
many blocks per stage.

    neuronc compile examples/resnet50.py -o resnet50.neff
"""

import torch
from _hf import build, depth
from transformers import ResNetConfig, ResNetForImageClassification


def get_model(layers: int | None = None, tiny: bool = False):
    widths = dict(embedding_size=16, hidden_sizes=[32, 64, 128, 256]) if tiny else \
        dict(embedding_size=64, hidden_sizes=[256, 512, 1024, 2048])
    config = ResNetConfig(depths=[depth(d, layers) for d in (3, 4, 6, 3)], layer_type="bottleneck",
                          num_labels=1000, **widths)
    model = build(ResNetForImageClassification, config)
    size = 32 if tiny else 224
    return model, (torch.randn(1, 3, size, size),)
