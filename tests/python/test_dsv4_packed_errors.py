"""dsv4_decode_packed's errors: library Status -> Python exception with the library's message; nothing written."""

import numpy as np
import pytest

import sparse_decode
from packed_reference import ROW_BYTES, make_packed_problem


@pytest.fixture
def problem(rng):
    return make_packed_problem(rng, tokens=3, swa_width=128, extra_width=64, page_size=16)


def refused(p, exception, message, **overrides):
    """The call raises `exception` matching `message` and leaves the poisoned out (and lse) untouched."""
    kwargs = p.kwargs()
    kwargs.update(overrides)
    out = kwargs.pop("out", p.out_like())
    lse = kwargs.pop("lse", p.lse_like())
    with pytest.raises(exception, match=message):
        sparse_decode.dsv4_decode_packed(**kwargs, out=out, lse=lse)
    assert np.all(out.view(np.uint16) == 0x7FC0) and np.isnan(lse).all(), "nothing is written when a call is refused"


def odd_pages_without_padding(rng):
    p = make_packed_problem(rng, tokens=2, page_size=61, extra_width=None)
    storage = p.swa.pool.storage[:, : 61 * ROW_BYTES].copy()  # page stride 35624: 8 bytes short of 16-aligned
    return p, storage.reshape(-1, 61, ROW_BYTES)


def test_odd_page_size_needs_padded_pages(rng):
    p, cache = odd_pages_without_padding(rng)
    refused(p, ValueError, r"^swa_cache \(page stride\): expected a multiple of 16 bytes, got 35624$", swa_cache=cache)


def test_unaligned_pool(problem):
    pages, stride = problem.swa.pool.storage.shape
    shifted = problem.swa.pool.storage.reshape(-1)[8 : 8 + (pages - 1) * stride].reshape(pages - 1, stride)
    cache = shifted[:, : 16 * ROW_BYTES].reshape(pages - 1, 16, ROW_BYTES)
    refused(problem, ValueError, r"^swa_cache: expected a 16-byte aligned pointer$", swa_cache=cache)


@pytest.mark.parametrize(
    "name, value, message",
    [
        ("swa_cache", lambda p: p.swa.pool.array()[..., :576], r"^swa_cache: expected \[pages, page_size, 584\]"),
        (
            "extra_cache",
            lambda p: np.repeat(p.extra.pool.array()[:, :, None], 2, axis=2),
            r"^extra_cache: expected \[pages, page_size, 584\] or \[pages, page_size, 1, 584\] bytes, got "
            r"\[\d+, 16, 2, 584\]$",
        ),
        (
            "swa_cache",
            lambda p: p.swa.pool.array().view(np.uint16),
            r"^swa_cache: expected uint8 \(1-byte elements holding the packed 584-byte rows\), got uint16$",
        ),
        (
            "swa_cache",
            lambda p: p.swa.pool.array()[:, ::2],
            r"^swa_cache: expected each page's page_size \* 584 bytes contiguous",
        ),
        ("q", lambda p: p.q.view(np.uint8), r"^q: expected bfloat16 \(or a 2-byte integer view\), got uint8$"),
        ("q", lambda p: p.q[:, :, :256], r"^q: expected shape \[T, 16, 512\]"),
        ("swa_indices", lambda p: p.swa.indices.astype(np.int64), r"^swa_indices: expected int32, got int64$"),
        ("extra_indices", lambda p: p.extra.indices[:2], r"^extra_indices: expected 3 rows \(one per token\)"),
        ("swa_lens", lambda p: p.swa.lens[:2], r"^swa_lens: expected 3 elements"),
        ("extra_lens", lambda p: p.extra.lens.reshape(-1, 1, 1),
         r"^extra_lens: expected \[T\] or \[B, q_len\] int32, got shape \[3, 1, 1\]$"),
        ("sinks", lambda p: p.sinks[:8], r"^sinks: expected 16 elements"),
        ("sinks", lambda p: p.sinks.astype(np.float64), r"^sinks: expected float32, got float64$"),
        # The library's own messages.
        ("softmax_scale", lambda p: float("nan"), r"^softmax_scale: expected a number, got NaN$"),
        ("extra_cache", lambda p: None, r"^extra_cache: expected an array, got None$"),
        (
            "extra_lens",
            lambda p: None,
            r"^extra_lens: expected an array \(required with the extra segment\), got None$",
        ),
        (
            "extra_indices",
            lambda p: None,
            r"^extra_indices: expected an array \(required with the extra segment: extra_cache or extra_lens is "
            r"given\), got None$",
        ),
        (
            "swa_indices",
            lambda p: np.ascontiguousarray(p.swa.indices[:, :126]),
            r"^swa_indices \(row stride\): expected a multiple of 4 that is >= width = 126, got 126$",
        ),
        (
            "swa_indices",
            lambda p: np.zeros((3, 16385), np.int32),
            r"^swa_indices \(width\): expected 1\.\.16384, got 16385$",
        ),
    ],
)
def test_messages(problem, name, value, message):
    refused(problem, ValueError, message, **{name: value(problem)})


def test_library_message_for_head_count(problem):
    q = np.ascontiguousarray(problem.q[:, :12])
    out, lse = np.full(q.shape, 0x7FC0, np.uint16), np.full(q.shape[:2], np.nan, np.float32)
    message = r"^q \(heads\): expected one of 8, 16, 32, 64, 128, got 12$"
    refused(problem, ValueError, message, q=q, out=out, lse=lse, sinks=None)


def test_out_must_match_tokens(problem):
    with pytest.raises(ValueError, match=r"^out: expected 3 tokens like q"):
        sparse_decode.dsv4_decode_packed(**problem.kwargs(), out=np.zeros((2, 16, 512), np.uint16))


def test_lse_shape(problem):
    with pytest.raises(ValueError, match=r"^lse: expected \[T, 16\] float32 with contiguous heads"):
        sparse_decode.dsv4_decode_packed(**problem.kwargs(), out=problem.out_like(), lse=np.zeros((3, 8), np.float32))


def test_softmax_scale_is_required_and_a_number(problem):
    kwargs = problem.kwargs()
    with pytest.raises(TypeError, match=r"^softmax_scale: expected a float, got str$"):
        sparse_decode.dsv4_decode_packed(**{**kwargs, "softmax_scale": "0.1"}, out=problem.out_like())
    del kwargs["softmax_scale"]
    with pytest.raises(TypeError, match="softmax_scale"):
        sparse_decode.dsv4_decode_packed(**kwargs, out=problem.out_like())
