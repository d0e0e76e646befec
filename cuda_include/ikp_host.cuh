// ikp_host.cuh: host helpers for ikp.cuh buffers (header only): sizing, checking and zeroing.
// Decoding, names and the JSON sidecar are Python's job (host_decode; see README, "CUDA C++ kernels").
#pragma once

#if defined(__CUDACC_RTC__)
#error "ikp_host.cuh is host code; NVRTC programs include ikp.cuh only"
#endif

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "ikp.cuh"

namespace ikp {
namespace host {

// Where a launch's records go. write_stride >= num_blocks * num_groups (persistent kernels: use
// num_sms * num_groups or any larger value); records_per_lane includes the 2 anchor and 2 trailer slots.
struct Layout {
  unsigned num_blocks = 0;
  unsigned num_groups = 0;
  unsigned write_stride = 0;
  unsigned records_per_lane = 0;

  unsigned num_lanes() const { return num_blocks * num_groups; }
  // uint64 slots of the buffer, header included: 1 + write_stride * records_per_lane (wire.buffer_slots).
  std::size_t slots() const { return 1 + static_cast<std::size_t>(write_stride) * records_per_lane; }
  std::size_t bytes() const { return slots() * sizeof(std::uint64_t); }
  // Per-lane u32 counters for atomic mode (one per write_stride lane, so any addressable lane has one).
  std::size_t counter_bytes() const { return static_cast<std::size_t>(write_stride) * sizeof(std::uint32_t); }
  int user_capacity() const { return ikp::user_capacity(static_cast<int>(records_per_lane)); }
};

// Why a layout cannot be written (nullptr when it can). The device side writes nothing for a lane
// it cannot address, so check on the host first.
inline const char* check(const Layout& l) {
  if (l.num_blocks < 1 || l.num_groups < 1) return "num_blocks and num_groups must be >= 1";
  if (static_cast<unsigned long long>(l.num_blocks) * l.num_groups > kMaxLanes)
    return "num_blocks * num_groups exceeds the v1 limit of 2^20 lanes";
  if (l.write_stride < l.num_blocks * l.num_groups) return "write_stride must be >= num_blocks * num_groups";
  if (static_cast<unsigned long long>(l.write_stride) * 8ull >= (1ull << 32))
    return "write_stride * 8 must fit in 32 bits";
  if (l.records_per_lane < static_cast<unsigned>(kAnchorRecords + kTrailerRecords + 1))
    return "records_per_lane must be >= 5 (2 anchors + 1 record + 2 trailer slots)";
  return nullptr;
}

// Layout for a launch of `grid` blocks with `num_groups` lanes each. write_stride 0 = exactly the lanes.
inline Layout make_layout(dim3 grid, unsigned num_groups, unsigned records_per_lane, unsigned write_stride = 0) {
  Layout l;
  l.num_blocks = grid.x * grid.y * grid.z;
  l.num_groups = num_groups;
  l.records_per_lane = records_per_lane;
  l.write_stride = write_stride ? write_stride : l.num_blocks * l.num_groups;
  return l;
}

// Records per lane for `user_records` records of regions / instants per lane (adds anchors + trailer).
inline unsigned records_per_lane_for(unsigned user_records) {
  return user_records + kAnchorRecords + kTrailerRecords;
}

// Zero the buffer (and the atomic-mode counters, if any) before each launch: empty slots must read 0.
inline cudaError_t zero(void* buf, const Layout& l, cudaStream_t stream = 0, void* counters = nullptr) {
  cudaError_t err = cudaMemsetAsync(buf, 0, l.bytes(), stream);
  if (err == cudaSuccess && counters != nullptr) err = cudaMemsetAsync(counters, 0, l.counter_bytes(), stream);
  return err;
}

}  // namespace host
}  // namespace ikp
