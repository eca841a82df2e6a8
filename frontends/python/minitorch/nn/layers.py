"""Layers: Linear, Identity, Flatten, the activations, the losses and the transformer blocks
(GELU, LayerNorm, Embedding, Dropout, MultiheadAttention)."""

import math

from .. import _dtype as D
from .._dtype import as_device
from .._core import real_arg
from .._factory import ones, zeros
from . import functional as F
from . import init
from .module import Module
from .parameter import Parameter


class Identity(Module):
    def __init__(self, *args, **kwargs):
        super().__init__()

    def forward(self, input):
        return input


class Linear(Module):
    """y = x @ weight^T + bias, weight [out_features, in_features], bias [out_features].

    Initialised as torch: weight and bias uniform on (-1/sqrt(in), 1/sqrt(in))."""

    def __init__(self, in_features, out_features, bias=True, device=None, dtype=None):
        super().__init__()
        self.in_features = in_features
        self.out_features = out_features
        dev = as_device(device)
        self.weight = Parameter(zeros(out_features, in_features, dtype=dtype, device=dev))
        if bias:
            self.bias = Parameter(zeros(out_features, dtype=dtype, device=dev))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self):
        bound = 1.0 / math.sqrt(self.in_features) if self.in_features > 0 else 0.0
        init.uniform_(self.weight, -bound, bound)
        if self.bias is not None:
            init.uniform_(self.bias, -bound, bound)

    def forward(self, input):
        return F.linear(input, self.weight, self.bias)

    def extra_repr(self):
        return "in_features=%d, out_features=%d, bias=%s" % (self.in_features, self.out_features,
                                                              self.bias is not None)


class Flatten(Module):
    def __init__(self, start_dim=1, end_dim=-1):
        super().__init__()
        self.start_dim = start_dim
        self.end_dim = end_dim

    def forward(self, input):
        return input.flatten(self.start_dim, self.end_dim)

    def extra_repr(self):
        return "start_dim=%d, end_dim=%d" % (self.start_dim, self.end_dim)


class ReLU(Module):
    def forward(self, input):
        return F.relu(input)


class Sigmoid(Module):
    def forward(self, input):
        return F.sigmoid(input)


class Tanh(Module):
    def forward(self, input):
        return F.tanh(input)


class MSELoss(Module):
    def __init__(self, reduction="mean"):
        super().__init__()
        if reduction not in ("mean", "sum", "none"):
            raise ValueError("%s is not a valid value for reduction" % reduction)
        self.reduction = reduction

    def forward(self, input, target):
        return F.mse_loss(input, target, reduction=self.reduction)


class Softmax(Module):
    def __init__(self, dim):
        super().__init__()
        self.dim = dim

    def forward(self, input):
        return F.softmax(input, self.dim)

    def extra_repr(self):
        return "dim=%s" % self.dim


class LogSoftmax(Softmax):
    def forward(self, input):
        return F.log_softmax(input, self.dim)


class CrossEntropyLoss(Module):
    """Mean cross entropy of logits [N, C] against class indices [N]."""

    def __init__(self, weight=None, ignore_index=-100, reduction="mean", label_smoothing=0.0):
        super().__init__()
        F._only_mean("CrossEntropyLoss", reduction, weight=(weight, None),
                     ignore_index=(ignore_index, -100), label_smoothing=(label_smoothing, 0.0))
        self.reduction = reduction

    def forward(self, input, target):
        return F.cross_entropy(input, target)


class NLLLoss(Module):
    def __init__(self, weight=None, ignore_index=-100, reduction="mean"):
        super().__init__()
        F._only_mean("NLLLoss", reduction, weight=(weight, None), ignore_index=(ignore_index, -100))
        self.reduction = reduction

    def forward(self, input, target):
        return F.nll_loss(input, target)


# ------------------------------------------------------------ transformer blocks

class GELU(Module):
    """F.gelu; only approximate='tanh' exists in the C ABI (torch's default 'none' is refused)."""

    def __init__(self, approximate="tanh"):
        super().__init__()
        F.gelu(zeros(0), approximate)              # refuses 'none' (and unknown values) now
        self.approximate = approximate

    def forward(self, input):
        return F.gelu(input, self.approximate)

    def extra_repr(self):
        return "approximate=%r" % self.approximate


class LayerNorm(Module):
    """Normalises over the trailing normalized_shape dims; weight ones and bias zeros of that
    shape when elementwise_affine (bias=False drops the bias)."""

    def __init__(self, normalized_shape, eps=1e-5, elementwise_affine=True, bias=True, device=None,
                 dtype=None):
        super().__init__()
        self.normalized_shape = F._normalized_shape(normalized_shape)
        self.eps = real_arg(eps, "eps")
        self.elementwise_affine = elementwise_affine
        dev = as_device(device)
        if elementwise_affine:
            self.weight = Parameter(ones(self.normalized_shape, dtype=dtype, device=dev))
            if bias:
                self.bias = Parameter(zeros(self.normalized_shape, dtype=dtype, device=dev))
            else:
                self.register_parameter("bias", None)
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)

    def reset_parameters(self):
        if self.weight is not None:
            init.ones_(self.weight)
        if self.bias is not None:
            init.zeros_(self.bias)

    def forward(self, input):
        return F.layer_norm(input, self.normalized_shape, self.weight, self.bias, self.eps)

    def extra_repr(self):
        return "%s, eps=%s, elementwise_affine=%s" % (self.normalized_shape, self.eps,
                                                     self.elementwise_affine)


