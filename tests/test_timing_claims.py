"""No page fails because the machine is slow: no notebook asserts on a measured duration.

A learner's machine (Colab's free VM, Binder's, a laptop with a browser open) runs 2-3x slower than a quiet
one, and its timings jump from run to run. A page that measures time may print what it measured and say
whether a difference showed ("shown / not shown", ``lessons_src.clearly_less``); it must never stop on it.

This reads every notebook's code (book/, exercises/, solutions/) as Python and follows the values a page
measures: a name assigned from a call that measures time (``TIMING``: ``time_ms``, ``times_ms``,
``interleaved_times_ms``, ``perf_counter``, ``steps_per_second``, ``clearly_less``, ``time.time``,
``monotonic``, ``timeit``...), or from an expression of such names, or the result of a function the page
defines that measures time, is a measured value; an ``assert`` or an ``if ...: raise`` whose condition
reads a measured value fails this test, with the cell and the line.

It stands in, in the gate, for running every timing page under load (the full tier's load stage still does,
``tests/test_under_load.py``): CONTRIBUTING.md, "Two tiers".
"""

from __future__ import annotations

import ast
import re

import nbformat
import pytest
import sync_notebooks  # scripts/, on sys.path (tests/conftest.py)
from conftest import ROOT

#: Calls whose result is (or is computed from) a measured duration.
TIMING_CALLS = {"time_ms", "times_ms", "interleaved_times_ms", "perf_counter", "perf_counter_ns", "monotonic",
                "monotonic_ns", "process_time", "thread_time", "default_timer", "steps_per_second", "clearly_less",
                "timeit", "repeat", "time"}
#: An attribute or a string key with such a name holds a measurement wherever it came from (the package's
#: ``TrainResult.steps_per_second``, a stopwatch's ``.seconds``, a record's ``["elapsed"]``, ``["linear_ms"]``).
MEASURED_FIELD = re.compile(r"(^|_)(seconds|secs|elapsed|duration|ms|millis|milliseconds|per_second|latency)$")
#: Modules whose ``time``/``repeat`` attribute measures time (``time.time()``, ``timeit.repeat``).
TIMING_MODULES = {"time", "timeit"}


def _call_name(call: ast.Call) -> tuple[str | None, str | None]:
    """(the module or object before the dot, the function's name) of a call."""
    func = call.func
    if isinstance(func, ast.Name):
        return None, func.id
    if isinstance(func, ast.Attribute):
        owner = func.value.id if isinstance(func.value, ast.Name) else None
        return owner, func.attr
    return None, None


#: Local names of the clock, from ``from time import perf_counter as clock`` (reset per notebook by problems()).
TIMING_ALIASES: set[str] = set()


def _measures(call: ast.Call) -> bool:
    """Whether a call reads the clock or a timing helper (the page's own functions: see _reads)."""
    owner, name = _call_name(call)
    if owner is None and name in TIMING_ALIASES:
        return True
    if name in ("time", "repeat"):  # only the clock's: time.time(), timeit.repeat(...)
        return owner in TIMING_MODULES
    return name in TIMING_CALLS


