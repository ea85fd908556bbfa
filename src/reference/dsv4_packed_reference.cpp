#include "reference/dsv4_packed_reference.h"

#include <vector>

#include "reference/formats.h"

namespace sparse_decode::reference {
namespace {

const PackedSegment* segment_of(const Dsv4PackedDecodeArgs& args, PackedSegmentId id) {
  if (id == PackedSegmentId::kSwa) return &args.swa;
  return args.extra.given() ? &args.extra : nullptr;
}

}  // namespace

// Page p starts at p * page_stride; its slots' data rows come first, then
// their scale rows, so the scales of slot j sit after all page_size data rows.
const uint8_t* packed_row_data(const PackedPool& pool, int64_t row) {
  return pool.data + (row / pool.page_size) * pool.page_stride + (row % pool.page_size) * kPackedDataBytes;
}

const uint8_t* packed_row_scales(const PackedPool& pool, int64_t row) {
  return pool.data + (row / pool.page_size) * pool.page_stride + pool.page_size * kPackedDataBytes +
         (row % pool.page_size) * kPackedScaleBytes;
}

void decode_packed_row(const PackedPool& pool, int64_t row, double* out) {
  const uint8_t* data = packed_row_data(pool, row);
  const uint8_t* scales = packed_row_scales(pool, row);
  // Exact in double: an E4M3 value has 4 significant bits and the scale is a
  // power of two within double's range.
  for (int d = 0; d < kPackedFp8Dims; ++d) out[d] = decode_e4m3(data[d]) * decode_ue8m0(scales[d / kPackedTileDims]);
  for (int d = kPackedFp8Dims; d < kHeadDim; ++d) {
    const uint8_t* bytes = data + kPackedFp8Dims + 2 * (d - kPackedFp8Dims);
    out[d] = decode_bf16(static_cast<uint16_t>(bytes[0] | bytes[1] << 8));  // little-endian
  }
}

PackedColumnState dsv4_packed_column(const Dsv4PackedDecodeArgs& args, PackedSegmentId id, int64_t token,
                                     int32_t column) {
  PackedColumnState state;
  const PackedSegment* segment = segment_of(args, id);
  if (segment == nullptr || column >= segment->width) return state;
  if (segment->lens && column >= segment->lens[token]) return state;
  const int32_t index = segment->indices[token * segment->indices_stride + column];
  if (index < 0) return state;
  if (index >= segment->pool.rows()) {
    state.out_of_range = true;
    return state;
  }
  state.active = true;
  state.row = index;
  return state;
}

Dsv4Result dsv4_decode_packed(const Dsv4PackedDecodeArgs& args) {
  // The token's active rows of both segments, SWA first.
  auto gather = [&](int64_t t, std::vector<double>& kv) {
    int64_t out_of_range = 0;
    for (PackedSegmentId id : {PackedSegmentId::kSwa, PackedSegmentId::kExtra}) {
      const PackedSegment* segment = segment_of(args, id);
      if (segment == nullptr) continue;
      for (int32_t c = 0; c < segment->width; ++c) {
        const PackedColumnState column = dsv4_packed_column(args, id, t, c);
        out_of_range += column.out_of_range;
        if (!column.active) continue;
        kv.resize(kv.size() + kHeadDim);
        decode_packed_row(segment->pool, column.row, &kv[kv.size() - kHeadDim]);
      }
    }
    return out_of_range;
  };
  auto load_q = [&](int64_t t, int h, double* q) {
    const uint16_t* q_row = static_cast<const uint16_t*>(args.q) + t * args.q_token_stride + h * args.q_head_stride;
    for (int d = 0; d < kHeadDim; ++d) q[d] = decode_bf16(q_row[d]);
  };
  // Section 2 is section 1 with bmm1 = softmax_scale and bmm2 = 1.
  return attend_tokens(args.num_tokens, args.num_heads, args.softmax_scale, 1.0, args.sinks, gather, load_q);
}

void dsv4_decode_packed_host(const Dsv4PackedDecodeArgs& args) {
  write_host_outputs(dsv4_decode_packed(args), args.num_tokens, args.num_heads, args.out, args.out_token_stride,
                     args.out_head_stride, args.lse, args.lse_token_stride, args.out_of_range_count);
}

}  // namespace sparse_decode::reference
