#include "ted/train/data.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <numeric>

#include "ted/core/config_schema.hpp"
#include "ted/core/error.hpp"
#include "ted/core/random.hpp"

namespace ted::train {

SyntheticSource::SyntheticSource(int vocab, std::uint64_t seed, double noise)
    : vocab_(vocab), seed_(seed), noise_(noise), successor_(vocab) {
  std::iota(successor_.begin(), successor_.end(), 0);
  for (int i = vocab - 1; i > 0; --i) {  // seeded Fisher-Yates
    auto j = static_cast<int>(random::hash(seed, random::kData, ~0ull, i) %
                              static_cast<std::uint64_t>(i + 1));
    std::swap(successor_[i], successor_[j]);
  }
}

void SyntheticSource::sample(std::int64_t index, int seq_len, std::int32_t* tokens,
                             std::int32_t* targets) const {
  auto draw = [&](int position) {
    return random::hash(seed_, random::kData, static_cast<std::uint64_t>(index), position);
  };
  int current = static_cast<int>(draw(0) % static_cast<std::uint64_t>(vocab_));
  for (int p = 0; p <= seq_len; ++p) {
    if (p < seq_len) tokens[p] = current;
    if (p > 0) targets[p - 1] = current;
    std::uint64_t bits = draw(p + 1);
    bool random_token = random::uniform(bits) < noise_;
    current = random_token
                  ? static_cast<int>(random::hash(bits, 0, 0) % static_cast<std::uint64_t>(vocab_))
                  : successor_[current];
  }
}

std::string SyntheticSource::describe() const {
  char text[96];
  std::snprintf(text, sizeof text, "synthetic Markov chain (vocab %d, noise %g)", vocab_, noise_);
  return text;
}

TokenFileSource::TokenFileSource(const std::string& path, int token_bytes, int vocab, int seq_len)
    : path_(path) {
  if (token_bytes != 2 && token_bytes != 4)
    throw ConfigError("data.token_bytes must be 2 (uint16) or 4 (uint32), got " +
                      std::to_string(token_bytes));
  check_readable_file(path, "data.path");
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) throw ConfigError("data.path: cannot open '" + path + "': " + std::strerror(errno));
  auto bytes = static_cast<std::size_t>(in.tellg());
  if (bytes % static_cast<std::size_t>(token_bytes) != 0)
    throw ConfigError("data.path: '" + path + "' has " + std::to_string(bytes) +
                      " bytes, not a whole number of " + std::to_string(token_bytes) +
                      "-byte tokens");
  std::vector<unsigned char> raw(bytes);
  in.seekg(0);
  in.read(reinterpret_cast<char*>(raw.data()), static_cast<std::streamsize>(bytes));
  tokens_.resize(bytes / static_cast<std::size_t>(token_bytes));
  for (std::size_t i = 0; i < tokens_.size(); ++i) {
    const unsigned char* p = raw.data() + i * static_cast<std::size_t>(token_bytes);
    std::uint32_t id = p[0] | (p[1] << 8);
    if (token_bytes == 4)
      id |= (static_cast<std::uint32_t>(p[2]) << 16) | (static_cast<std::uint32_t>(p[3]) << 24);
    if (id >= static_cast<std::uint32_t>(vocab))
      throw ConfigError("data.path: '" + path + "' holds token id " + std::to_string(id) +
                        " at position " + std::to_string(i) + ", not below model.vocab " +
                        std::to_string(vocab));
    tokens_[i] = static_cast<std::int32_t>(id);
  }
  if (tokens_.size() < static_cast<std::size_t>(seq_len) + 1)
    throw ConfigError("data.path: '" + path + "' has " + std::to_string(tokens_.size()) +
                      " tokens, fewer than model.seq_len + 1 = " + std::to_string(seq_len + 1));
}

void TokenFileSource::sample(std::int64_t index, int seq_len, std::int32_t* tokens,
                             std::int32_t* targets) const {
  std::size_t windows = tokens_.size() - static_cast<std::size_t>(seq_len);
  std::size_t start = static_cast<std::size_t>(index) * seq_len % windows;
  std::copy_n(tokens_.begin() + static_cast<std::ptrdiff_t>(start), seq_len, tokens);
  std::copy_n(tokens_.begin() + static_cast<std::ptrdiff_t>(start) + 1, seq_len, targets);
}

std::string TokenFileSource::describe() const {
  return "token file " + path_ + " (" + std::to_string(tokens_.size()) + " tokens)";
}

}  // namespace ted::train
