// Runs a kernel's grid: blocks one after another in a shuffled order (seeded per launch, so a
// result that depends on block order changes between launches), the threads of a block as
// fibers on this thread, switched at barriers and warp-wide operations (include/ted_emu/
// device.hpp). A fiber whose thread ends without having waited runs the block's next thread on
// the same stack, so a kernel without barriers costs a call per thread, not a context switch. A
// block whose threads can no longer all make progress (a barrier some threads never reach while
// others wait in a warp operation, a warp operation naming lanes that exited) fails the launch with
// the reason on stderr, where a GPU would hang or return garbage.
#include <elf.h>
#include <fcntl.h>
#include <link.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <sstream>
#include <vector>

#include "internal.hpp"

// The launch's dynamic shared memory (`extern __shared__` in the sources): one per OS thread,
// which is one per running block. Declared as the sources declare it (with its ABI tag); the
// bytes past what the launch asked for are a canary, checked when each block ends.
alignas(16) __shared__ float4
    ted_dynamic_shared[(ted_emu::kMaxDynamicShared + ted_emu::kSharedCanary) / sizeof(float4)];

__thread uint3 threadIdx;
__thread uint3 blockIdx;
__thread uint3 blockDim;
__thread uint3 gridDim;

namespace ted_emu {

namespace {

// ---- fibers: a stack each and a context switch
// --------------------------------------------------- ted_emu_switch(from, to) saves the
// callee-saved registers on the current stack, stores its pointer in *from and resumes the stack
// `to`. (Kernels do not change the floating-point control words, so they are not switched.)
extern "C" void ted_emu_switch(void** from, void* to);

#if defined(__x86_64__)
asm(R"(
  .text
  .globl ted_emu_switch
  .type ted_emu_switch,@function
ted_emu_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size ted_emu_switch,.-ted_emu_switch
  .section .note.GNU-stack,"",@progbits
  .text
)");

// A fresh stack whose first switch "returns" into entry with the stack aligned as after a call.
void* prepare_stack(char* top, void (*entry)()) {
  auto* slot =
      reinterpret_cast<std::uint64_t*>((reinterpret_cast<std::uintptr_t>(top) & ~15ull) - 16);
  slot[0] = reinterpret_cast<std::uint64_t>(entry);  // the `ret` target
  std::uint64_t* sp = slot - 6;                      // rbp rbx r12 r13 r14 r15
  for (int i = 0; i < 6; ++i) sp[i] = 0;
  return sp;
}
#else
#error "the emulated GPU's fibers need x86-64 (src/scheduler.cpp: ted_emu_switch)"
#endif

constexpr std::size_t kStackBytes = 64 * 1024;

enum class State : std::uint8_t { unstarted, runnable, barrier, warp, done };

// One thread of the block: where its fiber stopped (while it waits), and what it waits for.
struct Fiber {
  void* sp = nullptr;
  uint3 thread_idx{};
  State state = State::unstarted;
  detail::WarpOp op{};
  unsigned mask = 0;
  int param = 0, width = 32;
  std::uint64_t bits = 0, result = 0;
};

// The lanes of one warp: which wait in a warp operation, which have exited, and the lanes the
// waiting ones' masks name.
struct WarpState {
  unsigned arrived = 0, exited = 0, wanted = 0, present = 0;
};

const char* op_name(detail::WarpOp op) {
  switch (op) {
    case detail::WarpOp::sync:
      return "__syncwarp";
    case detail::WarpOp::shuffle_index:
      return "__shfl_sync";
    case detail::WarpOp::shuffle_xor:
      return "__shfl_xor_sync";
    case detail::WarpOp::shuffle_up:
      return "__shfl_up_sync";
    case detail::WarpOp::shuffle_down:
      return "__shfl_down_sync";
    case detail::WarpOp::ballot:
      return "__ballot_sync";
  }
  return "?";
}

// The threads of the block this OS thread is running. Threads start in the block's order
// (upwards, downwards, or from thread k on), each on the stack of the fiber that finished the
// thread before it, or on a fresh stack when that one is waiting. A thread that blocks (at a
// barrier, in a warp operation) switches straight to a runnable thread, or starts the next one;
// a barrier or warp operation completes the moment its last participant arrives (or the last
// missing one exits), which makes its threads runnable again. The scheduler's own stack is
// resumed only when nothing can run: the block is finished, or it cannot go on.
class BlockRunner {
 public:
  ~BlockRunner() {
    if (stacks_) munmap(stacks_, capacity_ * slot_bytes());
  }

