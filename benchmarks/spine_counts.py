"""Counts of how a value crosses the login-node side (issue 57), for any checkout: `make spine-counts`, or
`make spine-counts ROOT=OTHER_CHECKOUT` to count an earlier commit by this checkout's rules.

Static counts read every module of cluster_train/host with `ast`:
- time_limit_parses: calls of a scheduler's `time_seconds(...)` (a time limit parsed from its text);
- adapter_lookups: calls of `adapter(NAME)` (a scheduler adapter looked up by name);
- manifest_key_reads: `X["key"]` and `X.get("key")` where X's source names a manifest;
- upward_imports: imports (module level, lazy and TYPE_CHECKING alike) into a room above the importer's, by the
  order cluster_train/host/layers.py gives (this checkout's order, applied to --root's tree).
Runtime counts come from one API dry run of the demo on clusters/local.yaml (`make image` first), under a profile hook:
- override_hops: functions of cluster_train that receive the override itself (a "KEY=VALUE" line, a {KEY: VALUE}
  mapping, or a list or object holding one) on its way from the door to the resolved config, and their files; the
  same from the command line's --set (cli_override_hops);
- override_text_parses: calls of config.parse_overrides / parse_settings / typed_setting / yaml_scalar that read it
  from text (a mapping handed to parse_settings, or a call nested in another, is not one);
- adapter_calls_per_build and launch_of_calls_per_build."""
import argparse
import ast
import contextlib
import io
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Dict, List

HERE = Path(__file__).resolve().parents[1]
KEY, VALUE = "data.root", "ctprobe-value-x7"  # a dotted key every door takes; its value: a directory named so


def host_modules(root: Path) -> Dict[str, ast.AST]:
    base = root / "cluster_train" / "host"
    return {str(p.relative_to(root)): ast.parse(p.read_text()) for p in sorted(base.rglob("*.py"))}


def called(node: ast.AST, name: str) -> bool:
    func = getattr(node, "func", None)
    return isinstance(node, ast.Call) and (getattr(func, "id", None) == name or getattr(func, "attr", None) == name)


def static_counts(root: Path) -> Dict[str, Dict[str, int]]:
    counts: Dict[str, Dict[str, int]] = {"time_limit_parses": {}, "adapter_lookups": {}, "manifest_key_reads": {}}
    for path, tree in host_modules(root).items():
        source = (root / path).read_text()
        for node in ast.walk(tree):
            hits = {"time_limit_parses": called(node, "time_seconds"),
                    "adapter_lookups": called(node, "adapter"),
                    "manifest_key_reads": manifest_read(node, source)}
            for metric, hit in hits.items():
                if hit:
                    counts[metric][path] = counts[metric].get(path, 0) + 1
    return counts


def manifest_read(node: ast.AST, source: str) -> bool:
    if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant) and isinstance(node.slice.value, str):
        target = node.value
    elif called(node, "get") and isinstance(node.func, ast.Attribute) and node.args and \
            isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str):
        target = node.func.value
    else:
        return False
    return "manifest" in (ast.get_source_segment(source, target) or "").lower()


def layers() -> List[List[str]]:
    spec = importlib.util.spec_from_file_location("layers", HERE / "cluster_train" / "host" / "layers.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.LAYERS


def upward_imports(root: Path) -> List[str]:
    """Each import into a higher room, as 'importer -> imported'."""
    level = {room: i for i, rooms in enumerate(layers()) for room in rooms}
    found = []
    for path, tree in host_modules(root).items():
        mine = room_of(path.removesuffix(".py").replace("/", "."))
        for node in ast.walk(tree):
            for module in imported_modules(node):
                theirs = room_of(module)
                if theirs != mine and level.get(theirs, 99) < level.get(mine, 99):
                    found.append(f"{path} -> {module}")
    return found


def imported_modules(node: ast.AST) -> List[str]:
    """The cluster_train.host modules an import names: `from cluster_train.host import settings` and
    `import cluster_train.host.x` as well as `from cluster_train.host.x import y`."""
    if isinstance(node, ast.ImportFrom) and node.module == "cluster_train.host":
        return [f"{node.module}.{alias.name}" for alias in node.names]
    if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("cluster_train.host."):
        return [node.module]
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names if alias.name.startswith("cluster_train.host.")]
    return []


def room_of(module: str) -> str:
    """cluster_train.host.runs.table -> runs; a module at the top of cluster_train/host is a room of its own."""
    parts = module.split(".")
    return parts[2] if len(parts) > 2 else parts[-1]


