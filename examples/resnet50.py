"""ResNet-50 (`microsoft/resnet-50`'s configuration: stages of 3, 4, 6, 3 bottleneck blocks) image classifier
with random weights, on one 224x224 fp32 image. `NEURONC_EXAMPLE_LAYERS=N` keeps at most N blocks per stage.

    neuronc compile examples/resnet50.py -o resnet50.neff
"""

import torch
from _hf import build, layers
from transformers import ResNetConfig, ResNetForImageClassification


def get_model():
    depths = [min(d, layers(d)) for d in (3, 4, 6, 3)]
    config = ResNetConfig(depths=depths, layer_type="bottleneck", hidden_sizes=[256, 512, 1024, 2048],
                          num_labels=1000)
    model = build(ResNetForImageClassification, config)
    _randomize_batch_norm(model)
    pixels = torch.randn(1, 3, 224, 224)
    return model, (pixels,)


def _randomize_batch_norm(model: torch.nn.Module) -> None:
    """Running statistics as a trained network has them (a fresh one has mean 0, var 1: BN would be a no-op)."""
    for m in model.modules():
        if isinstance(m, torch.nn.BatchNorm2d):
            m.running_mean.uniform_(-0.1, 0.1)
            m.running_var.uniform_(0.5, 1.5)
