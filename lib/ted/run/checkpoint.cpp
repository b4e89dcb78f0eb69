#include "ted/run/checkpoint.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>

#include "ted/core/error.hpp"

namespace ted {

namespace fs = std::filesystem;

namespace {

constexpr char kMagic[8] = {'T', 'E', 'D', 'S', 'T', 'A', 'T', 'E'};
constexpr std::uint32_t kVersion = 1;
constexpr const char* kPrefix = "step_";
constexpr const char* kTemporary = ".tmp";

std::uint64_t fnv1a(const unsigned char* data, std::size_t count, std::uint64_t h) {
  for (std::size_t i = 0; i < count; ++i) h = (h ^ data[i]) * 0x100000001b3ull;
  return h;
}

// Appends `value`'s bytes to `out`.
template <typename V>
void put(std::vector<unsigned char>& out, const V& value) {
  const auto* p = reinterpret_cast<const unsigned char*>(&value);
  out.insert(out.end(), p, p + sizeof(V));
}

// Writes all of `bytes` to `path` and flushes it to the disk (fsync) before closing.
void write_durably(const fs::path& path, const unsigned char* bytes, std::size_t count) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) throw Error("cannot write " + path.string() + ": " + std::strerror(errno));
  // A test's kill in the middle of a write (tests/apps/checkpoint_resume.sh): with
  // TED_TEST_CRASH_WRITING=<folder>/<file>, half that file's bytes, then the process ends as a
  // SIGKILL would end it.
  const char* crash = std::getenv("TED_TEST_CRASH_WRITING");
  const bool crashing = crash && (path.parent_path().filename() / path.filename()) == crash;
  std::size_t done = 0, stop = crashing ? count / 2 : count;
  while (done < stop) {
    const ssize_t n = ::write(fd, bytes + done, stop - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      ::close(fd);
      throw Error("cannot write " + path.string() + ": " + std::strerror(errno));
    }
    done += static_cast<std::size_t>(n);
  }
  if (crashing) std::_Exit(137);
  if (::fsync(fd) != 0 || ::close(fd) != 0)
    throw Error("cannot write " + path.string() + ": " + std::strerror(errno));
}

void write_durably(const fs::path& path, const std::string& text) {
  write_durably(path, reinterpret_cast<const unsigned char*>(text.data()), text.size());
}

