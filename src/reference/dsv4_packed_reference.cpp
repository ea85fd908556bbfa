#include "reference/dsv4_packed_reference.h"

#include <limits>
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
  const int64_t T = args.num_tokens;
  const int H = args.num_heads;
  const double inf = std::numeric_limits<double>::infinity();

  Dsv4Result result;
  result.out.assign(static_cast<size_t>(T) * H * kHeadDim, 0.0);
  result.lse.assign(static_cast<size_t>(T) * H, -inf);

  std::vector<double> q(kHeadDim), kv;
  for (int64_t t = 0; t < T; ++t) {
    // Decode the token's active rows of both segments once; every head reads them.
    kv.clear();
    for (PackedSegmentId id : {PackedSegmentId::kSwa, PackedSegmentId::kExtra}) {
      const PackedSegment* segment = segment_of(args, id);
      if (segment == nullptr) continue;
      for (int32_t c = 0; c < segment->width; ++c) {
        const PackedColumnState column = dsv4_packed_column(args, id, t, c);
        result.out_of_range += column.out_of_range;
        if (!column.active) continue;
        kv.resize(kv.size() + kHeadDim);
        decode_packed_row(segment->pool, column.row, &kv[kv.size() - kHeadDim]);
      }
    }
    const size_t active = kv.size() / kHeadDim;
    if (active == 0) continue;  // zeros and lse = -inf, with or without a sink

    const auto* q_bits = static_cast<const uint16_t*>(args.q);
    for (int h = 0; h < H; ++h) {
      const uint16_t* q_row = q_bits + t * args.q_token_stride + h * args.q_head_stride;
      for (int d = 0; d < kHeadDim; ++d) q[d] = decode_bf16(q_row[d]);
      const double sink = args.sinks ? args.sinks[h] : -inf;
      const size_t row = static_cast<size_t>(t) * H + h;
      // Section 2 is section 1 with bmm1 = softmax_scale and bmm2 = 1.
      result.lse[row] = attend(q.data(), kv.data(), active, args.softmax_scale, 1.0, sink, &result.out[row * kHeadDim]);
    }
  }
  return result;
}

void dsv4_decode_packed_host(const Dsv4PackedDecodeArgs& args) {
  write_host_outputs(dsv4_decode_packed(args), args.num_tokens, args.num_heads, args.out, args.out_token_stride,
                     args.out_head_stride, args.lse, args.lse_token_stride, args.out_of_range_count);
}

}  // namespace sparse_decode::reference
