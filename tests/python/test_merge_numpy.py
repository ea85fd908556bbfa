"""merge_states (SPEC section 5) on NumPy arrays: the CPU backend against a float64 NumPy
transcription of the spec; lists and stacked arrays, strided and FlashInfer layouts, every
dtype pair, errors. The case builder and the oracle serve the torch and GPU tests too."""

import math

import numpy as np
import pytest

import sparse_decode
from dsv4_reference import BF16_NAN, assert_matches_exactly_rounded, bf16_bits, decode


def make_case(rng, ranks=3, tokens=5, heads=4, dim=64, dtype="bf16", empty=0.25, empty_token=True, center=0.0):
    """(partials [R, T, H, D] as BF16 bits or float32, lse [R, T, H] float32): lse -inf (and NaN partials)
    on a fraction of (rank, token, head) entries and on one token of every rank."""
    values = rng.standard_normal((ranks, tokens, heads, dim))
    lse = (center + rng.uniform(-6, 6, (ranks, tokens, heads))).astype(np.float32)
    empty_mask = rng.random((ranks, tokens, heads)) < empty
    if empty_token and tokens > 1:
        empty_mask[:, rng.integers(tokens)] = True
    lse[empty_mask] = -np.inf
    if dtype == "bf16":
        partials = bf16_bits(values)
        partials[empty_mask] = BF16_NAN
    else:
        partials = values.astype(np.float32)
        partials[empty_mask] = np.nan
    return partials, lse


def values_of(partials):
    return decode(partials) if partials.dtype == np.uint16 else partials.astype(np.float64)


def expected(partials, lse):
    """(out [T, H, D], L [T, H]) float64: L = log sum_r exp(lse_r), out = sum_r exp(lse_r - L) partial_r over
    the non-empty ranks; zeros and -inf where every rank is empty."""
    x, lse = values_of(partials), lse.astype(np.float64)
    _, tokens, heads, dim = x.shape
    out, total_lse = np.zeros((tokens, heads, dim)), np.full((tokens, heads), -np.inf)
    for t in range(tokens):
        for h in range(heads):
            live = lse[:, t, h] != -np.inf
            if not live.any():
                continue
            shift = lse[live, t, h].max()
            total_lse[t, h] = shift + math.log(np.exp(lse[live, t, h] - shift).sum())
            out[t, h] = (np.exp(lse[live, t, h] - total_lse[t, h])[:, None] * x[live, t, h]).sum(axis=0)
    return out, total_lse


def poisoned_outputs(tokens, heads, dim, out_dtype):
    out = np.full((tokens, heads, dim), BF16_NAN, np.uint16) if out_dtype == "bf16" else np.full(
        (tokens, heads, dim), np.nan, np.float32)
    return out, np.full((tokens, heads), np.nan, np.float32)


def run(partials, lse, out_dtype="bf16", stacked=False):
    _, tokens, heads, dim = partials.shape
    out, out_lse = poisoned_outputs(tokens, heads, dim, out_dtype)
    if stacked:
        sparse_decode.merge_states(partials, lse, out, out_lse=out_lse)
    else:
        sparse_decode.merge_states(list(partials), list(lse), out, out_lse=out_lse)
    return out, out_lse


def check(partials, lse, out, out_lse, seed):
    ref, ref_lse = expected(partials, lse)
    if out.dtype == np.uint16:
        assert_matches_exactly_rounded(out, ref, seed)
    else:
        assert not np.isnan(out).any(), f"seed={seed}: NaN in the output"
        np.testing.assert_allclose(out, ref, rtol=2.0**-23, atol=1e-37, err_msg=f"seed={seed}")
    empty = np.isneginf(ref_lse)
    assert np.all(out[empty].view(np.uint8) == 0), f"seed={seed}: rows empty on every rank are +0.0"
    assert np.array_equal(np.isneginf(out_lse), empty), f"seed={seed}: out_lse -inf pattern"
    np.testing.assert_allclose(out_lse[~empty], ref_lse[~empty], rtol=1e-6, atol=1e-6, err_msg=f"seed={seed}")


@pytest.mark.parametrize("in_dtype", ["bf16", "float32"])
@pytest.mark.parametrize("out_dtype", ["bf16", "float32"])
@pytest.mark.parametrize("stacked", [False, True])
def test_matches_the_spec(rng, seed, in_dtype, out_dtype, stacked):
    partials, lse = make_case(rng, dtype=in_dtype)
    out, out_lse = run(partials, lse, out_dtype, stacked)
    check(partials, lse, out, out_lse, seed)


@pytest.mark.parametrize("ranks, dim", [(1, 8), (2, 512), (9, 128), (64, 16)])
def test_rank_counts_and_head_dims(rng, seed, ranks, dim):
    partials, lse = make_case(rng, ranks=ranks, dim=dim, tokens=3, heads=2)
    check(partials, lse, *run(partials, lse), seed)