class Embedding(Module):
    """A lookup table weight [num_embeddings, embedding_dim], initialised normal(0, 1) as torch
    (mt_init_normal); forward(indices) = F.embedding(indices, weight)."""

    def __init__(self, num_embeddings, embedding_dim, padding_idx=None, max_norm=None, norm_type=2.0,
                 scale_grad_by_freq=False, sparse=False, _weight=None, _freeze=False, device=None,
                 dtype=None):
        super().__init__()
        for name, value, default in (("padding_idx", padding_idx, None), ("max_norm", max_norm, None),
                                     ("scale_grad_by_freq", scale_grad_by_freq, False),
                                     ("sparse", sparse, False)):
            if value != default:
                raise NotImplementedError("Embedding(%s=...) is not available in the C ABI (mt_embedding)"
                                          % name)
        self.num_embeddings = num_embeddings
        self.embedding_dim = embedding_dim
        self.padding_idx = None
        if _weight is None:
            self.weight = Parameter(zeros(num_embeddings, embedding_dim, dtype=dtype,
                                          device=as_device(device)), requires_grad=not _freeze)
            self.reset_parameters()
        else:
            if tuple(_weight.shape) != (num_embeddings, embedding_dim):
                raise ValueError("Shape of weight does not match num_embeddings and embedding_dim")
            self.weight = Parameter(_weight, requires_grad=not _freeze)

    def reset_parameters(self):
        init.normal_(self.weight, 0.0, 1.0)

    def forward(self, input):
        return F.embedding(input, self.weight)

    @classmethod
    def from_pretrained(cls, embeddings, freeze=True, padding_idx=None, max_norm=None, norm_type=2.0,
                        scale_grad_by_freq=False, sparse=False):
        if embeddings.ndim != 2:
            raise ValueError("Embeddings parameter is expected to be 2-dimensional")
        rows, cols = embeddings.shape
        return cls(rows, cols, padding_idx, max_norm, norm_type, scale_grad_by_freq, sparse,
                   _weight=embeddings, _freeze=freeze)

    def extra_repr(self):
        return "%d, %d" % (self.num_embeddings, self.embedding_dim)


class Dropout(Module):
    """F.dropout(input, p, self.training): the identity after eval()."""

    def __init__(self, p=0.5, inplace=False):
        super().__init__()
        if not 0.0 <= real_arg(p, "dropout probability") <= 1.0:
            raise ValueError("dropout probability has to be between 0 and 1, but got %s" % p)
        if inplace:
            raise NotImplementedError("Dropout(inplace=True) is not available: the tape cannot record an "
                                      "in-place op")
        self.p = p
        self.inplace = inplace

    def forward(self, input):
        return F.dropout(input, self.p, self.training)

    def extra_repr(self):
        return "p=%s, inplace=%s" % (self.p, self.inplace)


