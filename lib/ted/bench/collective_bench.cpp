#include "ted/bench/collective_bench.hpp"

#include <chrono>
#include <string>

#include "ted/bench/collective_cases.hpp"
#include "ted/bench/collective_plugin.hpp"
#include "ted/comm/mpi_communicator.hpp"
#include "ted/core/error.hpp"
#include "ted/core/git_revision.hpp"
#include "ted/core/system.hpp"
#include "ted/core/units.hpp"

namespace ted::bench {

std::vector<std::size_t> size_sweep(std::size_t min_bytes, std::size_t max_bytes, int factor) {
  if (min_bytes == 0) throw ConfigError("-b/--minbytes must be at least 1 byte");
  if (min_bytes > max_bytes)
    throw ConfigError("size range: -b " + format_bytes(min_bytes) + " is larger than -e " +
                      format_bytes(max_bytes));
  if (factor < 2)
    throw ConfigError("-f/--stepfactor must be at least 2, got " + std::to_string(factor));
  std::vector<std::size_t> sizes;
  for (std::size_t bytes = min_bytes; bytes <= max_bytes;
       bytes *= static_cast<std::size_t>(factor)) {
    sizes.push_back(bytes);
    if (bytes > max_bytes / static_cast<std::size_t>(factor)) break;
  }
  return sizes;
}

void validate(const CollectiveBenchOptions& options, int group_size) {
  size_sweep(options.min_bytes, options.max_bytes, options.step_factor);
  if (options.warmup_iters < 0) throw ConfigError("-w/--warmup_iters must be 0 or more");
  if (options.iters < 0) throw ConfigError("-n/--iters must be 0 or more");
  if (options.back_to_back && options.compare_mpi)
    throw ConfigError(
        "--back-to-back with --compare-mpi: the two paths take turns call by call, so neither "
        "runs back to back; choose one");
  const CollectivePlugin& plugin = collective_plugin(options.op);
  if (!plugin.moves_data)
    throw ConfigError("--op " + std::string(to_string(options.op)) +
                      " moves no data; choose a collective that does");
  if (plugin.has_root && (options.root < 0 || options.root >= group_size))
    throw ConfigError("--root " + std::to_string(options.root) + " is not a rank of the " +
                      std::string(to_string(options.group)) + " group (size " +
                      std::to_string(group_size) + ")");
}

std::uint64_t peak_bytes(const CollectiveBenchOptions& options, int group_size,
                         bool device_is_host) {
  const auto sizes = size_sweep(options.min_bytes, options.max_bytes, options.step_factor);
  const CollectiveCase c =
      plan_case(options.op, options.dtype, sizes.back(), group_size, 0, options.root);
  const std::uint64_t pair =
      static_cast<std::uint64_t>(c.send_elements + c.recv_elements) * dtype_size(c.dtype);
  // device pair + host pair (+ plain MPI's pair); a GPU's pair is not host memory
  return pair * ((device_is_host ? 2 : 1) + (options.compare_mpi ? 1 : 0));
}

namespace {

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double microseconds_of(double seconds) {
  return seconds * 1e6;
}

// Slowest rank's time of every iteration, as microseconds.
std::vector<double> slowest(Communicator& control, std::vector<double> seconds) {
  control.all_reduce(seconds.data(), seconds.data(), seconds.size(), DataType::f64, ReduceOp::max);
  for (double& s : seconds) s = microseconds_of(s);
  return seconds;
}

}  // namespace

std::vector<CollectiveBenchRow> run_collective_bench(const CollectiveBenchOptions& options,
                                                     Communicator& control, Communicator& group,
                                                     Device& device, RowCallback on_row,
                                                     void* user) {
  validate(options, group.size());
  TED_CHECK(control.backend() == CommBackend::mpi, "the control communicator must be MPI");
  MPI_Comm raw_comm = MPI_COMM_NULL;
  if (options.compare_mpi) {
    auto* mpi_group = dynamic_cast<MpiCommunicator*>(&group);
    if (!mpi_group) throw ConfigError("--compare-mpi needs the mpi backend");
    raw_comm = mpi_group->native_handle();
  }

  std::vector<CollectiveBenchRow> rows;
  for (std::size_t requested :
       size_sweep(options.min_bytes, options.max_bytes, options.step_factor)) {
    CollectiveCase c =
        plan_case(options.op, options.dtype, requested, group.size(), group.rank(), options.root);
    const bool in_place = collective_plugin(c.op).in_place;
    std::size_t width = dtype_size(c.dtype);
    std::vector<std::byte> host_send(c.send_elements * width), host_recv(c.recv_elements * width);
    fill_send(c, host_send.data());
    DeviceBuffer send(device, host_send.size()), recv(device, host_recv.size());
    device.copy_from_host(send.data(), host_send.data(), host_send.size());

    // Plain MPI works on host memory: its own copies, so both paths see the same data.
    std::vector<std::byte> raw_send, raw_recv;
    if (options.compare_mpi) {
      raw_send = host_send;
      raw_recv.resize(host_recv.size());
    }

    if (group.ledger()) group.ledger()->clear();
    int total = options.warmup_iters + options.iters;
    std::vector<double> ours, reference;
    auto time_ours = [&] {
      control.barrier();
      double start = now_seconds();
      run_case(c, group, send.data(), recv.data());
      group.synchronize();
      return now_seconds() - start;
    };
    auto time_reference = [&] {
      control.barrier();
      double start = now_seconds();
      run_case_raw_mpi(c, raw_comm, raw_send.data(), raw_recv.data());
      return now_seconds() - start;
    };
    if (options.back_to_back) {
      // One barrier, then every call right after the previous one's completion on this rank.
      control.barrier();
      double previous = now_seconds();
      for (int iteration = 0; iteration < total; ++iteration) {
        run_case(c, group, send.data(), recv.data());
        group.synchronize();
        const double done = now_seconds();
        if (iteration >= options.warmup_iters) ours.push_back(done - previous);
        previous = done;
      }
    }
    for (int iteration = 0; iteration < total && !options.back_to_back; ++iteration) {
      // With a reference, the two paths take turns going first, so neither gains from order.
      double ours_seconds = 0, reference_seconds = 0;
      if (options.compare_mpi && iteration % 2 == 1) {
        reference_seconds = time_reference();
        ours_seconds = time_ours();
      } else {
        ours_seconds = time_ours();
        if (options.compare_mpi) reference_seconds = time_reference();
      }
      if (iteration >= options.warmup_iters) {
        ours.push_back(ours_seconds);
        reference.push_back(reference_seconds);
      }
    }

    CollectiveBenchRow row;
    row.bytes = c.bytes;
    row.elements = c.elements;
    if (group.ledger() && group.ledger()->total(options.op).calls > 0) {
      const LedgerTotal& t = group.ledger()->total(options.op);
      row.ledger_bytes_sent = t.bytes_sent / t.calls;
      row.ledger_bytes_recv = t.bytes_recv / t.calls;
    }

    // The checked run: fresh sentinels in the receive buffer (in place: the send buffer afresh,
    // sentinels on the ranks that receive), so stale results cannot pass.
    if (in_place) {
      device.copy_from_host(send.data(), host_send.data(), host_send.size());
    } else {
      device.fill(recv.data(), c.recv_elements, c.dtype, sentinel(c.dtype));
    }
    run_case(c, group, send.data(), recv.data());
    group.synchronize();
    if (in_place) {
      device.copy_to_host(host_send.data(), send.data(), host_send.size());
      row.wrong = count_wrong(c, host_send.data());
    } else {
      device.copy_to_host(host_recv.data(), recv.data(), host_recv.size());
      row.wrong = count_wrong(c, host_recv.data());
    }
    control.all_reduce(&row.wrong, &row.wrong, 1, DataType::i64);

    row.time_us = summarize(slowest(control, ours));
    double median_seconds = row.time_us.median * 1e-6;
    if (median_seconds > 0) {
      row.algbw_gbs = static_cast<double>(c.bytes) / median_seconds / 1e9;
      row.busbw_gbs = row.algbw_gbs * bus_factor(c.op, c.group_size);
    }
    if (options.compare_mpi) {
      row.reference_time_us = summarize(slowest(control, reference));
      double reference_seconds = row.reference_time_us.median * 1e-6;
      if (reference_seconds > 0)
        row.reference_busbw_gbs =
            static_cast<double>(c.bytes) / reference_seconds / 1e9 * bus_factor(c.op, c.group_size);
    }
    if (on_row && control.rank() == 0) on_row(row, user);
    rows.push_back(row);
  }
  return rows;
}

CsvTable collective_bench_table() {
  return CsvTable({"op",
                   "group",
                   "group_size",
                   "backend",
                   "dtype",
                   "G",
                   "T",
                   "Ep",
                   "D",
                   "bytes",
                   "count",
                   "warmup_iters",
                   "iters",
                   "time_us_median",
                   "time_us_p10",
                   "time_us_p90",
                   "algbw_GBps",
                   "busbw_GBps",
                   "wrong",
                   "mpi_time_us_median",
                   "mpi_busbw_GBps",
                   "busbw_ratio_vs_mpi",
                   "ledger_bytes_sent",
                   "ledger_bytes_recv",
                   "git_revision",
                   "command",
                   "slurm_job"});
}

void add_row(CsvTable& table, const CollectiveBenchOptions& options,
             const CollectiveBenchContext& context, const CollectiveBenchRow& row) {
  table.row()
      .add(to_string(options.op))
      .add(to_string(options.group))
      .add(context.group_size)
      .add(context.backend)
      .add(to_string(options.dtype))
      .add(context.world_size)
      .add(context.layout.tensor)
      .add(context.layout.expert)
      .add(context.layout.data)
      .add(static_cast<unsigned long long>(row.bytes))
      .add(static_cast<unsigned long long>(row.elements))
      .add(options.warmup_iters)
      .add(options.iters)
      .add(row.time_us.median)
      .add(row.time_us.p10)
      .add(row.time_us.p90)
      .add(row.algbw_gbs)
      .add(row.busbw_gbs)
      .add(static_cast<unsigned long long>(row.wrong));
  if (options.compare_mpi) {
    double ratio = row.reference_busbw_gbs > 0 ? row.busbw_gbs / row.reference_busbw_gbs : 0.0;
    table.add(row.reference_time_us.median).add(row.reference_busbw_gbs).add(ratio);
  } else {
    table.add("").add("").add("");
  }
  table.add(static_cast<unsigned long long>(row.ledger_bytes_sent))
      .add(static_cast<unsigned long long>(row.ledger_bytes_recv))
      .add(git_revision())
      .add(context.command_line)
      .add(slurm_job());
}

}  // namespace ted::bench
