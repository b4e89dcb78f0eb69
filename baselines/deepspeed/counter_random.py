"""The suite's counter-based random numbers (lib/ted/core/random.hpp), ported bit for bit: every
draw is a pure function of its key (seed, stream, a, b, c), splitmix64's finaliser chained over
the key in uint64 arithmetic, so the DeepSpeed baseline draws what our C++ draws (the synthetic
data, the forced routing workloads, the order of a Megatron dataset's windows). Scalars as
Python ints; `hash_last` and `uniform_array` take a numpy array of the key's last word, for the
many tokens of a workload, `hash_middle` one of its b word, for the places of a shuffle.
"""
import numpy as np

MASK = (1 << 64) - 1
DATA = 4      # random.hpp kData: synthetic data, (sample, position)
WORKLOAD = 5  # random.hpp kWorkload: forced workloads, (step, layer, global token * top_k + choice)
SHUFFLE = 7   # random.hpp kShuffle: the data order, (epoch, position)


def mix64(x):
    """splitmix64's finaliser of one uint64 (a Python int below 2^64)."""
    x = (x + 0x9E3779B97F4A7C15) & MASK
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & MASK
    return x ^ (x >> 31)


def hash_key(seed, stream, a, b=0, c=0):
    h = mix64(seed ^ ((stream * 0xD1B54A32D192ED03) & MASK))
    h = mix64(h ^ (a & MASK))
    h = mix64(h ^ (b & MASK))
    return mix64(h ^ (c & MASK))


def uniform(bits):
    """Uniform in (0, 1), never 0 or 1: the top 53 bits, centred."""
    return ((bits >> 11) + 0.5) * (1.0 / 9007199254740992.0)


def _mix64_array(x):
    # numpy's uint64 arithmetic wraps modulo 2^64 as C++'s does; the constants are uint64 so
    # that no value-based promotion (numpy 1.x) turns a step into float64 or object.
    x = x + np.uint64(0x9E3779B97F4A7C15)
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def hash_last(seed, stream, a, b, c):
    """hash_key(seed, stream, a, b, c) for every element of the uint64 array `c`."""
    h = mix64(mix64(mix64(seed ^ ((stream * 0xD1B54A32D192ED03) & MASK)) ^ (a & MASK)) ^
              (b & MASK))
    return _mix64_array(np.uint64(h) ^ c.astype(np.uint64))


def hash_middle(seed, stream, a, b):
    """hash_key(seed, stream, a, b) (c = 0) for every element of the uint64 array `b`."""
    h = mix64(mix64(seed ^ ((stream * 0xD1B54A32D192ED03) & MASK)) ^ (a & MASK))
    return _mix64_array(_mix64_array(np.uint64(h) ^ b.astype(np.uint64)))  # ^ c = 0: as is


def uniform_array(bits):
    """uniform() of every element of a uint64 array (exact: the top 53 bits fit a double)."""
    return ((bits >> np.uint64(11)).astype(np.float64) + 0.5) * (1.0 / 9007199254740992.0)


INIT = 1  # random.hpp kInit: parameter initialisation, (tensor name's key, element)


def name_key(name):
    """lib/ted/model/params.cpp name_key: FNV-1a over the tensor name's bytes."""
    h = 0xCBF29CE484222325
    for byte in name.encode():
        h = ((h ^ byte) * 0x100000001B3) & MASK
    return h


def init_normal(seed, name, count, std):
    """Our initial values of a whole tensor of `count` elements named `name` (params.cpp
    allocate, cpu_ops.cpp init_normal): element i is std x random.hpp normal(seed, kInit,
    name_key(name), i), Box-Muller on two hashes of the key, in doubles, rounded to float32."""
    index = np.arange(count, dtype=np.uint64)
    h = mix64(mix64(seed ^ ((INIT * 0xD1B54A32D192ED03) & MASK)) ^ name_key(name))
    keyed = _mix64_array(np.uint64(h) ^ index)
    u1 = uniform_array(_mix64_array(keyed ^ np.uint64(0)))
    u2 = uniform_array(_mix64_array(keyed ^ np.uint64(1)))
    normal = np.sqrt(-2.0 * np.log(u1)) * np.cos(6.283185307179586 * u2)
    return (std * normal).astype(np.float32)