class MultiheadAttention(Module):
    """torch.nn.MultiheadAttention with kdim = vdim = embed_dim: in_proj_weight [3E, E] and
    in_proj_bias [3E] project query, key and value; the heads go through
    F.scaled_dot_product_attention; out_proj (a Linear) mixes them. Parameters and their
    names, initialisation, masks and the returned (output, weights) follow torch:
    attn_mask [T, S] or [B*num_heads, T, S] (uint8: nonzero is *not* allowed to attend;
    float: added), key_padding_mask [B, S] (uint8: nonzero keys are ignored; float: added),
    need_weights returns the weights averaged over heads (average_attn_weights) or per head.
    batch_first=True takes [B, T, E]; False takes [T, B, E]; unbatched [T, E] works too.
    Not available: kdim/vdim other than embed_dim, add_bias_kv, add_zero_attn."""

    def __init__(self, embed_dim, num_heads, dropout=0.0, bias=True, add_bias_kv=False, add_zero_attn=False,
                 kdim=None, vdim=None, batch_first=False, device=None, dtype=None):
        super().__init__()
        if embed_dim <= 0 or num_heads <= 0:
            raise ValueError("embed_dim and num_heads must be greater than 0, got embed_dim=%s and "
                             "num_heads=%s instead" % (embed_dim, num_heads))
        if embed_dim % num_heads:
            raise ValueError("embed_dim must be divisible by num_heads")
        for name, value in (("kdim", kdim), ("vdim", vdim)):
            if value not in (None, embed_dim):
                raise NotImplementedError("MultiheadAttention(%s != embed_dim) is not available" % name)
        if add_bias_kv or add_zero_attn:
            raise NotImplementedError("MultiheadAttention(add_bias_kv/add_zero_attn=True) is not available")
        self.embed_dim = embed_dim
        self.kdim = self.vdim = embed_dim
        self.num_heads = num_heads
        self.dropout = dropout
        self.batch_first = batch_first
        self.head_dim = embed_dim // num_heads
        dev = as_device(device)
        self.in_proj_weight = Parameter(zeros(3 * embed_dim, embed_dim, dtype=dtype, device=dev))
        if bias:
            self.in_proj_bias = Parameter(zeros(3 * embed_dim, dtype=dtype, device=dev))
        else:
            self.register_parameter("in_proj_bias", None)
        self.out_proj = Linear(embed_dim, embed_dim, bias=bias, device=device, dtype=dtype)
        self._reset_parameters()

    def _reset_parameters(self):
        init.xavier_uniform_(self.in_proj_weight)
        if self.in_proj_bias is not None:
            init.zeros_(self.in_proj_bias)
            init.zeros_(self.out_proj.bias)

    def _project(self, x, i):
        E = self.embed_dim
        w = self.in_proj_weight[i * E:(i + 1) * E]
        b = None if self.in_proj_bias is None else self.in_proj_bias[i * E:(i + 1) * E]
        return F.linear(x, w, b)

    def _heads(self, x):
        B, L, _ = x.shape
        return x.reshape(B, L, self.num_heads, self.head_dim).transpose(1, 2)     # [B, H, L, hd]

    def forward(self, query, key, value, key_padding_mask=None, need_weights=True, attn_mask=None,
                average_attn_weights=True, is_causal=False):
        if is_causal and attn_mask is None:
            raise RuntimeError("Need attn_mask if specifying the is_causal hint. You may use the "
                               "Transformer module method `generate_square_subsequent_mask` to create "
                               "this mask.")
        batched = query.ndim == 3
        if not batched:
            query, key, value = query.unsqueeze(0), key.unsqueeze(0), value.unsqueeze(0)
            if key_padding_mask is not None:
                key_padding_mask = key_padding_mask.unsqueeze(0)
        elif not self.batch_first:
            query, key, value = query.transpose(0, 1), key.transpose(0, 1), value.transpose(0, 1)
        B, T, E = query.shape
        S = key.shape[1]
        if E != self.embed_dim:
            raise ValueError("was expecting embedding dimension of %d, but got %d" % (self.embed_dim, E))
        q = self._heads(self._project(query, 0))
        k = self._heads(self._project(key, 1))
        v = self._heads(self._project(value, 2))
        mask = self._merged_mask(attn_mask, key_padding_mask, B, T, S, q)
        p = self.dropout if self.training else 0.0
        weights = None
        if need_weights:
            w = F._attention_weights(q, k, mask, False, 1.0 / math.sqrt(self.head_dim))
            if p > 0:
                w = F.dropout(w, p, True)
            out = w @ v
            weights = w.mean(1) if average_attn_weights else w
            if not batched:
                weights = weights.squeeze(0)
        else:
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p)
        out = self.out_proj(out.transpose(1, 2).reshape(B, T, E))
        if not batched:
            out = out.squeeze(0)
        elif not self.batch_first:
            out = out.transpose(0, 1)
        return out, weights

    def _merged_mask(self, attn_mask, key_padding_mask, B, T, S, like):
        """One mask for F._attention_weights / F.scaled_dot_product_attention: uint8 (nonzero
        takes part) when both given masks are uint8, else a float mask to add."""
        H = self.num_heads
        masks = []
        if attn_mask is not None:
            if attn_mask.ndim == 3:
                attn_mask = attn_mask.reshape(B, H, T, S)
            elif tuple(attn_mask.shape) != (T, S):
                raise ValueError("The shape of the 2D attn_mask is %s, but should be %s."
                                 % (list(attn_mask.shape), [T, S]))
            masks.append(attn_mask)
        if key_padding_mask is not None:
            if tuple(key_padding_mask.shape) != (B, S):
                raise ValueError("expecting key_padding_mask shape of %s, but got %s"
                                 % ((B, S), tuple(key_padding_mask.shape)))
            masks.append(key_padding_mask.reshape(B, 1, 1, S))
        if not masks:
            return None
        if all(m.dtype is D.uint8 for m in masks):
            blocked = None                           # how many masks block each position
            for m in masks:
                b = (m != 0).float()
                blocked = b if blocked is None else blocked + b
            return blocked == 0                      # nonzero: may attend
        total = None
        for m in masks:
            if m.dtype is D.uint8:
                m = zeros((), dtype=like.dtype, device=like.device).masked_fill(m != 0, float("-inf"))
            else:
                m = m.to(like.dtype)
            total = m if total is None else total + m
        return total
