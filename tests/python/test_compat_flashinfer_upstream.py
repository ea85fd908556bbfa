"""The FlashInfer drop-in against FlashInfer's documented contract for DeepSeek-V4: its refusals carry
FlashInfer's phrase (what a caller's `pytest.raises(..., match=...)` looks for) after the argument's
name, with FlashInfer's exception type; and the trtllm-gen set's index arguments for strided pools
(remapped_sparse_indices_buffer, sparse_indices_are_storage_offsets).

Written from FlashInfer's signatures, documentation and messages; CPU tensors (the refusals happen
before anything runs), except where a CUDA device is needed.
"""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import compat_args  # noqa: E402
from dsv4_reference import (  # noqa: E402
    assert_matches_exactly_rounded, make_problem, reference, token_positions)
from hca_dsa_reference import make_canonical_table, make_hca_problem  # noqa: E402
from helpers import bits, to_torch  # noqa: E402
from packed_reference import make_packed_problem  # noqa: E402
from sparse_decode.flashinfer_compat import (  # noqa: E402
    convert_compressed_page_aligned_sparse_indices_to_hca_metadata,
    trtllm_batch_decode_sparse_mla_dsv4,
)

I32 = torch.int32
REMAP_ARGUMENTS = ("remapped_sparse_indices_buffer", "sparse_indices_are_storage_offsets")


def poisoned_like(query):
    return torch.full(query.shape, float("nan"), dtype=torch.bfloat16, device=query.device)


def refused(call, args, exception, name, phrase):
    """call(**args) raises `exception` whose message starts with `name` and holds FlashInfer's `phrase`
    (a regex, searched as pytest.raises(match=) searches); a given out stays untouched."""
    out = args.get("out")
    with pytest.raises(exception, match=phrase) as caught:
        call(**args)
    assert str(caught.value).startswith(f"{name}: "), str(caught.value)
    if out is not None:
        assert torch.isnan(out.float()).all(), "nothing is written when a call is refused"


def cute_dsl(rng):
    args = compat_args.flashinfer_cute_dsl(make_hca_problem(rng, layout="HND", tokens=6, q_len=2))
    return dict(args, out=poisoned_like(args["query"]))


def packed(rng):
    args = compat_args.flashinfer_sparse(make_packed_problem(rng))
    return dict(args, out=poisoned_like(args["query"]))


def table(rng):
    """A table FlashInfer's conversion accepts (3 requests of q_len 2; request 1 long: token 3 has
    compressed slots), its converter arguments, and the converting decode's arguments."""
    t = make_canonical_table(rng, page_size=4, width=148)
    assert int(t.visible[3]) // 128 >= 1
    pools = [to_torch(a, element="fp8")[:, None] for a in (t.swa, t.comp)]  # HND
    conv = dict(sparse_indices=to_torch(t.indices), sparse_topk_lens=to_torch(t.lens), seq_lens=to_torch(t.seq_lens),
                swa_kv_cache=pools[0], compressed_kv_cache=pools[1], q_len=t.q_len)
    query = to_torch(t.q, element="fp8").reshape(3, 2, 16, 512)
    tagged = dict(query=query, swa_kv_cache=pools[0], workspace_buffer=torch.zeros(16, dtype=torch.uint8),
                  sparse_indices=conv["sparse_indices"], compressed_kv_cache=pools[1],
                  sparse_topk_lens=conv["sparse_topk_lens"], seq_lens=conv["seq_lens"], out=poisoned_like(query),
                  backend="cute-dsl", hca_sparse_indices_format="compressed-page-aligned")
    return t, conv, tagged


# ---------------------------------------------------------------- index arguments of the trtllm-gen set


@pytest.mark.parametrize("argument", REMAP_ARGUMENTS)
@pytest.mark.parametrize("argument_set", ["cute-dsl", "sparse"])
def test_other_sets_refuse_the_index_arguments(rng, argument_set, argument):
    # FlashInfer: "backend='cute-dsl' does not accept ..." (ValueError); False is refused as True is.
    args = {"cute-dsl": cute_dsl, "sparse": packed}[argument_set](rng)
    args[argument] = torch.empty((1, 128), dtype=I32) if argument == REMAP_ARGUMENTS[0] else False
    refused(trtllm_batch_decode_sparse_mla_dsv4, args, ValueError, argument,
            rf"backend='{argument_set}' does not accept {argument} \(an argument of the trtllm-gen set")


