"""The Ray executor: candidates are rendered in the driver, compiled ahead of time as CPU tasks, and measured
by one actor per GPU, so that a GPU that frees up is handed an already compiled candidate at once. Ray is
imported only when the executor starts (GPU workers and exported kernels never need it); which Ray is
evo.evaluate.ray_session's choice."""

from __future__ import annotations

import logging
import math
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evo.evaluate import pipeline
from evo.evaluate.backend import Backend
from evo.evaluate.candidate import Candidate, CompileResult
from evo.evaluate.executor import Executor, WorkersLost
from evo.evaluate.latency import Latency
from evo.evaluate.occupancy import Occupancy
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


@dataclass
class _Worker:
    """One GPU worker's actor as the driver sees it. A worker is up (takes jobs), restarting (an info() probe
    is out), unreachable (asked again at `ask_at`) or, once `failures` reaches _MAX_ACTOR_FAILURES, retired."""

    actor: Any
    calls: deque[Any] = field(default_factory=deque)  # refs of its calls, the one evaluating first
    started: float = 0.0  # when its evaluating call started: a queued call's clock starts when the one before ends
    up: bool = True
    failures: int = 0  # deaths of its actor in a row
    ask_at: float | None = None
    unreachable_since: float | None = None


class RayExecutor(Executor):
    def __init__(self, backend: Backend, spec: ExecutorSpec | None = None, evaluation: EvaluationSpec | None = None,
                 lookup: pipeline.Lookup | None = None, num_cpus: int | None = None,
                 ray_log: str | Path | None = None) -> None:
        """`num_cpus` sizes an embedded Ray instance (None: every CPU of this machine); `ray_log`: the file that
        what Ray prints goes to while the executor runs (None: the terminal, as Ray does)."""
        super().__init__(backend, evaluation, lookup)
        self.spec = spec or ExecutorSpec()  # validated where it was read (evo.experiment.config)
        self._session = RaySession(self.spec.address, bool(self.spec.dashboard), num_cpus, log_path=ray_log)
        self._ray: Any = None
        self._workers: list[_Worker] = []
        self._waiting: deque[Candidate] = deque()  # rendered, waiting for a compile slot
        self._compiling: dict[Any, tuple[Candidate, float]] = {}  # -> (cand, sent)
        self._ready: deque[Candidate] = deque()  # compiled, waiting for a worker
        self._running: dict[Any, tuple[int, Candidate]] = {}  # the workers' calls -> (worker, cand)
        self._probing: dict[Any, tuple[int, float]] = {}  # info() calls on restarting actors -> (worker, sent)
        self._done: list[tuple[Candidate, Evaluation]] = []
        self._compile_slots = 1
        self._latency = Latency()
        self.occupancy = Occupancy()  # the search restarts it per problem and saves it (queue:<problem>)
        self._fatal: WorkersLost | None = None  # set when no worker is left; raised once results are out

    # -- lifecycle ------------------------------------------------------------------------------------
    def start(self) -> None:
        if self._ray is not None:
            return
        ray = self._ray = self._session.start()
        try:
            resources = ray.cluster_resources()
            n = self.spec.gpus or 1
            if self.backend.needs_gpu:
                visible = int(resources.get("GPU", 0))
                if visible < 1:
                    raise RuntimeError("Ray sees no GPU: a search needs one (a CPU-only check of the set-up is "
                                       "the executor kind 'smoke')")
                n = min(self.spec.gpus or visible, visible)
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
            self._workers = [_Worker(actor_cls.remote(self.backend, 0)) for _ in range(n)]
            self.infos = ray.get([w.actor.info.remote() for w in self._workers])
        except BaseException:
            self.shutdown()
            raise

    def shutdown(self) -> None:
        ray, self._ray = self._ray, None
        if ray is None:
            return
        try:
            if not self._session.alive():  # the instance died: any call into Ray now ends this process
                return
            # compiles under way are left alone, never cancelled: a cancel that meets the task's reply trips a
            # check in Ray's core (ray-project/ray#54527) that aborts the driver before the resume hint (seen in
            # CI, also with a wait after the cancel); ray.shutdown() ends an embedded instance's compile
            # processes, and a cluster drops the tasks of a driver that has gone
            # actor calls cannot be force-cancelled: close() waits behind a running evaluation, then the kill
            closing = [w.actor.close.remote() for w in self._workers]
            if closing:
                ray.wait(closing, num_returns=len(closing), timeout=10)
            for w in self._workers:
                ray.kill(w.actor)
        except Exception as e:  # shutting down must not hide the error that led here
            log.warning("while stopping Ray workers: %s", e)
        finally:
            self._workers, self._compiling, self._running, self._probing = [], {}, {}, {}
            self._waiting, self._ready = deque(), deque()
            self._session.close()

    # -- work -----------------------------------------------------------------------------------------
    @property
    def busy(self) -> int:
        return sum(1 for w in self._workers if w.calls)

    @property
    def slots(self) -> int:
        # every worker's calls (evaluating and queued), one more compiled job per worker, a little compile-ahead
        # on top, and as many compiles again as it takes to feed the workers while they compile (a compile
        # slower than a measurement would otherwise leave GPUs idle: benchmarks.driver_load measured it)
        n = max(1, len(self._workers))
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
        # Compiles under way finish and their results are dropped, never cancelled: a cancel raises
        # KeyboardInterrupt in the task wherever it is, also halfway through importing torch, which leaves that
        # compile process broken for every later task (an H100 run stored valid kernels of later problems as
        # compile errors: "partially initialized module 'torch'"); a forced cancel kills the process, and the
        # next problem would wait for Ray to start new ones.
        dropped = [*self._waiting, *self._ready, *(cand for cand, _ in self._compiling.values())]
        self._compiling, self._waiting, self._ready = {}, deque(), deque()
        self._observe()
        return dropped

    def poll(self, timeout_s: float | None = None) -> list[tuple[Candidate, Evaluation]]:
        ray = self._ray
        if ray is None:
            return []
        if self._fatal is not None and not self._done:
            raise self._fatal
        deadline = time.monotonic() + (math.inf if timeout_s is None else timeout_s)
        while True:
            if not self._session.alive():  # before any call into Ray: Ray's core ends a driver that makes one
                self._fatal = WorkersLost(f"the Ray instance of this run died (its raylet or GCS server ended"
                                          f"{self._log_note}); every completed evaluation is stored")
                if not self._done:
                    raise self._fatal
                out, self._done = self._done, []  # handed over first: the next poll raises
                return out
            self._pump()
            refs = [*self._compiling, *self._running, *self._probing]
            unreachable = any(w.ask_at is not None for w in self._workers)
            left = deadline - time.monotonic()
            if self._done or not (refs or unreachable) or left <= 0:
                break
            # wake at least once a second to notice tasks that overran their time limits
            if not refs:  # only unreachable workers, waiting to be asked again
                time.sleep(min(1.0, left))
            elif ray.wait(refs, num_returns=1, timeout=min(1.0, left))[0]:  # one is in: collect every one that is
                for ref in ray.wait(refs, num_returns=len(refs), timeout=0)[0]:
                    self._collect(ref)
            self._reap_overdue()
        self._pump()
        out, self._done = self._done, []
        return out

    # -- internals ------------------------------------------------------------------------------------
    @property
    def _log_note(self) -> str:
        return f"; Ray's messages are in {self._session.log_path}" if self._session.log_path else ""

    def _pump(self) -> None:
        """Start compiles while CPU slots are free; hand compiled candidates to idle workers."""
        if not self._session.alive():  # no call into a dead instance (poll says it died)
            return
        while self._waiting and len(self._compiling) < self._compile_slots:
            cand = self._waiting.popleft()
            ref = self._compile.remote(self._backend_ref, cand, self.target)
            self._compiling[ref] = (cand, time.monotonic())
        while self._ready:
            free = [i for i, w in enumerate(self._workers) if w.up and len(w.calls) < _CALLS_PER_WORKER]
            if not free:
                break
            i = min(free, key=lambda j: len(self._workers[j].calls))  # an idle worker first
            cand = self._ready.popleft()
            ref = self._workers[i].actor.evaluate.remote(cand, self.evaluation.timeout_s)
            if not self._workers[i].calls:
                self._workers[i].started = time.monotonic()
            self._workers[i].calls.append(ref)
            self._running[ref] = (i, cand)
        self._observe()

    def _observe(self) -> None:
        self.occupancy.observe(waiting=len(self._waiting), compiling=len(self._compiling), ready=len(self._ready),
                               at_workers=len(self._running))

    def _collect(self, ref: Any) -> None:
        ray = self._ray
        if ref in self._compiling:
            cand, sent = self._compiling.pop(ref)
            waited = time.monotonic() - sent
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
            i, cand = self._running[ref]
            worker = self._workers[i]
            try:
                self._done.append((cand, ray.get(ref)))
                worker.failures = 0
            except ray.exceptions.RayActorError as e:
                # the call evaluating when the actor died is the one that crashed, whichever reply came first
                self._end_calls(i, "crashed", f"worker died: {_short(e)}")
                if not isinstance(e, ray.exceptions.ActorUnavailableError):  # unreachable is not dead
                    worker.failures += 1
                self._restarting(i)
                return
            except Exception as e:
                self._done.append(self._worker_row(i, cand, "error", f"worker failed: {_short(e)}"))
            # the call queued behind it is evaluating from now on
            now = time.monotonic()
            del self._running[ref]
            worker.calls.remove(ref)
            self._latency.measured(now - worker.started)
            worker.started = now
        elif ref in self._probing:
            i, _ = self._probing.pop(ref)
            worker = self._workers[i]
            try:
                self.infos[i] = ray.get(ref)  # restarted (on any node that is left): jobs again
                worker.unreachable_since = None
                worker.up = True
            except ray.exceptions.ActorUnavailableError:  # ask again in a second, for at most a job's time limit
                if worker.unreachable_since is None:
                    worker.unreachable_since = time.monotonic()
                if time.monotonic() - worker.unreachable_since <= self.evaluation.timeout_s + _GRACE_S:
                    worker.ask_at = time.monotonic() + 1.0
                    return
                worker.failures = _MAX_ACTOR_FAILURES
                self._restarting(i)
            except ray.exceptions.RayActorError:
                worker.failures += 1
                self._restarting(i)

    def _worker_row(self, i: int, cand: Candidate, status: str, reason: str) -> tuple[Candidate, Evaluation]:
        """The row of a candidate that worker `i` returned none for."""
        return cand, cand.row(status, reason, gpu=self.infos[i].gpu, worker=self.infos[i].name)

    def _end_calls(self, i: int, status: str, reason: str) -> None:
        """Worker `i`'s actor is gone (died, or killed for overrunning): its evaluating call ends with `status`;
        the calls queued behind it never ran and go back to the front of the compiled queue."""
        calls = self._workers[i].calls
        if calls:
            self._done.append(self._worker_row(i, self._running.pop(calls.popleft())[1], status, reason))
        while calls:
            self._ready.appendleft(self._running.pop(calls.pop())[1])

    def _restarting(self, i: int) -> None:
        """Worker `i`'s actor died: no job for it until it answers an info() probe, which it does once Ray has
        restarted it (a lost node is noticed late; jobs sent meanwhile would only die too). A worker whose actor
        keeps dying is retired (Ray restarts it a few times, then gives up): it must not turn the rest of the
        budget into crashed rows."""
        worker = self._workers[i]
        worker.up = False
        if worker.failures < _MAX_ACTOR_FAILURES:
            self._probing[worker.actor.info.remote()] = (i, time.monotonic())
            return
        log.warning("GPU worker %s died %d times in a row: no more jobs for it", self.infos[i].name, worker.failures)
        if all(w.failures >= _MAX_ACTOR_FAILURES for w in self._workers):
            # raised by the next poll, after this poll has handed every collected evaluation to the search
            self._fatal = WorkersLost("every GPU worker died repeatedly; completed evaluations are stored")

    def _reap_overdue(self) -> None:
        now = time.monotonic()
        for i, worker in enumerate(self._workers):
            if worker.ask_at is not None and now >= worker.ask_at:
                worker.ask_at = None
                self._restarting(i)
        for ref, (i, sent) in list(self._probing.items()):
            if now - sent > self.evaluation.timeout_s + _GRACE_S:  # never restarted (no node can take it)
                del self._probing[ref]
                self._workers[i].failures = _MAX_ACTOR_FAILURES
                self._restarting(i)
        for ref, (cand, sent) in list(self._compiling.items()):
            if now - sent > self.evaluation.compile_timeout_s + _GRACE_S:
                self._ray.cancel(ref, force=True)
                del self._compiling[ref]
                self._done.append((cand, self._named(cand.row("timeout", "compile overran its time limit"))))
        for i, worker in enumerate(self._workers):
            if worker.calls and now - worker.started > self.evaluation.timeout_s + _GRACE_S:
                # the worker did not honour its own limit: replace its actor (Ray restarts it)
                self._ray.kill(worker.actor, no_restart=False)
                self._end_calls(i, "timeout", "worker overran its time limit")


def _short(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[-1] if text else ''}"[:500]
