"""Small models: a row's whole output in one launch per call, the additivity check inside.

A model of a few dozen paths leaves the GPU idle in the regular route: per row batch an int64
accumulator is allocated and zeroed, several kernels add to it, a finish kernel converts it,
and the additivity check runs its own traversal kernel and reductions, so a call is a dozen
launches and allocations of a few microseconds of work each. For models that
:func:`~distshap.plan.routes.small_fits`, one kernel does it all, checking each row against the
independent traversal of :mod:`distshap.kernels.margin` on the model's raw values; a row that
misses the margin by more than half the check's tolerance sets a mapped flag
(:func:`.model.read_flag`), and the host then runs the full check, which raises with its
usual message.

:func:`route` picks the kernels by the model's shape: the block kernels of :mod:`.gather`
(quadrature per (row, path), fixed gathers) where a row of the model fits a block's shared
memory, else the warp-per-row kernels of :mod:`.kernels`. Each row is computed in a
fixed order by either, so its bits depend on the row (and the model) only: not on the batch,
the grid or the number of GPUs. They are not those of the regular route (another summation),
and the route is a function of the packed model and the configuration only, so every GPU of a
run takes the same one.
"""

from __future__ import annotations

from collections.abc import Callable

from distshap.kernels.cuda.small import gather as small_gather
from distshap.kernels.cuda.small.kernels import launch_merged, launch_warp_slots
from distshap.kernels.cuda.small.model import merged_model, small_model
from distshap.packed import PackedModel

__all__ = ["launch_slots", "route"]


def route(packed: PackedModel, interactions: bool) -> tuple[Callable, object]:
    """``(launch, model)`` of ``packed`` (a model that
    :func:`~distshap.plan.routes.small_fits`): the gather kernels
    (:func:`.small_gather.launch_gather` and its :class:`~.small_gather.GatherModel`) where a
    row of the model fits a block's shared memory, else :func:`.small_kernels.launch_merged`
    and the :class:`~.small_model.MergedModel`. ``launch(model, X, Xraw, out, interactions,
    check)`` returns the flag and stream for :func:`.model.read_flag`."""
    gm = small_gather.gather_model(packed)
    if small_gather.fits_shared(gm, interactions):
        return small_gather.launch_gather, gm
    return launch_merged, merged_model(packed)


def launch_slots(packed: PackedModel, X, acc, dev, s) -> None:
    """Interaction values of the rows ``X`` into their pair slots ``acc`` (int64 ``(n, S)``,
    zero on entry), for :func:`~distshap.kernels.cuda.launch.run_slot_batches`: the integers
    of the matrices :func:`route` gives; ``dev`` is the model's
    :class:`~distshap.kernels.cuda.runtime.model.SlotArrays`."""
    gm = small_gather.gather_model(packed)
    if small_gather.fits_shared(gm, True):
        small_gather.launch_gather_slots(gm, X, acc, dev, s)
    else:
        launch_warp_slots(small_model(packed), X, acc, dev, s)
