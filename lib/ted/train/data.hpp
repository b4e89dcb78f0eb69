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
//   MegatronSource  - (megatron_data.hpp) Megatron-Core's indexed dataset, a .bin/.idx pair:
//                     windows of seq_len + 1 tokens of its documents' token stream, shuffled
//                     per epoch; the last documents (or a second dataset) a validation split.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace ted::train {

// The global index of the first sequence of micro-batch `micro` (of `micro_batches` per step) of
// data-parallel rank `data_rank` (of `data_ranks`: the Ep x D ranks of a non-expert data group,
// each feeding its own) in optimizer step `step`: global micro-batch g = micro x data_ranks +
// data_rank, whose sequence s is global sample (step x micro_batches x data_ranks + g) x
// micro_batch + s. The trainer feeds these samples and the projection counts their tokens'
// routing, so a single process with micro_batches x data_ranks micro-batches sees the data of
// the whole layout.
inline std::int64_t first_sample(std::int64_t step, int micro_batches, int data_ranks, int micro,
                                 int data_rank, int micro_batch) {
  const std::int64_t ranks = data_ranks;
  return (step * micro_batches * ranks + static_cast<std::int64_t>(micro) * ranks + data_rank) *
         micro_batch;
}

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
