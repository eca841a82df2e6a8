"""minitorch.nn.functional: the ops of minitorch.nn as functions, named as in torch.

Adding an op of the C ABI here is one line, e.g. `softmax = _op("softmax")` once
Tensor has it.
"""

import math
import numbers
import operator

from .. import _dtype as D
from .._lib import lib
from .._core import _cast, _floating, _new, real_arg, result_type, tensor_args
from .._tensor import Tensor

__all__ = ["linear", "relu", "sigmoid", "tanh", "softmax", "log_softmax", "mse_loss",
           "cross_entropy", "nll_loss", "gelu", "layer_norm", "embedding", "dropout",
           "scaled_dot_product_attention", "self_attention"]


@tensor_args("input", "weight", "bias?")
def linear(input, weight, bias=None):
    """input [..., in] @ weight[out, in]^T + bias[out] (mt_linear)."""
    dt = result_type(input, weight)
    return _new(lib.mt_linear, _cast(input, dt), _cast(weight, dt),
                None if bias is None else _cast(bias, dt))


@tensor_args("input")
def relu(input):
    return input.relu()


@tensor_args("input")
def sigmoid(input):
    return input.sigmoid()


@tensor_args("input")
def tanh(input):
    return input.tanh()


@tensor_args("input")
def softmax(input, dim):
    return input.softmax(dim)


@tensor_args("input")
def log_softmax(input, dim):
    return input.log_softmax(dim)


def _targets(target, like):
    from .. import _dtype as D
    if target.dtype.is_floating_point:
        raise TypeError("class targets must be an integer tensor (class probabilities are not "
                        "available: mt_cross_entropy takes indices)")
    return target if target.dtype is D.int64 else target.long()


def _only_mean(name, reduction, **unsupported):
    if reduction != "mean":
        raise NotImplementedError("%s(reduction=%r) is not available: the C ABI computes the mean "
                                  "only" % (name, reduction))
    for k, (value, default) in unsupported.items():
        if value != default:
            raise NotImplementedError("%s(%s=...) is not available in the C ABI" % (name, k))


@tensor_args("input", "target", "weight?")
def cross_entropy(input, target, weight=None, ignore_index=-100, reduction="mean", label_smoothing=0.0):
    """Mean over N of -log softmax(input)[n, target[n]]; input [N, C], target [N] integer
    (mt_cross_entropy). weight, ignore_index, label_smoothing and other reductions are not
    in the C ABI."""
    _only_mean("cross_entropy", reduction, weight=(weight, None), ignore_index=(ignore_index, -100),
               label_smoothing=(label_smoothing, 0.0))
    return _new(lib.mt_cross_entropy, input, _targets(target, input))


@tensor_args("input", "target", "weight?")
def nll_loss(input, target, weight=None, ignore_index=-100, reduction="mean"):
    """Mean over N of -input[n, target[n]] (input holds log-probabilities; mt_nll_loss)."""
    _only_mean("nll_loss", reduction, weight=(weight, None), ignore_index=(ignore_index, -100))
    return _new(lib.mt_nll_loss, input, _targets(target, input))


@tensor_args("input", "target")
def mse_loss(input, target, reduction="mean"):
    """Mean squared error. 'mean' is mt_mse_loss (same shapes); 'sum' and 'none' are
    (input - target) ** 2 summed or elementwise."""
    if not isinstance(input, Tensor) or not isinstance(target, Tensor):
        raise TypeError("mse_loss expects tensors")
    if reduction == "mean":
        dt = result_type(input, target)
        return _new(lib.mt_mse_loss, _cast(input, dt), _cast(target, dt))
    if reduction == "sum":
        return ((input - target) ** 2).sum()
    if reduction == "none":
        return (input - target) ** 2
    raise ValueError("%s is not a valid value for reduction" % reduction)


# ------------------------------------------------------------ transformer blocks

