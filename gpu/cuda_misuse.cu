// Misuse of cuda_include/ikp.cuh that must never write outside the lane or forge a record
// (gpu/cuda_cross_check.py, part (e)): each case runs on `blocks` blocks of 64 threads.
#include <cuda_runtime.h>

#include "ikp.cuh"

namespace {

enum Case : int { kBadGroup = 0, kStaticIndex = 1, kEventId = 2, kBadStride = 3, kAtomicEventId = 4 };
constexpr unsigned kValidEvent = 6;
__device__ unsigned lane_counters[64];  // atomic mode's per-lane counters, zeroed by the launcher

__global__ void misuse(int kase, void* buf, int write_stride, int records_per_lane, int arg) {
  const unsigned t = threadIdx.x;
  if (kase == kBadGroup) {
    // thread 0 claims group `arg` (outside 0..1) of a 2-group layout; thread 32 leads group 0 properly
    if (t == 0 || t == 32) {
      ikp::Profiler<> prof(buf, 2, t == 0 ? arg : 0, true, write_stride, records_per_lane);
      prof.instant(t == 0 ? 5u : kValidEvent);
      prof.finalize();
    }
  } else if (kase == kStaticIndex) {  // a static slot index `arg` (negative: it must not wrap onto the anchors)
    ikp::Profiler<> prof(buf, 1, 0, t == 0, write_stride, records_per_lane);
    prof.instant_at(5, static_cast<unsigned>(arg));
    prof.instant_at(kValidEvent, 0);
    prof.finalize();
  } else if (kase == kEventId) {  // a reserved or too large event id, in every mode that takes one
    ikp::Profiler<> prof(buf, 1, 0, t == 0, write_stride, records_per_lane);
    prof.instant(static_cast<unsigned>(arg));
    prof.begin(static_cast<unsigned>(arg));
    prof.end(static_cast<unsigned>(arg));
    prof.instant_at(static_cast<unsigned>(arg), 1);
    prof.instant(kValidEvent);
    prof.finalize();
  } else if (kase == kAtomicEventId) {  // a bad id from a writer that is not the lane's leader (thread 32)
    ikp::Profiler<> prof(buf, 1, 0, t == 0, write_stride, records_per_lane, lane_counters);
    if (t == 32) {
      ikp::AtomicRegion<decltype(prof)> region(prof, static_cast<unsigned>(arg), true);
    }
    prof.atomic_instant(static_cast<unsigned>(arg), t == 32);
    prof.atomic_instant(kValidEvent, t == 0);
    __syncthreads();
    prof.finalize();
  } else if (kase == kBadStride) {  // a stride `arg` that is negative or too large to address
    ikp::Profiler<> prof(buf, 1, 0, t == 0, arg, records_per_lane);
    prof.instant(kValidEvent);
    prof.finalize();
  }
}

}  // namespace

extern "C" int ikp_misuse_launch(int kase, void* buf, int write_stride, int records_per_lane, int arg, int blocks,
                                 void* stream) {
  void* counters = nullptr;
  cudaGetSymbolAddress(&counters, lane_counters);
  cudaMemsetAsync(counters, 0, sizeof(lane_counters), static_cast<cudaStream_t>(stream));
  misuse<<<blocks, 64, 0, static_cast<cudaStream_t>(stream)>>>(kase, buf, write_stride, records_per_lane, arg);
  return static_cast<int>(cudaGetLastError());
}
