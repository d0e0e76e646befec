// ikp.cuh: the CUDA C++ twin of ikp_cute's device profiler (header only, NVRTC-safe).
//
// Writes the v1 wire format defined by host_decode/wire.py (the one definition; the constants below
// are checked against it by tests/unit/cuda_include/test_cuda_include.py):
//
//   buf[0]  header = (num_groups << 32) | num_blocks
//   record  = (globaltimer_lo32 << 32) | tag32,  tag32 = (lane << 12) | (event_id << 2) | event_type
//   lane    = block_linear * num_groups + group,  block_linear = x + y*gx + z*gx*gy
//   record k of lane `lane` sits at slot 1 + lane + k * write_stride      (write_stride >= num lanes)
//
// Extensions (all plain v1 records, so v1 decoders still read the buffer; IKP_V1_PLAIN / the second
// template argument turns them off):
//   slot 0 / 1 of a lane: ANCHOR_LO / ANCHOR_HI instants from one 64-bit %globaltimer read
//                         (ANCHOR_HI's timer field is the high 32 bits);
//   slot R-2 (R = records_per_lane): DROPPED instant, timer field = records dropped (only if any);
//   slot R-1:             FINALIZE, event id = SM id (%smid), timer field = globaltimer_lo.
//   User records use slots 2 .. R-3 (user capacity R-4); past it they are dropped and counted.
//   Plain v1 (no extensions): user slots 0 .. R-2, FINALIZE (event id 0) at R-1, drops only counted
//   in registers (Profiler::dropped()), since v1 has no record for them.
//
// Usage (cursor mode, the default):
//   __global__ void k(void* prof_buf, int write_stride, int records_per_lane) {
//     int group = ikp::warp_id() / 4;                          // one lane per warp group
//     ikp::Profiler<> prof(prof_buf, /*num_groups=*/2, group, ikp::group_leader(4), write_stride,
//                          records_per_lane);
//     for (...) { ikp::Region r(prof, EV_MMA); ... }           // or prof.begin(EV) / prof.end(EV)
//     prof.finalize();
//   }
// Disable with IKP_ENABLED=0 (or ikp::Profiler<false>): every call compiles to nothing, no timer reads.
//
// The device part includes no header at all (NVRTC compiles it as is). Host helpers (buffer sizing,
// zeroing) live in ikp_host.cuh.
#pragma once

#ifndef IKP_ENABLED
#define IKP_ENABLED 1
#endif
#ifndef IKP_V1_PLAIN
#define IKP_V1_PLAIN 0
#endif
// IKP_ORDERED=1 adds a "memory" clobber to every timer read, so the compiler front end does not move
// loads/stores across region boundaries (ptxas may still schedule arithmetic across them).
#ifndef IKP_ORDERED
#define IKP_ORDERED 0
#endif

#if IKP_ORDERED
#define IKP_ASM_CLOBBER : "memory"
#else
#define IKP_ASM_CLOBBER
#endif

