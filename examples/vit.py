"""ViT-Base/16 (`google/vit-base-patch16-224`'s configuration: 224x224 images, 16x16 patches, d 768, 12 layers)
classifier with random weights, on a batch of one image in fp32 NCHW as an image processor gives it.

    neuronc compile examples/vit.py -o vit.neff
"""

import torch
from _hf import build, layers
from transformers import ViTConfig, ViTForImageClassification


def get_model():
    config = ViTConfig(num_hidden_layers=layers(12), num_labels=1000)
    model = build(ViTForImageClassification, config)
    pixels = torch.randn(1, 3, 224, 224)
    return model, (pixels,)
