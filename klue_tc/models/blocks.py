"""Sub-layers of the encoder blocks. Each takes (x, padding) where `padding` is True at pads.

Padding is honoured everywhere, so appending pads never changes a real token's output:
attention masks padded keys, BLSTMs run over packed real tokens only, convolutions see
zeros at pads.
"""

from __future__ import annotations

from contextlib import nullcontext

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from klue_tc.core.config import FFNActivation

# On CPU, SDPA's flash kernel is slower than its math path for titles this short (docs/speed.md).
_CPU_ATTENTION = [SDPBackend.MATH]


class Sublayer(nn.Module):
    """What a block runs after attention, behind a residual and a LayerNorm: `forward(x, padding)`
    returns x's shape and leaves real tokens unchanged when pads are appended."""

    def forward(self, x: torch.Tensor, padding: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def output_layers(self) -> list[nn.Linear]:
        """The linear layers that end the branch; they start at zero (encoder.zero_init_residual)
        so that each block begins by passing its input on. Default: the last nn.Linear inside."""
        return [m for m in self.modules() if isinstance(m, nn.Linear)][-1:]


def alibi_slopes(heads: int) -> torch.Tensor:
    """ALiBi's per-head slopes (Press et al. 2022): a geometric series from 2^(-8/heads) to 2^-8."""
    return torch.tensor([2.0 ** (-8.0 * (h + 1) / heads) for h in range(heads)])


def rotary_angles(length: int, head_dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """RoPE's (cos, sin) tables (Su et al. 2021), each (L, head_dim): pair i of a head's features
    turns by position * 10000^(-2i/head_dim); features i and i + head_dim/2 form the pair."""
    frequency = 10000.0 ** (-torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)
    angles = torch.arange(length, dtype=torch.float32)[:, None] * frequency
    angles = torch.cat([angles, angles], dim=-1)
    return angles.cos(), angles.sin()


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Turn each feature pair of x (..., L, head_dim) by its position's angle."""
    first, second = x.chunk(2, dim=-1)
    return x * cos + torch.cat([-second, first], dim=-1) * sin


class SelfAttention(Sublayer):
    """Multi-head self-attention through torch's fused `scaled_dot_product_attention`.

    `dropout` acts on the attention probabilities; the original study had none (0.0). With
    `alibi`, each head's scores are lowered in proportion to the distance between query and key
    (|i - j|, both directions: an encoder), its slope fixed per head, in place of positions added to
    the embeddings. With `rotary`, queries and keys are turned by their positions' angles (RoPE), so
    a score depends on the two tokens and their offset only. Neither depends on the title's length,
    so appended pads still change nothing."""

    def __init__(self, d_model: int, heads: int, dropout: float = 0.0, alibi: bool = False, rotary_positions: int = 0):
        """`rotary_positions` > 0: RoPE, its angle tables built once for that many positions."""
        super().__init__()
        self.heads, self.dropout = heads, dropout
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.out = nn.Linear(d_model, d_model)
        self.register_buffer("slopes", alibi_slopes(heads)[:, None, None] if alibi else None, persistent=False)
        cos, sin = rotary_angles(rotary_positions, d_model // heads) if rotary_positions else (None, None)
        self.register_buffer("rotary_cos", cos, persistent=False)
        self.register_buffer("rotary_sin", sin, persistent=False)

    def forward(self, x: torch.Tensor, padding: torch.Tensor) -> torch.Tensor:
        batch, length, d_model = x.shape
        q, k, v = self.qkv(x).view(batch, length, 3, self.heads, d_model // self.heads).permute(2, 0, 3, 1, 4)
        if self.rotary_cos is not None:
            cos, sin = self.rotary_cos[:length].to(q.dtype), self.rotary_sin[:length].to(q.dtype)
            q, k = rotate(q, cos, sin), rotate(k, cos, sin)
        keep = ~padding[:, None, None, :]  # (B, 1, 1, L): True where a key may be attended
        mask = keep if self.slopes is None else self.distance_bias(length, q.dtype).masked_fill(~keep, float("-inf"))
        with sdpa_kernel(_CPU_ATTENTION) if x.is_cpu else nullcontext():  # on a GPU torch picks the kernel
            y = F.scaled_dot_product_attention(
                q, k, v, attn_mask=mask, dropout_p=self.dropout if self.training else 0.0
            )
        return self.out(y.transpose(1, 2).reshape(batch, length, d_model))

    def distance_bias(self, length: int, dtype: torch.dtype) -> torch.Tensor:
        """(heads, L, L): -slope * |i - j|."""
        positions = torch.arange(length, device=self.slopes.device)
        return (-self.slopes * (positions[None, :] - positions[:, None]).abs()).to(dtype)

    def output_layers(self) -> list[nn.Linear]:
        return [self.out]


class SwiGLU(nn.Module):
    """value * SiLU(gate), the two halves of the last dimension."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        value, gate = x.chunk(2, dim=-1)
        return value * F.silu(gate)


class FeedForward(Sublayer):
    """Linear-ReLU-Linear, as in the original (no dropout inside: the residual's dropout follows);
    or with GELU; or SwiGLU, whose gated hidden layer is 2/3 of `ffn_dim` wide so that its three
    matrices hold as many weights as the two of the others."""

    def __init__(self, d_model: int, ffn_dim: int, activation: FFNActivation = FFNActivation.relu):
        super().__init__()
        if activation == FFNActivation.swiglu:
            hidden = 2 * ffn_dim // 3
            self.net = nn.Sequential(nn.Linear(d_model, 2 * hidden), SwiGLU(), nn.Linear(hidden, d_model))
        else:
            act = nn.GELU() if activation == FFNActivation.gelu else nn.ReLU()
            self.net = nn.Sequential(nn.Linear(d_model, ffn_dim), act, nn.Linear(ffn_dim, d_model))

    def forward(self, x: torch.Tensor, padding: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def output_layers(self) -> list[nn.Linear]:
        return [self.net[-1]]


def packed_lstm(lstm: nn.LSTM, x: torch.Tensor, padding: torch.Tensor):
    """Run `lstm` over the real tokens only; returns (outputs padded with zeros, h_n)."""
    lengths = (~padding).sum(1).cpu()
    if x.device.type == "cpu" and _reversible(lstm) and 2 * padding.numel() <= 3 * int(lengths.sum()):
        return _bidirectional_by_reversal(lstm, x, padding, lengths)
    packed = pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
    out, (h_n, _) = lstm(packed)
    out, _ = pad_packed_sequence(out, batch_first=True, total_length=x.size(1))
    return out, h_n


def _reversible(lstm: nn.LSTM) -> bool:
    return lstm.bidirectional and lstm.num_layers == 1 and lstm.bias and lstm.batch_first and not lstm.proj_size


def _bidirectional_by_reversal(lstm: nn.LSTM, x: torch.Tensor, padding: torch.Tensor, lengths: torch.Tensor):
    """The packed run's result, from two plain (unpacked) LSTM calls: forward over x (trailing
    pads come after every real token, so they cannot reach one), backward over each title
    reversed within its own length. On CPU, plain calls use oneDNN's LSTM kernels, which packed
    sequences cannot (about 1.5x faster); with length-bucketed batches the pads they also run
    over are few, hence the padding threshold in `packed_lstm`."""
    positions = torch.arange(x.size(1), device=x.device)[None]
    flipped = lengths.to(x.device)[:, None] - 1 - positions
    index = torch.where(flipped >= 0, flipped, positions)[..., None]  # an involution: reverses real tokens
    h0 = x.new_zeros(1, x.size(0), lstm.hidden_size)

    def direction(inputs: torch.Tensor, suffix: str) -> torch.Tensor:
        weights = [getattr(lstm, f"{name}_l0{suffix}") for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")]
        return torch.lstm(inputs, (h0, h0), weights, True, 1, 0.0, lstm.training, False, True)[0]

    forward = direction(x, "")
    backward = direction(x.gather(1, index.expand_as(x)), "_reverse")
    backward = backward.gather(1, index.expand_as(backward))
    rows = torch.arange(x.size(0), device=x.device)
    h_n = torch.stack([forward[rows, lengths.to(x.device) - 1], backward[:, 0]])
    out = torch.cat([forward, backward], dim=-1).masked_fill(padding[..., None], 0.0)
    return out, h_n


class BLSTMSublayer(Sublayer):
    """TRANS-BLSTM's BLSTM: hidden d per direction, 2d out, projected back to d."""

    def __init__(self, d_model: int):
        super().__init__()
        self.lstm = nn.LSTM(d_model, d_model, batch_first=True, bidirectional=True)
        self.proj = nn.Linear(2 * d_model, d_model)

    def forward(self, x: torch.Tensor, padding: torch.Tensor) -> torch.Tensor:
        out, _ = packed_lstm(self.lstm, x, padding)
        return self.proj(out)

    def output_layers(self) -> list[nn.Linear]:
        return [self.proj]


class FFNWithBLSTM(Sublayer):
    """The paper's TRANS-BLSTM: BLSTM output added beside the FFN output, one residual."""

    def __init__(self, d_model: int, ffn_dim: int, activation: FFNActivation = FFNActivation.relu):
        super().__init__()
        self.ffn = FeedForward(d_model, ffn_dim, activation)
        self.blstm = BLSTMSublayer(d_model)

    def forward(self, x: torch.Tensor, padding: torch.Tensor) -> torch.Tensor:
        return self.ffn(x, padding) + self.blstm(x, padding)

    def output_layers(self) -> list[nn.Linear]:
        return self.ffn.output_layers() + self.blstm.output_layers()


class ConvSublayer(Sublayer):
    """Conv1d (same padding) over the sequence; pads are zeroed first so they add nothing."""

    def __init__(self, d_model: int, channels: int, kernel: int, dropout: float):
        super().__init__()
        self.conv = nn.Conv1d(d_model, channels, kernel, padding=kernel // 2)
        self.proj = nn.Linear(channels, d_model)
        self.drop = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, padding: torch.Tensor) -> torch.Tensor:
        x = x.masked_fill(padding[..., None], 0.0)
        y = torch.relu(self.conv(x.transpose(1, 2))).transpose(1, 2)
        return self.proj(self.drop(y))

    def output_layers(self) -> list[nn.Linear]:
        return [self.proj]


class Residual(nn.Module):
    """x + sublayer(x) with LayerNorm after (post-LN, the original) or before (pre-LN)."""

    def __init__(self, sublayer: nn.Module, d_model: int, dropout: float, pre_ln: bool):
        super().__init__()
        self.sublayer, self.pre_ln = sublayer, pre_ln
        self.norm, self.drop = nn.LayerNorm(d_model), nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, padding: torch.Tensor) -> torch.Tensor:
        if self.pre_ln:
            return x + self.drop(self.sublayer(self.norm(x), padding))
        return self.norm(x + self.drop(self.sublayer(x, padding)))
