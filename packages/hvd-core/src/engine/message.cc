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
    need(static_cast<size_t>(n) * min_item_bytes);
    return n;
  }

 private:
  void need(size_t n) {
    if (in_.size() - pos_ < n) throw_error(ErrorCode::kInternal, "corrupt control message (truncated)");
  }
  const std::string& in_;
  size_t pos_ = 0;
};

}  // namespace

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
  }
  return w.take();
}

std::vector<RequestMeta> decode_requests(const std::string& payload) {
  Reader r(payload);
  uint32_t n = r.count(4);
  std::vector<RequestMeta> out(n);
  for (auto& m : out) {
    m.name = r.str();
    m.collective = static_cast<Collective>(r.pod<uint8_t>());
    m.dtype = static_cast<DataType>(r.pod<uint8_t>());
    m.device = r.pod<uint8_t>() == 0 ? Device::kCpu : Device::kCuda;
    m.reduce_op = r.pod<int32_t>();
    m.root_rank = r.pod<int32_t>();
    m.prescale = r.pod<double>();
    m.postscale = r.pod<double>();
    m.shape = r.i64s();
    m.group_key = r.str();
    m.group_size = r.pod<int32_t>();
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
  }
  return w.take();
}

std::vector<Response> decode_responses(const std::string& payload) {
  Reader r(payload);
  uint32_t n = r.count(4);
  std::vector<Response> out(n);
  for (auto& m : out) {
    m.kind = static_cast<Response::Kind>(r.pod<uint8_t>());
    m.collective = static_cast<Collective>(r.pod<uint8_t>());
    m.dtype = static_cast<DataType>(r.pod<uint8_t>());
    m.device = r.pod<uint8_t>() == 0 ? Device::kCpu : Device::kCuda;
    m.reduce_op = r.pod<int32_t>();
    m.root_rank = r.pod<int32_t>();
    m.prescale = r.pod<double>();
    m.postscale = r.pod<double>();
    uint32_t k = r.count(12);
    m.names.resize(k);
    m.shapes.resize(k);
    m.first_dims.resize(k);
    for (uint32_t i = 0; i < k; ++i) {
      m.names[i] = r.str();
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
  for (auto& n : out) n = r.str();
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
