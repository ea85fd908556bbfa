"""dsv4_decode_packed on NumPy arrays: the CPU backend against the float64 reference of docs/spec.md section 2."""

import numpy as np
import pytest

import sparse_decode
from dsv4_reference import BF16_NAN, assert_matches_exactly_rounded, decode
from packed_helpers import check, run_numpy
from packed_reference import finish, make_packed_problem, reference


@pytest.mark.parametrize("four_d", [False, True], ids=["3-D", "4-D"])
@pytest.mark.parametrize("page_size", [1, 2, 61, 64])
def test_page_sizes(rng, seed, page_size, four_d):
    # Odd page sizes get the 8 bytes of padding per page that the 16-byte page-stride rule needs.
    p = make_packed_problem(rng, page_size=page_size, four_d=four_d)
    assert p.swa.pool.array().strides[0] == page_size * 584 + (8 if page_size % 2 else 0)
    check(p, seed)


def test_each_pool_has_its_own_page_size_and_stride(rng, seed):
    p = make_packed_problem(rng, page_size=64, extra_page_size=61, extra_stride=32)
    assert p.extra.pool.array().strides[0] == 61 * 584 + 8 + 32  # the gap is poison (0xFF)
    check(p, seed)


def test_pages_larger_than_needed(rng, seed):
    check(make_packed_problem(rng, page_size=2, extra_stride=48), seed)


def test_one_page_pools(rng, seed):
    # One page of an odd size: its stride is never used, so no padding is needed.
    p = make_packed_problem(rng, page_size=61, swa_pages=1, extra_pages=1, swa_width=32, extra_width=40)
    p.swa.pool.storage = np.ascontiguousarray(p.swa.pool.storage[:, : 61 * 584])
    p.extra.pool.storage = np.ascontiguousarray(p.extra.pool.storage[:, : 61 * 584])
    check(p, seed)


def test_swa_segment_only_without_lengths(rng, seed):
    check(make_packed_problem(rng, extra_width=None, swa_lens=False), seed)


@pytest.mark.parametrize("heads", [8, 32, 64, 128])
def test_head_counts(rng, seed, heads):
    check(make_packed_problem(rng, heads=heads, tokens=3), seed)


@pytest.mark.parametrize("swa_width, extra_width", [(128, 512), (64, 1024), (130, 7), (1, 3)])
def test_widths(rng, seed, swa_width, extra_width):
    # Widths that are no multiple of 4 come as column slices of rows padded to one (poison columns).
    p = make_packed_problem(rng, swa_width=swa_width, extra_width=extra_width, tokens=4, page_size=16)
    check(p, seed)


def test_arrays_shaped_by_request(rng, seed):
    p = make_packed_problem(rng, tokens=6, q_len=3)
    b, s_q = 2, 3
    out = check(
        p,
        seed,
        q=p.q.reshape(b, s_q, p.heads, 512),
        swa_indices=p.swa.indices.reshape(b, s_q, -1),
        swa_lens=p.swa.lens.reshape(b, s_q),
        extra_indices=p.extra.indices.reshape(b, s_q, -1),
        extra_lens=p.extra.lens.reshape(b, s_q),
        out=np.full((b, s_q, p.heads, 512), BF16_NAN, np.uint16),
        lse=np.full((b, s_q, p.heads), np.nan, np.float32),
    )
    assert out.shape == (b, s_q, p.heads, 512)


def test_token_without_active_column_gives_zeros(rng, seed):
    p = make_packed_problem(rng, tokens=4, empty_token=False)
    p.swa.lens[1], p.extra.lens[1] = 0, 0  # lengths 0
    p.swa.indices[2], p.extra.indices[2] = -1, -1  # every index -1
    p.swa.indices[3] = p.swa.pool.rows + 5  # every SWA index past the pool: masked and counted
    p.extra.lens[3] = 0
    out, lse, count = run_numpy(p)
    assert np.all(out[1:] == 0) and np.all(np.isneginf(lse[1:])), f"seed={seed}"
    assert count == reference(p)[2] and count >= min(p.swa.lens[3], 128), f"seed={seed}"
    check(p, seed)


def test_lengths_past_the_width_and_negative(rng, seed):
    # A length above the width means the width; a negative one means no column.
    p = make_packed_problem(rng, tokens=4, swa_lens=False, extra_lens=False, empty_token=False)
    p.swa.lens = np.array([128, 129, 1 << 30, -5], np.int32)
    p.extra.lens = np.array([-1, 1 << 20, 256, 257], np.int32)
    out = check(p, seed)
    assert not np.isnan(decode(out)).any()


def test_infinite_sinks(rng, seed):
    p = make_packed_problem(rng)
    p.sinks[::2], p.sinks[1::2] = np.inf, -np.inf  # +inf: zeros; -inf: as without a sink
    out = check(p, seed)
    assert np.all(out[:, ::2] == 0)


def test_scale_bytes_across_the_ue8m0_range(rng, seed):
    # Tiles of one row differ by up to 2^30, and 20% of the tiles take bytes 0, 2, 15, 150 or 160.
    p = make_packed_problem(rng, tokens=6)
    finish(rng, p, scale_range=(100, 150), extreme_fraction=0.2)
    check(p, seed)


def test_zero_tokens_write_nothing(rng):
    p = make_packed_problem(rng, tokens=1, empty_token=False)
    kwargs = p.kwargs()
    kwargs.update(q=p.q[:0], swa_indices=p.swa.indices[:0], swa_lens=p.swa.lens[:0])
    kwargs.update(extra_indices=p.extra.indices[:0], extra_lens=p.extra.lens[:0])
    sparse_decode.dsv4_decode_packed(**kwargs, out=np.empty((0, 16, 512), np.uint16))


def test_strided_q_and_out(rng, seed):
    p = make_packed_problem(rng, tokens=4)
    wide_q = np.zeros((4, 16, 640), np.uint16)
    wide_q[..., :512] = p.q
    out_storage = np.full((4, 16, 528), BF16_NAN, np.uint16)
    check(p, seed, q=wide_q[..., :512], out=out_storage[..., :512])
    assert np.all(out_storage[..., 512:] == BF16_NAN), "nothing is written past the 512 dims"


def test_read_only_inputs(rng, seed):
    p = make_packed_problem(rng)
    for array in (p.q, p.swa.pool.storage, p.swa.indices, p.swa.lens, p.extra.pool.storage, p.sinks):
        array.setflags(write=False)
    check(p, seed)


def test_ml_dtypes_query_and_output(rng, seed):
    ml_dtypes = pytest.importorskip("ml_dtypes")
    p = make_packed_problem(rng)
    out = p.out_like().view(ml_dtypes.bfloat16)
    sparse_decode.dsv4_decode_packed(**{**p.kwargs(), "q": p.q.view(ml_dtypes.bfloat16)}, out=out)
    assert_matches_exactly_rounded(out.view(np.uint16), reference(p)[0], seed)


def test_same_bits_run_after_run(rng):
    p = make_packed_problem(rng)
    assert np.array_equal(run_numpy(p)[0], run_numpy(p)[0])


def test_batch_invariant_flag_on_the_cpu_backend(rng):
    # The CPU backend's bits never depend on the batch: the flag changes nothing there.
    p = make_packed_problem(rng, tokens=7)
    assert np.array_equal(run_numpy(p, batch_invariant=True)[0], run_numpy(p)[0])
