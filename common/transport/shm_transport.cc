#include "common/transport/shm_transport.h"

#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <boost/interprocess/mapped_region.hpp>
#include <boost/interprocess/shared_memory_object.hpp>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <new>
#include <regex>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/base/status.h"
#include "common/transport/describe_codec.h"
#include "common/transport/internal/futex.h"
#include "common/transport/internal/shm_layout.h"
#include "common/transport/shm_segments.h"

namespace moesplit::transport {
namespace bip = boost::interprocess;
using namespace shm;  // NOLINT: layout constants

namespace {

constexpr int64_t kSpinUs = 50;
constexpr uint64_t kHeartbeatStaleNs = 1000000000ull;  // 1 s
constexpr int64_t kAcceptWaitUs = 100000;

// Maps every page of a connection segment into this process now (the
// client's call also allocates them), so that the first large calls do not
// pay a page fault per 4 KiB of activations (thousands per ring slot for a
// 512-token call, tens of ms slower on a VM, see tests/bench/README.md).
// MADV_POPULATE_WRITE (Linux 5.14) leaves the contents alone; on older
// kernels this does nothing and the pages fault in on first use as before.
void Prefault(void* addr, uint64_t len) {
#if defined(MADV_POPULATE_WRITE)
  madvise(addr, len, MADV_POPULATE_WRITE);
#else
  (void)addr;
  (void)len;
#endif
}

template <size_t N>
void CopyString(char (&dst)[N], const std::string& s) {
  const size_t n = std::min(N - 1, s.size());
  std::memcpy(dst, s.data(), n);
  dst[n] = '\0';
}

template <size_t N>
std::string ReadString(const char (&src)[N]) {
  return std::string(src, strnlen(src, N));
}

bool HeartbeatFresh(const ControlBlock* c) {
  const uint64_t now = MonotonicNs();
  const uint64_t hb = c->heartbeat_ns.load(std::memory_order_acquire);
  return hb <= now + kHeartbeatStaleNs && now - hb < kHeartbeatStaleNs;
}

// A segment this process maps must be its own user's and private to it
// (mode 0600, as both sides create them): another user's segment of the
// expected name could feed us calls or read ours.
absl::Status CheckSegmentOwner(const bip::shared_memory_object& object, const std::string& name) {
  struct stat st;
  if (fstat(object.get_mapping_handle().handle, &st) != 0) {
    return absl::UnavailableError(absl::StrCat("cannot stat shared-memory segment '", name,
                                               "': ", std::strerror(errno)));
  }
  if (st.st_uid != geteuid()) {
    return absl::PermissionDeniedError(absl::StrCat(
        "shared-memory segment '", name, "' belongs to uid ", st.st_uid,
        ", not to this process's uid ", geteuid(), "; refusing to map it"));
  }
  if ((st.st_mode & 077) != 0) {
    return absl::PermissionDeniedError(absl::StrFormat(
        "shared-memory segment '%s' has mode %04o; only 0600 segments are mapped", name,
        st.st_mode & 07777));
  }
  return absl::OkStatus();
}

}  // namespace

bool ValidShmName(const std::string& name) {
  static const std::regex kName("[A-Za-z0-9_.-]{1,64}");
  return std::regex_match(name, kName);
}

struct ShmExpertServer::Mapping {
  bip::shared_memory_object object;
  bip::mapped_region region;
  void* addr() const { return region.get_address(); }
  size_t size() const { return region.get_size(); }
};

// ------------------------------------------------------------------ server

struct ShmExpertServer::Connection {
  int slot = 0;
  std::unique_ptr<Mapping> mapping;
  std::thread thread;
  std::atomic<bool> done{false};
  ConnHeader* header() const { return static_cast<ConnHeader*>(mapping->addr()); }
};

absl::StatusOr<std::unique_ptr<ShmExpertServer>> ShmExpertServer::Start(
    ShmServerOptions options, const WorkerDescription& description,
    model::ExpertBackend* backend) {
  if (!ValidShmName(options.name)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "shm name '", options.name, "' must be 1-64 characters of [A-Za-z0-9_.-]"));
  }
  if (description.max_tokens <= 0 || description.d <= 0) {
    return absl::InvalidArgumentError("worker description lacks d / max_tokens");
  }
  std::unique_ptr<ShmExpertServer> server(new ShmExpertServer());
  server->name_ = options.name;
  server->address_ = "shm://" + options.name;
  server->options_ = options;
  server->backend_ = backend;
  server->identity_ = description.model_identity;
  server->max_tokens_ = description.max_tokens;
  try {
    // A segment of this name whose worker still beats belongs to a live
    // worker; one that stopped beating (a killed worker's) is replaced. A
    // worker killed just now still looks alive: wait out the stale period.
    try {
      bip::shared_memory_object old(bip::open_only, options.name.c_str(), bip::read_only);
      bip::mapped_region r(old, bip::read_only);
      const auto* c = static_cast<const ControlBlock*>(r.get_address());
      if (r.get_size() >= sizeof(ControlBlock) && c->magic == kControlMagic) {
        const uint64_t give_up = MonotonicNs() + kHeartbeatStaleNs + kHeartbeatStaleNs / 2;
        while (HeartbeatFresh(c) && MonotonicNs() < give_up) usleep(20000);
        if (HeartbeatFresh(c)) {
          return absl::AlreadyExistsError(absl::StrCat(
              "another expert worker is serving shm://", options.name));
        }
      }
    } catch (const bip::interprocess_exception&) {
      // no such segment
    }
    bip::shared_memory_object::remove(options.name.c_str());
    auto m = std::make_unique<Mapping>();
    m->object = bip::shared_memory_object(bip::create_only, options.name.c_str(),
                                          bip::read_write, bip::permissions(0600));
    m->object.truncate(sizeof(ControlBlock));
    m->region = bip::mapped_region(m->object, bip::read_write);
    server->control_ = std::move(m);
  } catch (const bip::interprocess_exception& e) {
    return absl::InternalError(absl::StrCat("shm://", options.name,
                                            ": cannot create segment: ", e.what()));
  }
  auto* c = new (server->control_->addr()) ControlBlock();
  std::memset(static_cast<void*>(c), 0, sizeof(ControlBlock));
  c->magic = kControlMagic;
  c->version = kVersion;
  c->n_slots = kMaxSlots;
  moesplit::v1::DescribeResponse proto;
  ToProto(description, &proto);
  const std::string bytes = proto.SerializeAsString();
  if (bytes.size() > sizeof(c->describe)) {
    return absl::InternalError("worker description too large for the control segment");
  }
  std::memcpy(c->describe, bytes.data(), bytes.size());
  c->describe_len = static_cast<uint32_t>(bytes.size());
  c->heartbeat_ns.store(MonotonicNs());
  c->ready.store(1, std::memory_order_release);
  server->accept_thread_ = std::thread([s = server.get()] { s->AcceptLoop(); });
  return server;
}

