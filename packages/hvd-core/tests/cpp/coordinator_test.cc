// coordinator_test.cc - the negotiation rules, without processes or sockets:
// readiness, cross-rank validation, fusion, cycle-time batching, join,
// groups, shutdown of a member, stalls, divergence, the response cache, and
// the wire format of control messages.
#include <chrono>
#include <string>
#include <utility>
#include <vector>

#include "common/error.h"
#include "engine/coordinator.h"
#include "engine/message.h"
#include "test_harness.h"

using namespace hvd;

namespace {

RequestMeta allreduce(const std::string& name, std::vector<int64_t> shape, DataType dtype = DataType::kFloat32) {
  RequestMeta m;
  m.name = name;
  m.collective = Collective::kAllreduce;
  m.dtype = dtype;
  m.reduce_op = HVD_OP_SUM;
  m.shape = std::move(shape);
  return m;
}

CoordinatorConfig config(int size, double cycle_seconds = 0.0) {
  CoordinatorConfig c;
  for (int r = 0; r < size; ++r) c.global_ranks.push_back(r);
  c.cycle_time_seconds = cycle_seconds;
  return c;
}

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

}  // namespace

HVD_TEST(tensor_runs_only_after_every_rank_submitted_it) {
  Coordinator c(config(3), nullptr);
  auto now = Clock::now();
  Clock::time_point wake = Clock::time_point::max();
  c.add_request(0, allreduce("a", {4}), now);
  c.add_request(2, allreduce("a", {4}), now);
  EXPECT_TRUE(c.take_responses(now, &wake).empty());
  c.add_request(1, allreduce("a", {4}), now);
  auto out = c.take_responses(now, &wake);
  EXPECT_EQ(out.size(), 1u);
  EXPECT_TRUE(out[0].kind == Response::Kind::kExecute);
  EXPECT_EQ(out[0].names[0], std::string("a"));
  EXPECT_TRUE(c.take_responses(now, &wake).empty());
}

HVD_TEST(mismatched_shapes_become_an_error_naming_the_tensor_and_every_rank) {
  Coordinator c(config(3), nullptr);
  auto now = Clock::now();
  Clock::time_point wake = Clock::time_point::max();
  c.add_request(0, allreduce("t", {2, 3}), now);
  c.add_request(1, allreduce("t", {3, 3}), now);
  c.add_request(2, allreduce("t", {3, 3}), now);
  auto out = c.take_responses(now, &wake);
  EXPECT_EQ(out.size(), 1u);
  EXPECT_TRUE(out[0].kind == Response::Kind::kError);
  EXPECT_EQ(out[0].error_code, static_cast<int32_t>(HVD_ERROR_PRECONDITION));
  EXPECT_TRUE(contains(out[0].error_message, "'t'"));
  EXPECT_TRUE(contains(out[0].error_message, "rank 0 requested shape [2, 3]"));
  EXPECT_TRUE(contains(out[0].error_message, "ranks 1, 2 requested shape [3, 3]"));
}

HVD_TEST(mismatched_dtype_op_root_and_scale_are_errors) {
  auto check = [](RequestMeta a, RequestMeta b, const std::string& what) {
    Coordinator c(config(2), nullptr);
    auto now = Clock::now();
    Clock::time_point wake = Clock::time_point::max();
    c.add_request(0, a, now);
    c.add_request(1, b, now);
    auto out = c.take_responses(now, &wake);
    EXPECT_EQ(out.size(), 1u);
    EXPECT_TRUE(out[0].kind == Response::Kind::kError);
    if (!contains(out[0].error_message, what)) ::hvd_test::fail(__FILE__, __LINE__, out[0].error_message);
  };
  check(allreduce("x", {2}), allreduce("x", {2}, DataType::kInt32), "Mismatched data types");
  RequestMeta max_op = allreduce("x", {2});
  max_op.reduce_op = HVD_OP_MAX;
  check(allreduce("x", {2}), max_op, "Mismatched reduction operations");
  RequestMeta scaled = allreduce("x", {2});
  scaled.prescale = 2.0;
  check(allreduce("x", {2}), scaled, "Mismatched prescale factors");
  RequestMeta b0 = allreduce("x", {2}), b1 = allreduce("x", {2});
  b0.collective = b1.collective = Collective::kBroadcast;
  b1.root_rank = 1;
  check(b0, b1, "Mismatched root ranks");
  RequestMeta gather = allreduce("x", {2});
  gather.collective = Collective::kAllgather;
  check(allreduce("x", {2}), gather, "Mismatched collective operations");
}

