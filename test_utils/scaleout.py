"""Scale-out: ``differencer.sweep``'s samples taken by the workers of a process pool or a Dask cluster.

A ``Spread`` (a ``concurrent.futures.Executor`` -- a process pool, a Dask client's ``get_executor()`` -- plus the
``Recipe`` by which a worker rebuilds the harness) makes ``sweep`` hand its element probes to the executor's
workers. Each worker binds the recipe's symbol (it travels as its JSON) on the harness's values, evaluates its
share of the perturbations with ``differencer``'s own loop and returns the samples; the parent turns them into
derivatives in probe order, so the numbers are those of the serial run, bit for bit (given the same numpy/BLAS
on both sides). Without a spread nothing of this runs.
"""

from __future__ import annotations

import pickle
import threading
import uuid
from collections.abc import Callable

import numpy as np

from .context import to_numpy
from .differencer import ElementProbe, sweep
from .objectives import complex_objective, projected_objective

__all__ = ["Recipe", "Spread", "SPREAD_TASKS", "check_pool"]


# == the loop, spread over an executor ==========================================================================

#: tasks one spread sweep is cut into (fewer when it has fewer probes), so 1, 2, 4 or 8 workers get equal shares,
#: and each task carries the harness's values (pickled once; ~0.1 s per task for ResNet-18's 47 MB), which a
#: worker unpacks only on its first task of the sweep
SPREAD_TASKS = 8


class Recipe:
    """How a worker rebuilds the evaluation of a sweep: picklable (the symbol travels as its JSON).

    ``sym``, ``weights`` and ``who`` are those given to ``objectives.projected_objective``; the harness binds its
    reference symbol (``sym`` plus the inputs of its loss heads; ``sym`` itself for ``"complex"``). ``kind``
    says what one evaluation returns, exactly as the serial caller's ``evaluate``:

    - ``"projected"``: ``[value]`` of the projected objective frozen at the base outputs (the scalar of
      ``check_numeric_gradient``, ``symgrad check`` and ``funcgraph.Reference``);
    - ``"complex"``: ``[objectives.complex_objective(weights)(outputs)]`` on a complex copy of ``sym``;
    - ``"outputs"``: the first ``n_out`` outputs (a column of a numeric Jacobian).
    """

    KINDS = ("projected", "complex", "outputs")

    def __init__(self, sym, weights, who="numeric gradient", kind="projected", n_out=None):
        if kind not in self.KINDS:
            raise ValueError(f"Recipe: kind must be one of {self.KINDS}, got {kind!r}")
        self.sym, self.weights, self.who, self.kind, self.n_out = sym, list(weights), who, kind, n_out

    def symbol(self):
        """The symbol the harness is bound from."""
        if self.kind == "complex":
            return self.sym
        return projected_objective(self.sym, self.weights, self.who)[0]

    def evaluator(self, harness, base) -> Callable:
        """``evaluate(name) -> list`` on ``harness`` (bound from ``symbol()``, ``base`` its outputs at the point)
        after ``name`` moved."""
        if self.kind == "outputs":
            n_out = self.n_out
            return lambda name: harness.outputs([name])[:n_out]
        if self.kind == "complex":
            objective = complex_objective(self.weights)
            return lambda name: [objective(harness.outputs([name]))]
        make_objective = projected_objective(self.sym, self.weights, self.who)[2]
        objective = make_objective([np.asarray(b, np.float64) for b in base])
        value = objective.value  # objective(outputs)[0], as the serial caller's
        return lambda name: [value(harness.outputs([name]))]


def check_pool(executor, who):
    """``executor`` when it can ``submit(fn, *args)`` (a ``concurrent.futures.Executor``), else TypeError."""
    if not callable(getattr(executor, "submit", None)):
        raise TypeError(
            f"{who}: executor must be a concurrent.futures.Executor (a ProcessPoolExecutor, a Dask "
            f"client's get_executor(), ...: something with submit()), got {type(executor).__name__}"
        )
    return executor


