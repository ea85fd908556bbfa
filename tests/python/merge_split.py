"""A dsv4_decode problem's active columns dealt to R ranks, for the merge tests (test_merge_*.py)."""

import dataclasses

import numpy as np

from dsv4_reference import SWA, pool_rows, token_positions

# The sink term of each rank's call: the sink counted once, on rank 0 (docs/spec.md, sections 1 and 5).
SINK_TERMS = ("in_output_and_lse",) + ("none",) * 63


def active_columns(p):
    """[T, W] bool: the columns SPEC section 1 counts (lens, -1, the window by position, inside the pool)."""
    positions = token_positions(p)
    rows = (len(pool_rows(p.swa_kv, p.layout)), len(pool_rows(p.compressed_kv, p.layout)))
    tokens, width = p.indices.shape
    active = np.zeros((tokens, width), bool)
    for t in range(tokens):
        for c in range(width):
            index = int(p.indices[t, c])
            if (p.lens is not None and c >= p.lens[t]) or index < 0:
                continue
            if c < SWA and positions is not None and c >= min(SWA, positions[t] + 1):
                continue
            active[t, c] = index < rows[0 if c < SWA else 1]
    return active


def split_problem(p, ranks, seed):
    """(the problem as each rank sees it, [T] whole): token t % 3 == 0 goes whole to one rank (the others
    hold none of its columns), t % 3 == 1 is dealt column by column at random, t % 3 == 2 has its window
    columns on rank 0 and its top-k columns on the others. Non-owned active columns become -1; rank 0
    also loses the columns after its last one through lens (dealt tokens)."""
    rng = np.random.default_rng(seed)
    active = active_columns(p)
    tokens, width = p.indices.shape
    lens = p.lens if p.lens is not None else np.full(tokens, width, np.int32)
    indices = [p.indices.copy() for _ in range(ranks)]
    rank_lens = [lens.copy() for _ in range(ranks)]
    whole = np.arange(tokens) % 3 == 0
    for t in range(tokens):
        whole_owner = int(rng.integers(ranks))
        last = np.full(ranks, -1)
        for c in np.flatnonzero(active[t]):
            if whole[t]:
                owner = whole_owner
            elif t % 3 == 1 or ranks == 1:
                owner = int(rng.integers(ranks))
            else:
                owner = 0 if c < SWA else int(rng.integers(1, ranks))
            for r in range(ranks):
                if r != owner:
                    indices[r][t, c] = -1
            last[owner] = c
        if not whole[t]:
            rank_lens[0][t] = min(lens[t], last[0] + 1)
    return [dataclasses.replace(p, indices=indices[r], lens=rank_lens[r]) for r in range(ranks)], whole


def held_by(p, rank_problem):
    """[T] bool: tokens whose every active column the rank holds."""
    return np.all(active_columns(rank_problem) == active_columns(p), axis=1)
