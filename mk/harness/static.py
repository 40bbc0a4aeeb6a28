"""Static check of a candidate's source, before anything of it runs.

The first line of defence of EVAL-INTEGRITY.md (rules 1, 2, 3, 7, 8, 11): an
AST walk that rejects sources whose *shape* is a known trick, with a one-line
reason naming the line. It is deliberately strict: a kernel needs JAX, NumPy
and a few pure stdlib modules, nothing that touches the file system, the
network, the interpreter or the checker. What it cannot see (strings evaluated
by a library at run time, say) the runtime policy (:mod:`mk.harness.policy`)
and process isolation stop.

Each check states its rationale in a comment, in the spirit of KernelBench's
``kernel_static_checker.py``.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from typing import Iterable, Sequence

__all__ = ["Finding", "StaticResult", "check_source", "ALLOWED_IMPORT_ROOTS"]

#: Top-level modules a candidate may import. Pure computation only: no file,
#: process, network, introspection or timing module (rule 8). ``re`` and ``json``
#: are pure string processing that library-style kernels use (megablox parses the
#: device kind with ``re``, splash attention writes profiler metadata with
#: ``json.dumps``); the modules they import themselves (``json.codecs`` opens files)
#: are closed below like any other module leak.
ALLOWED_IMPORT_ROOTS = frozenset({
    "jax", "numpy", "ml_dtypes", "math", "cmath", "functools", "itertools", "dataclasses", "typing",
    "typing_extensions", "collections", "operator", "enum", "__future__", "abc", "numbers", "re", "json",
})

# Dotted prefixes inside allowed packages that are still off limits, with why.
_DENIED_PREFIXES: dict[str, tuple[int, str]] = {
    # private internals hold the harness's own switches (e.g. the pallas_call the sandbox wraps)
    "jax._src": (8, "private JAX internals"),
    "jax.extend": (8, "JAX extension internals"),
    "jax.ffi": (8, "foreign function calls into native code"),
    "jax.lib": (8, "JAX's native library internals"),
    # global configuration would change the reference's precision too (rule 11)
    "jax.config": (11, "global JAX configuration (it would change the reference's precision as well)"),
    # host callbacks run arbitrary Python on the host instead of a kernel (rule 1)
    "jax.pure_callback": (1, "host callbacks compute on the host instead of in a kernel"),
    "jax.experimental.io_callback": (1, "host callbacks compute on the host instead of in a kernel"),
    "jax.experimental.host_callback": (1, "host callbacks compute on the host instead of in a kernel"),
    "jax.debug.callback": (1, "host callbacks compute on the host instead of in a kernel"),
    "jax.debug.breakpoint": (9, "an interactive breakpoint hangs the run"),
    # native code that writes files or opens ports, invisible to the Python audit hooks
    "jax.profiler": (8, "the profiler writes files and opens servers"),
    "jax.distributed": (8, "distributed initialisation opens network connections"),
    "jax.experimental.compilation_cache": (8, "the compilation cache writes files"),
    "jax.experimental.serialize_executable": (8, "deserialising executables runs foreign code"),
    "jax.experimental.jax2tf": (8, "not a kernel dependency"),
    "numpy.testing": (7, "the checker's own comparison functions"),
    "numpy.ctypeslib": (8, "raw memory access"),
    "numpy.f2py": (8, "compiles and loads native code"),
    "numpy.distutils": (8, "build tooling"),
    "numpy.lib.format": (8, "reads and writes .npy files"),
    "numpy.lib.npyio": (8, "reads and writes files"),
}

# numpy / jax.numpy functions that touch files (rule 8); all but load/save are unambiguous on any object
# (``pl.load`` is a Pallas Triton primitive).
_FILE_FUNCTIONS = frozenset({
    "load", "save", "savez", "savez_compressed", "savetxt", "loadtxt", "genfromtxt", "fromfile", "tofile",
    "memmap", "fromregex", "DataSource", "open_memmap",
})
_FILE_FUNCTIONS_ANYWHERE = _FILE_FUNCTIONS - {"load", "save"}

# A module name used as an attribute (``dataclasses.sys``, ``functools.os``) is how
# pure modules leak the dangerous ones they imported themselves (rule 8).
_DANGEROUS_MODULE_ATTRS = frozenset({
    "os", "sys", "subprocess", "socket", "ctypes", "importlib", "builtins", "inspect", "gc", "pathlib",
    "io", "pickle", "marshal", "shutil", "signal", "threading", "multiprocessing", "posix", "time",
    "resource", "tempfile", "urllib", "http", "pty", "mmap", "weakref", "types", "code", "codeop",
    "codecs", "copyreg",  # json.codecs.open opens files; re.copyreg changes how objects pickle
})
# the unambiguous ones are flagged on any object, not only on imported modules: a module can arrive as an argument
_DANGEROUS_ATTRS_ANYWHERE = frozenset({
    "os", "sys", "subprocess", "socket", "ctypes", "importlib", "builtins", "inspect", "gc", "pathlib", "pickle",
    "marshal", "shutil", "posix", "pty", "tempfile", "multiprocessing", "threading", "resource", "mmap", "weakref",
    "codecs",
})
# typing helpers that evaluate strings (annotations, forward references) as code at run time
_EVALUATING = frozenset({"get_type_hints", "ForwardRef", "evaluate_forward_ref", "get_annotations"})

# Builtins that evaluate code, open files, reach namespaces or block on input (rule 8, 9).
_DANGEROUS_BUILTINS = {
    "open": "opens files", "eval": "evaluates code", "exec": "executes code", "compile": "compiles code",
    "__import__": "imports any module", "globals": "reaches the module namespace", "vars": "reaches object namespaces",
    "breakpoint": "hangs in a debugger", "input": "blocks on standard input", "exit": "ends the interpreter",
    "quit": "ends the interpreter", "help": "starts an interactive pager", "memoryview": "gives raw memory access",
}
# Reflection builtins: fine with a literal attribute name, an escape hatch otherwise.
_REFLECTION = ("getattr", "hasattr", "setattr", "delattr")

# Dunders that are ordinary in numeric code; every other dunder attribute is an escape route
# (``__globals__``, ``__builtins__``, ``__subclasses__``, ``__code__``, ``__dict__``, ``__class__`` ...).
_OK_DUNDERS = frozenset({
    "__init__", "__post_init__", "__call__", "__name__", "__qualname__", "__doc__", "__version__", "__all__",
    "__module__", "__len__", "__getitem__", "__iter__", "__repr__", "__hash__", "__eq__",
    "__future__", "__main__",
})
# Frame, generator, traceback and code-object attributes: the non-dunder ways to the caller's globals.
_FRAME_ATTRS = frozenset({
    "f_back", "f_globals", "f_locals", "f_builtins", "f_code", "f_trace", "gi_frame", "gi_code", "cr_frame",
    "cr_code", "ag_frame", "ag_code", "tb_frame", "tb_next", "co_code", "co_consts", "co_names", "func_globals",
})
# Methods that mutate a container in place (rule 3: caches live in module-level containers).
_MUTATORS = frozenset({
    "append", "extend", "insert", "update", "setdefault", "add", "pop", "popitem", "clear", "remove",
    "discard", "appendleft", "extendleft", "sort", "reverse", "__next__", "send",
})
#: Names of the task's own code: a candidate may use them only for its own definitions (rule 1, 8).
TASK_NAMES = frozenset({"reference", "computation", "workload", "get_inputs", "create_inputs", "baseline", "kernel_task"})
_PALLAS_MODULE = "jax.experimental.pallas"
_DUNDER_RE = re.compile(r"__[A-Za-z][A-Za-z0-9_]*?__")


@dataclass(frozen=True)
class Finding:
    """One violation: the EVAL-INTEGRITY rule number, a short check id, the line, what to change."""

    rule: int
    line: int
    message: str
    check: str = ""

    def __str__(self) -> str:
        return f"line {self.line}: {self.message} (rule {self.rule})"


@dataclass(frozen=True)
class StaticResult:
    ok: bool
    reason: str = ""
    findings: tuple[Finding, ...] = field(default_factory=tuple)


def check_source(
    source: str,
    *,
    target: str,
    require_pallas: bool,
    task_names: Iterable[str] = (),
) -> StaticResult:
    """Check a candidate's source. ``ok`` is False when any finding was made;
    ``reason`` is the first finding (by line) as one actionable line.

    ``task_names``: extra names of the task's module(s), e.g. the stem of the
    task file, that a candidate must not import or refer to."""
    try:
        tree = ast.parse(source)
        checker = _Checker(frozenset(TASK_NAMES | set(task_names)))
        checker.run(tree)
    except SyntaxError as exc:
        f = Finding(0, exc.lineno or 0, f"SyntaxError: {exc.msg}; fix the syntax", "syntax")
        return StaticResult(False, f"static check: {f}", (f,))
    except (RecursionError, MemoryError) as exc:
        f = Finding(0, 0, f"the source is nested too deeply to check ({type(exc).__name__}); "
                    "write the expression with intermediate variables", "nesting")
        return StaticResult(False, f"static check: {f}", (f,))
    # Rule 1 is checked on the program, not the source: the exported target program must contain the target's
    # kernels (a library Pallas op counts; a pallas_call that never reaches the program does not).
    unique: dict[tuple[int, int, str], Finding] = {}
    for f in checker.findings:  # one finding per line and check (a chain can trip a check twice)
        unique.setdefault((f.line, f.rule, f.check), f)
    findings = tuple(sorted(unique.values(), key=lambda f: (f.line, f.rule, f.message)))
    if not findings:
        return StaticResult(True, "", ())
    more = f" (+{len(findings) - 1} more)" if len(findings) > 1 else ""
    return StaticResult(False, f"static check: {findings[0]}{more}", findings)


class _Checker(ast.NodeVisitor):
    def __init__(self, task_names: frozenset[str]) -> None:
        self.task_names = task_names
        self.findings: list[Finding] = []
        self.aliases: dict[str, str] = {}  # local name -> dotted module path it stands for
        self.module_names: set[str] = set()  # names bound at module level (not imports)
        self.scopes: list[set[str]] = []  # bound names, innermost last
        self.funcs: list[ast.AST] = []  # enclosing function nodes
        self.class_depth: list[int] = []  # len(funcs) when each class body began
        self.saw_pallas = False

    def add(self, rule: int, line: int, check: str, message: str) -> None:
        self.findings.append(Finding(rule, line, message, check))

    # --- driver ---------------------------------------------------------------
    def run(self, tree: ast.Module) -> None:
        self._collect_aliases(tree)
        module_scope = _bound_names(tree.body)
        self.module_names = module_scope - set(self.aliases)
        self.scopes = [module_scope]
        self.visit(tree)
        self._scan_strings(tree)

    def _collect_aliases(self, tree: ast.AST) -> None:
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for a in node.names:
                    self.aliases[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                for a in node.names:
                    self.aliases[a.asname or a.name] = f"{node.module}.{a.name}"
        # ``m = np.testing`` makes ``m`` stand for ``numpy.testing`` too (a cheap alias flow, iterated to a fixpoint)
        assigns = [n for n in ast.walk(tree)
                   if isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name)]
        for _ in range(4):  # alias chains deeper than this are not worth following; each name is bound once
            changed = False
            for node in assigns:
                name = node.targets[0].id
                dotted = self.dotted(node.value)
                if dotted and name not in self.aliases:
                    self.aliases[name], changed = dotted, True
            if not changed:
                break

    def dotted(self, node: ast.AST) -> str | None:
        """``np.testing.x`` -> ``numpy.testing.x`` when the chain starts at an imported name."""
        parts: list[str] = []
        while isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        if isinstance(node, ast.Name) and node.id in self.aliases:
            return ".".join([self.aliases[node.id], *reversed(parts)])
        return None

    def is_bound(self, name: str) -> bool:
        return any(name in s for s in self.scopes)

    # --- imports (rule 8) -------------------------------------------------------
    def visit_Import(self, node: ast.Import) -> None:
        for a in node.names:
            self.check_module(a.name, node.lineno, importing=True)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level:
            # a candidate is one file: a relative import can only reach the harness's or the task's files
            self.add(8, node.lineno, "import", "relative import is not allowed: a candidate is a single self-contained file")
            return
        mod = node.module or ""
        if self.check_module(mod, node.lineno, importing=True):
            for a in node.names:
                if a.name != "*":
                    self.check_module(f"{mod}.{a.name}", node.lineno, importing=True)

    def check_module(self, dotted: str, line: int, *, importing: bool = False) -> bool:
        """Check a dotted path reached by import or attribute access; True when allowed."""
        parts = dotted.split(".")
        root = parts[0]
        if root in self.task_names:
            self.add(8, line, "task_module", f"{dotted!r} is the task's module: candidates cannot read the task's code")
            return False
        if importing and root not in ALLOWED_IMPORT_ROOTS:
            self.add(8, line, "import", f"import of {dotted!r} is not allowed; a candidate may import only "
                     f"{', '.join(sorted(ALLOWED_IMPORT_ROOTS - {'__future__'}))}")
            return False
        for prefix, (rule, why) in _DENIED_PREFIXES.items():
            if dotted == prefix or dotted.startswith(prefix + "."):
                self.add(rule, line, "denied_module", f"{dotted!r} is not allowed: {why}")
                return False
        for p in parts[1:]:
            if p.startswith("_") and not _is_dunder(p):
                self.add(8, line, "private", f"{dotted!r} reaches a private name ({p}); use public APIs only")
                return False
            if p in _DANGEROUS_MODULE_ATTRS:
                self.add(8, line, "module_leak", f"{dotted!r} reaches the {p!r} module through another module; not allowed")
                return False
        if (root == "numpy" or dotted.startswith("jax.numpy.")) and parts[-1] in _FILE_FUNCTIONS:
            self.add(8, line, "file_io", f"{dotted!r} reads or writes files; candidates get their inputs as arguments only")
            return False
        if parts[-1] in _EVALUATING:
            self.add(8, line, "evaluates_strings", f"{dotted!r} evaluates strings as code; not allowed")
            return False
        if dotted.startswith(_PALLAS_MODULE) and parts[-1] in ("pallas_call", "core_map", "kernel"):
            self.saw_pallas = True
        return True

    # --- scopes ---------------------------------------------------------------
    def _visit_function(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda) -> None:
        args = node.args
        # Rule 3: a mutable default argument is a cache that survives between calls.
        for d in [*args.defaults, *[d for d in args.kw_defaults if d is not None]]:
            if _is_mutable_literal(d):
                self.add(3, d.lineno, "mutable_default", "mutable default argument keeps state between calls "
                         "(cache trick); use None and build the value inside the function")
        for dec in getattr(node, "decorator_list", []):
            self.visit(dec)
        for d in [*args.defaults, *[d for d in args.kw_defaults if d is not None]]:
            self.visit(d)
        for a in [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg]:
            if a is not None and a.annotation is not None:
                self.visit_annotation(a.annotation)
        if getattr(node, "returns", None) is not None:
            self.visit_annotation(node.returns)
        if not isinstance(node, ast.Lambda) and node.name in ("__exit__", "__aexit__"):
            # Rule 2: a context manager's __exit__ can swallow the kernel's exception like a bare except.
            self.add(2, node.lineno, "exception_handler", f"defining {node.name} makes a context manager that can swallow "
                     "errors (silent fallback); remove it and let errors surface")
        params = {a.arg for a in [*args.posonlyargs, *args.args, *args.kwonlyargs]}
        params |= {a.arg for a in (args.vararg, args.kwarg) if a is not None}
        body = node.body if isinstance(node.body, list) else [node.body]
        self.scopes.append(params | _bound_names(body))
        self.funcs.append(node)
        for stmt in body:
            self.visit(stmt)
        self.funcs.pop()
        self.scopes.pop()

    visit_FunctionDef = visit_AsyncFunctionDef = visit_Lambda = _visit_function

    def visit_annotation(self, node: ast.AST) -> None:
        # typing.get_type_hints, functools.singledispatch and friends evaluate annotations, string ones included,
        # as code at run time: a string annotation is checked like the code it would become (rule 8)
        self.visit(node)
        for sub in ast.walk(node):
            if _is_str(sub):
                try:
                    expr = ast.parse(sub.value.strip(), mode="eval")
                except SyntaxError:
                    continue
                for n in ast.walk(expr):
                    if hasattr(n, "lineno"):
                        n.lineno = sub.lineno  # report the annotation's line
                    if isinstance(n, (ast.Call, ast.Lambda, ast.NamedExpr, ast.ListComp, ast.GeneratorExp)):
                        self.add(8, sub.lineno, "annotation", "string annotation contains code (it would run when "
                                 "annotations are evaluated); annotate with types only")
                        break
                self.visit(expr)

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        for n in [*node.decorator_list, *node.bases, *node.keywords]:
            self.visit(n)
        self.class_depth.append(len(self.funcs))
        self.scopes.append(_bound_names(node.body))
        for stmt in node.body:
            self.visit(stmt)
        self.scopes.pop()
        self.class_depth.pop()

    # --- rule 2: exception handlers --------------------------------------------------
    def visit_Try(self, node: ast.Try) -> None:
        # A handler around the computation turns "my kernel failed" into "the reference ran" (silent fallback).
        # Kernels have no legitimate need to swallow an error: compile errors must reach the judge. A handler
        # that always raises (``except ValueError as e: raise ValueError("clearer message") from e``, as
        # library code does) swallows nothing: every path out of it is an exception.
        swallowing = [h for h in node.handlers if not _always_raises(h.body)]
        if swallowing:
            self.add(2, node.lineno, "exception_handler", "try/except can hide a failing kernel behind a fallback "
                     "(silent fallback); remove the exception handler (or make it re-raise) and let errors surface")
        elif any(isinstance(n, (ast.Return, ast.Break, ast.Continue)) for s in node.finalbody for n in ast.walk(s)):
            self.add(2, node.lineno, "exception_handler", "return/break inside finally swallows exceptions "
                     "(silent fallback); remove it")
        self.generic_visit(node)

    visit_TryStar = visit_Try

    # --- rule 3: state that outlives a call -----------------------------------------------
    def visit_Global(self, node: ast.Global) -> None:
        self.add(3, node.lineno, "global_state", f"'global {', '.join(node.names)}' writes module-level state from a "
                 "function (cache trick); keep all state local to the call")

    def visit_Nonlocal(self, node: ast.Nonlocal) -> None:
        self.add(3, node.lineno, "global_state", f"'nonlocal {', '.join(node.names)}' keeps state in a closure between "
                 "calls (cache trick); keep all state local to the call")

    def _check_store(self, target: ast.AST, line: int) -> None:
        if isinstance(target, (ast.Tuple, ast.List)):
            for t in target.elts:
                self._check_store(t, line)
            return
        if isinstance(target, ast.Starred):
            self._check_store(target.value, line)
            return
        if not isinstance(target, (ast.Attribute, ast.Subscript)):
            return
        dotted = self.dotted(target) if isinstance(target, ast.Attribute) else None
        if dotted:
            # Rule 7: assigning into an imported module patches it for everyone (np.allclose, timers ...).
            self.add(7, line, "patch_module", f"assigns to {dotted!r}: patching an imported module is not allowed")
            return
        root = _root_name(target)
        if root is None or not self.funcs:
            return
        if root in self.module_names and not any(root in s for s in self.scopes[1:]):
            self.add(3, line, "global_state", f"writes into module-level {root!r} from inside a function: state kept "
                     "between calls (cache trick); keep all state local to the call")
        elif self._is_self_outside_init(root):
            self.add(3, line, "global_state", f"writes into {root}.{_first_attr(target)} outside __init__: object state "
                     "kept between calls (cache trick); keep all state local to the call")

    def _is_self_outside_init(self, root: str) -> bool:
        # a method of a class (directly in the class body) writing to its own instance after construction
        if not self.class_depth or len(self.funcs) != self.class_depth[-1] + 1:
            return False
        fn = self.funcs[-1]
        if isinstance(fn, ast.Lambda) or fn.name in ("__init__", "__post_init__", "__new__"):
            return False
        first = (fn.args.posonlyargs + fn.args.args)[:1]
        return bool(first) and first[0].arg == root

    def visit_Assign(self, node: ast.Assign) -> None:
        for t in node.targets:
            self._check_store(t, node.lineno)
        self.generic_visit(node)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        self._check_store(node.target, node.lineno)
        self.generic_visit(node)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        self._check_store(node.target, node.lineno)
        self.visit_annotation(node.annotation)
        self.visit(node.target)
        if node.value is not None:
            self.visit(node.value)

    def visit_Delete(self, node: ast.Delete) -> None:
        for t in node.targets:
            self._check_store(t, node.lineno)
        self.generic_visit(node)

    # --- calls ---------------------------------------------------------------------
    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        if isinstance(func, ast.Name) and func.id == "next" and not self.is_bound("next") and node.args and self.funcs:
            root = _root_name(node.args[0])
            if root and root in self.module_names and not any(root in s for s in self.scopes[1:]):
                # a module-level iterator advanced per call is a counter: code that changes after N traces
                self.add(3, node.lineno, "global_state", f"next({root}) advances module-level {root!r} from inside a "
                         "function: state kept between calls (cache trick)")
        if isinstance(func, ast.Name) and not self.is_bound(func.id) and func.id in _REFLECTION:
            self._check_reflection(func.id, node)
        elif isinstance(func, ast.Attribute):
            root = _root_name(func.value)
            functional = isinstance(func.value, ast.Subscript) and isinstance(func.value.value, ast.Attribute) \
                and func.value.value.attr == "at"  # x.at[i].add(v) is JAX's functional update, not a mutation
            if func.attr in _MUTATORS and root and self.funcs and root in self.module_names and not functional \
                    and not any(root in s for s in self.scopes[1:]):
                self.add(3, node.lineno, "global_state", f"{root}.{func.attr}(...) mutates module-level {root!r} from "
                         "inside a function: state kept between calls (cache trick)")
            if func.attr in ("attrgetter", "methodcaller"):
                names = node.args if func.attr == "attrgetter" else node.args[:1]
                if not all(_is_str(a) for a in names):
                    self.add(8, node.lineno, "reflection", f"{func.attr} with a computed name is an obfuscated getattr; "
                             "use explicit attribute access")
                for a in names:
                    if _is_str(a):
                        for part in a.value.split("."):
                            self._check_attr_name(part, node.lineno, literal=True)
            if self._is_frozen_init_setattr(node):
                # object.__setattr__(self, "name", v) in a frozen dataclass's __init__/__post_init__ is the one ordinary use
                for n in [*node.args, *node.keywords]:
                    self.visit(n)
                return
        self.generic_visit(node)

    def _is_frozen_init_setattr(self, node: ast.Call) -> bool:
        func = node.func
        if not (isinstance(func, ast.Attribute) and func.attr == "__setattr__" and isinstance(func.value, ast.Name)
                and func.value.id == "object" and len(node.args) == 3 and _is_str(node.args[1])):
            return False
        fn = self.funcs[-1] if self.funcs else None
        in_init = isinstance(fn, ast.FunctionDef) and fn.name in ("__init__", "__post_init__") and bool(self.class_depth) \
            and len(self.funcs) == self.class_depth[-1] + 1
        first = fn.args.args[0].arg if in_init and fn.args.args else None
        return in_init and isinstance(node.args[0], ast.Name) and node.args[0].id == first

    def _check_reflection(self, name: str, node: ast.Call) -> None:
        attr = node.args[1] if len(node.args) > 1 else None
        if name in ("setattr", "delattr"):
            # Rule 7 / 3: setattr patches modules and hides state writes from the checks above.
            self.add(7, node.lineno, "reflection", f"{name}() is not allowed (it patches modules or hides state); "
                     "assign attributes explicitly")
        elif attr is None or not _is_str(attr):
            # Rule 8: a computed attribute name defeats every check on attribute names.
            self.add(8, node.lineno, "reflection", f"{name}() with a computed attribute name is an obfuscated attribute "
                     "access; use explicit attribute access")
        else:
            dotted = self.dotted(node.args[0])
            if dotted:
                self.check_module(f"{dotted}.{attr.value}", node.lineno)
            self._check_attr_name(attr.value, node.lineno, literal=True)

    # --- names and attributes ---------------------------------------------------------
    def visit_Name(self, node: ast.Name) -> None:
        if not isinstance(node.ctx, ast.Load) or self.is_bound(node.id):
            return
        name = node.id
        if name in _DANGEROUS_BUILTINS:
            self.add(8, node.lineno, "builtin", f"{name} {_DANGEROUS_BUILTINS[name]}; not allowed in a candidate")
        elif name in _REFLECTION:
            # Rule 8: an aliased getattr (g = getattr) escapes the literal-name check on calls.
            parent_call = getattr(node, "_mk_call_func", False)
            if not parent_call:
                self.add(8, node.lineno, "reflection", f"{name} used as a value (aliasing) is not allowed; "
                         "use explicit attribute access")
        elif _is_dunder(name) and name not in _OK_DUNDERS:
            self.add(8, node.lineno, "dunder", f"{name} reaches interpreter internals; not allowed")
        elif name in self.task_names:
            # Rule 1/8: the task's reference is not the candidate's to call.
            self.add(1, node.lineno, "reference", f"refers to {name!r}, which the candidate does not define: the task's "
                     "reference is not available to candidates; implement the computation")

    def visit_Attribute(self, node: ast.Attribute) -> None:
        if node.attr in ("pallas_call", "core_map"):
            self.saw_pallas = True
        dotted = self.dotted(node)
        if dotted is not None:
            # a chain from an imported module: check it once, as a whole (np.testing.assert_allclose)
            for part in dotted.split(".")[1:]:
                self._check_attr_name(part, node.lineno)
            self.check_module(dotted, node.lineno)
            return
        self._check_attr_name(node.attr, node.lineno)
        owner = node.value.id if isinstance(node.value, ast.Name) else None
        if (node.attr.startswith("_") and not _is_dunder(node.attr) and node.attr not in _OK_PRIVATE
                and owner not in ("self", "cls")):
            # a private attribute of something that is not the candidate's own object: the way into other modules'
            # internals through any value (``(lambda m: m._sys)(collections)``)
            self.add(8, node.lineno, "private", f"attribute {node.attr!r} is a private name of another object; "
                     "use public APIs only")
        self.generic_visit(node)

    def _check_attr_name(self, attr: str, line: int, *, literal: bool = False) -> None:
        """Attribute names that are dangerous whatever object they are read from (a module can be an argument)."""
        if _is_dunder(attr) and attr not in _OK_DUNDERS:
            self.add(8, line, "dunder", f"attribute {attr} reaches interpreter internals (sandbox escape); not allowed")
        elif attr in _FRAME_ATTRS:
            self.add(8, line, "dunder", f"attribute {attr} reaches stack frames or code objects; not allowed")
        elif attr in ("cache_info", "cache_parameters", "cache_clear"):
            # a cache's size counts the traces so far: code that changes after the judge's last trace (a time bomb)
            self.add(3, line, "global_state", f"attribute {attr} reads or resets a cache's state between calls (cache "
                     "trick); keep all state local to the call")
        elif attr in _DANGEROUS_ATTRS_ANYWHERE:
            self.add(8, line, "module_leak", f"attribute {attr!r} reaches the {attr} module; not allowed")
        elif attr == "ctypes" or attr in _FILE_FUNCTIONS_ANYWHERE:
            self.add(8, line, "file_io", f"attribute {attr} gives raw memory or file access; not allowed")
        elif attr in _EVALUATING:
            self.add(8, line, "evaluates_strings", f"{attr} evaluates strings as code; not allowed")
        elif literal and attr.startswith("_") and not _is_dunder(attr):
            self.add(8, line, "private", f"attribute name {attr!r} reaches a private name; use public APIs only")

    def generic_visit(self, node: ast.AST) -> None:
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            node.func._mk_call_func = True  # type: ignore[attr-defined]
        super().generic_visit(node)

    # --- strings --------------------------------------------------------------------
    def _scan_strings(self, tree: ast.AST) -> None:
        # Dunder names inside strings feed getattr, str.format and friends ("{0.__globals__}").
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                for m in _DUNDER_RE.findall(node.value):
                    if m not in _OK_DUNDERS:
                        self.add(8, node.lineno, "dunder", f"string mentions {m}, an interpreter internal; not allowed")
                        break


def _always_raises(body: Sequence[ast.stmt]) -> bool:
    """Whether every path through an exception handler's ``body`` ends in ``raise``: its last statement is a
    ``raise`` (or an ``if`` whose branches both always raise), and nothing in it can leave the handler
    another way (``return``, ``break``, ``continue``, ``yield``, nested definitions, loops, ``try``, ``with``,
    ``match``)."""
    if not body:
        return False
    for stmt in body:
        for n in ast.walk(stmt):
            if isinstance(n, (ast.Return, ast.Break, ast.Continue, ast.Yield, ast.YieldFrom, ast.Await, ast.FunctionDef,
                              ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef, ast.For, ast.AsyncFor, ast.While, ast.Try,
                              ast.With, ast.AsyncWith, ast.Match)) or type(n).__name__ == "TryStar":
                return False
    last = body[-1]
    if isinstance(last, ast.Raise):
        return True
    return isinstance(last, ast.If) and _always_raises(last.body) and _always_raises(last.orelse)


#: underscore names that are public API (namedtuple methods)
_OK_PRIVATE = frozenset({"_replace", "_asdict", "_fields", "_make", "_field_defaults"})


def _is_dunder(name: str) -> bool:
    return len(name) > 4 and name.startswith("__") and name.endswith("__")


def _is_str(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, str)


def _is_mutable_literal(node: ast.AST) -> bool:
    if isinstance(node, (ast.Dict, ast.List, ast.Set, ast.DictComp, ast.ListComp, ast.SetComp)):
        return True
    return isinstance(node, ast.Call) and isinstance(node.func, (ast.Name, ast.Attribute)) and \
        (node.func.id if isinstance(node.func, ast.Name) else node.func.attr) in \
        ("dict", "list", "set", "defaultdict", "OrderedDict", "Counter", "deque", "bytearray")


def _root_name(node: ast.AST) -> str | None:
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def _first_attr(node: ast.AST) -> str:
    last = "?"
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        if isinstance(node, ast.Attribute):
            last = node.attr
        node = node.value
    return last


def _bound_names(body: Sequence[ast.stmt]) -> set[str]:
    """Names a block binds in its own scope (not inside nested functions or classes)."""
    names: set[str] = set()
    stack: list[ast.AST] = list(body)
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
            stack.extend(node.decorator_list)
            continue
        if isinstance(node, ast.Lambda):
            continue
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            names.add(node.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name.split(".")[0]) for a in node.names)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            names.add(node.name)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, (ast.MatchAs, ast.MatchStar)) and node.name:
            names.add(node.name)
        stack.extend(ast.iter_child_nodes(node))
    return names