HVD_TEST(allgather_allows_different_first_dimensions_and_reports_them) {
  Coordinator c(config(2), nullptr);
  auto now = Clock::now();
  Clock::time_point wake = Clock::time_point::max();
  RequestMeta a = allreduce("g", {1, 5}), b = allreduce("g", {4, 5});
  a.collective = b.collective = Collective::kAllgather;
  c.add_request(0, a, now);
  c.add_request(1, b, now);
  auto out = c.take_responses(now, &wake);
  EXPECT_EQ(out.size(), 1u);
  EXPECT_TRUE(out[0].kind == Response::Kind::kExecute);
  EXPECT_TRUE((out[0].first_dims[0] == std::vector<int64_t>{1, 4}));
}

HVD_TEST(compatible_allreduces_fuse_up_to_the_threshold) {
  CoordinatorConfig cfg = config(2);
  cfg.fusion_threshold_bytes = 100;  // 25 float32
  Coordinator c(cfg, nullptr);
  auto now = Clock::now();
  Clock::time_point wake = Clock::time_point::max();
  for (const char* n : {"a", "b", "c"}) {
    c.add_request(0, allreduce(n, {10}), now);
    c.add_request(1, allreduce(n, {10}), now);
  }
  c.add_request(0, allreduce("d", {10}, DataType::kFloat64), now);
  c.add_request(1, allreduce("d", {10}, DataType::kFloat64), now);
  auto out = c.take_responses(now, &wake);
  // a+b fit in 100 bytes (80), c does not; d has another dtype.
  EXPECT_EQ(out.size(), 3u);
  EXPECT_EQ(out[0].names.size(), 2u);
  EXPECT_EQ(out[1].names.size(), 1u);
  EXPECT_EQ(out[1].names[0], std::string("c"));
  EXPECT_TRUE(out[2].dtype == DataType::kFloat64);
}

HVD_TEST(a_run_of_allreduces_fuses_into_responses_that_each_stay_within_the_threshold) {
  CoordinatorConfig cfg = config(2);
  cfg.fusion_threshold_bytes = 100;  // 25 float32
  Coordinator c(cfg, nullptr);
  auto now = Clock::now();
  Clock::time_point wake = Clock::time_point::max();
  // 12, 12, 12, 1, 24, 1, 1 elements: 12+12, 12+1, 24+1 (100 bytes), 1.
  const std::vector<std::pair<std::string, int64_t>> tensors = {{"t0", 12}, {"t1", 12}, {"t2", 12}, {"t3", 1},
                                                                {"t4", 24}, {"t5", 1},  {"t6", 1}};
  for (const auto& [name, n] : tensors) {
    c.add_request(0, allreduce(name, {n}), now);
    c.add_request(1, allreduce(name, {n}), now);
  }
  auto out = c.take_responses(now, &wake);
  EXPECT_EQ(out.size(), 4u);
  const std::vector<std::vector<std::string>> names = {{"t0", "t1"}, {"t2", "t3"}, {"t4", "t5"}, {"t6"}};
  for (size_t r = 0; r < out.size() && r < names.size(); ++r) {
    EXPECT_TRUE(out[r].names == names[r]);
    EXPECT_EQ(out[r].shapes.size(), names[r].size());
    EXPECT_EQ(out[r].first_dims.size(), names[r].size());
    EXPECT_TRUE(response_bytes(out[r]) <= cfg.fusion_threshold_bytes);
  }
  EXPECT_TRUE((out[2].shapes == std::vector<std::vector<int64_t>>{{24}, {1}}));
}

