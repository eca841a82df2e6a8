"""minitorch.nn: modules, parameters, functional ops and initialisers."""

from . import functional, init, utils
from .layers import (GELU, CrossEntropyLoss, Dropout, Embedding, Flatten, Identity, LayerNorm, Linear,
                     LogSoftmax, MSELoss, MultiheadAttention, NLLLoss, ReLU, Sigmoid, Softmax, Tanh)
from .cnn import AvgPool2d, BatchNorm1d, BatchNorm2d, Conv2d, MaxPool2d
from .module import Module, ModuleList, Sequential
from .parameter import Parameter

__all__ = ["Module", "Sequential", "ModuleList", "Parameter", "Linear", "Identity", "Flatten",
           "ReLU", "Sigmoid", "Tanh", "Softmax", "LogSoftmax", "MSELoss", "CrossEntropyLoss",
           "NLLLoss", "GELU", "LayerNorm", "Embedding", "Dropout", "MultiheadAttention", "functional",
           "init", "utils", "Conv2d", "MaxPool2d", "AvgPool2d", "BatchNorm1d", "BatchNorm2d"]
