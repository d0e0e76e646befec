// Class 6: 1-7 groups per block (lane = block * G + group: ptxas multiplies by G << 12).
// names: 1=WORK 2=INNER
#include "ikp.cuh"
enum { WORK = 1, INNER = 2 };
template <int G>
__device__ __forceinline__ void body(float* out, const float* in, void* pbuf, int ws, int rpl) {
  const int warp = threadIdx.x / 32;
  ikp::Profiler<> prof(pbuf, G, warp % G, threadIdx.x % 32 == 0 && warp < G, ws, rpl);
  float v = in[threadIdx.x];
  prof.begin(WORK);
  v = v * in[1] + in[2];  // @ WORK
  prof.begin(INNER);
  v = v / in[3];  // @ WORK/INNER
  prof.end(INNER);
  prof.end(WORK);
  out[threadIdx.x] = v;  // @ -
  prof.finalize();
}
extern "C" __global__ void groups1(float* o, const float* i, void* p, int ws, int rpl) { body<1>(o, i, p, ws, rpl); }
extern "C" __global__ void groups2(float* o, const float* i, void* p, int ws, int rpl) { body<2>(o, i, p, ws, rpl); }
extern "C" __global__ void groups3(float* o, const float* i, void* p, int ws, int rpl) { body<3>(o, i, p, ws, rpl); }
extern "C" __global__ void groups4(float* o, const float* i, void* p, int ws, int rpl) { body<4>(o, i, p, ws, rpl); }
extern "C" __global__ void groups5(float* o, const float* i, void* p, int ws, int rpl) { body<5>(o, i, p, ws, rpl); }
extern "C" __global__ void groups6(float* o, const float* i, void* p, int ws, int rpl) { body<6>(o, i, p, ws, rpl); }
extern "C" __global__ void groups7(float* o, const float* i, void* p, int ws, int rpl) { body<7>(o, i, p, ws, rpl); }
// The last group only (a compile-time group id): lane bits = block * (G << 12) + ((G - 1) << 12), one IMAD.
template <int G>
__device__ __forceinline__ void last_group(float* out, const float* in, void* pbuf, int ws, int rpl) {
  ikp::Profiler<> prof(pbuf, G, G - 1, threadIdx.x == 0, ws, rpl);
  float v = in[threadIdx.x];
  prof.begin(WORK);
  v = v * in[1] + in[2];  // @ WORK
  prof.end(WORK);
  out[threadIdx.x] = v;  // @ -
  prof.finalize();
}
extern "C" __global__ void last3(float* o, const float* i, void* p, int ws, int rpl) { last_group<3>(o, i, p, ws, rpl); }
extern "C" __global__ void last5(float* o, const float* i, void* p, int ws, int rpl) { last_group<5>(o, i, p, ws, rpl); }
extern "C" __global__ void last6(float* o, const float* i, void* p, int ws, int rpl) { last_group<6>(o, i, p, ws, rpl); }
extern "C" __global__ void last7(float* o, const float* i, void* p, int ws, int rpl) { last_group<7>(o, i, p, ws, rpl); }