HVD_TEST(cycle_time_holds_ready_work_only_while_more_is_half_submitted) {
  Coordinator c(config(2, 0.005), nullptr);
  auto now = Clock::now();
  Clock::time_point wake = Clock::time_point::max();
  // A lone request goes out at once.
  c.add_request(0, allreduce("lone", {1}), now);
  c.add_request(1, allreduce("lone", {1}), now);
  EXPECT_EQ(c.take_responses(Clock::now(), &wake).size(), 1u);
  // Ready "a" while "b" is half-submitted: held until the cycle deadline...
  c.add_request(0, allreduce("a", {1}), now);
  c.add_request(1, allreduce("a", {1}), now);
  c.add_request(0, allreduce("b", {1}), now);
  wake = Clock::time_point::max();
  EXPECT_TRUE(c.take_responses(Clock::now(), &wake).empty());
  EXPECT_TRUE(wake != Clock::time_point::max());
  // ...and fused with "b" if it completes in time.
  c.add_request(1, allreduce("b", {1}), now);
  auto out = c.take_responses(Clock::now(), &wake);
  EXPECT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].names.size(), 2u);
  // Past the deadline it goes out alone.
  c.add_request(0, allreduce("x", {1}), now);
  c.add_request(1, allreduce("x", {1}), now);
  c.add_request(0, allreduce("y", {1}), now);
  out = c.take_responses(Clock::now() + std::chrono::milliseconds(10), &wake);
  EXPECT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].names[0], std::string("x"));
}

HVD_TEST(joined_ranks_take_part_with_zeros_and_join_reports_the_last_rank) {
  Coordinator c(config(3), nullptr);
  auto now = Clock::now();
  Clock::time_point wake = Clock::time_point::max();
  RequestMeta join;
  join.collective = Collective::kJoin;
  join.name = "join";
  c.add_request(1, join, now);
  c.add_request(0, allreduce("g", {2}), now);
  c.add_request(2, allreduce("g", {2}), now);
  auto out = c.take_responses(now, &wake);
  EXPECT_EQ(out.size(), 1u);
  EXPECT_TRUE((out[0].joined_ranks == std::vector<int32_t>{1}));
  c.add_request(2, join, now);
  EXPECT_TRUE(c.take_responses(now, &wake).empty());
  c.add_request(0, join, now);
  out = c.take_responses(now, &wake);
  EXPECT_EQ(out.size(), 1u);
  EXPECT_TRUE(out[0].collective == Collective::kJoin);
  EXPECT_EQ(out[0].last_joined_rank, 0);
  // Broadcast is not allowed while a rank has joined.
  c.add_request(2, join, now);
  RequestMeta b = allreduce("b", {1});
  b.collective = Collective::kBroadcast;
  c.add_request(0, b, now);
  c.add_request(1, b, now);
  out = c.take_responses(now, &wake);
  EXPECT_EQ(out.size(), 1u);
  EXPECT_TRUE(out[0].kind == Response::Kind::kError);
  EXPECT_TRUE(contains(out[0].error_message, "joined"));
  // Nor an allgather (Horovod's rule): only allreduce runs with joined ranks.
  RequestMeta g = allreduce("g", {1});
  g.collective = Collective::kAllgather;
  c.add_request(0, g, now);
  c.add_request(1, g, now);
  out = c.take_responses(now, &wake);
  EXPECT_EQ(out.size(), 1u);
  EXPECT_TRUE(out[0].kind == Response::Kind::kError);
  EXPECT_TRUE(contains(out[0].error_message, "only allreduce supports join"));
}

HVD_TEST(a_group_is_released_only_when_all_its_tensors_are_ready) {
  Coordinator c(config(2), nullptr);
  auto now = Clock::now();
  Clock::time_point wake = Clock::time_point::max();
  auto member = [](const std::string& n) {
    RequestMeta m = allreduce(n, {3});
    m.group_key = "g0";
    m.group_size = 2;
    return m;
  };
  c.add_request(0, member("g0"), now);
  c.add_request(1, member("g0"), now);
  c.add_request(0, member("g1"), now);
  EXPECT_TRUE(c.take_responses(now, &wake).empty());
  c.add_request(1, member("g1"), now);
  auto out = c.take_responses(now, &wake);
  EXPECT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].names.size(), 2u);
}

