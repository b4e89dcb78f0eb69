// Counter-based random numbers: every draw is a pure function of its key, so every
// factorisation of a run (layouts, micro-batching, recomputation) makes the same choices
// (docs/algorithm.md section 2). Keys are (seed, stream, a, b, c); streams keep purposes apart.
#pragma once

#include <cmath>
#include <cstdint>

#include "ted/core/host_device.hpp"

namespace ted::random {

enum Stream : std::uint64_t {
  kInit = 1,            // parameter initialisation: (param id, element)
  kTokenSelection = 2,  // RTS priorities: (step, layer, global token)
  kSecondNoise = 3,     // Gumbel noise of the second choice: (step, layer, token * E + expert)
  kData = 4,            // synthetic data: (sample, position)
  kWorkload = 5,        // forced routing workloads: (step, layer, global token * top_k + choice)
  kDropout = 6,         // dropout masks: (step, layer's site, global token), then the feature
  kShuffle = 7,         // data order: (epoch, position)
};

TED_HOST_DEVICE inline std::uint64_t mix64(std::uint64_t x) {  // splitmix64 finaliser
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

TED_HOST_DEVICE inline std::uint64_t hash(std::uint64_t seed, std::uint64_t stream, std::uint64_t a,
                                          std::uint64_t b = 0, std::uint64_t c = 0) {
  std::uint64_t h = mix64(seed ^ (stream * 0xd1b54a32d192ed03ull));
  h = mix64(h ^ a);
  h = mix64(h ^ b);
  return mix64(h ^ c);
}

// Uniform in (0, 1), never 0 or 1.
TED_HOST_DEVICE inline double uniform(std::uint64_t bits) {
  return (static_cast<double>(bits >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

// Standard normal (Box-Muller on two independent hashes of the key).
TED_HOST_DEVICE inline double normal(std::uint64_t seed, std::uint64_t stream, std::uint64_t a,
                                     std::uint64_t b) {
  double u1 = uniform(hash(seed, stream, a, b, 0));
  double u2 = uniform(hash(seed, stream, a, b, 1));
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
}

// Standard Gumbel.
TED_HOST_DEVICE inline double gumbel(std::uint64_t bits) {
  return -std::log(-std::log(uniform(bits)));
}

}  // namespace ted::random