namespace ikp {

using u32 = unsigned int;
using u64 = unsigned long long;

// --- wire format constants (mirror host_decode/wire.py; tests/unit/cuda_include/test_cuda_include.py compares them) ---
constexpr int kEventTypeBits = 2;
constexpr int kEventIdBits = 10;
constexpr int kLaneBits = 20;
constexpr int kEventIdShift = kEventTypeBits;                 // 2
constexpr int kLaneShift = kEventTypeBits + kEventIdBits;     // 12
constexpr u32 kMaxEventId = (1u << kEventIdBits) - 1;         // 1023
constexpr u32 kMaxLanes = 1u << kLaneBits;                    // 1048576
constexpr u32 kAnchorHiEventId = kMaxEventId;                 // 1023
constexpr u32 kAnchorLoEventId = kMaxEventId - 1;             // 1022
constexpr u32 kDroppedEventId = kMaxEventId - 2;              // 1021
constexpr u32 kFlagAddrEventId = kMaxEventId - 3;             // 1020: payload instant (docs/flags.md)
constexpr u32 kFlagValueEventId = kMaxEventId - 4;            // 1019: payload instant (docs/flags.md)
constexpr u32 kMaxUserEventId = kMaxEventId - 5;              // 1018
constexpr int kAnchorRecords = 2;
constexpr int kTrailerRecords = 2;

enum EventType : u32 { kBegin = 0, kEnd = 1, kInstant = 2, kFinalize = 3 };

// Records a lane leaves for user regions / instants (extensions on).
static __host__ __device__ constexpr int user_capacity(int records_per_lane) {
  return records_per_lane - kAnchorRecords - kTrailerRecords;
}

// The low 12 bits of a tag: event id and type (the lane bits are OR-ed in per lane).
static __host__ __device__ constexpr u32 event_bits(u32 event_id, u32 type) {
  return ((event_id & kMaxEventId) << kEventIdShift) | type;
}

// --- thread geometry helpers -------------------------------------------------------------------------
static __device__ __forceinline__ u32 thread_linear() {
  return threadIdx.x + threadIdx.y * blockDim.x + threadIdx.z * blockDim.x * blockDim.y;
}
static __device__ __forceinline__ u32 warp_id() { return thread_linear() >> 5; }
static __device__ __forceinline__ u32 lane_id() { return thread_linear() & 31u; }
static __device__ __forceinline__ u32 block_linear() {
  return blockIdx.x + blockIdx.y * gridDim.x + blockIdx.z * gridDim.x * gridDim.y;
}
static __device__ __forceinline__ u32 num_blocks() { return gridDim.x * gridDim.y * gridDim.z; }

// Default leader of a group of `warps_per_group` consecutive warps: lane 0 of the group's first warp.
static __device__ __forceinline__ bool group_leader(u32 warps_per_group) {
  return thread_linear() % (32u * warps_per_group) == 0u;
}
// Leader when a group starts at warp `first_warp` (warp-specialized kernels with uneven groups).
static __device__ __forceinline__ bool leader_of_warp(u32 first_warp) {
  return thread_linear() == 32u * first_warp;
}

// --- raw device primitives ---------------------------------------------------------------------------
// One asm block: timer read, then the tag OR right after it (pc2region finds the tag next to the read),
// packed into the 64-bit record (timer in the high half).
static __device__ __forceinline__ u64 stamp(u32 lane_bits, u32 ev_bits) {
  u64 record;
  asm volatile(
      "{\n\t"
      ".reg .b32 ikp_t, ikp_g;\n\t"
      "mov.u32 ikp_t, %%globaltimer_lo;\n\t"
      "or.b32 ikp_g, %1, %2;\n\t"
      "mov.b64 %0, {ikp_g, ikp_t};\n\t"
      "}"
      : "=l"(record)
      : "r"(lane_bits), "r"(ev_bits) IKP_ASM_CLOBBER);
  return record;
}
static __device__ __forceinline__ u64 globaltimer64() {
  u64 t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
static __device__ __forceinline__ u32 globaltimer_lo() {
  u32 t;
  asm volatile("mov.u32 %0, %%globaltimer_lo;" : "=r"(t));
  return t;
}
static __device__ __forceinline__ u32 sm_id() {
  u32 s;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(s));
  return s;
}
// The global-space address of a generic pointer (st.global needs one; kernel arguments are generic).
static __device__ __forceinline__ u64* to_global(u64* p) {
  u64* g;
  asm("cvta.to.global.u64 %0, %1;" : "=l"(g) : "l"(p));
  return g;
}
static __device__ __forceinline__ u64 pack(u32 timer_field, u32 tag) {
  return (static_cast<u64>(timer_field) << 32) | tag;
}

// --- the profiler ------------------------------------------------------------------------------------
//
// One object per thread. Only the leader of a (block, group) writes; other threads carry the same
// cursor arithmetic but their `limit_` is 0, so every store predicate is false for them (one compare
// per event does both the leader test and the capacity test).
//
// Modes:
//   register cursor  begin(ev) / end(ev) / instant(ev), ikp::Region (RAII). No atomics, no memory cursor.
//   static slot      begin_at(ev, k) / end_at(ev, k) / instant_at(ev, k): k is the user slot (0-based).
//   atomic           ikp::AtomicRegion / atomic_instant: slots reserved from a per-lane u32 counter
//                    (counters[lane], zeroed by the host) with one atomicAdd of 2 per region, issued
//                    before the begin timer read. Any thread may write (pass `writer`), so several warps
//                    can share a lane; each region's begin/end sit in adjacent slots, so the host pairs
//                    them correctly, but nesting depth is not recorded in this mode.
// Do not mix modes within one lane (they would overwrite each other's slots).
// finalize(): after the lane's last record (a __syncthreads() first when several threads wrote, e.g.
// atomic mode). Writes DROPPED (if records were dropped) and FINALIZE into the lane's last two slots.
namespace detail {
template <bool Enabled, bool Extensions>
class Profiler;
}  // namespace detail

// IKP_ENABLED=0 turns every profiler off, even one written Profiler<true>.
template <bool Enabled = true, bool Extensions = (IKP_V1_PLAIN == 0)>
using Profiler = detail::Profiler<Enabled && (IKP_ENABLED != 0), Extensions>;

namespace detail {

template <bool Extensions>
class Profiler<false, Extensions> {
 public:
  __device__ __forceinline__ Profiler(void*, int, int, bool, int, int, u32* = nullptr) {}
  __device__ __forceinline__ void begin(u32) {}
  __device__ __forceinline__ void end(u32) {}
  __device__ __forceinline__ void instant(u32) {}
  __device__ __forceinline__ void begin_at(u32, u32) {}
  __device__ __forceinline__ void end_at(u32, u32) {}
  __device__ __forceinline__ void instant_at(u32, u32) {}
  __device__ __forceinline__ u32 reserve(u32) { return 0; }
  __device__ __forceinline__ void record_reserved(u32, u32, u32, bool) {}
  __device__ __forceinline__ void atomic_instant(u32, bool) {}
  __device__ __forceinline__ bool atomic_writer(bool) const { return false; }
  __device__ __forceinline__ bool atomic_event(u32, u32) { return false; }
  __device__ __forceinline__ bool leader() const { return false; }
  __device__ __forceinline__ u32 dropped() const { return 0; }
  __device__ __forceinline__ void finalize() {}
};

template <bool Extensions>
class Profiler<true, Extensions> {
 public:
  static constexpr u32 kFirstUserSlot = Extensions ? kAnchorRecords : 0;
  static constexpr u32 kTrailer = Extensions ? kTrailerRecords : 1;  // plain v1: FINALIZE only