ShmExpertServer::~ShmExpertServer() { Shutdown(); }

void ShmExpertServer::Shutdown() {
  if (stop_.exchange(true) || control_ == nullptr) return;
  auto* c = static_cast<ControlBlock*>(control_->addr());
  FutexWakeAll(&c->accept_seq);
  if (accept_thread_.joinable()) accept_thread_.join();
  absl::MutexLock lock(&mu_);
  for (auto& conn : connections_) {
    conn->header()->closed.store(2);
    FutexWakeAll(&conn->header()->req_head);
    FutexWakeAll(&conn->header()->resp_head);
    if (conn->thread.joinable()) conn->thread.join();
  }
  connections_.clear();
  c->heartbeat_ns.store(0);
  bip::shared_memory_object::remove(name_.c_str());
}

void ShmExpertServer::AcceptLoop() {
  auto* c = static_cast<ControlBlock*>(control_->addr());
  while (!stop_.load()) {
    c->heartbeat_ns.store(MonotonicNs(), std::memory_order_release);
    const uint32_t seen = c->accept_seq.load(std::memory_order_acquire);
    for (int i = 0; i < kMaxSlots; ++i) {
      if (c->slots[i].state.load(std::memory_order_acquire) == kRequested) AcceptSlot(i);
    }
    {
      absl::MutexLock lock(&mu_);
      for (auto it = connections_.begin(); it != connections_.end();) {
        if ((*it)->done.load()) {
          (*it)->thread.join();
          c->slots[(*it)->slot].state.store(kFree, std::memory_order_release);
          it = connections_.erase(it);
        } else {
          ++it;
        }
      }
    }
    FutexWait(&c->accept_seq, seen, kAcceptWaitUs);
  }
}

