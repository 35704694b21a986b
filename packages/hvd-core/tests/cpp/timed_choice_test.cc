// timed_choice_test.cc - the chooser behind the shared-memory transport's
// timed routes: a run each way first, then the way whose best recent call
// was faster, a run of the slower way every `retry_every` runs, and a
// switch once the retried way has become the faster one.
#include <string>
#include <utility>

#include "test_harness.h"
#include "transport/shm/timed_choice.h"

using namespace hvd;

namespace {

// Runs `calls` choices, recording for each the cost `cost(way, call)`
// before the next choice (as a caller that times every call does), and
// returns the ways taken as a string of '0' and '1'.
template <typename Cost>
std::string choose(TimedChoice& choice, int calls, uint64_t run, uint64_t retry_every, Cost cost) {
  std::string ways;
  for (int call = 0; call < calls; ++call) {
    const bool way = choice.next(run, retry_every);
    ways += way ? '1' : '0';
    choice.record(way, cost(way, call));
  }
  return ways;
}

}  // namespace

HVD_TEST(timed_choice_tries_each_way_then_keeps_the_faster_and_retries_the_slower) {
  TimedChoice choice;
  // The second way costs half the first.
  const std::string ways = choose(choice, 4 * 12, 4, 3, [](bool way, int) { return way ? 1.0 : 2.0; });
  // Runs of four: first, second, then the faster (second) except every
  // third run from the second on, which retries the first.
  EXPECT_EQ(ways, std::string("0000" "1111" "1111" "1111" "0000" "1111" "1111" "0000" "1111" "1111" "0000" "1111"));
}

HVD_TEST(timed_choice_switches_when_the_retried_way_became_faster) {
  TimedChoice choice;
  // The first way is slower until call 20, then much faster.
  const std::string ways =
      choose(choice, 4 * 10, 4, 3, [](bool way, int call) { return way ? 1.0 : call < 20 ? 2.0 : 0.5; });
  // The first retry of the first way (calls 16-19) still finds it slow;
  // the second (calls 28-31) finds it faster, and it stays.
  EXPECT_EQ(ways, std::string("0000" "1111" "1111" "1111" "0000" "1111" "1111" "0000" "0000" "0000"));
}

HVD_TEST(timed_choice_judges_a_way_by_its_best_recent_call) {
  TimedChoice choice;
  // Every other call of the first way is preempted (10x); its best calls
  // still beat the second way, which is steady at 1.5.
  const std::string ways =
      choose(choice, 4 * 4, 4, 64, [](bool way, int call) { return way ? 1.5 : call % 2 ? 10.0 : 1.0; });
  EXPECT_EQ(ways, std::string("0000" "1111" "0000" "0000"));
}

HVD_TEST(timed_choice_counts_a_way_not_measured_in_full_as_the_faster) {
  TimedChoice choice;
  // As allreduce_route uses it, a call's way is chosen during the call
  // before, whose own time is recorded after that choice: when the third
  // run begins, the second way has three samples of four, so that run takes
  // it again, and the first way, faster, wins afterwards.
  bool has_last = false;
  std::pair<bool, double> last;
  std::string ways;
  for (int call = 0; call < 16; ++call) {
    const bool way = choice.next(4, 64);
    if (has_last) choice.record(last.first, last.second);
    ways += way ? '1' : '0';
    last = {way, way ? 2.0 : 1.0};
    has_last = true;
  }
  EXPECT_EQ(ways, std::string("0000" "1111" "1111" "0000"));
}

HVD_TEST(timed_choice_of_four_ways_tries_each_then_keeps_the_fastest_and_retries_the_others_in_turn) {
  TimedChoiceOf<4> choice;
  const double kCost[] = {3.0, 2.0, 1.0, 4.0};  // way 2 is the fastest
  std::string runs;
  for (int call = 0; call < 4 * 13; ++call) {
    const int way = choice.next(4, 3);
    if (call % 4 == 0) runs += static_cast<char>('0' + way);
    choice.record(way, kCost[way]);
  }
  // Runs of four calls (ways as listed per run): each way once, then way 2
  // except every third run after the first four, which retries ways 3, 0
  // and 1 in turn (the ways after the fastest).
  EXPECT_EQ(runs, std::string("0123" "223" "220" "221"));
}
