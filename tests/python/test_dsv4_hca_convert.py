"""convert_page_aligned_indices (docs/spec.md section 3) from Python: the
package converter and FlashInfer's, on the CPU (FlashInfer's outputs,
padding and refusals, the round trip through dsv4_decode_hca) and on the
GPU (the device converter against the host's and FlashInfer's rules, in a
captured CUDA graph)."""

import numpy as np
import pytest

import sparse_decode
from hca_dsa_reference import converted, make_canonical_table

# ---------------------------------------------------------------- the converter


def section1_decode(t, **overrides):
    out = np.full(t.q.shape, 0x7FC0, np.uint16)
    count = np.zeros(1, np.int32)
    kwargs = dict(lens=t.lens, seq_lens=t.seq_lens, q_len=t.q_len, sinks=t.sinks, bmm1_scale=t.bmm1_scale,
                  out_of_range_count=count)
    sparse_decode.dsv4_decode(t.q, t.swa, t.comp, t.indices, out, **{**kwargs, **overrides})
    return out, int(count[0])


def convert(t, **overrides):
    kwargs = dict(q_len=t.q_len, page_size=t.page_size, swa_pool_rows=t.swa_rows, compressed_pool_pages=t.pages)
    return sparse_decode.convert_page_aligned_indices(t.indices, t.lens, t.seq_lens, **{**kwargs, **overrides})


def decode_converted(t, metadata):
    swa_rows, swa_lens, block_table, hca_seq_lens = metadata
    out = np.full(t.q.shape, 0x7FC0, np.uint16)
    count = np.zeros(1, np.int32)
    sparse_decode.dsv4_decode_hca(t.q, t.swa, t.comp, swa_rows, swa_lens, block_table, t.lens, hca_seq_lens, out,
                                  q_len=t.q_len, sinks=t.sinks, bmm1_scale=t.bmm1_scale, out_of_range_count=count)
    return out, int(count[0])


@pytest.mark.parametrize("page_size, width, q_len", [(2, 160, 1), (4, 148, 2), (64, 256, 3), (128, 132, 2)])
def test_converter_round_trip(rng, seed, page_size, width, q_len):
    t = make_canonical_table(rng, page_size=page_size, width=width, tokens=6, q_len=q_len)
    metadata = convert(t)
    # FlashInfer's outputs: shapes (the block table's width from seq_lens), values, padding with 0.
    for name, got, expected in zip(("swa_rows", "swa_lens", "block_table", "hca_seq_lens"), metadata, converted(t)):
        assert got.shape == expected.shape and np.array_equal(got, expected), f"seed={seed}: {name}"
    # Decoding the metadata gives section 1's result on the table, bit for bit.
    out, count = decode_converted(t, metadata)
    expected, expected_count = section1_decode(t)
    assert np.array_equal(out, expected), f"seed={seed}: HCA on the converted table differs from section 1"
    assert count == expected_count == 0, f"seed={seed}: out-of-range count"


def test_converter_width_follows_seq_lens_not_the_table(rng, seed):
    t = make_canonical_table(rng, page_size=4, width=148)
    padded = np.full((6, 400), -1, np.int32)
    padded[:, :148] = t.indices
    wide = sparse_decode.convert_page_aligned_indices(padded, t.lens, t.seq_lens, q_len=2, page_size=4)
    assert wide[2].shape == (6, sparse_decode.convert_max_pages(int(t.seq_lens.max()), 4)), f"seed={seed}"
    for got, expected in zip(wide, converted(t)):
        assert np.array_equal(got, expected), f"seed={seed}: a padded table converts the same"
    assert sparse_decode.convert_max_pages(127, 4) == 1 and sparse_decode.convert_max_pages(128, 4) == 32
    assert sparse_decode.convert_max_pages(129 * 128, 64) == 4 and sparse_decode.convert_max_pages(5, 1) == 0


def test_converter_into_preallocated_outputs(rng, seed):
    t = make_canonical_table(rng)
    given = (np.full((6, 132), 9, np.int32)[:, :128], np.full(6, 9, np.int32), np.full((6, 40), 9, np.int32),
             np.full(3, 9, np.int32))
    error = np.full(3, 9, np.int32)
    returned = convert(t, swa_rows=given[0], swa_lens=given[1], block_table=given[2], hca_seq_lens=given[3],
                       error=error)
    assert all(r is g for r, g in zip(returned, given)), "given outputs are returned, not copies"
    for got, expected in zip(given, converted(t, max_pages=40)):
        assert np.array_equal(got, expected), f"seed={seed}"
    assert list(error) == [0, -1, 0], "the report of a table that breaks no rule"


