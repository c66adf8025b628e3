"""The paper's 12 benchmark model shapes (GPUTreeShap, Tables 2-3), on synthetic data.

Four data sets of the paper's sizes (downloads are impossible here), each generated so that
XGBoost grows trees of the paper's sizes on it (Table 3's leaf counts; compare with
``--leaves``):

=============  =======  ====  ==========  ===================================================
name           rows     cols  task        synthetic stand-in
=============  =======  ====  ==========  ===================================================
adult          48,842   14    binary      census records: the real columns' category codes
                                          (alphabetical), marginals and dependencies (age ->
                                          marriage -> relationship -> sex), about a hundred
                                          capital amounts; income (24%) from a noisy score,
                                          nearly settled by large capital gains or youth
cal_housing    20,640   8     regression  block groups clustered in towns on a 0.01-degree
                                          grid, capped incomes and ages; noisy capped prices
covtype        581,012  54    8 classes   30 m cells of four wilderness areas: a random
                                          terrain gives elevation, slope, aspect and hill
                                          shades; distances to streams / roads / fire points;
                                          soil polygons; the cover type (real class shares)
                                          is that of the cell's forest stand, with 5% noise
fashion_mnist  70,000   784   10 classes  28x28 byte images of clothing silhouettes (tops with
                                          sleeves, zips or buttons, trousers, dresses, shoes,
                                          bags) of random proportions, placement, shade and
                                          printed pattern
=============  =======  ====  ==========  ===================================================

Why not simpler stand-ins: how many leaves a tree grows depends on the data, not only on
``max_depth``. XGBoost stops a branch where the labels are pure, where the hessian sum falls
below ``min_child_weight`` (multiclass hessians ``2p(1-p)`` shrink as the model fits) and where
no split gains, so the leaf counts follow from the class balance, the pure regions, how
learnable the label is (label noise keeps deep trees growing for all 1000 rounds; a learnable
label lets them shrink) and how local it is. The earlier stand-ins (a smooth covtype score,
Gaussian blobs for fashion_mnist) grew several times fewer or more leaves than the paper's
models. The leaf counts, ours against the paper's (``--leaves --rows full``), are in
``benchmarks/RESULTS.md``.

Three sizes: ``small`` / ``med`` / ``large`` = 10 / 100 / 1000 boosting rounds of
``max_depth`` 3 / 8 / 16, ``eta`` 0.01, XGBoost defaults otherwise (``tree_method="hist"``).
Covtype is trained as ``multi:softprob`` with 8 classes (labels 1..7, class 0 unused), as the
paper's XGBoost setup did, so each round adds 8 trees; fashion_mnist adds 10. (XGBoost >= 3
starts each class at the log of its share, so the class-0 trees are single leaves.)

Real data. :data:`REAL_DATASETS` adds the data sets bundled with scikit-learn (``digits``,
``breast_cancer``, ``diabetes``; no download) in the same three sizes (:data:`REAL_SHAPES`,
e.g. ``digits-med``). They are real data, but small, and are not in the paper's tables.

Row caps. Training the large (and the wide multiclass) shapes on the full row counts takes
far too long on a few CPU cores, so on CPU :func:`default_rows` caps some of them
(:data:`CPU_ROW_CAPS`) unless told otherwise: pass ``n_rows`` or set the environment variable
``DISTSHAP_BENCH_ROWS`` (an integer cap for every shape, or ``full``). With fewer training
rows deep trees reach fewer leaves, so **capped models have fewer leaves than the paper's**.
With a GPU (``device="cuda"``, or ``DISTSHAP_BENCH_DEVICE=cuda``) every shape uses all rows.

Multiclass intercepts on the GPU. XGBoost 3.4.1's GPU computes the starting margin of a
multiclass model (the log of each class's share, shifted) without the classes that have no
rows, so covtype's empty class 0 takes class 1's intercept, class 1 class 2's, and so on. The
model then starts far from the labels' shares and grows far fewer leaves than the CPU's
``hist`` (``benchmarks/RESULTS.md``, covtype on the GPU). So on the GPU :func:`train_model`
gives a multiclass model the intercept the CPU computes from the labels alone
(:func:`cpu_intercept`), and a GPU-trained covtype model has the paper's shape.

Trained models are cached as ``benchmarks/.models/<name>-<size>-<rows>-v<N>.ubj``
(git-ignored; ``N`` is :data:`DATA_VERSION`).

Command line::

    python -m benchmarks.shapes                       # train every paper shape (default rows)
    python -m benchmarks.shapes --only covtype-large --rows full --device cuda
    python -m benchmarks.shapes --leaves --rows full --only adult-med cal_housing-med
    python -m benchmarks.shapes --leaves --rows full --estimate --only covtype-large
    python -m benchmarks.shapes --leaves --real       # the scikit-learn data sets
"""

from __future__ import annotations

import argparse
import functools
import os
import time
from pathlib import Path

import numpy as np

try:
    from benchmarks.paper import PAPER_TABLE3, PAPER_TABLE5
except ImportError:  # run as a script: benchmarks/ itself is on sys.path
    from paper import PAPER_TABLE3, PAPER_TABLE5  # type: ignore[no-redef]

