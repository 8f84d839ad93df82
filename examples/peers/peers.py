#!/usr/bin/env python3
"""Standard peers of the strads-ap examples, run on the same data, each printing the same
one-line JSON result as the examples (`"impl"` names the peer).

    python3 examples/peers/peers.py word2vec --data ../shared/data/brown/sentences.txt --workers 2
    python3 examples/peers/peers.py lda --data ../shared/data/lda/reuters.ldac --topics 100
    python3 examples/peers/peers.py tomotopy --data ../shared/data/lda/reuters.ldac --workers 2
    python3 examples/peers/peers.py mlr --data /usr/share/datasets/fashion-mnist
    python3 examples/peers/peers.py lasso-sklearn --data /tmp/lp/default.svm
    python3 examples/peers/peers.py lasso-celer --data /tmp/lp/default.svm
    python3 examples/peers/peers.py lasso-glmnet --data /tmp/lp/default.svm

Install the peers first with `examples/peers/install.sh` (pip: gensim, lda, tomotopy,
scikit-learn, celer, python-glmnet). Hyper-parameters follow the examples' defaults so
that the figures compare at the same quality: compare `words_per_sec`/`tokens_per_sec`
only together with the quality metric printed beside it.

The Lasso peers read the problem that `lasso-serial --write-problem FILE.svm` writes (X and
y exactly as the twins see them) and solve ½‖y − Xβ‖² + λ‖β‖₁ + ½λ₂‖β‖² with each solver's
own scaling (λ/n). Each solver's tolerance is tightened tenfold from its default until the
twins' relative duality gap, computed from its coefficients, is at most `--tol-gap`; only
the last fit is timed (`secs`), and its tolerance is printed as `solver_tol`.
"""

import argparse
import gzip
import json
import math
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SHARED = os.path.normpath(os.path.join(HERE, "..", "..", "..", "shared", "data"))


def emit(**fields):
    print(json.dumps(fields), flush=True)


def read_ldac(path):
    docs = []
    with open(path) as f:
        for number, line in enumerate(f, 1):
            parts = line.split()
            if not parts:
                continue
            n = int(parts[0])
            pairs = [p.split(":") for p in parts[1:]]
            if len(pairs) != n:
                sys.exit(f"{path}:{number}: the line says {n} terms but has {len(pairs)} pairs")
            docs.append([(int(i), int(c)) for i, c in pairs])
    return docs


def word2vec(args):
    from gensim.models import Word2Vec
    from scipy.stats import spearmanr

    with open(args.data) as f:
        sentences = [line.split() for line in f if line.strip()]
    model = Word2Vec(sg=1, vector_size=args.dim, window=5, negative=5, sample=1e-3,
                     min_count=5, workers=args.workers, epochs=args.epochs, alpha=0.025,
                     seed=args.seed)
    model.build_vocab(sentences)
    # Words per second as the examples (and the C tool) count them: occurrences of
    # in-vocabulary words, over the training alone (not the vocabulary scan).
    words = sum(model.wv.get_vecattr(w, "count") for w in model.wv.index_to_key)
    start = time.time()
    model.train(sentences, total_examples=model.corpus_count, epochs=model.epochs)
    secs = time.time() - start
    pairs, gold, got = 0, [], []
    sim = os.path.join(SHARED, "word2vec-eval", "wordsim353.tsv")
    with open(sim) as f:
        for line in f:
            if line.startswith("#") or not line.strip():
                continue
            a, b, score = line.rstrip("\n").split("\t")[:3]
            a, b = a.lower(), b.lower()
            if a in model.wv and b in model.wv:
                gold.append(float(score))
                got.append(float(model.wv.similarity(a, b)))
                pairs += 1
    rho = spearmanr(gold, got).correlation if pairs > 1 else float("nan")
    emit(app="word2vec", impl="gensim", ranks=1, threads=args.workers, epochs=args.epochs,
         secs_per_epoch=secs / args.epochs, words_per_sec=words * args.epochs / secs,
         wordsim_rho=rho, wordsim_pairs=pairs)