// A rename is durable once its folder is flushed.
void sync_folder(const fs::path& folder) {
  const int fd = ::open(folder.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

std::string step_name(int steps_done) {
  char name[32];
  std::snprintf(name, sizeof name, "%s%08d", kPrefix, steps_done);
  return name;
}

std::string rank_file(int rank) {
  char name[32];
  std::snprintf(name, sizeof name, "rank_%05d.state", rank);
  return name;
}

// The complete checkpoint folders of `save_dir`, by steps done.
std::map<int, fs::path> complete_checkpoints(const fs::path& save_dir) {
  std::map<int, fs::path> found;
  std::error_code error;
  for (const auto& entry : fs::directory_iterator(save_dir, error)) {
    const std::string name = entry.path().filename().string();
    if (!entry.is_directory() || name.rfind(kPrefix, 0) != 0) continue;
    const std::string digits = name.substr(std::strlen(kPrefix));
    if (digits.empty() || digits.find_first_not_of("0123456789") != std::string::npos) continue;
    if (!fs::exists(entry.path() / "manifest.txt")) continue;
    found[std::stoi(digits)] = entry.path();
  }
  return found;
}

std::string manifest_text(const CheckpointManifest& m) {
  std::ostringstream out;
  out << "# a ted_train checkpoint (lib/ted/run/checkpoint.hpp)\n"
      << "steps_done " << m.steps_done << "\nranks " << m.ranks << "\nlayout " << m.layout.tensor
      << " " << m.layout.expert << " " << m.layout.data << "\nrevision " << m.revision << "\n";
  for (const auto& line : m.config) out << "config " << line << "\n";
  return out.str();
}

// The keys that may differ between the run that saved and the one that resumes: how the same
// run is carried out, where its output goes, how it is checkpointed and evaluated.
bool may_differ(const std::string& key) {
  static const char* const free_prefixes[] = {
      "parallel.dtd",        "parallel.cac",       "parallel.reduce_scatter",
      "parallel.tile_elems", "parallel.overlap",   "parallel.dp",
      "run.backend",         "run.comm",           "run.cluster",
      "training.csv",        "training.log_every", "training.save_",
      "training.resume",     "training.load",      "training.eval_"};
  for (const char* prefix : free_prefixes)
    if (key.rfind(prefix, 0) == 0) return true;
  return false;
}

std::map<std::string, std::string> by_key(const std::vector<std::string>& lines) {
  std::map<std::string, std::string> values;
  for (const auto& line : lines) {
    const auto at = line.find('=');
    if (at != std::string::npos) values[line.substr(0, at)] = line.substr(at + 1);
  }
  return values;
}

}  // namespace

void write_state_file(const fs::path& path, const train::TrainState& state) {
  std::vector<unsigned char> out(std::begin(kMagic), std::end(kMagic));
  put(out, kVersion);
  put(out, static_cast<std::uint32_t>(state.size()));
  for (const auto& blob : state) {
    put(out, static_cast<std::uint32_t>(blob.name.size()));
    out.insert(out.end(), blob.name.begin(), blob.name.end());
    put(out, static_cast<std::uint64_t>(blob.bytes.size()));
    out.insert(out.end(), blob.bytes.begin(), blob.bytes.end());
  }
  put(out, fnv1a(out.data(), out.size(), 0xcbf29ce484222325ull));
  write_durably(path, out.data(), out.size());
}

train::TrainState read_state_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ConfigError("checkpoint: cannot read " + path.string());
  const std::vector<unsigned char> bytes((std::istreambuf_iterator<char>(in)),
                                         std::istreambuf_iterator<char>());
  auto corrupt = [&](const std::string& why) {
    return ConfigError("checkpoint: " + path.string() + " is " + why);
  };
  const std::size_t header = sizeof kMagic + 2 * sizeof(std::uint32_t);
  if (bytes.size() < header + sizeof(std::uint64_t)) throw corrupt("cut short");
  if (std::memcmp(bytes.data(), kMagic, sizeof kMagic) != 0)
    throw corrupt("not a ted_train state file");
  const std::size_t body = bytes.size() - sizeof(std::uint64_t);
  std::uint64_t sum = 0;
  std::memcpy(&sum, bytes.data() + body, sizeof sum);
  if (fnv1a(bytes.data(), body, 0xcbf29ce484222325ull) != sum)
    throw corrupt("corrupt or cut short (its checksum does not match)");
  std::size_t at = sizeof kMagic;
  auto take = [&](void* into, std::size_t count) {
    if (at + count > body) throw corrupt("cut short");
    std::memcpy(into, bytes.data() + at, count);
    at += count;
  };
  std::uint32_t version = 0, count = 0;
  take(&version, sizeof version);
  if (version != kVersion)
    throw corrupt("of version " + std::to_string(version) + ", not " + std::to_string(kVersion));
  take(&count, sizeof count);
  train::TrainState state(count);
  for (auto& blob : state) {
    std::uint32_t name_size = 0;
    take(&name_size, sizeof name_size);
    blob.name.resize(name_size);
    take(blob.name.data(), name_size);
    std::uint64_t size = 0;
    take(&size, sizeof size);
    if (size > body - at) throw corrupt("cut short");
    blob.bytes.resize(size);
    take(blob.bytes.data(), size);
  }
  return state;
}

std::optional<fs::path> latest_checkpoint(const fs::path& save_dir) {
  auto found = complete_checkpoints(save_dir);
  if (found.empty()) return std::nullopt;
  return found.rbegin()->second;
}

CheckpointManifest read_manifest(const fs::path& folder) {
  std::ifstream in(folder / "manifest.txt");
  if (!in)
    throw ConfigError("checkpoint: " + folder.string() +
                      " has no manifest.txt (not a complete ted_train checkpoint)");
  CheckpointManifest m;
  bool steps = false;
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream words(line);
    std::string word;
    words >> word;
    if (word == "steps_done") steps = static_cast<bool>(words >> m.steps_done);
    if (word == "ranks") words >> m.ranks;
    if (word == "layout") words >> m.layout.tensor >> m.layout.expert >> m.layout.data;
    if (word == "revision") words >> m.revision;
    if (word == "config") m.config.push_back(line.substr(std::strlen("config ")));
  }
  if (!steps) throw ConfigError("checkpoint: " + folder.string() + "/manifest.txt is unreadable");
  return m;
}

