"""docs/spec.md sections 3 (HCA) and 4 (DSA) in float64 NumPy, and random problems to check them on.

Written from SPEC.md and docs/{hca,dsa}_layout.md, independently of the
library's C++ references: number formats come from dsv4_reference's bit
decoders, the rest is the SPEC's formulas walked token by token. Every KV
row or slot that nothing active reads is NaN, so a stray read shows.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from dsv4_reference import FP8_NAN, BF16_NAN, HEAD_DIM, SWA, decode, make_pool, pool_rows, random_elements


def softmax_rows(q, kv, bmm1, bmm2, sinks):
    """Section 1's formulas for one token: (out [H, 512], lse [H]) over kv [n, 512] float64 rows."""
    scores = bmm1 * (q @ kv.T)
    m = scores.max(axis=1, keepdims=True)
    weights = np.exp(scores - m)
    sink = sinks.astype(np.float64)[:, None] if sinks is not None else np.full((q.shape[0], 1), -np.inf)
    out = bmm2 * (weights @ kv) / (weights.sum(axis=1, keepdims=True) + np.exp(sink - m))
    return out, m[:, 0] + np.log(weights.sum(axis=1))


# ---------------------------------------------------------------- HCA (section 3)


def make_hca_problem(rng, *, tokens=6, heads=16, q_len=2, varlen=False, page_size=4, max_pages=5, layout="pages"):
    """Random HCA arguments (NumPy bits) whose compressed slots read only filled rows."""
    swa, swa_good, swa_poison = make_pool(rng, 24, page_size, "fp8", layout)
    swa_rows_count = 24 * page_size
    pages = 12
    storage = np.full((pages, page_size, HEAD_DIM), FP8_NAN, dtype=np.uint8)
    if varlen:
        per_request = []
        while sum(per_request) < tokens:
            per_request.append(int(min(rng.integers(1, 4), tokens - sum(per_request))))
        cum = np.concatenate([[0], np.cumsum(per_request)]).astype(np.int32)
        request = np.repeat(np.arange(len(per_request)), per_request)
    else:
        assert tokens % q_len == 0
        cum, request = None, np.arange(tokens) // q_len
    requests = int(request.max()) + 1
    capacity = max_pages * page_size
    hca_seq_lens = (SWA + rng.integers(capacity // 2, capacity + 3, requests)).astype(np.int32)
    lens = (SWA + rng.integers(-3, capacity + 4, tokens)).astype(np.int32)
    block_table = rng.integers(0, pages, (tokens, max_pages)).astype(np.int32)
    block_table[rng.random((tokens, max_pages)) < 0.1] = -1
    block_table[rng.random((tokens, max_pages)) < 0.05] = pages + 2  # past the pool: masked, counted
    swa_lens = rng.integers(0, SWA + 1, tokens).astype(np.int32)
    swa_rows = swa_good[rng.integers(0, len(swa_good), (tokens, SWA))].astype(np.int32)
    draw = rng.random((tokens, SWA))
    swa_rows[draw < 0.1] = -1
    swa_rows[(draw >= 0.1) & (draw < 0.13)] = swa_rows_count + 5
    inactive = np.arange(SWA)[None, :] >= swa_lens[:, None]
    poison = swa_poison[rng.integers(0, len(swa_poison), (tokens, SWA))] if len(swa_poison) else -1
    swa_rows = np.where(inactive & (draw < 0.5), poison, swa_rows).astype(np.int32)
    if tokens > 1:
        lens[rng.integers(0, tokens)] = 0  # no compressed slot; the window may still be active
    p = SimpleNamespace(
        q=random_elements(rng, (tokens, heads, HEAD_DIM), "fp8"),
        swa_kv=swa,
        compressed_kv=None,
        swa_rows=swa_rows,
        swa_lens=swa_lens,
        block_table=block_table,
        lens=lens,
        hca_seq_lens=hca_seq_lens,
        cum_seq_lens_q=cum,
        q_len=None if varlen else q_len,
        max_q_len=int(np.diff(cum).max()) if varlen else None,
        request=request,
        layout=layout,
        page_size=page_size,
        sinks=rng.uniform(-3, 3, heads).astype(np.float32),
        bmm1_scale=float(np.float32(rng.uniform(0.01, 0.03))),
        bmm2_scale=float(np.float32(rng.uniform(0.5, 2.0))),
    )
    # Fill exactly the slots some token reads.
    for t, page, slot in hca_compressed_slots(p, pages):
        storage[page, slot] = random_elements(rng, (HEAD_DIM,), "fp8")
    p.compressed_kv = {"pages": storage, "NHD": storage[:, :, None], "HND": storage[:, None]}[layout]
    return p


def hca_compressed_slots(p, pages):
    """(token, page, slot) of every compressed slot a token reads, in order."""
    ps = p.page_size
    for t in range(len(p.lens)):
        cap = p.block_table.shape[1] * ps
        n = max(0, min(int(p.lens[t]) - SWA, int(p.hca_seq_lens[p.request[t]]) - SWA, cap))
        for j in range(n):
            page = int(p.block_table[t, j // ps])
            if 0 <= page < pages:
                yield t, page, j % ps


def hca_reference(p):
    """(out [T, H, 512], lse [T, H], out-of-range count) per docs/spec.md section 3."""
    T, H = p.q.shape[0], p.q.shape[1]
    swa = pool_rows(p.swa_kv, p.layout)
    comp = pool_rows(p.compressed_kv, p.layout)
    pages = len(comp) // p.page_size
    out, lse, count = np.zeros((T, H, HEAD_DIM)), np.full((T, H), -np.inf), 0
    for t in range(T):
        rows = []
        for c in range(min(max(int(p.swa_lens[t]), 0), SWA)):
            r = int(p.swa_rows[t, c])
            if r >= len(swa):
                count += 1
            elif r >= 0:
                rows.append(swa[r])
        n = max(0, min(int(p.lens[t]) - SWA, int(p.hca_seq_lens[p.request[t]]) - SWA,
                       p.block_table.shape[1] * p.page_size))
        for j in range(n):
            page = int(p.block_table[t, j // p.page_size])
            if page >= pages:
                count += 1
            elif page >= 0:
                rows.append(comp[page * p.page_size + j % p.page_size])
        if rows:
            out[t], lse[t] = softmax_rows(decode(p.q[t]), decode(np.stack(rows)), p.bmm1_scale, p.bmm2_scale,
                                          p.sinks)
    return out, lse, count


def hca_kwargs(p):
    return dict(
        q=p.q, swa_kv=p.swa_kv, compressed_kv=p.compressed_kv, swa_rows=p.swa_rows, swa_lens=p.swa_lens,
        block_table=p.block_table, lens=p.lens, hca_seq_lens=p.hca_seq_lens, cum_seq_lens_q=p.cum_seq_lens_q,
        q_len=p.q_len, max_q_len=p.max_q_len, sinks=p.sinks, bmm1_scale=p.bmm1_scale, bmm2_scale=p.bmm2_scale,
        page_layout="HND" if p.layout == "HND" else "NHD",
    )


def make_canonical_table(rng, *, tokens=6, q_len=2, page_size=4, pages=12, width=148, swa_pages=24):
    """A section-1 table that FlashInfer's conversion accepts: token i of request b sees visible =
    seq_lens[b] - q_len + i + 1 positions, lens = 128 + floor(visible / 128) (dense causal lengths), window
    columns c < min(visible, 128) are rows of the SWA pool, compressed columns 128 + j, j < floor(visible /
    128), the canonical expansion of pages of the compressed pool; every other column holds anything. Short
    and long requests alternate; FP8 pools with every row filled."""
    B = tokens // q_len
    longest = (width - SWA + 1) * SWA - 1  # floor(seq_len / 128) <= width - 128
    seq_lens = np.where(np.arange(B) % 2 == 0, rng.integers(q_len, SWA + q_len, B),
                        rng.integers(SWA, longest + 1, B)).astype(np.int32)
    visible = np.repeat(seq_lens, q_len) - q_len + np.tile(np.arange(q_len), B) + 1
    slots = visible // SWA
    lens = (SWA + slots).astype(np.int32)
    indices = rng.integers(-5, 60 * page_size, (tokens, width)).astype(np.int32)  # inactive columns: anything
    for t in range(tokens):
        w, n = min(int(visible[t]), SWA), int(slots[t])
        indices[t, :w] = rng.integers(0, swa_pages * page_size, w)
        table = rng.integers(0, pages, -(-n // page_size))
        j = np.arange(n)
        indices[t, SWA:SWA + n] = table[j // page_size] * page_size + j % page_size
    swa = random_elements(rng, (swa_pages, page_size, HEAD_DIM), "fp8")
    comp = random_elements(rng, (pages, page_size, HEAD_DIM), "fp8")
    q = random_elements(rng, (tokens, 16, HEAD_DIM), "fp8")
    return SimpleNamespace(q=q, swa=swa, comp=comp, indices=indices, lens=lens, seq_lens=seq_lens, q_len=q_len,
                           page_size=page_size, pages=pages, swa_rows=swa_pages * page_size, visible=visible,
                           sinks=rng.uniform(-2, 2, 16).astype(np.float32),
                           bmm1_scale=float(np.float32(rng.uniform(0.01, 0.03))), bmm2_scale=1.0)


def convert_max_pages(max_seq_len, page_size):
    """FlashInfer's block-table width: floor(max_seq_len / 128) slots in tiles of 128, in pages, at least 1."""
    return max(1, -(-(max_seq_len // SWA) // SWA) * SWA // page_size)


def converted(t, max_pages=None):
    """FlashInfer's conversion of an accepted table, written out: (swa_rows, swa_lens, block_table,
    hca_seq_lens), 0 past the window and past the stream."""
    ps, tokens = t.page_size, len(t.lens)
    max_pages = convert_max_pages(int(t.seq_lens.max()), ps) if max_pages is None else max_pages
    swa_rows = np.zeros((tokens, SWA), np.int32)
    block_table = np.zeros((tokens, max_pages), np.int32)
    swa_lens = np.minimum(t.visible, SWA).astype(np.int32)
    for k in range(tokens):
        swa_rows[k, :swa_lens[k]] = t.indices[k, :swa_lens[k]]
        n = int(t.visible[k]) // SWA
        for page in range(-(-n // ps)):
            block_table[k, page] = t.indices[k, SWA + page * ps] // ps
    return swa_rows, swa_lens, block_table, (SWA + t.seq_lens // SWA).astype(np.int32)


# ---------------------------------------------------------------- DSA (section 4)

DSA_DIM = 192


def round_bf16(x):
    """float64 -> nearest-even BF16 value, in one rounding (normal range)."""
    m, e = np.frexp(np.asarray(x, dtype=np.float64))
    return np.ldexp(np.rint(m * 256.0) / 256.0, e)


def make_dsa_problem(rng, *, tokens=4, groups=2, heads=4, query_len=2, block=4, max_blocks=6, regions=5,
                     cache="bf16", gate=None):
    rows, requests, pages = tokens * groups, tokens // query_len, 10
    element = "bf16" if cache == "bf16" else "fp8"
    p = SimpleNamespace(groups=groups, heads=heads, query_len=query_len, block=block, cache_kind=cache)
    p.q = random_elements(rng, (rows, heads, DSA_DIM), "bf16")
    p.cache = random_elements(rng, (pages, groups, block, 2 * DSA_DIM), element)
    p.block_table = rng.integers(0, pages, (requests + 1, max_blocks)).astype(np.int32)  # a spare graph-padding row
    p.block_table[rng.random(p.block_table.shape) < 0.1] = -1
    p.block_table[rng.random(p.block_table.shape) < 0.05] = pages + 3
    p.regions = rng.integers(-1, max_blocks + 1, (rows, regions)).astype(np.int32)  # -1 and max_blocks: masked
    p.positions = rng.integers(-1, max_blocks * block, rows).astype(np.int32)
    p.active = (rng.random(rows) < 0.85).astype(np.int32)
    p.scale = float(np.float32(rng.uniform(0.05, 0.1)))
    p.k_scale = np.array([rng.uniform(0.5, 2)], np.float32) if cache == "fp8" else None
    p.v_scale = np.array([rng.uniform(0.5, 2)], np.float32) if cache == "fp8" else None
    p.gate = None
    if gate == "bf16":
        p.gate = random_elements(rng, (tokens, groups * heads), "bf16")
    elif gate == "float32":
        p.gate = rng.uniform(-4, 4, (tokens, groups * heads)).astype(np.float32)
    elif gate == "float16":
        p.gate = rng.uniform(-4, 4, (tokens, groups * heads)).astype(np.float16)
    # Row 0 always sees a whole block of keys, so that no problem is empty.
    p.active[0], p.positions[0], p.regions[0, 0] = 1, max_blocks * block - 1, 0
    if not 0 <= p.block_table[0, 0] < pages:
        p.block_table[0, 0] = 0
    read = np.zeros(p.cache.shape[:3], dtype=bool)
    for r, page, slot in dsa_keys(p):
        read[page, r % groups, slot] = True
    p.cache[~read] = BF16_NAN if element == "bf16" else FP8_NAN
    return p


def dsa_keys(p):
    """(row, page, slot) of every visible key of every active row, in column order."""
    pages, max_blocks = p.cache.shape[0], p.block_table.shape[1]
    for r in range(p.q.shape[0]):
        if not p.active[r]:
            continue
        request = r // (p.groups * p.query_len)
        for b in p.regions[r]:
            b = int(b)
            if b < 0 or b >= max_blocks or b * p.block > p.positions[r]:
                continue
            page = int(p.block_table[request, b])
            if not 0 <= page < pages:
                continue
            for slot in range(min(p.block, int(p.positions[r]) - b * p.block + 1)):
                yield r, page, slot


def dsa_reference(p):
    """out [rows, heads, 192] float64 per docs/spec.md section 4 (None for inactive rows)."""
    rows = p.q.shape[0]
    k_scale = float(p.k_scale[0]) if p.k_scale is not None else 1.0
    v_scale = float(p.v_scale[0]) if p.v_scale is not None else 1.0
    keys = {r: [] for r in range(rows)}
    for r, page, slot in dsa_keys(p):
        keys[r].append(decode(p.cache[page, r % p.groups, slot]))
    out = np.zeros((rows, p.heads, DSA_DIM))
    for r in range(rows):
        if not keys[r]:
            continue
        kv = np.stack(keys[r])
        k, v = kv[:, :DSA_DIM] * k_scale, kv[:, DSA_DIM:] * v_scale
        s = p.scale * (decode(p.q[r]) @ k.T)
        w = np.exp(s - s.max(axis=1, keepdims=True))
        out[r] = (w @ v) / w.sum(axis=1, keepdims=True)
        if p.gate is not None:
            g = p.gate[r // p.groups, (r % p.groups) * p.heads:(r % p.groups + 1) * p.heads]
            x = decode(g) if g.dtype == np.uint16 else g.astype(np.float64)
            sig = 1.0 / (1.0 + np.exp(-x))  # rounded to the gate's dtype (BF16 gates are uint16 bits)
            rounded = round_bf16(sig) if g.dtype == np.uint16 else sig.astype(g.dtype).astype(np.float64)
            out[r] *= rounded[:, None]
    return out


def dsa_kwargs(p):
    return dict(q=p.q, cache=p.cache, regions=p.regions, block_table=p.block_table, positions=p.positions,
                active=p.active, scale=p.scale, query_len=p.query_len, k_scale=p.k_scale, v_scale=p.v_scale,
                gate=p.gate)
