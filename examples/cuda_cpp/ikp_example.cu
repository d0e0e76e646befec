// A CUDA C++ kernel instrumented with ikp.cuh, with a C launcher that Python calls through ctypes.
//
// Build:  nvcc -O3 -std=c++17 -arch=sm_90a -shared -Xcompiler -fPIC -I"$(python -m ikp_cute --include)" \
//              -o libikp_example.so ikp_example.cu
//
// Every block has 4 warps in 2 groups (warps 0-1 = group 0 "producer", warps 2-3 = group 1 "consumer").
// The program (what gpu/cuda_cross_check.py expects to find in the decoded trace, per lane):
//   kNested  group 0: iters x OUTER{ work; INNER{ work } }
//            group 1: iters x ( INNER{ work }; TICK instant ), then OUTER{ OUTER{ work } } (re-entrant)
//   kFlat    every group: iters x OUTER{ work }           (same structure in every index mode)
//   modes:   register cursor (Region), static slot (begin_at/end_at), atomic (AtomicRegion written by
//            the leader only, so one lane = one writer and the structure matches the other modes)
#include <cuda_runtime.h>

#include "ikp.cuh"

namespace {

enum Event : unsigned { OUTER = 0, INNER = 1, TICK = 2 };
constexpr int kWarpsPerGroup = 2;
constexpr int kNumGroups = 2;
constexpr int kThreads = 32 * kWarpsPerGroup * kNumGroups;

// Dependent FMAs the compiler cannot drop (the result is stored).
__device__ __forceinline__ float work(float x, int n) {
  for (int i = 0; i < n; ++i) x = fmaf(x, 1.0001f, 0.5f);
  return x;
}

template <class P>
__device__ float nested_program(P& prof, int group, int iters, float x) {
  if (group == 0) {
    for (int i = 0; i < iters; ++i) {
      ikp::Region outer(prof, OUTER);
      x = work(x, 16);
      ikp::Region inner(prof, INNER);
      x = work(x, 16);
    }
  } else {
    for (int i = 0; i < iters; ++i) {
      {
        ikp::Region inner(prof, INNER);
        x = work(x, 16);
      }
      prof.instant(TICK);
    }
    ikp::Region a(prof, OUTER);
    ikp::Region b(prof, OUTER);
    x = work(x, 16);
  }
  return x;
}

template <class P>
__device__ float flat_cursor(P& prof, int iters, float x) {
  for (int i = 0; i < iters; ++i) {
    ikp::Region r(prof, OUTER);
    x = work(x, 16);
  }
  return x;
}

template <class P>
__device__ float flat_static(P& prof, int iters, float x) {
  for (int i = 0; i < iters; ++i) {
    prof.begin_at(OUTER, 2 * i);
    x = work(x, 16);
    prof.end_at(OUTER, 2 * i + 1);
  }
  return x;
}

template <class P>
__device__ float flat_atomic(P& prof, int iters, float x) {
  for (int i = 0; i < iters; ++i) {
    ikp::AtomicRegion r(prof, OUTER);
    x = work(x, 16);
  }
  return x;
}

enum Variant : int {
  kNestedExt = 0,      // the cross-check program, extensions on
  kNestedPlain = 1,    // same program, plain v1 (no anchors, no SM id, no DROPPED)
  kNestedOff = 2,      // same program, profiler compiled out
  kFlatCursor = 3,
  kFlatStatic = 4,
  kFlatAtomic = 5,
};

template <int V>
__global__ void __launch_bounds__(kThreads) example_kernel(void* buf, unsigned* counters, float* out,
                                                          int write_stride, int records_per_lane, int iters) {
  constexpr bool enabled = V != kNestedOff;
  constexpr bool extensions = V != kNestedPlain;
  const int group = static_cast<int>(ikp::warp_id()) / kWarpsPerGroup;
  ikp::Profiler<enabled, extensions> prof(buf, kNumGroups, group, ikp::group_leader(kWarpsPerGroup),
                                          write_stride, records_per_lane,
                                          V == kFlatAtomic ? counters : nullptr);
  float x = static_cast<float>(threadIdx.x);
  if (V == kNestedExt || V == kNestedPlain || V == kNestedOff) x = nested_program(prof, group, iters, x);
  if (V == kFlatCursor) x = flat_cursor(prof, iters, x);
  if (V == kFlatStatic) x = flat_static(prof, iters, x);
  if (V == kFlatAtomic) {
    x = flat_atomic(prof, iters, x);
    __syncthreads();  // finalize reads the lane counter after every writer of the lane is done
  }
  prof.finalize();
  out[ikp::block_linear() * blockDim.x + threadIdx.x] = x;
}

template <int V>
cudaError_t launch(dim3 grid, cudaStream_t stream, void* buf, unsigned* counters, float* out, int write_stride,
                   int records_per_lane, int iters) {
  example_kernel<V><<<grid, kThreads, 0, stream>>>(buf, counters, out, write_stride, records_per_lane, iters);
  return cudaGetLastError();
}

}  // namespace

extern "C" {

int ikp_example_threads_per_block() { return kThreads; }
int ikp_example_num_groups() { return kNumGroups; }

// Returns a cudaError_t (0 = launched). out must hold gx*gy*gz*threads floats; counters (atomic
// variant only) one u32 per lane, zeroed like the buffer.
int ikp_example_launch(int variant, void* buf, unsigned* counters, float* out, int gx, int gy, int gz,
                       int write_stride, int records_per_lane, int iters, void* stream) {
  const dim3 grid(gx, gy, gz);
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  switch (variant) {
    case kNestedExt: return launch<kNestedExt>(grid, s, buf, counters, out, write_stride, records_per_lane, iters);
    case kNestedPlain: return launch<kNestedPlain>(grid, s, buf, counters, out, write_stride, records_per_lane, iters);
    case kNestedOff: return launch<kNestedOff>(grid, s, buf, counters, out, write_stride, records_per_lane, iters);
    case kFlatCursor: return launch<kFlatCursor>(grid, s, buf, counters, out, write_stride, records_per_lane, iters);
    case kFlatStatic: return launch<kFlatStatic>(grid, s, buf, counters, out, write_stride, records_per_lane, iters);
    case kFlatAtomic: return launch<kFlatAtomic>(grid, s, buf, counters, out, write_stride, records_per_lane, iters);
    default: return cudaErrorInvalidValue;
  }
}

const char* ikp_example_error_string(int err) { return cudaGetErrorString(static_cast<cudaError_t>(err)); }

}  // extern "C"
