"""Errors: library Status -> Python exception with the library's message; nothing written."""

import numpy as np
import pytest

import sparse_decode
from sparse_decode import _ext
from dsv4_reference import make_problem
from helpers import numpy_kwargs


@pytest.fixture
def problem(rng):
    return make_problem(rng, tokens=3, width=256)


def call(p, out=None, **overrides):
    kwargs = numpy_kwargs(p)
    kwargs.update(overrides)
    out = p.out_like() if out is None else out
    sparse_decode.dsv4_decode(**kwargs, out=out)
    return out


def refused(p, exception, message, **overrides):
    """The call raises `exception` matching `message` and leaves the poisoned out untouched."""
    out = p.out_like()
    with pytest.raises(exception, match=message):
        call(p, out=out, **overrides)
    assert np.all(out == 0x7FC0), "nothing is written when a call is refused"


@pytest.mark.parametrize(
    "code, exception",
    [(1, ValueError), (2, NotImplementedError), (3, RuntimeError), (99, RuntimeError)],
)
def test_status_codes_map_to_exceptions(code, exception):
    # kInvalidArgument, kNotSupported, kCudaError (and anything unknown).
    with pytest.raises(exception, match="^the library's message$"):
        _ext._raise_status(code, "the library's message")
    _ext._raise_status(0, "ok raises nothing")


def test_library_message_for_head_count(problem):
    q = np.ascontiguousarray(problem.q[:, :12])  # 12 heads
    out = np.full(q.shape, 0x7FC0, np.uint16)
    with pytest.raises(ValueError, match=r"^q \(heads\): expected one of 8, 16, 32, 64, 128, got 12$"):
        call(problem, q=q, out=out, sinks=None)
    assert np.all(out == 0x7FC0)


def test_library_message_for_width(problem):
    refused(
        problem,
        ValueError,
        r"^indices \(width\): expected a multiple of 4 in \[128, 16512\], got 254$",
        indices=problem.indices[:, :254],
    )


def test_library_message_for_nan_scale(problem):
    refused(problem, ValueError, r"^bmm1_scale: expected a number, got NaN$", bmm1_scale=float("nan"))


def test_seq_lens_of_the_wrong_length_is_named(problem):
    # Three tokens cannot be split evenly over two requests: the length of seq_lens is what is wrong.
    refused(problem, ValueError, r"^seq_lens: expected B elements with B dividing the T = 3 query tokens .*"
            r"got shape \[2\]$", seq_lens=np.array([40, 50], np.int32))


def test_library_message_for_missing_compressed_pool(problem):
    refused(
        problem,
        ValueError,
        r"^compressed_kv: expected an array \(required when width > 128\), got None$",
        compressed_kv=None,
    )


def test_library_message_for_unaligned_row_stride(rng):
    p = make_problem(rng, row_pad=8)  # 520-byte FP8 rows: not a multiple of 16 bytes
    refused(p, ValueError, r"^swa_kv \((row|page) stride\): expected a multiple of 16 bytes")


@pytest.mark.parametrize(
    "name, value, message",
    [
        ("q", lambda p: p.q.astype(np.float32), r"^q: expected FP8 E4M3 .* got float32$"),
        ("q", lambda p: p.q[..., :256], r"^q: expected shape \[T, 16, 512\]"),
        (
            "swa_kv",
            lambda p: p.swa_kv.astype(np.uint16),
            r"^swa_kv: expected the dtype of q \(FP8 E4M3, 1 byte\), got uint16$",
        ),
        ("indices", lambda p: p.indices.astype(np.int64), r"^indices: expected int32, got int64$"),
        ("indices", lambda p: p.indices[:2], r"^indices: expected 3 rows \(one per token\)"),
        ("lens", lambda p: p.lens[:2], r"^lens: expected 3 elements"),
        ("lens", lambda p: p.lens.reshape(3, 1, 1),
         r"^lens: expected \[T\] or \[B, q_len\] int32, got shape \[3, 1, 1\]$"),
        ("sinks", lambda p: p.sinks[:8], r"^sinks: expected 16 elements"),
        ("sinks", lambda p: p.sinks.astype(np.float64), r"^sinks: expected float32, got float64$"),
        ("bmm1_scale", lambda p: np.ones(2, np.float32), r"^bmm1_scale: expected 1 element, got shape \[2\]$"),
        (
            "bmm2_scale",
            lambda p: np.ones(1, np.float64),
            r"^bmm2_scale: expected a float or a 1-element float32 array, got float64$",
        ),
        ("page_layout", lambda p: "NDH", r"^page_layout: expected 'NHD' or 'HND', got 'NDH'$"),
        ("swa_kv", lambda p: np.repeat(p.swa_kv[:, :, None], 2, axis=2), r"^swa_kv: expected one KV head in NHD"),
        (
            "q",
            lambda p: np.ascontiguousarray(p.q.transpose(0, 2, 1))[:, :, :16].transpose(0, 2, 1),
            r"^q: expected the 512 dims contiguous",
        ),
    ],
)
def test_binding_messages(problem, name, value, message):
    refused(problem, ValueError, message, **{name: value(problem)})


def test_out_must_be_bf16(problem):
    with pytest.raises(ValueError, match=r"^out: expected bfloat16 \(or a 2-byte integer view\), got float32$"):
        call(problem, out=np.zeros(problem.q.shape, np.float32))


def test_out_must_match_tokens(problem):
    with pytest.raises(ValueError, match=r"^out: expected 3 tokens like q"):
        call(problem, out=np.zeros((2, 16, 512), np.uint16))


def test_leading_dims_that_do_not_merge_are_a_request_view(rng):
    # [B, q_len, ...] views of padded buffers are read in place: the same bits as the contiguous call.
    p = make_problem(rng, tokens=4, seq_lens="uniform", q_len=2, q4d=True)
    wide = np.zeros((2, 3, 16, 512), np.uint8)
    wide[:, :2] = p.q
    assert np.array_equal(call(p, q=wide[:, :2]), call(p))
    lens = p.lens.reshape(2, 2)
    assert np.array_equal(call(p, q=wide[:, :2], lens=np.repeat(lens, 2, axis=1)[:, ::2]), call(p))


def test_leading_dims_of_a_strided_lens_merge_or_are_a_view(problem):
    assert np.array_equal(call(problem, lens=np.repeat(problem.lens, 2)[::2]), call(problem))


def test_scale_of_wrong_type(problem):
    with pytest.raises(TypeError, match=r"^bmm1_scale: expected a float or a 1-element float32 array, got str$"):
        call(problem, bmm1_scale="0.1")
