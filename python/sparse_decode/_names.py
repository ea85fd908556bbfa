"""Each entry point's argument names, for the refusals it raises (see _errors.py).

Package functions rename the library's fields (the C++ argument structs) to
their own arguments; a drop-in renames the package function's arguments it
calls to the upstream signature's. A name an entry does not know is left as
it is.
"""

from __future__ import annotations

from ._errors import AssertionRefusal, CheckRefusal, Entry, register

# ---------------------------------------------------------------- package functions

_DSV4_COMMON = ("q", "out", "sinks", "sink_term", "lse", "out_of_range_count", "enable_pdl", "workspace", "stream")
_REQUESTS = ("cum_seq_lens_q", "q_len", "max_q_len")
_SHARED = {"num_heads": "q (heads)", "num_tokens": "q (tokens)", "workspace_bytes": "workspace"}

register(
    "dsv4_decode",
    Entry(
        _DSV4_COMMON + _REQUESTS
        + ("swa_kv", "compressed_kv", "indices", "lens", "seq_lens", "bmm1_scale", "bmm2_scale", "page_layout"),
        {**_SHARED, "width": "indices (width)", "num_requests": "seq_lens"},
    ),
)

register(
    "dsv4_decode_packed",
    Entry(
        _DSV4_COMMON + _REQUESTS
        + ("swa_cache", "swa_indices", "swa_lens", "extra_cache", "extra_indices", "extra_lens", "seq_lens",
           "softmax_scale"),
        {
            **_SHARED,
            "num_requests": "seq_lens",
            **{f"{segment}.indices_request_stride": f"{segment}_indices (request stride)"
               for segment in ("swa", "extra")},
            **{f"{segment}.lens_{kind}_stride": f"{segment}_lens ({kind} stride)"
               for segment in ("swa", "extra") for kind in ("token", "request")},
            **{
                f"{segment}.{field}": f"{segment}_{argument}"
                for segment in ("swa", "extra")
                for field, argument in (("pool", "cache"), ("indices", "indices"), ("lens", "lens"))
            },
            **{f"{segment}.width": f"{segment}_indices (width)" for segment in ("swa", "extra")},
            **{f"{segment}.indices_stride": f"{segment}_indices (row stride)" for segment in ("swa", "extra")},
        },
    ),
)

register(
    "dsv4_decode_hca",
    Entry(
        _DSV4_COMMON + _REQUESTS
        + ("swa_kv", "compressed_kv", "swa_rows", "swa_lens", "block_table", "lens", "hca_seq_lens", "bmm1_scale",
           "bmm2_scale", "page_layout"),
        {**_SHARED, "num_requests": "hca_seq_lens", "max_pages": "block_table (width)"},
    ),
)

register(
    "convert_page_aligned_indices",
    Entry(
        _REQUESTS
        + ("indices", "lens", "seq_lens", "page_size", "swa_pool_rows", "compressed_pool_pages", "max_pages",
           "swa_rows", "swa_lens", "block_table", "hca_seq_lens", "error", "stream"),
        {"num_tokens": "indices (rows)", "width": "indices (width)", "num_requests": "seq_lens"},
    ),
)

register(
    "dsa_decode",
    Entry(
        ("q", "cache", "regions", "block_table", "positions", "active", "out", "scale", "query_len", "splits",
         "clear_inactive", "k_scale", "v_scale", "gate", "enable_pdl", "workspace", "stream"),
        {
            "num_rows": "q (rows)",
            "num_heads": "q (heads)",
            "num_groups": "cache (groups)",
            "block_size": "cache (block size)",
            "num_pages": "cache (page count)",
            "cache_dtype": "cache",
            "num_regions": "regions (width)",
            "max_blocks": "block_table (width)",
            "num_requests": "block_table (rows)",
            "gate_dtype": "gate",
            "workspace_bytes": "workspace",
        },
    ),
)

# ---------------------------------------------------------------- drop-ins

