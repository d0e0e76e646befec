// Class 5: warp-specialized roles around barriers; each role's regions in its own branch, records
// guarded by capacity checks the compiler tail-merges after the if/else.
// names: 1=PRODUCER 2=CONSUMER 3=EPILOGUE 4=LOAD 5=MMA
// moved: warpspec_kernel 0x05f0 CONSUMER END MMA's record address (LEA), after END MMA's timer read
// moved: warpspec_kernel 0x0610 CONSUMER the unrolled `acc +=` (FADD), scheduled after END MMA's timer read
// moved: warpspec_kernel 0x0630 CONSUMER END MMA's record address (LEA.HI.X), after END MMA's timer read
// moved: warpspec_kernel 0x0730 CONSUMER END MMA's record address (@!P1 MOV), after END MMA's timer read
// moved: warpspec_kernel 0x0740 CONSUMER END MMA's record address (@!P1 IMAD.WIDE), after END MMA's timer read
// moved: warpspec_kernel 0x0750 CONSUMER the unrolled `acc +=` (FADD), scheduled after END MMA's timer read
// moved: warpspec_kernel 0x0770 CONSUMER END MMA's record address (@!P1 IMAD.IADD), after END MMA's timer read
// moved: warpspec_kernel 0x0a20 CONSUMER END MMA's record address (@!P1 IMAD.WIDE), after END MMA's timer read
// moved: warpspec_kernel 0x0a40 CONSUMER END MMA's record address (@!P1 IMAD.MOV), after END MMA's timer read
// moved: warpspec_kernel 0x0a60 CONSUMER END MMA's record address (@!P1 IMAD.IADD), after END MMA's timer read
// moved: warpspec_kernel 0x1000 PRODUCER END LOAD's record address (LEA), after END LOAD's timer read
// moved: warpspec_kernel 0x1030 PRODUCER END LOAD's record address (LEA.HI.X), after END LOAD's timer read
// moved: warpspec_kernel 0x14e0 PRODUCER `in`'s address (LDC.64) hoisted into the remainder loop's preheader, before BEGIN LOAD
#include "ikp.cuh"
enum { PRODUCER = 1, CONSUMER = 2, EPILOGUE = 3, LOAD = 4, MMA = 5 };
extern "C" __global__ void warpspec_kernel(float* out, const float* in, void* pbuf, int n, int ws, int rpl) {
  __shared__ float tile[256];
  const int warp = threadIdx.x / 32;
  ikp::Profiler<> prof(pbuf, 2, warp < 4 ? 0 : 1, threadIdx.x % 128 == 0, ws, rpl);
  float acc = 0.0f;
  if (warp < 4) {
    prof.begin(PRODUCER);
    for (int k = 0; k < n; ++k) {
      prof.begin(LOAD);
      tile[threadIdx.x % 128] = in[k * 128 + threadIdx.x % 128];  // @ PRODUCER/LOAD
      prof.end(LOAD);
    }
    prof.end(PRODUCER);
  } else {
    prof.begin(CONSUMER);
    for (int k = 0; k < n; ++k) {
      prof.begin(MMA);
      acc += in[k] * 0.5f + acc * in[k + 1];  // @ CONSUMER/MMA
      prof.end(MMA);
    }
    prof.end(CONSUMER);
  }
  __syncthreads();  // @ -
  prof.begin(EPILOGUE);
  out[threadIdx.x] = acc + tile[threadIdx.x % 256];  // @ EPILOGUE
  prof.end(EPILOGUE);
  __syncthreads();  // @ -
  prof.finalize();
}
