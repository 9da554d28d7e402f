"""ViT-Base/16 (`google/vit-base-patch16-224`'s configuration: 224x224 images, 16x16 patches, d 768, 12 layers)
classifier with random weights, on one image in fp32 NCHW as an image processor gives it.

    neuronc compile examples/vit.py -o vit.neff
"""

import torch
from _hf import build, depth
from transformers import ViTConfig, ViTForImageClassification


def get_model(layers: int | None = None, tiny: bool = False):
    size = dict(hidden_size=64, num_attention_heads=4, intermediate_size=256, image_size=32) if tiny else {}
    config = ViTConfig(num_hidden_layers=depth(12, layers), num_labels=1000, **size)
    model = build(ViTForImageClassification, config)
    return model, (torch.randn(1, 3, config.image_size, config.image_size),)