def lda(args):
    import lda as lda_pkg
    import numpy as np

    docs = read_ldac(args.data)
    vocab = 1 + max(i for d in docs for i, _ in d)
    x = np.zeros((len(docs), vocab), dtype=np.int64)
    for r, d in enumerate(docs):
        for i, c in d:
            x[r, i] = c
    tokens = int(x.sum())
    model = lda_pkg.LDA(n_topics=args.topics, n_iter=args.epochs, alpha=0.1, eta=0.01,
                        random_state=args.seed, refresh=max(1, args.epochs))
    start = time.time()
    model.fit(x)
    secs = time.time() - start
    emit(app="lda", impl="lda-package", ranks=1, threads=1, epochs=args.epochs,
         secs_per_epoch=secs / args.epochs, tokens_per_sec=tokens * args.epochs / secs,
         loglik_per_token=model.loglikelihood() / tokens)


def tomotopy(args):
    import tomotopy as tp

    docs = read_ldac(args.data)
    model = tp.LDAModel(k=args.topics, alpha=0.1, eta=0.01, seed=args.seed)
    tokens = 0
    for d in docs:
        words = [str(i) for i, c in d for _ in range(c)]
        tokens += len(words)
        model.add_doc(words)
    start = time.time()
    model.train(args.epochs, workers=args.workers)
    secs = time.time() - start
    emit(app="lda", impl="tomotopy", ranks=1, threads=args.workers, epochs=args.epochs,
         secs_per_epoch=secs / args.epochs, tokens_per_sec=tokens * args.epochs / secs,
         loglik_per_token=model.ll_per_word)


def read_idx(path):
    import numpy as np

    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        data = f.read()
    rank = data[3]
    dims = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(rank)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * rank).reshape(dims)


def mlr(args):
    import numpy as np
    from sklearn.linear_model import LogisticRegression

    def load(prefix):
        base = os.path.join(args.data, prefix)
        img = [p for p in (base + "-images-idx3-ubyte", base + "-images-idx3-ubyte.gz") if os.path.exists(p)][0]
        lab = [p for p in (base + "-labels-idx1-ubyte", base + "-labels-idx1-ubyte.gz") if os.path.exists(p)][0]
        x = read_idx(img).reshape(-1, 784).astype(np.float32) / 255.0
        return x, read_idx(lab).astype(np.int64)

    x, y = load("train")
    xt, yt = load("t10k")
    model = LogisticRegression(max_iter=args.epochs, n_jobs=args.workers)
    start = time.time()
    model.fit(x, y)
    secs = time.time() - start
    p = np.clip(model.predict_proba(x), 1e-12, 1.0)
    loss = float(-np.mean(np.log(p[np.arange(len(y)), y])))
    emit(app="mlr", impl="scikit-learn", ranks=1, threads=args.workers, epochs=args.epochs,
         secs_per_epoch=secs / args.epochs, train_loss=loss,
         test_accuracy=float(model.score(xt, yt)))


# ---------------------------------------------------------------------------------------
# Lasso: ½‖y − Xβ‖² + λ‖β‖₁ + ½λ₂‖β‖² (no 1/n, no intercept), to a relative duality gap.

LASSO_PEERS = ("lasso-sklearn", "lasso-celer", "lasso-glmnet")


def lasso_load(path):
    """X (CSC, float64) and y of a `lasso-serial --write-problem` file (1-based indices,
    n_features as the file has them)."""
    import numpy as np
    from sklearn.datasets import load_svmlight_file

    x, y = load_svmlight_file(path, zero_based=False, dtype=np.float64)
    return x.tocsc(), np.asarray(y, dtype=np.float64)


