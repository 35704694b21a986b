// message.cc - a small explicit little-endian binary encoding for control
// messages; decoding checks every length so a truncated or corrupt payload
// becomes an error instead of a crash.
#include "engine/message.h"

#include <cstring>

#include "common/error.h"

namespace hvd {

const char* device_name(Device d) { return d == Device::kCuda ? "GPU" : "CPU"; }

const char* collective_name(Collective c) {
  switch (c) {
    case Collective::kAllreduce: return "allreduce";
    case Collective::kAllgather: return "allgather";
    case Collective::kBroadcast: return "broadcast";
    case Collective::kAlltoall: return "alltoall";
    case Collective::kReducescatter: return "reducescatter";
    case Collective::kBarrier: return "barrier";
    case Collective::kJoin: return "join";
  }
  return "unknown";
}

std::string collective_upper_name(Collective c) {
  std::string s = collective_name(c);
  for (auto& ch : s) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  return s;
}

namespace {

class Writer {
 public:
  // Most messages are one small request or response: one allocation.
  Writer() { out_.reserve(256); }
  template <typename T>
  void pod(T v) { out_.append(reinterpret_cast<const char*>(&v), sizeof(T)); }
  void str(const std::string& s) {
    pod<uint32_t>(static_cast<uint32_t>(s.size()));
    out_.append(s);
  }
  void i64s(const std::vector<int64_t>& v) {
    pod<uint32_t>(static_cast<uint32_t>(v.size()));
    for (auto x : v) pod<int64_t>(x);
  }
  std::string take() { return std::move(out_); }

