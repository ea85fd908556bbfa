"""docs/spec.md section 2 in float64 NumPy, and random packed problems to check it on.

Written from SPEC.md independently of the library's C++ reference: a row is
decoded here byte by byte from the pool storage (7 tiles of 64 E4M3 bytes,
tile k scaled by 2^(scale byte k - 127), then 64 little-endian BF16 values;
the scale bytes of slot j at page + page_size * 576 + j * 8), and the softmax
is docs/spec.md section 1's with bmm1 = softmax_scale, bmm2 = 1, token by token.

Poisoning: every byte that no active column should read is 0xFF, NaN as E4M3,
as BF16 (0xFFFF) and as UE8M0, so a stray read shows in the output. That is
every row that no active column names, each slot's padding scale byte, the
gap between pages and the index padding columns; inactive columns name such
rows, -1 or rows past the pool.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np

from dsv4_reference import BF16_NAN, FP8_VALUES, bf16_bits, decode

ROW_BYTES, DATA_BYTES, FP8_DIMS, TILE = 584, 576, 448, 64
POISON = 0xFF


def round16(n: int) -> int:
    return (n + 15) // 16 * 16


@dataclass
class Pool:
    """A pool's storage [pages, page_stride] bytes and the array handed to the API."""

    storage: np.ndarray
    page_size: int
    four_d: bool = False

    @property
    def pages(self) -> int:
        return self.storage.shape[0]

    @property
    def rows(self) -> int:
        return self.pages * self.page_size

    def array(self) -> np.ndarray:
        """[pages, page_size, 584] (or [..., 1, 584]): a view of the storage, page stride kept."""
        n = self.page_size * ROW_BYTES
        view = self.storage[:, :n].reshape(self.pages, self.page_size, ROW_BYTES)
        assert np.shares_memory(view, self.storage) and view.strides[0] == self.storage.shape[1]
        return view[:, :, None] if self.four_d else view

    def data_bytes(self, row: int) -> np.ndarray:
        page, slot = divmod(row, self.page_size)
        return self.storage[page, slot * DATA_BYTES : (slot + 1) * DATA_BYTES]

    def scale_bytes(self, row: int) -> np.ndarray:
        page, slot = divmod(row, self.page_size)
        begin = self.page_size * DATA_BYTES + slot * 8
        return self.storage[page, begin : begin + 8]

    def decode_row(self, row: int) -> np.ndarray:
        """float64 [512] per docs/spec.md section 2 (scale byte 7 is padding, never read)."""
        data, scales = self.data_bytes(row), self.scale_bytes(row)
        fp8 = FP8_VALUES[data[:FP8_DIMS]] * np.repeat(np.exp2(scales[:7].astype(np.float64) - 127), TILE)
        bf16 = decode(data[FP8_DIMS:].copy().view("<u2").astype(np.uint16))
        return np.concatenate([fp8, bf16])


def make_pool(rng, pages, page_size, *, extra_stride=0, four_d=False) -> Pool:
    """An all-poison pool; page stride = page_size * 584 rounded up to 16, plus extra_stride."""
    stride = round16(page_size * ROW_BYTES) + extra_stride
    return Pool(np.full((pages, stride), POISON, np.uint8), page_size, four_d)


def fill_row(rng, pool: Pool, row: int, levels: np.ndarray, extreme_fraction: float) -> None:
    """A finite row: all finite E4M3 codes, tile scale bytes near `levels` (8 group levels)."""
    codes = rng.integers(0, 256, FP8_DIMS).astype(np.uint8)
    codes[(codes & 0x7F) == 0x7F] ^= 0x01  # 0x7F / 0xFF are NaN: use 0x7E / 0xFE instead
    scales = np.clip(levels[:7] + rng.integers(-1, 2, 7), 0, 254).astype(np.uint8)
    extreme = rng.random(7) < extreme_fraction
    scales[extreme] = rng.choice([0, 2, 15, 150, 160], extreme.sum())
    # BF16 dims: N(0, 1) at the magnitude of a typical E4M3 code of the level.
    bf16 = bf16_bits(rng.standard_normal(64) * 32.0 * 2.0 ** (int(levels[7]) - 127))
    pool.data_bytes(row)[:FP8_DIMS] = codes
    pool.data_bytes(row)[FP8_DIMS:] = bf16.astype("<u2").view(np.uint8)
    pool.scale_bytes(row)[:7] = scales  # byte 7 stays poison


@dataclass
class Segment:
    pool: Pool
    indices: np.ndarray  # int32 [T, W] (a column slice of a padded array when W % 4 != 0)
    lens: Optional[np.ndarray]  # int32 [T]


