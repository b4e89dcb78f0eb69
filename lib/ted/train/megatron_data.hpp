// Megatron-Core's indexed dataset as a training data source (data.source: megatron): the pair
// <prefix>.bin / <prefix>.idx exactly as megatron/core/datasets/indexed_dataset.py's
// IndexedDatasetBuilder and _IndexWriter write it (megatron-core 0.16.1):
//   .idx  9 bytes "MMIDIDX\0\0", uint64 version 1, uint8 dtype code (its DType enum: 1 uint8,
//         2 int8, 3 int16, 4 int32, 5 int64, 6 float64, 7 float32, 8 uint16), uint64 sequence
//         count S, uint64 document-index count D + 1; then int32 lengths[S] (tokens per
//         sequence), int64 pointers[S] (byte offsets of the sequences in the .bin: 0, then each
//         the previous one plus its length times the dtype's size), int64 document indices[D + 1]
//         (0, ..., S: document d is sequences [index[d], index[d + 1])). A multimodal dataset's
//         int8 modes follow; they are not read. Little-endian throughout (numpy's native order on
//         every machine Megatron runs on).
//   .bin  every sequence's token ids back to back, in the dtype's width.
// Both files are memory-mapped read-only and checked whole when opened; integer dtypes only.
//
// The sample stream (a spec the DeepSpeed runner shares, docs/training.md):
//   - Splits by documents, contiguous, as Megatron's split string: with data.valid_fraction
//     f > 0 the last max(1, round(f x D)) documents (round half to even, Python's round, which
//     Megatron's split uses) are the validation split, the rest the training split; or
//     data.valid_path names a second dataset, all of it the validation split.
//   - A split's token stream is its sequences' tokens in file order; window j is its tokens
//     [j x seq_len, j x seq_len + seq_len] (seq_len + 1 of them: inputs the first seq_len,
//     targets the last seq_len), and there are (tokens - 1) / seq_len windows.
//   - Training sample i (the global index of data.hpp's first_sample) reads window
//     p_e[i mod W] of epoch e = i / W, p_e the Fisher-Yates permutation drawn with
//     random::kShuffle (window_permutation); validation sample v reads window v mod W, in order.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "ted/train/data.hpp"

namespace ted::train {

// Megatron-Core's DType codes.
enum class MegatronDtype : std::uint8_t {
  uint8 = 1,
  int8 = 2,
  int16 = 3,
  int32 = 4,
  int64 = 5,
  float64 = 6,
  float32 = 7,
  uint16 = 8,
};
const char* to_string(MegatronDtype dtype);
int size_of(MegatronDtype dtype);

// The .bin files whose every token id is checked against the vocabulary when a source opens
// (at most this many bytes); a larger one's ids are checked as each sample reads them.
inline constexpr std::int64_t kMegatronScanLimit = std::int64_t{1} << 30;

// ConfigError naming `key` unless <prefix>.idx and <prefix>.bin are readable files (and a prefix
// ending in .bin or .idx, the name of one of them, is refused as such).
void check_megatron_files(const std::string& prefix, const std::string& key);

// One .bin/.idx pair, memory-mapped and checked. Every problem is a ConfigError of one line
// naming `key` (data.path or data.valid_path), the file and what is wrong with it: a missing
// file, a wrong magic, version or dtype, an .idx shorter than its header says, lengths,
// pointers or document indices that do not fit together, a .bin of another size than its
// .idx says.
class MegatronDataset {
 public:
  MegatronDataset(const std::string& prefix, const std::string& key);
  ~MegatronDataset();
  MegatronDataset(const MegatronDataset&) = delete;
  MegatronDataset& operator=(const MegatronDataset&) = delete;

  const std::string& prefix() const { return prefix_; }
  const std::string& key() const { return key_; }
  MegatronDtype dtype() const { return dtype_; }
  std::int64_t sequences() const { return sequences_; }
  std::int64_t documents() const { return documents_; }
  std::int64_t tokens() const { return tokens_; }
  std::int64_t bin_bytes() const { return bin_bytes_; }
  // The first sequence of document d, for d in [0, documents()] (documents() gives sequences()).
  std::int64_t document_start(std::int64_t d) const;
  // Where sequence s's first token is in the .bin's tokens, for s in [0, sequences()]
  // (sequences() gives tokens()).
  std::int64_t sequence_start(std::int64_t s) const;
  // Tokens [first, first + count) of the .bin.
  void read(std::int64_t first, std::int64_t count, std::int32_t* out) const;
  // ConfigError naming the first id of tokens [first, first + count) outside [0, vocab): the id,
  // its place (token, sequence, document) and model.vocab.
  void check_ids(std::int64_t first, std::int64_t count, int vocab) const;

