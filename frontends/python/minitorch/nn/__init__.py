"""minitorch.nn: modules, parameters, functional ops and initialisers."""

from . import functional, init, utils
from .layers import (CrossEntropyLoss, Flatten, Identity, Linear, LogSoftmax, MSELoss, NLLLoss, ReLU,
                     Sigmoid, Softmax, Tanh)
from .module import Module, ModuleList, Sequential
from .parameter import Parameter

__all__ = ["Module", "Sequential", "ModuleList", "Parameter", "Linear", "Identity", "Flatten",
           "ReLU", "Sigmoid", "Tanh", "Softmax", "LogSoftmax", "MSELoss", "CrossEntropyLoss",
           "NLLLoss", "functional", "init", "utils"]
