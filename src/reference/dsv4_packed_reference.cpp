#include "reference/dsv4_packed_reference.h"

#include <algorithm>
#include <vector>

#include "reference/formats.h"
#include "reference/requests.h"

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

int64_t dsv4_packed_window(const Dsv4PackedDecodeArgs& args, int64_t token) {
  if (args.seq_lens == nullptr) return kSwaColumns;
  const TokenRequest r = locate_token(token, args.num_requests, args.cum_seq_lens_q, args.q_len);
  if (r.request < 0) return 0;  // a token that no request holds: no window (section 1's rule)
  const int64_t position = int64_t{args.seq_lens[r.request]} - r.q_len + r.index;
  return std::clamp<int64_t>(position + 1, 0, kSwaColumns);
}

PackedColumnState dsv4_packed_column(const Dsv4PackedDecodeArgs& args, PackedSegmentId id, int64_t token,
                                     int32_t column) {
  PackedColumnState state;
  const PackedSegment* segment = segment_of(args, id);
  if (segment == nullptr || column >= segment->width) return state;
  if (segment->lens &&
      column >= segment->lens[token_offset(token, segment->lens_token_stride, segment->lens_request_stride,
                                           args.q_len)]) {
    return state;
  }
  if (id == PackedSegmentId::kSwa && column < kSwaColumns && column >= dsv4_packed_window(args, token)) return state;
  const int32_t index = segment->indices[token_offset(token, segment->indices_stride,
                                                      segment->indices_request_stride, args.q_len) +
                                         column];
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
    const uint16_t* q_row = static_cast<const uint16_t*>(args.q) +
                            token_offset(t, args.q_token_stride, args.q_request_stride, args.q_len) +
                            h * args.q_head_stride;
    for (int d = 0; d < kHeadDim; ++d) q[d] = decode_bf16(q_row[d]);
  };
  // Section 2 is section 1 with bmm1 = softmax_scale and bmm2 = 1.
  const int64_t width = int64_t{args.swa.width} + (segment_of(args, PackedSegmentId::kExtra) ? args.extra.width : 0);
  return attend_tokens(args.num_tokens, args.num_heads, width, args.softmax_scale, 1.0, args.sinks, args.sink_term,
                       gather, load_q);
}

void dsv4_decode_packed_host(const Dsv4PackedDecodeArgs& args) {
  write_host_outputs(dsv4_decode_packed(args), args.num_tokens, args.num_heads, host_outputs(args));
}

}  // namespace sparse_decode::reference
