"""The paper's published numbers the benchmarks print beside their own.

``PAPER_TABLE3``: the model shapes (trees, leaves, depth) of the paper's Table 3, which
:mod:`benchmarks.shapes` trains towards; ``PAPER_TABLE5``: the bin packing of Table 5, which
:mod:`benchmarks.table5` reproduces.
"""

from __future__ import annotations

__all__ = ["PAPER_TABLE3", "PAPER_TABLE5"]

#: The paper's Table 3: (data set, size) -> (trees, leaves, max_depth).
PAPER_TABLE3: dict[tuple[str, str], tuple[int, int, int]] = {
    ("covtype", "small"): (80, 560, 3),
    ("covtype", "med"): (800, 113_888, 8),
    ("covtype", "large"): (8_000, 6_636_440, 16),
    ("cal_housing", "small"): (10, 80, 3),
    ("cal_housing", "med"): (100, 21_643, 8),
    ("cal_housing", "large"): (1_000, 3_317_209, 16),
    ("fashion_mnist", "small"): (100, 800, 3),
    ("fashion_mnist", "med"): (1_000, 144_154, 8),
    ("fashion_mnist", "large"): (10_000, 2_929_521, 16),
    ("adult", "small"): (10, 80, 3),
    ("adult", "med"): (100, 13_074, 8),
    ("adult", "large"): (1_000, 642_035, 16),
}

#: The paper's Table 5 (V100 host CPU, single thread): (shape, alg) -> (seconds, util, bins).
PAPER_TABLE5: dict[tuple[str, str], tuple[float, float, int]] = {
    ("covtype-small", "none"): (0.0018, 0.105246, 560),
    ("covtype-small", "nf"): (0.0041, 0.982292, 60),
    ("covtype-small", "ffd"): (0.0064, 0.998941, 59),
    ("covtype-small", "bfd"): (0.0086, 0.998941, 59),
    ("covtype-med", "none"): (0.0450, 0.211187, 113_533),
    ("covtype-med", "nf"): (0.0007, 0.913539, 26_246),
    ("covtype-med", "ffd"): (0.0104, 0.940338, 25_498),
    ("covtype-med", "bfd"): (0.0212, 0.940338, 25_498),
    ("covtype-large", "none"): (0.0346, 0.299913, 6_702_132),
    ("covtype-large", "nf"): (0.0413, 0.851639, 2_360_223),
    ("covtype-large", "ffd"): (0.8105, 0.952711, 2_109_830),
    ("covtype-large", "bfd"): (1.6702, 0.952711, 2_109_830),
    ("cal_housing-small", "none"): (0.0015, 0.085938, 80),
    ("cal_housing-small", "nf"): (0.0025, 0.982143, 7),
    ("cal_housing-small", "ffd"): (0.0103, 0.982143, 7),
    ("cal_housing-small", "bfd"): (0.0001, 0.982143, 7),
    ("cal_housing-med", "none"): (0.0246, 0.181457, 21_641),
    ("cal_housing-med", "nf"): (0.0126, 0.931429, 4_216),
    ("cal_housing-med", "ffd"): (0.0016, 0.941704, 4_170),
    ("cal_housing-med", "bfd"): (0.0031, 0.941704, 4_170),
    ("cal_housing-large", "none"): (0.0089, 0.237979, 3_370_373),
    ("cal_housing-large", "nf"): (0.0225, 0.901060, 890_148),
    ("cal_housing-large", "ffd"): (0.3534, 0.933114, 859_570),
    ("cal_housing-large", "bfd"): (0.8760, 0.933114, 859_570),
    ("fashion_mnist-small", "none"): (0.0022, 0.123906, 800),
    ("fashion_mnist-small", "nf"): (0.0082, 0.991250, 100),
    ("fashion_mnist-small", "ffd"): (0.0116, 0.991250, 100),
    ("fashion_mnist-small", "bfd"): (0.0139, 0.991250, 100),
    ("fashion_mnist-med", "none"): (0.0439, 0.264387, 144_211),
    ("fashion_mnist-med", "nf"): (0.0008, 0.867580, 43_947),
    ("fashion_mnist-med", "ffd"): (0.0130, 0.880279, 43_313),
    ("fashion_mnist-med", "bfd"): (0.0219, 0.880279, 43_313),
    ("fashion_mnist-large", "none"): (0.0140, 0.385001, 2_929_303),
    ("fashion_mnist-large", "nf"): (0.0132, 0.791948, 1_424_063),
    ("fashion_mnist-large", "ffd"): (0.3633, 0.958855, 1_176_178),
    ("fashion_mnist-large", "bfd"): (0.8518, 0.958855, 1_176_178),
    ("adult-small", "none"): (0.0016, 0.125000, 80),
    ("adult-small", "nf"): (0.0023, 1.000000, 10),
    ("adult-small", "ffd"): (0.0061, 1.000000, 10),
    ("adult-small", "bfd"): (0.0060, 1.000000, 10),
    ("adult-med", "none"): (0.0050, 0.229014, 13_067),
    ("adult-med", "nf"): (0.0066, 0.913192, 3_277),
    ("adult-med", "ffd"): (0.0575, 0.950010, 3_150),
    ("adult-med", "bfd"): (0.1169, 0.950010, 3_150),
    ("adult-large", "none"): (0.0033, 0.297131, 642_883),
    ("adult-large", "nf"): (0.0035, 0.858728, 222_446),
    ("adult-large", "ffd"): (0.0684, 0.954377, 200_152),
    ("adult-large", "bfd"): (0.0954, 0.954377, 200_152),
}
