"""docs/spec.md section 1 in float64 NumPy, and random problems to check it on.

Written from SPEC.md, independently of the library's own C++ reference: the
number formats are decoded here from their bit layouts, and the softmax is
the formula of the SPEC, token by token.

Problems are built so that a wrong read shows: every KV row that no active
column names is NaN (so are row and page padding), inactive columns point at
NaN rows, -1 or past the pool, and outputs are poisoned (NaN) before a call.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import numpy as np

HEAD_DIM = 512
SWA = 128
FP8_NAN = 0x7F
BF16_NAN = 0x7FC0


def fp8_table() -> np.ndarray:
    """float64 value of every E4M3 (fn) byte: bias 7, subnormals, 0x7F/0xFF NaN."""
    table = np.empty(256, dtype=np.float64)
    for byte in range(256):
        sign = -1.0 if byte & 0x80 else 1.0
        exponent, mantissa = (byte >> 3) & 0xF, byte & 0x7
        if exponent == 0xF and mantissa == 0x7:
            table[byte] = np.nan
        elif exponent == 0:
            table[byte] = sign * mantissa / 8.0 * 2.0**-6
        else:
            table[byte] = sign * (1.0 + mantissa / 8.0) * 2.0 ** (exponent - 7)
    return table


FP8_VALUES = fp8_table()


def decode(bits: np.ndarray) -> np.ndarray:
    """float64 values of FP8 (uint8) or BF16 (uint16) bit arrays."""
    if bits.dtype == np.uint8:
        return FP8_VALUES[bits]
    assert bits.dtype == np.uint16
    return (bits.astype(np.uint32) << 16).view(np.float32).astype(np.float64)


def bf16_bits(values: np.ndarray) -> np.ndarray:
    """Round-to-nearest-even float32 -> BF16 bits (finite inputs)."""
    u = np.asarray(values, dtype=np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def random_elements(rng: np.random.Generator, shape, dtype: str) -> np.ndarray:
    """Finite, mostly nonzero FP8 bytes (|x| <= 7.5) or BF16 bits (|x| ~ 1)."""
    if dtype == "fp8":
        sign = rng.integers(0, 2, shape) << 7
        exponent = rng.integers(0, 10, shape) << 3
        mantissa = rng.integers(0, 8, shape)
        return (sign | exponent | mantissa).astype(np.uint8)
    return bf16_bits(rng.standard_normal(shape).astype(np.float32) * 1.5)


def nan_bits(dtype: str):
    return (np.uint8, FP8_NAN) if dtype == "fp8" else (np.uint16, BF16_NAN)


@dataclass
class Problem:
    """One call's inputs as NumPy bit arrays, plus their logical meaning."""

    dtype: str  # "fp8" or "bf16"
    q: np.ndarray  # [T, H, 512] or [B, q_len, H, 512]
    swa_kv: np.ndarray  # pool in `layout`
    compressed_kv: Optional[np.ndarray]
    indices: np.ndarray  # int32 [T, W]
    layout: str  # "rows", "pages", "NHD" or "HND"
    lens: Optional[np.ndarray] = None
    seq_lens: Optional[np.ndarray] = None
    cum_seq_lens_q: Optional[np.ndarray] = None
    q_len: Optional[int] = None
    max_q_len: Optional[int] = None
    sinks: Optional[np.ndarray] = None
    bmm1_scale: float = 1.0
    bmm2_scale: float = 1.0
    seed: int = 0
    notes: dict = field(default_factory=dict)

    @property
    def tokens(self) -> int:
        return int(np.prod(self.q.shape[:-2]))

    @property
    def heads(self) -> int:
        return self.q.shape[-2]

    def out_like(self) -> np.ndarray:
        """A poisoned BF16 output of q's shape."""
        return np.full(self.q.shape, BF16_NAN, dtype=np.uint16)

    def lse_like(self) -> np.ndarray:
        return np.full(self.q.shape[:-1], np.nan, dtype=np.float32)

    def page_layout(self) -> str:
        return "HND" if self.layout == "HND" else "NHD"


def pool_rows(pool: Optional[np.ndarray], layout: str) -> np.ndarray:
    """A pool's rows as [rows, 512] bits (row r = page r / page_size, slot r % page_size)."""
    if pool is None:
        return np.zeros((0, HEAD_DIM), dtype=np.uint8)
    if layout == "NHD":
        pool = pool[:, :, 0]
    elif layout == "HND":
        pool = pool[:, 0]
    return pool.reshape(-1, HEAD_DIM)