def lasso_measures(x, y, beta, lam, l2):
    """The twins' objective and relative duality gap of `beta`, computed as they do."""
    import numpy as np

    r = y - x @ beta
    primal = 0.5 * (r @ r) + lam * np.abs(beta).sum() + 0.5 * l2 * (beta @ beta)
    max_corr = float(np.max(np.abs(x.T @ r - l2 * beta))) if beta.size else 0.0
    s = max(1.0, max_corr / lam)
    d = y - r / s
    dual = 0.5 * (y @ y) - 0.5 * (d @ d) - 0.5 * l2 * (beta @ beta) / s ** 2
    gap = max(0.0, (primal - dual) / abs(primal)) if primal != 0 else 0.0
    return float(primal), float(gap)


def lasso_sklearn_fit(x, y, lam, l2, tol, args):
    """scikit-learn's coordinate descent (cyclic). It minimises
    1/(2n)‖y − Xw‖² + αρ‖w‖₁ + ½α(1−ρ)‖w‖², so α = (λ+λ₂)/n and ρ = λ/(λ+λ₂); it stops
    when its own duality gap is below tol·‖y‖² (on the ½‖r‖² scale)."""
    import warnings
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.linear_model import ElasticNet, Lasso

    n = x.shape[0]
    if l2 == 0:
        model = Lasso(alpha=lam / n, fit_intercept=False, tol=tol, max_iter=args.max_iter,
                      selection="cyclic", copy_X=False, precompute=False)
    else:
        model = ElasticNet(alpha=(lam + l2) / n, l1_ratio=lam / (lam + l2),
                           fit_intercept=False, tol=tol, max_iter=args.max_iter,
                           selection="cyclic", copy_X=False, precompute=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)  # the gap we compute decides
        start = time.perf_counter()
        model.fit(x, y)
        secs = time.perf_counter() - start
    epochs = int(model.n_iter_)
    # One iteration of sklearn's coordinate descent is a sweep over every feature.
    return model.coef_.ravel().copy(), secs, {"updates": epochs * x.shape[1], "epochs": epochs}


def lasso_celer_fit(x, y, lam, l2, tol, args):
    """celer: coordinate descent on working sets with dual extrapolation (Massias et al.
    2018). Same 1/(2n) scaling as scikit-learn; it stops when its duality gap is below
    tol·‖y‖²/n (on the 1/(2n) scale)."""
    from celer import ElasticNet, Lasso

    n = x.shape[0]
    if l2 == 0:
        model = Lasso(alpha=lam / n, fit_intercept=False, tol=tol, max_iter=args.max_iter,
                      max_epochs=50000, p0=10, prune=True)
    else:
        model = ElasticNet(alpha=(lam + l2) / n, l1_ratio=lam / (lam + l2),
                           fit_intercept=False, tol=tol, max_iter=args.max_iter,
                           max_epochs=50000, p0=10, prune=True)
    start = time.perf_counter()
    model.fit(x, y)
    secs = time.perf_counter() - start
    # n_iter_ counts celer's outer (working-set) iterations, not coordinate updates.
    return model.coef_.ravel().copy(), secs, {"updates": None,
                                              "working_sets": int(model.n_iter_)}


