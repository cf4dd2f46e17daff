"""Run chapters the way a reader does: in JupyterLab, "Restart Kernel and Run All Cells", in headless Chromium.

    python tools/check_in_jupyterlab.py notebooks/13_results.ipynb [more notebooks ...] [--timeout S]

Starts `jupyter lab` on a free local port (no token, this machine only), opens each notebook, clears its
outputs, restarts its kernel and runs every cell through the JupyterLab interface. What it reports it knows
from the kernel itself, not from the page: the page opens one more connection to the notebook's kernel and
keeps what the kernel publishes to every client (its status, each cell's execute_input with its execution
count, each error). The run counts only after the kernel's restart, its execution counts must go 1, 2, 3, ...,
and it is over when the last code cell's request has ended (or a cell failed and JupyterLab stopped the run
there): stored execution counts in the file cannot pass for a run. The number of code cells comes from the
notebook file, not from what the page has rendered. Reported per notebook: code cells run of those it holds,
error outputs (the first one's name and cell), widget outputs that did not render ("Error displaying widget",
or a widget view left blank) and the wall time. Nothing is saved: the notebook on disk is not changed.

Exit status 0 when every notebook ran every cell without an error or a broken widget within --timeout; 1 when
one did not (a cut run says so); 2 (with one `error:` line) if JupyterLab or the browser fails. JupyterLab and
its kernels are stopped at the end in every case, killed if they do not stop within 30 s. Needs Debian's
Chromium and `playwright` (requirements.txt).
"""

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from playwright.sync_api import Error as PlaywrightError
from playwright.sync_api import sync_playwright

from transformer.engine.command_input import positive_number, run_tool

ROOT = Path(__file__).resolve().parents[1]
RESTART_S = 120  # seconds the kernel may take to restart (a loaded machine); the run's --timeout starts after
ARGS = [
    "--no-sandbox",
    "--no-proxy-server",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
]


LOCAL = urllib.request.build_opener(
    urllib.request.ProxyHandler({})
)  # our own server: never through a proxy
# (http_proxy in the environment would otherwise send even 127.0.0.1 to it; a dead proxy, as the course's
# offline tests set, then makes JupyterLab look as if it never started)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(url: str, seconds: float) -> None:
    end = time.time() + seconds
    while time.time() < end:
        try:
            LOCAL.open(url, timeout=2)
            return
        except OSError:
            time.sleep(1)
    raise TimeoutError(f"JupyterLab did not answer at {url} within {seconds:.0f} s")


def stop(server: subprocess.Popen, grace: float = 30) -> None:
    """Stop JupyterLab and every kernel it started (its process group): SIGTERM, then SIGKILL after `grace` s."""

    def signal_group(sig: int) -> None:
        try:
            os.killpg(
                server.pid, sig
            )  # the server was started in a session of its own: pgid == its pid
        except (ProcessLookupError, PermissionError):
            pass  # nothing of the group is left

    if server.poll() is None:
        signal_group(signal.SIGTERM)
        try:
            server.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            print(
                f"warning: JupyterLab did not stop within {grace:.0f} s of SIGTERM: killing it",
                file=sys.stderr,
            )
    signal_group(
        signal.SIGKILL
    )  # the server if it is still running, and any kernel that outlived it
    server.wait()


def code_cells(path: Path) -> list[tuple[int, str]]:
    """(index among all cells, first line) of every code cell JupyterLab sends to the kernel (not the empty ones),
    read from the notebook file: the count does not depend on what the page has rendered."""
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    found = []
    for i, cell in enumerate(cells):
        source = (
            "".join(cell["source"])
            if isinstance(cell["source"], list)
            else cell["source"]
        )
        if cell["cell_type"] == "code" and source.strip():
            found.append((i, source.strip().splitlines()[0][:60]))
    return found


def kernel_of(base: str, notebook: str, seconds: float = 60) -> str:
    """The id of the kernel the server runs for `notebook` (its session, from the server's REST API)."""
    end = time.time() + seconds
    while time.time() < end:
        sessions = json.load(LOCAL.open(f"{base}/api/sessions", timeout=5))
        for s in sessions:
            if s.get("path") == notebook and s.get("kernel"):
                return s["kernel"]["id"]
        time.sleep(0.5)
    raise TimeoutError(
        f"{notebook}: JupyterLab started no kernel within {seconds:.0f} s"
    )


# Every message the kernel publishes (iopub) reaches every client connected to it; the page opens one more
# connection and keeps what the kernel says about this run: its status, each execute_input (with its execution
# count), each error.
LISTEN = """([base, kernel]) => new Promise((resolve, reject) => {
    window.__kernel = [];
    const ws = new WebSocket(base.replace('http', 'ws') + '/api/kernels/' + kernel + '/channels?session_id=lab-check');
    ws.onmessage = (event) => {
        const m = JSON.parse(event.data);
        if (m.channel !== 'iopub') return;
        const keep = {type: m.header.msg_type, parent: (m.parent_header || {}).msg_id || null};
        if (m.header.msg_type === 'status') keep.state = m.content.execution_state;
        if (m.header.msg_type === 'execute_input') keep.count = m.content.execution_count;
        if (m.header.msg_type === 'error') keep.ename = m.content.ename;
        window.__kernel.push(keep);
    };
    ws.onopen = () => resolve(true);
    ws.onerror = () => reject(new Error('cannot listen to the kernel'));
})"""


