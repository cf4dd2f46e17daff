"""Run chapters the way a reader does: in JupyterLab, "Restart Kernel and Run All Cells", in headless Chromium.

    python tools/check_in_jupyterlab.py notebooks/13_results.ipynb [more notebooks ...]

Starts `jupyter lab` on a free local port (no token, this machine only), opens each notebook, restarts its
kernel and runs every cell through the JupyterLab interface, waits until no cell is running, and reports
the number of cells run, error outputs and the time taken. Nothing is saved: the notebook on disk is not
changed. Exits 1 if any notebook shows an error, 2 (with one `error:` line) if JupyterLab or the browser fails.
JupyterLab and its kernels are stopped at the end in every case, killed if they do not stop within 30 s.
Needs Debian's Chromium and `playwright` (requirements.txt).
"""
import argparse
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from playwright.sync_api import Error as PlaywrightError
from playwright.sync_api import sync_playwright

ROOT = Path(__file__).resolve().parents[1]
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(url: str, seconds: float) -> None:
    end = time.time() + seconds
    while time.time() < end:
        try:
            urllib.request.urlopen(url, timeout=2)
            return
        except OSError:
            time.sleep(1)
    raise TimeoutError(f"JupyterLab did not answer at {url} within {seconds:.0f} s")


def stop(server: subprocess.Popen, grace: float = 30) -> None:
    """Stop JupyterLab and every kernel it started (its process group): SIGTERM, then SIGKILL after `grace` s."""
    def signal_group(sig: int) -> None:
        try:
            os.killpg(server.pid, sig)  # the server was started in a session of its own: pgid == its pid
        except (ProcessLookupError, PermissionError):
            pass  # nothing of the group is left

    if server.poll() is None:
        signal_group(signal.SIGTERM)
        try:
            server.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            print(f"warning: JupyterLab did not stop within {grace:.0f} s of SIGTERM: killing it", file=sys.stderr)
    signal_group(signal.SIGKILL)  # the server if it is still running, and any kernel that outlived it
    server.wait()


def run_all(page, base: str, notebook: str, timeout: float) -> tuple[int, int, float]:
    page.goto(f"{base}/lab/tree/{notebook}?reset", wait_until="load")  # ?reset: no tabs restored
    panel = page.locator(".jp-NotebookPanel:not(.lm-mod-hidden)")
    panel.locator(".jp-Notebook").wait_for(timeout=60_000)
    page.wait_for_selector(".jp-Notebook-ExecutionIndicator[data-status='idle']", timeout=120_000)
    page.click("text=Edit", timeout=10_000)  # the stored execution counts would look like a finished run
    page.click("text=Clear Outputs of All Cells", timeout=10_000)
    page.click("text=Run", timeout=10_000)  # the menu bar
    page.click("text=Restart Kernel and Run All Cells…", timeout=10_000)
    page.click(".jp-Dialog button.jp-mod-accept", timeout=10_000)  # "Restart"
    start = time.time()
    prompts = panel.locator(".jp-CodeCell .jp-InputArea-prompt")
    while time.time() - start < timeout:  # done when every code cell shows an execution count, e.g. [12]:
        texts = prompts.all_inner_texts()
        if texts and all(re.fullmatch(r"\[\d+\]:", t.strip()) for t in texts):
            break
        time.sleep(2)
    else:
        raise TimeoutError(f"{notebook}: not every cell had run after {timeout:.0f} s")
    cells = panel.locator(".jp-CodeCell").count()
    errors = panel.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.error']").count()
    return cells, errors, time.time() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="+")
    parser.add_argument("--timeout", type=float, default=600, help="seconds a notebook may run (default 600)")
    args = parser.parse_args()
    missing = [nb for nb in args.notebooks if not (ROOT / nb).is_file()]
    if missing:
        print(f"error: no notebook at {', '.join(missing)} (give paths from the repository root, e.g. "
              "notebooks/13_results.ipynb)", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))  # so that `finally` stops the server
    port = free_port()
    scratch = Path(tempfile.mkdtemp(prefix="lab-check-"))
    # Render every cell (JupyterLab 4 otherwise renders only those near the screen), and start with no
    # restored tabs: settings and workspaces live in a scratch folder, not the user's.
    settings = scratch / "settings" / "@jupyterlab" / "notebook-extension"
    settings.mkdir(parents=True)
    (settings / "tracker.jupyterlab-settings").write_text(json.dumps({"windowingMode": "none"}))
    # No autosave: the cleared and re-run notebook must never be written back over the stored outputs, however
    # long a run takes (JupyterLab saves every 120 s by default).
    docmanager = settings.parent / "docmanager-extension"
    docmanager.mkdir()
    (docmanager / "plugin.jupyterlab-settings").write_text(json.dumps({"autosave": False}))
    server = subprocess.Popen([sys.executable, "-m", "jupyterlab", "--no-browser", "--allow-root", f"--port={port}",
                               "--ServerApp.token=", "--ServerApp.password=", f"--ServerApp.root_dir={ROOT}",
                               f"--LabApp.user_settings_dir={scratch / 'settings'}",
                               f"--LabApp.workspaces_dir={scratch / 'workspaces'}",
                               f"--FileCheckpoints.checkpoint_dir={scratch / 'checkpoints'}"],  # not notebooks/
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    failed = False
    try:
        base = f"http://127.0.0.1:{port}"
        wait_for(f"{base}/lab", 120)
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=ARGS)
            for notebook in args.notebooks:
                page = browser.new_page(viewport={"width": 1400, "height": 900})
                cells, errors, seconds = run_all(page, base, Path(notebook).as_posix(), args.timeout)
                print(f"{notebook}: {cells} code cells run in JupyterLab from a fresh kernel in {seconds:.0f} s, "
                      f"{errors} error outputs")
                failed |= errors > 0
                page.close()
            browser.close()
    except (TimeoutError, PlaywrightError) as e:
        print(f"error: {(str(e).splitlines() or [type(e).__name__])[0]}", file=sys.stderr)
        return 2
    finally:
        stop(server)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
