"""A real browser for the UI's tests: Debian's Chromium (``/usr/bin/chromium``), driven by
Playwright, which downloads no browser of its own.

Chromium runs in a network namespace of its own, with loopback alone. Other test workers add
and remove bridges and veths in this machine's namespace all the time, and Chromium aborts a
request under way when an address changes there (``ERR_NETWORK_CHANGED``), which failed a
form post now and then. Its namespace never changes; each server port a page asks for is
forwarded from that namespace's loopback to this one's (:class:`LoopbackBridge`).

Screenshots go to ``test-artifacts/ui/`` at the repository's top (``PRIMUS_TEST_ARTIFACTS``
elsewhere), kept after the run.
"""

from __future__ import annotations

import ctypes
import os
import socket
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from playwright.sync_api import Browser, BrowserContext, Page, Route, sync_playwright

from tests.support.primus import REPO

CHROMIUM = Path(os.environ.get("PRIMUS_TEST_CHROMIUM", "/usr/bin/chromium"))
ARTIFACTS = Path(os.environ.get("PRIMUS_TEST_ARTIFACTS", REPO / "test-artifacts")) / "ui"
# Chromium on a machine with no way out: no background connections, no sandbox as root.
FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage"]
CLONE_NEWNET = 0x40000000


class LoopbackBridge:
    """A network namespace with loopback alone, and TCP ports of its 127.0.0.1 forwarded to the
    same ports of this namespace's 127.0.0.1.

    A listening socket belongs to the namespace of the thread that made it: one thread enters
    the namespace (``setns`` changes the calling thread's alone) to make each listener, while
    the connections onward are made from this namespace."""

    def __init__(self, name: str):
        self.name = name
        self._forwarded: set[int] = set()
        self._lock = threading.Lock()
        subprocess.run(["ip", "netns", "add", name], check=True, capture_output=True)
        subprocess.run(["ip", "netns", "exec", name, "ip", "link", "set", "lo", "up"],
                       check=True, capture_output=True)

    def wrap(self, executable: Path, directory: Path) -> Path:
        """A script that runs ``executable`` in the namespace, for Playwright to launch."""
        script = directory / f"{executable.name}-in-{self.name}"
        script.write_text(f'#!/bin/sh\nexec ip netns exec {self.name} {executable} "$@"\n')
        script.chmod(0o755)
        return script

    def forward(self, port: int) -> None:
        """Make ``127.0.0.1:port`` in the namespace reach ``127.0.0.1:port`` here (once)."""
        with self._lock:
            if port in self._forwarded:
                return
            made: list[socket.socket | BaseException] = []
            entering = threading.Thread(target=self._listen, args=(port, made))
            entering.start()
            entering.join()
            if isinstance(made[0], BaseException):
                raise made[0]
            self._forwarded.add(port)
        threading.Thread(target=self._accept, args=(made[0], port), daemon=True).start()

    def _listen(self, port: int, made: list) -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        try:
            with open(f"/run/netns/{self.name}") as namespace:
                if libc.setns(namespace.fileno(), CLONE_NEWNET) != 0:
                    raise OSError(ctypes.get_errno(), f"setns into {self.name}")
            listener = socket.create_server(("127.0.0.1", port))
            made.append(listener)
        except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
            made.append(exc)
        # The thread ends here, in the namespace; the listener stays in it.

    def _accept(self, listener: socket.socket, port: int) -> None:
        while True:
            try:
                inner, _ = listener.accept()
            except OSError:
                return
            try:
                outer = socket.create_connection(("127.0.0.1", port), timeout=10)
            except OSError:
                inner.close()
                continue
            outer.settimeout(None)
            for source, sink in ((inner, outer), (outer, inner)):
                threading.Thread(target=_pump, args=(source, sink), daemon=True).start()

    def close(self) -> None:
        subprocess.run(["ip", "netns", "del", self.name], capture_output=True)


def _pump(source: socket.socket, sink: socket.socket) -> None:
    """Copy ``source`` to ``sink`` until either closes; then half-close ``sink``."""
    try:
        while chunk := source.recv(65536):
            sink.sendall(chunk)
        sink.shutdown(socket.SHUT_WR)
    except OSError:
        for end in (source, sink):
            end.close()


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Browser]:
    """One headless Chromium per test module, in a network namespace of its own (the module's
    docstring says why); a missing Chromium fails the tests using it.

    Not per session: Playwright's synchronous API keeps an event loop running in the main
    thread while it is open, and the asyncio tests that come after would find it there."""
    assert CHROMIUM.exists(), (f"{CHROMIUM} is missing: the UI's tests need Debian's chromium "
                               f"(scripts/bootstrap --test installs it)")
    bridge = LoopbackBridge(f"pbrowser{os.getpid()}")
    try:
        executable = bridge.wrap(CHROMIUM, tmp_path_factory.mktemp("browser"))
        with sync_playwright() as playwright:
            launched = playwright.chromium.launch(executable_path=str(executable), args=FLAGS)
            launched.loopback_bridge = bridge  # type: ignore[attr-defined]
            yield launched
            launched.close()
    finally:
        bridge.close()


@pytest.fixture
def context(browser: Browser) -> Iterator[BrowserContext]:
    """A fresh browser profile (no cookies) for one test; certificates of the test CA are
    accepted. Each request's port is forwarded into the browser's namespace before it goes."""
    bridge: LoopbackBridge = browser.loopback_bridge  # type: ignore[attr-defined]
    made = browser.new_context(ignore_https_errors=True, viewport={"width": 1366, "height": 860})
    made.set_default_timeout(15_000)

    def reach(route: Route) -> None:
        address = urlsplit(route.request.url)
        if address.hostname == "127.0.0.1" and address.port:
            bridge.forward(address.port)
        route.continue_()

    made.route("**/*", reach)
    yield made
    made.close()


@pytest.fixture
def page(context: BrowserContext) -> Page:
    """A tab of :func:`context`."""
    return context.new_page()


def screenshot(page: Page, name: str) -> Path:
    """Save the whole page as ``<artifacts>/ui/<name>.png``; return the file."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path