# flashinfer.mla.trtllm_batch_decode_sparse_mla_dsv4 (FlashInfer raises ValueError for bad arguments).
FLASHINFER_ARGUMENTS = (
    "query", "swa_kv_cache", "workspace_buffer", "sparse_indices", "compressed_kv_cache", "sparse_topk_lens",
    "seq_lens", "out", "bmm1_scale", "bmm2_scale", "sinks", "kv_layout", "cum_seq_lens_q", "max_q_len",
    "enable_pdl", "swa_topk_lens", "extra_sparse_indices", "extra_sparse_topk_lens", "backend", "hca_swa_indices",
    "hca_compressed_block_tables", "hca_seq_lens", "hca_is_causal", "hca_use_persistent",
    "hca_sparse_indices_format", "remapped_sparse_indices_buffer", "sparse_indices_are_storage_offsets",
)
_FLASHINFER_COMMON = {"q": "query", "q_len": "query (q_len, dim 1)", "workspace": "workspace_buffer",
                      "page_layout": "kv_layout"}

register(
    "flashinfer.trtllm-gen",
    Entry(
        FLASHINFER_ARGUMENTS,
        {**_FLASHINFER_COMMON, "swa_kv": "swa_kv_cache", "compressed_kv": "compressed_kv_cache",
         "indices": "sparse_indices", "lens": "sparse_topk_lens"},
        in_text=True,
    ),
)

register(
    "flashinfer.sparse",
    Entry(
        FLASHINFER_ARGUMENTS,
        {**_FLASHINFER_COMMON, "swa_cache": "swa_kv_cache", "swa_indices": "sparse_indices",
         "swa_lens": "swa_topk_lens", "extra_cache": "compressed_kv_cache", "extra_indices": "extra_sparse_indices",
         "extra_lens": "extra_sparse_topk_lens", "softmax_scale": "bmm1_scale"},
        in_text=True,
    ),
)

register(
    "flashinfer.cute-dsl",
    Entry(
        FLASHINFER_ARGUMENTS,
        {**_FLASHINFER_COMMON, "swa_kv": "swa_kv_cache", "compressed_kv": "compressed_kv_cache",
         "swa_rows": "hca_swa_indices", "swa_lens": "swa_topk_lens", "block_table": "hca_compressed_block_tables",
         "lens": "sparse_topk_lens"},
        in_text=True,
    ),
)

_FLASHINFER_CONVERT = {
    "indices": "sparse_indices",
    "lens": "sparse_topk_lens",
    "page_size": "compressed_kv_cache (page size)",
    "swa_pool_rows": "swa_kv_cache (rows)",
    "compressed_pool_pages": "compressed_kv_cache (pages)",
    "convert_page_aligned_indices": "convert_compressed_page_aligned_sparse_indices_to_hca_metadata",
}

# convert_compressed_page_aligned_sparse_indices_to_hca_metadata(..., q_len=...).
register(
    "flashinfer.convert",
    Entry(("sparse_indices", "sparse_topk_lens", "seq_lens", "swa_kv_cache", "compressed_kv_cache", "q_len",
           "kv_layout"), _FLASHINFER_CONVERT, in_text=True),
)

# The same conversion inside the decode (hca_sparse_indices_format="compressed-page-aligned").
register(
    "flashinfer.convert-tagged",
    Entry(FLASHINFER_ARGUMENTS, {**_FLASHINFER_CONVERT, "q_len": "query (q_len, dim 1)",
                                 "convert_page_aligned_indices": "hca_sparse_indices_format"}, in_text=True),
)

# flash_mla.flash_mla_with_kvcache: its C++ checks (TORCH_CHECK) raise RuntimeError.
FLASHMLA_ARGUMENTS = (
    "q", "k_cache", "block_table", "cache_seqlens", "head_dim_v", "tile_scheduler_metadata", "num_splits",
    "softmax_scale", "causal", "is_fp8_kvcache", "indices", "attn_sink", "extra_k_cache", "extra_indices_in_kvcache",
    "topk_length", "extra_topk_length", "descale_q", "descale_k",
)

register(
    "flashmla",
    Entry(
        FLASHMLA_ARGUMENTS,
        {"swa_cache": "k_cache", "swa_indices": "indices", "swa_lens": "topk_length", "extra_cache": "extra_k_cache",
         "extra_indices": "extra_indices_in_kvcache", "extra_lens": "extra_topk_length", "sinks": "attn_sink"},
        refusal=CheckRefusal,
        in_text=True,
    ),
)

# vllm.models.step5.nvidia.ops.sparse_decode_attention (seed 002) asserts on its arguments.
register(
    "step5",
    Entry(
        ("query", "cache", "regions", "block_table", "positions", "active", "output", "scale", "query_len", "splits",
         "clear_inactive", "k_scale", "v_scale", "gate"),
        {"q": "query", "out": "output"},
        refusal=AssertionRefusal,
        in_text=True,
    ),
)