def _reads(node: ast.AST, measured: set[str], timing_functions: dict) -> list[str]:
    """What in ``node`` is measured: names of measured values and calls that measure time (or return a
    measured value: a function of the page that does, whole or in part). A record that mixes a measurement
    with other fields (``dict(loss=..., seconds=...)``, ``{"loss": ..., "seconds": ...}``) is not followed: a
    page reads its other fields, and the names holding such records are left out (a blind spot, kept small)."""
    if isinstance(node, ast.Dict) and node.keys and None not in node.keys and len(node.values) > 1:
        parts = [_reads(v, measured, timing_functions) for v in node.values]
        return [r for part in parts for r in part] if all(parts) else []
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "dict" \
            and not node.args and len(node.keywords) > 1:
        parts = [_reads(k.value, measured, timing_functions) for k in node.keywords]
        return [r for part in parts for r in part] if all(parts) else []
    if isinstance(node, ast.ListComp | ast.SetComp | ast.GeneratorExp | ast.DictComp):
        local, found = set(measured), []  # a comprehension's variables are its own: measured only inside it
        for generator in node.generators:
            iterated = _reads(generator.iter, local, timing_functions)
            found += iterated
            names = _tainted_targets(generator.target, generator.iter, local, timing_functions, iterating=True)
            local = (local - set(_names(generator.target))) | names
        parts = [node.key, node.value] if isinstance(node, ast.DictComp) else [node.elt]
        return found + [r for part in parts for r in _reads(part, local, timing_functions)]
    found = []
    if isinstance(node, ast.Name) and node.id in measured:
        found.append(node.id)
    elif isinstance(node, ast.Attribute) and MEASURED_FIELD.search(node.attr):
        found.append(f".{node.attr}")
    elif isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant) \
            and isinstance(node.slice.value, str) and MEASURED_FIELD.search(node.slice.value):
        found.append(f"[{node.slice.value!r}]")
    elif isinstance(node, ast.Call):
        name = _call_name(node)[1]
        if isinstance(timing_functions.get(name), tuple) and not any(timing_functions[name]):
            pass  # a function of the page whose results are none of them measured
        elif name in timing_functions or _measures(node):
            found.append(f"{name}(...)")
    for child in ast.iter_child_nodes(node):
        found += _reads(child, measured, timing_functions)
    return found


def _names(target: ast.AST) -> list[str]:
    return [n.id for n in ast.walk(target) if isinstance(n, ast.Name)]


#: Names of the page's mappings of measurements (``times[name] = ...``): iterating one gives its keys, which are
#: not measured. Reset for each notebook by :func:`problems`.
MAPPINGS: set[str] = set()


def _container(target: ast.AST) -> tuple[str | None, bool]:
    """The variable a subscript, attribute or method-call target writes into (``times`` for ``times[name][0]``
    and ``times.setdefault(name, []).append(...)``), and whether the write goes through a key."""
    keyed = False
    while isinstance(target, ast.Subscript | ast.Attribute | ast.Call):
        if isinstance(target, ast.Call):
            if not isinstance(target.func, ast.Attribute):
                return None, False
            target = target.func
        keyed = keyed or isinstance(target, ast.Subscript) or (isinstance(target, ast.Attribute)
                                                                and target.attr == "setdefault")
        target = target.value
    return (target.id if isinstance(target, ast.Name) else None), keyed


def _tainted_targets(target: ast.AST, value: ast.AST, measured: set[str], timing_functions: dict,
                     iterating: bool = False) -> set[str]:
    """The names that ``target = value`` (or ``for target in value``) makes measured."""
    if isinstance(target, ast.Subscript | ast.Attribute | ast.Call):  # times[name] = ...: the container holds them
        root, keyed = _container(target)
        if root and _reads(value, measured, timing_functions):
            if keyed:
                MAPPINGS.add(root)
            return {root}
        return set()
    if isinstance(target, ast.Tuple | ast.List) and isinstance(value, ast.Call):
        owner, name = _call_name(value)
        parts = None
        if iterating and name == "items" and len(target.elts) == 2:  # for key, value in measured.items()
            parts = [False, bool(_reads(value, measured, timing_functions))]
        elif iterating and name == "enumerate" and len(target.elts) == 2:
            parts = [False, bool(_reads(value, measured, timing_functions))]
        elif iterating and name == "zip" and len(target.elts) == len(value.args):
            parts = [bool(_reads(arg, measured, timing_functions)) for arg in value.args]
        elif not iterating and isinstance(timing_functions.get(name), tuple) and \
                len(timing_functions[name]) == len(target.elts):  # a, seconds = train(...)
            parts = list(timing_functions[name])
        if parts is not None:
            return {n for elt, hot in zip(target.elts, parts) if hot for n in _names(elt)}
    if isinstance(target, ast.Tuple | ast.List) and isinstance(value, ast.Tuple | ast.List) and \
            len(target.elts) == len(value.elts):  # a, b = x, y
        return {n for elt, val in zip(target.elts, value.elts)
                for n in _tainted_targets(elt, val, measured, timing_functions, iterating)}
    if iterating and isinstance(value, ast.Call) and _call_name(value)[1] == "keys":
        return set()
    if iterating and isinstance(value, ast.Name) and value.id in MAPPINGS:  # for key in times: its keys
        return set()
    return set(_names(target)) if _reads(value, measured, timing_functions) else set()