@tensor_args("input")
def gelu(input, approximate="tanh"):
    """0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) (mt_gelu).

    Only the tanh approximation exists in the C ABI, so approximate defaults to 'tanh'
    (torch's default is 'none', the exact erf form, which is refused here)."""
    if approximate == "none":
        raise NotImplementedError("gelu(approximate='none') (the exact erf form) is not available: "
                                  "the C ABI has only the tanh approximation (mt_gelu); pass "
                                  "approximate='tanh'")
    if approximate != "tanh":
        raise ValueError("approximate argument must be either none or tanh.")
    return _new(lib.mt_gelu, _floating(input))


def _normalized_shape(normalized_shape):
    if isinstance(normalized_shape, numbers.Integral):
        return (operator.index(normalized_shape),)
    return tuple(operator.index(s) for s in normalized_shape)


@tensor_args("input", "weight?", "bias?")
def layer_norm(input, normalized_shape, weight=None, bias=None, eps=1e-5):
    """(x - mean) / sqrt(var + eps) * weight + bias over the trailing normalized_shape dims,
    the variance biased as torch's (mt_layer_norm). Several trailing dims are flattened into
    one for the library and restored after."""
    ns = _normalized_shape(normalized_shape)
    shape = tuple(input.shape)
    if not ns or len(ns) > len(shape) or shape[len(shape) - len(ns):] != ns:
        raise ValueError("Given normalized_shape=%s, expected input with shape [*, %s], but got input "
                         "of size %s" % (list(ns), ", ".join(str(n) for n in ns), list(shape)))
    for name, p in (("weight", weight), ("bias", bias)):
        if p is not None and tuple(p.shape) != ns:
            raise ValueError("layer_norm: %s must have shape %s, got %s" % (name, list(ns), list(p.shape)))
    x = _floating(input)
    if len(ns) == 1:
        return _new(lib.mt_layer_norm, x, weight, bias, float(eps))
    n = 1
    for d in ns:
        n *= d
    flat = x.reshape(shape[:len(shape) - len(ns)] + (n,))
    out = _new(lib.mt_layer_norm, flat, None if weight is None else weight.reshape(n),
               None if bias is None else bias.reshape(n), float(eps))
    return out.reshape(shape)


@tensor_args("input", "weight")
def embedding(input, weight, padding_idx=None, max_norm=None, norm_type=2.0, scale_grad_by_freq=False,
              sparse=False):
    """Rows of weight [V, D] at the integer indices input (any shape): out [*input.shape, D]
    (mt_embedding). Repeated indices accumulate their gradients; an index outside [0, V)
    raises ValueError naming the position."""
    for name, value, default in (("padding_idx", padding_idx, None), ("max_norm", max_norm, None),
                                 ("scale_grad_by_freq", scale_grad_by_freq, False),
                                 ("sparse", sparse, False)):
        if value != default:
            raise NotImplementedError("embedding(%s=...) is not available in the C ABI (mt_embedding)"
                                      % name)
    if not isinstance(input, Tensor):
        from .._factory import tensor
        input = tensor(input, dtype=D.int64, device=weight.device)
    if input.dtype.is_floating_point:
        raise TypeError("Expected tensor for argument #1 'indices' to have one of the following scalar "
                        "types: Long, Int; but got %s instead" % input.dtype.name)
    if input.dtype is not D.int64:
        input = _cast(input, D.int64)
    return _new(lib.mt_embedding, weight, input)


@tensor_args("input")
def dropout(input, p=0.5, training=True, inplace=False):
    """Zeroes each element with probability p and scales the rest by 1/(1-p) when training;
    the identity otherwise (mt_dropout). Each call draws one seed from the default generator
    (minitorch.manual_seed makes the masks reproducible)."""
    p = float(real_arg(p, "dropout probability"))
    if not 0.0 <= p <= 1.0:
        raise ValueError("dropout probability has to be between 0 and 1, but got %s" % p)
    if inplace:
        raise NotImplementedError("dropout(inplace=True) is not available: the tape cannot record an "
                                  "in-place op")
    if not training or p == 0.0:
        return input
    if p == 1.0:
        return input * 0.0                       # every element dropped (as torch)
    from .._factory import default_generator
    return _new(lib.mt_dropout, input, p, default_generator.next_seed())