def break_rule(t, rule):
    """The table made to break `rule` (docs/formats/hca_layout.md, "The converter"): (the first refused
    token, the message)."""
    k, n = 3, int(t.visible[3]) // 128
    assert n >= 1, "token 3 has compressed slots (request 1 is a long one)"
    if rule == 1:
        t.seq_lens[1] = 1  # < q_len: token 2 (request 1, index 0) sees no position
        return 2, r"^seq_lens\[1\] = 1: expected >= q_len = 2"
    if rule == 3:
        t.lens[k] += 1
        return k, rf"^lens\[{k}\] = {int(t.lens[k])}: expected 128 \+ floor\(visible / 128\) = {int(t.lens[k]) - 1}"
    if rule == 5:
        t.indices[k, 0] = t.swa_rows
        return k, rf"^indices: token {k} column 0 = {t.swa_rows}: expected a row of the SWA pool"
    if rule == 6:
        t.indices[k, 128:128 + min(n, t.page_size)] += t.pages * t.page_size  # its first page past the pool
        return k, rf"^indices: token {k} column 128 = \d+ is in page \d+: expected a page in \[0, compressed_pool_pages"
    column = 128 + (1 if n >= 2 else 0)
    t.indices[k, column] += 1  # the slot at another offset of its page: not canonical
    return k, rf"^indices: token {k} column {column} = \d+: expected the canonical compressed-page expansion"


@pytest.mark.parametrize("rule", [1, 3, 5, 6, 7])
def test_converter_refuses_what_flashinfer_refuses(rng, seed, rule):
    t = make_canonical_table(rng, page_size=4, width=148)
    token, message = break_rule(t, rule)
    given = [np.full((6, 128), 9, np.int32), np.full(6, 9, np.int32), np.full((6, 32), 9, np.int32),
             np.full(3, 9, np.int32)]
    error = np.full(3, 9, np.int32)
    with pytest.raises(ValueError, match=message):
        convert(t, swa_rows=given[0], swa_lens=given[1], block_table=given[2], hca_seq_lens=given[3], error=error)
    assert all(np.all(a == 9) for a in given), f"seed={seed}: nothing but the report is written"
    assert error[0] >= 1 and error[1] == token and error[2] == rule, f"seed={seed}: report {list(error)}"


def test_converter_errors(rng):
    t = make_canonical_table(rng)
    with pytest.raises(ValueError, match=r"^lens: expected int32"):
        sparse_decode.convert_page_aligned_indices(t.indices, t.lens.astype(np.int64), t.seq_lens, q_len=2,
                                                   page_size=4)
    # The first request that needs more than one page (request 1 is a long one; a
    # short request 0 of 128 or 129 positions needs a tile of 128 slots too).
    first = next(b for b, n in enumerate(t.seq_lens) if sparse_decode.convert_max_pages(int(n), t.page_size) > 1)
    with pytest.raises(ValueError, match=rf"^max_pages: expected >= convert_max_pages\(seq_lens\[{first}\]"):
        convert(t, max_pages=1)
    with pytest.raises(ValueError, match=r"^page_size: expected one of 2, 4, 8, 16, 32, 64, 128"):
        convert(t, page_size=1)
    with pytest.raises(ValueError, match=r"^cum_seq_lens_q: "):
        convert(t, cum_seq_lens_q=np.array([0, 2, 4, 6], np.int32), max_q_len=2, q_len=None)


# ---------------------------------------------------------------- FlashInfer's cute-dsl argument set


@pytest.mark.parametrize("rule, message", [
    (3, r"^sparse_topk_lens\[3\] = \d+: expected 128 \+ floor\(visible / 128\)"),
    (5, r"^sparse_indices: token 3 column 0 = 96: expected a row of the SWA pool in \[0, swa_pool_rows = 96\) "
        r"\(columns c < min\(128, visible\) = \d+ are the active SWA sparse_indices\)$"),
    (6, r"^sparse_indices: token 3 column 128 = \d+ is in page \d+: expected a page in "
        r"\[0, compressed_pool_pages = 12\), the valid physical page IDs of the compressed pool"),
    (7, r"^sparse_indices: token 3 column 12\d = \d+: expected the canonical compressed-page expansion "),
    (1, r"^seq_lens\[1\] = 1: expected >= q_len = 2"),
])
def test_flashinfer_converter_shapes_and_refusals(rng, seed, rule, message):
    torch = pytest.importorskip("torch")
    from helpers import to_torch
    from sparse_decode.flashinfer_compat import convert_compressed_page_aligned_sparse_indices_to_hca_metadata

    t = make_canonical_table(rng, page_size=4, width=148)
    pools = [to_torch(a, element="fp8")[:, :, None] for a in (t.swa, t.comp)]  # NHD
    metadata = convert_compressed_page_aligned_sparse_indices_to_hca_metadata(
        to_torch(t.indices), to_torch(t.lens), to_torch(t.seq_lens), pools[0], pools[1], q_len=2, kv_layout="NHD")
    for got, expected in zip((metadata.hca_swa_indices, metadata.swa_topk_lens, metadata.hca_compressed_block_tables,
                              metadata.hca_seq_lens), converted(t)):
        assert got.shape == expected.shape and np.array_equal(got.numpy(), expected), f"seed={seed}"
    break_rule(t, rule)
    with pytest.raises(ValueError, match=message):
        convert_compressed_page_aligned_sparse_indices_to_hca_metadata(
            to_torch(t.indices), to_torch(t.lens), to_torch(t.seq_lens), pools[0], pools[1], q_len=2,
            kv_layout="NHD")