void ShmExpertServer::AcceptSlot(int slot_index) {
  auto* c = static_cast<ControlBlock*>(control_->addr());
  ControlSlot& slot = c->slots[slot_index];
  auto refuse = [&](const std::string& why) {
    std::fprintf(stderr, "moesplit-expert-worker: refused connection on %s: %s\n",
                 address_.c_str(), why.c_str());
    CopyString(slot.error, why);
    slot.state.store(kRefused, std::memory_order_release);
  };
  const std::string identity = ReadString(slot.identity);
  if (!identity_.empty() && identity != identity_) {
    refuse(absl::StrCat("model identity mismatch: the dense service runs model ", identity,
                        ", this worker serves model ", identity_));
    return;
  }
  auto conn = std::make_unique<Connection>();
  conn->slot = slot_index;
  try {
    conn->mapping = std::make_unique<Mapping>();
    conn->mapping->object = bip::shared_memory_object(
        bip::open_only, ReadString(slot.segment).c_str(), bip::read_write);
    if (absl::Status owner = CheckSegmentOwner(conn->mapping->object, ReadString(slot.segment));
        !owner.ok()) {
      refuse(std::string(owner.message()));
      return;
    }
    conn->mapping->region = bip::mapped_region(conn->mapping->object, bip::read_write);
  } catch (const bip::interprocess_exception& e) {
    refuse(absl::StrCat("cannot map connection segment '", ReadString(slot.segment),
                        "': ", e.what()));
    return;
  }
  const ConnHeader* h = conn->header();
  const uint64_t need =
      sizeof(ConnHeader) > 0 ? h->resp_offset + kRing * h->resp_slot_bytes : 0;
  if (conn->mapping->size() < sizeof(ConnHeader) || h->magic != kConnMagic ||
      h->version != kVersion || h->max_tokens > static_cast<uint32_t>(max_tokens_) ||
      h->req_slot_bytes != RequestSlotBytes(h->max_tokens, h->d, h->max_pairs) ||
      h->resp_slot_bytes != ResponseSlotBytes(h->max_tokens, h->d) ||
      need > conn->mapping->size()) {
    refuse("malformed connection segment header");
    return;
  }
  Prefault(conn->mapping->region.get_address(), need);
  live_connections_.fetch_add(1);
  Connection* raw = conn.get();
  conn->thread = std::thread([this, raw] {
    Serve(raw);
    live_connections_.fetch_sub(1);
    raw->done.store(true);
  });
  {
    absl::MutexLock lock(&mu_);
    connections_.push_back(std::move(conn));
  }
  slot.state.store(kConnected, std::memory_order_release);
}

