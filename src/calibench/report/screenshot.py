"""Does the HTML report render? Screenshots in a headless Chromium and checks of what it shows.

:func:`screenshot` loads a page in a headless Chromium and writes the whole page (not only the
first screen) as a PNG; :func:`check_rendered` also checks that every ``<img src>`` names an
existing file (:func:`missing_images`, no browser needed), that the browser decoded every image
(``complete`` and ``naturalWidth > 0`` after the load event) and that the screenshot is not blank.

The browser is driven over the DevTools protocol on a pipe (``--remote-debugging-pipe``: fd 3
carries commands to it, fd 4 its answers, NUL-terminated JSON), so nothing beyond the standard
library and a Chromium binary is needed: Debian's ``chromium-headless-shell`` (or ``chromium``),
Google's Chrome or chrome-headless-shell, or one that Playwright put in its cache. Set
``CALIBENCH_BROWSER`` to a path or a command name to choose one. No Snakemake here.
"""

from __future__ import annotations

import base64
import glob
import json
import os
import select
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

BROWSER_ENV = "CALIBENCH_BROWSER"
# Looked up on PATH in this order; the headless shell first: smaller, no GTK, made for this.
BROWSER_NAMES = ("chromium-headless-shell", "chrome-headless-shell", "headless_shell", "chromium",
                 "chromium-browser", "google-chrome-stable", "google-chrome", "chrome")
# Where `playwright install` leaves its builds (if it could download them).
PLAYWRIGHT_GLOBS = ("~/.cache/ms-playwright/chromium_headless_shell-*/chrome-*/chrome-headless-shell",
                    "~/.cache/ms-playwright/chromium_headless_shell-*/chrome-*/headless_shell",
                    "~/.cache/ms-playwright/chromium-*/chrome-linux*/chrome")
INSTALL_HINT = ("Install one (Debian/Ubuntu: apt-get install chromium-headless-shell, or chromium) "
                f"or set {BROWSER_ENV} to a Chromium/Chrome binary")
# Flags for a closed network and a root user (as on CI): no sandbox, no background
# connections, a fresh profile per run.
CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--no-default-browser-check", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--disable-extensions",
                  "--disable-default-apps", "--mute-audio", "--hide-scrollbars", "--remote-debugging-pipe")
# Taller pages are cut there (Shot.clipped says so). Chromium drew 120,000 px pages here; 60,000
# keeps a 1400 px wide PNG under Pillow's decompression-bomb warning (89.5 Mpx), at ~340 MB of RGBA.
MAX_HEIGHT = 60000


class BrowserNotFound(RuntimeError):
    """No headless browser could be found; the message names what was looked for."""


class RenderError(AssertionError):
    """The page does not render as it should: a missing or undecodable image, a blank screenshot."""


def find_browser() -> Path:
    """The Chromium-family binary to use: $CALIBENCH_BROWSER, then PATH, then Playwright's cache."""
    looked: list[str] = []
    env = os.environ.get(BROWSER_ENV)
    if env:
        found = shutil.which(env) or (env if os.access(env, os.X_OK) and Path(env).is_file() else None)
        if found:
            return Path(found)
        raise BrowserNotFound(f"{BROWSER_ENV}={env!r} is not an executable file or a command on PATH")
    for name in BROWSER_NAMES:
        found = shutil.which(name)
        if found:
            return Path(found)
    looked.append(f"${BROWSER_ENV} (unset)")
    looked.append("on PATH: " + ", ".join(BROWSER_NAMES))
    for pattern in PLAYWRIGHT_GLOBS:
        hits = sorted(glob.glob(os.path.expanduser(pattern)))
        if hits:
            return Path(hits[-1])
    looked.append("Playwright's cache: " + ", ".join(PLAYWRIGHT_GLOBS))
    raise BrowserNotFound("no headless browser found; looked for " + "; ".join(looked) + ". " + INSTALL_HINT)