@pytest.mark.gpu
@pytest.mark.parametrize("page_size, width", [(2, 160), (16, 200), (128, 132)])
def test_gpu_converter_equals_the_host_and_flashinfer(rng, seed, page_size, width):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device (GPU tests run on the H200)")
    from helpers import to_torch

    t = make_canonical_table(rng, page_size=page_size, width=width, tokens=8, q_len=2)
    max_pages = sparse_decode.convert_max_pages(int(t.seq_lens.max()), page_size) + 3  # graph-safe: wider
    outputs = [torch.full(shape, 9, dtype=torch.int32, device="cuda")
               for shape in ((8, 128), (8,), (8, max_pages), (4,))]
    error = torch.full((3,), 9, dtype=torch.int32, device="cuda")
    sparse_decode.convert_page_aligned_indices(
        to_torch(t.indices, "cuda"), to_torch(t.lens, "cuda"), to_torch(t.seq_lens, "cuda"), q_len=2,
        page_size=page_size, swa_pool_rows=t.swa_rows, compressed_pool_pages=t.pages, swa_rows=outputs[0],
        swa_lens=outputs[1], block_table=outputs[2], hca_seq_lens=outputs[3], error=error)
    torch.cuda.synchronize()
    assert error.tolist() == [0, -1, 0], f"seed={seed}: report"
    for got, expected in zip(outputs, converted(t, max_pages=max_pages)):
        assert np.array_equal(got.cpu().numpy(), expected), f"seed={seed}"
    # A refused table: the report names the first token and rule; the outputs stay as they were.
    token, _ = break_rule(t, 7)
    outputs = [torch.full_like(o, 9) for o in outputs]
    sparse_decode.convert_page_aligned_indices(
        to_torch(t.indices, "cuda"), to_torch(t.lens, "cuda"), to_torch(t.seq_lens, "cuda"), q_len=2,
        page_size=page_size, swa_pool_rows=t.swa_rows, compressed_pool_pages=t.pages, swa_rows=outputs[0],
        swa_lens=outputs[1], block_table=outputs[2], hca_seq_lens=outputs[3], error=error)
    torch.cuda.synchronize()
    assert error.tolist()[1:] == [token, 7] and error[0] >= 1, f"seed={seed}: report {error.tolist()}"
    assert all(bool((o == 9).all()) for o in outputs), f"seed={seed}: a refused conversion writes nothing"
    assert sparse_decode.convert_refusal(error.tolist()).startswith(f"indices: token {token} ")