@dataclass
class PackedProblem:
    q: np.ndarray  # BF16 bits uint16 [T, H, 512]
    swa: Segment
    extra: Optional[Segment]
    softmax_scale: float
    sinks: Optional[np.ndarray]

    @property
    def tokens(self) -> int:
        return self.q.shape[0]

    @property
    def heads(self) -> int:
        return self.q.shape[1]

    def out_like(self) -> np.ndarray:
        return np.full(self.q.shape, BF16_NAN, np.uint16)

    def lse_like(self) -> np.ndarray:
        return np.full(self.q.shape[:2], np.nan, np.float32)

    def kwargs(self) -> dict:
        """Keyword arguments of sparse_decode.dsv4_decode_packed (NumPy), outputs excluded."""
        extra = self.extra
        return dict(
            q=self.q,
            swa_cache=self.swa.pool.array(),
            swa_indices=self.swa.indices,
            swa_lens=self.swa.lens,
            extra_cache=extra.pool.array() if extra else None,
            extra_indices=extra.indices if extra else None,
            extra_lens=extra.lens if extra else None,
            softmax_scale=self.softmax_scale,
            sinks=self.sinks,
        )


def active(segment: Segment, t: int, c: int) -> bool:
    """Column c of token t is a candidate (before the index range check)."""
    return (segment.lens is None or c < segment.lens[t]) and segment.indices[t, c] >= 0