@dataclass
class Run:
    """What a notebook's run in JupyterLab showed: cells run by the fresh kernel, errors, widgets, time."""

    cells: int  # code cells the notebook holds (non-empty)
    ran: int  # execute_input messages of the restarted kernel, counted 1, 2, ... in order
    errors: list[str]  # "NameError in cell 5 (`x = y`)"
    widget_failures: int
    seconds: float
    finished: bool  # False: cut by the timeout
    counts_in_order: bool = True

    def ok(self) -> bool:
        return (
            self.finished
            and self.counts_in_order
            and self.ran == self.cells
            and not self.errors
            and not self.widget_failures
        )


def _after_restart(messages: list[dict]) -> list[dict] | None:
    """The messages of the restarted kernel, None before it has said anything: from its `restarting` or
    `starting` status, or, when a loaded machine let that message pass before this connection listened to the
    new kernel, from its first cell (execution count 1: the kernel before the restart ran none after the click)."""
    for i, m in enumerate(messages):
        if m.get("state") in ("restarting", "starting"):
            return messages[i + 1 :]
        if m["type"] == "execute_input" and m["count"] == 1:
            return messages[i:]
    return None


def _finished(run: list[dict], cells: int, indicator_idle: bool) -> bool:
    """Every cell's execution is over: the last code cell ran and its request ended (its `idle`), or a cell failed
    (JupyterLab then drops the cells after it) and the notebook and the kernel are idle."""
    inputs = [m for m in run if m["type"] == "execute_input"]
    if inputs and inputs[-1]["count"] == cells:
        return any(
            m.get("state") == "idle" and m["parent"] == inputs[-1]["parent"]
            for m in run
        )
    failed = any(m["type"] == "error" for m in run)
    states = [m["state"] for m in run if m["type"] == "status"]
    return failed and indicator_idle and bool(states) and states[-1] == "idle"


def _widget_failures(panel) -> int:
    """Widget outputs that did not render: JupyterLab's "Error displaying widget", or a view still at "Loading
    widget..." ten seconds after the run (its model never came: ipywidgets 8 waits for it forever)."""
    loading = panel.locator(".jp-OutputArea-output", has_text="Loading widget")
    end = time.time() + 10
    while loading.count() and time.time() < end:
        time.sleep(0.5)
    return (
        loading.count()
        + panel.locator(
            ".jp-OutputArea-output", has_text="Error displaying widget"
        ).count()
    )


class NoRestart(TimeoutError):
    """No message of the restarted kernel, or none of its cells, reached the page's listener. On a loaded machine
    this happens now and then although the kernel restarted (its messages pass before the listener hears the new
    kernel); the notebook is then run once more in a fresh page, and a second miss is reported."""


def run_all(page, base: str, notebook: str, path: Path, timeout: float) -> Run:
    cells = code_cells(path)
    page.goto(
        f"{base}/lab/tree/{notebook}?reset", wait_until="load"
    )  # ?reset: no tabs restored
    panel = page.locator(".jp-NotebookPanel:not(.lm-mod-hidden)")
    panel.locator(".jp-Notebook").wait_for(timeout=60_000)
    page.wait_for_selector(
        ".jp-Notebook-ExecutionIndicator[data-status='idle']", timeout=120_000
    )
    page.evaluate(LISTEN, [base, kernel_of(base, notebook)])
    page.click("text=Edit", timeout=10_000)
    page.click(
        "text=Clear Outputs of All Cells", timeout=10_000
    )  # the reader's view: no stored outputs
    page.click("text=Run", timeout=10_000)  # the menu bar
    page.click("text=Restart Kernel and Run All Cells…", timeout=10_000)
    page.click(".jp-Dialog button.jp-mod-accept", timeout=10_000)  # "Restart"
    asked = time.time()
    while (
        _after_restart(page.evaluate("window.__kernel")) is None
    ):  # the run's clock starts with the new kernel
        if time.time() - asked > RESTART_S:
            raise NoRestart(
                f"{notebook}: the kernel did not restart within {RESTART_S} s of the click"
            )
        time.sleep(0.2)
    start, finished = time.time(), False
    while time.time() - start < timeout:
        run = _after_restart(page.evaluate("window.__kernel"))
        idle = (
            page.locator(".jp-Notebook-ExecutionIndicator[data-status='idle']").count()
            > 0
        )
        if _finished(run, len(cells), idle):
            finished = True
            break
        time.sleep(0.5)
    seconds = time.time() - start
    run = _after_restart(page.evaluate("window.__kernel")) or []
    inputs = [m for m in run if m["type"] == "execute_input"]
    if not finished and not inputs and cells:
        # not one cell of the new kernel reached the listener: the page missed the
        # kernel, as with a restart it did not hear
        raise NoRestart(
            f"{notebook}: no cell of the restarted kernel was heard within {timeout:.0f} s"
        )
    cell_of = {m["parent"]: m["count"] for m in inputs}
    errors = []
    for m in (m for m in run if m["type"] == "error"):
        k = cell_of.get(m["parent"])
        where = (
            f"cell {cells[k - 1][0] + 1} (`{cells[k - 1][1]}`)"
            if k and k <= len(cells)
            else "a cell"
        )
        errors.append(f"{m['ename']} in {where}")
    in_order = [m["count"] for m in inputs] == list(range(1, len(inputs) + 1))
    return Run(
        len(cells),
        len(inputs),
        errors,
        _widget_failures(panel),
        seconds,
        finished,
        in_order,
    )