namespace {

// Reads request slot `index` into `call`: the hidden state in place (the
// worker computes straight from the slot), the routing (offsets, expert
// ids, weights: a few hundred bytes) copied into `routing`, so that what the
// backend validates is what it computes with whatever the other side does
// to the slot. InvalidArgument if the header breaks the connection's
// geometry.
absl::Status ReadRequest(const ConnHeader* h, const uint8_t* base, uint32_t index,
                         model::ExpertCall* routing, model::ExpertCallView* call) {
  const uint8_t* p = base + h->req_offset + (index % kRing) * h->req_slot_bytes;
  RequestHeader rh;
  std::memcpy(&rh, p, sizeof rh);
  if (rh.n_tokens < 0 || static_cast<uint32_t>(rh.n_tokens) > h->max_tokens ||
      rh.d != static_cast<int32_t>(h->d) || rh.n_pairs < 0 ||
      static_cast<uint32_t>(rh.n_pairs) > h->max_pairs) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "call %d: n_tokens %d / d %d / pairs %d outside this connection's limits (%d, %d, %d)",
        rh.call_id, rh.n_tokens, rh.d, rh.n_pairs, h->max_tokens, h->d, h->max_pairs));
  }
  call->call_id = rh.call_id;
  call->layer = rh.layer;
  call->n_tokens = rh.n_tokens;
  call->d = rh.d;
  p += sizeof rh;
  const size_t nh = static_cast<size_t>(rh.n_tokens) * rh.d;
  call->hidden = absl::MakeConstSpan(reinterpret_cast<const float*>(p), nh);
  p += 4 * nh;
  auto copy = [&p](auto* v, size_t n) {
    v->resize(n);
    std::memcpy(v->data(), p, 4 * n);
    p += 4 * n;
  };
  copy(&routing->token_offsets, rh.n_tokens + 1);
  copy(&routing->expert_ids, rh.n_pairs);
  copy(&routing->weights, rh.n_pairs);
  call->token_offsets = routing->token_offsets;
  call->expert_ids = routing->expert_ids;
  call->weights = routing->weights;
  return absl::OkStatus();
}

// Where slot `index`'s partial goes (after its ResponseHeader, 8-aligned).
float* ResponsePartial(ConnHeader* h, uint8_t* base, uint32_t index) {
  static_assert(sizeof(ResponseHeader) % 8 == 0);
  return reinterpret_cast<float*>(base + h->resp_offset + (index % kRing) * h->resp_slot_bytes +
                                  sizeof(ResponseHeader));
}

// The response header of slot `index` (the partial is already in place);
// `start`: when the worker took the request (MonotonicNs).
void WriteResponse(ConnHeader* h, uint8_t* base, uint32_t index, uint64_t call_id,
                   const absl::Status& status, uint64_t start) {
  uint8_t* p = base + h->resp_offset + (index % kRing) * h->resp_slot_bytes;
  auto* rh = reinterpret_cast<ResponseHeader*>(p);
  rh->call_id = call_id;
  rh->code = static_cast<int32_t>(status.code());
  const std::string msg(status.message());
  rh->message_len = static_cast<uint32_t>(std::min<size_t>(msg.size(), kMessageBytes - 1));
  std::memcpy(rh->message, msg.data(), rh->message_len);
  rh->worker_ns = MonotonicNs() - start;
}

}  // namespace

void ShmExpertServer::Serve(Connection* conn) {
  ConnHeader* h = conn->header();
  auto* base = static_cast<uint8_t*>(conn->mapping->addr());
  // The routing's copy, sized for the largest call now and kept.
  model::ExpertCall routing;
  routing.token_offsets.reserve(h->max_tokens + 1);
  routing.expert_ids.reserve(h->max_pairs);
  routing.weights.reserve(h->max_pairs);
  model::ExpertCallView call;
  const uint64_t idle_ns = static_cast<uint64_t>(options_.idle_timeout.count()) * 1000000000ull;
  uint32_t tail = h->req_tail.load(std::memory_order_acquire);
  while (!stop_.load(std::memory_order_relaxed) && h->closed.load() == 0) {
    if (h->req_head.load(std::memory_order_acquire) == tail) {
      if (!WaitForChange(&h->req_head, tail, &h->worker_sleeping, kSpinUs, kAcceptWaitUs)) {
        if (MonotonicNs() - h->client_beat_ns.load() > idle_ns) break;
        continue;
      }
    }
    const uint64_t start = MonotonicNs();
    call = {};
    absl::Status status = ReadRequest(h, base, tail, &routing, &call);
    uint64_t worker_ns = 0;
    if (status.ok()) {
      status = backend_->ComputeInto(call, ResponsePartial(h, base, tail), &worker_ns);
    }
    WriteResponse(h, base, tail, call.call_id, status, start);
    ++tail;
    h->req_tail.store(tail, std::memory_order_release);
    Publish(&h->resp_head, tail, &h->client_sleeping);
    if (options_.observer != nullptr) {
      // (The view's hidden state is the slot's, which the client may reuse
      // once the response is published: only sizes are read.)
      const uint64_t in = sizeof(RequestHeader) + 4ull * call.hidden.size() +
                          4ull * call.token_offsets.size() + 8ull * call.expert_ids.size();
      const uint64_t out = sizeof(ResponseHeader) + (status.ok() ? 4ull * call.hidden.size() : 0);
      options_.observer->OnCall("shm", call, in, out, (MonotonicNs() - start) * 1e-9, status);
    }
  }
  h->closed.store(2);
  FutexWakeAll(&h->resp_head);
}