class _ImgSrc(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.srcs: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "img":
            src = dict(attrs).get("src")
            self.srcs.append(src or "")


def image_sources(html: str | Path) -> list[str]:
    """Every ``<img src>`` of an HTML file, as written (``""`` for an image without one)."""
    parser = _ImgSrc()
    parser.feed(Path(html).read_text(encoding="utf-8", errors="replace"))
    parser.close()
    return parser.srcs


def missing_images(html: str | Path) -> list[tuple[str, Path | None]]:
    """``(src, resolved path)`` of each ``<img>`` whose file does not exist (no browser needed).

    A relative src resolves against the page's folder, as a browser does for a file:// page;
    ``data:`` images count as present and remote (http, https, //) ones are not checked; an
    ``<img>`` without a src is reported with path None.
    """
    base = Path(html).resolve().parent
    missing: list[tuple[str, Path | None]] = []
    for src in image_sources(html):
        parts = urlsplit(src)
        if not src.strip():
            missing.append((src, None))
            continue
        if parts.scheme == "data" or parts.scheme in ("http", "https") or src.startswith("//"):
            continue
        if parts.scheme == "file":
            path = Path(unquote(parts.path))
        elif parts.scheme:  # any other scheme: not a file either
            missing.append((src, None))
            continue
        else:
            path = base / unquote(parts.path)
        if not path.is_file():
            missing.append((src, path))
    return missing


class _Pipe:
    """The DevTools protocol over --remote-debugging-pipe: commands on fd 3, answers on fd 4."""

    def __init__(self, browser: Path, user_data_dir: Path, log: Path, timeout: float,
                 extra_flags: tuple[str, ...] = ()) -> None:
        import fcntl  # POSIX only, like the pipe's fd numbers

        self.timeout = timeout
        self._id = 0
        self._buffer = b""
        self._events: list[dict] = []
        cmd_read, self._cmd_write = os.pipe()
        self._res_read, res_write = os.pipe()

        def child_fds() -> None:  # in the child, before exec: the two pipe ends become fds 3 and 4
            a = fcntl.fcntl(cmd_read, fcntl.F_DUPFD_CLOEXEC, 10)
            b = fcntl.fcntl(res_write, fcntl.F_DUPFD_CLOEXEC, 10)
            os.dup2(a, 3)
            os.dup2(b, 4)

        self._log = open(log, "wb")
        try:
            self.proc = subprocess.Popen(
                [str(browser), *CHROMIUM_FLAGS, *extra_flags, f"--user-data-dir={user_data_dir}", "about:blank"],
                stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT,
                preexec_fn=child_fds, close_fds=False)
        except BaseException:
            for fd in (self._cmd_write, self._res_read):
                os.close(fd)
            self._log.close()
            raise
        finally:
            os.close(cmd_read)
            os.close(res_write)
        self.log_path = log

    def _fail(self, what: str) -> RuntimeError:
        self._log.flush()
        tail = self.log_path.read_text(errors="replace")[-2000:].strip()
        return RuntimeError(f"headless browser: {what}" + (f"\nbrowser output:\n{tail}" if tail else ""))

    def _read_message(self, deadline: float) -> dict:
        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                raise self._fail(f"no answer within {self.timeout:.0f} s")
            ready, _, _ = select.select([self._res_read], [], [], left)
            if not ready:
                continue
            chunk = os.read(self._res_read, 1 << 20)
            if not chunk:
                raise self._fail(f"it closed the pipe (exit code {self.proc.poll()})")
            self._buffer += chunk
        message, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(message)

    def send(self, method: str, params: dict | None = None, session: str | None = None) -> dict:
        self._id += 1
        message = {"id": self._id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        data = json.dumps(message).encode() + b"\0"
        try:
            while data:
                data = data[os.write(self._cmd_write, data):]
        except BrokenPipeError:
            raise self._fail(f"it exited (code {self.proc.poll()}) before {method}") from None
        deadline = time.monotonic() + self.timeout
        while True:
            answer = self._read_message(deadline)
            if answer.get("id") == self._id:
                if "error" in answer:
                    raise self._fail(f"{method} failed: {answer['error']}")
                return answer.get("result", {})
            if "method" in answer:
                self._events.append(answer)

    def wait_event(self, method: str, session: str | None = None) -> dict:
        deadline = time.monotonic() + self.timeout
        while True:
            for i, event in enumerate(self._events):
                if event["method"] == method and (session is None or event.get("sessionId") == session):
                    return self._events.pop(i)
            answer = self._read_message(deadline)
            if "method" in answer:
                self._events.append(answer)

    def close(self) -> None:
        try:
            if self.proc.poll() is None:
                try:
                    self.send("Browser.close")
                except (RuntimeError, OSError):
                    pass
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        finally:
            os.close(self._cmd_write)
            os.close(self._res_read)
            self._log.close()


# After the load event (so every <img> has loaded or failed): the page's full size, each image's
# state, the outermost elements that stick out past the window's right edge (with the heading
# they come under; inside a horizontally scrollable box they do not: it scrolls), and the table
# cells whose text is cut (scrollWidth > clientWidth) or wraps inside a word (a run of
# non-space characters laid out on two lines), before the window grows to the page's height.
_PROBE = """(async () => {
  if (document.fonts) await document.fonts.ready;
  const d = document.documentElement, b = document.body || d, w = window.innerWidth;
  const scrolls = e => {
    for (let n = e.parentElement; n && n !== b; n = n.parentElement) {
      if (/(auto|scroll)/.test(getComputedStyle(n).overflowX)) return true;
    }
    return false;
  };
  const wide = e => e.getBoundingClientRect().right > w + 1 && !scrolls(e);
  const heading = e => {
    for (let n = e; n; n = n.previousElementSibling || n.parentElement) {
      if (/^H[1-6]$/.test(n.tagName)) return n.textContent.trim().slice(0, 80);
    }
    return '';
  };
  const overflow = Array.from(b.querySelectorAll('*'))
    .filter(e => wide(e) && !(e.parentElement && e.parentElement !== b && wide(e.parentElement)))
    .slice(0, 20)
    .map(e => ({tag: e.tagName.toLowerCase(), heading: heading(e), right: Math.ceil(e.getBoundingClientRect().right)}));
  const splitWord = cell => {
    const walk = document.createTreeWalker(cell, NodeFilter.SHOW_TEXT);
    for (let n = walk.nextNode(); n; n = walk.nextNode()) {
      for (const m of n.data.matchAll(/\\S+/g)) {
        const r = document.createRange();
        r.setStart(n, m.index);
        r.setEnd(n, m.index + m[0].length);
        const tops = new Set(Array.from(r.getClientRects(), q => Math.round(q.top)));
        if (tops.size > 1) return m[0];
      }
    }
    return null;
  };
  const cells = [];
  for (const c of b.querySelectorAll('td, th')) {
    const cut = c.scrollWidth > c.clientWidth, word = cut ? null : splitWord(c);
    if (cut || word) cells.push({text: c.textContent.trim().slice(0, 60), heading: heading(c.closest('table') || c),
                                 why: cut ? 'cut' : 'word'});
  }
  return {
    broken_cells: cells.slice(0, 20), n_broken_cells: cells.length,
    width: Math.max(d.scrollWidth, b.scrollWidth),
    height: Math.max(d.scrollHeight, b.scrollHeight, d.offsetHeight, b.offsetHeight),
    images: Array.from(document.images, i => ({src: i.getAttribute('src') || '', complete: i.complete,
                                               naturalWidth: i.naturalWidth, naturalHeight: i.naturalHeight})),
    overflow: overflow,
  };
})()"""


@dataclass
class Shot:
    """What :func:`render` saw: the PNG, the page's full size, each image's load state."""

    png: Path
    page_width: int
    page_height: int
    clipped: bool  # the page was taller than MAX_HEIGHT, so the PNG shows only its top
    images: list[dict] = field(default_factory=list)
    # Outermost elements wider than the window ({tag, heading, right}): cut off at the PNG's right
    # edge, and a horizontal scroll bar for a reader with a window that wide.
    overflow: list[dict] = field(default_factory=list)
    # Table cells ({text, heading, why}: "cut" or "word") whose text is cut off or wraps inside
    # a word (at most 20), and how many there are in all.
    broken_cells: list[dict] = field(default_factory=list)
    n_broken_cells: int = 0

    @property
    def broken_images(self) -> list[str]:
        """src of each <img> the browser could not load or decode."""
        return [i["src"] for i in self.images if not (i["complete"] and i["naturalWidth"] > 0)]


def render(html: str | Path, png: str | Path, width: int = 1400, height: int = 900, *,
           full_page: bool = True, browser: str | Path | None = None, timeout: float = 60.0) -> Shot:
    """Load ``html`` in a headless Chromium and write a PNG screenshot; return what was seen.

    ``width`` x ``height`` is the window; with ``full_page`` the window then grows to the page's
    full height (up to MAX_HEIGHT), so the PNG shows the whole page.
    """
    png = Path(png)
    png.parent.mkdir(parents=True, exist_ok=True)
    with Page(html, width, height, timeout=timeout, browser=browser) as page:
        probe = page.evaluate(_PROBE)
        page_height = int(probe["height"])
        shot_height = min(max(height, page_height), MAX_HEIGHT) if full_page else height
        if shot_height != height:
            page.send("Emulation.setDeviceMetricsOverride",
                      {"width": width, "height": shot_height, "deviceScaleFactor": 1, "mobile": False})
        data = page.send("Page.captureScreenshot", {"format": "png", "fromSurface": True})["data"]
    png.write_bytes(base64.b64decode(data))
    return Shot(png, int(probe["width"]), page_height, full_page and page_height > MAX_HEIGHT, probe["images"],
                probe["overflow"], probe["broken_cells"], int(probe["n_broken_cells"]))


class Page:
    """A page open in a headless Chromium, for checks that act on it (the explorer's tests and
    benchmark): :meth:`evaluate` runs JavaScript (awaiting promises), :meth:`click` is a real
    mouse click at window coordinates; ``console`` holds the console messages and uncaught
    exceptions, ``requests`` every URL the page asked for. Use as a context manager."""

    def __init__(self, html: str | Path, width: int = 1400, height: int = 900, *, timeout: float = 60.0,
                 browser: str | Path | None = None) -> None:
        html = Path(html).resolve()
        if not html.is_file():
            raise FileNotFoundError(f"no such page: {html}")
        if browser:
            found = shutil.which(str(browser))
            if not found:
                raise BrowserNotFound(f"browser {str(browser)!r} is not an executable file or a command on PATH")
            exe = Path(found)
        else:
            exe = find_browser()
        self._tmp = tempfile.TemporaryDirectory(prefix="calibench-page-")
        self._pipe = _Pipe(exe, Path(self._tmp.name) / "profile", Path(self._tmp.name) / "browser.log", timeout,
                           extra_flags=("--enable-unsafe-swiftshader",))  # WebGL on the CPU, as a GPU-less CI has it
        self.console: list[str] = []
        self.requests: list[str] = []
        try:
            targets = self._pipe.send("Target.getTargets")["targetInfos"]
            pages = [t["targetId"] for t in targets if t["type"] == "page"]
            target = pages[0] if pages else self._pipe.send("Target.createTarget", {"url": "about:blank"})["targetId"]
            self._session = self._pipe.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
            for domain in ("Page", "Runtime", "Network", "Log"):
                self.send(f"{domain}.enable")
            self.send("Emulation.setDeviceMetricsOverride",
                       {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False})
            answer = self.send("Page.navigate", {"url": html.as_uri()})
            if answer.get("errorText"):
                raise RuntimeError(f"headless browser could not open {html}: {answer['errorText']}")
            self._pipe.wait_event("Page.loadEventFired", self._session)
        except BaseException:
            self.close()
            raise

    def send(self, method: str, params: dict | None = None) -> dict:
        """One DevTools command to the page (its answer); the events it brought are collected."""
        answer = self._pipe.send(method, params, session=self._session)
        self._collect()
        return answer

    def _collect(self) -> None:
        """Move the console messages, exceptions and requests seen so far into their lists."""
        kept = []
        for event in self._pipe._events:
            method, params = event["method"], event.get("params", {})
            if method == "Runtime.consoleAPICalled":
                self.console.append(f"{params['type']}: " + " ".join(str(a.get("value", a.get("description", "")))
                                                                       for a in params.get("args", [])))
            elif method == "Runtime.exceptionThrown":
                d = params["exceptionDetails"]
                self.console.append("exception: " + d.get("exception", {}).get("description", d.get("text", "")))
            elif method == "Log.entryAdded":
                entry = params["entry"]
                self.console.append(f"{entry['level']}: {entry['text']} {entry.get('url', '')}".strip())
            elif method == "Network.requestWillBeSent":
                self.requests.append(params["request"]["url"])
            else:
                kept.append(event)
        self._pipe._events[:] = kept[-200:]

    def evaluate(self, expression: str):
        """The value of a JavaScript expression (a promise is awaited); an exception raises."""
        answer = self.send("Runtime.evaluate", {"expression": expression, "awaitPromise": True, "returnByValue": True})
        if "exceptionDetails" in answer:
            d = answer["exceptionDetails"]
            raise RuntimeError(f"{expression[:80]}: {d.get('exception', {}).get('description', d.get('text'))}")
        return answer["result"].get("value")

    def wait_for(self, expression: str, timeout: float = 30.0, poll: float = 0.05):
        """Evaluate ``expression`` until it is truthy; its value."""
        deadline = time.monotonic() + timeout
        while True:
            value = self.evaluate(expression)
            if value:
                return value
            if time.monotonic() > deadline:
                raise TimeoutError(f"not true within {timeout:.0f} s: {expression[:120]}\nconsole: {self.console[-5:]}")
            time.sleep(poll)

    def click(self, x: float, y: float) -> None:
        """A left click at window coordinates (press and release, as a mouse gives them)."""
        for kind in ("mouseMoved", "mousePressed", "mouseReleased"):
            button = "none" if kind == "mouseMoved" else "left"
            self.send("Input.dispatchMouseEvent", {"type": kind, "x": x, "y": y, "button": button, "clickCount": 1})

    def close(self) -> None:
        try:
            self._pipe.close()
        finally:
            self._tmp.cleanup()

    def __enter__(self) -> "Page":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def screenshot(html: str | Path, png: str | Path, width: int = 1400, height: int = 900, *,
               full_page: bool = True, browser: str | Path | None = None, timeout: float = 60.0) -> Path:
    """Render ``html`` in a headless Chromium to ``png`` (the full page by default); return ``png``.

    Raises BrowserNotFound (naming what was looked for) where there is no browser.
    """
    return render(html, png, width, height, full_page=full_page, browser=browser, timeout=timeout).png


def distinct_colours(png: str | Path, sample: int = 400) -> int:
    """Distinct RGB colours in the PNG, counted on a thumbnail at most ``sample`` px wide."""
    from PIL import Image  # matplotlib's dependency

    with Image.open(png) as image:
        image = image.convert("RGB")
        if image.width > sample:
            image = image.resize((sample, max(1, round(image.height * sample / image.width))), Image.NEAREST)
        return len(image.getcolors(maxcolors=image.width * image.height) or [])


@dataclass
class RenderCheck:
    """What :func:`check_rendered` found; ``warnings`` are layout problems that do not fail it."""

    png: Path
    page_width: int
    page_height: int
    colours: int
    images: int
    warnings: list[str] = field(default_factory=list)


def check_rendered(html: str | Path, png: str | Path | None = None, *, width: int = 1400,
                   min_colours: int = 8, browser: str | Path | None = None, timeout: float = 60.0) -> RenderCheck:
    """Check that ``html`` renders: its images exist and load, and the screenshot is not blank.

    1. every ``<img src>`` names an existing file (no browser needed; checked first);
    2. a full-page screenshot (to ``png``, default: beside the page, ``<name>.png``) in a headless
       Chromium: every image loaded and decoded (``naturalWidth > 0``), and the PNG has at least
       ``min_colours`` distinct colours (a blank or all-white page has one or two).

    Raises RenderError naming the offending files; BrowserNotFound where there is no browser.
    """
    html = Path(html)
    missing = missing_images(html)
    if missing:
        lines = [f"  {src!r} -> {path if path else '(no file)'}" for src, path in missing]
        raise RenderError(f"{html}: {len(missing)} <img> without a file:\n" + "\n".join(lines))
    png = Path(png) if png else html.with_suffix(".png")
    shot = render(html, png, width, full_page=True, browser=browser, timeout=timeout)
    if shot.broken_images:
        raise RenderError(f"{html}: the browser could not load or decode {len(shot.broken_images)} image(s): "
                          + ", ".join(shot.broken_images))
    colours = distinct_colours(png)
    if colours < min_colours:
        raise RenderError(f"{html}: the screenshot {png} looks blank ({colours} distinct colours, "
                          f"fewer than {min_colours})")
    warnings = []
    if shot.clipped:
        warnings.append(f"the page is {shot.page_height} px tall; the PNG shows its first {MAX_HEIGHT} px")
    for item in shot.overflow:
        where = f" under {item['heading']!r}" if item["heading"] else ""
        warnings.append(f"<{item['tag']}>{where} is wider than the {width} px window (right edge at "
                        f"{item['right']} px): cut off in the PNG")
    if shot.n_broken_cells:
        shown = "; ".join(f"{c['text']!r} ({'cut off' if c['why'] == 'cut' else 'wraps inside a word'}"
                          + (f", under {c['heading']!r})" if c["heading"] else ")") for c in shot.broken_cells)
        warnings.append(f"{shot.n_broken_cells} table cell(s) cut off or wrapped inside a word: {shown}")
    return RenderCheck(png, shot.page_width, shot.page_height, colours, len(shot.images), warnings)
