"""Megatron-Core's side of tests/apps/megatron_data.sh: datasets written by its own
IndexedDatasetBuilder, read back by its own IndexedDataset, and the samples our C++ prints
(tests/apps/print_samples.cpp) held to the ones the spec of lib/ted/train/megatron_data.hpp
derives from Megatron's reader, sample for sample.
  megatron_data_check.py write <dir>    the datasets (every integer dtype, a held-out one) in
                                        <dir>/data, and the bad pairs for ted_train to refuse
                                        in <dir>/bad, one per case
  megatron_data_check.py check <dir>    every case of <dir>/cases.txt, a line each: <name>
                                        <print_samples output> <seq_len> <seed> <valid_fraction>
                                        [<valid name>] (names of <dir>/data)
Run with the DeepSpeed environment's Python (baselines/deepspeed/setup.sh), which has
megatron-core (importing it takes seconds: one process does every case). The shuffle's hash is
counter_random.py's port of lib/ted/core/random.hpp.
"""
import os
import shutil
import struct
import sys
from pathlib import Path

import numpy
import torch
from megatron.core.datasets.indexed_dataset import DType, IndexedDataset, IndexedDatasetBuilder

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "baselines/deepspeed"))
from counter_random import hash_key  # noqa: E402

SHUFFLE = 7  # random.hpp kShuffle: data order, (epoch, position)
# name -> (dtype, the ids drawn below this; the vocabulary the test sets is this)
DATASETS = {
    "corpus_uint16": (numpy.uint16, 5000),
    "corpus_int32": (numpy.int32, 100000),  # ids beyond uint16
    "corpus_uint8": (numpy.uint8, 256),
    "corpus_int8": (numpy.int8, 128),
    "corpus_int16": (numpy.int16, 30000),
    "corpus_int64": (numpy.int64, 100000),
    "held_out": (numpy.int32, 5000),
}


def build(prefix, dtype, vocab, seed, documents=37):
    """Documents of varied shapes through both of the builder's ways: items then end_document
    (several sequences, some empty), whole documents (add_document), an empty document."""
    rng = numpy.random.default_rng(seed)
    builder = IndexedDatasetBuilder(f"{prefix}.bin", dtype=dtype)
    for d in range(documents):
        lengths = [int(n) for n in rng.integers(0, 45, size=int(rng.integers(1, 4)))]
        if d == 5:
            lengths = []  # an empty document
        ids = [torch.tensor(rng.integers(0, vocab, size=n), dtype=torch.int64) for n in lengths]
        if d % 3 == 0 and lengths:
            builder.add_document(torch.cat(ids), lengths)
        else:
            for item in ids:
                builder.add_item(item)
            builder.end_document()
    builder.finalize(f"{prefix}.idx")


def check_format(prefix):
    """The .idx laid out as megatron_data.hpp reads it, byte for byte, against Megatron's reader."""
    raw = Path(f"{prefix}.idx").read_bytes()
    assert raw[:9] == b"MMIDIDX\x00\x00", raw[:9]
    version, code, sequences, document_indices = struct.unpack("<QBQQ", raw[9:34])
    dataset = IndexedDataset(prefix)
    assert version == 1 and DType.dtype_from_code(code) == dataset.index.dtype
    lengths = numpy.frombuffer(raw, numpy.int32, sequences, 34)
    pointers = numpy.frombuffer(raw, numpy.int64, sequences, 34 + 4 * sequences)
    documents = numpy.frombuffer(raw, numpy.int64, document_indices, 34 + 12 * sequences)
    assert len(raw) == 34 + 12 * sequences + 8 * document_indices
    assert (lengths == dataset.sequence_lengths).all()
    assert (pointers == dataset.index.sequence_pointers).all()
    assert (documents == dataset.document_indices).all()
    width = DType.size(code)
    assert (pointers == numpy.concatenate([[0], numpy.cumsum(lengths)[:-1]]) * width).all()
    assert os.path.getsize(f"{prefix}.bin") == int(lengths.sum()) * width
    return dataset


def write(folder):
    os.makedirs(folder, exist_ok=True)
    for i, (name, (dtype, vocab)) in enumerate(DATASETS.items()):
        build(f"{folder}/{name}", dtype, vocab, seed=100 + i, documents=9 if name == "held_out"
              else 37)
        dataset = check_format(f"{folder}/{name}")
        print(f"wrote {name}: {dataset.index.dtype.__name__}, {len(dataset.document_indices) - 1} "
              f"documents, {len(dataset)} sequences, {int(dataset.sequence_lengths.sum())} tokens")


