// adasum.cc - see adasum.h.
#include "adasum/adasum.h"

#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <utility>

#include "reduce/reduce.h"
#include "transport/communicator.h"

namespace hvd {

bool adasum_supports(DataType dtype) {
  return dtype == DataType::kFloat16 || dtype == DataType::kBFloat16 || dtype == DataType::kFloat32 ||
         dtype == DataType::kFloat64;
}

namespace {

// Adasum's combination weights for vectors a and b: a*(1 - a.b / 2|a|^2) +
// b*(1 - a.b / 2|b|^2); a zero vector keeps weight 1 (it adds nothing).
std::pair<double, double> adasum_weights(double aa, double bb, double ab) {
  double wa = aa != 0.0 ? 1.0 - ab / (2.0 * aa) : 1.0;
  double wb = bb != 0.0 ? 1.0 - ab / (2.0 * bb) : 1.0;
  return {wa, wb};
}

// |a|^2, |b|^2 and a.b over n elements, accumulated in double (four
// independent partial sums so the loop is not one long dependency chain).
template <typename T>
void adasum_dots(const T* a, const T* b, size_t n, double* out) {
  double aa[4] = {0, 0, 0, 0}, bb[4] = {0, 0, 0, 0}, ab[4] = {0, 0, 0, 0};
  size_t k = 0;
  for (; k + 4 <= n; k += 4) {
    for (int j = 0; j < 4; ++j) {
      double x = a[k + j], y = b[k + j];
      aa[j] += x * x;
      bb[j] += y * y;
      ab[j] += x * y;
    }
  }
  for (; k < n; ++k) {
    double x = a[k], y = b[k];
    aa[0] += x * x;
    bb[0] += y * y;
    ab[0] += x * y;
  }
  out[0] += (aa[0] + aa[1]) + (aa[2] + aa[3]);
  out[1] += (bb[0] + bb[1]) + (bb[2] + bb[3]);
  out[2] += (ab[0] + ab[1]) + (ab[2] + ab[3]);
}

template <typename T>
void adasum_combine(T* a, const T* b, size_t n, double wa, double wb) {
  const T ta = static_cast<T>(wa), tb = static_cast<T>(wb);
  for (size_t k = 0; k < n; ++k) a[k] = ta * a[k] + tb * b[k];
}

// The tensors' pieces inside this member's block: [lo, hi) in block coordinates.
struct AdasumPiece {
  size_t tensor, lo, hi;
};

// Combines vectors[0..size) (each `n` elements of this member's block) up the
// tree into vectors[0]. `exchange` turns this member's partial dot products
// (per pair and tensor) into the sums over all members.
template <typename T, typename Exchange>
void adasum_tree(std::vector<T*>& vectors, const std::vector<AdasumPiece>& pieces, size_t num_tensors,
                 Exchange exchange) {
  const int size = static_cast<int>(vectors.size());
  for (int stride = 1; stride < size; stride *= 2) {
    std::vector<std::pair<int, int>> pairs;  // (left, right) subtree roots
    for (int left = 0; left + stride < size; left += 2 * stride) pairs.emplace_back(left, left + stride);
    std::vector<double> dots(pairs.size() * num_tensors * 3, 0.0);
    for (size_t p = 0; p < pairs.size(); ++p) {
      for (const AdasumPiece& piece : pieces) {
        adasum_dots(vectors[pairs[p].first] + piece.lo, vectors[pairs[p].second] + piece.lo, piece.hi - piece.lo,
                    &dots[(p * num_tensors + piece.tensor) * 3]);
      }
    }
    exchange(dots);
    for (size_t p = 0; p < pairs.size(); ++p) {
      for (const AdasumPiece& piece : pieces) {
        const double* d = &dots[(p * num_tensors + piece.tensor) * 3];
        auto w = adasum_weights(d[0], d[1], d[2]);
        adasum_combine(vectors[pairs[p].first] + piece.lo, vectors[pairs[p].second] + piece.lo,
                       piece.hi - piece.lo, w.first, w.second);
      }
    }
  }
}

}  // namespace

// Adasum combines the members' vectors pairwise up a binary tree over member
// order - (0,1) (2,3) ..., then (01,23) ... - each tensor with its own weights,
// as Horovod does for a power-of-two set; with other sizes an unpaired subtree
// moves up a level unchanged. The weights need dot products over whole
// tensors, but the data need not move to one place: every member owns one
// contiguous block of the fused buffer, receives that block from everyone
// (alltoallv), combines it level by level after exchanging only its partial
// dot products (allgatherv, then summed in member order so every member
// derives the same weights), and the finished blocks are allgathered. The
// traffic is that of a ring allreduce. Dot products accumulate in double;
// float16/bfloat16 blocks are widened to float32 for the arithmetic.
void Adasum::allreduce(Communicator& comm, void* buffer, const std::vector<size_t>& counts, DataType dtype) {
  const int size = comm.size();
  const size_t esize = dtype_size(dtype);
  size_t total = 0;
  for (size_t c : counts) total += c;
  if (size == 1 || total == 0) return;
  // Member m owns elements [begin[m], begin[m + 1]).
  std::vector<size_t> begin(static_cast<size_t>(size) + 1);
  for (int m = 0; m <= size; ++m) {
    begin[static_cast<size_t>(m)] = total / size * m + std::min<size_t>(static_cast<size_t>(m), total % size);
  }
  const size_t me = static_cast<size_t>(comm.rank());
  const size_t mine = begin[me + 1] - begin[me];
  std::vector<size_t> block_bytes(static_cast<size_t>(size)), from_each(static_cast<size_t>(size), mine * esize);
  for (int m = 0; m < size; ++m) {
    block_bytes[static_cast<size_t>(m)] = (begin[static_cast<size_t>(m) + 1] - begin[static_cast<size_t>(m)]) * esize;
  }
  const size_t gathered_bytes = static_cast<size_t>(size) * mine * esize;
  const bool widen = dtype == DataType::kFloat16 || dtype == DataType::kBFloat16;
  const size_t wide_bytes = widen ? static_cast<size_t>(size) * mine * sizeof(float) : 0;
  // The float32 copy starts at the next multiple of 4 after the 2-byte
  // elements (an odd element count would leave it misaligned).
  const size_t wide_offset = (gathered_bytes + sizeof(float) - 1) / sizeof(float) * sizeof(float);
  if (scratch_.size() < wide_offset + wide_bytes) scratch_.resize(wide_offset + wide_bytes);
  unsigned char* gathered = scratch_.data();
  comm.alltoallv(buffer, block_bytes, gathered, from_each);

  std::vector<AdasumPiece> pieces;
  size_t offset = 0;
  for (size_t t = 0; t < counts.size(); ++t) {
    size_t lo = std::max(offset, begin[me]), hi = std::min(offset + counts[t], begin[me + 1]);
    if (lo < hi) pieces.push_back({t, lo - begin[me], hi - begin[me]});
    offset += counts[t];
  }
  auto exchange = [&](std::vector<double>& dots) {
    const size_t n = dots.size();
    std::vector<double> all(n * static_cast<size_t>(size));
    comm.allgatherv(dots.data(), all.data(), std::vector<size_t>(static_cast<size_t>(size), n * sizeof(double)));
    std::fill(dots.begin(), dots.end(), 0.0);
    for (int m = 0; m < size; ++m) {
      for (size_t k = 0; k < n; ++k) dots[k] += all[static_cast<size_t>(m) * n + k];
    }
  };
  auto run_tree = [&](auto* base) {
    using T = std::remove_pointer_t<decltype(base)>;
    std::vector<T*> vectors(static_cast<size_t>(size));
    for (size_t m = 0; m < vectors.size(); ++m) vectors[m] = base + m * mine;
    adasum_tree(vectors, pieces, counts.size(), exchange);
  };
  void* result = gathered;  // member 0's slot ends up holding the combination
  if (dtype == DataType::kFloat32) {
    run_tree(reinterpret_cast<float*>(gathered));
  } else if (dtype == DataType::kFloat64) {
    run_tree(reinterpret_cast<double*>(gathered));
  } else {
    auto* wide = reinterpret_cast<float*>(gathered + wide_offset);
    const auto* narrow = reinterpret_cast<const uint16_t*>(gathered);
    const bool half = dtype == DataType::kFloat16;
    for (size_t k = 0; k < static_cast<size_t>(size) * mine; ++k) {
      wide[k] = half ? half_to_float(narrow[k]) : bfloat16_to_float(narrow[k]);
    }
    run_tree(wide);
    auto* out = reinterpret_cast<uint16_t*>(gathered);
    for (size_t k = 0; k < mine; ++k) out[k] = half ? float_to_half(wide[k]) : float_to_bfloat16(wide[k]);
  }
  comm.allgatherv(result, buffer, block_bytes);
}

}  // namespace hvd