  // Runs one block; false (and `why`) when it cannot finish. `order`: 0 threads upwards,
  // 1 downwards, k >= 2 from thread k - 2 upwards, wrapping.
  bool run(const Grid& grid, uint3 block_idx, int order, std::string* why) {
    const unsigned nx = grid.block.x, ny = grid.block.y;
    const int n = static_cast<int>(nx * ny * grid.block.z);
    reserve(n);
    call_ = grid.call.get();
    fibers_.resize(n);
    for (int i = 0; i < n; ++i) {
      const unsigned u = static_cast<unsigned>(i);
      fibers_[i].thread_idx = {u % nx, (u / nx) % ny, u / (nx * ny)};
      fibers_[i].state = State::unstarted;
    }
    warps_.assign((n + 31) / 32, WarpState{});
    for (int w = 0; w < static_cast<int>(warps_.size()); ++w) {
      const int lanes = std::min(32, n - 32 * w);
      warps_[w].present = lanes == 32 ? ~0u : ((1u << lanes) - 1u);
    }
    queue_.resize(n);
    head_ = tail_ = queued_ = 0;
    order_ = order;
    started_ = 0;
    free_slots_.clear();
    for (int slot = n - 1; slot >= 0; --slot) free_slots_.push_back(slot);
    blockIdx = block_idx;
    blockDim = {grid.block.x, grid.block.y, grid.block.z};
    gridDim = {grid.grid.x, grid.grid.y, grid.grid.z};
    live_ = n;
    at_barrier_ = 0;
    failure_.clear();
    switch_from(nullptr, &scheduler_sp_);  // starts the first thread
    current_ = nullptr;
    if (!failure_.empty()) {
      *why = failure_;
      return false;
    }
    if (live_ > 0) {
      *why = describe_deadlock();
      return false;
    }
    return true;
  }

  // Called on a thread: park it in `state` and run another.
  void park(State state) {
    Fiber* me = current_;
    me->state = state;
    if (state == State::barrier) {
      ++at_barrier_;
      if (at_barrier_ == live_) release_barrier();
    } else {
      arrive(*me);
    }
    switch_from(me, &me->sp);
    // resumed: whoever switched here has entered this thread
  }
  Fiber& current() { return *current_; }
  [[noreturn]] void fail(const std::string& why) {
    if (failure_.empty()) failure_ = why;
    head_ = tail_ = queued_ = 0;  // nothing else runs
    started_ = fibers_.size();
    void* abandoned = nullptr;
    ted_emu_switch(&abandoned, scheduler_sp_);
    __builtin_unreachable();
  }

 private:
  static void fiber_main();