def report(notebook: str, run: Run, timeout: float) -> str:
    text = (
        f"{notebook}: {run.ran} of {run.cells} code cells run in JupyterLab by a freshly restarted kernel in "
        f"{run.seconds:.0f} s; {len(run.errors)} error output(s)"
        + (f", the first: {run.errors[0]}" if run.errors else "")
        + f"; {run.widget_failures} widget output(s) that did not render"
    )
    if not run.finished:
        text += f"; CUT: not finished within the {timeout:.0f} s timeout"
    if not run.counts_in_order:
        text += "; the execution counts were not 1, 2, 3, ...: not one fresh kernel run"
    return text


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="+")
    parser.add_argument(
        "--timeout",
        type=positive_number,
        default=600,
        help="seconds a notebook may run, counted from its kernel's restart (default 600)",
    )
    args = parser.parse_args()
    paths = [Path(nb).resolve() for nb in args.notebooks]
    missing = [nb for nb, p in zip(args.notebooks, paths) if not p.is_file()]
    if missing:
        print(
            f"error: no notebook at {', '.join(missing)} (e.g. notebooks/13_results.ipynb)",
            file=sys.stderr,
        )
        return 2
    root = Path(
        os.path.commonpath([p.parent for p in paths])
    )  # the server's root: every notebook inside it
    signal.signal(
        signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum)
    )  # so that `finally` stops the server
    port = free_port()
    scratch = Path(tempfile.mkdtemp(prefix="lab-check-"))
    # Render every cell (JupyterLab 4 otherwise renders only those near the screen), and start with no
    # restored tabs: settings and workspaces live in a scratch folder, not the user's.
    settings = scratch / "settings" / "@jupyterlab" / "notebook-extension"
    settings.mkdir(parents=True)
    (settings / "tracker.jupyterlab-settings").write_text(
        json.dumps({"windowingMode": "none"})
    )
    # No autosave: the cleared and re-run notebook must never be written back over the stored outputs, however
    # long a run takes (JupyterLab saves every 120 s by default).
    docmanager = settings.parent / "docmanager-extension"
    docmanager.mkdir()
    (docmanager / "plugin.jupyterlab-settings").write_text(
        json.dumps({"autosave": False})
    )
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "jupyterlab",
            "--no-browser",
            "--allow-root",
            f"--port={port}",
            "--ServerApp.token=",
            "--ServerApp.password=",
            f"--ServerApp.root_dir={root}",
            f"--LabApp.user_settings_dir={scratch / 'settings'}",
            f"--LabApp.workspaces_dir={scratch / 'workspaces'}",
            f"--FileCheckpoints.checkpoint_dir={scratch / 'checkpoints'}",
        ],  # not notebooks/
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    failed = False
    try:
        base = f"http://127.0.0.1:{port}"
        wait_for(f"{base}/lab", 120)
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=ARGS)
            for path in paths:
                notebook = path.relative_to(root).as_posix()
                for attempt in (1, 2):
                    page = browser.new_page(viewport={"width": 1400, "height": 900})
                    try:
                        run = run_all(page, base, notebook, path, args.timeout)
                        break
                    except NoRestart as e:
                        page.close()
                        if attempt == 2:
                            raise
                        print(f"{e}: running it once more", file=sys.stderr)
                print(
                    report(
                        str(
                            path.relative_to(ROOT)
                            if path.is_relative_to(ROOT)
                            else path
                        ),
                        run,
                        args.timeout,
                    )
                )
                failed |= not run.ok()
                page.close()
            browser.close()
    except (TimeoutError, PlaywrightError) as e:
        print(
            f"error: {(str(e).splitlines() or [type(e).__name__])[0]}", file=sys.stderr
        )
        return 2
    finally:
        stop(server)
        shutil.rmtree(scratch, ignore_errors=True)  # its settings, made for this run
    return 1 if failed else 0


if __name__ == "__main__":
    run_tool(main)