  // buf: the v1 buffer (uint64/int64 elements, zeroed before the launch); num_groups, group_id: this
  // thread's group (0 <= group_id < num_groups); leader: whether this thread writes its (block, group)
  // lane; write_stride >= lanes (and below 2^29: its byte stride fits 32 bits); records_per_lane >= 5
  // (anchors + 1 user record + trailer); counters: per-lane u32 counters for atomic mode (nullptr
  // otherwise).
  __device__ __forceinline__ Profiler(void* buf, int num_groups, int group_id, bool leader, int write_stride,
                                      int records_per_lane, u32* counters = nullptr) {
    // 64-bit, so that a huge grid cannot wrap onto another lane
    const u64 lane64 = static_cast<u64>(block_linear()) * static_cast<u32>(num_groups) + static_cast<u32>(group_id);
    // A lane that cannot be addressed (a group outside 0..num_groups-1, negative included; a bad stride;
    // too many lanes; too few records) writes nothing instead of corrupting its neighbours; the host
    // helper (ikp_host.cuh) refuses such layouts.
    const bool addressable = static_cast<u32>(group_id) < static_cast<u32>(num_groups) && write_stride > 0 &&
                             write_stride < (1 << 29) && lane64 < static_cast<u64>(write_stride) &&
                             lane64 < kMaxLanes &&
                             records_per_lane >= static_cast<int>(kFirstUserSlot + kTrailer + 1);
    const u32 lane = addressable ? static_cast<u32>(lane64) : 0u;
    const bool usable = leader && addressable;
    u64* words = static_cast<u64*>(buf);
    base_ = to_global(words + 1 + lane);
    stride_bytes_ = static_cast<u32>(write_stride) * 8u;
    lane_bits_ = lane << kLaneShift;
    cursor_ = kFirstUserSlot;
    cursor_addr_ = reinterpret_cast<u64>(base_) + static_cast<u64>(kFirstUserSlot) * stride_bytes_;
    capacity_end_ = addressable ? static_cast<u32>(records_per_lane) - kTrailer : 0u;
    limit_ = leader ? capacity_end_ : 0u;
    static_dropped_ = 0;
    counter_ = counters ? counters + lane : nullptr;
    if (usable && lane == 0) {
      words[0] = (static_cast<u64>(num_groups) << 32) | num_blocks();
    }
    if (Extensions && usable) {
      const u64 now = globaltimer64();
      store(0, pack(static_cast<u32>(now), lane_bits_ | event_bits(kAnchorLoEventId, kInstant)));
      store(1, pack(static_cast<u32>(now >> 32), lane_bits_ | event_bits(kAnchorHiEventId, kInstant)));
    }
  }