def lasso_glmnet_fit(x, y, lam, l2, tol, args):
    """glmnet's Fortran elastic net (Friedman, Hastie & Tibshirani 2010), as the
    python-glmnet package builds it: 1/(2n)‖y − Xβ‖² + λ_g[(1−a)/2‖β‖² + a‖β‖₁], one user
    λ_g (no path), standardize=False, no intercept. glmnet scales y to ỹ = y/s_y,
    s_y = √(Σy²/n) without an intercept, and λ_g to λ_g/s_y, before it solves (and scales
    back after), which leaves the ℓ₁ part as written but divides the ℓ₂ part by s_y. So
    λ_g·a = λ/n and λ_g·(1−a) = s_y·λ₂/n (for the Lasso, λ₂ = 0: λ_g = λ/n, a = 1).
    X stays sparse: glmnet's sparse routine `spelnet`, called through the package's own
    f2py binding with the arguments its `ElasticNet._fit` passes, so that only the
    Fortran solve is timed (`ElasticNet.fit` first converts CSC to CSR and back, which
    takes longer than some solves). `tol` is glmnet's `thresh`: a coordinate's weighted
    squared change relative to the null deviance."""
    import numpy as np
    from glmnet._glmnet import solns, spelnet
    from glmnet.errors import _check_error_flag

    n, p = x.shape
    # Fresh copies outside the timer: the Fortran code standardises y in place.
    data = np.ascontiguousarray(x.data, dtype=np.float64)
    ix = (x.indptr + 1).astype(np.int32)  # 1-based, as Fortran wants
    jx = (x.indices + 1).astype(np.int32)
    yy = np.array(y, dtype=np.float64, order="F", copy=True)
    w = np.ones(n, dtype=np.float64)
    jd = np.zeros(1, dtype=np.int32)  # no excluded variables
    vp = np.ones(p, dtype=np.float64)  # equal penalty factors
    cl = np.empty((2, p), dtype=np.float64, order="F")
    cl[0, :], cl[1, :] = -np.inf, np.inf
    l2_g = float(np.sqrt(y @ y / n)) * l2  # see above: glmnet's ℓ₂ part is λ₂/s_y
    ulam = np.array([(lam + l2_g) / n], dtype=np.float64)
    algo = 2 if p > n else 1  # glmnet's "naive" update when p > n, else "covariance"
    start = time.perf_counter()
    lmu, _a0, ca, ia, nin, _rsq, _alm, nlp, jerr = spelnet(
        algo, lam / (lam + l2_g), n, p, data, ix, jx, yy, w, jd, vp, cl,
        p, p + 1, 1.0, ulam, tol, 1, 0, 0, args.max_iter)
    secs = time.perf_counter() - start
    _check_error_flag(jerr)
    beta = np.asarray(solns(p, ca[:, :lmu], ia, nin[:lmu]))[:, -1].copy()
    # nlp: glmnet's passes over the data (full sweeps and active-set sweeps together).
    return beta, secs, {"updates": None, "passes": int(nlp)}


LASSO_SOLVERS = {
    # peer: (impl, order, fit, default tol)
    "lasso-sklearn": ("sklearn", "cyclic", lasso_sklearn_fit, 1e-4),
    "lasso-celer": ("celer", "working-set", lasso_celer_fit, 1e-4),
    "lasso-glmnet": ("glmnet", "cyclic-active-set", lasso_glmnet_fit, 1e-7),
}


def lasso_twin(binary, data, ratio, l2):
    """The serial twin's JSON line on the same file and λ (for --twin)."""
    import subprocess

    out = subprocess.run([binary, "--data", data, "--ratio", repr(ratio), "--l2", repr(l2)],
                         check=True, capture_output=True, text=True).stdout
    return json.loads([line for line in out.splitlines() if line.startswith("{")][-1])


