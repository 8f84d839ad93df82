#!/usr/bin/env bash
# Installs the peers the strads-ap examples are compared with: the Python ones from PyPI,
# and LIBMF (for SGDMF) built from crates.io by the `libmf` crate, which compiles the C++
# library with the system's compiler (g++), into examples/peers/libmf/target/release.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
python3 -m pip install --quiet gensim lda tomotopy scikit-learn scipy numpy
cargo build --release --quiet --manifest-path "$here/libmf/Cargo.toml"
echo "peers installed; LIBMF: $here/libmf/target/release/sgdmf-libmf"