def make_pool(rng, pages, page_size, dtype, layout, good_fraction=0.7, row_pad=0, page_pad=0):
    """(pool view in `layout`, rows usable by active columns, NaN rows)."""
    element, nan = nan_bits(dtype)
    storage = np.full((pages, page_size + page_pad, HEAD_DIM + row_pad), nan, dtype=element)
    rows = pages * page_size
    good = rng.permutation(rows)[: max(1, int(rows * good_fraction))]
    poison = np.setdiff1d(np.arange(rows), good)
    data = storage[:, :page_size, :HEAD_DIM]  # a view: writes land in storage
    data[good // page_size, good % page_size] = random_elements(rng, (len(good), HEAD_DIM), dtype)
    view = {
        "rows": lambda: data[:, 0],
        "pages": lambda: data,
        "NHD": lambda: data[:, :, None],
        "HND": lambda: data[:, None],
    }[layout]()
    return view, np.sort(good), poison


def make_indices(rng, tokens, width, lens, positions, out_of_range, swa, compressed):
    """int32 [T, W]: active columns name usable rows (some -1 or past the pool);
    inactive ones name -1, NaN rows or rows past the pool, so a stray read shows."""
    column = np.arange(width)[None, :]
    eligible = np.ones((tokens, width), dtype=bool)
    if lens is not None:
        eligible &= column < lens[:, None]
    if positions is not None:
        eligible &= (column >= SWA) | (column < np.minimum(SWA, positions[:, None] + 1))
    indices = np.empty((tokens, width), dtype=np.int64)
    draw = rng.random((tokens, width))
    for pool, columns in ((swa, slice(0, SWA)), (compressed, slice(SWA, width))):
        if pool is None:
            continue
        good, poison, rows = pool
        shape = indices[:, columns].shape
        picked_good = good[rng.integers(0, len(good), shape)]
        past = rows + rng.integers(0, 1000, shape)
        nan_row = poison[rng.integers(0, len(poison), shape)] if len(poison) else np.full(shape, -1)
        d = draw[:, columns]
        active = np.where(d < 0.1, -1, np.where((d < 0.13) & out_of_range, past, picked_good))
        inactive = np.choose((d * 3).astype(int), [np.full(shape, -1), past, nan_row])
        indices[:, columns] = np.where(eligible[:, columns], active, inactive)
    return indices.astype(np.int32)


def make_problem(
    rng: np.random.Generator,
    *,
    tokens: int = 6,
    heads: int = 16,
    width: int = 256,
    dtype: str = "fp8",
    layout: str = "pages",
    page_size: int = 4,
    pages: int = 24,
    row_pad: int = 0,
    page_pad: int = 0,
    lens: bool = True,
    sinks: bool = True,
    seq_lens: Optional[str] = None,  # None, "uniform" or "varlen"
    q_len: int = 1,
    q4d: bool = False,
    out_of_range: bool = True,
    empty_token: bool = True,
) -> Problem:
    if layout == "rows":
        page_size = 1
    swa, swa_good, swa_poison = make_pool(rng, pages, page_size, dtype, layout, row_pad=row_pad, page_pad=page_pad)
    compressed = comp_good = comp_poison = None
    if width > SWA:
        compressed, comp_good, comp_poison = make_pool(
            rng, pages + 3, page_size, dtype, layout, row_pad=row_pad, page_pad=page_pad
        )

    # Requests: uniform q_len (T = B * q_len) or random lengths 1..16.
    seq, cum, max_len, positions = None, None, None, None
    if seq_lens == "uniform":
        assert tokens % q_len == 0
        per_request = [q_len] * (tokens // q_len)
    elif seq_lens == "varlen":
        per_request = []
        while sum(per_request) < tokens:
            per_request.append(int(min(rng.integers(1, 6), tokens - sum(per_request))))
    if seq_lens:
        # KV lengths from q_len up to past the window, so the window cuts some tokens.
        seq = np.array([rng.integers(n, n + 200) for n in per_request], dtype=np.int32)
        positions = np.concatenate([s - n + np.arange(n) for s, n in zip(seq, per_request)])
        if seq_lens == "varlen":
            cum = np.concatenate([[0], np.cumsum(per_request)]).astype(np.int32)
            max_len = int(max(per_request))

    token_lens = rng.integers(1, width + 1, tokens).astype(np.int32)
    if empty_token and tokens > 1:
        token_lens[rng.integers(0, tokens)] = 0
    indices = make_indices(
        rng,
        tokens,
        width,
        token_lens if lens else None,
        positions,
        out_of_range,
        (swa_good, swa_poison, pages * page_size),
        (comp_good, comp_poison, (pages + 3) * page_size) if width > SWA else None,
    )

    q = random_elements(rng, (tokens, heads, HEAD_DIM), dtype)
    if q4d:
        assert seq_lens != "varlen" and tokens % q_len == 0
        q = q.reshape(tokens // q_len, q_len, heads, HEAD_DIM)
    return Problem(
        dtype=dtype,
        q=q,
        swa_kv=swa,
        compressed_kv=compressed,
        indices=indices,
        layout=layout,
        lens=token_lens if lens else None,
        seq_lens=seq,
        cum_seq_lens_q=cum,
        q_len=q_len if seq_lens == "uniform" else None,
        max_q_len=max_len,
        sinks=(rng.uniform(-3, 3, heads).astype(np.float32) if sinks else None),
        # float32 values: the API's scales are float32.
        bmm1_scale=float(np.float32(rng.uniform(0.01, 0.03) if dtype == "fp8" else rng.uniform(0.03, 0.08))),
        bmm2_scale=float(np.float32(rng.uniform(0.5, 2.0))),
    )


def token_positions(p: Problem) -> Optional[np.ndarray]:
    """Position of every token in its request's KV sequence (SPEC: seq_lens[b] - q_len_b + i)."""
    if p.seq_lens is None:
        return None
    if p.cum_seq_lens_q is not None:
        positions = np.full(p.tokens, -(10**9), dtype=np.int64)  # tokens past the last request: no SWA column
        for b in range(len(p.seq_lens)):
            begin, end = p.cum_seq_lens_q[b], p.cum_seq_lens_q[b + 1]
            positions[begin:end] = p.seq_lens[b] - (end - begin) + np.arange(end - begin)
        return positions
    q_len = p.q_len or (p.q.shape[1] if p.q.ndim == 4 else p.tokens // len(p.seq_lens))
    t = np.arange(p.tokens)
    return p.seq_lens[t // q_len].astype(np.int64) - q_len + t % q_len


def sink_lse(lse: np.ndarray, sinks: Optional[np.ndarray], sink_term: str) -> np.ndarray:
    """lse [T, H] of a call with sink_term "in_output_and_lse": log(sum_c exp(s_c) + exp(sink_h)), the sink
    for a token without an active column (docs/spec.md, section 1, "The sink term"); lse as it is else."""
    if sink_term != "in_output_and_lse" or sinks is None:
        return lse
    return np.logaddexp(lse, sinks.astype(np.float64)[None, :])


def reference(p: Problem, bmm1_scale=None, bmm2_scale=None, sink_term="in_output"):
    """(out [T, H, 512] float64, lse [T, H] float64, out-of-range count) per docs/spec.md section 1;
    sink_term as the call's ("none": the sinks ignored)."""
    sinks = None if sink_term == "none" else p.sinks
    bmm1 = p.bmm1_scale if bmm1_scale is None else bmm1_scale
    bmm2 = p.bmm2_scale if bmm2_scale is None else bmm2_scale
    T, H = p.tokens, p.heads
    q = decode(p.q.reshape(T, H, HEAD_DIM))
    pools = (pool_rows(p.swa_kv, p.layout), pool_rows(p.compressed_kv, p.layout))
    positions = token_positions(p)
    out = np.zeros((T, H, HEAD_DIM))
    lse = np.full((T, H), -np.inf)
    out_of_range = 0
    for t in range(T):
        rows = []
        for c in range(p.indices.shape[1]):
            index = int(p.indices[t, c])
            if (p.lens is not None and c >= p.lens[t]) or index < 0:
                continue
            if c < SWA and positions is not None and c >= min(SWA, positions[t] + 1):
                continue
            pool = pools[0] if c < SWA else pools[1]
            if index >= len(pool):
                out_of_range += 1
                continue
            rows.append(pool[index])
        if not rows:
            continue  # out = 0, lse = -inf, with or without a sink
        kv = decode(np.stack(rows))  # [n, 512]
        scores = bmm1 * (q[t] @ kv.T)  # [H, n]
        m = scores.max(axis=1, keepdims=True)  # max(m, sink) gives the same ratio; this avoids inf - inf
        weights = np.exp(scores - m)
        sink = sinks.astype(np.float64)[:, None] if sinks is not None else np.full((H, 1), -np.inf)
        denominator = weights.sum(axis=1, keepdims=True) + np.exp(sink - m)
        out[t] = bmm2 * (weights @ kv) / denominator
        lse[t] = m[:, 0] + np.log(weights.sum(axis=1))
    return out, sink_lse(lse, sinks, sink_term), out_of_range


def assert_matches_exactly_rounded(out_bits: np.ndarray, ref: np.ndarray, seed) -> None:
    """The CPU backend rounds a float64 result to BF16 once: within half a BF16 ulp."""
    got = decode(np.ascontiguousarray(out_bits).view(np.uint16)).reshape(ref.shape)
    assert not np.isnan(got).any(), f"seed={seed}: NaN in the output (a poisoned element was read or left)"
    tolerance = 2.0**-8 * np.abs(ref) + 1e-37
    bad = np.abs(got - ref) > tolerance
    assert not bad.any(), (
        f"seed={seed}: {bad.sum()} elements differ, first at {np.argwhere(bad)[0]}: "
        f"got {got[bad][0]}, expected {ref[bad][0]}"
    )


def assert_close_l2(out_bits: np.ndarray, ref: np.ndarray, seed, limit=3e-3) -> None:
    """GPU accuracy (DESIGN.md): relative L2 error <= 3e-3, no NaN, exact zeros where ref is 0."""
    got = decode(np.ascontiguousarray(out_bits).view(np.uint16)).reshape(ref.shape)
    assert not np.isnan(got).any(), f"seed={seed}: NaN in the output"
    empty = np.all(ref == 0, axis=-1)
    assert np.all(got[empty] == 0), f"seed={seed}: tokens with no active column must be exact zeros"
    error = np.linalg.norm(got - ref) / max(np.linalg.norm(ref), 1e-30)
    assert error <= limit, f"seed={seed}: relative L2 error {error:.3e} > {limit}"
