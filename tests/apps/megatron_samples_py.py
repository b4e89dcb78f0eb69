"""The DeepSpeed runner's Megatron data source (baselines/deepspeed/gpt_moe.py MegatronSource,
make_source, make_validation_source) against the sample spec of lib/ted/train/megatron_data.hpp.
  megatron_samples_py.py selftest
      Writes small datasets with Megatron-Core's IndexedDatasetBuilder (uint16 and int32; documents
      of one or several sequences, some empty, an empty document) into a temporary folder and
      holds the runner's samples to the spec derived here on its own from Megatron's reader, one
      sequence at a time: training windows over several epochs in their shuffled order, the
      validation split by data.valid_fraction (a fraction whose documents end in .5 too) and by
      data.valid_path, and the one-line refusals. Prints "ok ..." lines; exit 1 on a difference.
  megatron_samples_py.py print <config.yaml> <count> [section.key=value ...]
      The first <count> training and validation samples of the config, in the lines our C++
      prints (tests/apps/print_samples.cpp): "# train: ...", "# validation: ..." (or "none"),
      then "train <index> <seq_len ids> : <seq_len target ids>", "valid <index> ...". The lines
      without "#" are to equal print_samples' for the same config and keys.
  megatron_samples_py.py print-cases <config.yaml> <count> <cases file>
      The same for every line "<output file> [section.key=value ...]" of the cases file, each
      into its output file, in one process.
Run with the DeepSpeed environment's Python (baselines/deepspeed/setup.sh: megatron-core).
"""
import contextlib
import sys
import tempfile
from pathlib import Path

import numpy

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "baselines/deepspeed"))
import counter_random  # noqa: E402

with contextlib.redirect_stdout(sys.stderr):  # DeepSpeed's accelerator note off the samples
    import gpt_moe  # noqa: E402

# Megatron-Core's reader and writer.
indexed_dataset = gpt_moe.megatron_core_indexed_dataset()
IndexedDataset, IndexedDatasetBuilder = indexed_dataset.IndexedDataset, \
    indexed_dataset.IndexedDatasetBuilder

# The datasets the C++ reader's test writes (documents of several sequences, empty ones, both of
# the builder's ways), written the same way here.
sys.path.insert(0, str(Path(__file__).resolve().parent))
from megatron_data_check import build  # noqa: E402

failures = 0


def report(ok, text):
    global failures
    failures += not ok
    print(f"{'ok  ' if ok else 'FAIL'}  {text}", flush=True)


def stream(prefix, first, end):
    """Documents [first, end)'s tokens, sequence by sequence from Megatron's reader."""
    dataset = IndexedDataset(prefix)
    indices = dataset.document_indices
    parts = [numpy.asarray(dataset[s], dtype=numpy.int64)
             for s in range(int(indices[first]), int(indices[end]))]
    return numpy.concatenate(parts) if parts else numpy.zeros(0, numpy.int64)


def permutation(windows, seed, epoch):
    """The spec's shuffle, one scalar hash at a time."""
    order = list(range(windows))
    for m in range(windows - 1, 0, -1):
        r = counter_random.hash_key(seed, counter_random.SHUFFLE, epoch, m) % (m + 1)
        order[m], order[r] = order[r], order[m]
    return order


def config(path, vocab, seq_len, seed, fraction=0.0, valid_path=""):
    return {"model": {"vocab": vocab, "seq_len": seq_len}, "training": {"seed": seed},
            "data": {"source": "megatron", "path": path, "valid_fraction": fraction,
                     "valid_path": valid_path}}


def documents_of(prefix):
    return len(IndexedDataset(prefix).document_indices) - 1


def compare(name, cfg, expected_valid_documents=None, samples=None):
    """The runner's samples of `cfg` against the spec's, past two epochs of training."""
    d, seq_len, seed = cfg["data"], cfg["model"]["seq_len"], cfg["training"]["seed"]
    documents = documents_of(d["path"])
    if d["valid_path"]:
        train, valid = stream(d["path"], 0, documents), \
            stream(d["valid_path"], 0, documents_of(d["valid_path"]))
    else:
        n_valid = expected_valid_documents or 0
        train = stream(d["path"], 0, documents - n_valid)
        valid = stream(d["path"], documents - n_valid, documents) if n_valid else None
    source, validation = gpt_moe.make_source(cfg), gpt_moe.make_validation_source(cfg)
    windows = (len(train) - 1) // seq_len
    count = samples or 2 * windows + 3
    ok = source.windows == windows and (validation is None) == (valid is None)
    order, order_epoch, wrong = None, None, []
    for i in range(count):
        epoch, k = divmod(i, windows)
        if epoch != order_epoch:
            order, order_epoch = permutation(windows, seed, epoch), epoch
        start = order[k] * seq_len
        expected = train[start:start + seq_len + 1].tolist()
        if source.sample(i, seq_len) != (expected[:-1], expected[1:]):
            wrong.append(i)
    valid_windows = 0
    if valid is not None:
        valid_windows = (len(valid) - 1) // seq_len
        ok = ok and validation.windows == valid_windows
        for v in range(2 * valid_windows + 1):
            start = v % valid_windows * seq_len
            expected = valid[start:start + seq_len + 1].tolist()
            if validation.sample(v, seq_len) != (expected[:-1], expected[1:]):
                wrong.append(f"valid {v}")
    report(ok and not wrong, f"{name}: {count} training samples over {count // windows + 1} "
           f"epochs of {windows} windows, validation "
           + (f"{validation.documents} documents, {valid_windows} windows" if valid is not None
              else "none")
           + (f"; wrong: {wrong[:5]}" if wrong else "; as the spec"))