// ------------------------------------------------------------------ client

namespace {

class ShmExpertClient final : public ExpertClient {
 public:
  ShmExpertClient(std::string name, ClientOptions options)
      : name_(std::move(name)), address_("shm://" + name_), options_(std::move(options)),
        backoff_(options_) {}
  ~ShmExpertClient() override { Disconnect(); }

  absl::StatusOr<uint64_t> Submit(const model::ExpertCallView& call) override;
  absl::Status Wait(uint64_t ticket, float* partial, size_t n, uint64_t* worker_ns) override;
  absl::StatusOr<WorkerDescription> Describe() override {
    RETURN_IF_ERROR(EnsureConnected());
    return description_;
  }
  const std::string& address() const override { return address_; }
  bool healthy() const override { return backoff_.healthy(); }
  TransportCounters counters() const override { return counters_.Snapshot(); }
  absl::Status Probe() override;

 private:
  struct Mapping {
    bip::shared_memory_object object;
    bip::mapped_region region;
  };
  absl::Status EnsureConnected();
  absl::Status Connect();
  absl::Status Fail(absl::Status status);
  void Disconnect();
  ConnHeader* header() const { return static_cast<ConnHeader*>(conn_->region.get_address()); }
  uint8_t* base() const { return static_cast<uint8_t*>(conn_->region.get_address()); }
  const ControlBlock* control() const {
    return static_cast<const ControlBlock*>(control_->region.get_address());
  }