def _returns(function: ast.FunctionDef, measured: set[str], timing_functions: dict):
    """Whether a function of the page returns a measured value: None (no), True (its one result), or a tuple
    of flags, one per element of the tuple it returns."""
    shapes = []
    for node in ast.walk(function):
        if isinstance(node, ast.Return) and node.value is not None:
            if isinstance(node.value, ast.Tuple):
                shapes.append(tuple(bool(_reads(e, measured, timing_functions)) for e in node.value.elts))
            else:
                shapes.append(bool(_reads(node.value, measured, timing_functions)))
    if shapes and all(isinstance(x, tuple) for x in shapes) and len({len(x) for x in shapes}) == 1:
        return tuple(any(flags) for flags in zip(*shapes))
    return True if any(x if isinstance(x, bool) else any(x) for x in shapes) else None


def _parse(source: str) -> ast.Module | None:
    """A code cell as Python: IPython's magics and shell lines are blanked out."""
    lines = ["" if re.match(r"\s*[%!]", line) else line for line in source.splitlines()]
    try:
        return ast.parse("\n".join(lines))
    except SyntaxError:
        return None


def problems(cells: list[str]) -> list[str]:
    """Each assert or raise that depends on a measured duration, as 'code cell N, line M: ...'."""
    trees = [(index, _parse(source)) for index, source in enumerate(cells)]
    trees = [(index, tree) for index, tree in trees if tree is not None]
    MAPPINGS.clear()
    TIMING_ALIASES.clear()
    for _, tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module in ("time", "timeit", "lessons_src.profiling"):
                TIMING_ALIASES.update(a.asname for a in node.names if a.asname and a.name in TIMING_CALLS)
    measured: set[str] = set()
    timing_functions: dict[str, object] = {}  # a function of the page -> what of its result is measured
    changed = True
    while changed:  # to a fixed point: values computed from measured values are measured too
        changed = False
        for _, tree in trees:
            for node in ast.walk(tree):
                if isinstance(node, ast.FunctionDef):
                    returns = _returns(node, measured, timing_functions)
                    if returns is not None and timing_functions.get(node.name) != returns:
                        timing_functions[node.name] = returns
                        changed = True
                pairs = []
                if isinstance(node, ast.Assign):
                    pairs = [(t, node.value, False) for t in node.targets]
                elif isinstance(node, ast.AugAssign | ast.AnnAssign) and node.value is not None:
                    pairs = [(node.target, node.value, False)]
                elif isinstance(node, ast.For):  # (a comprehension's variables: _reads, inside it)
                    pairs = [(node.target, node.iter, True)]
                elif isinstance(node, ast.NamedExpr):
                    pairs = [(node.target, node.value, False)]
                elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                        node.func.attr in ("append", "extend", "add", "update", "insert"):
                    pairs = [(node.func.value, ast.Tuple(elts=node.args, ctx=ast.Load()), False)]  # times.append(t)
                for target, value, iterating in pairs:
                    new = _tainted_targets(target, value, measured, timing_functions, iterating) - measured
                    if new:
                        measured |= new
                        changed = True
    found = []
    for index, tree in trees:
        for node in ast.walk(tree):
            condition = None
            if isinstance(node, ast.Assert):
                condition = node.test
            elif isinstance(node, ast.If) and any(isinstance(n, ast.Raise) for n in node.body + node.orelse):
                condition = node.test
            if condition is not None:
                reads = _reads(condition, measured, timing_functions)
                if reads:
                    found.append(f"code cell {index}, line {node.lineno}: {ast.unparse(node).splitlines()[0]} "
                                 f"(reads {', '.join(sorted(set(reads)))})")
    return found


def _code_cells(path) -> list[str]:
    return [cell.source for cell in nbformat.read(path, as_version=4).cells if cell.cell_type == "code"]


NOTEBOOKS = sync_notebooks.notebooks()


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[str(p.relative_to(ROOT)) for p in NOTEBOOKS])
def test_no_page_asserts_on_a_measured_duration(path):
    found = problems(_code_cells(path))
    assert not found, (f"{path.relative_to(ROOT)} stops on a measured duration, which fails on a busy machine; "
                       "print what was measured and whether it showed instead (lessons_src.clearly_less):\n"
                       + "\n".join(found))


