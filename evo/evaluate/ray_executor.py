"""The Ray executor: candidates are rendered in the driver, compiled ahead of time as CPU tasks, and measured
by one actor per GPU, so that a GPU that frees up is handed an already compiled candidate at once.

Ray is imported only when the executor starts (GPU workers and exported kernels never need it), and which Ray
is evo.evaluate.ray_session's choice: the caller's if one is initialised, a cluster at `ExecutorSpec.address`,
or else an embedded instance of the run's own on 127.0.0.1.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from typing import Any

from evo.evaluate import pipeline
from evo.evaluate.backend import Backend
from evo.evaluate.candidate import Candidate, CompileResult
from evo.evaluate.executor import Executor, WorkersLost
from evo.evaluate.latency import Latency
from evo.evaluate.pipeline import Lookup
from evo.evaluate.ray_session import RaySession
from evo.experiment.spec import EvaluationSpec, ExecutorSpec
from evo.problem import Target
from evo.store.record import Evaluation

__all__ = ["RayExecutor"]

log = logging.getLogger(__name__)

_GRACE_S = 30.0  # beyond the evaluator's own time limits, before the executor gives up on a task
_MAX_ACTOR_FAILURES = 3  # consecutive deaths of a worker's actor before it is given no more jobs
# calls on one worker's actor at a time: one evaluating, one queued behind it, so that a GPU that finishes starts
# its next candidate at once instead of waiting for the driver to collect the result and send another (the
# driver serves every GPU; on 2 H200s the wait cost each GPU a third of its time, reports/gpu/scaling-*.json)
_CALLS_PER_WORKER = 2


def _compile_task(backend: Backend, cand: Candidate, target: Target) -> CompileResult | None:
    return backend.compile(cand, target)


class _WorkerActor:
    """Holds one Worker (and through it one GPU) for the life of the actor."""

    def __init__(self, backend: Backend, device_index: int) -> None:
        self.worker = backend.open_worker(device_index)

    def info(self) -> Any:
        return self.worker.info

    def evaluate(self, cand: Candidate, timeout_s: float) -> Evaluation:
        return pipeline.measure(self.worker, cand, timeout_s)

    def close(self) -> None:
        self.worker.close()


class RayExecutor(Executor):
    def __init__(self, backend: Backend, spec: ExecutorSpec | None = None, evaluation: EvaluationSpec | None = None,
                 lookup: Lookup | None = None, num_cpus: int | None = None) -> None:
        """`num_cpus` sizes an embedded Ray instance (None: every CPU of this machine)."""
        super().__init__(backend, evaluation, lookup)
        self.spec = spec or ExecutorSpec()  # validated where it was read (evo.experiment.config)
        self.num_cpus = num_cpus
        self._ray: Any = None
        self._session = RaySession(self.spec.address, bool(self.spec.dashboard), num_cpus)
        self._actors: list[Any] = []
        self._up: set[int] = set()  # workers that take jobs (not restarting, not retired)
        self._calls: list[deque[Any]] = []  # per worker: refs of its calls, the one evaluating first
        self._waiting: deque[Candidate] = deque()  # rendered, waiting for a compile slot
        self._compiling: dict[Any, tuple[Candidate, float]] = {}
        self._ready: deque[Candidate] = deque()
        self._running: dict[Any, tuple[int, Candidate, float | None]] = {}  # -> (worker, cand, started or None)
        self._probing: dict[Any, tuple[int, float]] = {}  # info() calls on restarting actors -> (worker, sent)
        self._cooling: dict[int, float] = {}  # unreachable workers -> when to ask again
        self._unreachable_since: dict[int, float] = {}
        self._done: list[tuple[Candidate, Evaluation]] = []
        self._compile_slots = 1
        self._latency = Latency()
        self._actor_failures: list[int] = []
        self._fatal: WorkersLost | None = None  # set when no worker is left; raised once results are out

    # -- lifecycle ------------------------------------------------------------------------------------
    def start(self) -> None:
        if self._ray is not None:
            return
        ray = self._ray = self._session.start()
        try:
            resources = ray.cluster_resources()
            if self.backend.needs_gpu:
                visible = int(resources.get("GPU", 0))
                if visible < 1:
                    raise RuntimeError("Ray sees no GPU: a search needs one (a CPU-only check of the set-up is "
                                       "the executor kind 'smoke')")
                n = min(self.spec.gpus or visible, visible)
            else:
                n = self.spec.gpus or 1
            self._compile_slots = self.spec.compile_workers or max(1, int(resources.get("CPU", 1)))
            # a compile process serves many jobs; recycling it bounds what compiled modules leak
            env = self.backend.compile_env()
            self._compile = ray.remote(num_cpus=1, max_retries=0, max_calls=500)(_compile_task)
            if env:
                self._compile = self._compile.options(runtime_env={"env_vars": dict(env)})
            self._backend_ref = ray.put(self.backend)
            # SPREAD: workers on as many nodes as there are, so that losing one node leaves the others' workers
            # (workers that need no GPU would otherwise all land on one node, and die together with it)
            actor_cls = ray.remote(_WorkerActor).options(num_gpus=1 if self.backend.needs_gpu else 0, num_cpus=0,
                                                         max_restarts=3, max_task_retries=0,
                                                         scheduling_strategy="SPREAD")
            # the backend itself, not its object-store reference: a restarted actor must not depend on an object
            self._actors = [actor_cls.remote(self.backend, 0) for _ in range(n)]
            self.infos = ray.get([a.info.remote() for a in self._actors])
            self._up = set(range(n))
            self._calls = [deque() for _ in range(n)]
            self._actor_failures = [0] * n
        except BaseException:
            self.shutdown()
            raise

    def shutdown(self) -> None:
        ray = self._ray
        if ray is None:
            return
        self._ray = None
        try:
            for ref in self._compiling:
                ray.cancel(ref, force=True)
            # actor calls cannot be force-cancelled: close() waits behind a running evaluation, then the kill
            closing = [a.close.remote() for a in self._actors]
            if closing:
                ray.wait(closing, num_returns=len(closing), timeout=10)
            for a in self._actors:
                ray.kill(a)
        except Exception as e:  # shutting down must not hide the error that led here
            log.warning("while stopping Ray workers: %s", e)
        finally:
            self._actors, self._compiling, self._running, self._probing = [], {}, {}, {}
            for waiting in (self._cooling, self._waiting, self._ready, self._up):
                waiting.clear()
            self._calls = []
            self._session.close()

    # -- work -----------------------------------------------------------------------------------------
    @property
    def busy(self) -> int:
        return sum(1 for calls in self._calls if calls)

    @property
    def slots(self) -> int:
        # every worker's calls (evaluating and queued), one more compiled job per worker, a little compile-ahead
        # on top, and as many compiles again as it takes to feed the workers while they compile (a compile
        # slower than a measurement would otherwise leave GPUs idle: evo.bench.driver_load measured it)
        n = max(1, len(self._actors))
        return (_CALLS_PER_WORKER + 1) * n + 2 + self._latency.compile_ahead(n, self._compile_slots)

    @property
    def in_flight(self) -> int:
        return len(self._waiting) + len(self._compiling) + len(self._ready) + len(self._running) + len(self._done)

    def submit(self, cand: Candidate) -> None:
        if self._ray is None:
            raise RuntimeError("executor not started")
        ev = self._render(cand)
        if ev is not None:
            self._done.append((cand, ev))
        else:
            self._waiting.append(cand)
            self._pump()

    def cancel_waiting(self) -> list[Candidate]:
        dropped = [*self._waiting, *self._ready, *(cand for cand, _ in self._compiling.values())]
        for ref in self._compiling:
            # not force: a forced cancel kills the task's process, and the next problem or run would wait for
            # Ray to start (and import torch and triton into) a new compile process for every slot
            self._ray.cancel(ref, force=False)
        self._compiling, self._waiting, self._ready = {}, deque(), deque()
        return dropped

    def poll(self, timeout_s: float | None = None) -> list[tuple[Candidate, Evaluation]]:
        ray = self._ray
        if ray is None:
            return []
        if self._fatal is not None and not self._done:
            raise self._fatal
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while True:
            self._pump()
            refs = list(self._compiling) + list(self._running) + list(self._probing)
            if self._done or not (refs or self._cooling):
                break
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                break
            # wake at least once a second to notice tasks that overran their time limits
            wait_s = 1.0 if left is None else min(1.0, left)
            if not refs:  # only unreachable workers, waiting to be asked again
                time.sleep(wait_s)
            elif ray.wait(refs, num_returns=1, timeout=wait_s)[0]:  # one is in: collect every one that is
                for ref in ray.wait(refs, num_returns=len(refs), timeout=0)[0]:
                    self._collect(ref)
            self._reap_overdue()
        self._pump()
        out, self._done = self._done, []
        return out

    # -- internals ------------------------------------------------------------------------------------
    def _pump(self) -> None:
        """Start compiles while CPU slots are free; hand compiled candidates to idle workers."""
        while self._waiting and len(self._compiling) < self._compile_slots:
            cand = self._waiting.popleft()
            ref = self._compile.remote(self._backend_ref, cand, self.target)
            self._compiling[ref] = (cand, time.monotonic())
        while self._ready:
            open_ = [i for i in self._up if len(self._calls[i]) < _CALLS_PER_WORKER]
            if not open_:
                break
            i = min(open_, key=lambda j: (len(self._calls[j]), j))  # an idle worker first
            cand = self._ready.popleft()
            ref = self._actors[i].evaluate.remote(cand, self.evaluation.timeout_s)
            # a queued call's clock starts when the call before it ends (actor calls run one at a time, in order)
            self._running[ref] = (i, cand, None if self._calls[i] else time.monotonic())
            self._calls[i].append(ref)

    def _collect(self, ref: Any) -> None:
        ray = self._ray
        if ref in self._compiling:
            cand, started = self._compiling.pop(ref)
            waited = time.monotonic() - started
            try:
                result = ray.get(ref)
                # the compile's own time where the backend reports it: waiting for Ray to start a task's
                # process must not inflate the window (that starts yet more processes)
                self._latency.compiled(min(waited, getattr(result, "compile_s", 0.0) or waited))
                out = pipeline.compiled(cand, result)
            except ray.exceptions.RayTaskError as e:  # compile raised: a backend bug, not the kernel's fault
                out = cand.row("error", f"compile failed: {_short(e)}")
            except Exception as e:  # the task's process died under it: compilers abort on some kernels
                out = cand.row("compile_error", f"the compile process died: {_short(e)}")
            if out is not None:
                self._done.append((cand, self._named(out)))
            else:
                self._ready.append(cand)
        elif ref in self._running:
            i, cand, _ = self._running[ref]
            try:
                self._done.append((cand, ray.get(ref)))
                self._actor_failures[i] = 0
            except ray.exceptions.RayActorError as e:
                # the call evaluating when the actor died is the one that crashed, whichever reply came first
                self._end_calls(i, "crashed", f"worker died: {_short(e)}")
                if not _unreachable(ray, e):  # unreachable is not dead (a lost node is noticed late)
                    self._actor_failures[i] += 1
                self._up.discard(i)
                self._probe(i)  # Ray restarts the actor: no job for it until it answers again
                return
            except Exception as e:
                self._done.append(self._worker_row(i, cand, "error", f"worker failed: {_short(e)}"))
            self._next_call(i, ref)
        elif ref in self._probing:
            i, _ = self._probing.pop(ref)
            try:
                self.infos[i] = ray.get(ref)  # restarted (on any node that is left): jobs again
                self._unreachable_since.pop(i, None)
                self._up.add(i)
            except ray.exceptions.RayActorError as e:
                if _unreachable(ray, e):  # ask again in a second, for at most a job's time limit
                    since = self._unreachable_since.setdefault(i, time.monotonic())
                    if time.monotonic() - since <= self.evaluation.timeout_s + _GRACE_S:
                        self._cooling[i] = time.monotonic() + 1.0
                        return
                    self._actor_failures[i] = _MAX_ACTOR_FAILURES
                else:
                    self._actor_failures[i] += 1
                self._probe(i)

    def _worker_row(self, i: int, cand: Candidate, status: str, reason: str) -> tuple[Candidate, Evaluation]:
        """The row of a candidate that worker `i` returned none for."""
        return cand, cand.row(status, reason, gpu=self.infos[i].gpu, worker=self.infos[i].name)

    def _next_call(self, i: int, ref: Any) -> None:
        """Worker `i`'s call `ref` returned: the call queued behind it is evaluating from now on."""
        now = time.monotonic()
        _, _, started = self._running.pop(ref)
        calls = self._calls[i]
        if ref in calls:
            calls.remove(ref)
        if started is not None:
            self._latency.measured(now - started)
        if calls and calls[0] in self._running:
            j, cand, _ = self._running[calls[0]]
            self._running[calls[0]] = (j, cand, now)

    def _end_calls(self, i: int, status: str, reason: str) -> None:
        """Worker `i`'s actor is gone (died, or killed for overrunning): its evaluating call ends with `status`;
        the calls queued behind it never ran and go back to the front of the compiled queue."""
        calls, self._calls[i] = list(self._calls[i]), deque()
        if calls:
            self._done.append(self._worker_row(i, self._running.pop(calls[0])[1], status, reason))
        for ref in reversed(calls[1:]):
            self._ready.appendleft(self._running.pop(ref)[1])

    def _probe(self, i: int) -> None:
        """Ask worker `i`'s actor, which just died, for its info: the answer comes once Ray has restarted it
        (a node that is lost takes a while to be noticed; jobs sent meanwhile would only die too)."""
        if self._actor_failures[i] < _MAX_ACTOR_FAILURES:
            self._probing[self._actors[i].info.remote()] = (i, time.monotonic())
        else:
            self._release(i)

    def _release(self, i: int) -> None:
        """Worker `i` takes jobs again, unless its actor keeps dying (Ray restarts it a few times, then gives
        up): a worker that cannot stay up must not turn the rest of the budget into crashed rows."""
        if self._actor_failures[i] < _MAX_ACTOR_FAILURES:
            self._up.add(i)
            return
        self._up.discard(i)
        log.warning("GPU worker %s died %d times in a row: no more jobs for it", self.infos[i].name,
                    self._actor_failures[i])
        if not self._up and not self._running and not self._probing and not self._cooling:
            # raised by the next poll, after this poll has handed every collected evaluation to the search
            self._fatal = WorkersLost("every GPU worker died repeatedly; completed evaluations are stored")

    def _reap_overdue(self) -> None:
        now = time.monotonic()
        for i, when in list(self._cooling.items()):
            if now >= when:
                del self._cooling[i]
                self._probe(i)
        for ref, (i, sent) in list(self._probing.items()):
            if now - sent > self.evaluation.timeout_s + _GRACE_S:  # never restarted (no node can take it)
                del self._probing[ref]
                self._actor_failures[i] = _MAX_ACTOR_FAILURES
                self._release(i)
        for ref, (cand, started) in list(self._compiling.items()):
            if now - started > self.evaluation.compile_timeout_s + _GRACE_S:
                self._ray.cancel(ref, force=True)
                del self._compiling[ref]
                self._done.append((cand, self._named(cand.row("timeout", "compile overran its time limit"))))
        for i, _, started in list(self._running.values()):
            if started is not None and now - started > self.evaluation.timeout_s + _GRACE_S:
                # the worker did not honour its own limit: replace its actor (Ray restarts it)
                self._ray.kill(self._actors[i], no_restart=False)
                self._end_calls(i, "timeout", "worker overran its time limit")
                self._release(i)


def _unreachable(ray: Any, e: BaseException) -> bool:
    """Whether `e` says an actor could not be reached (it may be alive), rather than that it died."""
    kind = getattr(ray.exceptions, "ActorUnavailableError", None)
    return kind is not None and isinstance(e, kind)


def _short(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[-1] if text else ''}"[:500]