def padded_problem(rng, layout, dtype="fp8"):
    """A problem whose pools are strided: 3 NaN rows after each page, 32 NaN elements after each row."""
    return make_problem(rng, layout=layout, dtype=dtype, tokens=6, seq_lens="uniform", q_len=2, q4d=True,
                        page_pad=3, row_pad=32)


def storage_offsets(p, page_pad=3):
    """The problem's logical indices as storage rows: row r of page r / page_size sits at
    (r / page_size) * (page_size + page_pad) + r % page_size row strides from the pool's start."""
    ps = p.swa_kv.shape[2] if p.layout == "HND" else p.swa_kv.shape[1]
    i = p.indices.astype(np.int64)
    return np.where(i < 0, i, i // ps * (ps + page_pad) + i % ps).astype(np.int32)


@pytest.mark.parametrize("layout, dtype", [("HND", "fp8"), ("NHD", "bf16")])
def test_storage_offsets_read_strided_pools_where_they_are(rng, seed, layout, dtype):
    p = padded_problem(rng, layout, dtype)
    args = compat_args.flashinfer_trtllm_gen(p)
    expected = reference(p)[0].reshape(p.q.shape)
    logical = trtllm_batch_decode_sparse_mla_dsv4(**args, out=poisoned_like(args["query"]))
    assert_matches_exactly_rounded(bits(logical), expected, seed)
    for flag in (None, False):  # logical rows: FlashInfer's False
        out = trtllm_batch_decode_sparse_mla_dsv4(**args, out=poisoned_like(args["query"]),
                                                  sparse_indices_are_storage_offsets=flag)
        assert np.array_equal(bits(out), bits(logical)), f"seed={seed}: sparse_indices_are_storage_offsets={flag}"
    # The same rows named by storage offset: the padding rows (NaN) between pages are never read, and
    # offsets past the pool's last row (the logical ones past it) stay out of range.
    stored = dict(args, sparse_indices=to_torch(storage_offsets(p)))
    out = trtllm_batch_decode_sparse_mla_dsv4(**stored, out=poisoned_like(args["query"]),
                                              sparse_indices_are_storage_offsets=True)
    assert np.array_equal(bits(out), bits(logical)), f"seed={seed}: storage offsets vs logical rows"


def test_storage_offsets_on_tight_pools_are_the_logical_rows(rng, seed):
    p = make_problem(rng, layout="HND", tokens=6, seq_lens="uniform", q_len=2, q4d=True)
    args = compat_args.flashinfer_trtllm_gen(p)
    logical = trtllm_batch_decode_sparse_mla_dsv4(**args, out=poisoned_like(args["query"]))
    stored = trtllm_batch_decode_sparse_mla_dsv4(**args, out=poisoned_like(args["query"]),
                                                 sparse_indices_are_storage_offsets=True)
    assert np.array_equal(bits(stored), bits(logical)), f"seed={seed}"
    assert_matches_exactly_rounded(bits(stored), reference(p)[0].reshape(p.q.shape), seed)


def test_a_storage_offset_names_the_row_at_that_many_row_strides(rng, seed):
    # A row between pages (page padding) is a row of the storage: an offset that names it reads it.
    p = padded_problem(rng, "HND")
    args = compat_args.flashinfer_trtllm_gen(p)
    ps, pool_rows = p.swa_kv.shape[2], p.swa_kv.shape[0] * p.swa_kv.shape[2]
    positions = token_positions(p)
    active = [(t, c) for t in range(p.tokens) for c in range(min(128, int(p.lens[t]), int(positions[t]) + 1))
              if 0 <= p.indices[t, c] < pool_rows]
    assert active, f"seed={seed}: the problem has an active SWA column"
    row = int(p.indices[active[0]])  # a logical row an active column reads
    storage = args["swa_kv_cache"]
    rows = storage.as_strided((storage.shape[0] * (ps + 3), 512), (storage.stride(2), 1)).view(torch.uint8)
    gap = ps  # the first padding row after page 0: NaN until written
    indices = storage_offsets(p)
    swa = indices[:, :128]
    swa[swa == row // ps * (ps + 3) + row % ps] = gap
    stored = dict(args, sparse_indices=to_torch(indices))
    rows[gap].copy_(rows[row // ps * (ps + 3) + row % ps])  # the padding row holds the logical row's data
    out = trtllm_batch_decode_sparse_mla_dsv4(**stored, out=poisoned_like(args["query"]),
                                              sparse_indices_are_storage_offsets=True)
    assert_matches_exactly_rounded(bits(out), reference(p)[0].reshape(p.q.shape), seed)
    rows[gap].fill_(0x7F)  # FP8 NaN: the output shows that the padding row is read
    out = trtllm_batch_decode_sparse_mla_dsv4(**stored, out=poisoned_like(args["query"]),
                                              sparse_indices_are_storage_offsets=True)
    assert torch.isnan(out.float()).any(), f"seed={seed}: the offset {gap} is read"


def test_remapped_sparse_indices_buffer_is_accepted_and_never_written(rng, seed):
    p = padded_problem(rng, "HND")
    args = compat_args.flashinfer_trtllm_gen(p)
    logical = trtllm_batch_decode_sparse_mla_dsv4(**args, out=poisoned_like(args["query"]))
    buffer = torch.full(tuple(args["sparse_indices"].shape), 7, dtype=I32)
    for flag in (False, True):
        given = dict(args, sparse_indices=to_torch(storage_offsets(p))) if flag else args
        out = trtllm_batch_decode_sparse_mla_dsv4(**given, out=poisoned_like(args["query"]),
                                                  remapped_sparse_indices_buffer=buffer,
                                                  sparse_indices_are_storage_offsets=flag)
        assert np.array_equal(bits(out), bits(logical)), f"seed={seed}: storage offsets {flag}"
        assert bool((buffer == 7).all()), "no remap is needed: the buffer is not written"


@pytest.mark.parametrize("value, exception, message", [
    (1, TypeError, r"^sparse_indices_are_storage_offsets: expected True, False or None, got int$"),
    ("yes", TypeError, r"^sparse_indices_are_storage_offsets: expected True, False or None, got str$"),
])
def test_storage_offsets_flag_is_a_bool(rng, value, exception, message):
    p = make_problem(rng, layout="HND", tokens=6, seq_lens="uniform", q_len=2, q4d=True)
    args = compat_args.flashinfer_trtllm_gen(p)
    with pytest.raises(exception, match=message):
        trtllm_batch_decode_sparse_mla_dsv4(**args, sparse_indices_are_storage_offsets=value)


def test_remapped_sparse_indices_buffer_is_a_tensor(rng):
    p = make_problem(rng, layout="HND", tokens=6, seq_lens="uniform", q_len=2, q4d=True)
    with pytest.raises(TypeError, match=r"^remapped_sparse_indices_buffer: expected a torch\.Tensor or None, "
                                        r"got list$"):
        trtllm_batch_decode_sparse_mla_dsv4(**compat_args.flashinfer_trtllm_gen(p),
                                            remapped_sparse_indices_buffer=[0, 1])


# ---------------------------------------------------------------- HCA: FlashInfer's phrases


@pytest.mark.parametrize("entry", ["converter", "decode"])
@pytest.mark.parametrize("breaks, phrase", [
    ("window row past the pool", r"active SWA sparse_indices"),
    ("slot not the canonical expansion", r"canonical compressed-page expansion"),
    ("page past the pool", r"valid physical page IDs"),
])
def test_converter_refusals_carry_flashinfers_phrases(rng, entry, breaks, phrase):
    t, conv, tagged = table(rng)
    n = int(t.visible[3]) // 128
    indices = conv["sparse_indices"]
    if breaks == "window row past the pool":
        indices[1, 0] = t.swa_rows
    elif breaks == "slot not the canonical expansion":
        indices[3, 128 + (1 if n >= 2 else 0)] += 1
    else:
        indices[3, 128:128 + min(n, t.page_size)] += t.pages * t.page_size  # still canonical, past the pool
    if entry == "converter":
        refused(convert_compressed_page_aligned_sparse_indices_to_hca_metadata, conv, ValueError, "sparse_indices",
                phrase)
    else:
        refused(trtllm_batch_decode_sparse_mla_dsv4, tagged, ValueError, "sparse_indices", phrase)


def test_seq_lens_of_another_batch_is_refused_with_flashinfers_phrase(rng):
    _, conv, tagged = table(rng)
    refused(trtllm_batch_decode_sparse_mla_dsv4, dict(tagged, seq_lens=conv["seq_lens"][:1].clone()), ValueError,
            "seq_lens", r"seq_lens with 3 entries")
    refused(convert_compressed_page_aligned_sparse_indices_to_hca_metadata,
            dict(conv, seq_lens=conv["seq_lens"][:2].clone()), ValueError, "seq_lens", r"seq_lens with 3 entries")


@pytest.mark.parametrize("name", ["swa_kv_cache", "compressed_kv_cache"])
def test_converter_caches_on_another_device_carry_flashinfers_phrase(rng, name):
    _, conv, _ = table(rng)
    elsewhere = torch.empty(conv[name].shape, dtype=conv[name].dtype, device="meta")  # stands in for CUDA
    refused(convert_compressed_page_aligned_sparse_indices_to_hca_metadata, dict(conv, **{name: elsewhere}),
            ValueError, name, rf"{name} must be on cpu")


@pytest.mark.parametrize("backend_set, change, name, phrase", [
    ("cute-dsl", "sparse_indices", "sparse_indices", r"sparse_indices must be None"),
    ("cute-dsl", dict(hca_is_causal=False), "hca_is_causal", r"supports causal HCA only"),
    ("cute-dsl", "seq_lens", "seq_lens", r"uses hca_seq_lens"),
    ("cute-dsl", dict(hca_sparse_indices_format="page-aligned"), "hca_sparse_indices_format",
     r"compressed-page-aligned"),
    ("trtllm-gen", "hca_swa_indices", "hca_swa_indices", r"does not accept hca_swa_indices"),
    ("trtllm-gen", dict(hca_is_causal=False), "hca_is_causal", r"does not accept hca_is_causal"),
])
def test_hca_refusals_carry_flashinfers_phrases(rng, backend_set, change, name, phrase):
    args = cute_dsl(rng)
    rows = args["query"].shape[0] * args["query"].shape[1]
    if backend_set == "trtllm-gen":
        # FlashInfer's case: a trtllm-gen call that also passes HCA arguments.
        args = dict(args, backend="trtllm-gen", sparse_indices=torch.zeros((rows, 256), dtype=I32),
                    swa_topk_lens=None)
        if name == "hca_is_causal":
            args.update(hca_swa_indices=None, hca_compressed_block_tables=None, hca_seq_lens=None)
    if isinstance(change, str):
        change = {change: torch.zeros((rows, 256) if change == "sparse_indices" else (rows // 2,), dtype=I32)}
    refused(trtllm_batch_decode_sparse_mla_dsv4, {**args, **change}, ValueError, name, phrase)


def test_converting_inside_a_cuda_graph_capture_is_refused(rng, monkeypatch):
    # FlashInfer: "not CUDA Graph capture safe" (RuntimeError) from the converter and from the decode
    # that converts. Stood in for on the CPU by a capture the checks believe in.
    _, conv, tagged = table(rng)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: True)
    refused(convert_compressed_page_aligned_sparse_indices_to_hca_metadata, conv, RuntimeError, "sparse_indices",
            r"not CUDA Graph capture safe")
    refused(trtllm_batch_decode_sparse_mla_dsv4, tagged, RuntimeError, "hca_sparse_indices_format",
            r"not CUDA Graph capture safe")


def test_explicit_metadata_runs_while_capturing(rng, seed, monkeypatch):
    # Only the converting paths are refused: the explicit HCA metadata allocates and reads nothing.
    args = cute_dsl(rng)
    expected = trtllm_batch_decode_sparse_mla_dsv4(**dict(args, out=poisoned_like(args["query"])))
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: True)
    out = trtllm_batch_decode_sparse_mla_dsv4(**args)
    assert np.array_equal(bits(out), bits(expected)), f"seed={seed}"


# ---------------------------------------------------------------- SM120 packed set


def test_packed_set_refuses_an_fp8_query_with_flashinfers_phrase(rng):
    args = packed(rng)
    fp8 = dict(args, query=args["query"].to(torch.float8_e4m3fn))
    refused(trtllm_batch_decode_sparse_mla_dsv4, fp8, ValueError, "query", r"only supports BF16 query")
