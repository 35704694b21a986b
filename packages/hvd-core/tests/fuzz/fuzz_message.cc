// fuzz_message.cc - the control-message decoders on arbitrary bytes. The
// first byte picks the decoder; the rest is the payload. A decoder may only
// refuse a payload with hvd::Error; anything else (another exception, a
// sanitizer report, an allocation beyond the fuzzer's limit) is a bug. What
// decodes must encode again and decode to the same bytes.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "common/error.h"
#include "engine/message.h"

namespace {

void check(bool ok) {
  if (!ok) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  std::string payload(reinterpret_cast<const char*>(data + 1), size - 1);
  try {
    switch (data[0] % 4) {
      case 0: {
        // Compared as bytes (a NaN scale is not equal to itself).
        std::string encoded = hvd::encode_requests(hvd::decode_requests(payload));
        check(hvd::encode_requests(hvd::decode_requests(encoded)) == encoded);
        break;
      }
      case 1: {
        std::string encoded = hvd::encode_responses(hvd::decode_responses(payload));
        check(hvd::encode_responses(hvd::decode_responses(encoded)) == encoded);
        break;
      }
      case 2: {
        auto names = hvd::decode_names(payload);
        check(hvd::decode_names(hvd::encode_names(names)) == names);
        break;
      }
      case 3: {
        hvd::Error error = hvd::decode_failure(payload);
        hvd::decode_failure(hvd::encode_failure(error));
        break;
      }
    }
  } catch (const hvd::Error&) {
    // A refused payload: the expected outcome for most inputs.
  }
  return 0;
}
