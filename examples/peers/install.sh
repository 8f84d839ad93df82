#!/usr/bin/env bash
# Installs the peers the strads-ap examples are compared with (from PyPI).
# LIBMF (for SGDMF) is not here yet: see the note in README.md.
set -euo pipefail
python3 -m pip install --quiet gensim lda tomotopy scikit-learn scipy numpy