void check_resumable(const fs::path& folder, const CheckpointManifest& saved, int ranks,
                     const Layout& layout, const std::vector<std::string>& config) {
  const std::string where = "checkpoint " + folder.string() + ": ";
  const std::string same =
      "; resuming needs the same ranks and layout, model, precision, data and optimizer "
      "(a checkpoint is not converted to another layout)";
  if (saved.ranks != ranks || saved.layout.tensor != layout.tensor ||
      saved.layout.expert != layout.expert || saved.layout.data != layout.data)
    throw ConfigError(where + "saved on " + std::to_string(saved.ranks) + " ranks (" +
                      saved.layout.to_string() + "), this run has " + std::to_string(ranks) + " (" +
                      layout.to_string() + ")" + same);
  const auto before = by_key(saved.config), now = by_key(config);
  std::vector<std::string> differ;
  std::string first;
  for (const auto& [key, value] : now) {
    if (may_differ(key)) continue;
    const auto it = before.find(key);
    const std::string old = it == before.end() ? "(absent)" : it->second;
    if (old == value) continue;
    if (differ.empty()) first = key + "=" + old + " there, " + value + " here";
    differ.push_back(key);
  }
  if (differ.empty()) return;
  std::string more;
  if (differ.size() > 1) {
    more = " (also ";
    for (std::size_t i = 1; i < differ.size(); ++i) more += (i > 1 ? ", " : "") + differ[i];
    more += ")";
  }
  throw ConfigError(where + first + more + same);
}

fs::path save_checkpoint(Communicator& control, const fs::path& save_dir, int keep,
                         const CheckpointManifest& manifest, const train::TrainState& state,
                         const std::string& csv_text) {
  const fs::path folder = save_dir / step_name(manifest.steps_done);
  const fs::path temporary = save_dir / (step_name(manifest.steps_done) + kTemporary);
  const bool leader = control.rank() == 0;
  // Rank 0 makes a fresh temporary folder; a failure anywhere is every rank's (the flag).
  std::int32_t failed = 0;
  std::string failure;
  auto agree = [&](const char* what) {
    control.all_reduce(&failed, &failed, 1, DataType::i32, ReduceOp::max);
    if (failed)
      throw Error("checkpoint " + folder.string() + ": " +
                  (failure.empty() ? std::string(what) + " failed on another rank" : failure));
  };
  if (leader) try {
      fs::create_directories(save_dir);
      fs::remove_all(temporary);
      fs::create_directory(temporary);
    } catch (const std::exception& e) {
      failed = 1, failure = e.what();
    }
  agree("making the folder");
  try {
    write_state_file(temporary / rank_file(control.rank()), state);
  } catch (const std::exception& e) {
    failed = 1, failure = e.what();
  }
  agree("writing a rank's state");
  if (leader) try {
      write_durably(temporary / "train.csv", csv_text);
      write_durably(temporary / "manifest.txt", manifest_text(manifest));
      sync_folder(temporary);
      fs::remove_all(folder);  // the same step saved before (a resumed run's first save)
      fs::rename(temporary, folder);
      sync_folder(save_dir);
      // Folders a kill cut short before their rename are no checkpoints: cleared.
      for (const auto& entry : fs::directory_iterator(save_dir)) {
        const std::string name = entry.path().filename().string();
        if (entry.is_directory() && name.rfind(kPrefix, 0) == 0 &&
            name.size() > std::strlen(kTemporary) &&
            name.compare(name.size() - std::strlen(kTemporary), std::string::npos, kTemporary) == 0)
          fs::remove_all(entry.path());
      }
      auto complete = complete_checkpoints(save_dir);
      while (static_cast<int>(complete.size()) > keep) {
        fs::remove_all(complete.begin()->second);
        complete.erase(complete.begin());
      }
    } catch (const std::exception& e) {
      failed = 1, failure = e.what();
    }
  agree("completing the checkpoint");
  return folder;
}

void agree_on_failure(Communicator& control, const std::function<void()>& work) {
  std::string message;
  try {
    work();
  } catch (const std::exception& e) {
    message = e.what();
    if (message.empty()) message = "failed";
  }
  // The lowest failing rank, then its message (at most 1 KiB) to everyone.
  std::int32_t first = message.empty() ? control.size() : control.rank();
  control.all_reduce(&first, &first, 1, DataType::i32, ReduceOp::min);
  if (first == control.size()) return;
  std::vector<std::int32_t> text(256, 0);
  if (first == control.rank())
    std::memcpy(text.data(), message.data(), std::min(message.size(), text.size() * 4 - 1));
  control.all_reduce(text.data(), text.data(), text.size(), DataType::i32, ReduceOp::sum);
  throw ConfigError(std::string(reinterpret_cast<const char*>(text.data())));
}

train::TrainState load_rank_state(const fs::path& folder, int rank) {
  return read_state_file(folder / rank_file(rank));
}

}  // namespace ted
