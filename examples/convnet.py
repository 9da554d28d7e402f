"""A small convolutional classifier: two 3x3 conv + ReLU + max-pool stages and a linear head (32x32 RGB)."""

import torch
from torch import nn


class ConvNet(nn.Module):
    def __init__(self, channels: tuple[int, int] = (16, 32), classes: int = 10):
        super().__init__()
        self.conv1 = nn.Conv2d(3, channels[0], 3, padding=1)
        self.conv2 = nn.Conv2d(channels[0], channels[1], 3, padding=1)
        self.pool = nn.MaxPool2d(2)
        self.head = nn.Linear(channels[1] * 8 * 8, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.pool(torch.relu(self.conv1(x)))
        x = self.pool(torch.relu(self.conv2(x)))
        return self.head(torch.flatten(x, 1))


def get_model():
    """Return the model and example inputs, as `neuronc compile` expects."""
    torch.manual_seed(0)
    return ConvNet().eval(), (torch.randn(4, 3, 32, 32),)
