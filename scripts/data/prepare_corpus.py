"""Turns the King James Bible of Debian's bible-kjv-text into Megatron-Core's indexed dataset,
with the ecosystem's own tools: a byte-level BPE trained by Hugging Face tokenizers, the .bin/.idx
written by Megatron-Core's IndexedDatasetBuilder, as Megatron's tools/preprocess_data.py writes
them (one document per add_document, the end-of-document token appended as --append-eod does,
the dtype DType.optimal_dtype picks for the vocabulary: uint16 below 65500).

The source, /usr/lib/bible.data, is the bible program's compressed text (format "EC02"): a
header, a big-endian table of block offsets, one Unix compress (LZW) header shared by all blocks,
then the blocks, each LZW on its own and 64 KiB of text once expanded (gzip -d reads the format).
The text is one verse a line, "Ge1:1 In the beginning God created the heaven and the earth.",
after a title line. A document is one chapter (1,189 of them, Genesis 1 first): its verses one
a line without their references, no other markup to strip (the file has none).

Writes into --out (default results/local/data/kjv, ignored by git): kjv_text_document.bin and
.idx (the prefix data.path takes), tokenizer.json, and summary.json (documents, tokens, vocab,
the unigram entropy of the token stream in nats, the inputs' and outputs' hashes). A second run
whose summary names the same inputs and finds the outputs unchanged does nothing and says so.
Reads the result back with Megatron-Core's IndexedDataset before it writes the summary.
    scripts/data/prepare_corpus.sh [--out DIR] [--vocab N] [--force]
Run by prepare_corpus.sh with the DeepSpeed environment's Python (megatron-core, tokenizers).
"""
import argparse
import hashlib
import importlib.metadata
import json
import logging
import math
import os
import re
import struct
import subprocess
import sys
import time
import warnings
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SOURCE = "/usr/lib/bible.data"
NAME = "kjv_text_document"
EOD = "<|endoftext|>"  # GPT-2's end-of-document token; the first special token: id 0
# What bible-kjv-text's text holds (its Textfile 930105): a changed package fails here.
BOOKS, CHAPTERS, VERSES = 66, 1189, 31102
VERSE = re.compile(r"([1-3]?[A-Za-z]+)(\d+):(\d+) (\S.*)")


def sha256(path):
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def read_text(path):
    """The text of the bible program's compressed data file, as bytes."""
    data = Path(path).read_bytes()
    if not data.startswith(b"EC02"):
        raise ValueError(f"{path} does not start with EC02: not the bible program's data file")
    blocks = struct.unpack(">I", data[0x58:0x5c])[0]
    table_end = 0x5c + 4 * (blocks + 1)
    offsets = struct.unpack(f">{blocks + 1}I", data[0x5c:table_end])
    header = data[table_end:offsets[0]]  # b"\x1f\x9d\x90": compress, 16-bit codes, block mode
    if not header.startswith(b"\x1f\x9d") or offsets[-1] != len(data):
        raise ValueError(f"{path}: its block table does not describe the file")
    return b"".join(subprocess.run(["gzip", "-dc"], input=header + data[a:b], check=True,
                                   capture_output=True).stdout
                    for a, b in zip(offsets, offsets[1:]))


def chapters(text):
    """[(book, chapter, [verse texts])] in the file's order; checks every line and count."""
    lines = text.decode("ascii").split("\n")
    if not lines[0].startswith("Holy Bible") or lines[-1] != "":
        raise ValueError("the text does not start with its title line or end with a newline")
    result, books = [], set()
    for number, line in enumerate(lines[1:-1], start=2):
        match = VERSE.fullmatch(line)
        if not match:
            raise ValueError(f"line {number} is not 'BookC:V text': {line[:60]!r}")
        book, chapter, verse, words = match[1], int(match[2]), int(match[3]), match[4]
        if not result or result[-1][:2] != (book, chapter):
            result.append((book, chapter, []))
            books.add(book)
        if verse != len(result[-1][2]) + 1:
            raise ValueError(f"line {number}: verse {book}{chapter}:{verse} out of order")
        result[-1][2].append(words.strip())
    found = (len(books), len(result), sum(len(c[2]) for c in result))
    if found != (BOOKS, CHAPTERS, VERSES):
        raise ValueError(f"{found[0]} books, {found[1]} chapters, {found[2]} verses; the KJV "
                         f"has {BOOKS}, {CHAPTERS}, {VERSES}")
    return result