def refuses(name, cfg, words):
    try:
        gpt_moe.make_source(cfg)
        gpt_moe.make_validation_source(cfg)
    except ValueError as error:
        report(words in str(error), f"refuses {name}: {error}")
        return
    report(False, f"{name}: accepted")


def selftest():
    with tempfile.TemporaryDirectory() as folder:
        build(f"{folder}/u16", numpy.uint16, 5000, seed=100, documents=37)
        build(f"{folder}/i32", numpy.int32, 100000, seed=101, documents=37)
        build(f"{folder}/held", numpy.int32, 5000, seed=102, documents=9)
        build(f"{folder}/short", numpy.uint16, 50, seed=103, documents=1)
        u16, i32 = f"{folder}/u16", f"{folder}/i32"
        report(IndexedDataset(u16).index.dtype == numpy.uint16 and documents_of(u16) == 37,
               "the builder wrote 37 documents of uint16 (an empty one among them)")
        # Megatron-Core's package, not a module of the runner's folder, is what `import
        # megatron` gives there (the runner's tensor parallelism is tensor_parallel.py).
        import megatron
        report(Path(gpt_moe.__file__).parent not in Path(indexed_dataset.__file__).parents and
               "megatron" in sys.modules and megatron.__name__ == "megatron",
               "import megatron: Megatron-Core's package beside the runner's folder")
        # hash_middle, the shuffle's draws at once, is hash_key element by element.
        places = numpy.arange(1, 2000, dtype=numpy.uint64)
        draws = counter_random.hash_middle(77, counter_random.SHUFFLE, 3, places).tolist()
        report(draws == [counter_random.hash_key(77, counter_random.SHUFFLE, 3, m)
                         for m in range(1, 2000)], "hash_middle equals hash_key, 1999 places")
        report(gpt_moe.window_permutation(500, 9, 4) == permutation(500, 9, 4),
               "window_permutation: the spec's Fisher-Yates")
        compare("uint16, seq_len 16, seed 1234", config(u16, 5000, 16, 1234))
        compare("int32, seq_len 7, seed 5", config(i32, 100000, 7, 5))
        compare("uint16, seq_len 16, seed 77, valid_fraction 0.1 (3.7: the last 4)",
                config(u16, 5000, 16, 77, 0.1), expected_valid_documents=4)
        compare("uint16, valid_fraction 0.01 (0.37: at least 1)", config(u16, 5000, 16, 1, 0.01),
                expected_valid_documents=1)
        compare("uint16, valid_path (all of another dataset)",
                config(u16, 5000, 16, 1234, valid_path=f"{folder}/held"))
        # 0.5 x 37 = 18.5 and 0.25 x 10 = 2.5: halves to the even neighbour (Python's round,
        # Megatron's split, C++'s std::nearbyint).
        compare("uint16, valid_fraction 0.5 (18.5: the last 18)", config(u16, 5000, 16, 3, 0.5),
                expected_valid_documents=18)
        report([gpt_moe.validation_documents(f, n) for f, n in
                ((0.25, 10), (0.5, 37), (0.05, 1189), (0.1, 5), (0.0, 10), (0.5, 1))] ==
               [2, 18, 59, 1, 0, 1], "validation_documents: round(f x documents), half to even, at "
               "least 1, 0 without a fraction")
        refuses("too few tokens", config(f"{folder}/short", 50, 4096, 1), "fewer than "
                "model.seq_len + 1 = 4097")
        refuses("an id beyond the vocabulary", config(u16, 4000, 16, 1), "not in [0, model.vocab "
                "4000)")
        refuses("a fraction that leaves no training document", config(f"{folder}/held", 5000, 4,
                1, 0.99), "leaves no document for training")
        refuses("a missing dataset", config(f"{folder}/none", 5000, 16, 1), "is not the prefix")
    if failures:
        print(f"{failures} check(s) failed")
    return 1 if failures else 0


def print_samples(path, count, overrides):
    import ted_config
    cfg = ted_config.load(path, overrides)
    seq_len = cfg["model"]["seq_len"]
    source, validation = gpt_moe.make_source(cfg), gpt_moe.make_validation_source(cfg)
    describe = getattr(source, "describe", lambda: type(source).__name__)
    print(f"# train: {describe()}")
    print(f"# validation: {validation.describe() if validation else 'none'}")
    for split, chosen in (("train", source), ("valid", validation)):
        for i in range(count if chosen else 0):
            tokens, targets = chosen.sample(i, seq_len)
            print(f"{split} {i} {' '.join(map(str, tokens))} : {' '.join(map(str, targets))}")
    return 0


def print_cases(path, count, cases):
    """print_samples for each line "<output file> key=value ..." of the file `cases`, into that
    output file: many cases in one process (the imports of torch and Megatron-Core take seconds)."""
    for line in open(cases):
        words = line.split()
        if not words:
            continue
        with open(words[0], "w") as out, contextlib.redirect_stdout(out):
            print_samples(path, count, words[1:])
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["selftest"]:
        sys.exit(selftest())
    if sys.argv[1:2] == ["print"] and len(sys.argv) >= 4:
        sys.exit(print_samples(sys.argv[2], int(sys.argv[3]), sys.argv[4:]))
    if sys.argv[1:2] == ["print-cases"] and len(sys.argv) == 5:
        sys.exit(print_cases(sys.argv[2], int(sys.argv[3]), sys.argv[4]))
    sys.exit(__doc__)
