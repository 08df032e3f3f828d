"""Knowledge models fitted on a client's private knowledge slice: the stand-ins for expert knowledge in §7.

Each is an honest analogue of the paper's KMs (Fan et al. 2022, §7.2; FedMech.jl ``buildPredModel*`` /
``buildRangeModel*``): it sees only the client's *knowledge slice* (disjoint from the model's training points
and from every test point) through a restricted view of the features.

``fit`` name   kind        what
============== =========== =======================================================================================
logreg         prediction  multinomial logistic regression on a random ``feature_fraction`` (0.3) column mask
                           (paper: 18 Covtype features; FedMech.jl: a random 30 % mask)
lowres_cnn     prediction  the small CNN of FedMech.jl on a ``pool``×``pool`` max-pooled image (low resolution)
tree_rules     prediction  leaf-majority ``class c <- path`` score rules of a shallow decision tree
tree_rules     range       ``range {S} <- path`` rules: a depth-``max_depth`` tree on the view; each leaf admits the
                           fewest classes holding ``coverage`` (0.99) of its slice points, i.e. causal/safety rules
                           "if x_j > t and x_i <= s then label ∈ S" read off held-out data
paper_lookup   range       the paper's §7 hash map (true label + P-KM label + ``extra_classes`` random classes per
                           train/test row). **It reads the test labels**: use it only to reproduce the paper.
============== =========== =======================================================================================
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np
import torch

from fednsl.methods.kifl.data import ClientSplit
from fednsl.methods.kifl.knowledge import (
    EstimatorPredictionKM,
    InputView,
    LookupRangeKM,
    PredictionKM,
    RangeKM,
    RulesPredictionKM,
    RulesRangeKM,
)
from fednsl.methods.kifl.models import lowres_cnn
from kg.seeding import derive_rng
from rules.knowledge import KnowledgeRules, RangeRule, ScoreRule, conditions_from_box

__all__ = ["KnowledgeFitter", "TorchPredictionKM", "tree_rules"]


class TorchPredictionKM(PredictionKM):
    """A trained torch classifier on a view: argmax of its logits."""

    def __init__(self, model: torch.nn.Module, view: InputView, scale: float, name: str):
        self.model, self.view, self.scale, self.name = model.eval(), view, scale, name

    def predict(self, x: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            xs = torch.from_numpy((self.view(x) / self.scale).astype(np.float32))
            return (
                torch.cat([self.model(b).argmax(1) for b in xs.split(4096)]).numpy().astype(np.int64)
                if len(xs)
                else np.zeros(0, dtype=np.int64)
            )


def tree_rules(
    x: np.ndarray,
    y: np.ndarray,
    num_classes: int,
    *,
    max_depth: int,
    min_samples_leaf: int,
    coverage: float,
    seed: int,
    source: str,
) -> KnowledgeRules:
    """One ``class`` (leaf majority) and one ``range`` (fewest classes covering ``coverage``) rule per tree leaf."""
    from sklearn.tree import DecisionTreeClassifier

    tree = DecisionTreeClassifier(max_depth=max_depth, min_samples_leaf=min_samples_leaf, random_state=seed)
    tree.fit(x, y)
    t = tree.tree_
    leaf_of = tree.apply(x)
    scored: list[ScoreRule] = []
    ranged: list[RangeRule] = []

    def walk(node: int, lo: dict[int, float], hi: dict[int, float]) -> None:
        if t.children_left[node] == -1:
            feats = sorted(set(lo) | set(hi))
            body = conditions_from_box(feats, [lo.get(j) for j in feats], [hi.get(j) for j in feats])
            labels = y[leaf_of == node]
            counts = np.bincount(labels, minlength=num_classes)
            order = np.argsort(-counts, kind="stable")
            need = coverage * counts.sum()
            keep, acc = [], 0
            for c in order:
                if counts[c] == 0 or acc >= need:
                    break
                keep.append(int(c))
                acc += counts[c]
            scored.append(ScoreRule(int(order[0]), body))
            ranged.append(RangeRule(frozenset(keep), body))
            return
        j, thr = int(t.feature[node]), float(t.threshold[node])
        walk(int(t.children_left[node]), lo, {**hi, j: min(hi.get(j, np.inf), thr)})
        walk(int(t.children_right[node]), {**lo, j: max(lo.get(j, -np.inf), thr)}, hi)

    walk(0, {}, {})
    return KnowledgeRules(num_classes, scored, ranged, None, source=source)


class KnowledgeFitter:
    """Builds ``fit: <name>`` KMs for one client from its knowledge slice; seeded per client."""

    def __init__(
        self,
        cid: str,
        split: ClientSplit,
        num_classes: int,
        image_shape: tuple[int, ...] | None,
        feature_hi: float,
        seed: int,
    ):
        self.cid, self.split, self.k, self.image_shape = cid, split, num_classes, image_shape
        self.hi = max(float(feature_hi), 1e-12)
        self.seed = int(seed)
        self.pkm: PredictionKM | None = None  # set by the builder once the P-KM exists (paper_lookup needs it)

    def _rng(self, salt: int) -> np.random.Generator:
        return derive_rng(self.seed, salt)

    def _need_slice(self, what: str) -> None:
        if len(self.split.y_km) == 0:
            raise ValueError(f"client {self.cid!r}: fit: {what} needs a knowledge slice (data.km_fraction > 0)")

    def _masked(self, view: InputView, options: dict[str, Any], salt: int) -> InputView:
        frac = options.pop("feature_fraction", None)
        if frac is None or view.features is not None:
            return view
        d = view(self.split.x_km[:1]).shape[1]
        m = max(1, int(np.floor(float(frac) * d)))
        feats = tuple(int(j) for j in np.sort(self._rng(salt).choice(d, size=m, replace=False)))
        return InputView(feats, view.pool, view.image_shape)

    def __call__(self, name: str, options: Mapping[str, Any], view: InputView, kind: str) -> PredictionKM | RangeKM:
        opts = dict(options)
        where = f"client {self.cid!r}: fit: {name}"
        if name == "logreg" and kind == "prediction":
            from sklearn.linear_model import LogisticRegression
            from sklearn.pipeline import make_pipeline
            from sklearn.preprocessing import StandardScaler

            self._need_slice(name)
            opts.setdefault("feature_fraction", 0.3)
            v = self._masked(view, opts, 1)
            c = float(opts.pop("C", 1.0))
            max_iter = int(opts.pop("max_iter", 200))
            self._no_more(opts, where)
            est = make_pipeline(StandardScaler(), LogisticRegression(C=c, max_iter=max_iter))
            est.fit(v(self.split.x_km), self.split.y_km)
            return EstimatorPredictionKM(est, v, name=f"fitted logreg P-KM on {len(v.features or ())} features")
        if name == "lowres_cnn" and kind == "prediction":
            self._need_slice(name)
            if self.image_shape is None:
                raise ValueError(f"{where}: needs image data")
            v = view if view.pool > 1 else InputView(view.features, int(opts.pop("pool", 2)), self.image_shape)
            opts.pop("pool", None)
            epochs, lr, bs = int(opts.pop("epochs", 5)), float(opts.pop("lr", 1e-3)), int(opts.pop("batch_size", 32))
            self._no_more(opts, where)
            if v.features is not None:
                raise ValueError(f"{where}: a CNN needs the whole pooled image (no 'features' mask)")
            shape = v.out_shape()
            assert shape is not None
            model = lowres_cnn(shape, self.k, seed=self.seed)
            gen = torch.Generator().manual_seed(self.seed)
            x = torch.from_numpy((v(self.split.x_km) / self.hi).astype(np.float32))
            y = torch.from_numpy(self.split.y_km)
            opt = torch.optim.Adam(model.parameters(), lr=lr)
            model.train()
            for _ in range(epochs):
                order = torch.randperm(len(y), generator=gen)
                for start in range(0, len(y), bs):
                    idx = order[start : start + bs]
                    opt.zero_grad()
                    torch.nn.functional.cross_entropy(model(x[idx]), y[idx]).backward()
                    opt.step()
            return TorchPredictionKM(model, v, self.hi, f"fitted low-resolution CNN P-KM (pool {v.pool})")
        if name == "tree_rules":
            self._need_slice(name)
            v = self._masked(view, opts, 2)
            depth, leaf = int(opts.pop("max_depth", 4)), int(opts.pop("min_samples_leaf", 20))
            coverage = float(opts.pop("coverage", 0.99))
            self._no_more(opts, where)
            if not 0 < coverage <= 1:
                raise ValueError(f"{where}: coverage must be in (0, 1], got {coverage}")
            rules = tree_rules(
                v(self.split.x_km),
                self.split.y_km,
                self.k,
                max_depth=depth,
                min_samples_leaf=leaf,
                coverage=coverage,
                seed=self.seed,
                source=f"tree rules of client {self.cid}",
            )
            if kind == "prediction":
                return RulesPredictionKM(KnowledgeRules(self.k, rules.score_rules, [], None, source=rules.source), v)
            return RulesRangeKM(KnowledgeRules(self.k, [], rules.range_rules, None, source=rules.source), v)
        if name == "paper_lookup" and kind == "range":
            extra = int(opts.pop("extra_classes", 1))
            self._no_more(opts, where)
            if self.pkm is None:
                raise ValueError(f"{where}: needs the client's P-KM (declare 'prediction')")
            s = self.split
            xs = np.concatenate([s.x_km, s.x_train, s.x_test])
            ys = np.concatenate([s.y_km, s.y_train, s.y_test])
            sets = np.zeros((len(ys), self.k), dtype=bool)
            sets[np.arange(len(ys)), ys] = True
            pred = np.asarray(self.pkm.predict(xs))
            ok = pred >= 0
            sets[np.flatnonzero(ok), pred[ok]] = True
            rng = self._rng(3)
            classes = np.asarray(s.classes)
            for i in range(len(ys)):
                sets[i, rng.choice(classes, size=min(extra, len(classes)), replace=False)] = True
            return LookupRangeKM(xs, sets)
        kinds = {"prediction": "logreg, lowres_cnn, tree_rules", "range": "tree_rules, paper_lookup"}[kind]
        raise ValueError(f"{where}: unknown fitted {kind} KM {name!r}; available: {kinds}")

    @staticmethod
    def _no_more(opts: dict[str, Any], where: str) -> None:
        if opts:
            raise ValueError(f"{where}: unknown option(s) {sorted(opts)}")
