"""The bundled example: a 3-layer MLP classifier on flattened 28x28 images."""

import torch
from torch import nn


class MLP(nn.Module):
    def __init__(self, in_features: int = 784, hidden: tuple[int, ...] = (512, 256), classes: int = 10):
        super().__init__()
        self.fc1 = nn.Linear(in_features, hidden[0])
        self.fc2 = nn.Linear(hidden[0], hidden[1])
        self.fc3 = nn.Linear(hidden[1], classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.nn.functional.gelu(self.fc1(x))
        x = torch.relu(self.fc2(x))
        return self.fc3(x)


def get_model():
    """Return the model and example inputs, as `neuronc compile` expects."""
    torch.manual_seed(0)
    return MLP().eval(), (torch.randn(64, 784),)
