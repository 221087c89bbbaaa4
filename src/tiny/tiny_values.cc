// Deterministic pseudo-random tensor values, generated straight into the write buffer.

#include "tiny/tiny_values.h"

#include <algorithm>
#include <cstring>
#include <string_view>

#include "core/parallel_for.h"
#include "shardload/convert.h"
#include "shardload/error.h"

namespace shardload::tiny {

namespace {

// Elements per independently seeded chunk: the unit of parallel work, fixed so that the values do
// not depend on how many threads run.
constexpr uint64_t kChunkElements = uint64_t{1} << 16;
constexpr unsigned kMaxThreads = 16;

struct Distribution {
  float center;
  float amplitude;
};

Distribution distribution(ValueKind kind) {
  switch (kind) {
    case ValueKind::kWeight:
      return {0.0f, 0.05f};
    case ValueKind::kNorm:
      return {1.0f, 0.05f};
    case ValueKind::kBias:
      return {0.0f, 0.02f};
    case ValueKind::kWeightScale:  // fill_values refuses these; tiny_quant.cc computes them
    case ValueKind::kInputScale:
    case ValueKind::kMxfp4Codes:  // bytes, not values: mxfp4_byte
    case ValueKind::kMxfp4Scales:
    case ValueKind::kZeroPoint:  // tiny_quant.cc's
    case ValueKind::kWeightShape:
    case ValueKind::kGlobalScale:
    case ValueKind::kGroupIndex:
    case ValueKind::kIndices:
      break;
  }
  return {0.0f, 0.0f};
}

// Elements [chunk * kChunkElements, ...) of jobs[job].
struct WorkItem {
  size_t job = 0;
  uint64_t chunk = 0;
};

// Each value is the sum of two 8-bit uniforms, a triangular distribution (normal enough) over 511
// levels; the levels are converted to the tensor's dtype once, so that generating is a table lookup
// per element.
constexpr size_t kLevels = 511;

template <typename Bits>
void fill_from_table(const std::byte* table_bytes, std::byte* out, uint64_t n, uint64_t state) {
  Bits table[kLevels];
  std::memcpy(table, table_bytes, sizeof(table));
  Bits word[4];
  auto next_word = [&] {
    const uint64_t bits = splitmix64(state);
    for (int k = 0; k < 4; ++k) {
      word[k] = table[((bits >> (16 * k)) & 0xFF) + ((bits >> (16 * k + 8)) & 0xFF)];
    }
  };
  uint64_t i = 0;
  // Fixed-size copies become single stores; `out` need not be aligned for Bits.
  for (; i + 4 <= n; i += 4) {
    next_word();
    std::memcpy(out + i * sizeof(Bits), word, sizeof(word));
  }
  if (i < n) {
    next_word();
    std::memcpy(out + i * sizeof(Bits), word, (n - i) * sizeof(Bits));
  }
}

void fill_chunk(const FillJob& job, uint64_t chunk, uint64_t seed) {
  const TensorSpec& spec = *job.spec;
  const uint64_t numel = shape_numel(spec.shape);
  const uint64_t begin = chunk * kChunkElements;
  const uint64_t n = std::min(numel, begin + kChunkElements) - begin;
  const size_t element_bytes = dtype_bits(spec.dtype) / 8;
  const Distribution dist = distribution(spec.kind);

  float levels[kLevels];
  const float step = dist.amplitude / static_cast<float>(kLevels / 2);
  for (size_t i = 0; i < kLevels; ++i) {
    levels[i] = dist.center +
                static_cast<float>(static_cast<int>(i) - static_cast<int>(kLevels / 2)) * step;
  }
  std::byte table[kLevels * 8];
  if (spec.kind == ValueKind::kMxfp4Codes || spec.kind == ValueKind::kMxfp4Scales) {
    // Codes: any byte (two E2M1 codes, every nibble a value). Scales: E8M0 exponents 2^-6 .. 2^-3, so
    // that weights stay small (an E2M1 code is at most 6).
    for (size_t i = 0; i < kLevels; ++i) {
      table[i] = std::byte(spec.kind == ValueKind::kMxfp4Codes ? i * 37 % 256 : 121 + i % 4);
    }
  } else if (spec.kind == ValueKind::kIndices) {
    for (size_t i = 0; i < kLevels; ++i) {
      const uint32_t id = static_cast<uint32_t>(i % 4);
      std::memcpy(table + i * sizeof(id), &id, sizeof(id));
    }
  } else {
    convert(DType::kF32, levels, spec.dtype, table, kLevels);
  }

  uint64_t state = stream_start(seed ^ fnv1a(spec.name), chunk);
  std::byte* out = job.out.data() + begin * element_bytes;
  switch (element_bytes) {
    case 1:
      return fill_from_table<uint8_t>(table, out, n, state);
    case 2:
      return fill_from_table<uint16_t>(table, out, n, state);
    case 4:
      return fill_from_table<uint32_t>(table, out, n, state);
    case 8:
      return fill_from_table<uint64_t>(table, out, n, state);
  }
  throw Error(ErrorKind::kUnsupportedDtype, "cannot generate values of this dtype",
              {.tensor = spec.name, .found = std::string(dtype_name(spec.dtype))});
}

}  // namespace

// SplitMix64's increment (2^64 / the golden ratio, odd) and the stride between a stream's items.
constexpr uint64_t kSplitMixGamma = 0x9E3779B97F4A7C15ull;
constexpr uint64_t kStreamStride = 0xD1B54A32D192ED03ull;

uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += kSplitMixGamma);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

uint64_t stream_start(uint64_t key, uint64_t index) { return splitmix64(key) + index * kStreamStride; }

uint64_t fnv1a(std::string_view text) {
  uint64_t hash = 0xCBF29CE484222325ull;
  for (char c : text) {
    hash ^= static_cast<unsigned char>(c);
    hash *= 0x100000001B3ull;
  }
  return hash;
}

void fill_values(std::span<const FillJob> jobs, uint64_t seed, unsigned threads) {
  std::vector<WorkItem> items;
  for (size_t j = 0; j < jobs.size(); ++j) {
    if (jobs[j].spec->quant != Quant::kNone) {
      // Their values come from the weight's, which a chunk of the FP8 tensor alone cannot know.
      throw Error(ErrorKind::kInvalidArgument, "FP8 tensors are filled by fill_quantized",
                  {.tensor = jobs[j].spec->name});
    }
    const uint64_t numel = shape_numel(jobs[j].spec->shape);
    for (uint64_t c = 0; c * kChunkElements < numel; ++c) items.push_back({j, c});
  }
  if (threads == 0) threads = static_cast<unsigned>(default_thread_count());
  threads = static_cast<unsigned>(std::min<size_t>({threads, kMaxThreads, items.size() / 4 + 1}));

  parallel_for(items.size(), static_cast<int>(threads),
               [&](size_t i, int) { fill_chunk(jobs[items[i].job], items[i].chunk, seed); });
}

}  // namespace shardload::tiny