HVD_TEST(a_member_that_left_makes_the_set_unusable) {
  Coordinator c(config(3), nullptr);
  auto now = Clock::now();
  EXPECT_TRUE(c.departure().empty() && c.idle());
  c.member_left(2);
  EXPECT_TRUE(contains(c.departure(), "rank 2 has shut down"));
  EXPECT_TRUE(c.idle());  // nothing pending: a job that simply ends has nothing to report
  c.add_request(0, allreduce("p", {1}), now);
  EXPECT_TRUE(!c.idle());  // now the set must fail: "p" can never complete
}

HVD_TEST(stall_shutdown_names_the_missing_ranks) {
  CoordinatorConfig cfg = config(3);
  cfg.stall_check_seconds = 1;
  cfg.stall_shutdown_seconds = 2;
  Coordinator c(cfg, nullptr);
  auto then = Clock::now() - std::chrono::seconds(5);
  c.add_request(1, allreduce("slow", {1}), then);
  std::string fatal = c.inspect_stalls(Clock::now());
  EXPECT_TRUE(contains(fatal, "'slow'"));
  EXPECT_TRUE(contains(fatal, "rank(s) 0, 2"));
}

HVD_TEST(ranks_blocked_on_different_tensors_are_a_divergence_naming_both) {
  CoordinatorConfig cfg = config(2);
  cfg.divergence_seconds = 5;
  Coordinator c(cfg, nullptr);
  auto t0 = Clock::now();
  RequestMeta barrier;
  barrier.name = "barrier.noname.0";
  barrier.collective = Collective::kBarrier;
  c.add_request(0, allreduce("process_set.remove.0", {2}), t0);
  c.add_request(1, barrier, t0);
  c.set_waiting(0, {"process_set.remove.0"}, t0);
  c.set_waiting(1, {"barrier.noname.0"}, t0);
  // Not before the state has held for divergence_seconds.
  EXPECT_TRUE(c.inspect_divergence(t0 + std::chrono::seconds(4)).empty());
  std::string why = c.inspect_divergence(t0 + std::chrono::seconds(6));
  EXPECT_TRUE(contains(why, "rank 0 waits on allreduce 'process_set.remove.0' (submitted by rank 0 only)"));
  EXPECT_TRUE(contains(why, "rank 1 waits on barrier 'barrier.noname.0' (submitted by rank 1 only)"));
  EXPECT_TRUE(contains(why, "hvd.init()"));
}

HVD_TEST(divergence_needs_every_rank_blocked_and_nothing_ready) {
  CoordinatorConfig cfg = config(3);
  cfg.divergence_seconds = 1;
  auto t0 = Clock::now();
  auto late = t0 + std::chrono::seconds(10);
  {
    // Rank 2 is not blocked (computing): it may still submit "x".
    Coordinator c(cfg, nullptr);
    c.add_request(0, allreduce("x", {1}), t0);
    c.add_request(1, allreduce("y", {1}), t0);
    c.set_waiting(0, {"x"}, t0);
    c.set_waiting(1, {"y"}, t0);
    EXPECT_TRUE(c.inspect_divergence(late).empty());
    // Once it blocks on a third tensor, nothing can complete.
    c.add_request(2, allreduce("z", {1}), t0);
    c.set_waiting(2, {"z"}, t0);
    EXPECT_TRUE(c.inspect_divergence(t0 + std::chrono::milliseconds(500)).empty());
    EXPECT_TRUE(!c.inspect_divergence(late).empty());
  }
  {
    // Everyone waits, but on a tensor that every rank submitted: it runs.
    Coordinator c(cfg, nullptr);
    for (int m = 0; m < 3; ++m) {
      c.add_request(m, allreduce("ready", {1}), t0);
      c.set_waiting(m, {"ready"}, t0);
    }
    c.add_request(0, allreduce("other", {1}), t0);
    EXPECT_TRUE(c.inspect_divergence(late).empty());
  }
  {
    // A joined rank counts as waiting; the others wait on different tensors.
    Coordinator c(cfg, nullptr);
    RequestMeta join;
    join.name = "join";
    join.collective = Collective::kJoin;
    c.add_request(2, join, t0);
    c.add_request(0, allreduce("a", {1}), t0);
    c.add_request(1, allreduce("b", {1}), t0);
    c.set_waiting(0, {"a"}, t0);
    c.set_waiting(1, {"b"}, t0);
    EXPECT_TRUE(contains(c.inspect_divergence(late), "rank 2 has joined"));
  }
  {
    // Disabled with divergence_seconds = 0.
    CoordinatorConfig off = cfg;
    off.divergence_seconds = 0;
    Coordinator c(off, nullptr);
    for (int m = 0; m < 3; ++m) {
      std::string name(1, static_cast<char>('a' + m));
      c.add_request(m, allreduce(name, {1}), t0);
      c.set_waiting(m, {name}, t0);
    }
    EXPECT_TRUE(c.inspect_divergence(late).empty());
  }
}