def inputs(source, vocab):
    """What the output is a function of: the stamp summary.json keeps."""
    return {"source": source, "source_sha256": sha256(source), "vocab_request": vocab,
            "script_sha256": sha256(__file__),
            "tokenizers": importlib.metadata.version("tokenizers"),
            "megatron_core": importlib.metadata.version("megatron-core")}


def up_to_date(summary_path, stamp, out):
    """The summary's inputs are these and every output is as the summary recorded it."""
    try:
        summary = json.loads(summary_path.read_text())
    except (OSError, ValueError):
        return None
    if summary.get("inputs") != stamp:
        return None
    for name, digest in summary.get("outputs", {}).items():
        if not (out / name).is_file() or sha256(out / name) != digest:
            return None
    return summary if summary.get("outputs") else None


def unigram_entropy(counts):
    """-sum p ln p of the tokens' frequencies: the loss, in nats, of the best model that sees
    no context (each token predicted by its frequency alone)."""
    total = sum(counts)
    return -sum(c / total * math.log(c / total) for c in counts if c)


def prepare(out, vocab, source):
    import numpy
    from tokenizers import ByteLevelBPETokenizer

    start = time.perf_counter()
    units = chapters(read_text(source))
    documents = ["\n".join(verses) for _, _, verses in units]
    # Deterministic: the trainer's merges depend on the pair counts alone (ties broken by the
    # pair), so the same text gives the same tokenizer.json byte for byte.
    tokenizer = ByteLevelBPETokenizer(add_prefix_space=False)
    tokenizer.train_from_iterator(documents, vocab_size=vocab, min_frequency=2,
                                  show_progress=False, special_tokens=[EOD])
    eod = tokenizer.token_to_id(EOD)
    encoded = [e.ids + [eod] for e in tokenizer.encode_batch(documents)]  # --append-eod
    # Every document comes back from its ids exactly (byte-level BPE loses nothing).
    decoded = tokenizer.decode_batch([ids[:-1] for ids in encoded])
    if decoded != documents:
        bad = next(i for i, (a, b) in enumerate(zip(decoded, documents)) if a != b)
        raise RuntimeError(f"document {bad} does not decode to its text")
    vocab_size = tokenizer.get_vocab_size()
    tokenizer_seconds = time.perf_counter() - start

    # Megatron-Core's package imports torch and its training stack; their notes about what
    # this machine lacks (Triton, CUDA, Transformer Engine, Apex) concern none of this.
    import torch  # noqa: F401  (first: it sets up its loggers, quietened after)
    logging.getLogger("torch").setLevel(logging.ERROR)
    warnings.filterwarnings("ignore", message="Transformer Engine and Apex")
    from megatron.core.datasets.indexed_dataset import (DType, IndexedDataset,
                                                        IndexedDatasetBuilder, get_bin_path,
                                                        get_idx_path)
    prefix = str(out / NAME)
    dtype = DType.optimal_dtype(vocab_size)
    builder = IndexedDatasetBuilder(get_bin_path(prefix), dtype=dtype)
    for ids in encoded:
        builder.add_document(ids, [len(ids)])  # one sequence a document, as preprocess_data
    builder.finalize(get_idx_path(prefix))
    tokenizer.save(str(out / "tokenizer.json"))

    # Read back with Megatron-Core's reader: the documents, their sequences and every token.
    stream = numpy.concatenate([numpy.asarray(ids, dtype=numpy.int64) for ids in encoded])
    dataset = IndexedDataset(prefix)
    read = numpy.concatenate(dataset[0:len(dataset)]).astype(numpy.int64)
    if (len(dataset.document_indices) - 1 != len(encoded) or len(dataset) != len(encoded) or
            dataset.index.dtype != dtype or int(dataset.sequence_lengths.sum()) != stream.size
            or not numpy.array_equal(read, stream)):
        raise RuntimeError(f"{prefix}: Megatron-Core's IndexedDataset does not read back what "
                           "was written")
    del dataset
    counts = numpy.bincount(stream, minlength=vocab_size).tolist()
    text_bytes = sum(len(d.encode()) for d in documents)
    return {
        "corpus": "King James Version of the Bible (1611, 1769 text), Debian bible-kjv-text",
        "document": "one chapter: its verses one a line, no references; EOD appended",
        "prefix": os.path.relpath(prefix, REPO) if out.is_relative_to(REPO) else prefix,
        "documents": len(encoded), "sequences": len(encoded), "tokens": int(stream.size),
        "text_bytes": text_bytes, "bytes_per_token": round(text_bytes / stream.size, 4),
        "vocab": vocab_size, "eod_id": eod, "dtype": dtype.__name__,
        "unigram_entropy_nats": round(unigram_entropy(counts), 6),
        "ln_vocab_nats": round(math.log(vocab_size), 6),
        "seconds": round(time.perf_counter() - start, 2),
        "tokenizer_seconds": round(tokenizer_seconds, 2),
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=str(REPO / "results/local/data/kjv"),
                        help="output folder (default results/local/data/kjv)")
    parser.add_argument("--vocab", type=int, default=4096,
                        help="BPE vocabulary size, the EOD and 256 bytes included (default 4096)")
    parser.add_argument("--source", default=SOURCE, help=f"the bible data file (default {SOURCE})")
    parser.add_argument("--force", action="store_true", help="make it again even if up to date")
    args = parser.parse_args()
    if not 258 <= args.vocab <= 1 << 20:
        print(f"prepare_corpus: --vocab must be in [258, {1 << 20}], got {args.vocab}",
              file=sys.stderr)
        return 2
    if not os.path.isfile(args.source):
        print(f"prepare_corpus: {args.source}: no such file (apt-get install bible-kjv-text)",
              file=sys.stderr)
        return 2
    out = Path(args.out).resolve()
    summary_path = out / "summary.json"
    stamp = inputs(args.source, args.vocab)
    summary = None if args.force else up_to_date(summary_path, stamp, out)
    if summary:
        print(f"== {summary['prefix']}: up to date ({summary['documents']} documents, "
              f"{summary['tokens']} tokens, vocab {summary['vocab']}); nothing done")
        return 0
    out.mkdir(parents=True, exist_ok=True)
    summary_path.unlink(missing_ok=True)  # no stamp until every output is whole again
    summary = prepare(out, args.vocab, args.source)
    names = [f"{NAME}.bin", f"{NAME}.idx", "tokenizer.json"]
    summary.update(inputs=stamp, outputs={n: sha256(out / n) for n in names})
    temporary = summary_path.with_name(f".summary.json.{os.getpid()}.tmp")
    temporary.write_text(json.dumps(summary, indent=1) + "\n")
    os.replace(temporary, summary_path)
    print(f"== {summary['prefix']}.bin/.idx: {summary['documents']} documents (chapters), "
          f"{summary['tokens']} tokens ({summary['dtype']}, {summary['bytes_per_token']} bytes "
          f"of text a token), vocab {summary['vocab']} (EOD {summary['eod_id']})")
    print(f"== unigram entropy {summary['unigram_entropy_nats']:.4f} nats (ln vocab "
          f"{summary['ln_vocab_nats']:.4f}); {summary['seconds']} s")
    print(f"== {out / 'tokenizer.json'}, {summary_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
