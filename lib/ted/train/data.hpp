// Where training sequences come from. A source maps a global sample index to one sequence of
// seq_len input tokens and their targets (the same tokens shifted by one), so every layout and
// micro-batching of a run sees the same data.
//   SyntheticSource - seeded Markov chain with a learnable rule: the next token is a fixed
//                     function of the current one (a seeded permutation) with probability
//                     1 - noise, otherwise uniform; loss falls from ln(vocab) towards the
//                     chain's entropy.
//   TokenFileSource - a flat binary file of uint16 or uint32 token ids (little-endian), the
//                     format GPT data pipelines write; sample i is the window starting at
//                     (i * seq_len) mod (tokens - seq_len).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace ted::train {

class TokenSource {
 public:
  virtual ~TokenSource() = default;
  virtual void sample(std::int64_t index, int seq_len, std::int32_t* tokens,
                      std::int32_t* targets) const = 0;
  virtual std::string describe() const = 0;
};

class SyntheticSource final : public TokenSource {
 public:
  SyntheticSource(int vocab, std::uint64_t seed, double noise = 0.1);
  void sample(std::int64_t index, int seq_len, std::int32_t* tokens,
              std::int32_t* targets) const override;
  std::string describe() const override;
  int successor(int token) const { return successor_[token]; }

 private:
  int vocab_;
  std::uint64_t seed_;
  double noise_;
  std::vector<int> successor_;
};

class TokenFileSource final : public TokenSource {
 public:
  // token_bytes 2 (uint16) or 4 (uint32). Throws ConfigError (naming data.path) when the file
  // is missing, has a partial token, is shorter than seq_len + 1 tokens, or holds an id >= vocab.
  TokenFileSource(const std::string& path, int token_bytes, int vocab, int seq_len);
  void sample(std::int64_t index, int seq_len, std::int32_t* tokens,
              std::int32_t* targets) const override;
  std::string describe() const override;
  std::size_t size() const { return tokens_.size(); }

 private:
  std::string path_;
  std::vector<std::int32_t> tokens_;
};

}  // namespace ted::train