@pytest.mark.gpu
def test_gpu_flashinfer_converter_shapes_refusals_and_decode(rng, seed):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device (GPU tests run on the H200)")
    from helpers import bits, to_torch
    from sparse_decode.flashinfer_compat import (
        convert_compressed_page_aligned_sparse_indices_to_hca_metadata, trtllm_batch_decode_sparse_mla_dsv4)

    t = make_canonical_table(rng, page_size=4, width=148)
    pools = [to_torch(a, "cuda", "fp8")[:, None] for a in (t.swa, t.comp)]  # HND
    indices, lens, seq_lens = (to_torch(a, "cuda") for a in (t.indices, t.lens, t.seq_lens))
    metadata = convert_compressed_page_aligned_sparse_indices_to_hca_metadata(
        indices, lens, seq_lens, pools[0], pools[1], q_len=2, kv_layout="HND")
    for got, expected in zip((metadata.hca_swa_indices, metadata.swa_topk_lens, metadata.hca_compressed_block_tables,
                              metadata.hca_seq_lens), converted(t)):
        assert got.shape == expected.shape and np.array_equal(got.cpu().numpy(), expected), f"seed={seed}"
    common = dict(query=to_torch(t.q, "cuda", "fp8"), swa_kv_cache=pools[0], compressed_kv_cache=pools[1],
                  workspace_buffer=torch.zeros(8 << 20, dtype=torch.uint8, device="cuda"), sparse_topk_lens=lens,
                  bmm1_scale=t.bmm1_scale, sinks=to_torch(t.sinks, "cuda"), kv_layout="HND")
    section1 = trtllm_batch_decode_sparse_mla_dsv4(**common, sparse_indices=indices, seq_lens=seq_lens)
    converted_out = trtllm_batch_decode_sparse_mla_dsv4(**common, sparse_indices=indices, seq_lens=seq_lens,
                                                        backend="cute-dsl",
                                                        hca_sparse_indices_format="compressed-page-aligned")
    explicit = trtllm_batch_decode_sparse_mla_dsv4(**common, backend="cute-dsl", **metadata._asdict())
    torch.cuda.synchronize()
    assert np.array_equal(bits(converted_out), bits(section1)), f"seed={seed}: converted path vs trtllm-gen"
    assert np.array_equal(bits(explicit), bits(section1)), f"seed={seed}: precomputed metadata vs trtllm-gen"
    token, _ = break_rule(t, 5)
    with pytest.raises(ValueError, match=rf"^sparse_indices: token {token} "):
        convert_compressed_page_aligned_sparse_indices_to_hca_metadata(
            to_torch(t.indices, "cuda"), lens, seq_lens, pools[0], pools[1], q_len=2, kv_layout="HND")


@pytest.mark.gpu
def test_gpu_converter_in_a_captured_cuda_graph(rng, seed):
    # The package converter reads nothing on the host inside a capture: a replay converts new tables in
    # place. FlashInfer's converter and the converting decode refuse a capture (RuntimeError, as there).
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device (GPU tests run on the H200)")
    from helpers import to_torch
    from sparse_decode.flashinfer_compat import (
        convert_compressed_page_aligned_sparse_indices_to_hca_metadata, trtllm_batch_decode_sparse_mla_dsv4)

    t = make_canonical_table(rng, page_size=8, width=200, tokens=8, q_len=2)
    inputs = [to_torch(a, "cuda") for a in (t.indices, t.lens, t.seq_lens)]
    max_pages = sparse_decode.convert_max_pages((200 - 128) * 128 + 127, 8)
    outputs = [torch.full(shape, 9, dtype=torch.int32, device="cuda")
               for shape in ((8, 128), (8,), (8, max_pages), (4,))]
    error = torch.full((3,), 9, dtype=torch.int32, device="cuda")
    pools = [to_torch(a, "cuda", "fp8") for a in (t.swa, t.comp)]
    query = to_torch(t.q, "cuda", "fp8")  # every tensor exists before the capture
    out = torch.empty((8, t.q.shape[1], 512), dtype=torch.bfloat16, device="cuda")
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(stream):
        with torch.cuda.graph(graph, stream=stream):
            sparse_decode.convert_page_aligned_indices(
                *inputs, q_len=2, page_size=8, swa_pool_rows=t.swa_rows, compressed_pool_pages=t.pages,
                swa_rows=outputs[0], swa_lens=outputs[1], block_table=outputs[2], hca_seq_lens=outputs[3],
                error=error)
            with pytest.raises(RuntimeError, match=r"^sparse_indices: .*not CUDA Graph capture safe"):
                convert_compressed_page_aligned_sparse_indices_to_hca_metadata(
                    *inputs, pools[0], pools[1], q_len=2, kv_layout="NHD")
            with pytest.raises(RuntimeError, match=r"^hca_sparse_indices_format: .*not CUDA Graph capture safe"):
                trtllm_batch_decode_sparse_mla_dsv4(
                    query, pools[0], None, sparse_indices=inputs[0],
                    compressed_kv_cache=pools[1], sparse_topk_lens=inputs[1], seq_lens=inputs[2], out=out,
                    kv_layout="NHD", backend="cute-dsl", hca_sparse_indices_format="compressed-page-aligned")
    for _ in range(2):  # new tables, the same tensors
        fresh = make_canonical_table(rng, page_size=8, width=200, tokens=8, q_len=2)
        for tensor, array in zip(inputs, (fresh.indices, fresh.lens, fresh.seq_lens)):
            tensor.copy_(torch.from_numpy(array))
        graph.replay()
        torch.cuda.synchronize()
        assert error.tolist() == [0, -1, 0], f"seed={seed}: report"
        expected = converted(fresh, max_pages=max_pages)
        for got, want in zip(outputs, expected):
            assert np.array_equal(got.cpu().numpy(), want), f"seed={seed}: package converter"
