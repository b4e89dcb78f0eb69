#include "ted/train/megatron_data.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <numeric>

#include "ted/core/config_schema.hpp"
#include "ted/core/error.hpp"
#include "ted/core/random.hpp"

namespace ted::train {

static_assert(std::endian::native == std::endian::little,
              "Megatron's .bin and .idx are read in the machine's byte order, little-endian");

namespace {

constexpr unsigned char kMagic[9] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', 0, 0};
constexpr std::size_t kHeaderBytes = 9 + 8 + 1 + 8 + 8;  // magic, version, dtype, counts

template <typename T>
T load(const unsigned char* p) {
  T value;
  std::memcpy(&value, p, sizeof value);
  return value;
}

std::string str(std::int64_t n) {
  return std::to_string(n);
}

// "1 document", "3 documents".
std::string documents_count(std::int64_t n) {
  return str(n) + (n == 1 ? " document" : " documents");
}

// "1.02M tokens": three significant digits from a thousand on.
std::string count_text(std::int64_t n) {
  if (n < 1000) return str(n);
  const char* units = "kMGT";
  double value = static_cast<double>(n) / 1000;
  int unit = 0;
  while (value >= 999.5 && unit < 3) value /= 1000, ++unit;
  char text[32];
  std::snprintf(text, sizeof text,
                value < 9.995   ? "%.2f%c"
                : value < 99.95 ? "%.1f%c"
                                : "%.0f%c",
                value, units[unit]);
  return text;
}

// Calls f(T{}) with T the C++ type of `dtype` (an integer one).
template <typename F>
auto with_type(MegatronDtype dtype, F&& f) {
  switch (dtype) {
    case MegatronDtype::uint8:
      return f(std::uint8_t{});
    case MegatronDtype::int8:
      return f(std::int8_t{});
    case MegatronDtype::int16:
      return f(std::int16_t{});
    case MegatronDtype::int32:
      return f(std::int32_t{});
    case MegatronDtype::int64:
      return f(std::int64_t{});
    case MegatronDtype::uint16:
      return f(std::uint16_t{});
    default:
      break;
  }
  throw Error("megatron data: no integer type for dtype code " +
              std::to_string(static_cast<int>(dtype)));
}

// The last i in [0, n] with get(i) <= value (get non-decreasing, get(0) <= value).
template <typename Get>
std::int64_t last_at_most(std::int64_t n, std::int64_t value, Get get) {
  std::int64_t low = 0, high = n;  // get(low) <= value; the answer is in [low, high]
  while (low < high) {
    const std::int64_t mid = low + (high - low + 1) / 2;
    if (get(mid) <= value)
      low = mid;
    else
      high = mid - 1;
  }
  return low;
}

}  // namespace

const char* to_string(MegatronDtype dtype) {
  switch (dtype) {
    case MegatronDtype::uint8:
      return "uint8";
    case MegatronDtype::int8:
      return "int8";
    case MegatronDtype::int16:
      return "int16";
    case MegatronDtype::int32:
      return "int32";
    case MegatronDtype::int64:
      return "int64";
    case MegatronDtype::float64:
      return "float64";
    case MegatronDtype::float32:
      return "float32";
    case MegatronDtype::uint16:
      return "uint16";
  }
  return "unknown";
}

int size_of(MegatronDtype dtype) {
  switch (dtype) {
    case MegatronDtype::uint8:
    case MegatronDtype::int8:
      return 1;
    case MegatronDtype::int16:
    case MegatronDtype::uint16:
      return 2;
    case MegatronDtype::int32:
    case MegatronDtype::float32:
      return 4;
    case MegatronDtype::int64:
    case MegatronDtype::float64:
      return 8;
  }
  return 0;
}

void check_megatron_files(const std::string& prefix, const std::string& key) {
  namespace fs = std::filesystem;
  std::error_code error;
  for (const char* suffix : {".bin", ".idx"}) {
    const std::size_t n = std::strlen(suffix);
    if (prefix.size() > n && prefix.compare(prefix.size() - n, n, suffix) == 0 &&
        !fs::exists(prefix + ".idx", error))
      throw ConfigError(key + " '" + prefix + "' names a file of the dataset; give its prefix, " +
                        "without .bin or .idx");
  }
  check_readable_file(prefix + ".idx", key + ": the Megatron index");
  check_readable_file(prefix + ".bin", key + ": the Megatron data");
}

MegatronDataset::Mapping::~Mapping() {
  if (data) ::munmap(const_cast<unsigned char*>(data), bytes);
}

void MegatronDataset::map(Mapping& mapping, const std::string& file, const std::string& what) {
  check_readable_file(file, what);
  const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw ConfigError(what + " '" + file + "' cannot be opened: " + std::strerror(errno));
  struct stat info;
  if (::fstat(fd, &info) != 0) {
    const int code = errno;
    ::close(fd);
    throw ConfigError(what + " '" + file + "' cannot be read: " + std::strerror(code));
  }
  mapping.bytes = static_cast<std::size_t>(info.st_size);
  if (mapping.bytes > 0) {
    void* memory = ::mmap(nullptr, mapping.bytes, PROT_READ, MAP_PRIVATE, fd, 0);
    if (memory == MAP_FAILED) {
      const int code = errno;
      ::close(fd);
      throw ConfigError(what + " '" + file + "' cannot be mapped: " + std::strerror(code));
    }
    mapping.data = static_cast<const unsigned char*>(memory);
  }
  ::close(fd);
}

MegatronDataset::MegatronDataset(const std::string& prefix, const std::string& key)
    : prefix_(prefix), key_(key) {
  check_megatron_files(prefix, key);
  const std::string idx = prefix + ".idx", bin = prefix + ".bin";
  auto bad_index = [&](const std::string& problem) {
    return ConfigError(key + ": the Megatron index '" + idx + "' " + problem);
  };
  map(index_, idx, key + ": the Megatron index");
  const std::size_t bytes = index_.bytes;
  if (bytes < kHeaderBytes)
    throw bad_index("has " + std::to_string(bytes) + " bytes, fewer than the " +
                    std::to_string(kHeaderBytes) +
                    " of its header (magic, version, dtype, counts): truncated");
  if (std::memcmp(index_.data, kMagic, sizeof kMagic) != 0)
    throw bad_index("does not start with Megatron's magic MMIDIDX\\x00\\x00: not an .idx file");
  const auto version = load<std::uint64_t>(index_.data + 9);
  if (version != 1)
    throw bad_index("has version " + std::to_string(version) +
                    "; Megatron-Core writes and reads version 1");
  const int code = index_.data[17];
  if (code == 6 || code == 7)
    throw bad_index(std::string("holds ") + (code == 6 ? "float64" : "float32") +
                    " tokens (dtype code " + std::to_string(code) +
                    "): token ids must be an integer type");
  if (code < 1 || code > 8)
    throw bad_index("has dtype code " + std::to_string(code) +
                    ", not one of Megatron-Core's DType codes 1 to 8");
  dtype_ = static_cast<MegatronDtype>(code);
  const auto sequences = load<std::uint64_t>(index_.data + 18);
  const auto document_indices = load<std::uint64_t>(index_.data + 26);
  // Each sequence takes 12 bytes (length, pointer), each document index 8: more of them than
  // the file has bytes for is a short file (and the sum below cannot overflow).
  const std::uint64_t need = sequences > bytes / 12 || document_indices > bytes / 8
                                 ? std::numeric_limits<std::uint64_t>::max()
                                 : kHeaderBytes + 12 * sequences + 8 * document_indices;
  if (bytes < need)
    throw bad_index("has " + std::to_string(bytes) + " bytes, fewer than its header's " +
                    std::to_string(sequences) + " sequences and " +
                    std::to_string(document_indices) + " document indices need" +
                    (need == std::numeric_limits<std::uint64_t>::max()
                         ? ""
                         : " (" + std::to_string(need) + ")") +
                    ": truncated");
  sequences_ = static_cast<std::int64_t>(sequences);
  if (document_indices == 0)
    throw bad_index("has no document indices (Megatron writes at least the leading 0)");
  documents_ = static_cast<std::int64_t>(document_indices) - 1;
  if (document_index(0) != 0)
    throw bad_index("has document indices starting at " + str(document_index(0)) + ", not 0");
  for (std::int64_t d = 1; d <= documents_; ++d)
    if (document_index(d) < document_index(d - 1))
      throw bad_index("has document index " + str(d) + " (" + str(document_index(d)) +
                      ") below the one before it (" + str(document_index(d - 1)) + ")");
  if (document_index(documents_) != sequences_)
    throw bad_index("has document indices ending at " + str(document_index(documents_)) +
                    ", not at its sequence count " + str(sequences_));
  // The pointers: 0, then each the previous one plus its sequence's bytes (the writer's
  // _sequence_pointers), so a split's tokens are one stretch of the .bin.
  const std::int64_t width = size_of(dtype_);
  std::int64_t end = 0;
  for (std::int64_t s = 0; s < sequences_; ++s) {
    if (length(s) < 0)
      throw bad_index("gives sequence " + str(s) + " the length " + str(length(s)));
    if (pointer(s) != end)
      throw bad_index("has sequence " + str(s) + " at byte " + str(pointer(s)) +
                      " of the .bin, but the sequences before it end at byte " + str(end) +
                      ": its pointers do not follow its lengths");
    if (length(s) * width > std::numeric_limits<std::int64_t>::max() - end)
      throw bad_index("has sequences longer in all than a file can be");
    end += length(s) * width;
  }
  tokens_ = end / width;
  map(bin_, bin, key + ": the Megatron data");
  bin_bytes_ = static_cast<std::int64_t>(bin_.bytes);
  if (bin_bytes_ < end)
    throw ConfigError(key + ": the Megatron data '" + bin + "' has " + str(bin_bytes_) +
                      " bytes, fewer than the " + str(end) +
                      " its .idx's last sequence ends at: truncated");
  if (bin_bytes_ > end)
    throw ConfigError(key + ": the Megatron data '" + bin + "' has " + str(bin_bytes_) +
                      " bytes, more than the " + str(end) +
                      " its .idx accounts for: a .bin and .idx of different datasets?");
}

MegatronDataset::~MegatronDataset() = default;  // the mappings unmap themselves

std::int32_t MegatronDataset::length(std::int64_t s) const {
  return load<std::int32_t>(index_.data + kHeaderBytes + 4 * s);
}

std::int64_t MegatronDataset::pointer(std::int64_t s) const {
  return load<std::int64_t>(index_.data + kHeaderBytes + 4 * sequences_ + 8 * s);
}

std::int64_t MegatronDataset::document_index(std::int64_t d) const {
  return load<std::int64_t>(index_.data + kHeaderBytes + 12 * sequences_ + 8 * d);
}

std::int64_t MegatronDataset::document_start(std::int64_t d) const {
  TED_CHECK(d >= 0 && d <= documents_, "document " + str(d) + " of " + str(documents_));
  return document_index(d);
}

std::int64_t MegatronDataset::sequence_start(std::int64_t s) const {
  TED_CHECK(s >= 0 && s <= sequences_, "sequence " + str(s) + " of " + str(sequences_));
  return s == sequences_ ? tokens_ : pointer(s) / size_of(dtype_);
}

std::int64_t MegatronDataset::id(std::int64_t position) const {
  return with_type(dtype_, [&](auto type) -> std::int64_t {
    return load<decltype(type)>(bin_.data + position * std::int64_t{sizeof type});
  });
}

void MegatronDataset::read(std::int64_t first, std::int64_t count, std::int32_t* out) const {
  TED_CHECK(first >= 0 && count >= 0 && first + count <= tokens_,
            "tokens [" + str(first) + ", " + str(first + count) + ") of " + str(tokens_));
  with_type(dtype_, [&](auto type) {
    using T = decltype(type);
    const unsigned char* p = bin_.data + first * std::int64_t{sizeof(T)};
    for (std::int64_t i = 0; i < count; ++i)
      out[i] = static_cast<std::int32_t>(load<T>(p + i * std::int64_t{sizeof(T)}));
  });
}

void MegatronDataset::check_ids(std::int64_t first, std::int64_t count, int vocab) const {
  TED_CHECK(first >= 0 && count >= 0 && first + count <= tokens_,
            "tokens [" + str(first) + ", " + str(first + count) + ") of " + str(tokens_));
  const std::int64_t bad = with_type(dtype_, [&](auto type) -> std::int64_t {
    using T = decltype(type);
    const unsigned char* p = bin_.data + first * std::int64_t{sizeof(T)};
    for (std::int64_t i = 0; i < count; ++i) {
      const auto value = static_cast<std::int64_t>(load<T>(p + i * std::int64_t{sizeof(T)}));
      if (value < 0 || value >= vocab) return first + i;
    }
    return -1;
  });
  if (bad < 0) return;
  const std::int64_t value = id(bad);
  const std::int64_t sequence =
      last_at_most(sequences_ - 1, bad, [&](std::int64_t s) { return sequence_start(s); });
  const std::int64_t document =
      last_at_most(documents_ - 1, sequence, [&](std::int64_t d) { return document_index(d); });
  throw ConfigError(key_ + ": the Megatron data '" + prefix_ + ".bin' holds token id " +
                    str(value) + " at token " + str(bad) + " (sequence " + str(sequence) +
                    ", document " + str(document) + "), " +
                    (value < 0 ? "a negative id" : "not below model.vocab " + str(vocab)));
}

std::int64_t validation_documents(double valid_fraction, std::int64_t documents) {
  if (!(valid_fraction > 0)) return 0;
  // Python's round (ties to even), as Megatron's split: the default rounding mode.
  const auto rounded =
      static_cast<std::int64_t>(std::nearbyint(valid_fraction * static_cast<double>(documents)));
  return std::max<std::int64_t>(1, rounded);
}

std::vector<std::int64_t> window_permutation(std::int64_t windows, std::uint64_t seed,
                                             std::uint64_t epoch) {
  std::vector<std::int64_t> order(static_cast<std::size_t>(windows));
  std::iota(order.begin(), order.end(), std::int64_t{0});
  for (std::int64_t m = windows - 1; m > 0; --m) {
    const auto r = static_cast<std::int64_t>(
        random::hash(seed, random::kShuffle, epoch, static_cast<std::uint64_t>(m)) %
        static_cast<std::uint64_t>(m + 1));
    std::swap(order[static_cast<std::size_t>(m)], order[static_cast<std::size_t>(r)]);
  }
  return order;
}

namespace {

// Documents [first, end) of `data` in words, for messages and describe().
std::string documents_text(const MegatronDataset& data, std::int64_t first, std::int64_t end) {
  if (first == 0 && end == data.documents()) return "'" + data.prefix() + "'";
  if (end == data.documents())
    return "the last " + str(end - first) + " of the " + str(data.documents()) + " documents of '" +
           data.prefix() + "' (the validation split)";
  return "the first " + str(end - first) + " of the " + str(data.documents()) + " documents of '" +
         data.prefix() + "' (the training split)";
}

// The tokens of documents [first, end): ConfigError unless they make a window.
std::int64_t split_tokens(const MegatronDataset& data, std::int64_t first, std::int64_t end,
                          int seq_len) {
  const std::int64_t tokens = data.sequence_start(data.document_start(end)) -
                              data.sequence_start(data.document_start(first));
  if (tokens < static_cast<std::int64_t>(seq_len) + 1)
    throw ConfigError(data.key() + ": " + documents_text(data, first, end) + " hold" +
                      (first == 0 && end == data.documents() ? "s " : " ") + str(tokens) +
                      " tokens, fewer than model.seq_len + 1 = " + str(seq_len + 1));
  return tokens;
}

}  // namespace

MegatronSource::MegatronSource(std::shared_ptr<const MegatronDataset> data,
                               std::int64_t first_document, std::int64_t end_document,
                               MegatronSplit split, const MegatronSpec& spec)
    : data_(std::move(data)),
      first_document_(first_document),
      end_document_(end_document),
      split_(split),
      vocab_(spec.vocab),
      seq_len_(spec.seq_len),
      seed_(spec.seed) {
  TED_CHECK(seq_len_ >= 1 && vocab_ >= 1, "seq_len and vocab must be positive");
  TED_CHECK(
      0 <= first_document && first_document <= end_document && end_document <= data_->documents(),
      "documents [" + str(first_document) + ", " + str(end_document) + ") of " +
          str(data_->documents()));
  stream_tokens_ = split_tokens(*data_, first_document, end_document, seq_len_);
  first_token_ = data_->sequence_start(data_->document_start(first_document));
  windows_ = (stream_tokens_ - 1) / seq_len_;
  checked_ = data_->bin_bytes() <= spec.scan_limit;
  if (checked_) data_->check_ids(first_token_, stream_tokens_, vocab_);
}

std::int64_t MegatronSource::window_of(std::int64_t index) const {
  TED_CHECK(index >= 0, "sample " + str(index));
  if (split_ == MegatronSplit::validation) return index % windows_;
  const std::int64_t epoch = index / windows_;
  std::lock_guard<std::mutex> lock(order_mutex_);
  if (epoch != order_epoch_) {
    order_ = window_permutation(windows_, seed_, static_cast<std::uint64_t>(epoch));
    order_epoch_ = epoch;
  }
  return order_[static_cast<std::size_t>(index % windows_)];
}

void MegatronSource::sample(std::int64_t index, int seq_len, std::int32_t* tokens,
                            std::int32_t* targets) const {
  TED_CHECK(seq_len == seq_len_, "asked for " + std::to_string(seq_len) +
                                     " tokens of a source of windows of " +
                                     std::to_string(seq_len_));
  const std::int64_t start = first_token_ + window_of(index) * seq_len_;
  if (!checked_) data_->check_ids(start, seq_len_ + 1, vocab_);
  data_->read(start, seq_len_, tokens);
  data_->read(start + 1, seq_len_, targets);
}

std::string MegatronSource::describe() const {
  std::string text = "megatron dataset " + data_->prefix();
  const bool part = first_document_ > 0 || end_document_ < data_->documents();
  if (split_ == MegatronSplit::validation && part)
    text += ", validation split: the last " + str(documents()) + " of " + str(data_->documents()) +
            " documents";
  text += std::string(" (") + to_string(data_->dtype());
  if (!(split_ == MegatronSplit::validation && part)) text += ", " + documents_count(documents());
  text += ", " + count_text(stream_tokens_) + " tokens, " + str(windows_) + " windows of " +
          str(seq_len_) + "+1";
  if (split_ == MegatronSplit::validation) text += ", in order";
  if (!checked_) text += ", token ids checked as read";
  if (!note_.empty()) text += "; " + note_;
  return text + ")";
}

std::unique_ptr<MegatronSource> make_megatron_source(const MegatronSpec& spec,
                                                     MegatronSplit split) {
  const bool validation = split == MegatronSplit::validation;
  if (validation && spec.valid_path.empty() && !(spec.valid_fraction > 0)) return nullptr;
  if (!spec.valid_path.empty()) {
    auto valid = std::make_shared<const MegatronDataset>(spec.valid_path, "data.valid_path");
    if (validation)
      return std::make_unique<MegatronSource>(valid, 0, valid->documents(), split, spec);
    auto data = std::make_shared<const MegatronDataset>(spec.path, "data.path");
    if (data->documents() == 0)
      throw ConfigError("data.path: '" + spec.path + "' has no documents");
    auto source = std::make_unique<MegatronSource>(data, 0, data->documents(), split, spec);
    const std::int64_t tokens = split_tokens(*valid, 0, valid->documents(), spec.seq_len);
    source->set_note("validation: " + spec.valid_path + ", " + documents_count(valid->documents()) +
                     ", " + str((tokens - 1) / spec.seq_len) + " windows");
    return source;
  }
  auto data = std::make_shared<const MegatronDataset>(spec.path, "data.path");
  const std::int64_t documents = data->documents();
  if (documents == 0) throw ConfigError("data.path: '" + spec.path + "' has no documents");
  const std::int64_t valid = validation_documents(spec.valid_fraction, documents);
  if (valid >= documents) {
    char fraction[32];
    std::snprintf(fraction, sizeof fraction, "%g", spec.valid_fraction);
    throw ConfigError("data.valid_fraction " + std::string(fraction) +
                      " leaves no document for training: '" + spec.path + "' has " +
                      documents_count(documents) + ", and " + str(valid) +
                      " would be the validation split");
  }
  const std::int64_t train_end = documents - valid;
  if (validation) return std::make_unique<MegatronSource>(data, train_end, documents, split, spec);
  auto source = std::make_unique<MegatronSource>(data, 0, train_end, split, spec);
  if (valid > 0) {
    const std::int64_t tokens = split_tokens(*data, train_end, documents, spec.seq_len);
    source->set_note("validation: last " + documents_count(valid) + ", " +
                     str((tokens - 1) / spec.seq_len) + " windows");
  }
  return source;
}

}  // namespace ted::train