 private:
  std::string out_;
};

class Reader {
 public:
  explicit Reader(const std::string& in) : in_(in) {}
  template <typename T>
  T pod() {
    need(sizeof(T));
    T v;
    std::memcpy(&v, in_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  std::string str() {
    uint32_t n = pod<uint32_t>();
    need(n);
    std::string s = in_.substr(pos_, n);
    pos_ += n;
    return s;
  }
  std::vector<int64_t> i64s() {
    uint32_t n = pod<uint32_t>();
    need(static_cast<size_t>(n) * 8);
    std::vector<int64_t> v(n);
    for (auto& x : v) x = pod<int64_t>();
    return v;
  }
  uint32_t count(size_t min_item_bytes) {
    uint32_t n = pod<uint32_t>();
    if (static_cast<size_t>(n) * min_item_bytes > in_.size() - pos_) {
      corrupt("a count of " + std::to_string(n) + " items, which need at least " +
              std::to_string(static_cast<size_t>(n) * min_item_bytes) + " bytes; " +
              std::to_string(in_.size() - pos_) + " are left");
    }
    return n;
  }
  // A byte that must be one of the values first..last of enum E.
  template <typename E>
  E enumerator(int first, int last, const char* what) {
    auto v = pod<uint8_t>();
    if (v < first || v > last) corrupt(std::string("unknown ") + what + " " + std::to_string(v));
    return static_cast<E>(v);
  }
  int32_t int_in(int32_t first, int32_t last, const char* what) {
    auto v = pod<int32_t>();
    if (v < first || v > last) corrupt(std::string("unknown ") + what + " " + std::to_string(v));
    return v;
  }
  std::string inline_bytes() {
    std::string s = str();
    if (s.size() > kMaxInlineBytes) corrupt("inline data of " + std::to_string(s.size()) + " bytes");
    return s;
  }
  std::string name() {
    std::string s = str();
    if (s.size() > kMaxTensorNameBytes) corrupt("a tensor name of " + std::to_string(s.size()) + " bytes");
    return s;
  }

 private:
  void need(size_t n) {
    if (in_.size() - pos_ < n) corrupt("truncated");
  }
  [[noreturn]] static void corrupt(const std::string& why) {
    throw_error(ErrorCode::kInternal, "corrupt control message (" + why + ")");
  }
  const std::string& in_;
  size_t pos_ = 0;
};

}  // namespace

int64_t response_bytes(const Response& r) {
  int64_t total = 0;
  for (const auto& shape : r.shapes) {
    int64_t n = static_cast<int64_t>(dtype_size(r.dtype));
    for (auto d : shape) n *= d;
    total += n;
  }
  return total;
}

double result_scale(int32_t op, double postscale, int members) {
  return op == HVD_OP_AVERAGE ? postscale / static_cast<double>(members) : postscale;
}

int64_t num_elements(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

int64_t scattered_rows(int64_t rows, int64_t members, int64_t member) {
  return rows / members + (member < rows % members ? 1 : 0);
}

ReduceOp transport_op(int32_t op) {
  switch (op) {
    case HVD_OP_MIN: return ReduceOp::kMin;
    case HVD_OP_MAX: return ReduceOp::kMax;
    case HVD_OP_PRODUCT: return ReduceOp::kProduct;
    default: return ReduceOp::kSum;  // Sum, Average
  }
}

std::string encode_requests(const std::vector<RequestMeta>& requests) {
  Writer w;
  w.pod<uint32_t>(static_cast<uint32_t>(requests.size()));
  for (const auto& r : requests) {
    w.str(r.name);
    w.pod<uint8_t>(static_cast<uint8_t>(r.collective));
    w.pod<uint8_t>(static_cast<uint8_t>(r.dtype));
    w.pod<uint8_t>(static_cast<uint8_t>(r.device));
    w.pod<int32_t>(r.reduce_op);
    w.pod<int32_t>(r.root_rank);
    w.pod<double>(r.prescale);
    w.pod<double>(r.postscale);
    w.i64s(r.shape);
    w.str(r.group_key);
    w.pod<int32_t>(r.group_size);
    w.str(r.inline_data);
  }
  return w.take();
}

// The fewest bytes one encoded item takes (every string and list empty), so a
// count is checked against what the payload can really hold before anything
// is allocated for it.
constexpr size_t kMinRequestBytes = 4 + 1 + 1 + 1 + 4 + 4 + 8 + 8 + 4 + 4 + 4 + 4;
constexpr size_t kMinResponseBytes = 1 + 1 + 1 + 1 + 4 + 4 + 8 + 8 + 4 + 4 + 4 + 4 + 4 + 4 + 4 + 8 + 1 + 4 + 4;
constexpr size_t kMinResponseTensorBytes = 4 + 4 + 4;

std::vector<RequestMeta> decode_requests(const std::string& payload) {
  Reader r(payload);
  uint32_t n = r.count(kMinRequestBytes);
  std::vector<RequestMeta> out(n);
  for (auto& m : out) {
    m.name = r.name();
    m.collective = r.enumerator<Collective>(HVD_ALLREDUCE, HVD_JOIN, "collective");
    m.dtype = r.enumerator<DataType>(0, static_cast<int>(DataType::kBool), "dtype");
    m.device = r.enumerator<Device>(0, 1, "device");
    m.reduce_op = r.int_in(HVD_OP_AVERAGE, HVD_OP_PRODUCT, "reduce op");
    m.root_rank = r.pod<int32_t>();
    m.prescale = r.pod<double>();
    m.postscale = r.pod<double>();
    m.shape = r.i64s();
    m.group_key = r.str();
    m.group_size = r.pod<int32_t>();
    m.inline_data = r.inline_bytes();
  }
  return out;
}

std::string encode_responses(const std::vector<Response>& responses) {
  Writer w;
  w.pod<uint32_t>(static_cast<uint32_t>(responses.size()));
  for (const auto& r : responses) {
    w.pod<uint8_t>(static_cast<uint8_t>(r.kind));
    w.pod<uint8_t>(static_cast<uint8_t>(r.collective));
    w.pod<uint8_t>(static_cast<uint8_t>(r.dtype));
    w.pod<uint8_t>(static_cast<uint8_t>(r.device));
    w.pod<int32_t>(r.reduce_op);
    w.pod<int32_t>(r.root_rank);
    w.pod<double>(r.prescale);
    w.pod<double>(r.postscale);
    w.pod<uint32_t>(static_cast<uint32_t>(r.names.size()));
    for (size_t i = 0; i < r.names.size(); ++i) {
      w.str(r.names[i]);
      w.i64s(i < r.shapes.size() ? r.shapes[i] : std::vector<int64_t>{});
      w.i64s(i < r.first_dims.size() ? r.first_dims[i] : std::vector<int64_t>{});
    }
    w.pod<uint32_t>(static_cast<uint32_t>(r.joined_ranks.size()));
    for (auto j : r.joined_ranks) w.pod<int32_t>(j);
    w.pod<int32_t>(r.last_joined_rank);
    w.str(r.error_message);
    w.pod<int32_t>(r.error_code);
    w.pod<uint32_t>(static_cast<uint32_t>(r.error_ranks.size()));
    for (auto rank : r.error_ranks) w.pod<int32_t>(rank);
    w.str(r.inline_result);
    w.pod<uint64_t>(r.lane_key);
    w.pod<uint8_t>(static_cast<uint8_t>((r.hierarchical_allreduce ? 1 : 0) | (r.hierarchical_allgather ? 2 : 0)));
    w.pod<uint32_t>(r.pipeline_chunk_bytes);
    w.pod<uint32_t>(r.cycle_time_us);
  }
  return w.take();
}

std::vector<Response> decode_responses(const std::string& payload) {
  Reader r(payload);
  uint32_t n = r.count(kMinResponseBytes);
  std::vector<Response> out(n);
  for (auto& m : out) {
    m.kind = r.enumerator<Response::Kind>(0, 1, "response kind");
    m.collective = r.enumerator<Collective>(HVD_ALLREDUCE, HVD_JOIN, "collective");
    m.dtype = r.enumerator<DataType>(0, static_cast<int>(DataType::kBool), "dtype");
    m.device = r.enumerator<Device>(0, 1, "device");
    m.reduce_op = r.int_in(HVD_OP_AVERAGE, HVD_OP_PRODUCT, "reduce op");
    m.root_rank = r.pod<int32_t>();
    m.prescale = r.pod<double>();
    m.postscale = r.pod<double>();
    uint32_t k = r.count(kMinResponseTensorBytes);
    m.names.resize(k);
    m.shapes.resize(k);
    m.first_dims.resize(k);
    for (uint32_t i = 0; i < k; ++i) {
      m.names[i] = r.name();
      m.shapes[i] = r.i64s();
      m.first_dims[i] = r.i64s();
    }
    uint32_t j = r.count(4);
    m.joined_ranks.resize(j);
    for (auto& x : m.joined_ranks) x = r.pod<int32_t>();
    m.last_joined_rank = r.pod<int32_t>();
    m.error_message = r.str();
    m.error_code = r.pod<int32_t>();
    m.error_ranks.resize(r.count(4));
    for (auto& rank : m.error_ranks) rank = r.pod<int32_t>();
    m.inline_result = r.inline_bytes();
    m.lane_key = r.pod<uint64_t>();
    const uint8_t staging = r.pod<uint8_t>();
    m.hierarchical_allreduce = (staging & 1) != 0;
    m.hierarchical_allgather = (staging & 2) != 0;
    m.pipeline_chunk_bytes = r.pod<uint32_t>();
    m.cycle_time_us = r.pod<uint32_t>();
  }
  return out;
}

std::string encode_names(const std::vector<std::string>& names) {
  Writer w;
  w.pod<uint32_t>(static_cast<uint32_t>(names.size()));
  for (const auto& n : names) w.str(n);
  return w.take();
}

std::vector<std::string> decode_names(const std::string& payload) {
  Reader r(payload);
  std::vector<std::string> out(r.count(4));
  for (auto& n : out) n = r.name();
  return out;
}

std::string encode_failure(const Error& error) {
  Writer w;
  w.str(error.what());
  w.str(error.tensor());
  w.pod<uint32_t>(static_cast<uint32_t>(error.ranks().size()));
  for (int rank : error.ranks()) w.pod<int32_t>(rank);
  return w.take();
}

Error decode_failure(const std::string& payload) {
  Reader r(payload);
  std::string message = r.str();
  std::string tensor = r.str();
  std::vector<int> ranks(r.count(4));
  for (auto& rank : ranks) rank = r.pod<int32_t>();
  return Error(ErrorCode::kInternal, message, std::move(tensor), std::move(ranks));
}

}  // namespace hvd