  // Event ids are 0..kMaxUserEventId (1018): 1019..1023 are the flag payloads, the DROPPED and the anchor
  // records, and a larger id would wrap onto another. A record with such an id is dropped and counted, never written (with a
  // constant id, as usual, the check folds away).

  // --- register cursor mode ---
  __device__ __forceinline__ void begin(u32 ev) { next(ev, kBegin); }
  __device__ __forceinline__ void end(u32 ev) { next(ev, kEnd); }
  __device__ __forceinline__ void instant(u32 ev) { next(ev, kInstant); }

  // --- static slot mode (k = user slot, 0-based) ---
  __device__ __forceinline__ void begin_at(u32 ev, u32 k) { at(ev, kBegin, k); }
  __device__ __forceinline__ void end_at(u32 ev, u32 k) { at(ev, kEnd, k); }
  __device__ __forceinline__ void instant_at(u32 ev, u32 k) { at(ev, kInstant, k); }

  // --- atomic mode (see AtomicRegion) ---
  // Reserves n slots of this lane's counter; returns the first reserved slot index in the lane.
  __device__ __forceinline__ u32 reserve(u32 n) { return kFirstUserSlot + atomicAdd(counter_, n); }
  // Writes a record at a reserved lane slot k (dropped, not written, when k is past capacity; the
  // counter keeps the count, so finalize knows how many were dropped).
  __device__ __forceinline__ void record_reserved(u32 ev, u32 type, u32 k, bool writer) {
    if (writer && k < capacity_end_) {
      store(k, stamp(lane_bits_, event_bits(ev, type)));
    }
  }
  __device__ __forceinline__ void atomic_instant(u32 ev, bool writer) {
    if (atomic_writer(writer) && atomic_event(ev, 1)) record_reserved(ev, kInstant, reserve(1), true);
  }
  // Atomic mode: `records` records with an id past kMaxUserEventId are replaced by one DROPPED record
  // counting them, in a slot of its own, so that any writer's count reaches the lane (the decoder adds
  // up a lane's DROPPED records). Returns whether the id is valid.
  __device__ __forceinline__ bool atomic_event(u32 ev, u32 records) {
    if (ev <= kMaxUserEventId) return true;
    const u32 k = reserve(1);
    if (k < capacity_end_) store(k, pack(records, lane_bits_ | event_bits(kDroppedEventId, kInstant)));
    return false;
  }
  // Cursor and static modes: a record with an id past kMaxUserEventId is dropped and counted.
  __device__ __forceinline__ bool valid_event(u32 ev) {
    if (ev <= kMaxUserEventId) return true;
    ++static_dropped_;
    return false;
  }
  // Whether `writer` may reserve: the lane is addressable and has a counter (no counters given =
  // atomic mode off: nothing is reserved or written).
  __device__ __forceinline__ bool atomic_writer(bool writer) const {
    return writer && capacity_end_ != 0 && counter_ != nullptr;
  }

  __device__ __forceinline__ bool leader() const { return limit_ != 0; }

  // Records dropped so far by this thread's cursor / static writes (atomic mode: see finalize); 0 on
  // a thread that writes no lane.
  __device__ __forceinline__ u32 dropped() const {
    if (limit_ == 0) return 0u;
    return (cursor_ > limit_ ? cursor_ - limit_ : 0u) + static_dropped_;
  }

  __device__ __forceinline__ void finalize() {
    if (limit_ == 0) return;
    u32 lost = dropped();
    if (counter_ != nullptr) {
      // Atomic mode: the counter holds every reservation of the lane (read atomically, after the
      // caller's barrier). Reserved slots past capacity were dropped.
      const u32 used = kFirstUserSlot + atomicAdd(counter_, 0u);
      lost += used > limit_ ? used - limit_ : 0u;
    }
    const u32 last = limit_ + kTrailer - 1;  // records_per_lane - 1
    if (Extensions) {
      if (lost != 0) {
        store(last - 1, pack(lost, lane_bits_ | event_bits(kDroppedEventId, kInstant)));
      }
      store(last, pack(globaltimer_lo(), lane_bits_ | event_bits(sm_id() & kMaxEventId, kFinalize)));
    } else {
      store(last, pack(globaltimer_lo(), lane_bits_ | event_bits(0, kFinalize)));
    }
  }