def _attention_weights(query, key, attn_mask, is_causal, scale):
    """softmax(q k^T * scale + masks) in the ops of Tensor, for what mt_scaled_dot_product_attention
    does not take (an explicit mask, a causal mask when T != S, a non-positive scale)."""
    scores = (query @ key.transpose(-2, -1)) * scale
    T, S = query.shape[-2], key.shape[-2]
    if is_causal:
        from .._factory import tensor
        mask = tensor([[1 if j > i else 0 for j in range(S)] for i in range(T)], dtype=D.uint8,
                      device=scores.device)            # torch's top-left causal alignment
        scores = scores.masked_fill(mask, float("-inf"))
    if attn_mask is not None:
        if attn_mask.dtype is D.uint8:               # a boolean mask: nonzero takes part
            scores = scores.masked_fill(attn_mask == 0, float("-inf"))
        else:
            scores = scores + attn_mask
    return scores.softmax(-1)


@tensor_args("qkv")
def self_attention(qkv, num_heads, is_causal=False):
    """Multi-head self-attention of one packed projection qkv [B, T, 3 D] (columns q, then k,
    then v; head h at columns h Dh of each, Dh = D / num_heads): [B, T, D], each head's
    scaled_dot_product_attention at its columns. The same as splitting the heads with
    reshape(B, T, 3, H, Dh).permute(2, 0, 3, 1, 4), attending, and merging them back with
    permute(0, 2, 1, 3).reshape(B, T, D); mt_self_attention, one fused op that reads the heads in
    place on CUDA in float32 with Dh 16 or 32."""
    return _new(lib.mt_self_attention, qkv, int(num_heads), 1 if is_causal else 0)


@tensor_args("query", "key", "value", "attn_mask?")
def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False,
                                 scale=None, enable_gqa=False):
    """softmax(q k^T * scale (+ mask)) v for q [..., T, D], k [..., S, D], v [..., S, Dv], as
    torch.nn.functional.scaled_dot_product_attention; scale None is 1/sqrt(D).

    Without attn_mask and dropout (and, for is_causal, with T == S) this is one call of
    mt_scaled_dot_product_attention(_scaled); otherwise it is composed of recorded ops
    (matmul, masked_fill, softmax, dropout). attn_mask is a uint8 mask (nonzero: the query
    may attend to the key) or a float mask added to the scores; is_causal masks key j for
    query i when j > i (torch's top-left alignment). dropout_p applies whenever it is > 0,
    as in torch."""
    if enable_gqa:
        raise NotImplementedError("scaled_dot_product_attention(enable_gqa=True) is not available")
    if attn_mask is not None and is_causal:
        raise ValueError("scaled_dot_product_attention: pass either attn_mask or is_causal=True, not both")
    if not 0.0 <= dropout_p <= 1.0:
        raise ValueError("dropout probability has to be between 0 and 1, but got %s" % dropout_p)
    for name, x in (("query", query), ("key", key), ("value", value)):
        if x.ndim < 2:
            raise ValueError("scaled_dot_product_attention: %s must have at least 2 dims ([..., L, E]), "
                             "got shape %s" % (name, list(x.shape)))
    T, S = query.shape[-2], key.shape[-2]
    if attn_mask is None and dropout_p == 0 and (not is_causal or T == S) and (scale is None or scale > 0):
        if scale is None:
            return _new(lib.mt_scaled_dot_product_attention, query, key, value, 1 if is_causal else 0)
        return _new(lib.mt_scaled_dot_product_attention_scaled, query, key, value, 1 if is_causal else 0,
                    float(scale))
    s = 1.0 / math.sqrt(query.shape[-1]) if scale is None else float(scale)
    w = _attention_weights(query, key, attn_mask, is_causal, s)
    if dropout_p > 0:
        w = dropout(w, dropout_p, True)
    return w @ value


# ------------------------------------------------------------ convolutional networks

__all__ += ["conv2d", "max_pool2d", "avg_pool2d", "batch_norm"]


def _pair(value, name):
    """An int or a pair of ints as a pair (torch's _pair)."""
    if isinstance(value, numbers.Integral):
        v = operator.index(value)
        return v, v
    v = tuple(operator.index(e) for e in value)
    if len(v) != 2:
        raise ValueError("%s must be an int or a pair of ints, got %r" % (name, value))
    return v


