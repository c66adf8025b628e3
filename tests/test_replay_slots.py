"""A row bucket's graphs (:class:`distshap.kernels.cuda.replay._Slot`): one build at a time in a
process, up to ``replay_graphs`` graphs, a failed build ending the bucket's builds but not the
graphs it has. Plain bookkeeping: no GPU needed (the graphs are stand-ins)."""

from __future__ import annotations

from distshap.kernels.cuda.replay import _Slot


def test_a_bucket_builds_one_graph_at_a_time_and_keeps_those_that_work():
    one, other = _Slot(), _Slot()
    assert one.take(2) == (None, True)  # the first call builds
    assert other.take(2) == (None, False)  # another bucket waits for that build: the launches
    assert one.take(2) == (None, False)
    first = object()
    one.give(first, True)
    assert one.take(2) == (first, False)  # held by a call ...
    assert one.take(2) == (None, True)  # ... so the next builds a second graph
    one.give(None, True)  # which fails
    assert not one.failed and one.take(2) == (None, False)  # no third try while held
    one.give(first, False)
    assert one.take(2) == (first, False) and one.take(2) == (None, False)
    assert other.take(2) == (None, True)
    other.give(None, True)  # its first build fails: no graph serves it
    assert other.failed and other.take(2) == (None, False)


def test_a_bucket_keeps_at_most_the_graphs_asked_for():
    slot = _Slot()
    assert slot.take(1) == (None, True)
    graph = object()
    slot.give(graph, True)
    assert slot.take(1) == (graph, False)
    assert slot.take(1) == (None, False)  # one graph, held
    assert slot.take(2) == (None, True)  # two allowed: a second is built
    slot.give(object(), True)
    assert len(slot.graphs) == 2 and len(slot.free) == 1