def runtime_counts(root: Path) -> Dict[str, object]:
    with tempfile.TemporaryDirectory() as home:
        settings = Path(home) / "settings.yaml"
        settings.write_text(f"images: {HERE / 'images'}\n")  # `make image`'s CPU image
        env = {**os.environ, "PYTHONPATH": str(root), "CT_SETTINGS": str(settings), "CT_RUNS_DIR": home}
        probe = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--probe"], cwd=root, text=True,
                               capture_output=True, env=env)
    if probe.returncode:
        raise SystemExit(f"the dry-run probe failed in {root}:\n{probe.stderr[-2000:]}")
    return json.loads(probe.stdout.strip().splitlines()[-1])


def carries(value: object, depth: int = 0) -> bool:
    """The override itself: a "KEY=VALUE" line, a mapping {KEY: VALUE}, or a list or object holding one (not the
    resolved config, whose data.root is the same directory under another name)."""
    if isinstance(value, str):
        return value.startswith(KEY + "=") and VALUE in value
    if depth > 2:
        return False
    if isinstance(value, dict):
        return any(k == KEY and VALUE in str(v) or carries(v, depth + 1) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return any(carries(v, depth + 1) for v in value)
    if depth == 0 and hasattr(value, "__dict__") and not isinstance(value, type):
        return any(carries(v, depth + 1) for v in vars(value).values() if not callable(v))
    return False


PARSERS = ("parse_overrides", "parse_settings", "typed_setting", "yaml_scalar")


def text_parse(frame) -> bool:
    """A call that reads the override back from text: not one handed a mapping of typed values (parse_settings
    returns it as it is), nor one inside another such call (parse_settings types each line with typed_setting)."""
    name, caller = frame.f_code.co_name, frame.f_back.f_code.co_name if frame.f_back else ""
    if name not in PARSERS or caller in PARSERS:
        return False
    given = frame.f_locals.get(frame.f_code.co_varnames[0]) if frame.f_code.co_argcount else None
    return not isinstance(given, dict)


def probe() -> None:
    """One dry run with the override, from the Python door, its calls watched (run in --root's tree)."""
    import cluster_train as ct

    hops, parses, calls = set(), 0, {"adapter": 0, "launch_of": 0}
    package = str(Path(ct.__file__).parent)

    def watch(frame, event, arg):
        nonlocal parses
        code = frame.f_code
        if event != "call" or not code.co_filename.startswith(package):
            return
        if code.co_name in calls and "schedulers" in code.co_filename + code.co_name or code.co_name == "launch_of":
            calls[code.co_name] += 1
        if code.co_name in ("<genexpr>", "<listcomp>", "<dictcomp>", "<lambda>"):
            return
        names = code.co_varnames[:code.co_argcount + code.co_kwonlyargcount]
        if any(carries(frame.f_locals.get(n)) for n in names):
            hops.add((os.path.relpath(code.co_filename, package), code.co_qualname))
            parses += text_parse(frame)

    data = Path(os.environ["CT_RUNS_DIR"]) / VALUE
    data.mkdir()
    sys.setprofile(watch)
    ct.Job("local", "cpu_2proc", "demo", overrides={KEY: str(data)}).dry_run()
    sys.setprofile(None)
    counted = {"override_hops": len(hops), "override_files": len({f for f, _ in hops}),
               "override_text_parses": parses, "adapter_calls_per_build": calls["adapter"],
               "launch_of_calls_per_build": calls["launch_of"], "override_path": sorted(f"{f}:{q}" for f, q in hops)}
    hops.clear()
    parses = 0
    from cluster_train.host.submit import submit_command

    sys.setprofile(watch)
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        submit_command(["local", "cpu_2proc", "demo", "--set", f"{KEY}={data}", "--dry-run"], None)
    sys.setprofile(None)
    counted.update({"cli_override_hops": len(hops), "cli_override_text_parses": parses,
                    "cli_override_path": sorted(f"{f}:{q}" for f, q in hops)})
    print(json.dumps(counted))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--root", type=Path, default=HERE, help="the checkout to count (default: this one)")
    p.add_argument("--out", type=Path, help="also write the counts here as JSON")
    p.add_argument("--probe", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.probe:
        return probe()
    root = args.root.resolve()
    static = static_counts(root)
    upward = upward_imports(root)
    result = {"root": str(root), **{m: {"count": sum(v.values()), "files": len(v)} for m, v in static.items()},
              "upward_imports": {"count": len(upward), "which": upward}, **runtime_counts(root)}
    text = json.dumps(result, indent=1)
    if args.out:
        args.out.write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