def _square(value, name, fn):
    """The one size of a square window (the C ABI's pools take one kernel and one stride)."""
    h, w = _pair(value, name)
    if h != w:
        raise NotImplementedError("%s(%s=%r): only square windows and equal strides are available in the C "
                                  "ABI (mt_%s)" % (fn, name, value, fn))
    return h


def _as_batch(x, call):
    """call(x) for a 4-D x; a 3-D (unbatched [C, H, W]) x goes through as a batch of one."""
    if x.ndim != 3:
        return call(x)
    out = call(x.reshape((1,) + tuple(x.shape)))
    return out.reshape(tuple(out.shape[1:]))


@tensor_args("input", "weight", "bias?")
def conv2d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """Cross-correlation of input [N, C, H, W] (or [C, H, W]) with weight [K, C, R, S] plus
    bias [K], as torch.nn.functional.conv2d (mt_conv2d_ex). padding is an int, a pair, 'valid'
    or 'same' (stride 1 and an even total padding per axis); groups must be 1."""
    if groups != 1:
        raise NotImplementedError("conv2d(groups=%r) is not available: the C ABI has groups=1 only" % (groups,))
    sh, sw = _pair(stride, "stride")
    dh, dw = _pair(dilation, "dilation")
    if isinstance(padding, str):
        if padding == "valid":
            ph = pw = 0
        elif padding == "same":
            if (sh, sw) != (1, 1):
                raise ValueError("padding='same' is not supported for strided convolutions")
            th, tw = dh * (weight.shape[2] - 1), dw * (weight.shape[3] - 1)
            if th % 2 or tw % 2:
                raise NotImplementedError("conv2d(padding='same') needs an even total padding per axis here "
                                          "(the C ABI pads both sides equally)")
            ph, pw = th // 2, tw // 2
        else:
            raise ValueError("Invalid padding string %r, should be one of {'valid', 'same'}" % padding)
    else:
        ph, pw = _pair(padding, "padding")
    dt = result_type(input, weight)
    x, w = _cast(_floating(input), dt), _cast(weight, dt)
    b = None if bias is None else _cast(bias, dt)
    return _as_batch(x, lambda x4: _new(lib.mt_conv2d_ex, x4, w, b, sh, sw, ph, pw, dh, dw))


def _pool(fn, input, kernel_size, stride, padding, ceil_mode, **unsupported):
    if padding != 0 or ceil_mode:
        raise NotImplementedError("%s(padding=%r, ceil_mode=%r) is not available: the C ABI pools without "
                                  "padding and rounds down (mt_%s)" % (fn, padding, ceil_mode, fn))
    for k, (value, default) in unsupported.items():
        if value != default:
            raise NotImplementedError("%s(%s=%r) is not available in the C ABI (mt_%s)" % (fn, k, value, fn))
    k = _square(kernel_size, "kernel_size", fn)
    s = k if stride is None else _square(stride, "stride", fn)
    return _as_batch(_floating(input), lambda x4: _new(getattr(lib, "mt_" + fn), x4, k, s))


@tensor_args("input")
def max_pool2d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False):
    """Max over kernel_size windows every stride (default: kernel_size) pixels, no padding
    (mt_max_pool2d); windows may overlap, and the gradient goes to each window's first maximum."""
    return _pool("max_pool2d", input, kernel_size, stride, padding, ceil_mode, dilation=(dilation, 1),
                 return_indices=(return_indices, False))


@tensor_args("input")
def avg_pool2d(input, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True,
               divisor_override=None):
    """Mean over kernel_size windows every stride (default: kernel_size) pixels, no padding
    (mt_avg_pool2d)."""
    return _pool("avg_pool2d", input, kernel_size, stride, padding, ceil_mode,
                 divisor_override=(divisor_override, None))