  const std::string name_;
  const std::string address_;
  const ClientOptions options_;
  std::unique_ptr<Mapping> control_;
  std::unique_ptr<Mapping> conn_;
  WorkerDescription description_;
  ReconnectBackoff backoff_;
  AtomicTransportCounters counters_;
  uint32_t max_pairs_ = 0;
  uint32_t max_tokens_ = 0;
};

std::atomic<uint32_t> g_connection_counter{0};

absl::Status ShmExpertClient::EnsureConnected() {
  if (conn_ != nullptr) {
    if (header()->closed.load() == 0 && HeartbeatFresh(control())) return absl::OkStatus();
    // The worker closed the connection or stopped: reconnect now (a worker
    // that came back serves this call; readiness already says it is back).
    Disconnect();
    ++counters_.failures;
  }
  RETURN_IF_ERROR(backoff_.MayAttempt());
  absl::Status s = Connect();
  if (!s.ok()) return Fail(s);
  backoff_.Succeeded();
  return absl::OkStatus();
}

// The worker's control segment, mapped read-only afresh (a restarted worker
// publishes a new one): present, ready, a fresh heartbeat, this model.
absl::Status ShmExpertClient::Probe() {
  try {
    bip::shared_memory_object object(bip::open_only, name_.c_str(), bip::read_only);
    RETURN_IF_ERROR(CheckSegmentOwner(object, name_));
    bip::mapped_region region(object, bip::read_only);
    const auto* c = static_cast<const ControlBlock*>(region.get_address());
    if (region.get_size() < sizeof(ControlBlock) || c->magic != kControlMagic ||
        c->version != kVersion || c->ready.load() != 1) {
      return absl::UnavailableError(absl::StrCat("expert worker ", address_, " is still starting"));
    }
    if (!HeartbeatFresh(c)) {
      return absl::UnavailableError(
          absl::StrCat("expert worker ", address_, " stopped (no heartbeat for over 1 s)"));
    }
    moesplit::v1::DescribeResponse proto;
    if (c->describe_len > sizeof(c->describe) ||
        !proto.ParseFromArray(c->describe, static_cast<int>(c->describe_len))) {
      return absl::UnavailableError(
          absl::StrCat("expert worker ", address_, ": unreadable description"));
    }
    RETURN_IF_ERROR(CheckIdentity(address_, FromProto(proto), options_.model_identity));
    backoff_.PeerSeen();
    return absl::OkStatus();
  } catch (const bip::interprocess_exception& e) {
    return absl::UnavailableError(absl::StrCat("expert worker ", address_,
                                               " is not running (no shared-memory segment: ",
                                               e.what(), ")"));
  }
}

absl::Status ShmExpertClient::Connect() {
  auto control = std::make_unique<Mapping>();
  try {
    control->object = bip::shared_memory_object(bip::open_only, name_.c_str(), bip::read_write);
    RETURN_IF_ERROR(CheckSegmentOwner(control->object, name_));
    control->region = bip::mapped_region(control->object, bip::read_write);
  } catch (const bip::interprocess_exception& e) {
    return absl::UnavailableError(absl::StrCat("expert worker ", address_,
                                               " is not running (no shared-memory segment: ",
                                               e.what(), ")"));
  }
  auto* c = static_cast<ControlBlock*>(control->region.get_address());
  if (control->region.get_size() < sizeof(ControlBlock) || c->magic != kControlMagic ||
      c->version != kVersion || c->ready.load() != 1) {
    return absl::UnavailableError(absl::StrCat("expert worker ", address_, " is still starting"));
  }
  if (!HeartbeatFresh(c)) {
    return absl::UnavailableError(absl::StrCat("expert worker ", address_,
                                               " is not running (stale heartbeat)"));
  }
  moesplit::v1::DescribeResponse proto;
  if (c->describe_len > sizeof(c->describe) ||
      !proto.ParseFromArray(c->describe, static_cast<int>(c->describe_len))) {
    return absl::UnavailableError(absl::StrCat("expert worker ", address_,
                                               ": unreadable description"));
  }
  WorkerDescription desc = FromProto(proto);
  RETURN_IF_ERROR(CheckIdentity(address_, desc, options_.model_identity));
  RETURN_IF_ERROR(CheckExpertFfn(address_, desc, options_.expert_ffn));
  const uint32_t max_tokens =
      static_cast<uint32_t>(std::min(options_.max_tokens, desc.max_tokens));
  const uint32_t d = static_cast<uint32_t>(desc.d);
  const uint32_t max_pairs =
      max_tokens * static_cast<uint32_t>(std::max(1, desc.expert_end - desc.expert_begin));
  const uint64_t req = RequestSlotBytes(max_tokens, d, max_pairs);
  const uint64_t resp = ResponseSlotBytes(max_tokens, d);
  const uint64_t req_offset = Align64(sizeof(ConnHeader));
  const uint64_t resp_offset = req_offset + kRing * req;
  const uint64_t total = resp_offset + kRing * resp;
  const std::string seg =
      ConnectionSegmentName(name_, getpid(), g_connection_counter.fetch_add(1));
  auto conn = std::make_unique<Mapping>();
  try {
    bip::shared_memory_object::remove(seg.c_str());
    conn->object = bip::shared_memory_object(bip::create_only, seg.c_str(), bip::read_write,
                                             bip::permissions(0600));
    conn->object.truncate(static_cast<bip::offset_t>(total));
    conn->region = bip::mapped_region(conn->object, bip::read_write);
  } catch (const bip::interprocess_exception& e) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "cannot create shared-memory connection segment '", seg, "' (", total,
        " bytes): ", e.what()));
  }
  Prefault(conn->region.get_address(), total);
  auto* h = new (conn->region.get_address()) ConnHeader();
  h->magic = kConnMagic;
  h->version = kVersion;
  h->max_tokens = max_tokens;
  h->d = d;
  h->max_pairs = max_pairs;
  h->req_slot_bytes = req;
  h->resp_slot_bytes = resp;
  h->req_offset = req_offset;
  h->resp_offset = resp_offset;
  h->client_beat_ns.store(MonotonicNs());
  // Claim a control slot and ask the worker to accept.
  int slot = -1;
  for (int i = 0; i < static_cast<int>(c->n_slots) && i < kMaxSlots; ++i) {
    uint32_t expected = kFree;
    if (c->slots[i].state.compare_exchange_strong(expected, kClaimed)) {
      slot = i;
      break;
    }
  }
  auto drop = [&] { bip::shared_memory_object::remove(seg.c_str()); };
  if (slot < 0) {
    drop();
    return absl::ResourceExhaustedError(
        absl::StrCat("expert worker ", address_, " has no free connection slot"));
  }
  ControlSlot& s = c->slots[slot];
  s.client_pid = static_cast<uint32_t>(getpid());
  CopyString(s.segment, seg);
  CopyString(s.identity, options_.model_identity);
  s.error[0] = '\0';
  s.state.store(kRequested, std::memory_order_release);
  c->accept_seq.fetch_add(1);
  FutexWakeAll(&c->accept_seq);
  const uint64_t deadline = MonotonicNs() + 5000000000ull;
  uint32_t state;
  while ((state = s.state.load(std::memory_order_acquire)) == kRequested &&
         MonotonicNs() < deadline) {
    usleep(200);
  }
  if (state == kRefused) {
    const std::string why = ReadString(s.error);
    s.state.store(kFree, std::memory_order_release);
    drop();
    return absl::FailedPreconditionError(
        absl::StrCat("expert worker ", address_, " refused the connection: ", why));
  }
  if (state != kConnected) {
    uint32_t expected = kRequested;
    s.state.compare_exchange_strong(expected, kFree);
    drop();
    return absl::UnavailableError(
        absl::StrCat("expert worker ", address_, " did not accept the connection within 5 s"));
  }
  drop();  // both sides have it mapped; nothing is left behind if either dies
  control_ = std::move(control);
  conn_ = std::move(conn);
  description_ = std::move(desc);
  max_tokens_ = max_tokens;
  max_pairs_ = max_pairs;
  return absl::OkStatus();
}

