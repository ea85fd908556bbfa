"""NumPy arrays through DLPack: the CPU backend against the float64 reference."""

import numpy as np
import pytest

import sparse_decode
from dsv4_reference import assert_matches_exactly_rounded, make_problem, reference
from helpers import numpy_kwargs, run_numpy


def check(p, seed, **overrides):
    out, lse, count = run_numpy(p, **overrides)
    ref_out, ref_lse, ref_count = reference(p)
    assert_matches_exactly_rounded(out, ref_out.reshape(out.shape), seed)
    lse = lse.reshape(ref_lse.shape)
    assert np.array_equal(np.isneginf(lse), np.isneginf(ref_lse)), (
        f"seed={seed}: lse = -inf exactly where no column is active"
    )
    finite = np.isfinite(ref_lse)
    np.testing.assert_allclose(lse[finite], ref_lse[finite], rtol=1e-6, atol=1e-6, err_msg=f"seed={seed}")
    assert count == ref_count, f"seed={seed}: out-of-range count {count}, expected {ref_count}"
    return out


@pytest.mark.parametrize("dtype", ["fp8", "bf16"])
@pytest.mark.parametrize("heads, width", [(16, 128), (16, 384), (8, 256), (64, 132)])
def test_matches_reference(rng, seed, dtype, heads, width):
    p = make_problem(rng, dtype=dtype, heads=heads, width=width, tokens=5)
    check(p, seed)


@pytest.mark.parametrize("layout", ["rows", "pages", "NHD", "HND"])
def test_pool_layouts(rng, seed, layout):
    p = make_problem(rng, layout=layout, page_size=3, width=192)
    check(p, seed)


def test_padded_rows_and_pages(rng, seed):
    # Row stride 576 elements and a gap after every page: both NaN-filled.
    p = make_problem(rng, row_pad=64, page_pad=1, page_size=5, layout="NHD")
    assert p.swa_kv.strides[1] == 576 and not p.swa_kv.flags.c_contiguous
    check(p, seed)


def test_strided_q_and_out(rng, seed):
    p = make_problem(rng, tokens=4)
    wide_q = np.zeros(p.q.shape[:-1] + (640,), dtype=p.q.dtype)
    wide_q[..., :512] = p.q
    out_storage = np.full(p.q.shape[:-1] + (528,), 0x7FC0, dtype=np.uint16)
    out = out_storage[..., :512]
    check(p, seed, q=wide_q[..., :512], out=out)
    assert np.all(out_storage[..., 512:] == 0x7FC0), "nothing is written past the 512 dims"


@pytest.mark.parametrize("mode, q_len", [("uniform", 1), ("uniform", 3), ("varlen", None)])
def test_sliding_window_from_seq_lens(rng, seed, mode, q_len):
    p = make_problem(rng, tokens=6, seq_lens=mode, q_len=q_len or 1, width=256)
    check(p, seed)


def test_four_dim_query_infers_q_len(rng, seed):
    p = make_problem(rng, tokens=6, seq_lens="uniform", q_len=2, q4d=True)
    p.q_len = None  # read off q.shape[1]
    out = check(p, seed)
    assert out.shape == (3, 2, 16, 512)


def test_indices_shaped_by_request(rng, seed):
    p = make_problem(rng, tokens=6, seq_lens="uniform", q_len=3, q4d=True)
    check(p, seed, indices=p.indices.reshape(2, 3, -1), lens=p.lens.reshape(2, 3))


def test_scales_as_one_element_arrays(rng, seed):
    p = make_problem(rng)
    check(p, seed, bmm1_scale=np.array([p.bmm1_scale], np.float32), bmm2_scale=np.float32(p.bmm2_scale))


def test_without_lens_and_sinks(rng, seed):
    check(make_problem(rng, lens=False, sinks=False, out_of_range=False), seed)


def test_infinite_sinks(rng, seed):
    p = make_problem(rng)
    p.sinks[:] = np.inf
    p.sinks[::2] = -np.inf
    check(p, seed)


def test_token_without_active_column_gives_zeros(rng, seed):
    p = make_problem(rng, tokens=3, empty_token=False)
    p.lens[1] = 0
    p.indices[2, :] = -1
    out, lse, _ = run_numpy(p)
    assert np.all(out[1:] == 0) and np.all(np.isneginf(lse[1:]))


def test_zero_tokens_writes_nothing(rng):
    p = make_problem(rng, tokens=1)
    kwargs = numpy_kwargs(p)
    kwargs.update(q=p.q[:0], indices=p.indices[:0], lens=p.lens[:0])
    out = np.empty((0, 16, 512), np.uint16)
    sparse_decode.dsv4_decode(**kwargs, out=out)


def test_read_only_inputs(rng, seed):
    p = make_problem(rng)
    for array in (p.q, p.indices, p.lens, p.sinks):
        array.setflags(write=False)
    check(p, seed)


def test_ml_dtypes_arrays(rng, seed):
    ml_dtypes = pytest.importorskip("ml_dtypes")
    for dtype, element in (("fp8", ml_dtypes.float8_e4m3fn), ("bf16", ml_dtypes.bfloat16)):
        p = make_problem(rng, dtype=dtype)
        out = p.out_like().view(ml_dtypes.bfloat16)
        ref = reference(p)[0]
        sparse_decode.dsv4_decode(
            **{
                **numpy_kwargs(p),
                "q": p.q.view(element),
                "swa_kv": p.swa_kv.view(element),
                "compressed_kv": p.compressed_kv.view(element),
            },
            out=out,
        )
        assert_matches_exactly_rounded(out.view(np.uint16), ref, seed)


def test_other_fp8_formats_are_refused(rng):
    ml_dtypes = pytest.importorskip("ml_dtypes")
    p = make_problem(rng)
    with pytest.raises(ValueError, match=r"q: expected FP8 E4M3 \(float8_e4m3fn\), got float8_e5m2"):
        sparse_decode.dsv4_decode(**{**numpy_kwargs(p), "q": p.q.view(ml_dtypes.float8_e5m2)}, out=p.out_like())


def test_same_bits_run_after_run(rng):
    p = make_problem(rng)
    assert np.array_equal(run_numpy(p)[0], run_numpy(p)[0])


def test_host_calls_ask_for_no_workspace(rng):
    from sparse_decode import _decode, _ext

    p = make_problem(rng, tokens=64, width=640)
    kwargs = numpy_kwargs(p)
    out = np.zeros(p.q.shape, np.uint16)
    arguments = dict(
        **_decode._plain(q=kwargs["q"], swa_kv=kwargs["swa_kv"], compressed_kv=kwargs["compressed_kv"],
                         indices=kwargs["indices"], out=out, lens=kwargs["lens"], seq_lens=None,
                         cum_seq_lens_q=None, sinks=None, lse=None, out_of_range_count=None, workspace=None),
        q_len=None, max_q_len=None, bmm1_scale=1.0, bmm1_scale_array=None, bmm2_scale=1.0,
        bmm2_scale_array=None, sink_term=0, enable_pdl=False, hnd=False, stream=0,
    )
    assert _ext.dsv4_decode(**arguments, size_only=True) == 0
    assert not out.any(), "the size query runs nothing"
