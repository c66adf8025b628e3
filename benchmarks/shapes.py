"""The paper's 12 benchmark model shapes (GPUTreeShap, Tables 2-3), on synthetic data.

Four data sets of the paper's sizes, with a learnable signal (downloads are impossible here):

============  ========  ====  ==============  ===========================================
name          rows      cols  task            synthetic stand-in
============  ========  ====  ==============  ===========================================
adult         48,842    14    binary          census-like integer codes and amounts
cal_housing   20,640    8     regression      incomes, ages, rooms, a location surface
covtype       581,012   54    8 classes       10 terrain columns + 4 + 40 one-hot columns
fashion_mnist 70,000    784   10 classes      28x28 byte images of 10 blob prototypes
============  ========  ====  ==============  ===========================================

times three sizes: ``small`` / ``med`` / ``large`` = 10 / 100 / 1000 boosting rounds of
``max_depth`` 3 / 8 / 16, ``eta`` 0.01, XGBoost defaults otherwise (``tree_method="hist"``).
Covtype is trained as ``multi:softprob`` with 8 classes (labels 1..7, class 0 unused), as the
paper's XGBoost setup did, so each round adds 8 trees; fashion_mnist adds 10.

Row caps. Training the large (and the wide multiclass) shapes on the full row counts takes
far too long on a few CPU cores, so on CPU :func:`default_rows` caps them
(:data:`CPU_ROW_CAPS`) unless told otherwise: pass ``n_rows`` or set the environment variable
``DISTSHAP_BENCH_ROWS`` (an integer cap for every shape, or ``full``). With fewer training
rows, deep trees reach fewer leaves, so **path counts of capped models differ from the
paper's Table 3**. With a GPU
(``device="cuda"``, or ``DISTSHAP_BENCH_DEVICE=cuda``) the full-size large models train in
minutes.

Trained models are cached as ``benchmarks/.models/<name>-<size>-<rows>-v<N>.ubj``
(git-ignored; ``N`` is :data:`DATA_VERSION`).

Command line::

    python -m benchmarks.shapes                       # train every shape (default rows)
    python -m benchmarks.shapes --only covtype-large --rows full --device cuda
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import numpy as np

__all__ = [
    "DATASETS",
    "DATA_VERSION",
    "DEPTHS",
    "CPU_ROW_CAPS",
    "MODEL_DIR",
    "ROUNDS",
    "SHAPES",
    "SIZES",
    "default_rows",
    "make_data",
    "model_path",
    "params",
    "train_model",
]

#: name -> (rows, columns, objective, classes) of the paper's data sets (Table 2).
DATASETS: dict[str, tuple[int, int, str, int]] = {
    "covtype": (581_012, 54, "multi:softprob", 8),
    "cal_housing": (20_640, 8, "reg:squarederror", 1),
    "fashion_mnist": (70_000, 784, "multi:softprob", 10),
    "adult": (48_842, 14, "binary:logistic", 2),
}
SIZES: tuple[str, ...] = ("small", "med", "large")
ROUNDS: dict[str, int] = {"small": 10, "med": 100, "large": 1000}
DEPTHS: dict[str, int] = {"small": 3, "med": 8, "large": 16}
#: The 12 (data set, size) shapes in the paper's table order.
SHAPES: tuple[tuple[str, str], ...] = tuple((d, s) for d in DATASETS for s in SIZES)
#: Default training-row caps on CPU (see :func:`default_rows`); other shapes use all rows.
CPU_ROW_CAPS: dict[tuple[str, str], int] = {
    ("covtype", "med"): 50_000,
    ("fashion_mnist", "small"): 20_000,
    ("fashion_mnist", "med"): 5_000,
    ("adult", "large"): 20_000,
    ("cal_housing", "large"): 20_000,
    ("covtype", "large"): 5_000,
    ("fashion_mnist", "large"): 2_000,
}
MODEL_DIR = Path(__file__).resolve().parent / ".models"
#: Version of the synthetic data generators (part of the model cache key).
DATA_VERSION = 2
ETA = 0.01


def _check_name(name: str) -> None:
    if name not in DATASETS:
        raise ValueError(f"unknown data set {name!r}: use one of {', '.join(DATASETS)}")


def _check_size(size: str) -> None:
    if size not in SIZES:
        raise ValueError(f"unknown model size {size!r}: use one of {', '.join(SIZES)}")


# --------------------------------------------------------------------------------------------
# Synthetic data sets
# --------------------------------------------------------------------------------------------


def _adult(n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    age = rng.integers(17, 91, n)
    workclass = rng.choice(9, n, p=[0.7, 0.08, 0.06, 0.04, 0.04, 0.03, 0.03, 0.01, 0.01])
    fnlwgt = rng.lognormal(12.0, 0.5, n)
    education = rng.integers(0, 16, n)
    education_num = np.clip(education + rng.integers(-1, 2, n), 1, 16)
    marital = rng.integers(0, 7, n)
    occupation = rng.integers(0, 15, n)
    relationship = rng.integers(0, 6, n)
    race = rng.choice(5, n, p=[0.85, 0.1, 0.03, 0.01, 0.01])
    sex = rng.integers(0, 2, n)
    gain = np.where(rng.random(n) < 0.08, rng.lognormal(8.5, 1.2, n), 0.0)
    loss = np.where(rng.random(n) < 0.05, rng.lognormal(7.4, 0.3, n), 0.0)
    hours = np.clip(rng.normal(40, 12, n), 1, 99).round()
    country = rng.choice(42, n, p=np.r_[0.9, np.full(41, 0.1 / 41)])
    X = np.column_stack(
        [age, workclass, fnlwgt, education, education_num, marital, occupation, relationship,
         race, sex, gain, loss, hours, country]
    )  # fmt: skip
    logit = (
        -2.6
        + 0.045 * np.minimum(age - 17, 40)
        - 0.03 * np.maximum(age - 60, 0)
        + 0.2 * (education_num - 9)
        + 2.0 * (marital == 2)
        + 0.5 * sex * (relationship < 2)
        + 2.5 * (gain > 5000)
        + 0.8 * (loss > 1500)
        + 0.03 * (hours - 40)
        + 0.4 * np.isin(occupation, [3, 9, 11])
        - 0.5 * (workclass == 7)
    )
    y = rng.random(n) < 1.0 / (1.0 + np.exp(-logit))
    return X, y.astype(np.float32)


def _cal_housing(n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    income = rng.lognormal(1.25, 0.45, n)
    age = rng.integers(1, 53, n)
    rooms = rng.lognormal(1.6, 0.25, n)
    bedrooms = rooms * rng.uniform(0.17, 0.24, n)
    population = rng.lognormal(7.0, 0.7, n)
    occupancy = rng.lognormal(1.05, 0.3, n)
    lat = rng.uniform(32.5, 42.0, n)
    lon = rng.uniform(-124.3, -114.3, n)
    X = np.column_stack([income, age, rooms, bedrooms, population, occupancy, lat, lon])
    coast = np.exp(-(((lat - 34.0) / 1.2) ** 2 + ((lon + 118.3) / 1.0) ** 2)) + np.exp(
        -(((lat - 37.7) / 0.8) ** 2 + ((lon + 122.3) / 0.8) ** 2)
    )
    y = (
        0.25 * income
        + 2.5 * coast
        + 0.006 * age
        - 0.2 * np.log(occupancy)
        + 0.1 * np.sin(rooms)
        + rng.normal(0, 0.35, n)
    )
    return X, np.clip(y, 0.15, 5.0).astype(np.float32)


def _covtype(n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    elevation = rng.normal(2960, 280, n).round()
    aspect = rng.integers(0, 361, n)
    slope = np.clip(rng.gamma(3.0, 4.7, n), 0, 66).round()
    h_hydro = rng.gamma(1.5, 180, n).round()
    v_hydro = rng.normal(46, 58, n).round()
    h_road = rng.gamma(2.0, 1200, n).round()
    shade9 = np.clip(rng.normal(212, 27, n), 0, 254).round()
    shade12 = np.clip(rng.normal(223, 20, n), 0, 254).round()
    shade3 = np.clip(rng.normal(142, 38, n), 0, 254).round()
    h_fire = rng.gamma(2.0, 1000, n).round()
    wild = rng.choice(4, n, p=[0.45, 0.05, 0.44, 0.06])
    soil = rng.choice(40, n, p=rng.dirichlet(np.full(40, 0.6)))
    onehot_w = np.eye(4, dtype=np.float64)[wild]
    onehot_s = np.eye(40, dtype=np.float64)[soil]
    X = np.column_stack(
        [elevation, aspect, slope, h_hydro, v_hydro, h_road, shade9, shade12, shade3, h_fire,
         onehot_w, onehot_s]
    )  # fmt: skip
    # Class scores: elevation bands dominate (as in the real data), refined by the rest.
    e = (elevation - 2960) / 280
    centres = np.array([0.9, 0.0, -1.6, -2.4, 0.3, -1.2, 2.0])
    scores = -2.0 * (e[:, None] - centres[None, :]) ** 2
    scores += np.array([0.6, 0.9, 0.0, -1.5, -0.8, -0.4, -0.3])[None, :]
    scores[:, 3] += 1.5 * (wild == 3)
    scores[:, 4] += 0.8 * (h_road < 1200) - 0.6 * (wild == 2)
    scores[:, 5] += 0.02 * (slope - 14)
    scores[:, 6] += 1.0 * (wild == 1)
    scores += rng.normal(0, 0.9, (40, 7))[soil]
    scores[:, 1] += 0.002 * (h_hydro - 270) + 0.0002 * (h_fire - 2000)
    scores += rng.gumbel(0, 0.7, scores.shape)
    y = 1 + np.argmax(scores, axis=1)  # labels 1..7, class 0 unused (as in the real data)
    return X, y.astype(np.float32)


def _fashion_mnist(n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    side = 28
    yy, xx = np.mgrid[0:side, 0:side].astype(np.float64)
    prototypes = np.zeros((10, side, side))
    for c in range(10):
        for _ in range(4):
            cy, cx = rng.uniform(6, 22, 2)
            sy, sx = rng.uniform(2.0, 7.0, 2)
            prototypes[c] += rng.uniform(0.5, 1.0) * np.exp(
                -(((yy - cy) / sy) ** 2) - ((xx - cx) / sx) ** 2
            )
    prototypes /= prototypes.max(axis=(1, 2), keepdims=True)
    y = rng.integers(0, 10, n)
    X = np.empty((n, side * side), dtype=np.float32)
    block = 8192
    for start in range(0, n, block):
        stop = min(start + block, n)
        m = stop - start
        img = prototypes[y[start:stop]] * rng.uniform(0.6, 1.0, (m, 1, 1))
        dy, dx = rng.integers(-2, 3, 2)  # one shift per block keeps this vectorised
        img = np.roll(img, (dy, dx), axis=(1, 2))
        img = img + rng.normal(0, 0.12, img.shape)
        img = np.where(img < 0.15, 0.0, np.minimum(img, 1.0))
        X[start:stop] = np.round(255 * img).reshape(m, -1)
    return X, y.astype(np.float32)


_MAKERS = {
    "adult": _adult,
    "cal_housing": _cal_housing,
    "covtype": _covtype,
    "fashion_mnist": _fashion_mnist,
}


def make_data(name: str, n_rows: int | None = None, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Synthetic data of the shape of the paper's data set ``name``.

    Parameters
    ----------
    name : {"adult", "cal_housing", "covtype", "fashion_mnist"}
    n_rows : int, optional
        Rows to generate (default: the paper's row count).
    seed : int
        Random seed; the same seed and rows give the same data.

    Returns
    -------
    X : float32 (n_rows, n_cols)
    y : float32 (n_rows,)
        0/1 labels (adult), targets (cal_housing) or class labels (covtype 1..7,
        fashion_mnist 0..9).
    """
    _check_name(name)
    rows, cols, _, _ = DATASETS[name]
    n = rows if n_rows is None else int(n_rows)
    if n < 1:
        raise ValueError(f"n_rows must be >= 1, got {n_rows}")
    X, y = _MAKERS[name](n, np.random.default_rng(seed))
    X = np.ascontiguousarray(X, dtype=np.float32)
    assert X.shape == (n, cols)
    return X, y


