#!/usr/bin/env python3
"""Standard peers of the strads-ap examples, run on the same data, each printing the same
one-line JSON result as the examples (`"impl"` names the peer).

    python3 examples/peers/peers.py word2vec --data ../shared/data/brown/sentences.txt --workers 2
    python3 examples/peers/peers.py lda --data ../shared/data/lda/reuters.ldac --topics 100
    python3 examples/peers/peers.py tomotopy --data ../shared/data/lda/reuters.ldac --workers 2
    python3 examples/peers/peers.py mlr --data /usr/share/datasets/fashion-mnist

Install the peers first with `examples/peers/install.sh` (pip: gensim, lda, tomotopy,
scikit-learn). Hyper-parameters follow the examples' defaults so that the figures compare
at the same quality: compare `words_per_sec`/`tokens_per_sec` only together with the
quality metric printed beside it.
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


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("peer", choices=["word2vec", "lda", "tomotopy", "mlr"])
    parser.add_argument("--data", required=True)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--topics", type=int, default=100)
    parser.add_argument("--dim", type=int, default=100)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    if not os.path.exists(args.data):
        sys.exit(f"{args.data}: no such file or directory")
    {"word2vec": word2vec, "lda": lda, "tomotopy": tomotopy, "mlr": mlr}[args.peer](args)


if __name__ == "__main__":
    main()
