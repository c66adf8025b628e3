"""Files in and out of the command line: rows to explain, SHAP outputs written safely.

Inputs (:mod:`distshap.io.read`) are Parquet, CSV or ``.npy`` files, given as one file, a
directory or a glob, read lazily with Dask and matched to the model's columns as the Python API
matches a DataFrame's (the explainer converts the values, once):

* Parquet: :func:`dask.dataframe.read_parquet` (partitions follow files / row groups). A file
  does not keep the category order of the frame it was written from, so a categorical feature
  is coded by the model's stored training categories when it has them (XGBoost >= 3.1), by
  label; otherwise a category column's numeric values are the codes (right for integer
  categories ``0..k-1``), and a category column of strings is refused. A category column on a
  numeric feature is refused, as the model's library refuses it.
* CSV / TSV (:mod:`distshap.io.csvfile`): a header row of column names, then one row per line;
  a first line of numbers (no header), a row with more or fewer fields than the header and a
  file without rows are refused, naming the file and line.
* ``.npy``: a 2-D numeric array per file, memory-mapped and read in row chunks by the workers,
  in the file's dtype.

Outputs (:mod:`distshap.io.write`, checked and staged by :mod:`distshap.io.staging`):

* ``.npy``: the array exactly as ``TreeExplainer(model, layout="xgboost").shap_values`` returns it —
  ``(n, F+1)``, ``(n, G, F+1)``, ``(n, F+1, F+1)`` or ``(n, G, F+1, F+1)``, float32, bias last.
* ``.parquet``: one float32 column per feature plus ``"bias"`` (:func:`output_columns`); for
  ``G > 1`` output groups, ``"<feature>[class k]"`` and ``"bias[class k]"``, class by class.
  Names never repeat (a repeat takes a free ``_1``, ``_2`` suffix: with a feature named
  ``bias`` the bias column is ``bias_1``). SHAP values only (interaction values are 3-D:
  write them to ``.npy`` or ``.zarr``).
* ``.zarr``: a Zarr array of the ``.npy`` layout with ``feature_names``, ``expected_value``,
  ``layout`` attributes, written in parallel by the Dask workers (needs ``pip install zarr``).

An output never replaces an input, an existing output is replaced only with ``overwrite`` and
only when distshap could have written it, and every output is written under a temporary name
and renamed into place when complete. Every user error raises :class:`InputError` (a
``ValueError``) naming the file, what is wrong and the fix.
"""

from distshap.io.errors import InputError
from distshap.io.read import (
    DEFAULT_NPY_CHUNK_ROWS,
    Dataset,
    first_rows,
    model_rows,
    read_data,
    select_features,
)
from distshap.io.staging import check_output, image_format, output_format
from distshap.io.write import output_columns, save_figure, write_array, write_blocks, write_dask

__all__ = [
    "DEFAULT_NPY_CHUNK_ROWS",
    "Dataset",
    "InputError",
    "check_output",
    "first_rows",
    "image_format",
    "model_rows",
    "output_columns",
    "output_format",
    "read_data",
    "save_figure",
    "select_features",
    "write_array",
    "write_blocks",
    "write_dask",
]
