"""CatBoost models with text features are refused in one line naming them, wherever the column.

Their splits read statistics of tokens, which distshap cannot explain exactly. CatBoost's JSON
export fails on some such models and leaves the text features out of others (their columns
with them), so the refusal comes before the export.
"""

import numpy as np
import pytest

from distshap.models import load_model
from distshap.models.ensemble import UnsupportedModelError

catboost = pytest.importorskip("catboost")
pd = pytest.importorskip("pandas")


@pytest.mark.parametrize("position", [1, 2])
def test_text_features_refused_naming_them(position):
    rng = np.random.RandomState(0)
    X = pd.DataFrame(rng.randn(120, 2), columns=["a", "b"])
    X.insert(position, "note", rng.choice(["good day", "bad day", "so so"], 120))
    y = X["a"].to_numpy() + 2.0 * (X["note"] == "good day").to_numpy()
    model = catboost.CatBoostRegressor(
        iterations=4, depth=2, verbose=0, thread_count=1, text_features=["note"]
    ).fit(X, y)
    with pytest.raises(UnsupportedModelError, match=r"text features \['note'\].*numeric"):
        load_model(model)
