#!/usr/bin/env bash
# Makes the suite's real training corpus: the King James Bible (Debian's bible-kjv-text, public
# domain) as Megatron-Core's indexed dataset, one chapter a document, tokenized by a byte-level
# BPE trained on it (scripts/data/prepare_corpus.py says how). Installs bible-kjv-text when
# missing (root or sudo) and sets up the DeepSpeed environment (megatron-core, tokenizers) as
# baselines/deepspeed/setup.sh does; nothing else is downloaded. About 15 s once the environment
# exists; a second run with the data up to date does nothing and says so.
#   scripts/data/prepare_corpus.sh                # into results/local/data/kjv (ignored by git)
#   scripts/data/prepare_corpus.sh --out DIR --vocab 8192 [--force]
# Then data.source: megatron, data.path: results/local/data/kjv/kjv_text_document, model.vocab
# at least the summary's vocab (results/local/data/kjv/summary.json).
# Environment: TED_DATA_PYTHON, a Python with megatron-core and tokenizers to use instead of
# the DeepSpeed environment's. Exit: 0 made or up to date; 2 bad input or a failed step; 3 the
# package registry cannot be reached (setup.sh's).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source "$here/../common.sh"

if ! dpkg-query -W -f='${Status}' bible-kjv-text 2>/dev/null | grep -q "install ok installed"; then
  TED_PACKAGES=(bible-kjv-text)
  ted_install_missing || {
    echo "prepare_corpus: bible-kjv-text could not be installed" >&2
    exit 2
  }
fi
python=${TED_DATA_PYTHON:-}
if [ -z "$python" ]; then
  venv=$("$TED_ROOT/baselines/deepspeed/setup.sh" | tail -1)
  python=$venv/bin/python
fi
exec "$python" "$here/prepare_corpus.py" "$@"