absl::Status ShmExpertClient::Fail(absl::Status status) {
  Disconnect();
  ++counters_.failures;
  return backoff_.Failed(std::move(status));
}

void ShmExpertClient::Disconnect() {
  if (conn_ != nullptr) {
    header()->closed.store(1);
    FutexWakeAll(&header()->req_head);
  }
  conn_.reset();
  control_.reset();
}

absl::StatusOr<uint64_t> ShmExpertClient::Submit(const model::ExpertCallView& call) {
  RETURN_IF_ERROR(EnsureConnected());
  ConnHeader* h = header();
  const size_t n_pairs = call.expert_ids.size();
  if (call.n_tokens < 0 || static_cast<uint32_t>(call.n_tokens) > max_tokens_ ||
      call.d != static_cast<int32_t>(h->d) || n_pairs > max_pairs_ ||
      call.weights.size() != n_pairs ||
      call.hidden.size() != static_cast<size_t>(call.n_tokens) * call.d ||
      call.token_offsets.size() != static_cast<size_t>(call.n_tokens) + 1) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "expert call %d does not fit connection %s: n_tokens %d (max %d), d %d (worker %d), "
        "%d pairs (max %d)", call.call_id, address_, call.n_tokens, max_tokens_, call.d, h->d,
        n_pairs, max_pairs_));
  }
  const uint32_t head = h->req_head.load(std::memory_order_relaxed);
  if (head - h->resp_tail.load(std::memory_order_relaxed) >= kRing) {
    return absl::FailedPreconditionError(
        absl::StrCat("more than ", kRing, " calls in flight on ", address_));
  }
  uint8_t* p = base() + h->req_offset + (head % kRing) * h->req_slot_bytes;
  RequestHeader rh{call.call_id, call.layer, call.n_tokens, call.d,
                   static_cast<int32_t>(n_pairs)};
  std::memcpy(p, &rh, sizeof rh);
  p += sizeof rh;
  std::memcpy(p, call.hidden.data(), 4 * call.hidden.size());
  p += 4 * call.hidden.size();
  std::memcpy(p, call.token_offsets.data(), 4 * call.token_offsets.size());
  p += 4 * call.token_offsets.size();
  std::memcpy(p, call.expert_ids.data(), 4 * n_pairs);
  p += 4 * n_pairs;
  std::memcpy(p, call.weights.data(), 4 * n_pairs);
  h->client_beat_ns.store(MonotonicNs(), std::memory_order_relaxed);
  Publish(&h->req_head, head + 1, &h->worker_sleeping);
  ++counters_.calls;
  counters_.bytes_sent += sizeof rh + 4 * (call.hidden.size() + call.token_offsets.size()) + 8 * n_pairs;
  return head;
}