# -- the probe itself finds what it must ---------------------------------------------------------------------

@pytest.mark.parametrize("cells", [
    ["from lessons_src import time_ms\nt = time_ms(f)", "assert t < 5"],
    ["import time\nt0 = time.perf_counter()\nf()\nelapsed = time.perf_counter() - t0", "ms = 1000 * elapsed",
     "assert ms < 50, 'too slow'"],
    ["times = {}\nfor n in (1, 2):\n    times[n] = time_ms(lambda: f(n))", "assert times[2] > times[1]"],
    ["fast = clearly_less(a, b)", "if not fast:\n    raise RuntimeError('no speed-up')"],
    ["def measure(g):\n    return min(times_ms(g))", "r = measure(f) / measure(h)", "assert r < 1"],
    ["def train(m):\n    t0 = time.perf_counter()\n    loss = step(m)\n    return loss, time.perf_counter() - t0",
     "loss, seconds = train(m)", "assert seconds < 3"],
    ["seconds = []\nfor _ in range(3):\n    start = time.perf_counter()\n    f()\n"
     "    seconds.append(time.perf_counter() - start)", "assert max(seconds) < 1"],
    ["timed = {n: time_ms(g) for n, g in fns.items()}", "for name, ms in timed.items():\n    assert ms < 10, name"],
    ["runs = {}\nfor name in names:\n    runs.setdefault(name, []).append(time_ms(f))", "assert runs['a'][0] < 1"],
    # found by a blind mutation review: a measurement read from an attribute or a record, an aliased clock
    ["result = train_attention(model, task)", "assert result.steps_per_second > 100, 'fast'"],
    ["from time import perf_counter as clock\nt0 = clock()\nf()\ndt = clock() - t0", "assert dt < 1"],
    ["import timeit\nt0 = timeit.default_timer()", "assert timeit.default_timer() - t0 < 1"],
    ["class Stopwatch:\n    def __exit__(self, *a):\n        self.seconds = time.perf_counter() - self.t0",
     "with Stopwatch() as sw:\n    f()\nassert sw.seconds < 0.5"],
    ["def timed(f):\n    t0 = time.perf_counter()\n    return {'result': f(), 'seconds': time.perf_counter() - t0}",
     "r = timed(f)\nif r['seconds'] > 0.5:\n    raise RuntimeError('slow')"],
    ["import time\nstart = time.time()", "assert time.time() - start < 10"],
    ["%timeit f()\nspeed = steps_per_second(model)", "assert speed > 100"],
])
def test_the_probe_finds_an_assert_on_a_measured_duration(cells):
    assert problems(cells), cells


@pytest.mark.parametrize("cells", [
    ["t = time_ms(f)\nprint(f'{t:.1f} ms')", "shown = clearly_less([t], [2 * t])\nprint('shown' if shown else 'not shown')"],
    ["peak = peak_memory_mib(f)", "assert peak > 0"],
    ["out = f()\nassert out.shape == (2, 3)", "import time"],
    ["times = time_ms(f)", "repeat = 3\nassert repeat == 3"],
    ["runs = {}\nfor name in names:\n    runs.setdefault(name, []).append(dict(loss=f(), seconds=time_ms(f)))",
     "assert runs['a'][0]['loss'] < 1 and name in names"],
    ["def train(m):\n    t0 = time.perf_counter()\n    loss = step(m)\n    return loss, time.perf_counter() - t0",
     "loss, seconds = train(m)", "assert loss < 3"],
    ["timed = {n: time_ms(g) for n, g in fns.items()}", "for name, ms in timed.items():\n    print(name, ms)",
     "assert name in fns"],
    ["spread = max(max(r) / min(r) for r in times_ms(f))", "r = 3\nassert r == 3"],
    ["runs = {}\nfor n in lengths:\n    runs[n] = time_ms(f)", "for n in runs:\n    assert n > 0"],
])
def test_the_probe_leaves_other_asserts_alone(cells):
    assert problems(cells) == [], cells
