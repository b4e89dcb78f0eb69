// The emulated GPU's CUB radix sort: SortPairs and SortPairsDescending with CUB's protocol for
// temporary storage (a first call with no storage asks for its size; the sort then works in the
// storage it is given, so storage that is too small or shared with live data shows). Stable, as
// CUB's is. Keys are unsigned integers (what the suite sorts); bits [begin_bit, end_bit) count.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <type_traits>
#include <vector>

#include "ted_emu/work.hpp"

namespace cub {

struct DeviceRadixSort {
  template <typename KeyT, typename ValueT, typename NumItemsT>
  static cudaError_t SortPairs(void* d_temp_storage, std::size_t& temp_storage_bytes,
                               const KeyT* d_keys_in, KeyT* d_keys_out, const ValueT* d_values_in,
                               ValueT* d_values_out, NumItemsT num_items, int begin_bit = 0,
                               int end_bit = sizeof(KeyT) * 8, cudaStream_t stream = nullptr) {
    return sort_pairs(false, d_temp_storage, temp_storage_bytes, d_keys_in, d_keys_out, d_values_in,
                      d_values_out, static_cast<std::size_t>(num_items), begin_bit, end_bit,
                      stream);
  }
  template <typename KeyT, typename ValueT, typename NumItemsT>
  static cudaError_t SortPairsDescending(void* d_temp_storage, std::size_t& temp_storage_bytes,
                                         const KeyT* d_keys_in, KeyT* d_keys_out,
                                         const ValueT* d_values_in, ValueT* d_values_out,
                                         NumItemsT num_items, int begin_bit = 0,
                                         int end_bit = sizeof(KeyT) * 8,
                                         cudaStream_t stream = nullptr) {
    return sort_pairs(true, d_temp_storage, temp_storage_bytes, d_keys_in, d_keys_out, d_values_in,
                      d_values_out, static_cast<std::size_t>(num_items), begin_bit, end_bit,
                      stream);
  }

 private:
  template <typename KeyT, typename ValueT>
  static cudaError_t sort_pairs(bool descending, void* temp, std::size_t& temp_bytes,
                                const KeyT* keys_in, KeyT* keys_out, const ValueT* values_in,
                                ValueT* values_out, std::size_t n, int begin_bit, int end_bit,
                                cudaStream_t stream) {
    static_assert(std::is_integral_v<KeyT> && std::is_unsigned_v<KeyT>,
                  "the emulated radix sort takes unsigned integer keys");
    static_assert(std::is_trivially_copyable_v<ValueT>, "values are copied as bytes");
    const std::size_t required = n * (sizeof(KeyT) + sizeof(ValueT)) + 256;
    if (!temp) {
      temp_bytes = required;
      return cudaSuccess;
    }
    using ted_emu::detail::is_device_range;
    using ted_emu::detail::reject;
    if (temp_bytes < required)
      return reject(cudaErrorInvalidValue, "CUB: temporary storage too small");
    if (begin_bit < 0 || end_bit > static_cast<int>(sizeof(KeyT) * 8) || begin_bit >= end_bit)
      return reject(cudaErrorInvalidValue, "CUB: bit range outside the key");
    if (!n) return cudaSuccess;
    if (!is_device_range(temp, required) || !is_device_range(keys_in, n * sizeof(KeyT)) ||
        !is_device_range(keys_out, n * sizeof(KeyT)) ||
        !is_device_range(values_in, n * sizeof(ValueT)) ||
        !is_device_range(values_out, n * sizeof(ValueT)))
      return reject(cudaErrorInvalidValue, "CUB: a buffer is not inside a device allocation");
    return ted_emu::detail::enqueue(stream, [=] {
      // Work in the caller's storage: keys, then values.
      auto* keys = static_cast<KeyT*>(temp);
      auto* values = reinterpret_cast<ValueT*>(static_cast<char*>(temp) + n * sizeof(KeyT));
      std::memcpy(keys, keys_in, n * sizeof(KeyT));
      std::memcpy(values, values_in, n * sizeof(ValueT));
      const KeyT mask = static_cast<KeyT>((end_bit - begin_bit >= static_cast<int>(sizeof(KeyT) * 8)
                                               ? ~KeyT(0)
                                               : ((KeyT(1) << (end_bit - begin_bit)) - 1))
                                          << begin_bit);
      std::vector<std::size_t> order(n);
      std::iota(order.begin(), order.end(), std::size_t{0});
      std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
        const KeyT ka = keys[a] & mask, kb = keys[b] & mask;
        return descending ? kb < ka : ka < kb;
      });
      for (std::size_t i = 0; i < n; ++i) {
        keys_out[i] = keys[order[i]];
        values_out[i] = values[order[i]];
      }
    });
  }
};

}  // namespace cub
