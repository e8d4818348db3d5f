"""One fleet for the console's tests: an orchestrator (in process, over loopback) in front of the scripted
stand-in worker and a real gateway subprocess over a fixture MCP server and a python tool server, and one
headless Debian Chromium."""

from __future__ import annotations

import contextlib
import re
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.support.expected_conditions import staleness_of
from selenium.webdriver.support.ui import WebDriverWait

from orchestrator.app import create_app
from orchestrator.persist import Stores
from orchestrator.persist.sqlite import SQLiteStores
from orchestrator.settings import OrchestratorSettings
from orchestrator.worker.scripted import Scenario, ScriptedModel
from orchestrator.worker.scripted import build_app as build_worker
from tests.support.asgi import serve_asgi
from tests.support.gateway import GatewayProc, Upstream, fixtures, gateway_config, running_gateway, stop_process
from tests.support.service import Service as ToolService
from tests.support.service import running_service

ADMIN, CLIENT = "adm-" + uuid.uuid4().hex, "sk-client-" + uuid.uuid4().hex
GATEWAY_ADMIN = "gw-admin-" + uuid.uuid4().hex
SHOTS = Path(__file__).resolve().parents[2] / "artifacts" / "console"
CHROMIUM, DRIVER = shutil.which("chromium"), shutil.which("chromedriver")


@dataclass
class Fleet:
    url: str
    model: ScriptedModel
    gateway: GatewayProc
    upstream: Upstream
    python: ToolService  # a real python tool server (local backend): its sessions are the Sessions page's


@contextlib.contextmanager
def orchestrator(worker: str, tools_url: str | None, stores: Stores | None = None, **extra: object) -> Iterator[str]:
    """An orchestrator with a client key and an admin key, its store in memory (or `stores`: replicas may share a
    SQLite file or a Redis)."""
    with tempfile.TemporaryDirectory(prefix="toolfleet-console-") as scratch:
        settings = OrchestratorSettings(
            worker_urls=[worker],
            tools_url=tools_url,
            api_keys=[CLIENT],
            admin_keys=[ADMIN],
            gateway_admin_token=GATEWAY_ADMIN,
            health_interval_s=0.5,
            store_path=f"{scratch}/store.sqlite3",
            files_dir=f"{scratch}/files",
            **extra,
        )
        with serve_asgi(create_app(settings, stores=stores or SQLiteStores())) as url:
            yield url


@pytest.fixture(scope="package")
def fleet() -> Iterator[Fleet]:
    model = ScriptedModel(Scenario())
    with contextlib.ExitStack() as stack:
        worker = stack.enter_context(serve_asgi(build_worker(model)))
        upstream = stack.enter_context(fixtures("v1"))[0]
        python = stack.enter_context(
            running_service(["-m", "tools.python_sandbox", "--backend", "local", "--drain-s", "0"])
        )
        namespaces = {"fixture": [upstream.url], "python": [f"{python.url}/mcp"]}
        cfg = gateway_config(namespaces, security={"admin_tokens": [GATEWAY_ADMIN]})
        gateway = stack.enter_context(running_gateway(cfg))
        url = stack.enter_context(orchestrator(worker, gateway.base))
        fleet = Fleet(url, model, gateway, upstream, python)
        stack.callback(lambda: stop_process(fleet.upstream.proc))  # the replacement a test may have started
        yield fleet


@pytest.fixture(scope="package")
def browser() -> Iterator[webdriver.Chrome]:
    """Debian's chromium through chromium-driver, headless; nothing is downloaded (both paths are given)."""
    if CHROMIUM is None or DRIVER is None:
        pytest.fail("install Debian's chromium and chromium-driver (deploy/setup-host.sh)")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1280,900"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})  # the console's messages: CSP refusals, errors
    with tempfile.TemporaryDirectory(prefix="toolfleet-chromium-") as profile:
        options.add_argument(f"--user-data-dir={profile}")
        driver = webdriver.Chrome(options=options, service=Service(executable_path=DRIVER))
        try:
            yield driver
        finally:
            driver.quit()


def log_in(driver: webdriver.Chrome, base: str, key: str) -> None:
    """The login form filled and sent as an operator would."""
    driver.delete_all_cookies()
    driver.get(f"{base}/console/login")
    driver.find_element("id", "key").send_keys(key)
    click(driver, "main form button[type=submit]")


def click(driver: webdriver.Chrome, selector: str) -> None:
    """Click a form's button and wait for the answer page to replace this one."""
    button = driver.find_element("css selector", selector)
    button.click()
    WebDriverWait(driver, 20).until(staleness_of(button))


def shot(driver: webdriver.Chrome, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    driver.save_screenshot(str(SHOTS / f"{name}.png"))


def session_client(driver: webdriver.Chrome, base: str) -> httpx.Client:
    """An HTTP client holding the browser's session cookie, for requests a form would not send."""
    cookies = {c["name"]: c["value"] for c in driver.get_cookies()}
    return httpx.Client(base_url=base, cookies=cookies, trust_env=False, timeout=30)


def csrf_of(html: str) -> str:
    found = re.search(r'name="csrf" value="([0-9a-f]+)"', html)
    assert found, "the page has no CSRF token"
    return found.group(1)


@contextlib.contextmanager
def admin_client(base: str) -> Iterator[httpx.Client]:
    """An HTTP client logged in to the console at `base` with the admin key (the login form's nonce and all)."""
    with httpx.Client(base_url=base, trust_env=False, timeout=30) as http:
        login = http.post("/console/login", data={"csrf": csrf_of(http.get("/console/login").text), "key": ADMIN})
        assert login.status_code == 303, login.text
        yield http