def swa_indices(rng, tokens, width, pool: Pool) -> np.ndarray:
    """Each token's window: consecutive positions through a random block table (crossing pages)."""
    ps = pool.page_size
    out = np.empty((tokens, width), np.int64)
    for t in range(tokens):
        positions = (int(rng.integers(0, ps)) + np.arange(width)) % pool.rows  # a ring, as in a serving engine
        out[t] = rng.permutation(pool.pages)[positions // ps] * ps + positions % ps
    return out


def make_segment(rng, tokens, width, pool: Pool, *, kind, lens, holes, out_of_range) -> Segment:
    rows = pool.rows
    if kind == "swa":
        wanted = swa_indices(rng, tokens, width, pool)
    else:
        wanted = np.stack([rng.choice(rows, width, replace=width > rows) for _ in range(tokens)])
    draw = rng.random((tokens, width))
    indices = np.where(draw < holes, -1, wanted)
    past = rows + rng.integers(0, 1000, (tokens, width))
    indices = np.where((draw >= holes) & (draw < holes + out_of_range), past, indices)
    token_lens = None
    if lens:
        token_lens = rng.integers(width // 2, width + 1, tokens).astype(np.int32)
    # Index rows padded to a multiple of 4 columns (the library's stride rule).
    storage = np.full((tokens, (width + 3) // 4 * 4), -1, np.int32)
    storage[:, :width] = indices
    return Segment(pool, storage[:, :width], token_lens)


def finish(rng, p: PackedProblem, *, scale_range=(107, 137), extreme_fraction=0.0) -> None:
    """Fills the rows that active columns name; points inactive and padding columns at poison
    rows (or -1, or past the pool); sets softmax_scale."""
    norms = []
    for segment in (s for s in (p.swa, p.extra) if s is not None):
        pool, levels, width = segment.pool, rng.integers(*scale_range, 8), segment.indices.shape[1]
        used = sorted(
            {
                int(segment.indices[t, c])
                for t in range(p.tokens)
                for c in range(width)
                if active(segment, t, c) and segment.indices[t, c] < pool.rows
            }
        )
        for row in used:
            fill_row(rng, pool, row, levels, extreme_fraction)
        norms += [np.linalg.norm(pool.decode_row(row)) for row in used]
        poison = np.setdiff1d(np.arange(pool.rows), used)
        if segment.lens is not None:
            for t in range(p.tokens):
                for c in range(max(int(segment.lens[t]), 0), width):
                    choice = rng.integers(0, 3)
                    if choice == 0 and len(poison):
                        segment.indices[t, c] = poison[rng.integers(0, len(poison))]
                    elif choice == 1:
                        segment.indices[t, c] = pool.rows + int(rng.integers(0, 50))
                    else:
                        segment.indices[t, c] = -1
        padded = segment.indices.base
        if padded is not None and padded.shape[1] > width and len(poison):
            padded[:, width:] = poison[rng.integers(0, len(poison), padded[:, width:].shape)]
    # softmax_scale = 1 / median row norm: scores ~ N(0, 1), neither uniform nor one-hot.
    p.softmax_scale = float(np.float32(1.0 / np.median(norms))) if norms else 0.05


def make_packed_problem(
    rng: np.random.Generator,
    *,
    tokens: int = 5,
    heads: int = 16,
    swa_width: int = 128,
    extra_width: Optional[int] = 256,
    page_size: int = 64,
    extra_page_size: Optional[int] = None,
    swa_pages: Optional[int] = None,
    extra_pages: Optional[int] = None,
    extra_stride: int = 0,
    four_d: bool = False,
    swa_lens: bool = True,
    extra_lens: bool = True,
    q_len: int = 1,
    sinks: bool = True,
    holes: float = 0.08,
    out_of_range: float = 0.03,
    empty_token: bool = True,
    extreme_fraction: float = 0.0,
) -> PackedProblem:
    """A random problem; pools hold ~3x the rows that the indices can name, so poison rows exist."""
    extra_page_size = extra_page_size or page_size
    swa_pages = swa_pages or max(4, -(-3 * tokens * swa_width // page_size))
    swa_pool = make_pool(rng, swa_pages, page_size, extra_stride=extra_stride, four_d=four_d)
    swa = make_segment(
        rng, tokens, swa_width, swa_pool, kind="swa", lens=swa_lens, holes=holes, out_of_range=out_of_range
    )
    extra = None
    if extra_width:
        extra_pages = extra_pages or max(4, -(-3 * extra_width // extra_page_size))
        extra_pool = make_pool(rng, extra_pages, extra_page_size, extra_stride=extra_stride, four_d=four_d)
        extra = make_segment(
            rng, tokens, extra_width, extra_pool, kind="extra", lens=extra_lens, holes=holes, out_of_range=out_of_range
        )
    segments = [s for s in (swa, extra) if s is not None]
    assert tokens % q_len == 0
    for segment in segments:  # one length per request (FlashMLA's topk_length is [b])
        if segment.lens is not None:
            segment.lens[:] = np.repeat(segment.lens[::q_len], q_len)
    if empty_token and tokens > q_len:  # a request with no active column in either segment
        first = int(rng.integers(0, tokens // q_len)) * q_len
        request = slice(first, first + q_len)
        for segment in segments:
            if segment.lens is not None:
                segment.lens[request] = 0
            else:
                segment.indices[request] = -1
    q = bf16_bits(rng.standard_normal((tokens, heads, 512)).astype(np.float32))
    sink_values = rng.uniform(-3, 3, heads).astype(np.float32) if sinks else None
    p = PackedProblem(q, swa, extra, 0.0, sink_values)
    finish(rng, p, extreme_fraction=extreme_fraction)
    return p


def reference(p: PackedProblem, softmax_scale: Optional[float] = None, positions=None, sink_term="in_output"):
    """(out [T, H, 512] float64, lse [T, H] float64, out-of-range count) per docs/spec.md section 2.
    positions: optional [T] position of each token in its request (seq_lens[b] - q_len + i): SWA column
    c < 128 is active only if c < min(128, p + 1). sink_term as the call's."""
    scale = p.softmax_scale if softmax_scale is None else softmax_scale
    T, H = p.tokens, p.heads
    q = decode(p.q)
    sinks = None if sink_term == "none" else p.sinks
    out, lse, out_of_range = np.zeros((T, H, 512)), np.full((T, H), -np.inf), 0
    sink = sinks.astype(np.float64)[:, None] if sinks is not None else np.full((H, 1), -np.inf)
    for t in range(T):
        rows = []
        for segment in (s for s in (p.swa, p.extra) if s is not None):  # SWA columns, then extra
            for c in range(segment.indices.shape[1]):
                if not active(segment, t, c):
                    continue
                if segment is p.swa and positions is not None and c < 128 and c >= min(128, positions[t] + 1):
                    continue
                index = int(segment.indices[t, c])
                if index >= segment.pool.rows:
                    out_of_range += 1
                    continue
                rows.append(segment.pool.decode_row(index))
        if not rows:
            continue  # out = 0, lse = -inf, with or without a sink
        kv = np.stack(rows)
        scores = scale * (q[t] @ kv.T)  # [H, n]
        m = scores.max(axis=1, keepdims=True)
        weights = np.exp(scores - m)
        out[t] = (weights @ kv) / (weights.sum(axis=1, keepdims=True) + np.exp(sink - m))
        lse[t] = m[:, 0] + np.log(weights.sum(axis=1))
    if sink_term == "in_output_and_lse" and sinks is not None:
        lse = np.logaddexp(lse, sinks.astype(np.float64)[None, :])
    return out, lse, out_of_range


def assert_groups_close(out_bits: np.ndarray, ref: np.ndarray, seed, limit=3e-3) -> None:
    """GPU accuracy: relative L2 error <= limit in each 64-dim scale tile (tiles differ by up to 2^30
    in magnitude, so a whole-row norm would hide a wrong small tile), exact zeros where ref is 0."""
    got = decode(np.ascontiguousarray(out_bits).view(np.uint16)).reshape(ref.shape)
    assert not np.isnan(got).any(), f"seed={seed}: NaN in the output"
    empty = np.all(ref == 0, axis=-1)
    assert np.all(got[empty] == 0), f"seed={seed}: tokens with no active column must be exact zeros"
    for g in range(8):
        part = np.s_[..., g * 64 : (g + 1) * 64]
        error = np.linalg.norm(got[part] - ref[part]) / max(np.linalg.norm(ref[part]), 1e-300)
        assert error <= limit, f"seed={seed}: dims {g * 64}..{g * 64 + 63}: relative L2 error {error:.3e} > {limit}"
