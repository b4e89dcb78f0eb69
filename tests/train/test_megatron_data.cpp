// Megatron-Core's indexed dataset as a data source (train/megatron_data.hpp): .bin/.idx pairs
// written here from the format, read back in every integer dtype; the windows, the per-epoch
// shuffle and the document split against a plain re-derivation; every bad file a one-line
// ConfigError naming the file and the problem; the config keys.
#include "catch.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <set>

#include "ted/core/error.hpp"
#include "ted/core/random.hpp"
#include "ted/train/megatron_data.hpp"
#include "ted/train/trainer.hpp"

namespace fs = std::filesystem;
using Catch::Matchers::ContainsSubstring;
using ted::train::MegatronDataset;
using ted::train::MegatronSource;
using ted::train::MegatronSpec;
using ted::train::MegatronSplit;

namespace {

fs::path scratch(const std::string& name) {
  fs::path dir = fs::temp_directory_path() / ("ted_test_megatron_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  return dir / name;
}

// A document: its sequences' token ids.
using Document = std::vector<std::vector<std::int64_t>>;

int width_of(int code) {
  return code == 1 || code == 2 ? 1 : code == 3 || code == 8 ? 2 : code == 4 || code == 7 ? 4 : 8;
}

template <typename T>
void put(std::ofstream& out, T value) {
  out.write(reinterpret_cast<const char*>(&value), sizeof value);
}

// <prefix>.bin and <prefix>.idx as IndexedDatasetBuilder + _IndexWriter write them: the tokens
// back to back in the dtype's width (little-endian, two's complement), then the index: magic,
// uint64 version 1, uint8 dtype code, uint64 sequence count, uint64 document-index count,
// int32 lengths, int64 byte pointers, int64 document indices (0, then each document's end).
void write_dataset(const fs::path& prefix, int code, const std::vector<Document>& documents) {
  const int width = width_of(code);
  std::ofstream bin(prefix.string() + ".bin", std::ios::binary);
  std::vector<std::int32_t> lengths;
  std::vector<std::int64_t> pointers, document_indices{0};
  std::int64_t pointer = 0;
  for (const auto& document : documents) {
    for (const auto& sequence : document) {
      for (std::int64_t id : sequence) bin.write(reinterpret_cast<const char*>(&id), width);
      lengths.push_back(static_cast<std::int32_t>(sequence.size()));
      pointers.push_back(pointer);
      pointer += static_cast<std::int64_t>(sequence.size()) * width;
    }
    document_indices.push_back(static_cast<std::int64_t>(lengths.size()));
  }
  std::ofstream idx(prefix.string() + ".idx", std::ios::binary);
  idx.write("MMIDIDX\0\0", 9);
  put<std::uint64_t>(idx, 1);
  put<std::uint8_t>(idx, static_cast<std::uint8_t>(code));
  put<std::uint64_t>(idx, lengths.size());
  put<std::uint64_t>(idx, document_indices.size());
  for (auto v : lengths) put(idx, v);
  for (auto v : pointers) put(idx, v);
  for (auto v : document_indices) put(idx, v);
}

// Overwrites bytes of `file` at `offset`.
template <typename T>
void patch(const fs::path& file, std::int64_t offset, T value) {
  std::fstream out(file, std::ios::binary | std::ios::in | std::ios::out);
  out.seekp(offset);
  out.write(reinterpret_cast<const char*>(&value), sizeof value);
}

// The message of the ConfigError `f` throws (checked to be one line), or a note that it threw
// none.
template <typename F>
std::string config_error(F&& f) {
  try {
    f();
  } catch (const ted::ConfigError& e) {
    std::string text = e.what();
    CHECK(text.find('\n') == std::string::npos);
    return text;
  }
  return "(no ConfigError)";
}

// Documents of varied shapes: several sequences, a single token, an empty sequence, an empty
// document. Token t of the whole stream is (t * 7 + 3) mod modulus.
std::vector<Document> varied_documents(int modulus) {
  const std::vector<std::vector<int>> shape = {{5, 3},    {1}, {9}, {0, 4}, {},
                                               {6, 2, 2}, {7}, {3}, {11}};
  std::vector<Document> documents;
  std::int64_t t = 0;
  for (const auto& sequences : shape) {
    Document document;
    for (int length : sequences) {
      std::vector<std::int64_t> sequence;
      for (int i = 0; i < length; ++i, ++t) sequence.push_back((t * 7 + 3) % modulus);
      document.push_back(sequence);
    }
    documents.push_back(document);
  }
  return documents;
}

// Documents [first, end)'s tokens in order.
std::vector<std::int64_t> stream_of(const std::vector<Document>& documents, std::size_t first,
                                    std::size_t end) {
  std::vector<std::int64_t> stream;
  for (std::size_t d = first; d < end; ++d)
    for (const auto& sequence : documents[d])
      stream.insert(stream.end(), sequence.begin(), sequence.end());
  return stream;
}

MegatronSpec spec_of(const fs::path& prefix, int vocab, int seq_len) {
  MegatronSpec spec;
  spec.path = prefix.string();
  spec.vocab = vocab;
  spec.seq_len = seq_len;
  spec.seed = 1234;
  return spec;
}

// Checks sample `index` of `source` against window `window` of `stream`.
void check_window(const MegatronSource& source, std::int64_t index,
                  const std::vector<std::int64_t>& stream, std::int64_t window, int seq_len) {
  std::vector<std::int32_t> tokens(seq_len), targets(seq_len);
  source.sample(index, seq_len, tokens.data(), targets.data());
  INFO("sample " << index << ", window " << window);
  for (int p = 0; p < seq_len; ++p) {
    CHECK(tokens[p] == stream[window * seq_len + p]);
    CHECK(targets[p] == stream[window * seq_len + p + 1]);
  }
}

}  // namespace

TEST_CASE("megatron dataset: every integer dtype reads back, header and index as written") {
  for (int code : {1, 2, 3, 4, 5, 8}) {
    INFO("dtype code " << code);
    const fs::path prefix = scratch("dtype" + std::to_string(code));
    const int modulus = code == 2 ? 100 : code == 1 ? 250 : 40000;
    auto documents = varied_documents(code == 3 ? 30000 : modulus);
    if (code == 3 || code == 4 || code == 5)  // a negative id in a signed type is still read
      documents[0][0][1] = -2;
    write_dataset(prefix, code, documents);
    MegatronDataset data(prefix.string(), "data.path");
    CHECK(static_cast<int>(data.dtype()) == code);
    CHECK(ted::train::size_of(data.dtype()) == width_of(code));
    CHECK(data.documents() == 9);
    CHECK(data.sequences() == 12);
    const auto stream = stream_of(documents, 0, documents.size());
    REQUIRE(data.tokens() == static_cast<std::int64_t>(stream.size()));
    CHECK(data.document_start(0) == 0);
    CHECK(data.document_start(4) == 6);  // after 2 + 1 + 1 + 2 sequences
    CHECK(data.document_start(5) == 6);  // the empty document
    CHECK(data.document_start(9) == 12);
    CHECK(data.sequence_start(4) == 5 + 3 + 1 + 9);
    CHECK(data.sequence_start(5) == 5 + 3 + 1 + 9);  // after an empty sequence
    CHECK(data.sequence_start(12) == data.tokens());
    std::vector<std::int32_t> all(stream.size());
    data.read(0, data.tokens(), all.data());
    CHECK(std::equal(all.begin(), all.end(), stream.begin()));
  }
  fs::remove_all(scratch(""));
}

TEST_CASE("megatron samples: windows of seq_len + 1, shuffled per epoch; validation in order") {
  const fs::path prefix = scratch("corpus");
  const auto documents = varied_documents(64);
  write_dataset(prefix, 8, documents);
  const int seq_len = 4;

  SECTION("the split counts: max(1, round(f x documents)), ties to even as Python's round") {
    using ted::train::validation_documents;
    CHECK(validation_documents(0, 10) == 0);
    CHECK(validation_documents(0.01, 10) == 1);
    CHECK(validation_documents(0.25, 10) == 2);  // 2.5 -> 2
    CHECK(validation_documents(0.35, 10) == 4);  // 3.5 -> 4
    CHECK(validation_documents(0.5, 3) == 2);    // 1.5 -> 2
    CHECK(validation_documents(0.5, 1) == 1);
    CHECK(validation_documents(0.3, 9) == 3);  // 2.7
  }

  SECTION("the permutation: Fisher-Yates on the counter hash, a new one each epoch") {
    const auto p0 = ted::train::window_permutation(50, 1234, 0);
    const auto p1 = ted::train::window_permutation(50, 1234, 1);
    const auto q0 = ted::train::window_permutation(50, 99, 0);
    std::vector<std::int64_t> expected(50);
    std::iota(expected.begin(), expected.end(), 0);
    for (std::int64_t m = 49; m > 0; --m) {
      auto r = ted::random::hash(1234, 7, 0, static_cast<std::uint64_t>(m)) %
               static_cast<std::uint64_t>(m + 1);
      std::swap(expected[static_cast<std::size_t>(m)], expected[r]);
    }
    CHECK(p0 == expected);
    CHECK(std::set<std::int64_t>(p1.begin(), p1.end()).size() == 50);
    CHECK(p0 != p1);
    CHECK(p0 != q0);
    CHECK(ted::train::window_permutation(1, 1234, 5) == std::vector<std::int64_t>{0});
    CHECK(ted::train::window_permutation(0, 1234, 5).empty());
  }

  SECTION("the whole dataset: every window once per epoch") {
    auto spec = spec_of(prefix, 64, seq_len);
    auto source = ted::train::make_megatron_source(spec, MegatronSplit::training);
    REQUIRE(source);
    CHECK_FALSE(ted::train::make_megatron_source(spec, MegatronSplit::validation));
    const auto stream = stream_of(documents, 0, documents.size());
    const std::int64_t windows = (static_cast<std::int64_t>(stream.size()) - 1) / seq_len;
    REQUIRE(source->windows() == windows);
    CHECK(source->tokens() == static_cast<std::int64_t>(stream.size()));
    for (std::int64_t epoch = 0; epoch < 3; ++epoch) {
      const auto order = ted::train::window_permutation(windows, spec.seed, epoch);
      std::set<std::int64_t> seen;
      for (std::int64_t k = 0; k < windows; ++k) {
        const std::int64_t i = epoch * windows + k;
        CHECK(source->window_of(i) == order[static_cast<std::size_t>(k)]);
        check_window(*source, i, stream, order[static_cast<std::size_t>(k)], seq_len);
        seen.insert(source->window_of(i));
      }
      CHECK(static_cast<std::int64_t>(seen.size()) == windows);
    }
    // Back to an earlier epoch: the permutation is recomputed, not stale.
    CHECK(source->window_of(3) == ted::train::window_permutation(windows, spec.seed, 0)[3]);
    CHECK_THAT(source->describe(),
               ContainsSubstring("megatron dataset " + prefix.string() + " (uint16, 9 documents, " +
                                 std::to_string(stream.size()) + " tokens, " +
                                 std::to_string(windows) + " windows of 4+1)"));
  }

  SECTION("valid_fraction: the last documents are the validation split, read in order") {
    auto spec = spec_of(prefix, 64, seq_len);
    spec.valid_fraction = 0.3;  // round(2.7) = 3 of 9 documents
    auto training = ted::train::make_megatron_source(spec, MegatronSplit::training);
    auto validation = ted::train::make_megatron_source(spec, MegatronSplit::validation);
    REQUIRE(training);
    REQUIRE(validation);
    CHECK(training->documents() == 6);
    CHECK(validation->documents() == 3);
    const auto train_stream = stream_of(documents, 0, 6);
    const auto valid_stream = stream_of(documents, 6, 9);
    const std::int64_t train_windows = (static_cast<std::int64_t>(train_stream.size()) - 1) / 4;
    const std::int64_t valid_windows = (static_cast<std::int64_t>(valid_stream.size()) - 1) / 4;
    REQUIRE(training->windows() == train_windows);
    REQUIRE(validation->windows() == valid_windows);
    for (std::int64_t i = 0; i < 2 * train_windows + 3; ++i) {
      const auto order =
          ted::train::window_permutation(train_windows, spec.seed, i / train_windows);
      check_window(*training, i, train_stream, order[static_cast<std::size_t>(i % train_windows)],
                   seq_len);
    }
    for (std::int64_t v = 0; v < 3 * valid_windows; ++v) {
      CHECK(validation->window_of(v) == v % valid_windows);
      check_window(*validation, v, valid_stream, v % valid_windows, seq_len);
    }
    CHECK_THAT(training->describe(),
               ContainsSubstring("6 documents, " + std::to_string(train_stream.size()) +
                                 " tokens, " + std::to_string(train_windows) +
                                 " windows of 4+1; validation: last 3 documents, " +
                                 std::to_string(valid_windows) + " windows)"));
    CHECK_THAT(validation->describe(),
               ContainsSubstring("validation split: the last 3 of 9 documents (uint16, "));
    CHECK_THAT(validation->describe(), ContainsSubstring(", in order)"));
  }

  SECTION("valid_path: a second dataset, all of it the validation split") {
    const fs::path held_out = scratch("held_out");
    const std::vector<Document> valid_documents = {{{1, 2, 3}}, {{4, 5, 6, 7, 8, 9}, {10}}};
    write_dataset(held_out, 4, valid_documents);
    auto spec = spec_of(prefix, 64, seq_len);
    spec.valid_path = held_out.string();
    auto training = ted::train::make_megatron_source(spec, MegatronSplit::training);
    auto validation = ted::train::make_megatron_source(spec, MegatronSplit::validation);
    REQUIRE(validation);
    CHECK(training->documents() == 9);
    CHECK(validation->windows() == 2);  // (10 - 1) / 4
    check_window(*validation, 0, stream_of(valid_documents, 0, 2), 0, seq_len);
    check_window(*validation, 5, stream_of(valid_documents, 0, 2), 1, seq_len);
    CHECK_THAT(training->describe(), ContainsSubstring("; validation: " + held_out.string() +
                                                       ", 2 documents, 2 windows)"));
    CHECK_THAT(validation->describe(), ContainsSubstring("(int32, 2 documents, 10 tokens"));
  }
  fs::remove_all(scratch(""));
}

TEST_CASE("megatron bad files: one line naming the file and the problem") {
  const fs::path prefix = scratch("bad");
  const std::string idx = prefix.string() + ".idx", bin = prefix.string() + ".bin";
  const auto documents = varied_documents(64);
  auto rewrite = [&] { write_dataset(prefix, 8, documents); };
  auto open = [&] { MegatronDataset data(prefix.string(), "data.path"); };
  auto source = [&](int vocab, int seq_len) {
    return [=] {
      ted::train::make_megatron_source(spec_of(prefix, vocab, seq_len), MegatronSplit::training);
    };
  };
  const std::int64_t sequences = 12, document_indices = 10;
  const std::int64_t pointers_at = 34 + 4 * sequences, documents_at = pointers_at + 8 * sequences;

  rewrite();
  fs::remove(idx);
  CHECK_THAT(config_error(open),
             ContainsSubstring("data.path: the Megatron index '" + idx + "' does not exist"));
  rewrite();
  fs::remove(bin);
  CHECK_THAT(config_error(open),
             ContainsSubstring("data.path: the Megatron data '" + bin + "' does not exist"));

  rewrite();
  patch<char>(idx, 0, 'X');
  CHECK_THAT(config_error(open), ContainsSubstring("'" + idx +
                                                   "' does not start with Megatron's "
                                                   "magic MMIDIDX\\x00\\x00"));
  rewrite();
  patch<std::uint64_t>(idx, 9, 2);
  CHECK_THAT(config_error(open),
             ContainsSubstring("'" + idx +
                               "' has version 2; Megatron-Core writes and reads "
                               "version 1"));
  rewrite();
  patch<std::uint8_t>(idx, 17, 7);
  CHECK_THAT(config_error(open), ContainsSubstring("'" + idx +
                                                   "' holds float32 tokens (dtype "
                                                   "code 7): token ids must be an integer type"));
  patch<std::uint8_t>(idx, 17, 6);
  CHECK_THAT(config_error(open), ContainsSubstring("holds float64 tokens (dtype code 6)"));
  patch<std::uint8_t>(idx, 17, 9);
  CHECK_THAT(config_error(open), ContainsSubstring("has dtype code 9, not one of Megatron-Core's "
                                                   "DType codes 1 to 8"));
  patch<std::uint8_t>(idx, 17, 0);
  CHECK_THAT(config_error(open), ContainsSubstring("has dtype code 0"));

  rewrite();
  fs::resize_file(idx, 20);
  CHECK_THAT(config_error(open),
             ContainsSubstring("'" + idx + "' has 20 bytes, fewer than the 34 of its header"));
  rewrite();
  fs::resize_file(idx, static_cast<std::uintmax_t>(documents_at + 8 * document_indices - 1));
  CHECK_THAT(config_error(open),
             ContainsSubstring(
                 "'" + idx + "' has " + std::to_string(documents_at + 8 * document_indices - 1) +
                 " bytes, fewer than its header's 12 sequences and 10 document "
                 "indices need (" +
                 std::to_string(documents_at + 8 * document_indices) + "): truncated"));
  rewrite();
  patch<std::uint64_t>(idx, 18, std::uint64_t{1} << 60);  // a sequence count beyond any file
  CHECK_THAT(config_error(open), ContainsSubstring("document indices need: truncated"));

  const std::int64_t bin_bytes = 2 * static_cast<std::int64_t>(stream_of(documents, 0, 9).size());
  rewrite();
  fs::resize_file(bin, static_cast<std::uintmax_t>(bin_bytes - 1));
  CHECK_THAT(config_error(open),
             ContainsSubstring("data.path: the Megatron data '" + bin + "' has " +
                               std::to_string(bin_bytes - 1) + " bytes, fewer than the " +
                               std::to_string(bin_bytes) +
                               " its .idx's last sequence ends at: truncated"));
  rewrite();
  fs::resize_file(bin, static_cast<std::uintmax_t>(bin_bytes + 2));
  CHECK_THAT(config_error(open), ContainsSubstring("more than the " + std::to_string(bin_bytes) +
                                                   " its .idx accounts for"));

  rewrite();
  patch<std::int64_t>(idx, pointers_at + 8 * 3, 2 * 10);  // sequence 3 starts at token 9
  CHECK_THAT(config_error(open),
             ContainsSubstring("has sequence 3 at byte 20 of the .bin, but the sequences before it "
                               "end at byte 18: its pointers do not follow its lengths"));
  rewrite();
  patch<std::int32_t>(idx, 34 + 4 * 2, -1);
  CHECK_THAT(config_error(open), ContainsSubstring("gives sequence 2 the length -1"));
  rewrite();
  patch<std::int64_t>(idx, documents_at + 8 * 9, 11);
  CHECK_THAT(config_error(open), ContainsSubstring("has document indices ending at 11, not at its "
                                                   "sequence count 12"));
  rewrite();
  patch<std::int64_t>(idx, documents_at, 1);
  CHECK_THAT(config_error(open), ContainsSubstring("has document indices starting at 1, not 0"));
  rewrite();
  patch<std::int64_t>(idx, documents_at + 8 * 3, 1);
  CHECK_THAT(config_error(open), ContainsSubstring("has document index 3 (1) below the one before "
                                                   "it (3)"));

  // Token ids: with vocab 60 the first id too large, found the plain way, and its place.
  rewrite();
  const auto stream = stream_of(documents, 0, 9);
  const auto first_bad =
      std::find_if(stream.begin(), stream.end(), [](auto id) { return id >= 60; });
  REQUIRE(first_bad != stream.end());
  std::int64_t bad_at = first_bad - stream.begin(), bad_sequence = 0, bad_document = 0;
  for (std::int64_t t = 0, d = 0; d < 9; ++d)
    for (const auto& sequence : documents[static_cast<std::size_t>(d)]) {
      if (t <= bad_at && bad_at < t + static_cast<std::int64_t>(sequence.size()))
        bad_document = d;
      else if (t + static_cast<std::int64_t>(sequence.size()) <= bad_at)
        ++bad_sequence;
      t += static_cast<std::int64_t>(sequence.size());
    }
  CHECK_THAT(config_error(source(60, 4)),
             ContainsSubstring("data.path: the Megatron data '" + bin + "' holds token id " +
                               std::to_string(*first_bad) + " at token " + std::to_string(bad_at) +
                               " (sequence " + std::to_string(bad_sequence) + ", document " +
                               std::to_string(bad_document) + "), not below model.vocab 60"));
  CHECK_THAT(config_error(source(64, 4)), ContainsSubstring("(no ConfigError)"));
  {
    auto negative = documents;
    negative[5][1][0] = -3;  // document 5's sequence 1: the dataset's sequence 2 + 1 + 1 + 2 + 1
    write_dataset(prefix, 3, negative);
    const std::int64_t at = static_cast<std::int64_t>(stream_of(documents, 0, 5).size()) + 6;
    CHECK_THAT(config_error(source(64, 4)),
               ContainsSubstring("holds token id -3 at token " + std::to_string(at) +
                                 " (sequence 7, document 5), a negative id"));
  }
  // Beyond the scan limit the ids are checked as the samples read them.
  rewrite();
  {
    auto spec = spec_of(prefix, 60, 4);
    spec.scan_limit = 0;
    auto lazy = ted::train::make_megatron_source(spec, MegatronSplit::training);
    CHECK_THAT(lazy->describe(), ContainsSubstring("token ids checked as read"));
    std::vector<std::int32_t> tokens(4), targets(4);
    bool refused = false;
    for (std::int64_t i = 0; i < lazy->windows(); ++i) {
      const std::string text =
          config_error([&] { lazy->sample(i, 4, tokens.data(), targets.data()); });
      if (text.find("not below model.vocab 60") != std::string::npos) refused = true;
    }
    CHECK(refused);
  }

  // Too few tokens, for the dataset and for a split.
  rewrite();
  const auto total = std::to_string(stream.size());
  CHECK_THAT(config_error(source(64, static_cast<int>(stream.size()))),
             ContainsSubstring(
                 "data.path: '" + prefix.string() + "' holds " + total +
                 " tokens, fewer than model.seq_len + 1 = " + std::to_string(stream.size() + 1)));
  {
    auto spec = spec_of(prefix, 64, 20);
    spec.valid_fraction = 0.1;  // the last document, 11 tokens
    CHECK_THAT(
        config_error([&] { ted::train::make_megatron_source(spec, MegatronSplit::validation); }),
        ContainsSubstring("data.path: the last 1 of the 9 documents of '" + prefix.string() +
                          "' (the validation split) hold 11 tokens, fewer than "
                          "model.seq_len + 1 = 21"));
    // The training source says so too: the run would fail at its first evaluation.
    CHECK_THAT(
        config_error([&] { ted::train::make_megatron_source(spec, MegatronSplit::training); }),
        ContainsSubstring("(the validation split) hold 11 tokens"));
  }
  {
    write_dataset(prefix, 8, {documents[0]});
    auto spec = spec_of(prefix, 64, 4);
    spec.valid_fraction = 0.5;
    CHECK_THAT(
        config_error([&] { ted::train::make_megatron_source(spec, MegatronSplit::training); }),
        ContainsSubstring("data.valid_fraction 0.5 leaves no document for training: '" +
                          prefix.string() +
                          "' has 1 document, and 1 would be the "
                          "validation split"));
    write_dataset(prefix, 8, {});
    CHECK_THAT(config_error([&] {
                 ted::train::make_megatron_source(spec_of(prefix, 64, 4), MegatronSplit::training);
               }),
               ContainsSubstring("data.path: '" + prefix.string() + "' has no documents"));
  }
  fs::remove_all(scratch(""));
}

TEST_CASE(
    "megatron config: data.source megatron, its keys and rules, a prefix found from the YAML") {
  const fs::path folder = scratch("configs");
  fs::create_directories(folder / "data");
  write_dataset(folder / "data" / "corpus", 8, varied_documents(64));
  write_dataset(folder / "data" / "held_out", 8, varied_documents(64));
  const fs::path yaml = folder / "run.yaml";
  {
    std::ofstream out(yaml);
    out << "model:\n  vocab: 64\n  seq_len: 4\ndata:\n  source: megatron\n  path: data/corpus\n"
           "  valid_fraction: 0.25\n";
  }
  auto load = [&](const std::vector<std::string>& overrides) {
    ted::train::TrainConfig config;
    auto schema = config.schema();
    schema.load_yaml(yaml.string());
    for (const auto& o : overrides) schema.set(o);
    return config;
  };
  auto config = load({});
  CHECK(config.data.path == (folder / "data" / "corpus").string());  // from the YAML's folder
  CHECK(config.data.valid_fraction == 0.25);
  config.validate();
  auto training = ted::train::make_source(config);
  auto validation = ted::train::make_validation_source(config);
  REQUIRE(validation);
  CHECK_THAT(training->describe(), ContainsSubstring("7 documents"));  // 9 - round(2.25)
  CHECK_THAT(validation->describe(), ContainsSubstring("the last 2 of 9 documents"));
  CHECK_FALSE(ted::train::make_validation_source(load({"data.valid_fraction=0"})));
  CHECK_FALSE(
      ted::train::make_validation_source(load({"data.source=file", "data.valid_fraction=0"})));

  auto rule = [&](const std::vector<std::string>& overrides) {
    return config_error([&] { load(overrides).validate(); });
  };
  CHECK_THAT(rule({"data.source=megatron2"}),
             ContainsSubstring("data.source must be synthetic, file or megatron, got 'megatron2'"));
  CHECK_THAT(rule({"data.path="}), ContainsSubstring("data.path must name a Megatron dataset's "
                                                     "prefix"));
  CHECK_THAT(rule({"data.path=" + (folder / "data" / "nothing").string()}),
             ContainsSubstring("data.path: the Megatron index '" +
                               (folder / "data" / "nothing").string() + ".idx' does not exist"));
  CHECK_THAT(rule({"data.path=" + (folder / "data" / "corpus.bin").string()}),
             ContainsSubstring("names a file of the dataset; give its prefix, without .bin or "
                               ".idx"));
  CHECK_THAT(rule({"data.valid_fraction=0.7"}),
             ContainsSubstring("data.valid_fraction must be in [0, 0.5], got 0.7"));
  CHECK_THAT(rule({"data.valid_fraction=-0.1"}), ContainsSubstring("data.valid_fraction must be"));
  CHECK_THAT(rule({"data.valid_path=" + (folder / "data" / "held_out").string()}),
             ContainsSubstring("data.valid_fraction and data.valid_path both name the validation "
                               "split: give one"));
  CHECK_THAT(rule({"data.valid_fraction=0", "training.eval_every=5"}),
             ContainsSubstring("training.eval_every needs a held-out split: data.source megatron "
                               "has one with data.valid_fraction or data.valid_path"));
  CHECK_THAT(rule({"training.eval_every=5"}), ContainsSubstring("(no ConfigError)"));
  CHECK_THAT(rule({"data.source=synthetic"}),
             ContainsSubstring("data.valid_fraction splits a Megatron dataset: it needs "
                               "data.source megatron, got 'synthetic'"));
  CHECK_THAT(rule({"data.valid_fraction=0", "data.valid_path=" + (folder / "nope").string()}),
             ContainsSubstring("data.valid_path: the Megatron index '" +
                               (folder / "nope").string() + ".idx' does not exist"));
  auto held =
      load({"data.valid_fraction=0", "data.valid_path=" + (folder / "data" / "held_out").string()});
  held.validate();
  REQUIRE(ted::train::make_validation_source(held));
  CHECK(ted::train::make_validation_source(held)->describe().find("held_out") != std::string::npos);
  fs::remove_all(scratch(""));
}