 private:
  // A whole file mapped read-only (data null when it is empty), unmapped by the destructor.
  struct Mapping {
    const unsigned char* data = nullptr;
    std::size_t bytes = 0;
    Mapping() = default;
    Mapping(const Mapping&) = delete;
    Mapping& operator=(const Mapping&) = delete;
    ~Mapping();
  };
  static void map(Mapping& mapping, const std::string& file, const std::string& what);

  std::string prefix_, key_;
  MegatronDtype dtype_ = MegatronDtype::uint16;
  std::int64_t sequences_ = 0, documents_ = 0, tokens_ = 0, bin_bytes_ = 0;
  Mapping index_, bin_;  // the .idx and the .bin
  std::int32_t length(std::int64_t s) const;
  std::int64_t pointer(std::int64_t s) const;
  std::int64_t document_index(std::int64_t d) const;
  std::int64_t id(std::int64_t position) const;
};

// Where a source reads: the config's data.* keys it needs.
struct MegatronSpec {
  std::string path;        // data.path: the prefix
  std::string valid_path;  // data.valid_path: the validation split's prefix, or empty
  double valid_fraction = 0;
  int vocab = 0;
  int seq_len = 0;
  std::uint64_t seed = 0;  // training.seed
  std::int64_t scan_limit = kMegatronScanLimit;
};

enum class MegatronSplit { training, validation };

// The validation split's documents out of `documents` for data.valid_fraction f: 0 when f is 0,
// else max(1, round(f x documents)) (ties to even).
std::int64_t validation_documents(double valid_fraction, std::int64_t documents);

// The order in which epoch `epoch` visits `windows` windows: p = [0, ..., W - 1], then for m from
// W - 1 down to 1 swap p[m] and p[r], r = random::hash(seed, kShuffle, epoch, m) mod (m + 1).
std::vector<std::int64_t> window_permutation(std::int64_t windows, std::uint64_t seed,
                                             std::uint64_t epoch);

// The windows of documents [first_document, end_document) of a dataset. The training split
// shuffles them per epoch; the validation split reads them in order, wrapping around.
class MegatronSource final : public TokenSource {
 public:
  // ConfigError when the documents hold fewer than seq_len + 1 tokens, or (a .bin of at most
  // spec.scan_limit bytes) one of their ids is outside [0, vocab).
  MegatronSource(std::shared_ptr<const MegatronDataset> data, std::int64_t first_document,
                 std::int64_t end_document, MegatronSplit split, const MegatronSpec& spec);
  void sample(std::int64_t index, int seq_len, std::int32_t* tokens,
              std::int32_t* targets) const override;
  std::string describe() const override;

  std::int64_t windows() const { return windows_; }
  std::int64_t tokens() const { return stream_tokens_; }
  std::int64_t documents() const { return end_document_ - first_document_; }
  // The window sample `index` reads.
  std::int64_t window_of(std::int64_t index) const;
  // What describe() says of the other split ("validation: last 311 documents, 80 windows").
  void set_note(std::string note) { note_ = std::move(note); }

 private:
  std::shared_ptr<const MegatronDataset> data_;
  std::int64_t first_document_, end_document_;
  MegatronSplit split_;
  int vocab_, seq_len_;
  std::uint64_t seed_;
  bool checked_ = false;  // every id checked at construction
  std::int64_t first_token_ = 0, stream_tokens_ = 0, windows_ = 0;
  std::string note_;
  // The permutation of the epoch last asked for.
  mutable std::mutex order_mutex_;
  mutable std::int64_t order_epoch_ = -1;
  mutable std::vector<std::int64_t> order_;
};

// The training split's source, or the validation split's (null when the spec has none:
// valid_fraction 0 and no valid_path). ConfigError as MegatronDataset and MegatronSource, and
// when the training split is left without a document.
std::unique_ptr<MegatronSource> make_megatron_source(const MegatronSpec& spec, MegatronSplit split);

}  // namespace ted::train