absl::Status ShmExpertClient::Wait(uint64_t ticket, float* partial, size_t n,
                                   uint64_t* worker_ns) {
  if (conn_ == nullptr) {
    return absl::UnavailableError(absl::StrCat("expert worker ", address_, " connection lost"));
  }
  ConnHeader* h = header();
  const uint32_t index = static_cast<uint32_t>(ticket);
  if (h->resp_tail.load() != index) {
    return absl::FailedPreconditionError("expert results must be collected in call order");
  }
  const uint64_t start = MonotonicNs();
  const uint64_t timeout_ns = static_cast<uint64_t>(options_.timeout.count()) * 1000000ull;
  for (;;) {
    const uint32_t head = h->resp_head.load(std::memory_order_acquire);
    if (static_cast<int32_t>(head - index) > 0) break;
    if (h->closed.load() == 2) {
      return Fail(absl::UnavailableError(
          absl::StrCat("expert worker ", address_, " closed the connection")));
    }
    if (!HeartbeatFresh(control())) {
      return Fail(absl::UnavailableError(
          absl::StrCat("expert worker ", address_, " stopped (no heartbeat for over 1 s)")));
    }
    if (MonotonicNs() - start > timeout_ns) {
      return Fail(absl::UnavailableError(absl::StrCat(
          "expert worker ", address_, " did not answer within ", options_.timeout.count(),
          " ms")));
    }
    WaitForChange(&h->resp_head, head, &h->client_sleeping, kSpinUs, 20000);
  }
  const uint8_t* p = base() + h->resp_offset + (index % kRing) * h->resp_slot_bytes;
  ResponseHeader rh;
  std::memcpy(&rh, p, offsetof(ResponseHeader, message));
  absl::Status status;
  if (rh.code != 0) {
    status = absl::Status(static_cast<absl::StatusCode>(rh.code),
                          absl::StrCat(address_, ": ",
                                       std::string(reinterpret_cast<const char*>(p) +
                                                       offsetof(ResponseHeader, message),
                                                   std::min<uint32_t>(rh.message_len,
                                                                      kMessageBytes))));
  } else {
    // The call's geometry is in its request slot (same index).
    RequestHeader req;
    std::memcpy(&req, base() + h->req_offset + (index % kRing) * h->req_slot_bytes, sizeof req);
    const size_t got = static_cast<size_t>(req.n_tokens) * req.d;
    if (got != n) {
      status = absl::InternalError(absl::StrCat(address_, ": call ", rh.call_id, " answered ",
                                                got, " values, ", n, " expected"));
    } else {
      if (worker_ns != nullptr) *worker_ns = rh.worker_ns;
      std::memcpy(partial, p + sizeof(ResponseHeader), 4 * n);
      counters_.bytes_received += sizeof(ResponseHeader) + 4 * n;
    }
  }
  h->resp_tail.store(index + 1, std::memory_order_release);
  h->client_beat_ns.store(MonotonicNs(), std::memory_order_relaxed);
  return status;
}

}  // namespace

std::unique_ptr<ExpertClient> NewShmExpertClient(const std::string& name,
                                                 const ClientOptions& options) {
  return std::make_unique<ShmExpertClient>(name, options);
}

}  // namespace moesplit::transport
