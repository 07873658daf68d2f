"""Dask (dask.distributed) for the search and the sweep: a local cluster or an existing scheduler.

By default a LocalCluster of at most two single-threaded worker processes (the solver is Python
and numpy: processes, not threads, use several cores); ``threads=True`` runs one in-process worker
with threads instead (light; tests). ``address`` connects to an existing scheduler, whose workers
need libra_astra installed (and, to simulate, the binary named by ASTRA_SIM_BIN on the worker).
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from typing import Any, Callable, Iterator, Sequence

from .upstream import LibraError


@contextmanager
def cluster(address: str | None = None, workers: int | None = None, threads: bool = False) -> Iterator[Any]:
    """A dask.distributed Client for the duration of the block."""
    try:
        from distributed import Client, LocalCluster
    except ImportError:  # pragma: no cover - dask is a dependency
        raise LibraError("dask.distributed is not installed; pip install 'dask[distributed]'") from None
    if address:
        try:
            client = Client(address, timeout="10s")
        except (OSError, TimeoutError) as e:
            raise LibraError(f"--scheduler {address}: cannot connect ({e}); start one with 'dask scheduler' "
                             f"or leave --scheduler out for a local cluster") from None
        try:
            yield client
        finally:
            client.close()
        return
    n = workers or min(2, os.cpu_count() or 1)
    kw = dict(n_workers=1, threads_per_worker=n, processes=False) if threads else \
        dict(n_workers=n, threads_per_worker=1, processes=True)
    lc = LocalCluster(dashboard_address=":0", silence_logs=40, **kw)
    client = Client(lc)
    try:
        yield client
    finally:
        client.close()
        lc.close()


class Runner:
    """submit / wait_any / map over a client, with the problem sent to every worker once."""

    def __init__(self, client, problem) -> None:
        self.client = client
        self.problem = client.scatter(problem, broadcast=True)

    def map(self, fn: Callable, items: Sequence) -> list:
        futs = [self.client.submit(fn, self.problem, it, pure=False) for it in items]
        return self.client.gather(futs)

    def submit(self, fn: Callable, *args) -> Any:
        return self.client.submit(fn, self.problem, *args, pure=False)

    def wait_any(self, futures: Sequence) -> tuple[list, list]:
        from distributed import wait
        done, _ = wait(futures, return_when="FIRST_COMPLETED")
        done = list(done)
        return done, self.client.gather(done)