def test_large_and_tiny_lse(rng, seed):
    for center in (1e4, -1e4):
        partials, lse = make_case(rng, center=center, dtype="float32")
        check(partials, lse, *run(partials, lse, "float32"), seed)


def test_one_rank_gives_its_partial_back(rng, seed):
    for dtype in ("bf16", "float32"):
        partials, lse = make_case(rng, ranks=1, dtype=dtype, empty=0.0, empty_token=False)
        out, out_lse = run(partials, lse, dtype)
        assert np.array_equal(out.view(np.uint8), partials[0].view(np.uint8)), f"seed={seed}: {dtype}"
        assert np.array_equal(out_lse, lse[0]), f"seed={seed}"


def test_flashinfer_layout_and_head_major_lse(rng, seed):
    """FlashInfer's merge_states takes v [T, R, H, D] and base-2 s [T, R, H]: transposed views and s * ln 2."""
    partials, lse = make_case(rng, ranks=3, tokens=4, heads=5)
    v = np.ascontiguousarray(partials.transpose(1, 0, 2, 3))
    s = np.ascontiguousarray((lse / np.float32(math.log(2))).transpose(1, 0, 2))
    natural = (s * np.float32(math.log(2))).astype(np.float32)
    out, out_lse = poisoned_outputs(4, 5, 64, "bf16")
    head_major_lse = np.full((5, 4), np.nan, np.float32)
    sparse_decode.merge_states(v.transpose(1, 0, 2, 3), natural.transpose(1, 0, 2), out, out_lse=head_major_lse.T)
    listed, listed_lse = run(partials, natural.transpose(1, 0, 2))
    assert np.array_equal(out, listed), f"seed={seed}"
    assert np.array_equal(head_major_lse.T, listed_lse), f"seed={seed}"


def test_tokens_as_requests_and_query_len(rng, seed):
    partials, lse = make_case(rng, tokens=6)
    out, out_lse = run(partials, lse)
    out4, lse4 = poisoned_outputs(6, 4, 64, "bf16")
    sparse_decode.merge_states(
        [p.reshape(2, 3, 4, 64) for p in partials], [s.reshape(2, 3, 4) for s in lse], out4.reshape(2, 3, 4, 64),
        out_lse=lse4.reshape(2, 3, 4),
    )
    assert np.array_equal(out4, out) and np.array_equal(lse4, out_lse), f"seed={seed}"


def test_no_tokens_writes_nothing(rng):
    partials, lse = make_case(rng, tokens=0)
    out, out_lse = poisoned_outputs(0, 4, 64, "bf16")
    sparse_decode.merge_states(list(partials), list(lse), out, out_lse=out_lse)


@pytest.mark.parametrize(
    "edit, error, names",
    [
        (lambda p, s, o: ([x.astype(np.float16) for x in p], s, o), ValueError, "partials[0]"),
        (lambda p, s, o: (p, [s[0], s[1][:, :3], s[2]], o), ValueError, "lses[1]"),
        (lambda p, s, o: (p[:2], s, o), ValueError, "lses"),
        (lambda p, s, o: (p, [x.astype(np.float64) for x in s], o), ValueError, "lses[0]"),
        (lambda p, s, o: ([p[0], np.asfortranarray(p[1]), p[2]], s, o), ValueError, "partials[1]"),
        (lambda p, s, o: ([x[..., :12] for x in p], s, o[..., :12]), ValueError, "head_dim"),
        (lambda p, s, o: (p, s, o.astype(np.float16)), ValueError, "out"),
        (lambda p, s, o: (p, s, o[:4]), ValueError, "tokens"),
        (lambda p, s, o: ([], [], o), ValueError, "partials"),
        (lambda p, s, o: (p[:1] * 65, s[:1] * 65, o), ValueError, "num_ranks"),
        (lambda p, s, o: (np.stack(p), s, o), TypeError, "partials, lses"),
    ],
)
def test_bad_arguments_are_refused_by_name(rng, edit, error, names):
    partials, lse = make_case(rng)
    out, out_lse = poisoned_outputs(5, 4, 64, "bf16")
    p, s, o = edit(list(partials), list(lse), out)
    with pytest.raises(error) as caught:
        sparse_decode.merge_states(p, s, o, out_lse=out_lse)
    assert names in str(caught.value)
    assert np.all(out == BF16_NAN) and np.isnan(out_lse).all(), "a refused call wrote"