def lasso(args):
    import numpy as np

    impl, order, fit, default_tol = LASSO_SOLVERS[args.peer]
    x, y = lasso_load(args.data)
    lmax = float(np.max(np.abs(x.T @ y)))
    lam = args.lam if args.lam is not None else lmax / args.ratio
    l2 = args.l2
    tol = args.solver_tol if args.solver_tol is not None else default_tol
    # An untimed fit on a few columns first, so that no fit timed below pays for the
    # solver's one-time costs (lazy imports, first calls).
    fit(x[:, :min(x.shape[1], 16)].tocsc(), y, lam, l2, tol, args)
    tries = 0
    while True:
        tries += 1
        beta, secs, extra = fit(x, y, lam, l2, tol, args)
        objective, gap = lasso_measures(x, y, beta, lam, l2)
        print(f"{args.peer}: tol {tol:.0e}: gap {gap:.3e}, objective {objective!r}, "
              f"{secs:.3f} s", file=sys.stderr)
        if gap <= args.tol_gap or tries >= args.max_tries:
            break
        tol /= 10
    if gap > args.tol_gap:
        print(f"warning: {impl} did not reach the relative gap {args.tol_gap:g} "
              f"(gap {gap:.3e} at tol {tol:.0e})", file=sys.stderr)
    nonzeros = int(np.count_nonzero(beta))
    fields = dict(app="lasso", impl=impl, data=args.data, ranks=1, threads=args.workers,
                  order=order, **{"lambda": lam}, l2=l2, objective=objective, gap=gap,
                  nonzeros=nonzeros)
    if nonzeros <= 32:
        fields["support"] = [int(j) for j in np.flatnonzero(beta)]
    fields.update(updates=extra.pop("updates"), secs=secs, secs_per_epoch=secs,
                  setup_secs=0.0, solver_tol=tol, fits=tries, **extra)
    expect = args.expect_objective
    if args.twin:
        twin = lasso_twin(args.twin, args.data, lmax / lam, l2)
        if abs(twin["lambda"] - lam) > 1e-9 * lam:
            print(f"warning: λ {lam!r} differs from the twin's {twin['lambda']!r}",
                  file=sys.stderr)
        expect = twin["objective"]
        fields["twin_objective"] = expect
    if expect is not None:
        rel = abs(objective - expect) / abs(expect)
        if rel > 1e-6:
            print(f"warning: {impl}'s objective {objective!r} differs from the twin's "
                  f"{expect!r} by {rel:.2e} relative (> 1e-6)", file=sys.stderr)
    emit(**fields)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("peer", choices=["word2vec", "lda", "tomotopy", "mlr", *LASSO_PEERS])
    parser.add_argument("--data", required=True)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--workers", type=int, default=None,
                        help="threads (default 2; the Lasso peers: 1, and it caps the "
                             "BLAS/OpenMP threads, set before numpy is imported)")
    parser.add_argument("--topics", type=int, default=100)
    parser.add_argument("--dim", type=int, default=100)
    parser.add_argument("--seed", type=int, default=1)
    lasso_opts = parser.add_argument_group("Lasso peers")
    lasso_opts.add_argument("--ratio", type=float, default=20.0,
                            help="λ = λmax / RATIO, λmax = max_j |x_jᵀy| (default 20)")
    lasso_opts.add_argument("--lambda", dest="lam", type=float, default=None,
                            help="λ itself (overrides --ratio)")
    lasso_opts.add_argument("--l2", type=float, default=0.0, help="λ₂ (default 0: the Lasso)")
    lasso_opts.add_argument("--tol-gap", type=float, default=1e-6,
                            help="the twins' relative duality gap to reach (default 1e-6)")
    lasso_opts.add_argument("--solver-tol", type=float, default=None,
                            help="the solver's tolerance to start from (default: its own)")
    lasso_opts.add_argument("--max-tries", type=int, default=12,
                            help="fits at tenfold tighter tolerances before giving up")
    lasso_opts.add_argument("--max-iter", type=int, default=100000,
                            help="the solver's max_iter (sklearn epochs, celer outer "
                                 "iterations, glmnet passes)")
    lasso_opts.add_argument("--twin", default=None,
                            help="also run this serial twin (target/release/lasso-serial) on "
                                 "the same file and λ, and warn if the objectives differ by "
                                 "more than 1e-6 relative")
    lasso_opts.add_argument("--expect-objective", type=float, default=None,
                            help="warn if the objective differs from this by > 1e-6 relative")
    args = parser.parse_args()
    if not os.path.exists(args.data):
        sys.exit(f"{args.data}: no such file or directory")
    if args.peer in LASSO_PEERS:
        args.workers = args.workers or 1
        # Before numpy (and its BLAS) or any OpenMP runtime is loaded.
        for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
                    "BLIS_NUM_THREADS", "NUMEXPR_NUM_THREADS", "VECLIB_MAXIMUM_THREADS"):
            os.environ[var] = str(args.workers)
        lasso(args)
        return
    args.workers = args.workers or 2
    {"word2vec": word2vec, "lda": lda, "tomotopy": tomotopy, "mlr": mlr}[args.peer](args)


if __name__ == "__main__":
    main()