HVD_TEST(response_cache_reuses_identical_requests) {
  Coordinator c(config(2), nullptr);
  Clock::time_point wake = Clock::time_point::max();
  for (int i = 0; i < 5; ++i) {
    auto now = Clock::now();
    c.add_request(0, allreduce("w", {8}), now);
    c.add_request(1, allreduce("w", {8}), now);
    EXPECT_EQ(c.take_responses(now, &wake).size(), 1u);
  }
  EXPECT_EQ(c.cache_hits(), 4u);
  // A changed request is validated again, not served from the cache.
  auto now = Clock::now();
  c.add_request(0, allreduce("w", {8}), now);
  c.add_request(1, allreduce("w", {9}), now);
  auto out = c.take_responses(now, &wake);
  EXPECT_TRUE(out[0].kind == Response::Kind::kError);
  EXPECT_EQ(c.cache_hits(), 4u);
}

HVD_TEST(control_messages_round_trip_and_reject_truncation) {
  RequestMeta m = allreduce("name.with.dots", {3, 4}, DataType::kBFloat16);
  m.prescale = 0.5;
  m.group_key = "grp";
  m.group_size = 3;
  auto decoded = decode_requests(encode_requests({m, m}));
  EXPECT_EQ(decoded.size(), 2u);
  EXPECT_EQ(decoded[1].name, m.name);
  EXPECT_TRUE(decoded[1].shape == m.shape && decoded[1].dtype == DataType::kBFloat16);
  EXPECT_EQ(decoded[1].prescale, 0.5);
  EXPECT_EQ(decoded[1].group_size, 3);
  Response r;
  r.names = {"a", "b"};
  r.shapes = {{1}, {2, 2}};
  r.first_dims = {{}, {1, 2}};
  r.joined_ranks = {2};
  r.error_message = "msg";
  r.hierarchical_allgather = false;
  auto rd = decode_responses(encode_responses({r}));
  EXPECT_TRUE(rd[0].names == r.names && rd[0].shapes == r.shapes && rd[0].first_dims == r.first_dims);
  EXPECT_TRUE(rd[0].joined_ranks == r.joined_ranks && rd[0].error_message == "msg");
  EXPECT_TRUE(rd[0].hierarchical_allreduce && !rd[0].hierarchical_allgather);
  r.hierarchical_allreduce = false;
  r.hierarchical_allgather = true;
  r.pipeline_chunk_bytes = 128 * 1024;
  r.cycle_time_us = 42500;
  rd = decode_responses(encode_responses({r}));
  EXPECT_TRUE(!rd[0].hierarchical_allreduce && rd[0].hierarchical_allgather);
  EXPECT_EQ(rd[0].pipeline_chunk_bytes, 128u * 1024);
  EXPECT_EQ(rd[0].cycle_time_us, 42500u);
  EXPECT_TRUE(decode_names(encode_names({"x", "y.z"})) == std::vector<std::string>({"x", "y.z"}));
  std::string encoded = encode_responses({r});
  bool threw = false;
  try {
    decode_responses(encoded.substr(0, encoded.size() - 3));
  } catch (const hvd::Error&) {
    threw = true;
  }
  EXPECT_TRUE(threw);
}
