"""Open deplokit's renderings in a real JupyterLab in headless Chromium; screenshot them in
the light and the dark theme.

    python scripts/screenshot_lab.py [--out DIR] [--notebook scripts/lab_demo.ipynb]

Needs jupyterlab (the `lab` extra), playwright (`pip install playwright`, the Python
package only) and a system Chromium (`apt-get install chromium`); never downloads a
browser. JupyterLab runs on 127.0.0.1 only. The notebook is copied into a temporary
folder with one more cell that draws the plots from ILLUSTRATION records (made-up numbers,
titled as such: they check the drawing, they are not measurements), run there, and each
cell's output is saved as DIR/<theme>/<NN>_<what>.png to be looked at."""
from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"]
THEMES = {"light": "JupyterLab Light", "dark": "JupyterLab Dark"}

ILLUSTRATION_CELL = '''\
# ILLUSTRATION ONLY: made-up records to look at the plots; not measurements.
from deplokit.notebook.plots import TuneProgressPlot, bench_bars, roofline
from deplokit.runtime.bench_report import BenchReport, KernelProfile
from deplokit.tune.result import Trial

ks = (KernelProfile("k_a", 10.0, 1, 8_000_000, 2_000_000, 32, 1024, 0.5),
      KernelProfile("k_b", 50.0, 1, 4_000_000, 400_000_000, 64, 0, 0.5))
fake = [BenchReport("ILLUSTRATION a", "not a measurement", "sm_90", 12.0, 15.0, 13.0, 8_000_000, 2_000_000,
                    3350.0, 67.0, ks),
        BenchReport("ILLUSTRATION b", "not a measurement", "sm_90", 30.0, 45.0, None, 16_000_000, 4_000_000,
                    3350.0, 67.0)]
progress = TuneProgressPlot("model", min_interval=0)
display(bench_bars(fake, title="ILLUSTRATION (made-up numbers)"),
        roofline(fake, title="ILLUSTRATION (made-up numbers)"), progress.widget)
best = None
for i, cost in enumerate([9.0, None, 7.5, 8.0, 5.5, 6.0, 5.2, 7.0]):
    best = cost if best is None else (min(best, cost) if cost is not None else best)
    progress(Trial(i, (("knob", i),), cost, best, cost is not None, "" if cost else "illegal"))
'''


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def prepare(workdir: str, notebook: str, theme: str, stored: bool = False) -> tuple[str, dict, int]:
    import nbformat
    nb = nbformat.read(notebook, as_version=4)
    nb.cells.append(nbformat.v4.new_code_cell(ILLUSTRATION_CELL))
    for cell in nb.cells:
        cell.pop("id", None)
    nb.nbformat_minor = 4
    name = "screenshot.ipynb"
    nbformat.write(nb, os.path.join(workdir, name))
    settings = os.path.join(workdir, "settings")
    os.makedirs(os.path.join(settings, "@jupyterlab", "apputils-extension"), exist_ok=True)
    os.makedirs(os.path.join(settings, "@jupyterlab", "notebook-extension"), exist_ok=True)
    with open(os.path.join(settings, "@jupyterlab", "apputils-extension", "themes.jupyterlab-settings"), "w") as f:
        json.dump({"theme": THEMES[theme]}, f)
    with open(os.path.join(settings, "@jupyterlab", "apputils-extension", "notification.jupyterlab-settings"),
              "w") as f:
        json.dump({"fetchNews": "false", "checkForUpdates": False}, f)
    # Render every cell (no windowing), so each output is in the page to be screenshot.
    with open(os.path.join(settings, "@jupyterlab", "notebook-extension", "tracker.jupyterlab-settings"), "w") as f:
        json.dump({"windowingMode": "none"}, f)
    env = dict(os.environ, JUPYTERLAB_SETTINGS_DIR=settings, JUPYTER_RUNTIME_DIR=os.path.join(workdir, "runtime"),
               PYTHONPATH=os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH", "")) if p))
    if stored:      # stored HTML outputs render as in the notebook that made them: trusted, not sanitised
        subprocess.run([sys.executable, "-m", "jupyter", "trust", os.path.join(workdir, name)], env=env,
                       check=True, capture_output=True)
    return name, env, len(nb.cells)


def start_lab(workdir: str, env: dict, port: int, token: str, timeout: float = 240) -> subprocess.Popen:
    cmd = [
        sys.executable,
        "-m",
        "jupyterlab",
        "--no-browser",
        f"--port={port}",
        "--ip=127.0.0.1",
        f"--IdentityProvider.token={token}",
        f"--ServerApp.root_dir={workdir}",
        f"--LabApp.user_settings_dir={env['JUPYTERLAB_SETTINGS_DIR']}",
        "--ServerApp.open_browser=False",
        "--LabApp.news_url=",
        "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
        "--LabApp.expose_app_in_browser=True",
    ] + (["--allow-root"] if hasattr(os, "geteuid") and os.geteuid() == 0 else [])
    log = open(os.path.join(workdir, "lab.log"), "w")
    proc = subprocess.Popen(cmd, cwd=workdir, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/api/status?token={token}"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(url, timeout=2)
            return proc
        except OSError:
            if proc.poll() is not None:
                break
            time.sleep(0.5)
    proc.terminate()
    with open(os.path.join(workdir, "lab.log")) as f:
        raise RuntimeError("JupyterLab did not start:\n" + f.read()[-3000:])


def shoot(page, out: str, port: int, token: str, name: str, cell_count: int, stored: bool = False,
          timeout: float = 240) -> list[str]:
    ms = int(timeout * 1000)    # every wait below: a loaded machine starts a lab and a kernel slowly
    page.goto(f"http://127.0.0.1:{port}/lab/tree/{name}?token={token}", wait_until="domcontentloaded", timeout=ms)
    page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=ms)
    page.wait_for_selector(".jp-Notebook-ExecutionIndicator[data-status='idle']", timeout=ms)
    # every cell in the page before counting them (a loaded machine renders them one by one)
    page.wait_for_function(f"() => document.querySelectorAll('.jp-Notebook .jp-Cell').length >= {cell_count}",
                           timeout=ms, polling=500)
    cells = page.locator(".jp-Notebook .jp-Cell")
    code_cells = page.locator(".jp-Notebook .jp-CodeCell")
    n = code_cells.count()
    if stored:
        # the notebook's stored outputs as they are; only the illustration cell (the last) runs
        cells.last.locator(".jp-InputPrompt").first.click()
        page.keyboard.press("Escape")
        page.keyboard.press("Control+Enter")
        try:
            page.wait_for_function(
                "() => /\\[\\d+\\]/.test([...document.querySelectorAll("
                "'.jp-Notebook .jp-CodeCell .jp-InputPrompt')].pop().textContent)", timeout=ms, polling=1000)
        except Exception as e:
            print(f"screenshot_lab: the illustration cell did not run: {str(e).splitlines()[0]}", file=sys.stderr)
    else:
        # Run every cell the way a person does: select the first, Shift+Enter through them all.
        cells.first.locator(".jp-InputPrompt").first.click()
        page.keyboard.press("Escape")
        for i in range(cells.count()):
            # Shift+Enter on the last cell would add an empty one that never runs
            page.keyboard.press("Shift+Enter" if i < cells.count() - 1 else "Control+Enter")
            time.sleep(0.3)
        # Done when every code cell's prompt holds an execution count: [1]:, [2]: ...
        try:
            page.wait_for_function(
                "() => [...document.querySelectorAll('.jp-Notebook .jp-CodeCell .jp-InputPrompt')]"
                ".every(p => /\\[\\d+\\]/.test(p.textContent))", timeout=ms, polling=1000)
        except Exception as e:      # keep what ran: the screenshots show where it stopped
            print(f"screenshot_lab: not every cell ran: {str(e).splitlines()[0]}", file=sys.stderr)
    time.sleep(3)       # widgets and SVGs settle
    saved = []
    for i in range(n):
        cell = code_cells.nth(i)
        source = cell.locator(".jp-InputArea-editor").inner_text().strip().splitlines()
        what = "".join(ch if ch.isalnum() else "_" for ch in (source[-1] if source else "cell"))[:40]
        outputs = cell.locator(".jp-OutputArea")
        # Open the first-level <details> of the Compilation overview so they are seen too.
        cell.locator(".jp-OutputArea details > summary").evaluate_all(
            "els => els.slice(0, 3).forEach(e => e.parentElement.open = true)")
        path = os.path.join(out, f"{i:02d}_{what}.png")
        cell.evaluate("e => e.scrollIntoView({block: 'start'})")
        time.sleep(0.5)
        box = (outputs if outputs.count() else cell).first.bounding_box()
        view = page.viewport_size
        if box is None or box["height"] < 2:
            continue
        top = max(box["y"], 0)
        clip = {"x": max(box["x"], 0), "y": top, "width": min(box["width"], view["width"] - box["x"]),
                "height": min(box["height"], view["height"] - top - 30)}
        page.screenshot(path=path, clip=clip)
        saved.append(path)
    return saved


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=os.path.join(ROOT, "build", "screenshots"))
    ap.add_argument("--notebook", default=os.path.join(ROOT, "scripts", "lab_demo.ipynb"))
    ap.add_argument("--chromium", default=shutil.which("chromium") or shutil.which("chromium-browser") or "")
    ap.add_argument("--themes", default="light,dark")
    ap.add_argument("--width", type=int, default=1300, help="the browser window's width in px (a laptop's "
                    "JupyterLab with the file browser open gives a notebook about 930)")
    ap.add_argument("--stored", action="store_true", help="shoot the notebook's stored outputs without running "
                    "it (only the illustration cell runs): seconds instead of the notebook's run time")
    ap.add_argument("--timeout", type=float, default=240, help="seconds each step may take (the lab starting, "
                    "the kernel going idle, the cells running); raise it on a loaded machine")
    args = ap.parse_args(argv)
    if not args.chromium:
        print("screenshot_lab: no chromium on PATH (apt-get install chromium)", file=sys.stderr)
        return 2
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        print("screenshot_lab: needs the playwright package (pip install playwright; no browser download)",
              file=sys.stderr)
        return 2
    for theme in args.themes.split(","):
        out = os.path.join(args.out, theme)
        os.makedirs(out, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix="deplokit-lab-") as workdir:
            name, env, cell_count = prepare(workdir, args.notebook, theme, args.stored)
            token = "deplokit-screenshots"
            port = free_port()
            lab = start_lab(workdir, env, port, token, args.timeout)
            try:
                with sync_playwright() as p:
                    # playwright gives every launch a new, empty profile (user data dir)
                    browser = p.chromium.launch(executable_path=args.chromium, headless=True, args=CHROMIUM_FLAGS)
                    page = browser.new_page(viewport={"width": args.width, "height": 2600})
                    page.set_default_timeout(args.timeout * 1000)
                    for path in shoot(page, out, port, token, name, cell_count, args.stored, args.timeout):
                        print(path)
                    page.screenshot(path=os.path.join(out, "page.png"))
                    browser.close()
            finally:
                lab.terminate()
                try:
                    lab.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    lab.kill()
    return 0


if __name__ == "__main__":
    sys.exit(main())