  std::size_t slot_bytes() const { return kStackBytes + static_cast<std::size_t>(getpagesize()); }
  // The top of stack slot i, staggered by i: stacks a power of two apart would put every
  // fiber's frames in the same cache sets.
  char* stack_top(int i) {
    return static_cast<char*>(stacks_) + (i + 1) * slot_bytes() - (i * 448) % 4096;
  }
  void reserve(int n) {
    if (static_cast<std::size_t>(n) <= capacity_) return;
    if (stacks_) munmap(stacks_, capacity_ * slot_bytes());
    const std::size_t count = std::max<std::size_t>(n, 256);
    void* memory = mmap(nullptr, count * slot_bytes(), PROT_READ | PROT_WRITE,
                        MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (memory == MAP_FAILED) throw std::bad_alloc();
    // A guard page under each stack: an overflow faults instead of writing a neighbour's stack.
    for (std::size_t i = 0; i < count; ++i)
      mprotect(static_cast<char*>(memory) + i * slot_bytes(),
               static_cast<std::size_t>(getpagesize()), PROT_NONE);
    stacks_ = memory;
    capacity_ = count;
  }

  // The run queue: a ring of thread indices (each thread is in it at most once).
  void push(int i) {
    queue_[tail_] = i;
    tail_ = tail_ + 1 == queue_.size() ? 0 : tail_ + 1;
    ++queued_;
  }
  Fiber* pop() {
    if (!queued_) return nullptr;
    const int i = queue_[head_];
    head_ = head_ + 1 == queue_.size() ? 0 : head_ + 1;
    --queued_;
    return &fibers_[i];
  }
  // The next thread to start in the block's order, or -1.
  int next_unstarted() {
    const int n = static_cast<int>(fibers_.size());
    if (started_ >= fibers_.size()) return -1;
    const int k = static_cast<int>(started_++);
    return order_ == 0 ? k : order_ == 1 ? n - 1 - k : (k + order_ - 2) % n;
  }
  void enter(Fiber* f) {
    current_ = f;
    threadIdx = f->thread_idx;
  }
  // Leaves the running stack (its context saved in *save) for a runnable thread, a fresh fiber
  // for the next unstarted thread, or the scheduler. `me`: the thread leaving, if any.
  void switch_from(Fiber* me, void** save) {
    Fiber* next = pop();
    if (next == me && me) return;  // released at once: go on
    if (next) {
      enter(next);
      ted_emu_switch(save, next->sp);
    } else if (started_ < fibers_.size()) {
      starting_slot_ = free_slots_.back();
      free_slots_.pop_back();
      ted_emu_switch(save, prepare_stack(stack_top(starting_slot_), &fiber_main));
    } else {
      ted_emu_switch(save, scheduler_sp_);
    }
  }

  void release_barrier() {
    at_barrier_ = 0;
    for (std::size_t i = 0; i < fibers_.size(); ++i)
      if (fibers_[i].state == State::barrier) {
        fibers_[i].state = State::runnable;
        push(static_cast<int>(i));
      }
  }
  int index_of(const Fiber& f) const { return static_cast<int>(&f - fibers_.data()); }
  void arrive(Fiber& f) {
    const int i = index_of(f);
    WarpState& w = warps_[i / 32];
    w.arrived |= 1u << (i % 32);
    w.wanted |= f.mask;
    try_warp(i / 32);
  }
  void exited(int i) {
    --live_;
    WarpState& w = warps_[i / 32];
    w.exited |= 1u << (i % 32);
    if (w.arrived) try_warp(i / 32);
    if (at_barrier_ > 0 && at_barrier_ == live_) release_barrier();
  }
  void try_warp(int warp);
  std::string describe_deadlock() const;

  void* stacks_ = nullptr;
  std::size_t capacity_ = 0;
  std::vector<Fiber> fibers_;
  std::vector<WarpState> warps_;
  std::vector<int> queue_;
  std::size_t head_ = 0, tail_ = 0, queued_ = 0;
  std::size_t started_ = 0;
  int order_ = 0;
  std::vector<int> free_slots_;
  int starting_slot_ = 0;
  int live_ = 0, at_barrier_ = 0;
  void* scheduler_sp_ = nullptr;
  Fiber* current_ = nullptr;
  const detail::KernelCall* call_ = nullptr;
  std::string failure_;
};

// One runner per OS thread, reached through a plain pointer (no TLS initialisation check on the
// hot paths).
thread_local BlockRunner tls_runner_storage;
__thread BlockRunner* tls_runner = nullptr;

// A fiber: runs unstarted threads one after another on its stack until one waits (then this
// stack is that thread's until it ends) or none is left (then the stack is given back).
void BlockRunner::fiber_main() {
  BlockRunner& runner = *tls_runner;
  const int slot = runner.starting_slot_;
  for (int i = runner.next_unstarted(); i >= 0; i = runner.next_unstarted()) {
    Fiber* me = &runner.fibers_[i];
    me->state = State::runnable;
    runner.enter(me);
    try {
      runner.call_->run();
    } catch (const std::exception& e) {
      runner.fail(std::string("a kernel thread threw: ") + e.what());
    } catch (...) {
      runner.fail("a kernel thread threw");
    }
    me = runner.current_;  // the same thread, possibly resumed here after waiting
    me->state = State::done;
    runner.exited(runner.index_of(*me));
  }
  runner.free_slots_.push_back(slot);
  void* abandoned = nullptr;
  runner.switch_from(nullptr, &abandoned);
  __builtin_unreachable();
}

// Completes warp `warp`'s operation once every lane its waiting lanes name has arrived or
// exited: each waiting lane gets its result and runs again.
void BlockRunner::try_warp(int warp) {
  WarpState& w = warps_[warp];
  Fiber* lane = fibers_.data() + warp * 32;
  // A lane the mask names that has exited never takes part: a GPU hangs or returns garbage
  // (undefined), so the launch fails, naming the operation and the lane.
  if (const unsigned gone = w.wanted & w.present & w.exited) {
    const Fiber& waiting = lane[__builtin_ctz(w.arrived)];
    std::ostringstream text;
    text << "warp " << warp << ": " << op_name(waiting.op) << " (mask 0x" << std::hex
         << waiting.mask << std::dec << ") names lane " << __builtin_ctz(gone)
         << ", which has exited";
    failure_ = text.str();
    head_ = tail_ = queued_ = 0;
    started_ = fibers_.size();  // nothing else starts
    return;
  }
  const unsigned needed = w.wanted & w.present & ~w.exited;
  if (needed & ~w.arrived) return;  // still waiting for some
  const unsigned arrived = w.arrived;
  const Fiber& first = lane[__builtin_ctz(arrived)];
  const detail::WarpOp op = first.op;
  std::uint64_t ballot = 0;
  for (unsigned rest = arrived; rest; rest &= rest - 1) {
    const int l = __builtin_ctz(rest);
    if (lane[l].op != op) {
      std::ostringstream text;
      text << "warp " << warp << ": lanes wait at different warp operations (" << op_name(op)
           << " and " << op_name(lane[l].op) << ")";
      failure_ = text.str();
      head_ = tail_ = queued_ = 0;
      return;
    }
    if (lane[l].bits) ballot |= 1ull << l;
  }
  // Reading a lane that is not taking part is undefined on a GPU: all ones here.
  auto value_of = [&](int src) { return arrived >> src & 1u ? lane[src].bits : ~0ull; };
  for (unsigned rest = arrived; rest; rest &= rest - 1) {
    const int l = __builtin_ctz(rest);
    Fiber& f = lane[l];
    const int width = f.width > 0 && f.width <= 32 ? f.width : 32;
    const int segment = l & ~(width - 1);
    switch (op) {
      case detail::WarpOp::sync:
        break;
      case detail::WarpOp::ballot:
        f.result = ballot;
        break;
      case detail::WarpOp::shuffle_index:
        f.result = value_of(segment + (f.param & (width - 1)));
        break;
      case detail::WarpOp::shuffle_xor: {
        const int src = l ^ f.param;
        f.result = src >= segment + width || src < 0 ? f.bits : value_of(src);
        break;
      }
      case detail::WarpOp::shuffle_up: {
        const int src = l - f.param;
        f.result = src < segment ? f.bits : value_of(src);
        break;
      }
      case detail::WarpOp::shuffle_down: {
        const int src = l + f.param;
        f.result = src >= segment + width ? f.bits : value_of(src);
        break;
      }
    }
    f.state = State::runnable;
    push(warp * 32 + l);
  }
  w.arrived = 0;
  w.wanted = 0;
}

std::string BlockRunner::describe_deadlock() const {
  int at_barrier = -1, at_warp = -1;
  for (std::size_t i = 0; i < fibers_.size(); ++i) {
    if (fibers_[i].state == State::barrier && at_barrier < 0) at_barrier = static_cast<int>(i);
    if (fibers_[i].state == State::warp && at_warp < 0) at_warp = static_cast<int>(i);
  }
  std::ostringstream text;
  if (at_warp >= 0) {
    const Fiber& f = fibers_[at_warp];
    text << "thread " << at_warp << " waits in " << op_name(f.op) << " (mask 0x" << std::hex
         << f.mask << std::dec << ") for lanes that never arrive";
    if (at_barrier >= 0) text << " while thread " << at_barrier << " waits at __syncthreads";
  } else {
    text << "threads wait at __syncthreads that others never reach";
  }
  return text.str();
}

// A small, fast generator (splitmix64): the orders it picks only need to vary.
std::uint64_t splitmix(std::uint64_t& state) {
  std::uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// The order of the blocks: a shuffle of [0, n) seeded per launch (an affine walk for grids too
// large to shuffle cheaply).
std::vector<std::uint64_t> block_order(std::uint64_t n, std::uint64_t seed) {
  std::vector<std::uint64_t> order(n);
  std::uint64_t state = seed;
  if (n <= (1u << 16)) {
    std::iota(order.begin(), order.end(), 0);
    for (std::uint64_t i = n; i > 1; --i) std::swap(order[i - 1], order[splitmix(state) % i]);
    return order;
  }
  std::uint64_t stride = splitmix(state) % n | 1;
  while (std::gcd(stride, n) != 1) stride += 2;
  const std::uint64_t offset = splitmix(state) % n;
  for (std::uint64_t i = 0; i < n; ++i) order[i] = (i * stride + offset) % n;
  return order;
}

// ---- shared memory: static objects poisoned, dynamic memory bounded -------------------------
// Every static __shared__ object carries the ABI tag "ted_shared" (cuda_runtime.h), so the
// program's symbol table lists them: thread-local symbols, each an offset into the program's
// thread-local block. Read once from /proc/self/exe; a stripped program has no symbol table,
// and then nothing is poisoned (said once on stderr).
struct SharedObject {
  std::size_t offset, bytes;
};

std::vector<SharedObject> read_shared_objects() {
  std::vector<SharedObject> found;
  const int fd = ::open("/proc/self/exe", O_RDONLY);
  if (fd < 0) return found;
  struct stat info {};
  void* map =
      fstat(fd, &info) == 0 && info.st_size > 0
          ? mmap(nullptr, static_cast<std::size_t>(info.st_size), PROT_READ, MAP_PRIVATE, fd, 0)
          : MAP_FAILED;
  ::close(fd);
  if (map == MAP_FAILED) return found;
  const auto* base = static_cast<const char*>(map);
  const auto* header = reinterpret_cast<const Elf64_Ehdr*>(base);
  const auto* sections = reinterpret_cast<const Elf64_Shdr*>(base + header->e_shoff);
  const std::string dynamic_name = "ted_dynamic_shared";
  for (int i = 0; i < header->e_shnum; ++i) {
    if (sections[i].sh_type != SHT_SYMTAB) continue;
    const auto* symbols = reinterpret_cast<const Elf64_Sym*>(base + sections[i].sh_offset);
    const char* names = base + sections[sections[i].sh_link].sh_offset;
    const std::size_t count = sections[i].sh_size / sizeof(Elf64_Sym);
    for (std::size_t k = 0; k < count; ++k) {
      const Elf64_Sym& sym = symbols[k];
      if (ELF64_ST_TYPE(sym.st_info) != STT_TLS || sym.st_size == 0 || sym.st_shndx == SHN_UNDEF)
        continue;
      const char* name = names + sym.st_name;
      if (!std::strstr(name, "B10ted_shared") || std::strstr(name, dynamic_name.c_str())) continue;
      found.push_back(
          {static_cast<std::size_t>(sym.st_value), static_cast<std::size_t>(sym.st_size)});
    }
  }
  munmap(map, static_cast<std::size_t>(info.st_size));
  std::sort(found.begin(), found.end(),
            [](const SharedObject& a, const SharedObject& b) { return a.offset < b.offset; });
  found.erase(std::unique(found.begin(), found.end(),
                          [](const SharedObject& a, const SharedObject& b) {
                            return a.offset == b.offset;
                          }),
              found.end());
  if (found.empty())
    explain(
        "no static __shared__ objects in the program's symbol table (stripped?): their "
        "memory is not poisoned at each block's start");
  return found;
}

const std::vector<SharedObject>& shared_objects() {
  static const std::vector<SharedObject> objects = read_shared_objects();
  return objects;
}

// This OS thread's copy of the program's thread-local block (the program is the first module).
char* program_tls() {
  char* block = nullptr;
  dl_iterate_phdr(
      [](dl_phdr_info* info, std::size_t, void* out) {
        *static_cast<char**>(out) = static_cast<char*>(info->dlpi_tls_data);
        return 1;  // the first module is the program
      },
      &block);
  return block;
}

// Static __shared__ memory reads as NaN (0xff bytes) at a block's start, not as the previous
// block's values or as zeros.
void poison_static_shared() {
  static thread_local char* block = program_tls();
  if (!block) return;
  for (const SharedObject& object : shared_objects())
    std::memset(block + object.offset, 0xff, object.bytes);
}

// The bytes after a launch's dynamic shared memory: a kernel that writes there used more than
// it asked for, which faults on a GPU. Reads there see these bytes (a large negative float).
constexpr unsigned char kCanaryByte = 0xfe;
char* dynamic_bytes() {
  return reinterpret_cast<char*>(ted_dynamic_shared);
}
bool canary_intact(std::size_t asked) {
  static const std::vector<char> canary(kSharedCanary, static_cast<char>(kCanaryByte));
  return std::memcmp(dynamic_bytes() + asked, canary.data(), kSharedCanary) == 0;
}

}  // namespace

namespace detail {

void sync_threads() {
  tls_runner->park(State::barrier);
}

std::uint64_t warp_exchange(WarpOp op, unsigned mask, std::uint64_t bits, int param, int width) {
  Fiber& f = tls_runner->current();
  f.op = op;
  f.mask = mask;
  f.bits = bits;
  f.param = param;
  f.width = width;
  tls_runner->park(State::warp);
  return tls_runner->current().result;
}

void trap(const char* why) {
  tls_runner->fail(std::string("a kernel thread called ") + why);
}

}  // namespace detail

void run_grid(const Grid& grid, int device) {
  const std::uint64_t count = static_cast<std::uint64_t>(grid.grid.x) * grid.grid.y * grid.grid.z;
  const auto order = block_order(count, grid.order_seed);
  std::uint64_t state = grid.order_seed;
  const int threads = static_cast<int>(grid.block.x * grid.block.y * grid.block.z);
  tls_runner = &tls_runner_storage;
  for (std::uint64_t index : order) {
    const uint3 block{
        static_cast<unsigned>(index % grid.grid.x),
        static_cast<unsigned>(index / grid.grid.x % grid.grid.y),
        static_cast<unsigned>(index / (static_cast<std::uint64_t>(grid.grid.x) * grid.grid.y))};
    // Uninitialised shared memory reads as NaN, not as a previous block's values; past the
    // dynamic memory asked for lies the canary.
    std::memset(dynamic_bytes(), 0xff, grid.shared_bytes);
    std::memset(dynamic_bytes() + grid.shared_bytes, kCanaryByte, kSharedCanary);
    poison_static_shared();
    // Within a round the fibers run upwards, downwards or from a random thread on: a thread
    // that reads another's write without a barrier in between sees it missing in some order.
    const std::uint64_t draw = splitmix(state);
    const int pick = static_cast<int>(draw % 3);
    const int order_kind = pick < 2 ? pick : 2 + static_cast<int>((draw >> 8) % threads);
    std::string why;
    const bool ok = tls_runner->run(grid, block, order_kind, &why);
    const bool inside = canary_intact(grid.shared_bytes);
    if (!ok || !inside) {
      std::ostringstream text;
      text << "kernel " << grid.kernel << " block (" << block.x << "," << block.y << "," << block.z
           << "): ";
      if (ok)
        text << "wrote past the " << grid.shared_bytes
             << " bytes of dynamic shared memory its launch asked for";
      else
        text << why;
      fail_device(device, ok ? cudaErrorIllegalAddress : cudaErrorLaunchFailure, text.str());
      return;
    }
  }
}

}  // namespace ted_emu