 private:
  // Slot address k * stride_bytes + base (a 32x32->64 multiply-add) and an explicit global store,
  // in one asm block so the record's store sits next to its timer read in the PTX.
  __device__ __forceinline__ void store(u32 k, u64 record) const {
    asm volatile(
        "{\n\t"
        ".reg .u64 ikp_a;\n\t"
        "mad.wide.u32 ikp_a, %0, %1, %2;\n\t"
        "st.global.u64 [ikp_a], %3;\n\t"
        "}" ::"r"(k),
        "r"(stride_bytes_), "l"(base_), "l"(record));
  }

  // The cursor carries both its slot index (for the capacity / leader compare and the drop count) and
  // the slot's address, advanced by one stride per record: 6 SASS instructions per event on sm_90a
  // against 7 for recomputing base + k * stride (tests/unit/cuda_include/test_cuda_include.py measures it).
  __device__ __forceinline__ void next(u32 ev, u32 type) {
    if (!valid_event(ev)) return;  // no slot taken
    const u32 k = cursor_++;  // keeps counting past capacity: dropped = cursor - limit
    if (k < limit_) store_at(cursor_addr_, stamp(lane_bits_, event_bits(ev, type)));
    cursor_addr_ += stride_bytes_;
  }
  __device__ __forceinline__ static void store_at(u64 global_addr, u64 record) {
    asm volatile("st.global.u64 [%0], %1;" ::"l"(global_addr), "l"(record));
  }
  // k is compared before the anchors' offset is added: a negative index (k = -1 as u32) must not wrap
  // onto the anchor slots.
  __device__ __forceinline__ void at(u32 ev, u32 type, u32 k) {
    const u32 room = limit_ > kFirstUserSlot ? limit_ - kFirstUserSlot : 0u;
    if (!valid_event(ev)) return;
    if (k < room) {
      store(kFirstUserSlot + k, stamp(lane_bits_, event_bits(ev, type)));
    } else if (limit_ != 0) {
      ++static_dropped_;
    }
  }
  u64* base_;          // global-space address of the lane's slot 0
  u64 cursor_addr_;    // global-space address of slot cursor_
  u32* counter_;
  u32 stride_bytes_;
  u32 lane_bits_;
  u32 cursor_;
  u32 limit_;         // first trailer slot for the leader, 0 for everyone else (one compare per event)
  u32 capacity_end_;  // first trailer slot of the lane for any writer (atomic mode), 0 if unaddressable
  u32 static_dropped_;
};

}  // namespace detail

// --- RAII regions ------------------------------------------------------------------------------------
// ikp::Region r(prof, EV);  // begin now, end at scope exit (register cursor mode)
template <class P>
class Region {
 public:
  __device__ __forceinline__ Region(P& prof, u32 ev) : prof_(prof), ev_(ev) { prof_.begin(ev_); }
  __device__ __forceinline__ ~Region() { prof_.end(ev_); }
  Region(const Region&) = delete;
  Region& operator=(const Region&) = delete;

 private:
  P& prof_;
  u32 ev_;
};

// ikp::AtomicRegion r(prof, EV[, writer]);  // atomic mode: 2 slots reserved before the begin timer read
template <class P>
class AtomicRegion {
 public:
  __device__ __forceinline__ AtomicRegion(P& prof, u32 ev) : AtomicRegion(prof, ev, prof.leader()) {}
  __device__ __forceinline__ AtomicRegion(P& prof, u32 ev, bool writer)
      : prof_(prof), ev_(ev), writer_(prof.atomic_writer(writer) && prof.atomic_event(ev, 2)),
        k_(writer_ ? prof.reserve(2) : 0u) {
    prof_.record_reserved(ev_, kBegin, k_, writer_);
  }
  __device__ __forceinline__ ~AtomicRegion() { prof_.record_reserved(ev_, kEnd, k_ + 1, writer_); }
  AtomicRegion(const AtomicRegion&) = delete;
  AtomicRegion& operator=(const AtomicRegion&) = delete;

 private:
  P& prof_;
  u32 ev_;
  bool writer_;
  u32 k_;
};

}  // namespace ikp