__all__ = [
    "CPU_ROW_CAPS",
    "DATASETS",
    "DATA_VERSION",
    "DEPTHS",
    "MODEL_DIR",
    "REAL_DATASETS",
    "REAL_SHAPES",
    "ROUNDS",
    "SHAPES",
    "SIZES",
    "cpu_intercept",
    "default_rows",
    "estimate_leaves",
    "format_leaf_table",
    "leaf_table",
    "make_data",
    "model_path",
    "model_stats",
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
#: Real data sets bundled with scikit-learn (no download), same format; not in the paper.
REAL_DATASETS: dict[str, tuple[int, int, str, int]] = {
    "digits": (1_797, 64, "multi:softprob", 10),
    "breast_cancer": (569, 30, "binary:logistic", 2),
    "diabetes": (442, 10, "reg:squarederror", 1),
}
SIZES: tuple[str, ...] = ("small", "med", "large")
ROUNDS: dict[str, int] = {"small": 10, "med": 100, "large": 1000}
DEPTHS: dict[str, int] = {"small": 3, "med": 8, "large": 16}
#: The 12 (data set, size) shapes in the paper's table order.
SHAPES: tuple[tuple[str, str], ...] = tuple((d, s) for d in DATASETS for s in SIZES)
#: The extra shapes on real (scikit-learn) data.
REAL_SHAPES: tuple[tuple[str, str], ...] = tuple((d, s) for d in REAL_DATASETS for s in SIZES)
#: Default training-row caps on CPU (see :func:`default_rows`); other shapes use all rows.
CPU_ROW_CAPS: dict[tuple[str, str], int] = {
    ("fashion_mnist", "med"): 5_000,
    ("covtype", "large"): 5_000,
    ("fashion_mnist", "large"): 2_000,
}
MODEL_DIR = Path(__file__).resolve().parent / ".models"
#: Version of the synthetic data generators (part of the model cache key).
DATA_VERSION = 3
ETA = 0.01
#: Seed of the fixed parts of each synthetic world (terrain, towns, capital amounts); the
#: ``seed`` of :func:`make_data` draws the rows.
_WORLD_SEED = 20_201_021


def _spec(name: str) -> tuple[int, int, str, int]:
    if name in DATASETS:
        return DATASETS[name]
    if name in REAL_DATASETS:
        return REAL_DATASETS[name]
    known = ", ".join([*DATASETS, *REAL_DATASETS])
    raise ValueError(f"unknown data set {name!r}: use one of {known}")


def _check_name(name: str) -> None:
    _spec(name)


def _check_size(size: str) -> None:
    if size not in SIZES:
        raise ValueError(f"unknown model size {size!r}: use one of {', '.join(SIZES)}")


def _world(tag: int) -> np.random.Generator:
    return np.random.default_rng([_WORLD_SEED, tag])


def _pick(rng: np.random.Generator, weights, n: int) -> np.ndarray:
    p = np.asarray(weights, dtype=np.float64)
    return rng.choice(p.size, n, p=p / p.sum())


# --------------------------------------------------------------------------------------------
# adult
# --------------------------------------------------------------------------------------------
# Category codes are the alphabetical codes of the real columns' values; weights in percent.
#: education code -> education-num (10th = 6, ..., Preschool = 1, Some-college = 10)
_EDU_NUM = np.array([6, 7, 8, 2, 3, 4, 5, 12, 11, 13, 16, 9, 14, 1, 15, 10])
_EDU_W = [2.8, 3.7, 1.3, 0.5, 1.0, 2.0, 1.5, 3.3, 4.2, 16.4, 1.2, 32.3, 5.4, 0.2, 1.7, 22.3]
_WORK_W = [5.7, 2.9, 6.4, 0.02, 69.4, 3.5, 7.9, 4.1, 0.04]  # ?, Federal-gov, ..., Without-pay
_OCC_W = [5.8, 12.5, 0.03, 12.5, 12.5, 3.1, 4.2, 6.2, 10.1, 0.5, 12.6, 2.0, 11.3, 3.0, 4.8]
_RACE_W = [1.0, 3.1, 9.6, 0.8, 85.5]


@functools.lru_cache(maxsize=1)
def _adult_world():
    w = _world(1)
    # capital-gain and capital-loss take about a hundred distinct amounts each, as in the census
    gains = np.r_[np.unique(np.round(w.lognormal(8.4, 0.9, 118))), 99_999.0]
    gain_w = w.dirichlet(np.full(gains.size, 0.5))
    losses = np.unique(np.round(w.normal(1900, 350, 95)).clip(150, 4400))
    loss_w = w.dirichlet(np.full(losses.size, 0.5))
    country_w = np.r_[1.8, w.dirichlet(np.full(40, 0.4)) * 8.5, 89.7]  # ?, 40 others, US
    occ_effect = w.normal(0, 0.45, 15)
    occ_effect[[3, 10]] = [0.9, 0.8]  # Exec-managerial, Prof-specialty
    occ_effect[[8, 9, 6]] = [-1.0, -1.5, -0.7]  # Other-service, Priv-house-serv, Handlers
    country_effect = w.normal(0, 0.35, 42)
    return gains, gain_w, losses, loss_w, country_w, occ_effect, country_effect


def _adult(n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    gains, gain_w, losses, loss_w, country_w, occ_effect, country_effect = _adult_world()
    age = np.minimum(17 + np.floor(rng.gamma(2.5, 8.7, n)), 90)
    sex = (rng.random(n) < 0.668).astype(np.float64)  # 1 = Male
    education = _pick(rng, _EDU_W, n)
    edu_num = _EDU_NUM[education].astype(np.float64)
    # marital status by age: 0 Divorced, 1 Married-AF-spouse, 2 Married-civ-spouse,
    # 3 Married-spouse-absent, 4 Never-married, 5 Separated, 6 Widowed
    young = np.clip((35 - age) / 18, 0, 1)
    old = np.clip((age - 55) / 30, 0, 1)
    p_never = 0.1 + 0.85 * young
    p_widow = 0.01 + 0.3 * old
    rest = 1 - p_never - p_widow
    u = rng.random(n)
    marital = np.full(n, 2)
    edge = p_never
    marital[u < edge] = 4
    for code, p in ((6, p_widow), (0, 0.22 * rest), (5, 0.05 * rest), (3, 0.02 * rest)):
        marital[(u >= edge) & (u < edge + p)] = code
        edge = edge + p
    marital[(marital == 2) & (rng.random(n) < 0.002)] = 1
    # relationship: 0 Husband, 1 Not-in-family, 2 Other-relative, 3 Own-child, 4 Unmarried,
    # 5 Wife; a married person is mostly the husband (a man) or the wife (a woman)
    married = np.isin(marital, [1, 2])
    u = rng.random(n)
    single = np.where(
        u < 0.55 * young + 0.03, 3, np.where(u < 0.55 * young + 0.1, 2, np.where(u < 0.7, 1, 4))
    )
    relationship = np.where(married, np.where(rng.random(n) < 0.9, 0, 5), single)
    sex = np.where(married, (relationship == 0).astype(np.float64), sex)
    sex = np.where(relationship == 4, (rng.random(n) < 0.25).astype(np.float64), sex)
    workclass = _pick(rng, _WORK_W, n)
    occupation = _pick(rng, _OCC_W, n)
    skilled = rng.random(n) < np.clip((edu_num - 9) / 8, 0, 0.8)
    occupation = np.where(skilled, rng.choice([3, 10, 12, 13], n), occupation)
    occupation = np.where(workclass == 0, 0, occupation)  # "?" workclass, "?" occupation
    race = _pick(rng, _RACE_W, n)
    country = _pick(rng, country_w, n)
    fnlwgt = np.round(rng.lognormal(12.05, 0.52, n))
    hours = np.where(rng.random(n) < 0.47, 40.0, np.clip(np.round(rng.normal(41, 13, n)), 1, 99))
    hours = np.where(age > 65, np.minimum(hours, np.round(rng.uniform(5, 45, n))), hours)
    # capital gains and losses (more common for the educated, older and married): about a
    # hundred distinct amounts each
    rate = 1 / (1 + np.exp(3.4 - 0.25 * (edu_num - 9) - 0.8 * married - 0.02 * (age - 38)))
    gain = np.where(rng.random(n) < rate, gains[_pick(rng, gain_w, n)], 0.0)
    loss = np.where(rng.random(n) < 0.6 * rate, losses[_pick(rng, loss_w, n)], 0.0)
    # income over 50K (about 24% of the records): a score of marriage, schooling, age, hours
    # and work; large gains and losses near 1,900 nearly settle it, as do small gains and
    # youth the other way (pure regions: the real data's trees stop early there)
    score = 1.5 * (
        -6.3
        + 2.1 * married
        + 0.33 * (edu_num - 9)
        + 3.0 * (1 - np.exp(-(age - 17) / 9))
        - 0.04 * np.maximum(age - 58, 0)
        - 1.5 * (relationship == 3)
        + 0.035 * np.clip(hours - 40, -30, 30)
        + occ_effect[occupation]
        + 0.3 * sex
        + 0.4 * np.isin(workclass, [1, 5])
        + country_effect[country]
        + 0.25 * (race == 4)
    )
    score += 6.0 * (gain >= 7000) - 1.0 * ((gain > 0) & (gain < 5000))
    score += 2.0 * ((loss >= 1800) & (loss < 2000)) - 4.0 * (age < 22)
    rich = rng.random(n) < 1 / (1 + np.exp(-score))
    X = np.column_stack(
        [age, workclass, fnlwgt, education, edu_num, marital, occupation, relationship,
         race, sex, gain, loss, hours, country]
    )  # fmt: skip
    return X, rich.astype(np.float32)


# --------------------------------------------------------------------------------------------
# cal_housing
# --------------------------------------------------------------------------------------------


#: Standard deviation of the price noise (in 100,000s).
_CAL_NOISE = 0.35


@functools.lru_cache(maxsize=1)
def _cal_towns() -> np.ndarray:
    """Towns: latitude, longitude, spread (degrees), share of block groups, price level."""
    w = _world(2)
    big = np.array(
        [[34.05, -118.25, 0.45, 30, 0.6], [37.75, -122.2, 0.35, 18, 1.1],
         [32.8, -117.1, 0.25, 8, 0.5], [38.55, -121.4, 0.25, 5, -0.3],
         [36.75, -119.8, 0.3, 4, -0.6], [33.8, -117.9, 0.3, 10, 0.7]]
    )  # fmt: skip
    m = 60
    small = np.column_stack(
        [w.uniform(32.6, 41.8, m), w.uniform(-124.2, -114.5, m), w.uniform(0.05, 0.3, m),
         w.gamma(1.0, 0.6, m), w.normal(-0.4, 0.5, m)]
    )  # fmt: skip
    small[:, 1] = np.minimum(small[:, 1], -114.4 - (small[:, 0] - 32.5) * 0.85)  # the border
    return np.r_[big, small]


def _cal_housing(n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    towns = _cal_towns()
    t = _pick(rng, towns[:, 3], n)
    lat = np.clip(towns[t, 0] + rng.normal(0, 1, n) * towns[t, 2], 32.54, 41.95).round(2)
    lon = np.clip(towns[t, 1] + rng.normal(0, 1, n) * towns[t, 2], -124.35, -114.31).round(2)
    income = np.round(rng.lognormal(1.25, 0.45, n) + 0.15 * towns[t, 4], 4).clip(0.4999, 15.0001)
    age = np.minimum(np.floor(rng.uniform(1, 60, n)), 52)  # capped at 52, as in the census
    rooms = rng.lognormal(1.62, 0.22, n) + 0.25 * (income - 3.8).clip(-2, 6)
    bedrooms = rooms * rng.uniform(0.17, 0.24, n) + rng.normal(0, 0.03, n).clip(-0.05)
    population = np.round(rng.lognormal(7.05, 0.72, n))
    occupancy = rng.lognormal(1.0, 0.28, n)
    X = np.column_stack([income, age, rooms, bedrooms, population, occupancy, lat, lon])
    inland = np.maximum(lon + 124.3 - 0.75 * (42 - lat), 0)  # degrees east of the coast line
    y = (
        -0.35
        + 0.38 * income
        + 0.8 * towns[t, 4]
        + 1.2 * np.exp(-inland / 0.8)
        + 0.008 * age
        - 0.25 * np.log(occupancy)
        + 0.1 * np.sin(rooms)
        + rng.normal(0, _CAL_NOISE, n)
    )
    return X, np.clip(y, 0.14999, 5.00001).astype(np.float32)  # in 100,000s, capped


# --------------------------------------------------------------------------------------------
# covtype
# --------------------------------------------------------------------------------------------
#: The four wilderness areas (Rawah, Neota, Comanche Peak, Cache la Poudre): share of the
#: cells, side of the square in km, mean elevation in m.
_COV_AREAS = np.array([[0.449, 14.0, 3050.0], [0.051, 5.0, 3350.0], [0.436, 14.0, 2950.0],
                       [0.064, 6.0, 2350.0]])  # fmt: skip
#: Cover types 1..7 (spruce/fir, lodgepole pine, ponderosa pine, cottonwood/willow, aspen,
#: Douglas-fir, krummholz): elevation optimum and width in m, share of the cells.
_COV_TYPES = np.array([[3150, 190, 0.365], [2930, 200, 0.488], [2400, 170, 0.062],
                       [2200, 110, 0.005], [2820, 130, 0.016], [2420, 190, 0.030],
                       [3380, 150, 0.035]])  # fmt: skip
#: Forest stands per km^2 (the label's spatial grain) and the share of cells whose type is
#: drawn afresh instead of being their stand's.
_COV_STANDS_PER_KM2 = 60
_COV_NOISE = 0.05
_COV_SHARPNESS = 3.0
#: Sun azimuth and zenith (degrees) at 9am, noon and 3pm, for the hill shades.
_COV_SUN = np.radians([[120.0, 35.0], [180.0, 25.0], [240.0, 56.0]])


class _Terrain:
    """A smooth random surface (m over km): plane waves with a 1/f amplitude spectrum."""

    def __init__(self, w: np.random.Generator, waves: int, fmin: float, fmax: float, sd: float):
        f = np.exp(w.uniform(np.log(fmin), np.log(fmax), waves))  # cycles per km
        theta = w.uniform(0, 2 * np.pi, waves)
        self.kx = 2 * np.pi * f * np.cos(theta)
        self.ky = 2 * np.pi * f * np.sin(theta)
        a = w.normal(0, 1, waves) / f
        self.a = a * sd / np.sqrt(0.5 * np.sum(a**2))
        self.phi = w.uniform(0, 2 * np.pi, waves)

    def height(self, x: np.ndarray, y: np.ndarray) -> np.ndarray:
        out = np.zeros(x.shape)
        for kx, ky, a, phi in zip(self.kx, self.ky, self.a, self.phi, strict=True):
            out += a * np.cos(kx * x + ky * y + phi)
        return out

    def gradient(self, x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        gx, gy = np.zeros(x.shape), np.zeros(x.shape)
        for kx, ky, a, phi in zip(self.kx, self.ky, self.a, self.phi, strict=True):
            s = a * np.sin(kx * x + ky * y + phi)
            gx -= kx * s
            gy -= ky * s
        return gx, gy


@functools.lru_cache(maxsize=1)
def _covtype_world() -> list[dict]:
    """Per wilderness area: terrain, streams, roads, fire points, soil and stand polygons."""
    from scipy.spatial import cKDTree

    w = _world(3)
    soil_w = w.dirichlet(np.full(40, 0.5))
    soil_effect = w.normal(0, 0.8, (40, 7))
    opt, width, share = _COV_TYPES.T
    areas = []
    for a, (_, side, base) in enumerate(_COV_AREAS):
        terrain = _Terrain(w, 48, 0.05, 3.0, 260.0)
        km2 = side * side
        streams = w.uniform(0, side, (int(4 * km2), 2))
        roads = w.uniform(0, side, (int(0.05 * km2) + 2, 2))
        fires = w.uniform(0, side, (int(0.07 * km2) + 2, 2))
        # soil polygons: the type follows the elevation, with a polygon's own offset
        soil_xy = w.uniform(0, side, (int(3 * km2), 2))
        q = np.clip((base + terrain.height(*soil_xy.T) - 1900) / 2000, 0, 0.999)
        offset = np.cumsum(soil_w)[w.integers(0, 40, len(soil_xy))] - 0.5
        soil = (np.floor(q * 40 + 12 * offset) % 40).astype(np.int64)
        # forest stands: scores of the cover types at the stand's centre
        stand_xy = w.uniform(0, side, (int(_COV_STANDS_PER_KM2 * km2), 2))
        e = base + terrain.height(*stand_xy.T)
        stand_soil = soil[cKDTree(soil_xy).query(stand_xy)[1]]
        score = -0.5 * ((e[:, None] - opt) / width) ** 2 + soil_effect[stand_soil]
        if a != 3:
            score[:, 3] -= 8.0  # cottonwood/willow grows in Cache la Poudre only
        areas.append(
            {
                "side": side,
                "base": base,
                "terrain": terrain,
                "streams": cKDTree(streams),
                "stream_height": terrain.height(*streams.T),
                "roads": cKDTree(roads),
                "fires": cKDTree(fires),
                "soil_polygons": cKDTree(soil_xy),
                "soil": soil,
                "stands": cKDTree(stand_xy),
                "score": _COV_SHARPNESS * score,
            }
        )
    # one offset per type so that the types take their real shares of the cells
    weights = [np.full(len(ar["score"]), _COV_AREAS[i, 0] / len(ar["score"]))
               for i, ar in enumerate(areas)]  # fmt: skip
    bias = np.log(share)
    for _ in range(50):
        got = sum(wt @ _softmax(ar["score"] + bias) for wt, ar in zip(weights, areas, strict=True))
        bias += np.log(share / got)
    for ar in areas:
        cdf = np.cumsum(_softmax(ar.pop("score") + bias), 1)
        ar["stand_cdf"] = cdf
        ar["stand_type"] = (w.random(len(cdf))[:, None] > cdf).sum(1)
    return areas


def _softmax(s: np.ndarray) -> np.ndarray:
    p = np.exp(s - s.max(1, keepdims=True))
    return p / p.sum(1, keepdims=True)


def _covtype(n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    X = np.zeros((n, 54))
    y = np.zeros(n, dtype=np.float32)
    area = _pick(rng, _COV_AREAS[:, 0], n)
    for a, world in enumerate(_covtype_world()):
        rows = np.flatnonzero(area == a)
        m = rows.size
        if m == 0:
            continue
        xy = rng.uniform(0, world["side"], (m, 2))
        x, yy = xy.T
        terrain = world["terrain"]
        elevation = world["base"] + terrain.height(x, yy)
        gx, gy = terrain.gradient(x, yy)  # m per km
        slope = np.degrees(np.arctan(np.hypot(gx, gy) * 1.1e-3))
        aspect = np.degrees(np.arctan2(-gx, -gy)) % 360  # the downhill direction
        d, i = world["streams"].query(xy)
        h_hydro = 1000 * d
        v_hydro = elevation - world["base"] - world["stream_height"][i]
        v_hydro = np.clip(0.8 * v_hydro + 45 + rng.normal(0, 15, m), -173, 601)
        h_road = 1000 * world["roads"].query(xy)[0]
        h_fire = 1000 * world["fires"].query(xy)[0]
        s, asp = np.radians(slope), np.radians(aspect)
        shades = [
            np.clip(255 * (np.cos(zen) * np.cos(s) + np.sin(zen) * np.sin(s) * np.cos(az - asp)),
                    0, 254)
            for az, zen in _COV_SUN
        ]  # fmt: skip
        soil = world["soil"][world["soil_polygons"].query(xy)[1]]
        stand = world["stands"].query(xy)[1]
        cover = world["stand_type"][stand]  # a copy
        redraw = np.flatnonzero(rng.random(m) < _COV_NOISE)
        cdf = world["stand_cdf"][stand[redraw]]
        cover[redraw] = (rng.random(redraw.size)[:, None] > cdf).sum(1)
        X[rows, :10] = np.column_stack(
            [elevation, aspect, slope, h_hydro, v_hydro, h_road, *shades, h_fire]
        ).round()
        X[rows, 10 + a] = 1.0
        X[rows, 14 + soil] = 1.0
        y[rows] = 1 + np.minimum(cover, 6)  # labels 1..7, class 0 unused (as in the real data)
    return X, y


# --------------------------------------------------------------------------------------------
# fashion_mnist
# --------------------------------------------------------------------------------------------
#: Pixel noise on the ink; the items' offsets (pixels, each way) and size changes grow with
#: the jitter. Labels are exact: ambiguous or flipped labels keep the deep trees of the large
#: model big through all its rounds (the paper's shrink).
_FASHION_NOISE = 0.1
_FASHION_JITTER = 4.0


def _trapezoid(rr, cc, top, bottom, l0, r0, l1, r1) -> np.ndarray:
    """Soft mask of the rows top..bottom between columns l..r (interpolated top to bottom)."""
    t = np.clip((rr - top) / np.maximum(bottom - top, 1), 0, 1)
    left = l0 + (l1 - l0) * t
    right = r0 + (r1 - r0) * t
    d = np.minimum(np.minimum(rr - top, bottom - rr), np.minimum(cc - left, right - cc))
    return np.clip(d + 0.5, 0, 1)


def _garments(c: int, m: int, rng: np.random.Generator, rr, cc) -> np.ndarray:
    """Ink (m, 28, 28) in [0, 1] of ``m`` items of class ``c``, each with its own proportions.

    Classes: 0 T-shirt, 1 trouser, 2 pullover, 3 dress, 4 coat, 5 sandal, 6 shirt, 7 sneaker,
    8 bag, 9 ankle boot.
    """

    def u(lo, hi):
        return rng.uniform(lo, hi, (m, 1, 1))

    mid = u(12.5, 14.5)
    if c in (0, 2, 4, 6):  # tops: a torso and two sleeves (short for the T-shirt)
        half = u(5.5, 8.5)
        top = u(1.5, 4.5)
        bottom = u(23.5, 27.0) if c == 4 else u(21.5, 26.0)
        flare = u(0, 1.5)
        ink = _trapezoid(rr, cc, top, bottom, mid - half, mid + half, mid - half - flare,
                         mid + half + flare)  # fmt: skip
        length = u(5, 15) if c == 0 else bottom - top - u(0, 8)
        spread = u(3, 6) if c == 0 else u(2.5, 4.5)
        gap = u(0.0, 1.0)
        lo, hi = mid - half - gap, mid + half + gap
        ink = np.maximum(
            ink, _trapezoid(rr, cc, top + 0.5, top + length, lo - spread, lo + 1.0,
                            lo - spread - u(0, 2), lo)
        )  # fmt: skip
        ink = np.maximum(
            ink, _trapezoid(rr, cc, top + 0.5, top + length, hi - 1.0, hi + spread, hi,
                            hi + spread + u(0, 2))
        )  # fmt: skip
        neck = _trapezoid(rr, cc, top - 1, top + u(1.0, 3.5), mid - u(1.5, 3), mid + u(1.5, 3),
                          mid - 0.5, mid + 0.5)  # fmt: skip
        ink = ink * (1 - neck)
        # a zip or buttons (most coats and shirts, a few pullovers): a darker middle line
        if c == 4:  # coat: a zip
            line = (np.abs(cc - mid) < 0.6) & (rr > top + 2)
            ink = ink * np.where(line, u(0.2, 0.5), 1.0)
        if c == 6:  # shirt: buttons
            line = (np.abs(cc - mid) < 0.8) & (rr > top + 2) & ((rr % 4) < 1.5)
            ink = ink * np.where(line, u(0.2, 0.5), 1.0)
        return ink
    if c == 1:  # trouser: a waist and two legs
        half, gap = u(4.0, 6.0), u(0.5, 2.0)
        top, bottom = u(0.5, 3.0), u(25.0, 27.5)
        waist = _trapezoid(rr, cc, top, top + u(3, 6), mid - half, mid + half, mid - half,
                           mid + half)  # fmt: skip
        left = _trapezoid(rr, cc, top, bottom, mid - half, mid - gap / 2,
                          mid - half - u(0, 1.5), mid - gap / 2)  # fmt: skip
        right = _trapezoid(rr, cc, top, bottom, mid + gap / 2, mid + half, mid + gap / 2,
                           mid + half + u(0, 1.5))  # fmt: skip
        return np.maximum(waist, np.maximum(left, right))
    if c == 3:  # dress: narrow top, wide skirt
        top, bottom = u(0.5, 3.0), u(24.5, 27.5)
        return _trapezoid(rr, cc, top, bottom, mid - u(2.5, 5), mid + u(2.5, 5),
                          mid - u(6, 11), mid + u(6, 11))  # fmt: skip
    if c == 8:  # bag: a box and a handle
        top, bottom, half = u(8, 14), u(22, 27), u(7, 12)
        box = _trapezoid(rr, cc, top, bottom, mid - half, mid + half, mid - half, mid + half)
        ring = np.hypot((rr - top) / u(4, 8), (cc - mid) / u(4, 7))
        handle = np.clip(1.2 - 5 * np.abs(ring - 1), 0, 1) * (rr < top)
        return np.maximum(box, handle)
    # shoes, toe on the left: a sole and, by class, straps, a low upper or a shaft
    sole_top, sole_bottom = u(17, 21), u(22, 25.5)
    left, right = u(1, 4), u(24, 27)
    sole = _trapezoid(rr, cc, sole_top, sole_bottom, left, right, left + u(0, 2), right)
    if c == 5:  # sandal
        ink = sole * u(0.6, 1.0)
        closed = u(0, 1) < 0.2  # some sandals have a closed heel or toe
        ink = np.maximum(
            ink,
            closed * _trapezoid(rr, cc, u(11, 16), sole_top + 1, u(3, 14), u(12, 25), left, right),
        )
        for _ in range(3):
            row = u(9, 19)
            ink = np.maximum(
                ink, _trapezoid(rr, cc, row, row + u(0.8, 2.2), u(4, 10), u(14, 26), u(4, 10),
                                u(14, 26))
            )  # fmt: skip
        return ink
    if c == 7:  # sneaker
        upper = _trapezoid(rr, cc, u(8, 14), sole_top + 1, u(8, 13), right - u(0, 3), left, right)
        return np.maximum(sole, upper)
    shaft = _trapezoid(rr, cc, u(4, 11), sole_top + 1, u(11, 16), right - u(0, 2), u(5, 10), right)
    return np.maximum(sole, shaft)  # ankle boot


def _fashion_mnist(n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    side = 28
    rr, cc = np.mgrid[0:side, 0:side].astype(np.float64)
    y = rng.integers(0, 10, n)
    X = np.empty((n, side * side), dtype=np.float32)
    for c in range(10):
        rows = np.flatnonzero(y == c)
        for start in range(0, rows.size, 4096):
            idx = rows[start : start + 4096]
            m = idx.size
            # each item placed with its own offset and size
            dy = rng.uniform(-_FASHION_JITTER, _FASHION_JITTER, (m, 1, 1))
            dx = rng.uniform(-_FASHION_JITTER, _FASHION_JITTER, (m, 1, 1))
            zoom = rng.uniform(1 - 0.08 * _FASHION_JITTER, 1 + 0.04 * _FASHION_JITTER, (m, 1, 1))
            ink = _garments(
                c, m, rng, 13.5 + (rr - 13.5 - dy) / zoom, 13.5 + (cc - 13.5 - dx) / zoom
            )
            # the fabric: a shade, a light gradient, a printed pattern and pixel noise
            shade = rng.uniform(0.25, 1.0, (m, 1, 1))
            ramp = 1 + rng.uniform(-0.3, 0.3, (m, 1, 1)) * (rr - 14) / 14
            freq = rng.uniform(0.3, 1.6, (m, 1, 1))
            angle = rng.uniform(0, np.pi, (m, 1, 1))
            phase = rng.uniform(0, 2 * np.pi, (m, 1, 1))
            pattern = rng.uniform(0, 0.35, (m, 1, 1)) * np.sin(
                freq * (np.cos(angle) * rr + np.sin(angle) * cc) + phase
            )
            img = ink * shade * ramp * (1 + pattern) + ink * rng.normal(
                0, _FASHION_NOISE, ink.shape
            )
            img = np.where(ink > 0.05, np.clip(img, 0.02, 1.0), 0.0)
            X[idx] = np.round(255 * img).reshape(m, -1)
    return X, y.astype(np.float32)


# --------------------------------------------------------------------------------------------
# Real data bundled with scikit-learn
# --------------------------------------------------------------------------------------------


@functools.cache
def _load_real(name: str) -> tuple[np.ndarray, np.ndarray]:
    from sklearn import datasets

    loader = {
        "digits": datasets.load_digits,
        "breast_cancer": datasets.load_breast_cancer,
        "diabetes": datasets.load_diabetes,
    }[name]
    X, y = loader(return_X_y=True)
    return np.asarray(X, dtype=np.float32), np.asarray(y, dtype=np.float32)


def _real_rows(name: str, n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """All rows in file order (``n`` = the data set's rows, seed 0), else a seeded sample."""
    X, y = _load_real(name)
    if n == len(X) and seed == 0:
        return X.copy(), y.copy()
    rng = np.random.default_rng(seed)
    idx = rng.permutation(len(X))[:n] if n <= len(X) else rng.integers(0, len(X), n)
    return X[idx], y[idx]


_MAKERS = {
    "adult": _adult,
    "cal_housing": _cal_housing,
    "covtype": _covtype,
    "fashion_mnist": _fashion_mnist,
}


def make_data(name: str, n_rows: int | None = None, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Rows of data set ``name``: synthetic of the paper's data set's shape, or real.

    Parameters
    ----------
    name : {"adult", "cal_housing", "covtype", "fashion_mnist"} or a :data:`REAL_DATASETS` name
    n_rows : int, optional
        Rows to generate (default: the data set's row count). For a real data set, fewer rows
        are a seeded sample without replacement and more rows a seeded sample with replacement;
        the default with ``seed=0`` is the whole data set in its order.
    seed : int
        Random seed; the same seed and rows give the same data. The fixed parts of a synthetic
        world (terrain, towns, garment classes) do not depend on it.

    Returns
    -------
    X : float32 (n_rows, n_cols)
    y : float32 (n_rows,)
        0/1 labels (adult, breast_cancer), targets (cal_housing, diabetes) or class labels
        (covtype 1..7, fashion_mnist and digits 0..9).
    """
    rows, cols, _, _ = _spec(name)
    n = rows if n_rows is None else int(n_rows)
    if n < 1:
        raise ValueError(f"n_rows must be >= 1, got {n_rows}")
    if name in REAL_DATASETS:
        X, y = _real_rows(name, n, seed)
    else:
        X, y = _MAKERS[name](n, np.random.default_rng(seed))
    X = np.ascontiguousarray(X, dtype=np.float32)
    assert X.shape == (n, cols)
    return X, np.asarray(y, dtype=np.float32)


# --------------------------------------------------------------------------------------------
# Models
# --------------------------------------------------------------------------------------------


def params(name: str, size: str, device: str = "cpu") -> dict:
    """XGBoost training parameters of shape ``(name, size)``."""
    _, _, objective, classes = _spec(name)
    _check_size(size)
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
    paper's full row count. Real data sets always use all their rows.
    """
    rows = _spec(name)[0]
    _check_size(size)
    if name in REAL_DATASETS:
        return rows
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
    _check_name(name)
    _check_size(size)
    n = default_rows(name, size) if n_rows is None else int(n_rows)
    return MODEL_DIR / f"{name}-{size}-{n}-v{DATA_VERSION}.ubj"


def cpu_intercept(y: np.ndarray, train_params: dict) -> list[float]:
    """The starting margins XGBoost's CPU gives a model trained with ``train_params`` on the
    labels ``y`` (one a class for a multiclass objective).

    XGBoost computes the intercept from the labels alone, so one boosting round on a single
    constant feature gives it in a moment. Passed as ``base_score``, it makes a GPU-trained
    multiclass model start where the CPU's would (module docstring).
    """
    import json

    import xgboost as xgb

    p = dict(train_params, device="cpu", max_depth=1)
    p.pop("base_score", None)
    booster = xgb.train(p, xgb.DMatrix(np.zeros((len(y), 1), np.float32), label=y), 1)
    text = json.loads(booster.save_config())["learner"]["learner_model_param"]["base_score"]
    return [float(v) for v in text.strip("[]").split(",")]


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
    name : {"adult", "cal_housing", "covtype", "fashion_mnist"} or a :data:`REAL_DATASETS` name
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
    p = params(name, size, device)
    if device != "cpu" and "num_class" in p:
        p["base_score"] = cpu_intercept(y, p)  # (module docstring: multiclass intercepts)
    booster = xgb.train(p, dtrain, num_boost_round=ROUNDS[size])
    seconds = time.perf_counter() - start
    booster.set_param({"device": "cpu"})
    booster.set_attr(
        distshap_rows=str(n), distshap_device=device, distshap_seconds=f"{seconds:.1f}"
    )
    if verbose:
        print(f"trained {name}-{size} on {n} rows ({device}) in {seconds:.1f} s", flush=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.stem}.{os.getpid()}.tmp.ubj")  # the suffix picks the format
    booster.save_model(tmp)
    os.replace(tmp, path)
    return booster


# --------------------------------------------------------------------------------------------
# Leaf counts beside the paper's Table 3
# --------------------------------------------------------------------------------------------


def _leaves_per_tree(booster) -> np.ndarray:
    import json

    model = json.loads(booster.save_raw("json"))
    trees = model["learner"]["gradient_booster"]["model"]["trees"]
    return np.array([np.count_nonzero(np.asarray(t["left_children"]) < 0) for t in trees])


def model_stats(booster) -> dict:
    """Trees, leaves, merged paths and their mean length (features per path) of a model."""
    from distshap.models import load_model
    from distshap.paths import extract_paths

    ensemble = load_model(booster)
    paths = extract_paths(ensemble)
    return {
        "trees": ensemble.num_trees,
        "leaves": int(np.count_nonzero(ensemble.is_leaf())),
        "paths": paths.num_paths,
        "mean_path_length": float(np.mean(paths.lengths)) if paths.num_paths else 0.0,
    }


def estimate_leaves(
    name: str,
    size: str,
    n_rows: int | None = None,
    device: str | None = None,
    step: int = 200,
    ff_eta: float = 0.25,
    probe: int = 2,
    verbose: bool = False,
) -> dict:
    """Estimate the leaf count of a full-size model from a fast-forwarded short run.

    Leaves per tree change along the training (large trees shrink as the model fits its
    data), so the first rounds alone mislead. This trains ``probe`` rounds at the shape's
    ``eta`` (0.01) and measures their leaves per tree, then skips ahead ``step`` rounds'
    worth of learning with ``step * 0.01 / ff_eta`` rounds at ``eta = ff_eta``, probes
    again, and so on to the shape's rounds; the leaves per tree, integrated over the rounds
    (trapezoids, flat after the last probe), times the trees per round, is the estimate. It
    needs about 1/20 of the full training (42 of 1000 rounds with the defaults). Checked
    here against full CPU runs with ``ff_eta=0.25``: adult-large 778 vs 782 leaves per tree;
    with ``ff_eta=0.1`` cal_housing-large within 10%.

    Returns
    -------
    dict
        ``leaves`` (the estimate), ``trees`` (of the full model), ``points`` (equivalent
        round, leaves per tree) and ``seconds``.
    """
    import xgboost as xgb

    _check_size(size)
    n = default_rows(name, size) if n_rows is None else int(n_rows)
    if device is None:
        device = os.environ.get("DISTSHAP_BENCH_DEVICE", "cpu")
    if not 0 < probe < step or not ETA < ff_eta <= 1:
        raise ValueError(
            f"need 0 < probe < step and {ETA} < ff_eta <= 1, got probe={probe}, step={step}, "
            f"ff_eta={ff_eta}"
        )
    total = ROUNDS[size]
    X, y = make_data(name, n)
    start = time.perf_counter()
    dtrain = xgb.DMatrix(X, label=y)
    p = params(name, size, device)
    groups = max(1, p.get("num_class", 1))
    booster, done, points = None, 0.0, []
    while done < total:
        p["eta"] = ETA
        booster = xgb.train(p, dtrain, num_boost_round=probe, xgb_model=booster)
        per_tree = float(np.mean(_leaves_per_tree(booster)[-probe * groups :]))
        points.append((done, per_tree))
        if verbose:
            print(f"  {name}-{size} at ~{done:.0f} rounds: {per_tree:.1f} leaves per tree",
                  flush=True)  # fmt: skip
        done += probe
        skip = step - probe
        if done + skip >= total:  # no probe would follow
            break
        p["eta"] = ff_eta
        ff_rounds = max(1, round(skip * ETA / ff_eta))
        booster = xgb.train(p, dtrain, num_boost_round=ff_rounds, xgb_model=booster)
        done += ff_rounds * ff_eta / ETA
    x = np.array([r for r, _ in points] + [total], dtype=np.float64)
    v = np.array([leaves for _, leaves in points] + [points[-1][1]])
    per_round = float(np.sum((v[1:] + v[:-1]) / 2 * np.diff(np.minimum(x, total))))
    return {
        "leaves": per_round * groups,
        "trees": total * groups,
        "points": points,
        "seconds": time.perf_counter() - start,
    }


def leaf_table(
    shapes=SHAPES,
    n_rows: int | str | None = None,
    device: str | None = None,
    retrain: bool = False,
    estimate: bool = False,
    verbose: bool = False,
) -> list[dict]:
    """Train (or load) each shape and compare its trees and leaves with the paper's Table 3.

    Parameters
    ----------
    shapes : iterable of (name, size)
    n_rows : int or "full", optional
        Training rows (default :func:`default_rows`, which caps some shapes on CPU).
    device, retrain, verbose
        As for :func:`train_model`.
    estimate : bool
        For ``large`` shapes, :func:`estimate_leaves` instead of training the full model
        (``estimated`` is then True and ``paths`` / ``mean_path_length`` are None).

    Returns
    -------
    list of dict
        Per shape: ``shape``, ``rows``, ``trees``, ``leaves``, ``paths``,
        ``mean_path_length`` (merged features per path), ``estimated``, ``paper_trees``,
        ``paper_leaves``, ``paper_mean_path_length`` (from Table 5's utilisation without
        packing) and ``ratio`` (``leaves / paper_leaves``); the paper's are None for the real
        data sets.
    """
    out = []
    for name, size in shapes:
        full_rows = _spec(name)[0]
        if n_rows == "full":
            n = full_rows
        elif n_rows is None:
            n = default_rows(name, size)
        else:
            n = min(int(n_rows), full_rows)
        if estimate and size == "large":
            est = estimate_leaves(name, size, n, device=device, verbose=verbose)
            stats = {
                "trees": est["trees"],
                "leaves": est["leaves"],
                "paths": None,
                "mean_path_length": None,
            }
        else:
            booster = train_model(name, size, n, device=device, retrain=retrain, verbose=verbose)
            stats = model_stats(booster)
        paper = PAPER_TABLE3.get((name, size))
        none = PAPER_TABLE5.get((f"{name}-{size}", "none"))
        out.append(
            {
                "shape": f"{name}-{size}",
                "rows": n,
                **stats,
                "estimated": stats["paths"] is None,
                "paper_trees": paper[0] if paper else None,
                "paper_leaves": paper[1] if paper else None,
                # Table 5's unpacked utilisation is mean(features + 1) / 32
                "paper_mean_path_length": 32 * none[1] - 1 if none else None,
                "ratio": stats["leaves"] / paper[1] if paper else None,
            }
        )
        if verbose:
            print(format_leaf_table(out[-1:], header=False), flush=True)
    return out


def format_leaf_table(rows: list[dict], header: bool = True) -> str:
    """Markdown table of :func:`leaf_table` records (``~``: estimated, to verify)."""
    lines = []
    if header:
        lines += [
            "| shape | rows | trees | leaves | paths | mean path | paper trees | paper leaves "
            "| paper mean path | leaves ours / paper |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
    for r in rows:
        est = "~" if r["estimated"] else ""
        name = r["shape"].rsplit("-", 1)[0]
        rows_txt = f"{r['rows']:,}" + (" (capped)" if r["rows"] < _spec(name)[0] else "")
        paths = "" if r["paths"] is None else f"{r['paths']:,}"
        mean = "" if r["mean_path_length"] is None else f"{r['mean_path_length']:.2f}"
        paper_t = "" if r["paper_trees"] is None else f"{r['paper_trees']:,}"
        paper_l = "(real data)" if r["paper_leaves"] is None else f"{r['paper_leaves']:,}"
        pm = r["paper_mean_path_length"]
        paper_m = "" if pm is None else f"{pm:.2f}"
        ratio = "" if r["ratio"] is None else f"{est}{r['ratio']:.2f}"
        lines.append(
            f"| {r['shape']} | {rows_txt} | {r['trees']:,} | {est}{r['leaves']:,.0f} | {paths} "
            f"| {mean} | {paper_t} | {paper_l} | {paper_m} | {ratio} |"
        )
    return "\n".join(lines)


def _parse_shapes(items: list[str]) -> tuple[tuple[str, str], ...]:
    out = []
    for item in items:
        name, _, size = item.rpartition("-")
        _check_name(name)
        _check_size(size)
        out.append((name, size))
    return tuple(out)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Train and cache the paper's 12 model shapes.")
    parser.add_argument("--only", nargs="*", help="shapes as name-size, e.g. adult-med")
    parser.add_argument(
        "--real", action="store_true", help="the scikit-learn data sets' shapes, not the paper's"
    )
    parser.add_argument("--rows", help="training rows: an integer, or 'full'")
    parser.add_argument("--device", choices=["cpu", "cuda"], help="XGBoost device")
    parser.add_argument("--retrain", action="store_true")
    parser.add_argument(
        "--leaves", action="store_true", help="print trees / leaves / paths beside Table 3"
    )
    parser.add_argument(
        "--estimate",
        action="store_true",
        help="with --leaves: estimate the large shapes from a fast-forwarded short run",
    )
    args = parser.parse_args(argv)
    wanted = REAL_SHAPES if args.real else SHAPES
    if args.only:
        wanted = _parse_shapes(args.only)
    rows: int | str | None = None
    if args.rows == "full":
        rows = "full"
    elif args.rows:
        rows = int(args.rows)
    if args.leaves:
        table = leaf_table(wanted, rows, args.device, args.retrain, args.estimate, verbose=True)
        print()
        print(format_leaf_table(table))
        return
    for name, size in wanted:
        n = None
        if rows == "full":
            n = _spec(name)[0]
        elif rows is not None:
            n = min(int(rows), _spec(name)[0])
        booster = train_model(name, size, n, device=args.device, retrain=args.retrain, verbose=True)
        print(f"{name}-{size}: {booster.num_boosted_rounds()} rounds", flush=True)


if __name__ == "__main__":
    main()