def corrupt(folder):
    """One bad pair per case, from a good uint16 dataset (or Megatron writing the bad thing)."""
    os.makedirs(folder, exist_ok=True)
    base = f"{folder}/base"
    build(base, numpy.uint16, 5000, seed=7, documents=12)

    def copy(name, bin_file=True):
        shutil.copy(f"{base}.idx", f"{folder}/{name}.idx")
        if bin_file:
            shutil.copy(f"{base}.bin", f"{folder}/{name}.bin")
        return f"{folder}/{name}"

    def patch(path, offset, data):
        with open(path, "r+b") as f:
            f.seek(offset)
            f.write(data)

    patch(copy("bad_magic") + ".idx", 0, b"X")
    patch(copy("bad_version") + ".idx", 9, struct.pack("<Q", 2))
    truncated = copy("truncated_idx") + ".idx"
    os.truncate(truncated, os.path.getsize(truncated) - 8)
    truncated = copy("truncated_bin") + ".bin"
    os.truncate(truncated, os.path.getsize(truncated) - 2)
    copy("missing_bin", bin_file=False)
    build(f"{folder}/float", numpy.float32, 5000, seed=7, documents=12)  # Megatron writes float32
    builder = IndexedDatasetBuilder(f"{folder}/big_id.bin", dtype=numpy.uint16)
    builder.add_item(torch.tensor(list(range(40)) + [5000] + list(range(10))))
    builder.end_document()
    builder.finalize(f"{folder}/big_id.idx")


def window_permutation(windows, seed, epoch):
    order = list(range(windows))
    for m in range(windows - 1, 0, -1):
        r = hash_key(seed, SHUFFLE, epoch, m) % (m + 1)
        order[m], order[r] = order[r], order[m]
    return order


def stream(dataset, first, end):
    """Documents [first, end)'s tokens in file order, from Megatron's reader."""
    indices = dataset.document_indices
    parts = [numpy.asarray(dataset[s], dtype=numpy.int64)
             for s in range(int(indices[first]), int(indices[end]))]
    return numpy.concatenate(parts) if parts else numpy.zeros(0, numpy.int64)


def check(folder, name, output, seq_len, seed, valid_fraction, valid_name=None):
    dataset = IndexedDataset(f"{folder}/{name}")
    documents = len(dataset.document_indices) - 1
    if valid_name:
        valid_dataset = IndexedDataset(f"{folder}/{valid_name}")
        train = stream(dataset, 0, documents)
        valid = stream(valid_dataset, 0, len(valid_dataset.document_indices) - 1)
    else:
        n_valid = max(1, round(valid_fraction * documents)) if valid_fraction > 0 else 0
        train = stream(dataset, 0, documents - n_valid)
        valid = stream(dataset, documents - n_valid, documents) if n_valid else None
    train_windows = (len(train) - 1) // seq_len
    valid_windows = (len(valid) - 1) // seq_len if valid is not None else 0
    lines = Path(output).read_text().splitlines()
    header = [line for line in lines if line.startswith("#")]
    assert f"{train_windows} windows of {seq_len}+1" in header[0], (header[0], train_windows)
    if valid is None:
        assert header[1] == "# validation: none", header[1]
    else:
        assert f"{valid_windows} windows of {seq_len}+1" in header[1], (header[1], valid_windows)
    samples = {"train": 0, "valid": 0}
    epochs = set()
    order, order_epoch = None, None
    for line in lines:
        if line.startswith("#"):
            continue
        words = line.split()
        split, index = words[0], int(words[1])
        colon = words.index(":")
        tokens = [int(w) for w in words[2:colon]]
        targets = [int(w) for w in words[colon + 1:]]
        if split == "train":
            epoch, k = divmod(index, train_windows)
            if epoch != order_epoch:
                order, order_epoch = window_permutation(train_windows, seed, epoch), epoch
            window, source = order[k], train
            epochs.add(epoch)
        else:
            window, source = index % valid_windows, valid
        start = window * seq_len
        expected = source[start:start + seq_len + 1].tolist()
        assert tokens == expected[:-1] and targets == expected[1:], (
            f"{name}: {split} sample {index} (window {window}): ours {tokens} : {targets}, "
            f"Megatron's reader {expected}")
        samples[split] += 1
    assert samples["train"] > 0 and (valid is None or samples["valid"] > 0), samples
    print(f"ok    {name} ({dataset.index.dtype.__name__}, seq_len {seq_len}, seed {seed}, "
          + (f"valid_path {valid_name}" if valid_name else f"valid_fraction {valid_fraction}")
          + f"): {samples['train']} training samples over epochs {sorted(epochs)} of "
          f"{train_windows} windows, {samples['valid']} validation samples of {valid_windows} "
          "windows, equal to Megatron's reader")


if __name__ == "__main__":
    command, folder = sys.argv[1:3]
    if command == "write":
        write(f"{folder}/data")
        corrupt(f"{folder}/bad")
    elif command == "check":
        for line in Path(f"{folder}/cases.txt").read_text().splitlines():
            name, output, seq_len, seed, fraction, *valid = line.split()
            check(f"{folder}/data", name, output, int(seq_len), int(seed), float(fraction), *valid)
    else:
        sys.exit(f"unknown command {command}")