@pytest.mark.parametrize("ranks", [2, 3])
def test_decodes_split_across_ranks_with_the_sink_on_one(rng, seed, ranks):
    # Each rank decodes the columns it holds (rank 0 adds the sink term to out and lse, the others none);
    # the merge is the single call with its sinks (docs/spec.md, sections 1 and 5).
    from dsv4_reference import assert_close_l2, make_problem, reference
    from helpers import numpy_kwargs
    from merge_split import SINK_TERMS, held_by, split_problem

    p = make_problem(rng, tokens=9, width=384, seq_lens="varlen")
    parts, whole = split_problem(p, ranks, seed + 1)
    outs, lses = [], []
    for r, part in enumerate(parts):
        out, lse = part.out_like(), part.lse_like()
        sparse_decode.dsv4_decode(**numpy_kwargs(part), out=out, lse=lse, sink_term=SINK_TERMS[r])
        outs.append(out)
        lses.append(lse)
    merged, merged_lse = run(np.stack(outs), np.stack(lses))
    ref_out, ref_lse, _ = reference(p, sink_term="in_output_and_lse")
    assert_close_l2(merged, ref_out, seed)
    assert np.array_equal(np.isneginf(merged_lse), np.isneginf(ref_lse)), f"seed={seed}: lse -inf pattern"
    np.testing.assert_allclose(merged_lse, ref_lse, rtol=1e-5, atol=1e-5, err_msg=f"seed={seed}")
    single, single_lse = p.out_like(), p.lse_like()
    sparse_decode.dsv4_decode(**numpy_kwargs(p), out=single, lse=single_lse, sink_term="in_output_and_lse")
    on_rank0 = whole & held_by(p, parts[0])
    assert np.array_equal(merged[on_rank0], single[on_rank0]), f"seed={seed}: tokens whole on rank 0"
    assert np.array_equal(merged_lse[on_rank0], single_lse[on_rank0]), f"seed={seed}: their lse"


@pytest.mark.parametrize("sink_term", ["in_output", "in_output_and_lse", "none"])
def test_sink_terms_of_every_decode_match_the_reference(rng, seed, sink_term):
    from dsv4_reference import make_problem, reference
    from helpers import numpy_kwargs
    from hca_dsa_reference import hca_kwargs, make_hca_problem
    from packed_reference import make_packed_problem
    from packed_reference import reference as packed_reference

    p = make_problem(rng, tokens=5, width=256)
    p.sinks[0], p.sinks[1] = np.inf, -np.inf  # +-inf sinks
    out, lse = p.out_like(), p.lse_like()
    sparse_decode.dsv4_decode(**numpy_kwargs(p), out=out, lse=lse, sink_term=sink_term)
    ref_out, ref_lse, _ = reference(p, sink_term=sink_term)
    assert_matches_exactly_rounded(out, ref_out, seed)
    assert np.array_equal(np.isinf(lse), np.isinf(ref_lse)), f"seed={seed}: lse inf pattern"
    finite = np.isfinite(ref_lse)
    np.testing.assert_allclose(lse[finite], ref_lse[finite], rtol=1e-6, atol=1e-6, err_msg=f"seed={seed}")

    q = make_packed_problem(rng, tokens=4)
    out, lse = q.out_like(), q.lse_like()
    sparse_decode.dsv4_decode_packed(**q.kwargs(), out=out, lse=lse, sink_term=sink_term)
    ref_out, ref_lse, _ = packed_reference(q, sink_term=sink_term)
    assert_matches_exactly_rounded(out, ref_out, seed)
    finite = np.isfinite(ref_lse)
    assert np.array_equal(np.isinf(lse), np.isinf(ref_lse)), f"seed={seed}: packed lse inf pattern"
    np.testing.assert_allclose(lse[finite], ref_lse[finite], rtol=1e-6, atol=1e-6, err_msg=f"seed={seed}")

    # HCA: "none" is the call without sinks; "in_output_and_lse" adds the sink to the lse of "in_output".
    h = make_hca_problem(rng, tokens=6, q_len=2)
    results = {}
    for term, sinks in (("in_output", h.sinks), (sink_term, h.sinks), ("in_output", None)):
        out, lse = np.full(h.q.shape, BF16_NAN, np.uint16), np.full(h.q.shape[:2], np.nan, np.float32)
        sparse_decode.dsv4_decode_hca(**dict(hca_kwargs(h), sinks=sinks), out=out, lse=lse, sink_term=term)
        results[term if sinks is not None else "no sinks"] = (out, lse)
    out, lse = results[sink_term]
    base_out, base_lse = results["no sinks" if sink_term == "none" else "in_output"]
    assert np.array_equal(out, base_out), f"seed={seed}: HCA out"
    expected = np.logaddexp(base_lse, h.sinks[None, :]) if sink_term == "in_output_and_lse" else base_lse
    np.testing.assert_allclose(lse, expected, rtol=1e-6, atol=1e-6, err_msg=f"seed={seed}: HCA lse")


def test_sink_term_is_refused_by_name(rng):
    from dsv4_reference import make_problem
    from helpers import numpy_kwargs

    p = make_problem(rng, tokens=2)
    with pytest.raises(ValueError, match=r"^sink_term: expected one of 'in_output', 'in_output_and_lse', 'none', "
                                         r"got 'lse'$"):
        sparse_decode.dsv4_decode(**numpy_kwargs(p), out=p.out_like(), sink_term="lse")