# --------------------------------------------------------------------------------------------
# Models
# --------------------------------------------------------------------------------------------


def params(name: str, size: str, device: str = "cpu") -> dict:
    """XGBoost training parameters of shape ``(name, size)``."""
    _check_name(name)
    _check_size(size)
    _, _, objective, classes = DATASETS[name]
    p = {
        "objective": objective,
        "eta": ETA,
        "max_depth": DEPTHS[size],
        "tree_method": "hist",
        "device": device,
        "seed": 0,
    }
    if objective.startswith("multi:"):
        p["num_class"] = classes
    return p


def default_rows(name: str, size: str) -> int:
    """Training rows used when none are given.

    ``DISTSHAP_BENCH_ROWS`` (an integer cap for every shape, or ``full``) overrides. Otherwise
    on CPU the rows are capped by :data:`CPU_ROW_CAPS` (so each model trains in minutes,
    not hours, on two cores); with ``DISTSHAP_BENCH_DEVICE=cuda`` every shape uses the
    paper's full row count.
    """
    _check_name(name)
    _check_size(size)
    rows = DATASETS[name][0]
    env = os.environ.get("DISTSHAP_BENCH_ROWS", "").strip().lower()
    if env == "full":
        return rows
    if env:
        try:
            cap = int(env)
        except ValueError:
            raise ValueError(
                f"DISTSHAP_BENCH_ROWS must be an integer row cap or 'full', got {env!r}"
            ) from None
        return max(1, min(rows, cap))
    if os.environ.get("DISTSHAP_BENCH_DEVICE", "cpu") == "cuda":
        return rows
    return min(rows, CPU_ROW_CAPS.get((name, size), rows))


