"""./scripts/test.sh spreads the suite over workers (pytest -n): every test that uses the Docker engine goes to one
worker, first and in the order collected, as a run without -n runs them; the unit tests go to the other workers a
module at a time (tests/engine_apart.py). xdist's scheduler is driven here with stand-in workers: no process is
started."""

from __future__ import annotations

from types import SimpleNamespace

from engine_apart import EngineApart

ENGINE_TESTS = [
    "tests/e2e/test_local_cluster.py::test_flow",
    "tests/e2e/test_local_cluster.py::test_up_twice",
    "tests/images/test_push.py::test_push",
    "tests/nodeboot/test_emulated_nodes.py::test_boots[aws-g5-dev]",
    "tests/nodeboot/test_emulated_nodes.py::test_boots[aws-p5-2node]",
]
CATALOG = [f"tests/unit/test_catalog.py::test_row[{i}]" for i in range(8)]
COSTS = ["tests/unit/test_costs.py::test_price[a::b]", "tests/unit/test_costs.py::TestTier::test_tier"]


class Worker:
    """What the scheduler sees of one of xdist's workers: the tests sent to it, by index into its collection."""

    def __init__(self, name: str):
        self.gateway = SimpleNamespace(id=name)
        self.shutting_down = False
        self.sent: list[int] = []
        self.done = 0

    def send_runtest_some(self, indexes: list[int]) -> None:
        self.sent += indexes

    def shutdown(self) -> None:
        self.shutting_down = True


def run(collected: list[str], workers: int = 2) -> list[list[str]]:
    """The tests each worker runs, in order, when the scheduler hands out `collected` and each worker finishes
    whatever it was sent (the first worker slowest, as the engine's tests are)."""
    config = SimpleNamespace(getvalue=lambda name: {"tx": [f"{workers}*popen"]}[name],
                             option=SimpleNamespace(loadscopereorder=True))
    scheduler = EngineApart(config)
    pool = [Worker(f"gw{i}") for i in range(workers)]
    for worker in pool:
        scheduler.add_node(worker)
        scheduler.add_node_collection(worker, collected)
    scheduler.schedule()
    while not scheduler.tests_finished:
        worker = next(w for w in reversed(pool) if w.done < len(w.sent))
        scheduler.mark_test_complete(worker, worker.sent[worker.done])
        worker.done += 1
    return [[collected[i] for i in worker.sent] for worker in pool]


def test_the_engines_tests_run_in_one_worker_in_their_order_and_the_unit_tests_beside_them():
    engine_worker, unit_worker = run(ENGINE_TESTS + CATALOG + COSTS)
    assert engine_worker == ENGINE_TESTS
    assert sorted(unit_worker) == sorted(CATALOG + COSTS)


def test_the_engines_tests_go_out_first_even_when_collected_last_and_fewer_than_a_modules():
    engine_worker, unit_worker = run(CATALOG + COSTS + ENGINE_TESTS)
    assert engine_worker == ENGINE_TESTS
    assert sorted(unit_worker) == sorted(CATALOG + COSTS)


def test_a_unit_module_is_one_work_unit():
    ran = run(CATALOG + COSTS, workers=2)
    assert sorted(map(sorted, ran)) == sorted([sorted(CATALOG), sorted(COSTS)]), "no module split over workers"