@tensor_args("input", "running_mean?", "running_var?", "weight?", "bias?")
def batch_norm(input, running_mean, running_var, weight=None, bias=None, training=False, momentum=0.1, eps=1e-5):
    """Batch normalization over dim 1 of input [N, C] or [N, C, H, W], as
    torch.nn.functional.batch_norm (mt_batch_norm). training: batch statistics, and the
    running buffers (when given) are updated in place (the variance unbiased); otherwise the
    running statistics normalize. momentum=None (a cumulative average) is not available."""
    if momentum is None:
        raise NotImplementedError("batch_norm(momentum=None) (a cumulative moving average) is not available "
                                  "in the C ABI")
    x = _floating(input)
    if x.ndim not in (2, 4):
        raise ValueError("batch_norm: expected a 2-D [N, C] or 4-D [N, C, H, W] input, got %d-D"
                         % input.ndim)
    return _new(lib.mt_batch_norm, x, weight, bias, running_mean, running_var, 1 if training else 0,
                float(momentum), float(eps))


# ------------------------------------------------------------ fusions

__all__ += ["bias_act", "add_layer_norm", "dropout_add"]

_ACTIVATIONS = {None: 0, "identity": 0, "relu": 1, "gelu": 2}   # mt_activation


@tensor_args("input", "bias")
def bias_act(input, bias, activation="identity"):
    """activation(input + bias), bias [n] over the last dim of input [..., n], in one pass
    (mt_bias_act). activation is 'identity' (or None), 'relu' or 'gelu' (the tanh form, as
    gelu(approximate='tanh')). linear(x, weight) followed by bias_act(., bias, act) computes
    act(linear(x, weight, bias)) with one pass over the output less, forward and backward."""
    if activation not in _ACTIVATIONS:
        raise ValueError("bias_act: activation must be one of 'identity', 'relu', 'gelu', got %r" % (activation,))
    x = _floating(input)
    dt = result_type(x, bias)
    return _new(lib.mt_bias_act, _cast(x, dt), _cast(bias, dt), _ACTIVATIONS[activation])


@tensor_args("input", "residual", "weight?", "bias?")
def add_layer_norm(input, residual, normalized_shape, weight=None, bias=None, eps=1e-5):
    """(s, layer_norm(s, normalized_shape, weight, bias, eps)) with s = input + residual (same
    shapes), both differentiable, from one pass over input and residual (mt_add_layer_norm):
    the residual add of a pre-LN transformer block and the LayerNorm that follows it."""
    from ctypes import byref, c_void_p
    x, r = _floating(input), _floating(residual)
    if tuple(x.shape) != tuple(r.shape):
        raise ValueError("add_layer_norm: input and residual must have one shape, got %s and %s"
                         % (list(x.shape), list(r.shape)))
    ns, shape = _normalized_shape(normalized_shape), tuple(x.shape)
    if not ns or shape[-len(ns):] != ns:
        raise ValueError("add_layer_norm: normalized_shape %s must be the trailing dims of the input's shape %s"
                         % (list(ns), list(shape)))
    dt = result_type(x, r)
    n = 1
    for d in ns:
        n *= d
    flat = shape[:len(shape) - len(ns)] + (n,)
    s, y = c_void_p(), c_void_p()
    lib.mt_add_layer_norm(byref(s), byref(y), _cast(x, dt).reshape(flat), _cast(r, dt).reshape(flat),
                          None if weight is None else weight.reshape(n),
                          None if bias is None else bias.reshape(n), float(eps))
    return Tensor._from_handle(s.value).reshape(shape), Tensor._from_handle(y.value).reshape(shape)


@tensor_args("input", "residual")
def dropout_add(input, residual, p=0.5, training=True):
    """residual + dropout(input, p, training) in one pass (mt_dropout_add): the same mask and
    the same bits as the composition for the same seed. One seed is drawn from the default
    generator per call in training, as dropout does."""
    p = float(real_arg(p, "dropout probability"))
    if not 0.0 <= p <= 1.0:
        raise ValueError("dropout probability has to be between 0 and 1, but got %s" % p)
    if not training or p == 0.0 or p == 1.0:
        return residual + dropout(input, p, training)
    from .._factory import default_generator
    dt = result_type(input, residual)
    return _new(lib.mt_dropout_add, _cast(_floating(input), dt), _cast(_floating(residual), dt), p,
                default_generator.next_seed())
