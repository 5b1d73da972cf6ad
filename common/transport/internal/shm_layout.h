// Shared-memory layout of the shm transport (private to common/transport).
//
// Control segment "/NAME" (created by the worker, mode 0600):
//   1. ControlBlock: magic, version, worker heartbeat (CLOCK_MONOTONIC ns,
//      system-wide, so it reads the same in every container of the host),
//      accept futex word, the worker's serialized DescribeResponse, and
//      kMaxSlots connection slots.
// Connection segment "/NAME.c<pid>.<n>" (created by a client, mode 0600,
// unlinked by the client once the worker has mapped it):
//   1. ConnHeader: geometry and four ring counters (monotonic u32):
//        req_head  (client: requests published)   req_tail  (worker: consumed)
//        resp_head (worker: responses published)  resp_tail (client: consumed)
//   2. kRing request slots of req_slot_bytes each:
//        RequestHeader, hidden f32[n_tokens*d], token_offsets u32[n_tokens+1],
//        expert_ids i32[n_pairs], weights f32[n_pairs]
//   3. kRing response slots of resp_slot_bytes each:
//        ResponseHeader, partial f32[n_tokens*d]
// Waiting is spin-then-futex on the head counters (shared, not private,
// futexes). Every std::atomic used here is lock-free and address-free.
#pragma once

#include <atomic>
#include <cstdint>

namespace moesplit::transport::shm {

constexpr uint64_t kControlMagic = 0x4c52544353454f4dull;  // "MOESCTRL"
constexpr uint64_t kConnMagic = 0x4e4e4f4353454f4dull;     // "MOESCONN"
constexpr uint32_t kVersion = 2;  // 2: ResponseHeader::worker_ns
constexpr int kMaxSlots = 64;
constexpr uint32_t kRing = 4;
constexpr int kDescribeBytes = 16384;
constexpr int kMessageBytes = 512;

enum SlotState : uint32_t {
  kFree = 0,
  kClaimed = 1,    // a client is filling in the slot
  kRequested = 2,  // waiting for the worker to accept
  kConnected = 3,
  kRefused = 4,    // error[] says why; the client frees the slot
};

struct alignas(64) ControlSlot {
  std::atomic<uint32_t> state;
  uint32_t client_pid;
  char segment[128];
  char identity[64];
  char error[kMessageBytes];
};

struct ControlBlock {
  uint64_t magic;
  uint32_t version;
  uint32_t n_slots;
  std::atomic<uint64_t> heartbeat_ns;
  std::atomic<uint32_t> accept_seq;  // futex word: clients bump it
  std::atomic<uint32_t> ready;       // describe[] is valid
  uint32_t describe_len;
  char describe[kDescribeBytes];
  ControlSlot slots[kMaxSlots];
};

struct ConnHeader {
  uint64_t magic;
  uint32_t version;
  uint32_t max_tokens;
  uint32_t d;
  uint32_t max_pairs;
  uint64_t req_slot_bytes;
  uint64_t resp_slot_bytes;
  uint64_t req_offset;
  uint64_t resp_offset;
  alignas(64) std::atomic<uint32_t> req_head;
  alignas(64) std::atomic<uint32_t> req_tail;
  alignas(64) std::atomic<uint32_t> resp_head;
  alignas(64) std::atomic<uint32_t> resp_tail;
  alignas(64) std::atomic<uint32_t> worker_sleeping;
  std::atomic<uint32_t> client_sleeping;
  std::atomic<uint32_t> closed;  // 1: client gone, 2: worker gone
  std::atomic<uint64_t> client_beat_ns;
};

struct RequestHeader {
  uint64_t call_id;
  int32_t layer;
  int32_t n_tokens;
  int32_t d;
  int32_t n_pairs;
};

struct ResponseHeader {
  uint64_t call_id;
  int32_t code;
  uint32_t message_len;
  uint64_t worker_ns;  // the worker's time on the call (ExpertResult::worker_ns)
  char message[kMessageBytes];
};

static_assert(std::atomic<uint32_t>::is_always_lock_free);
static_assert(std::atomic<uint64_t>::is_always_lock_free);

inline uint64_t Align64(uint64_t v) { return (v + 63) / 64 * 64; }

inline uint64_t RequestSlotBytes(uint32_t max_tokens, uint32_t d, uint32_t max_pairs) {
  return Align64(sizeof(RequestHeader) + 4ull * max_tokens * d + 4ull * (max_tokens + 1) +
                 8ull * max_pairs);
}
inline uint64_t ResponseSlotBytes(uint32_t max_tokens, uint32_t d) {
  return Align64(sizeof(ResponseHeader) + 4ull * max_tokens * d);
}

}  // namespace moesplit::transport::shm