class Spread:
    """``sweep`` over the workers of ``executor``: a ``Recipe`` rebuilds ``harness`` there.

    The probes (``ElementProbe``s of ``harness``) are dealt to ``tasks`` tasks (probe ``j`` to task ``j mod
    tasks``, so every task gets a share of every argument: a probe of a first layer re-runs the whole graph, one
    of the last layer almost nothing). A task carries the harness's values at the time of the sweep, the recipe
    and its share; the worker binds the recipe's symbol on those values (once per sweep and worker thread),
    samples its probes with the serial loop and returns ``(deltas, samples)``. The parent yields them in probe
    order: the same numbers as the serial run, whatever the number of workers. A worker keeps the harness of
    the last sweep it served (its memory: one copy of the graph's values and intermediates).
    """

    def __init__(self, executor, harness, recipe: Recipe, who="numeric gradient", tasks=SPREAD_TASKS):
        self.executor = check_pool(executor, who)
        self.harness, self.recipe, self.who, self.tasks = harness, recipe, who, int(tasks)

    def sweep(self, probes, steps, rule, progress=None):
        probes, steps = list(probes), list(steps)
        if not probes:
            return
        jobs = [self._job(p, h) for p, h in zip(probes, steps)]
        blob = self._payload(probes[0].array)
        token = uuid.uuid4().hex
        n = min(len(jobs), max(self.tasks, 1))
        futures = [self.executor.submit(_sample_share, token, blob, jobs[t::n], rule) for t in range(n)]
        results = [None] * len(jobs)
        try:
            for t, future in enumerate(futures):
                results[t::n] = future.result()
                if progress is not None:
                    progress.update(len(jobs[t::n]))
        finally:
            for future in futures:
                future.cancel()
        for probe, (deltas, samples) in zip(probes, results):
            yield probe, deltas, samples

    def _job(self, probe, h):
        if not isinstance(probe, ElementProbe):
            raise TypeError(f"{self.who}: only element probes are spread over an executor, got {type(probe).__name__}")
        return probe.name, probe.index, h

    def _payload(self, array) -> bytes:
        """The recipe, device, values, auxiliary states and ``is_train`` of the harness, pickled once."""
        from symgrad.context import array_context

        h = self.harness
        values = {k: h.host(k) for k in h.exe.arg_dict}
        aux = {k: np.array(to_numpy(v), copy=True) for k, v in h.aux_initial.items()}
        state = (self.recipe, array_context(array), _pack(values), _pack(aux), h.is_train)
        return pickle.dumps(state, protocol=pickle.HIGHEST_PROTOCOL)


def _pack(arrays: dict) -> dict:
    """Float64 arrays whose every value is a float32 (a point in the dtype under test, cast up) travel as float32:
    half the bytes, the same values (the casts are exact both ways)."""
    out = {}
    for k, v in arrays.items():
        if v.dtype == np.float64:
            small = v.astype(np.float32)
            if np.array_equal(small.astype(np.float64), v):
                out[k] = (small, True)
                continue
        out[k] = (v, False)
    return out


def _unpack(packed: dict) -> dict:
    return {k: (v.astype(np.float64) if widened else v) for k, (v, widened) in packed.items()}


#: per worker thread: (token, harness, evaluate) of the last sweep served
_WORKER = threading.local()


def _replica(token, blob):
    """The harness and evaluator of sweep ``token`` in this worker thread, built from ``blob`` on first use."""
    held = getattr(_WORKER, "held", None)
    if held is None or held[0] != token:
        from .harness import Harness

        _WORKER.held = None  # let the last sweep's harness go before the next one is bound
        recipe, ctx, values, aux, is_train = pickle.loads(blob)
        harness = Harness.bind(recipe.symbol(), _unpack(values), _unpack(aux), ctx=ctx, is_train=is_train)
        base = harness.base()  # the base of the partial re-runs, taken before any probe moves an argument
        held = (token, harness, recipe.evaluator(harness, base))
        _WORKER.held = held
    return held[1], held[2]


def _sample_share(token, blob, jobs, rule) -> list:
    """Worker side of ``Spread.sweep``: ``[(deltas, samples)]`` of the probes ``jobs`` (``(name, index, h)``)."""
    harness, evaluate = _replica(token, blob)
    out = []
    try:
        for name, index, h in jobs:
            probe = ElementProbe(harness.array(name), index, name)
            ((_, deltas, samples),) = sweep([probe], [h], lambda name=name: evaluate(name), rule)
            out.append((deltas, samples))
    finally:
        harness.reset_aux()
    return out