def model_path(name: str, size: str, n_rows: int | None = None) -> Path:
    """Cache file of a trained model: ``benchmarks/.models/<name>-<size>-<rows>-v<N>.ubj``.

    ``N`` is :data:`DATA_VERSION`, bumped whenever the synthetic data change.
    """
    n = default_rows(name, size) if n_rows is None else int(n_rows)
    return MODEL_DIR / f"{name}-{size}-{n}-v{DATA_VERSION}.ubj"


def train_model(
    name: str,
    size: str,
    n_rows: int | None = None,
    device: str | None = None,
    retrain: bool = False,
    verbose: bool = False,
):
    """Train (or load from the cache) the XGBoost model of shape ``(name, size)``.

    Parameters
    ----------
    name : {"adult", "cal_housing", "covtype", "fashion_mnist"}
    size : {"small", "med", "large"}
    n_rows : int, optional
        Training rows (default :func:`default_rows`). Fewer rows than the paper's give deep
        trees fewer leaves, hence other path counts than Table 3.
    device : {"cpu", "cuda"}, optional
        XGBoost device (default ``DISTSHAP_BENCH_DEVICE`` or ``"cpu"``).
    retrain : bool
        Train even when a cached model exists.
    verbose : bool
        Print the training time.

    Returns
    -------
    xgboost.Booster
    """
    import xgboost as xgb

    n = default_rows(name, size) if n_rows is None else int(n_rows)
    if device is None:
        device = os.environ.get("DISTSHAP_BENCH_DEVICE", "cpu")
    path = model_path(name, size, n)
    if path.exists() and not retrain:
        booster = xgb.Booster()
        booster.load_model(path)
        return booster
    X, y = make_data(name, n)
    start = time.perf_counter()
    dtrain = xgb.DMatrix(X, label=y)
    booster = xgb.train(params(name, size, device), dtrain, num_boost_round=ROUNDS[size])
    seconds = time.perf_counter() - start
    booster.set_param({"device": "cpu"})
    booster.set_attr(
        distshap_rows=str(n), distshap_device=device, distshap_seconds=f"{seconds:.1f}"
    )
    if verbose:
        print(f"trained {name}-{size} on {n} rows ({device}) in {seconds:.1f} s", flush=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp.ubj")
    booster.save_model(tmp)
    os.replace(tmp, path)
    return booster


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Train and cache the paper's 12 model shapes.")
    parser.add_argument("--only", nargs="*", help="shapes as name-size, e.g. adult-med")
    parser.add_argument("--rows", help="training rows: an integer, or 'full'")
    parser.add_argument("--device", choices=["cpu", "cuda"], help="XGBoost device")
    parser.add_argument("--retrain", action="store_true")
    args = parser.parse_args(argv)
    wanted = SHAPES
    if args.only:
        wanted = tuple(tuple(s.rsplit("-", 1)) for s in args.only)  # type: ignore[misc]
    for name, size in wanted:
        rows = None
        if args.rows == "full":
            rows = DATASETS[name][0]
        elif args.rows:
            rows = min(int(args.rows), DATASETS[name][0])
        booster = train_model(
            name, size, rows, device=args.device, retrain=args.retrain, verbose=True
        )
        print(f"{name}-{size}: {booster.num_boosted_rounds()} rounds", flush=True)


if __name__ == "__main__":
    main()
